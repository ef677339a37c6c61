//===- SessionTest.cpp - CpuModule, CpuExecutable and Session end to end -===//
//
// Runs toy_model.c (a shared object built with the tests that implements the
// CPU ABI of docs/runtime-abi.md) through the runtime and compares with the
// toy recurrence computed independently in double precision.
//
//===----------------------------------------------------------------------===//

#include "toy_artifact.h"
#include "toy_model_config.h"

#include "runtime/artifact/reader.h"
#include "runtime/artifact/writer.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/cpu/cpu_module.h"
#include "runtime/cpu/entry_call.h"
#include "runtime/cpu/memref.h"
#include "runtime/session/session.h"
#include "runtime/weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>

using namespace kimi::rt;

namespace {

constexpr int64_t V = TOY_VOCAB;

class ToySession : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new toy::TempDir("session");
    weightsPath_ = new std::string(dir_->path() + "/toy.safetensors");
    ASSERT_TRUE(toy::writeWeights(*weightsPath_).isOk());
  }
  static void TearDownTestSuite() {
    delete weightsPath_;
    delete dir_;
  }

  /// The toy artifact after a trip through writer and reader.
  static std::shared_ptr<const ArtifactSpec>
  artifact(const std::string &decode = "kimi_entry_decode") {
    auto bytes = ArtifactWriter(toy::artifact(decode)).finish();
    EXPECT_TRUE(bytes.isOk()) << bytes.status().message();
    auto spec = ArtifactReader::readBytes(bytes->data(), bytes->size());
    EXPECT_TRUE(spec.isOk()) << spec.status().message();
    return std::make_shared<const ArtifactSpec>(std::move(spec.value()));
  }

  static StatusOr<std::shared_ptr<CpuExecutable>>
  executable(std::shared_ptr<const ArtifactSpec> spec) {
    auto loader = WeightLoader::open({*weightsPath_});
    EXPECT_TRUE(loader.isOk()) << loader.status().message();
    return CpuExecutable::create(std::move(spec), *loader.value());
  }

  static std::unique_ptr<Session> session(const std::string &decode = "kimi_entry_decode") {
    auto exe = executable(artifact(decode));
    EXPECT_TRUE(exe.isOk()) << exe.status().message();
    auto s = Session::create(exe.value());
    EXPECT_TRUE(s.isOk()) << s.status().message();
    return std::move(s.value());
  }

  static void expectRow(const float *got, const std::vector<double> &want,
                        const std::string &label) {
    for (int64_t v = 0; v < V; ++v)
      EXPECT_NEAR(got[v], want[v], 1e-4 * (1.0 + std::fabs(want[v])))
          << label << " vocab " << v;
  }

  static toy::TempDir *dir_;
  static std::string *weightsPath_;
};
toy::TempDir *ToySession::dir_ = nullptr;
std::string *ToySession::weightsPath_ = nullptr;

} // namespace

TEST(CpuModule, LoadsAndResolvesSymbols) {
  auto module = CpuModule::load(toy::sharedObject(), "toy_model.so");
  ASSERT_TRUE(module.isOk()) << module.status().message();
  auto sym = module.value()->symbol("kimi_w_0");
  ASSERT_TRUE(sym.isOk());
  EXPECT_EQ(module.value()->symbolSize(sym.value()), V * TOY_HIDDEN * 4);
  auto missing = module.value()->symbol("kimi_w_77");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().message(),
            "symbol 'kimi_w_77' not found in shared object 'toy_model.so'");
}

TEST(CpuModule, TwoLoadsHaveSeparateGlobals) {
  auto a = CpuModule::load(toy::sharedObject(), "a");
  auto b = CpuModule::load(toy::sharedObject(), "b");
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_NE(a.value()->symbol("kimi_w_1").value(), b.value()->symbol("kimi_w_1").value());
}

TEST(CpuModule, BadImagesAreErrors) {
  auto notElf = CpuModule::load(std::vector<uint8_t>(100, 7), "junk.so");
  ASSERT_FALSE(notElf.isOk());
  EXPECT_NE(notElf.status().message().find("shared object 'junk.so' is not an ELF file"),
            std::string::npos);
  std::vector<uint8_t> broken = toy::sharedObject();
  broken.resize(200); // ELF magic, truncated body
  auto truncated = CpuModule::load(broken, "broken.so");
  ASSERT_FALSE(truncated.isOk());
  EXPECT_NE(truncated.status().message().find("cannot load shared object 'broken.so'"),
            std::string::npos);
}

namespace {
/// A packed entry that records what it was called with.
void sumPacked(void **args) {
  uint64_t *results = static_cast<uint64_t *>(args[0]);
  uint64_t n = results[0], sum = 0, weighted = 0;
  for (uint64_t i = 0; i < n; ++i) {
    sum += reinterpret_cast<uint64_t>(args[1 + i]);
    weighted += (i + 1) * reinterpret_cast<uint64_t>(args[1 + i]);
  }
  results[1] = sum;
  results[2] = weighted;
}
} // namespace

TEST(EntryCall, PassesResultsAndEveryArgumentInOrder) {
  for (size_t n : {0, 1, 7, 129, 2000}) {
    std::vector<void *> args;
    uint64_t sum = 0, weighted = 0;
    for (size_t i = 0; i < n; ++i) {
      args.push_back(reinterpret_cast<void *>(1000 + 7 * i));
      sum += 1000 + 7 * i;
      weighted += (i + 1) * (1000 + 7 * i);
    }
    uint64_t results[3] = {n, 0, 0};
    ASSERT_TRUE(callEntry(reinterpret_cast<void *>(&sumPacked), results, args).isOk());
    EXPECT_EQ(results[1], sum) << n << " arguments";
    EXPECT_EQ(results[2], weighted) << n << " arguments";
  }
  uint64_t results[3];
  EXPECT_FALSE(callEntry(nullptr, results, {}).isOk());
}

TEST(MemRef, DescriptorLayoutAndStridedCopy) {
  MemRefStruct s({0, 1, 3});
  EXPECT_EQ(s.bytes(), (3 + 5 + 9) * 8u);
  float data[24];
  for (int i = 0; i < 24; ++i)
    data[i] = static_cast<float>(i);
  s.setContiguous(2, data, {2, 3, 4});
  MemRefView v = s.view(2);
  EXPECT_EQ(v.aligned(), data);
  EXPECT_EQ(v.sizes(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.stride(2), 1);
  EXPECT_TRUE(v.isContiguous());
  // A transposed view: [4, 3] with strides [1, 4] over the first 12 values.
  uint64_t words[3 + 4] = {reinterpret_cast<uint64_t>(data), reinterpret_cast<uint64_t>(data),
                           0, 4, 3, 1, 4};
  MemRefView t(words, 2);
  EXPECT_FALSE(t.isContiguous());
  float out[12];
  copyStrided(t, 4, reinterpret_cast<uint8_t *>(out));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(out[i * 3 + j], data[j * 4 + i]);
}

TEST_F(ToySession, PrefillLogitsMatchTheReference) {
  auto s = session();
  std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  auto logits = s->prefill(tokens);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  ASSERT_EQ(logits->rows, 8);
  ASSERT_EQ(logits->vocab, V);
  auto ref = toy::referenceLogits(tokens);
  for (size_t t = 0; t < tokens.size(); ++t)
    expectRow(logits->data + t * V, ref[t], "position " + std::to_string(t));
  EXPECT_EQ(s->length(), 8);
}

TEST_F(ToySession, PrefillOfTheLastRowsOnlyReturnsTheLastRow) {
  auto s = session();
  std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  auto logits = s->prefill(tokens, PrefillLogits::kLast);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  ASSERT_EQ(logits->rows, 1);
  expectRow(logits->data, toy::referenceLogits(tokens).back(), "last row");
  EXPECT_EQ(s->length(), 8);
  EXPECT_EQ(s->logits().rows, 1);
  auto next = s->decodeStep(5);
  ASSERT_TRUE(next.isOk()) << next.status().message();
  tokens.push_back(5);
  expectRow(next->data, toy::referenceLogits(tokens).back(), "decode after it");
}

TEST_F(ToySession, PrefillThenDecodeEqualsLongerPrefill) {
  const std::vector<int32_t> all = {7, 0, 15, 3, 3, 8, 11, 2, 5, 14};
  for (size_t n = 1; n < all.size(); ++n) {
    auto s = session();
    std::vector<int32_t> head(all.begin(), all.begin() + n);
    ASSERT_TRUE(s->prefill(head).isOk());
    std::vector<std::vector<float>> decoded;
    for (size_t m = n; m < all.size(); ++m) {
      auto l = s->decodeStep(all[m]);
      ASSERT_TRUE(l.isOk()) << l.status().message();
      ASSERT_EQ(l->rows, 1);
      decoded.emplace_back(l->data, l->data + V);
    }
    auto whole = session();
    auto l = whole->prefill(all);
    ASSERT_TRUE(l.isOk());
    for (size_t m = n; m < all.size(); ++m)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(decoded[m - n][v], l->data[m * V + v], 1e-5) << n << "+" << m;
    auto ref = toy::referenceLogits(all);
    expectRow(decoded.back().data(), ref.back(), "decoded last");
    EXPECT_EQ(s->length(), static_cast<int64_t>(all.size()));
  }
}

TEST_F(ToySession, TokenIdsAreValidatedBeforeAnyCall) {
  auto s = session();
  auto bad = s->prefill(std::vector<int32_t>{1, 16, 2});
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(),
            "token id 16 at position 1 is outside the vocabulary [0, 16)");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto before = s->decodeStep(1);
  ASSERT_FALSE(before.isOk());
  EXPECT_EQ(before.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(s->prefill(nullptr, 0).isOk());

  ASSERT_TRUE(s->prefill(std::vector<int32_t>{1, 2}).isOk());
  auto negative = s->decodeStep(-5);
  ASSERT_FALSE(negative.isOk());
  EXPECT_NE(negative.status().message().find("token id -5"), std::string::npos);
  // Nothing was lost: the sequence continues as if the bad call never happened.
  EXPECT_EQ(s->length(), 2);
  auto ok = s->decodeStep(3);
  ASSERT_TRUE(ok.isOk());
  expectRow(ok->data, toy::referenceLogits({1, 2, 3}).back(), "after error");
}

TEST_F(ToySession, MaxPositionsIsEnforced) {
  auto s = session();
  std::vector<int32_t> tooLong(65, 1); // max_position_embeddings = 64
  auto r = s->prefill(tooLong);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("exceeds max_position_embeddings 64"),
            std::string::npos);
  std::vector<int32_t> full(64, 2);
  ASSERT_TRUE(s->prefill(full).isOk());
  EXPECT_FALSE(s->decodeStep(1).isOk());
}

TEST_F(ToySession, SaveAndRestoreForPrefixReuse) {
  auto s = session();
  const std::vector<int32_t> prefix = {4, 4, 2};
  ASSERT_TRUE(s->prefill(prefix).isOk());
  auto snap = s->saveState();
  ASSERT_TRUE(snap.isOk());
  EXPECT_EQ(snap->length, 3);
  EXPECT_EQ(snap->bytes(), (TOY_HIDDEN + 1) * 4 + 3 * TOY_HIDDEN * 4 + V * 4);

  std::vector<std::vector<float>> first;
  for (int32_t t : {9, 10, 11}) {
    auto l = s->decodeStep(t);
    ASSERT_TRUE(l.isOk());
    first.emplace_back(l->data, l->data + V);
  }
  // Back to the prefix in the same session: same continuation.
  ASSERT_TRUE(s->restoreState(snap.value()).isOk());
  EXPECT_EQ(s->length(), 3);
  auto last = s->logits();
  ASSERT_EQ(last.rows, 1);
  expectRow(last.data, toy::referenceLogits(prefix).back(), "restored logits");
  size_t i = 0;
  for (int32_t t : {9, 10, 11}) {
    auto l = s->decodeStep(t);
    ASSERT_TRUE(l.isOk());
    for (int64_t v = 0; v < V; ++v)
      EXPECT_EQ(l->data[v], first[i][v]);
    ++i;
  }
  // A different continuation, then into a second session of the same artifact.
  ASSERT_TRUE(s->restoreState(snap.value()).isOk());
  auto other = s->decodeStep(0);
  ASSERT_TRUE(other.isOk());
  expectRow(other->data, toy::referenceLogits({4, 4, 2, 0}).back(), "other branch");
  auto s2 = session();
  ASSERT_TRUE(s2->restoreState(snap.value()).isOk());
  auto l2 = s2->decodeStep(9);
  ASSERT_TRUE(l2.isOk());
  for (int64_t v = 0; v < V; ++v)
    EXPECT_EQ(l2->data[v], first[0][v]);

  // A snapshot that does not fit is refused and changes nothing.
  SessionSnapshot broken = snap.value();
  std::vector<int64_t> short_ = broken.tensors[1]->shape();
  short_[1] -= 1; // one cache row missing
  broken.tensors[1] = std::make_shared<HostCarriedTensor>(
      HostTensor{DType::kF32, short_,
                 HostBuffer::allocate(TOY_HIDDEN * 4 * 2).value()});
  Status refused = s2->restoreState(broken);
  EXPECT_FALSE(refused.isOk());
  EXPECT_NE(refused.message().find("[1, 2, "), std::string::npos)
      << refused.message();
  EXPECT_EQ(s2->length(), 4);
  EXPECT_FALSE(session()->saveState().isOk()); // nothing to save yet
}

TEST_F(ToySession, Counters) {
  auto s = session();
  ASSERT_TRUE(s->prefill(std::vector<int32_t>{1, 2, 3, 4}).isOk());
  const int64_t states = (TOY_HIDDEN + 1) * 4, row = TOY_HIDDEN * 4, logits = V * 4;
  EXPECT_EQ(s->counters().currentBytes, states + 4 * row + 4 * logits);
  ASSERT_TRUE(s->decodeStep(5).isOk());
  ASSERT_TRUE(s->decodeStep(6).isOk());
  const SessionCounters &c = s->counters();
  EXPECT_EQ(c.prefillCalls, 1);
  EXPECT_EQ(c.prefillTokens, 4);
  EXPECT_EQ(c.decodeCalls, 2);
  EXPECT_EQ(c.decodeTokens, 2);
  EXPECT_GT(c.prefillSeconds, 0.0);
  EXPECT_GT(c.decodeSeconds, 0.0);
  EXPECT_EQ(c.currentBytes, states + 6 * row + logits);
  EXPECT_EQ(c.peakBytes, states + 6 * row + logits);
  // Restoring a short prefix lowers the current bytes, not the peak.
  ASSERT_TRUE(s->prefill(std::vector<int32_t>{1}).isOk());
  EXPECT_EQ(s->counters().currentBytes, states + row + logits);
  EXPECT_EQ(s->counters().peakBytes, states + 6 * row + logits);
}

TEST_F(ToySession, SharedExecutableServesSeveralSessions) {
  auto exe = executable(artifact());
  ASSERT_TRUE(exe.isOk());
  auto a = Session::create(exe.value());
  auto b = Session::create(exe.value());
  ASSERT_TRUE(a.isOk() && b.isOk());
  ASSERT_TRUE(a.value()->prefill(std::vector<int32_t>{1, 2}).isOk());
  ASSERT_TRUE(b.value()->prefill(std::vector<int32_t>{3}).isOk());
  auto la = a.value()->decodeStep(3);
  ASSERT_TRUE(la.isOk());
  expectRow(la->data, toy::referenceLogits({1, 2, 3}).back(), "session a");
  auto lb = b.value()->logits();
  expectRow(lb.data, toy::referenceLogits({3}).back(), "session b");
}

TEST_F(ToySession, ReturnedShapeMismatchIsAnErrorAndLosesNothing) {
  auto s = session("kimi_entry_decode_bad_shape");
  ASSERT_TRUE(s->prefill(std::vector<int32_t>{1, 2}).isOk());
  auto r = s->decodeStep(3);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kExecution);
  EXPECT_EQ(r.status().message(),
            "entry 'decode': output 0 'logits': returned shape [1, 1, 17], expected "
            "[1, 1, 16]");
  EXPECT_EQ(s->length(), 2);
  EXPECT_EQ(s->logits().rows, 2);
}

TEST_F(ToySession, OutputAliasingAnInputIsCopiedNotFreed) {
  auto s = session("kimi_entry_decode_alias_state");
  ASSERT_TRUE(s->prefill(std::vector<int32_t>{1, 2}).isOk());
  auto before = s->saveState();
  ASSERT_TRUE(before.isOk());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(s->decodeStep(3).isOk());
  auto after = s->saveState();
  ASSERT_TRUE(after.isOk());
  // The state never changes in this variant; it was copied, not double-freed.
  const HostTensor &x = *before->tensors[0]->host(),
                   &y = *after->tensors[0]->host();
  ASSERT_EQ(x.bytes(), y.bytes());
  EXPECT_EQ(std::vector<uint8_t>(x.data(), x.data() + x.bytes()),
            std::vector<uint8_t>(y.data(), y.data() + y.bytes()));
}

TEST_F(ToySession, MissingSymbolsAreNamed) {
  ArtifactSpec spec = toy::artifact();
  spec.weights[2].symbol = "kimi_w_9";
  auto exe = executable(std::make_shared<const ArtifactSpec>(spec));
  ASSERT_FALSE(exe.isOk());
  EXPECT_EQ(exe.status().message(),
            "weight 2 'lm_head.weight': symbol 'kimi_w_9' not found in shared object "
            "'toy_model.so'");

  spec = toy::artifact("kimi_entry_decode_v2");
  exe = executable(std::make_shared<const ArtifactSpec>(spec));
  ASSERT_FALSE(exe.isOk());
  EXPECT_EQ(exe.status().code(), StatusCode::kModule);
  EXPECT_NE(exe.status().message().find("entry 'decode': symbol 'kimi_entry_decode_v2'"),
            std::string::npos);
}

TEST_F(ToySession, WeightSymbolSizeIsChecked) {
  ArtifactSpec spec = toy::artifact();
  spec.weights[1].shape = {TOY_HIDDEN * 2}; // the global holds D floats
  auto exe = executable(std::make_shared<const ArtifactSpec>(spec));
  ASSERT_FALSE(exe.isOk());
  EXPECT_NE(exe.status().message().find("symbol 'kimi_w_1' holds 128 bytes but f32 [64] "
                                        "needs 256"),
            std::string::npos)
      << exe.status().message();
}

TEST_F(ToySession, MissingWeightIsNamed) {
  ArtifactSpec spec = toy::artifact();
  spec.weights[0].name = "model.embed.weight";
  auto exe = executable(std::make_shared<const ArtifactSpec>(spec));
  ASSERT_FALSE(exe.isOk());
  EXPECT_NE(exe.status().message().find("weight 'model.embed.weight' not found"),
            std::string::npos);
}

namespace {
/// The toy CPU executable behind an executable that updates donated states
/// in place, as a GPU model's graph replays do: it writes each donated
/// state's new value over the input's bytes and returns a tensor sharing
/// them. It records what each call donated and can fail the next cache
/// append (out of memory).
class InPlaceExecutable final : public Executable {
public:
  explicit InPlaceExecutable(std::shared_ptr<Executable> inner)
      : inner_(std::move(inner)) {}
  const ArtifactSpec &artifact() const override { return inner_->artifact(); }
  Status run(const std::string &entry,
             const std::vector<const HostTensor *> &inputs, int64_t tokens,
             std::vector<HostTensor> &outputs) const override {
    return inner_->run(entry, inputs, tokens, outputs);
  }
  Status runCarried(const std::string &entry,
                    const std::vector<const CarriedTensor *> &inputs,
                    int64_t tokens, const std::vector<bool> &keep,
                    const std::vector<bool> &donated,
                    std::vector<CarriedRef> &outputs) const override {
    KIMI_RETURN_IF_ERROR(
        inner_->runCarried(entry, inputs, tokens, keep, donated, outputs));
    const EntrySpec *e = artifact().findEntry(entry);
    std::vector<bool> given(inputs.size(), false);
    for (size_t i = 0; i < donated.size() && i < inputs.size(); ++i) {
      if (!donated[i])
        continue;
      given[i] = true;
      for (size_t o = 0; o < e->outputs.size(); ++o) {
        if (e->outputs[o].name != e->inputs[i].name)
          continue;
        const HostTensor *in = inputs[i]->host();
        std::memcpy(in->buffer.data, outputs[o]->host()->data(), in->bytes());
        outputs[o] = std::make_shared<HostCarriedTensor>(*in);
      }
    }
    calls.push_back(given);
    return Status::ok();
  }
  StatusOr<CarriedRef> appendRows(const CarriedRef &cache, const CarriedRef &rows,
                                  int64_t batch) const override {
    if (failAppend) {
      failAppend = false;
      return executionError("out of memory appending cache rows");
    }
    return inner_->appendRows(cache, rows, batch);
  }
  int64_t weightBytes() const override { return inner_->weightBytes(); }
  double weightLoadSeconds() const override { return inner_->weightLoadSeconds(); }
  std::string deviceName() const override { return "in-place " + inner_->deviceName(); }

  mutable std::vector<std::vector<bool>> calls; // donated, per call
  mutable bool failAppend = false;

private:
  std::shared_ptr<Executable> inner_;
};
} // namespace

TEST_F(ToySession, OnlyStatesTheSessionAloneHoldsAreDonated) {
  auto inner = executable(artifact());
  ASSERT_TRUE(inner.isOk());
  auto exe = std::make_shared<InPlaceExecutable>(inner.value());
  auto s = Session::create(exe);
  ASSERT_TRUE(s.isOk());
  Session &session = *s.value();
  const EntrySpec *decode = exe->artifact().findEntry("decode");
  ASSERT_TRUE(session.prefill(std::vector<int32_t>{3, 1, 4}).isOk());
  exe->calls.clear(); // the prefill's call, from zero state
  ASSERT_TRUE(session.decodeStep(1).isOk());
  // The states are donated; tokens and caches never are.
  ASSERT_EQ(exe->calls.size(), 1u);
  for (size_t i = 0; i < decode->inputs.size(); ++i)
    EXPECT_EQ(exe->calls[0][i], decode->inputs[i].role == TensorRole::kState)
        << decode->inputs[i].name;

  // A snapshot holds the states: the next step donates nothing, so the
  // snapshot's continuation is still the reference one.
  auto snap = session.saveState();
  ASSERT_TRUE(snap.isOk());
  ASSERT_TRUE(session.decodeStep(5).isOk());
  for (bool d : exe->calls.back())
    EXPECT_FALSE(d);
  ASSERT_TRUE(session.decodeStep(9).isOk()); // the new states are its own
  EXPECT_TRUE(exe->calls.back()[1]);
  ASSERT_TRUE(session.restoreState(snap.value()).isOk());
  auto branch = session.decodeStep(2);
  ASSERT_TRUE(branch.isOk());
  expectRow(branch->data, toy::referenceLogits({3, 1, 4, 1, 2}).back(),
            "continued from the snapshot");

  // A cache append that fails after donated states were updated in place
  // loses the sequence, and says so; a snapshot brings it back.
  auto snap2 = session.saveState();
  ASSERT_TRUE(snap2.isOk());
  ASSERT_TRUE(session.decodeStep(6).isOk()); // not donated (snap2), own states
  exe->failAppend = true;
  auto lost = session.decodeStep(5);
  ASSERT_FALSE(lost.isOk());
  EXPECT_TRUE(exe->calls.back()[1]);
  EXPECT_NE(lost.status().message().find("the sequence is lost"), std::string::npos)
      << lost.status().message();
  EXPECT_NE(lost.status().message().find("out of memory"), std::string::npos);
  EXPECT_FALSE(session.decodeStep(5).isOk()); // no sequence until restored
  ASSERT_TRUE(session.restoreState(snap2.value()).isOk());
  auto again = session.decodeStep(6);
  ASSERT_TRUE(again.isOk());
  expectRow(again->data, toy::referenceLogits({3, 1, 4, 1, 2, 6}).back(),
            "restored after the lost step");

  // Without donation (a snapshot holds the states) the same failure leaves
  // the session as it was.
  auto snap3 = session.saveState();
  ASSERT_TRUE(snap3.isOk());
  exe->failAppend = true;
  ASSERT_FALSE(session.decodeStep(8).isOk());
  EXPECT_FALSE(exe->calls.back()[1]);
  EXPECT_EQ(session.length(), 6);
  auto kept = session.decodeStep(8);
  ASSERT_TRUE(kept.isOk());
  expectRow(kept->data, toy::referenceLogits({3, 1, 4, 1, 2, 6, 8}).back(),
            "after a failure without donation");
}

//===- ReleasedCheckpointTest.cpp - released layouts load and compute -----===//
//
// The path of a user with a downloaded checkpoint: kimi-checkpoint wrote a
// verbatim-style config.json for a tiny Kimi-Linear-layout and a tiny
// K3-layout model at build time and kimi-compile compiled that file as
// written. Each run writes fresh random weights in the released layout
// (shards + index, `language_model.` / `block_sparse_moe` names, A_log as
// [1,1,H,1] or zero-padded [128], bf16 and f32 as released, MXFP4 experts
// packed as released), loads them through the index and compares every
// logit with the float64 reference computing on exactly the stored values.
// Then each mutation of the layout must give one error naming the tensor or
// file, and load nothing.
//
//===----------------------------------------------------------------------===//

#include "models/checkpoint/ReleasedCheckpoint.h"
#include "runtime/artifact/reader.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/session/session.h"
#include "runtime/weights/checkpoint.h"
#include "runtime/weights/weight_loader.h"
#include "test/reference/RandomWeights.h"
#include "test/reference/ReferenceModel.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "gtest/gtest.h"
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

using namespace kimi;
using namespace kimi::rt;

namespace {

struct LayoutCase {
  const char *name; // KIMI_E2E_DIR/<name>-release/config.json and <name>-release.kimi
  CheckpointLayout layout;
  bool mxfp4;
};

class ReleasedCheckpoint : public ::testing::TestWithParam<LayoutCase> {
protected:
  void SetUp() override {
    const std::string base = std::string(KIMI_E2E_DIR) + "/" + GetParam().name + "-release";
    auto text = llvm::MemoryBuffer::getFile(base + "/config.json");
    ASSERT_TRUE(bool(text)) << base << "/config.json";
    configText = (*text)->getBuffer().str();
    llvm::Expected<ModelConfig> cfg = parseModelConfig(configText, "config.json");
    ASSERT_TRUE(bool(cfg)) << llvm::toString(cfg.takeError());
    config = *cfg;
    ASSERT_EQ(config.layout, GetParam().layout);
    ASSERT_EQ(config.quantization.mxfp4Experts, GetParam().mxfp4);
    StatusOr<ArtifactSpec> a = ArtifactReader::readFile(base + ".kimi");
    ASSERT_TRUE(a.isOk()) << a.status().message();
    artifact = std::make_shared<const ArtifactSpec>(std::move(a.value()));

    seed = std::random_device{}();
    weights = reference::randomWeights(config, seed);
    dir = ::testing::TempDir() + "kimi-release-" + GetParam().name + "-" +
          std::to_string(seed);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  /// Writes the checkpoint (with `edit` applied) and makes the reference
  /// weights what it stores.
  void write(const TensorEditFn &edit = {}) {
    llvm::sys::fs::remove_directories(dir);
    auto values = [&](const std::string &name, const std::vector<int64_t> &shape) {
      auto it = weights.find(name);
      if (it != weights.end())
        return it->second.data;
      // Stored but never read (K3's layer-0 AttnRes pair): random too.
      reference::WeightSpec spec{WeightRole::AttnResNorm, 0, name, shape};
      return reference::randomTensor(spec, seed).data;
    };
    CheckpointWriteOptions options;
    options.edit = edit;
    auto stored = writeReleasedCheckpoint(config, configText, dir, values, options);
    ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
    for (auto &[name, v] : *stored)
      if (auto it = weights.find(name); it != weights.end())
        it->second.data = v;
  }

  StatusOr<std::shared_ptr<CpuExecutable>> load(const std::string &path) {
    StatusOr<std::unique_ptr<WeightLoader>> loader = WeightLoader::open({path});
    if (!loader.isOk())
      return loader.status();
    return CpuExecutable::create(artifact, *loader.value());
  }

  /// A load of the mutated checkpoint fails with a message holding `what`.
  void expectRefused(const std::string &what, const std::string &path = "") {
    auto exe = load(path.empty() ? dir : path);
    ASSERT_FALSE(exe.isOk()) << "a mutation naming " << what << " loaded";
    EXPECT_NE(exe.status().message().find(what), std::string::npos)
        << exe.status().message();
  }

  ModelConfig config;
  std::string configText;
  std::shared_ptr<const ArtifactSpec> artifact;
  unsigned seed = 0;
  reference::WeightMap weights;
  std::string dir;
};

std::string prefix(const ModelConfig &c) {
  return c.layout == CheckpointLayout::K3 ? "language_model." : "";
}

TEST_P(ReleasedCheckpoint, LogitsMatchFloat64Reference) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  ASSERT_NO_FATAL_FAILURE(write());
  auto exe = load(dir);
  ASSERT_TRUE(exe.isOk()) << exe.status().message();
  auto session = Session::create(exe.value());
  ASSERT_TRUE(session.isOk()) << session.status().message();

  reference::ReferenceModel ref(config, weights);
  // Fresh tokens whose routing margins are clear of f32 rounding.
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(40);
  for (int attempt = 0;; ++attempt) {
    ASSERT_LT(attempt, 50) << "no well-conditioned token sequence";
    for (int32_t &t : tokens)
      t = static_cast<int32_t>(rng() % config.vocab);
    reference::ModelState state = ref.initialState();
    reference::Trace trace;
    ref.run(tokens, state, &trace);
    if (*std::min_element(trace.routingMargin.begin(), trace.routingMargin.end()) > 1e-4)
      break;
  }
  StatusOr<LogitsView> logits = session.value()->prefill(tokens);
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  std::vector<double> want = ref.forward(tokens);
  ASSERT_EQ(size_t(logits.value().rows * logits.value().vocab), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(logits.value().data[i])) << "logit " << i;
    double d = logits.value().data[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  double err = std::sqrt(num / den);
  RecordProperty("relative_error", std::to_string(err));
  EXPECT_LT(err, 1e-4) << "relative L2 error of all logits";
}

TEST_P(ReleasedCheckpoint, MissingTensorIsNamed) {
  const std::string gone = prefix(config) + "model.layers.1.post_attention_layernorm.weight";
  ASSERT_NO_FATAL_FAILURE(write([&](std::string &name, auto &, auto &) {
    return name != gone;
  }));
  expectRefused("model.layers.1.post_attention_layernorm.weight");
}

TEST_P(ReleasedCheckpoint, WrongShapeIsNamed) {
  const std::string bad = prefix(config) + "model.layers.0.self_attn.q_proj.weight";
  ASSERT_NO_FATAL_FAILURE(write([&](std::string &name, std::vector<int64_t> &shape,
                                    std::vector<uint8_t> &) {
    if (name == bad) { // same bytes, another shape
      shape[0] /= 2;
      shape[1] *= 2;
    }
    return true;
  }));
  expectRefused(bad);
}

TEST_P(ReleasedCheckpoint, NonzeroALogPaddingIsRefused) {
  if (config.layout != CheckpointLayout::K3)
    GTEST_SKIP() << "Kimi Linear stores A_log unpadded ([1, 1, H, 1])";
  const std::string aLog = prefix(config) + "model.layers.0.self_attn.A_log";
  ASSERT_NO_FATAL_FAILURE(write([&](std::string &name, std::vector<int64_t> &shape,
                                    std::vector<uint8_t> &bytes) {
    if (name == aLog) {
      float v = 0.5f;
      std::memcpy(bytes.data() + 4 * (shape[0] - 1), &v, 4);
    }
    return true;
  }));
  expectRefused(aLog);
}

TEST_P(ReleasedCheckpoint, MissingShardIsNamed) {
  ASSERT_NO_FATAL_FAILURE(write());
  const std::string shard = "model-00002-of-00003.safetensors";
  ASSERT_FALSE(llvm::sys::fs::remove(dir + "/" + shard));
  expectRefused(shard);
}

TEST_P(ReleasedCheckpoint, IndexNamingAnAbsentTensorIsRefused) {
  ASSERT_NO_FATAL_FAILURE(write());
  const std::string index = dir + "/" + kSafetensorsIndexName;
  auto text = llvm::MemoryBuffer::getFile(index);
  ASSERT_TRUE(bool(text));
  std::string s = (*text)->getBuffer().str();
  size_t at = s.find("\"weight_map\": {");
  ASSERT_NE(at, std::string::npos);
  s.insert(at + 15, "\n    \"model.layers.0.not_a_tensor.weight\": "
                    "\"model-00001-of-00003.safetensors\",");
  std::ofstream(index) << s;
  expectRefused("model.layers.0.not_a_tensor.weight");
  // The index file itself, not only its directory.
  expectRefused("model.layers.0.not_a_tensor.weight", index);
}

TEST_P(ReleasedCheckpoint, ShardTheIndexDoesNotListIsRefused) {
  ASSERT_NO_FATAL_FAILURE(write());
  const std::string stray = "model-00004-of-00003.safetensors";
  ASSERT_FALSE(llvm::sys::fs::copy_file(dir + "/model-00001-of-00003.safetensors",
                                        dir + "/" + stray));
  expectRefused(stray);
}

TEST_P(ReleasedCheckpoint, TensorInTwoShardsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(write());
  // Shard 1 again under shard 3's name: its tensors now sit in two shards.
  ASSERT_FALSE(llvm::sys::fs::copy_file(dir + "/model-00001-of-00003.safetensors",
                                        dir + "/model-00003-of-00003.safetensors"));
  expectRefused("model-00003-of-00003.safetensors");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ReleasedCheckpoint,
    ::testing::Values(LayoutCase{"kimi-linear-tiny", CheckpointLayout::KimiLinear, false},
                      LayoutCase{"k3-tiny", CheckpointLayout::K3, true}),
    [](const auto &info) {
      std::string name = info.param.name;
      for (char &c : name)
        if (c == '-')
          c = '_';
      return name;
    });

} // namespace

//===- CompiledModelTest.cpp - compiled CPU model vs float64 reference ----===//
//
// Loads the shared object kimi-compile produced for a model (at build time),
// fills its weight globals with deterministic random weights, runs chunked
// prefill and decode steps through the packed entry points of
// docs/runtime-abi.md, and compares every logit with the independent float64
// reference model (test/reference/) on fresh random tokens.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "models/import/ModelImporter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "test/reference/RandomWeights.h"
#include "test/reference/ReferenceModel.h"
#include "gtest/gtest.h"
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <random>
#include <set>

using namespace kimi;

namespace {

/// One tensor of an entry's signature.
struct Spec {
  std::string state; // kimi.state name, empty for tokens/logits
  std::vector<int64_t> shape;
  bool isCache() const {
    return state.size() > 9 && state.compare(state.size() - 9, 9, "mla_cache") == 0;
  }
};

struct Entry {
  std::vector<Spec> inputs, outputs;
  void (*fn)(void **) = nullptr;
};

Entry describe(mlir::func::FuncOp fn, void *so) {
  Entry e;
  mlir::FunctionType type = fn.getFunctionType();
  for (unsigned i = 0; i < type.getNumInputs(); ++i) {
    auto t = llvm::cast<mlir::RankedTensorType>(type.getInput(i));
    auto name = fn.getArgAttrOfType<mlir::StringAttr>(i, "kimi.state");
    e.inputs.push_back({name ? name.str() : "", {t.getShape().begin(), t.getShape().end()}});
  }
  for (unsigned i = 0; i < type.getNumResults(); ++i) {
    auto t = llvm::cast<mlir::RankedTensorType>(type.getResult(i));
    auto name = fn.getResultAttrOfType<mlir::StringAttr>(i, "kimi.state");
    e.outputs.push_back({name ? name.str() : "", {t.getShape().begin(), t.getShape().end()}});
  }
  e.fn = reinterpret_cast<void (*)(void **)>(
      dlsym(so, ("kimi_entry_" + fn.getSymName()).str().c_str()));
  return e;
}

/// A memref descriptor laid out as the compiled code expects it.
std::vector<int64_t> descriptor(const void *data,
                                const std::vector<int64_t> &sizes) {
  std::vector<int64_t> d(3 + 2 * sizes.size());
  std::memcpy(&d[0], &data, sizeof(void *));
  std::memcpy(&d[1], &data, sizeof(void *));
  d[2] = 0;
  int64_t stride = 1;
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    d[3 + i] = sizes[i];
    d[3 + sizes.size() + i] = stride;
    stride *= sizes[i];
  }
  return d;
}

/// The compiled model with its session state (batch 1).
class CompiledModel {
public:
  void load(const std::string &path, mlir::ModuleOp module,
            const reference::WeightMap &weights) {
    so = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!so) {
      ADD_FAILURE() << dlerror();
      return;
    }
    size_t slot = 0;
    for (auto w : module.getOps<WeightOp>()) {
      auto *dst = static_cast<float *>(
          dlsym(so, ("kimi_w_" + std::to_string(slot++)).c_str()));
      auto it = weights.find(w.getSymName().str());
      ASSERT_TRUE(dst) << w.getSymName().str();
      ASSERT_NE(it, weights.end()) << w.getSymName().str();
      for (size_t i = 0; i < it->second.data.size(); ++i)
        dst[i] = static_cast<float>(it->second.data[i]);
    }
    for (auto fn : module.getOps<mlir::func::FuncOp>()) {
      if (fn.getSymName() == "prefill")
        prefillEntry = describe(fn, so);
      if (fn.getSymName() == "decode")
        decodeEntry = describe(fn, so);
    }
    ASSERT_TRUE(prefillEntry.fn && decodeEntry.fn);
    chunk = prefillEntry.inputs[0].shape[1];
    reset();
  }
  ~CompiledModel() {
    if (so)
      dlclose(so);
  }

  void reset() {
    state.clear();
    for (const Spec &s : decodeEntry.inputs)
      if (!s.state.empty()) {
        int64_t n = 1;
        for (int64_t d : s.shape)
          n *= d < 0 ? 0 : d; // caches start empty
        state[s.state].assign(n, 0.0f);
      }
  }

  /// Runs `tokens` from the current state with `entry` (T = its token
  /// count); returns logits [T * V].
  std::vector<float> step(const Entry &entry, const int32_t *tokens) {
    std::vector<std::vector<int64_t>> in;
    in.push_back(descriptor(tokens, entry.inputs[0].shape));
    for (size_t i = 1; i < entry.inputs.size(); ++i) {
      const Spec &s = entry.inputs[i];
      std::vector<int64_t> shape = s.shape;
      std::vector<float> &buf = state[s.state];
      if (s.isCache())
        shape[1] = buf.size() / shape[2];
      in.push_back(descriptor(buf.data(), shape));
    }
    size_t resultWords = 0;
    for (const Spec &s : entry.outputs)
      resultWords += 3 + 2 * s.shape.size();
    std::vector<int64_t> results(resultWords);
    std::vector<void *> args = {results.data()};
    for (auto &d : in)
      args.push_back(d.data());
    entry.fn(args.data());

    std::vector<float> logits;
    std::set<void *> owned;
    size_t at = 0;
    for (const Spec &s : entry.outputs) {
      void *allocated, *aligned;
      std::memcpy(&allocated, &results[at], sizeof(void *));
      std::memcpy(&aligned, &results[at + 1], sizeof(void *));
      int64_t offset = results[at + 2], n = 1;
      for (size_t d = 0; d < s.shape.size(); ++d)
        n *= results[at + 3 + d];
      const float *data = static_cast<const float *>(aligned) + offset;
      if (s.state.empty())
        logits.assign(data, data + n);
      else if (s.isCache())
        state[s.state].insert(state[s.state].end(), data, data + n);
      else
        state[s.state].assign(data, data + n);
      owned.insert(allocated);
      at += 3 + 2 * s.shape.size();
    }
    for (void *p : owned)
      free(p);
    return logits;
  }

  /// Chunked prefill steps, then single-token decode steps for the rest.
  std::vector<float> run(const std::vector<int32_t> &tokens) {
    std::vector<float> logits;
    size_t t = 0;
    for (; t + chunk <= tokens.size(); t += chunk) {
      std::vector<float> l = step(prefillEntry, tokens.data() + t);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    for (; t < tokens.size(); ++t) {
      std::vector<float> l = step(decodeEntry, tokens.data() + t);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    return logits;
  }

  Entry prefillEntry, decodeEntry;
  int64_t chunk = 0;

private:
  void *so = nullptr;
  std::map<std::string, std::vector<float>> state;
};

double relativeError(const std::vector<float> &got,
                     const std::vector<double> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

struct ModelCase {
  const char *config;
  const char *sharedObject;
};

class CompiledVsReference : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CompiledVsReference, LogitsMatchFloat64Reference) {
  std::string dir = KIMI_E2E_DIR;
  llvm::Expected<ModelConfig> cfg = readModelConfig(
      std::string(KIMI_SOURCE_DIR) + "/models/" + GetParam().config);
  ASSERT_TRUE(bool(cfg)) << llvm::toString(cfg.takeError());

  // The same import kimi-compile does for the CPU target.
  mlir::MLIRContext ctx;
  ImportOptions options;
  options.activations = NumericType::F32;
  options.weights = NumericType::F32;
  options.mxfp4Experts = false;
  options.prefillChunk = 64;
  auto module = importModel(*cfg, options, ctx);
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());

  unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  reference::WeightMap weights = reference::randomWeights(*cfg, seed);
  reference::roundWeights(weights, reference::Rounding::F32);
  reference::ReferenceModel ref(*cfg, weights);

  CompiledModel model;
  ASSERT_NO_FATAL_FAILURE(
      model.load(dir + "/" + GetParam().sharedObject, **module, weights));

  // 64 + 7 tokens: one prefill chunk, then decode steps.
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(71);
  for (int32_t &t : tokens)
    t = static_cast<int32_t>(rng() % cfg->vocab);
  std::vector<float> got = model.run(tokens);
  std::vector<double> want = ref.forward(tokens);
  ASSERT_EQ(got.size(), want.size());
  for (float v : got)
    ASSERT_TRUE(std::isfinite(v));
  double err = relativeError(got, want);
  RecordProperty("relative_error", std::to_string(err));
  EXPECT_LT(err, 1e-4) << "relative L2 error of all logits";

  // The chunked prefill step and 64 single-token decode steps agree.
  model.reset();
  std::vector<int32_t> first(tokens.begin(), tokens.begin() + 64);
  std::vector<float> chunked = model.step(model.prefillEntry, first.data());
  model.reset();
  std::vector<float> stepwise;
  for (int32_t t : first) {
    std::vector<float> l = model.step(model.decodeEntry, &t);
    stepwise.insert(stepwise.end(), l.begin(), l.end());
  }
  std::vector<double> chunkedD(chunked.begin(), chunked.end());
  EXPECT_LT(relativeError(stepwise, chunkedD), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Models, CompiledVsReference,
    ::testing::Values(ModelCase{"k3-tiny.json", "k3-tiny.so"},
                      ModelCase{"kimi-linear-tiny.json", "kimi-linear-tiny.so"}),
    [](const auto &info) {
      std::string name = info.param.sharedObject;
      name = name.substr(0, name.size() - 3);
      for (char &c : name)
        if (c == '-')
          c = '_';
      return name;
    });

} // namespace

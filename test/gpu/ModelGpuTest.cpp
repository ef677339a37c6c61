//===- ModelGpuTest.cpp - whole models on the GPU vs the CPU path ---------===//
//
// The GPU model target (kimi-compile --target sm_90a on a config) against the
// CPU target of the same config, both f32 with the same random weights, on
// fresh random tokens (the seed is printed):
//  * every logits row of prefill + decode steps agrees (relative L2 of all
//    rows <= 2e-2, the bound; the median row <= 1e-4, the f32 bound,
//    so that a rare router near-tie flipping one expert cannot hide a
//    systematic error); the GPU's buffers are poisoned with NaN first;
//  * on the GPU, prefill(N) then M decode steps equals prefill(N + M).
// k3-tiny's artifacts are built with the tests; k3-mini's and k3-tiny-kda's
// with `ninja kimi-<case>-gpu-artifacts` (the case skips without them).
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/reader.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/cuda/gpu_model_executable.h"
#include "runtime/session/session.h"
#include "runtime/weights/random_weights.h"
#include "runtime/weights/weight_loader.h"
#include "test/runtime/TestGpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <unistd.h>

using namespace kimi::rt;

namespace {

struct ModelCase {
  const char *name;
  int prompt;  // tokens prefilled
  int decode;  // decode steps after it
  /// Bound on the median row's relative error against the CPU target (f32).
  double medianRowBound = 1e-4;
  /// Cases whose GPU code rounds inside (the KDA kernels' bf16 tensor-core
  /// operands) against a CPU reference with only their I/O rounding
  /// (--kda-bf16-io): random-weight models amplify a rounding of a few
  /// 1e-3 to logits differences of 0.2-0.3 (routing flips, norms), so no
  /// absolute bound separates rounding from a fault. The bound is relative
  /// instead: the GPU may differ from the reference by at most 2x what
  /// the I/O rounding alone changes (this CPU artifact, unrounded, against
  /// the reference). Measured on the H200 over four runs (fresh seeds):
  /// 0.78x to 1.37x; the bound is 2x. A fault in the kernels' use (layouts,
  /// chunk states) gives errors of order 1, several times the floor.
  const char *unroundedCpu = nullptr;
};

/// KIMI_MODEL_GPU_ARTIFACT_DIR (environment) overrides the build's folder,
/// for runs on a GPU machine that received the artifacts elsewhere.
std::string artifactPath(const std::string &name) {
  const char *env = std::getenv("KIMI_MODEL_GPU_ARTIFACT_DIR");
  return std::string(env ? env : KIMI_MODEL_GPU_ARTIFACT_DIR) + "/" + name +
         ".kimi";
}

double relativeError(const std::vector<float> &got, const std::vector<float> &want,
                     size_t begin, size_t end) {
  double num = 0, den = 0;
  for (size_t i = begin; i < end; ++i) {
    double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

class ModelGpu : public ::testing::TestWithParam<ModelCase> {
protected:
  void SetUp() override {
    const ModelCase &c = GetParam();
    gpuPath = artifactPath(std::string(c.name) + "-gpu");
    cpuPath = artifactPath(std::string(c.name) + "-cpu");
    if (!std::filesystem::exists(gpuPath) || !std::filesystem::exists(cpuPath))
      GTEST_SKIP() << c.name << " artifacts not built (" << gpuPath
                   << "): ninja kimi-" << c.name << "-gpu-artifacts";
    seed = std::random_device{}();
    std::printf("[ seed     ] %u\n", seed);
  }
  void TearDown() override {
    if (!weightFile.empty())
      unlink(weightFile.c_str());
  }

  std::shared_ptr<const ArtifactSpec> read(const std::string &path) {
    auto spec = ArtifactReader::readFile(path);
    EXPECT_TRUE(spec.isOk()) << spec.status().message();
    return std::make_shared<const ArtifactSpec>(std::move(spec.value()));
  }

  /// Random weights for both artifacts (the same manifest), once.
  std::unique_ptr<WeightLoader> weights(const ArtifactSpec &a) {
    if (weightFile.empty()) {
      char tmp[] = "/tmp/kimi-gpu-model-test-XXXXXX";
      int fd = mkstemp(tmp);
      close(fd);
      weightFile = tmp;
      Status s = writeRandomWeights(a, 11, weightFile);
      EXPECT_TRUE(s.isOk()) << s.message();
    }
    auto loader = WeightLoader::open({weightFile});
    EXPECT_TRUE(loader.isOk()) << loader.status().message();
    return std::move(loader.value());
  }

  /// Every logits row of prefill(prompt) and decode steps over `extra`.
  std::vector<float> run(Session &s, const std::vector<int32_t> &prompt,
                         const std::vector<int32_t> &extra) {
    std::vector<float> rows;
    auto p = s.prefill(prompt);
    EXPECT_TRUE(p.isOk()) << p.status().message();
    if (!p.isOk())
      return rows;
    rows.assign(p.value().data, p.value().data + p.value().rows * p.value().vocab);
    for (int32_t t : extra) {
      auto d = s.decodeStep(t);
      EXPECT_TRUE(d.isOk()) << d.status().message();
      if (!d.isOk())
        return rows;
      rows.insert(rows.end(), d.value().data, d.value().data + d.value().vocab);
    }
    return rows;
  }

  std::string gpuPath, cpuPath, weightFile;
  unsigned seed = 0;
};

TEST_P(ModelGpu, LogitsMatchCpuTarget) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  const ModelCase &c = GetParam();
  auto gpuSpec = read(gpuPath), cpuSpec = read(cpuPath);
  ASSERT_EQ(gpuSpec->weights.size(), cpuSpec->weights.size());
  auto gpuLoader = weights(*cpuSpec);
  auto gpu = GpuModelExecutable::create(gpuSpec, *gpuLoader);
  ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
  gpu.value()->setPoison(true);
  auto cpuLoader = weights(*cpuSpec);
  auto cpu = CpuExecutable::create(cpuSpec, *cpuLoader);
  ASSERT_TRUE(cpu.isOk()) << cpu.status().message();

  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(c.prompt), extra(c.decode);
  for (int32_t &t : prompt)
    t = int32_t(rng() % uint32_t(gpuSpec->model.vocabSize));
  for (int32_t &t : extra)
    t = int32_t(rng() % uint32_t(gpuSpec->model.vocabSize));

  auto gs = Session::create(gpu.value());
  auto cs = Session::create(cpu.value());
  ASSERT_TRUE(gs.isOk() && cs.isOk());
  std::vector<float> got = run(*gs.value(), prompt, extra);
  std::vector<float> want = run(*cs.value(), prompt, extra);
  const size_t vocab = gpuSpec->model.vocabSize;
  const size_t rows = size_t(c.prompt + c.decode);
  ASSERT_EQ(got.size(), rows * vocab);
  ASSERT_EQ(want.size(), rows * vocab);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(std::isfinite(got[i])) << "GPU logit " << i << " (row "
                                       << i / vocab << ") is not finite";
  std::vector<double> rowErrors;
  for (size_t r = 0; r < rows; ++r)
    rowErrors.push_back(relativeError(got, want, r * vocab, (r + 1) * vocab));
  double all = relativeError(got, want, 0, got.size());
  std::vector<double> sorted = rowErrors;
  std::sort(sorted.begin(), sorted.end());
  double medianRow = sorted[sorted.size() / 2];
  std::printf("[ errors   ] all rows %.3g, median row %.3g, worst row %.3g\n",
              all, medianRow, sorted.back());
  // Where the error is: by position in the prompt (a recurrence that
  // drifts grows along it), and per decode step.
  std::printf("[ rows     ]");
  for (size_t lo = 0, hi = 16; lo < size_t(c.prompt); lo = hi, hi *= 2) {
    hi = std::min(hi, size_t(c.prompt));
    std::vector<double> part(rowErrors.begin() + lo, rowErrors.begin() + hi);
    std::sort(part.begin(), part.end());
    std::printf(" %zu-%zu: %.3g", lo, hi - 1, part[part.size() / 2]);
  }
  std::printf(" | decode:");
  for (size_t r = size_t(c.prompt); r < rows; ++r)
    std::printf(" %.3g", rowErrors[r]);
  std::printf("\n");
  RecordProperty("relative_error", std::to_string(all));
  if (c.unroundedCpu) {
    auto plainSpec = read(artifactPath(std::string(c.unroundedCpu) + "-cpu"));
    auto plainLoader = weights(*plainSpec);
    auto plain = CpuExecutable::create(plainSpec, *plainLoader);
    ASSERT_TRUE(plain.isOk()) << plain.status().message();
    auto ps = Session::create(plain.value());
    ASSERT_TRUE(ps.isOk());
    std::vector<float> unrounded = run(*ps.value(), prompt, extra);
    ASSERT_EQ(unrounded.size(), want.size());
    double floor = relativeError(unrounded, want, 0, want.size());
    std::printf("[ floor    ] the I/O rounding alone: all rows %.3g; the GPU "
                "is %.2fx that\n",
                floor, all / floor);
    EXPECT_LT(all, 2.0 * floor)
        << "the GPU differs from the rounded reference by more than twice "
           "what the rounding itself changes";
    return;
  }
  EXPECT_LT(all, 2e-2) << "relative L2 error of all logits";
  EXPECT_LT(medianRow, c.medianRowBound)
      << "median relative error of a logits row";
}

TEST_P(ModelGpu, PrefillThenDecodeEqualsPrefill) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  const ModelCase &c = GetParam();
  auto spec = read(gpuPath);
  auto loader = weights(*spec);
  auto gpu = GpuModelExecutable::create(spec, *loader);
  ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
  gpu.value()->setPoison(true);
  std::mt19937 rng(seed);
  std::vector<int32_t> all(c.prompt + c.decode);
  for (int32_t &t : all)
    t = int32_t(rng() % uint32_t(spec->model.vocabSize));
  std::vector<int32_t> prompt(all.begin(), all.begin() + c.prompt),
      extra(all.begin() + c.prompt, all.end());
  auto a = Session::create(gpu.value());
  auto b = Session::create(gpu.value());
  ASSERT_TRUE(a.isOk() && b.isOk());
  std::vector<float> whole = run(*a.value(), all, {});
  std::vector<float> split = run(*b.value(), prompt, extra);
  ASSERT_EQ(whole.size(), split.size());
  double err = relativeError(split, whole, 0, whole.size());
  std::printf("[ errors   ] prefill(N)+decode(M) vs prefill(N+M): %.3g\n", err);
  EXPECT_LT(err, 1e-4);
}

// k3-tiny: 300 tokens = one 256-token GPU prefill step + 44 decode steps
// (CPU: four 64-token steps + 44); k3-mini: 70 = one 64-token step + 6.
// k3-tiny-kda: k3-tiny with the generated KDA kernels (--gpu-kda-kernels)
// against the CPU target with their bf16 I/O rounding (--kda-bf16-io),
// bounded by what that rounding changes (k3-tiny-cpu, unrounded).
INSTANTIATE_TEST_SUITE_P(Models, ModelGpu,
                         ::testing::Values(ModelCase{"k3-tiny", 300, 6},
                                           ModelCase{"k3-mini", 70, 3},
                                           ModelCase{"k3-tiny-kda", 300, 6, 0,
                                                     "k3-tiny"}),
                         [](const auto &info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

} // namespace

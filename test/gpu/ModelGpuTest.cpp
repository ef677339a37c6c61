//===- ModelGpuTest.cpp - whole models on the GPU vs the CPU path ---------===//
//
// The GPU model target (kimi-compile --target sm_90a on a config) against the
// CPU target of the same config, both with f32 activations and the same
// random weights at the same stored types (bf16 by default; the -f32 case
// holds f32 weights), on fresh random tokens (the seed is printed):
//  * the GPU holds each weight at its stored type: the manifest's bytes,
//    and no more device memory than they take;
//  * every logits row of prefill + decode steps agrees (relative L2 of all
//    rows <= 2e-2, the bound; the median row <= 1e-4, the f32 bound,
//    so that a rare router near-tie flipping one expert cannot hide a
//    systematic error); the GPU's buffers are poisoned with NaN first;
//  * on the GPU, prefill(N) then M decode steps equals prefill(N + M);
//  * states and caches stay in device memory: snapshots fork and restore
//    there (and from host copies), and device cache appends give the host's
//    bytes for one and for several sequences;
//  * decode steps replayed as CUDA graphs (small buckets: many captures,
//    cache regrowth, evictions) give the logits of direct calls.
// k3-tiny's artifacts are built with the tests; k3-mini's and k3-tiny-kda's
// with `ninja kimi-<case>-gpu-artifacts`, the -mla cases' with `ninja
// kimi-mla-gpu-artifacts` (a case skips without them).
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
#include <cstring>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <unistd.h>

using namespace kimi::rt;

namespace {

/// Sets an environment variable for a scope and restores it after.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  const char *name_;
  std::optional<std::string> old_;
};

struct ModelCase {
  const char *name;
  int prompt;  // tokens prefilled
  int decode;  // decode steps after it
  /// Bound on the median row's relative error against the CPU target (f32).
  double medianRowBound = 1e-4;
  /// The rounding floor: a CPU artifact whose distance from this case's CPU
  /// artifact bounds the GPU's (twice it). Cases whose GPU code rounds
  /// inside (the KDA kernels' bf16 tensor-core
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
  /// Bound on the relative error of all rows together.
  double allRowsBound = 2e-2;
  /// Bound on prefill(N) + decode(M) against prefill(N + M) of the same
  /// artifact: 1e-4 in f32; with bf16 activations the two orders of work
  /// round their bf16 tensors differently (the bf16 I/O bound, 1e-2).
  double splitBound = 1e-4;
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

/// The largest relative error of any row of `width` values.
double worstRowError(const std::vector<float> &got, const std::vector<float> &want,
                     size_t width) {
  double worst = 0;
  for (size_t r = 0; r < got.size() / width; ++r)
    worst = std::max(worst, relativeError(got, want, r * width, (r + 1) * width));
  return worst;
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
    // KIMI_TEST_SEED reproduces a printed seed.
    const char *fixed = std::getenv("KIMI_TEST_SEED");
    seed = fixed ? unsigned(std::strtoul(fixed, nullptr, 10)) : std::random_device{}();
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

  /// The GPU executable of `spec` on the random weights, its buffers
  /// poisoned with NaN.
  StatusOr<std::shared_ptr<GpuModelExecutable>>
  load(std::shared_ptr<const ArtifactSpec> spec) {
    auto loader = weights(*spec);
    auto gpu = GpuModelExecutable::create(spec, *loader);
    if (gpu.isOk())
      gpu.value()->setPoison(true);
    return gpu;
  }

  /// Every logits row of prefill(prompt) (none when `prompt` is empty: the
  /// session continues) and decode steps over `extra`.
  std::vector<float> run(Session &s, const std::vector<int32_t> &prompt,
                         const std::vector<int32_t> &extra) {
    std::vector<float> rows;
    if (!prompt.empty()) {
      auto p = s.prefill(prompt);
      EXPECT_TRUE(p.isOk()) << p.status().message();
      if (!p.isOk())
        return rows;
      rows.assign(p.value().data,
                  p.value().data + p.value().rows * p.value().vocab);
    }
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
  EXPECT_LT(all, c.allRowsBound) << "relative L2 error of all logits";
  EXPECT_LT(medianRow, c.medianRowBound)
      << "median relative error of a logits row";
}

TEST_P(ModelGpu, WeightsHeldAtTheirStoredTypes) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  auto spec = read(gpuPath);
  const std::string name = GetParam().name;
  const bool f32Case = name.find("-f32") != std::string::npos;
  const bool mxfp4Case = name.find("-mx") != std::string::npos;  // -mxfp4, -mxbw
  int64_t manifest = 0, bf16 = 0, codes = 0, scales = 0;
  for (const WeightSpec &w : spec->weights) {
    manifest += storedBytes(w.dtype, w.blockNumel());
    bf16 += w.dtype == DType::kBF16;
    const bool expert = w.name.find(".experts.") != std::string::npos;
    codes += w.dtype == DType::kF4E2M1;
    scales += w.dtype == DType::kF8E8M0;
    if (mxfp4Case && expert)
      ASSERT_TRUE(w.dtype == DType::kF4E2M1 || w.dtype == DType::kF8E8M0)
          << w.name << " is " << dtypeName(w.dtype) << ", not MXFP4";
    else
      ASSERT_TRUE(w.dtype == DType::kBF16 || w.dtype == DType::kF32)
          << w.name << " is " << dtypeName(w.dtype);
  }
  // What was asked for: bf16 dense weights by default, none with --weights
  // f32; with --mxfp4-experts each routed-expert table as codes and scales.
  if (f32Case)
    EXPECT_EQ(bf16, 0);
  else
    EXPECT_GT(bf16, int64_t(spec->weights.size()) / 3);
  EXPECT_EQ(codes, scales);
  if (mxfp4Case)
    EXPECT_GT(codes, 0);
  else
    EXPECT_EQ(codes, 0);
  auto gpu = load(spec);
  ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
  EXPECT_EQ(gpu.value()->weightBytes(), manifest);
  // The driver's view: the uploads took at least the manifest's bytes and
  // no more than one 2 MiB allocation granule per weight on top (a widened
  // copy of the bf16 weights would take as much again as they do).
  const int64_t measured = gpu.value()->weightDeviceBytes();
  std::printf("[ memory   ] manifest %lld bytes, device %lld bytes\n",
              (long long)manifest, (long long)measured);
  ASSERT_GE(measured, 0) << "the driver reported no free memory";
  EXPECT_GE(measured, manifest);
  EXPECT_LE(measured, manifest + int64_t(spec->weights.size()) * (int64_t(2) << 20));
}

// Weights generated on the device (what kimi-bench-model uses for shapes no
// host file holds) are the file's weights: the same logits, bit for bit.
TEST_P(ModelGpu, DeviceRandomWeightsAreTheFileWeights) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  // One algorithm per product shape for both (timing picks per executable).
  ScopedEnv noTiming("KIMI_GEMM_TUNING_MS", "0");
  auto spec = read(gpuPath);
  auto fromFile = load(spec);
  ASSERT_TRUE(fromFile.isOk()) << fromFile.status().message();
  auto onDevice = GpuModelExecutable::createWithRandomWeights(spec, 11);
  const bool mxfp4 = std::any_of(
      spec->weights.begin(), spec->weights.end(),
      [](const WeightSpec &w) { return w.dtype == DType::kF4E2M1; });
  if (mxfp4) {
    // The device generator draws f32 and bf16 only: MXFP4 is refused by name.
    ASSERT_FALSE(onDevice.isOk());
    EXPECT_NE(onDevice.status().message().find("only f32 and bf16"), std::string::npos)
        << onDevice.status().message();
    return;
  }
  ASSERT_TRUE(onDevice.isOk()) << onDevice.status().message();
  onDevice.value()->setPoison(true);
  EXPECT_EQ(onDevice.value()->weightBytes(), fromFile.value()->weightBytes());
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(std::min(GetParam().prompt, 40)), extra(2);
  for (int32_t &t : prompt)
    t = int32_t(rng() % uint32_t(spec->model.vocabSize));
  for (int32_t &t : extra)
    t = int32_t(rng() % uint32_t(spec->model.vocabSize));
  auto a = Session::create(fromFile.value());
  auto b = Session::create(onDevice.value());
  ASSERT_TRUE(a.isOk() && b.isOk());
  std::vector<float> want = run(*a.value(), prompt, extra);
  std::vector<float> got = run(*b.value(), prompt, extra);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
      << "relative error " << relativeError(got, want, 0, got.size());
}

TEST_P(ModelGpu, PrefillThenDecodeEqualsPrefill) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  const ModelCase &c = GetParam();
  auto spec = read(gpuPath);
  auto gpu = load(spec);
  ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
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
  EXPECT_LT(err, c.splitBound);

  // The last row alone (copied out of device memory by itself) is the
  // whole prefill's last row, bit for bit.
  auto last = Session::create(gpu.value());
  ASSERT_TRUE(last.isOk());
  auto l = last.value()->prefill(all, PrefillLogits::kLast);
  ASSERT_TRUE(l.isOk()) << l.status().message();
  ASSERT_EQ(l.value().rows, 1);
  const int64_t V = l.value().vocab;
  EXPECT_EQ(std::memcmp(l.value().data, whole.data() + whole.size() - size_t(V),
                        size_t(V) * 4),
            0);
}

TEST_P(ModelGpu, SnapshotsForkOnTheDevice) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  const ModelCase &c = GetParam();
  auto spec = read(gpuPath);
  auto gpu = load(spec);
  ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
  std::mt19937 rng(seed);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (int32_t &x : t)
      x = int32_t(rng() % uint32_t(spec->model.vocabSize));
    return t;
  };
  const std::vector<int32_t> prompt = tokens(c.prompt), a = tokens(3),
                             other = tokens(3), next = tokens(1);
  auto sa = Session::create(gpu.value());
  ASSERT_TRUE(sa.isOk());
  Session &s = *sa.value();
  run(s, prompt, {});
  auto snap0 = s.saveState();
  ASSERT_TRUE(snap0.isOk());
  for (const CarriedRef &t : snap0->tensors)
    ASSERT_EQ(t->residence(), gpu.value().get()) << "a state left the device";
  std::vector<float> rowsA = run(s, {}, a);      // decode only
  auto snapA = s.saveState();
  ASSERT_TRUE(snapA.isOk());
  // Another branch from the same prefix, then back to the first one's end:
  // neither may have written over the other's cache rows.
  ASSERT_TRUE(s.restoreState(snap0.value()).isOk());
  std::vector<float> rowsOther = run(s, {}, other);
  ASSERT_TRUE(s.restoreState(snapA.value()).isOk());
  std::vector<float> rowNext = run(s, {}, next);
  // The prefix as host copies, restored (uploaded) into a second session.
  SessionSnapshot hostCopy = snap0.value();
  for (CarriedRef &t : hostCopy.tensors) {
    auto h = t->toHost();
    ASSERT_TRUE(h.isOk()) << h.status().message();
    t = std::make_shared<HostCarriedTensor>(h.value());
  }
  auto s2 = Session::create(gpu.value());
  ASSERT_TRUE(s2.isOk());
  ASSERT_TRUE(s2.value()->restoreState(hostCopy).isOk());
  std::vector<float> rowsA2 = run(*s2.value(), {}, a);

  // References: straight runs in fresh sessions.
  auto fresh = [&](const std::vector<int32_t> &extra, size_t lastRows) {
    auto f = Session::create(gpu.value());
    EXPECT_TRUE(f.isOk());
    std::vector<float> all = run(*f.value(), prompt, extra);
    const size_t v = size_t(spec->model.vocabSize);
    return std::vector<float>(all.end() - lastRows * v, all.end());
  };
  std::vector<int32_t> aNext = a;
  aNext.push_back(next[0]);
  const double eA = relativeError(rowsA, fresh(a, 3), 0, rowsA.size());
  const double eOther =
      relativeError(rowsOther, fresh(other, 3), 0, rowsOther.size());
  const double eNext = relativeError(rowNext, fresh(aNext, 1), 0, rowNext.size());
  const double eHost = relativeError(rowsA2, rowsA, 0, rowsA.size());
  std::printf("[ errors   ] branch a %.3g, other branch %.3g, back to a %.3g, "
              "from host copies %.3g\n", eA, eOther, eNext, eHost);
  EXPECT_LT(eA, 1e-4);
  EXPECT_LT(eOther, 1e-4);
  EXPECT_LT(eNext, 1e-4);
  EXPECT_LT(eHost, 1e-4);
}

TEST_P(ModelGpu, DecodeGraphsMatchDirectCalls) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  const ModelCase &c = GetParam();
  auto spec = read(gpuPath);
  bool lengths = false;
  for (const TensorSpec &t : spec->findEntry("decode")->inputs)
    lengths |= t.role == TensorRole::kCacheLength;
  if (!lengths)
    GTEST_SKIP() << "the artifact has no cache_length input (--cache-lengths)";
  // Both executables take cuBLASLt's heuristic algorithm for every product
  // instead of timing candidates: timing picks per executable, and two picks
  // that round differently are amplified by the f16 rounding of the MLA
  // kernels' operands (a 1e-7 change flips an f16 rounding now and then; the
  // -mla cases gave 4.7e-5 and 6.7e-5 on the H200 with timing, exactly 0
  // without). This test is about graphs, not algorithm choice.
  ScopedEnv noTiming("KIMI_GEMM_TUNING_MS", "0");
  // Replays read the caches padded to a bucket: an attention product over
  // the longer (masked) extent may take another cuBLASLt algorithm, about
  // 1e-6 apart in f32. A case that rounds inside (the unrounded-CPU cases:
  // bf16 product inputs in bw/mxbw) may turn that into a flipped bf16
  // rounding now and then: k3_tiny_bw and mxbw gave 2.3e-5 and 3.0e-5 on
  // H100s (the bf16 cases exactly 0, their products in generated kernels).
  const double graphBound = c.unroundedCpu ? 1e-4 : 1e-5;
  auto direct = load(spec), graphed = load(spec);
  ASSERT_TRUE(direct.isOk()) << direct.status().message();
  ASSERT_TRUE(graphed.isOk()) << graphed.status().message();
  direct.value()->setGraphs(false);
  // Buckets of 8 rows, two graphs kept: 40 steps cross five buckets, the
  // cache block regrows, and graphs are evicted and captured again.
  graphed.value()->setGraphs(true, 8, 2);
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(c.prompt % 64 + 9), extra(40);
  for (int32_t &t : prompt)
    t = int32_t(rng() % uint32_t(spec->model.vocabSize));
  for (int32_t &t : extra)
    t = int32_t(rng() % uint32_t(spec->model.vocabSize));
  auto sd = Session::create(direct.value());
  auto sg = Session::create(graphed.value());
  ASSERT_TRUE(sd.isOk() && sg.isOk());
  std::vector<float> want = run(*sd.value(), prompt, extra);
  std::vector<float> got = run(*sg.value(), prompt, extra);
  ASSERT_EQ(want.size(), got.size());
  const size_t V = size_t(spec->model.vocabSize);
  const double worst = worstRowError(got, want, V);
  const Executable::CallTimes t = graphed.value()->callTimes();
  std::printf("[ graphs   ] %lld replays (%lld with the states in place), "
              "%lld captures (%lld updating the graph they replace); worst "
              "row %.3g%s%s\n",
              (long long)t.graphReplays, (long long)t.statesInPlace,
              (long long)t.graphCaptures, (long long)t.graphUpdates, worst,
              graphed.value()->graphFailure().empty() ? "" : "; ",
              graphed.value()->graphFailure().c_str());
  EXPECT_TRUE(graphed.value()->graphFailure().empty())
      << graphed.value()->graphFailure();
  EXPECT_GE(t.graphCaptures, 5);
  // Each new bucket of the one sequence replaces its previous graph: the
  // same kernels, so the executable is updated, not instantiated again.
  EXPECT_GE(t.graphUpdates, 4);
  EXPECT_GE(t.graphReplays, 30);
  // The session donates its states (no snapshot holds them yet), so the
  // replays update them in place instead of copying them through the host.
  EXPECT_GE(t.statesInPlace, 30);
  EXPECT_EQ(direct.value()->callTimes().graphReplays, 0);
  EXPECT_LT(worst, graphBound);

  // The same replays with the states copied back by one memcpy node each
  // (KIMI_GPU_STATE_COPY_KERNEL=0) instead of one launch of the copy kernel
  // (runtime/cuda/segment_copy.h).
  {
    ScopedEnv memcpyNodes("KIMI_GPU_STATE_COPY_KERNEL", "0");
    auto memcpyCopied = load(spec);
    ASSERT_TRUE(memcpyCopied.isOk()) << memcpyCopied.status().message();
    memcpyCopied.value()->setGraphs(true, 8, 2);
    auto sm = Session::create(memcpyCopied.value());
    ASSERT_TRUE(sm.isOk());
    std::vector<float> viaMemcpy = run(*sm.value(), prompt, extra);
    ASSERT_EQ(viaMemcpy.size(), want.size());
    const double worstMemcpy = worstRowError(viaMemcpy, want, V);
    const Executable::CallTimes tk = memcpyCopied.value()->callTimes();
    std::printf("[ graphs   ] memcpy nodes: %lld replays in place; worst "
                "row %.3g%s%s\n",
                (long long)tk.statesInPlace, worstMemcpy,
                memcpyCopied.value()->graphFailure().empty() ? "" : "; ",
                memcpyCopied.value()->graphFailure().c_str());
    EXPECT_TRUE(memcpyCopied.value()->graphFailure().empty())
        << memcpyCopied.value()->graphFailure();
    EXPECT_GE(tk.statesInPlace, 30);
    EXPECT_LT(worstMemcpy, graphBound);
  }

  // A snapshot taken between replays stays valid: its branch continued
  // later equals the same tokens run directly. The snapshot holds the
  // states the replays updated in place, so the next step must not donate
  // them (else `again` would start from `more`'s end).
  auto snap = sg.value()->saveState();
  ASSERT_TRUE(snap.isOk());
  std::vector<float> more = run(*sg.value(), {}, {extra[0], extra[1], extra[2]});
  ASSERT_TRUE(sg.value()->restoreState(snap.value()).isOk());
  std::vector<float> again = run(*sg.value(), {}, {extra[0], extra[1], extra[2]});
  EXPECT_LT(relativeError(again, more, 0, more.size()), 1e-6);

  // A new sequence after the first is dropped: its graphs replace the
  // dropped sequence's (whose caches and states are gone) by updating their
  // executables, and decode the same tokens to the same logits.
  sg = Session::create(graphed.value());
  snap = failedPrecondition("dropped");
  ASSERT_TRUE(sg.isOk());
  const int64_t updatesBefore = graphed.value()->callTimes().graphUpdates;
  std::vector<float> second = run(*sg.value(), prompt, extra);
  ASSERT_EQ(second.size(), want.size());
  const double worstSecond = worstRowError(second, want, V);
  const int64_t updates = graphed.value()->callTimes().graphUpdates - updatesBefore;
  std::printf("[ graphs   ] second sequence: %lld updates; worst row %.3g\n",
              (long long)updates, worstSecond);
  EXPECT_TRUE(graphed.value()->graphFailure().empty())
      << graphed.value()->graphFailure();
  EXPECT_GE(updates, 5);
  EXPECT_LT(worstSecond, graphBound);
}

TEST_P(ModelGpu, DeviceCacheAppendsMatchTheHost) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  auto spec = read(gpuPath);
  auto gpu = load(spec);
  ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
  const Executable &exe = *gpu.value();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto rows = [&](int64_t b, int64_t n, int64_t w) {
    HostBuffer buf = HostBuffer::allocate(size_t(b * n * w) * 4).value();
    for (int64_t i = 0; i < b * n * w; ++i)
      reinterpret_cast<float *>(buf.data)[i] = u(rng);
    return HostTensor{DType::kF32, {b, n, w}, buf};
  };
  auto bytesOf = [](const HostTensor &t) {
    return std::vector<uint8_t>(t.data(), t.data() + t.bytes());
  };
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    CarriedRef device, host;
    std::vector<CarriedRef> deviceHistory, hostHistory;
    for (int step = 0; step < 12; ++step) {
      HostTensor r = rows(batch, step == 0 ? 5 : 1, 37);
      auto rd = exe.carry(r);
      ASSERT_TRUE(rd.isOk()) << rd.status().message();
      auto d = exe.appendRows(device, rd.value(), batch);
      ASSERT_TRUE(d.isOk()) << d.status().message();
      device = d.value();
      host = HostCarriedTensor::appendRows(
                 host, HostCarriedTensor(r), batch).value();
      deviceHistory.push_back(device);
      hostHistory.push_back(host);
    }
    // Every tensor made on the way still holds its own rows.
    for (size_t i = 0; i < deviceHistory.size(); ++i) {
      ASSERT_EQ(deviceHistory[i]->shape(), hostHistory[i]->shape());
      EXPECT_EQ(bytesOf(deviceHistory[i]->toHost().value()),
                bytesOf(*hostHistory[i]->host()))
          << "after append " << i;
    }
    // A second continuation of an earlier tensor does not overwrite the first.
    HostTensor r = rows(batch, 1, 37);
    auto fork = exe.appendRows(deviceHistory[5], exe.carry(r).value(), batch);
    ASSERT_TRUE(fork.isOk());
    auto hostFork = HostCarriedTensor::appendRows(hostHistory[5],
                                                  HostCarriedTensor(r), batch);
    EXPECT_EQ(bytesOf(fork.value()->toHost().value()),
              bytesOf(*hostFork.value()->host()));
    EXPECT_EQ(bytesOf(deviceHistory[6]->toHost().value()),
              bytesOf(*hostHistory[6]->host()));
  }
}

// Several sequences stepped together (an artifact compiled with --batch):
// their caches grow in place a bucket-multiple pitch apart, are read padded
// (cache_length masks the zero rows), and the decode steps replay as CUDA
// graphs, to the same logits as direct calls on contiguous caches.
class BatchedModelGpu : public ModelGpu {};

TEST_P(BatchedModelGpu, DecodeGraphsMatchDirectCalls) {
  KIMI_GPU_OR_SKIP(dev);
  (void)dev;
  auto spec = read(gpuPath);
  const int64_t batch = spec->findEntry("decode")->inputs[0].shape[0];
  ASSERT_GT(batch, 1) << "compile this case with --batch";
  ScopedEnv noTiming("KIMI_GEMM_TUNING_MS", "0"); // as DecodeGraphsMatchDirectCalls
  auto direct = load(spec), graphed = load(spec);
  ASSERT_TRUE(direct.isOk()) << direct.status().message();
  ASSERT_TRUE(graphed.isOk()) << graphed.status().message();
  direct.value()->setGraphs(false);
  // Buckets of 8 rows: 13 prompt steps and 20 more cross four buckets (the
  // caches move to a wider pitch, the graph is captured again).
  graphed.value()->setGraphs(true, 8, 2);
  std::mt19937 rng(seed);
  const uint32_t vocab = uint32_t(spec->model.vocabSize);
  std::vector<int32_t> prompt(size_t(batch) * 13);
  for (int32_t &t : prompt)
    t = int32_t(rng() % vocab);
  std::vector<std::vector<int32_t>> steps(20, std::vector<int32_t>(size_t(batch)));
  for (auto &step : steps)
    for (int32_t &t : step)
      t = int32_t(rng() % vocab);
  auto runAll = [&](Session &s) {
    std::vector<float> rows;
    auto p = s.prefill(prompt);
    EXPECT_TRUE(p.isOk()) << p.status().message();
    if (!p.isOk())
      return rows;
    rows.assign(p.value().data, p.value().data + p.value().rows * p.value().vocab);
    for (const auto &step : steps) {
      auto d = s.decode(step.data(), step.size());
      EXPECT_TRUE(d.isOk()) << d.status().message();
      if (!d.isOk())
        return rows;
      rows.insert(rows.end(), d.value().data,
                  d.value().data + d.value().rows * d.value().vocab);
    }
    return rows;
  };
  auto sd = Session::create(direct.value());
  auto sg = Session::create(graphed.value());
  ASSERT_TRUE(sd.isOk() && sg.isOk());
  std::vector<float> want = runAll(*sd.value());
  std::vector<float> got = runAll(*sg.value());
  ASSERT_EQ(want.size(), got.size());
  ASSERT_FALSE(want.empty());
  const double worst = worstRowError(got, want, size_t(vocab));
  const Executable::CallTimes t = graphed.value()->callTimes();
  std::printf("[ graphs   ] batch %lld: %lld replays, %lld captures (%lld "
              "updating the graph they replace); worst row %.3g%s%s\n",
              (long long)batch, (long long)t.graphReplays,
              (long long)t.graphCaptures, (long long)t.graphUpdates, worst,
              graphed.value()->graphFailure().empty() ? "" : "; ",
              graphed.value()->graphFailure().c_str());
  EXPECT_TRUE(graphed.value()->graphFailure().empty())
      << graphed.value()->graphFailure();
  // Each bucket: two direct steps (the second repeats the first's key), a
  // capture, then replays.
  EXPECT_GE(t.graphCaptures, 4);
  EXPECT_GE(t.graphReplays, 15);
  EXPECT_EQ(direct.value()->callTimes().graphReplays, 0);
  EXPECT_LT(worst, 1e-5);

  // A snapshot between replays, continued twice: the second continuation
  // of the same caches cannot append in place (the first did), so it copies
  // them to a new pitch, and both equal the direct session's continuation.
  auto snap = sg.value()->saveState();
  auto snapDirect = sd.value()->saveState();
  ASSERT_TRUE(snap.isOk() && snapDirect.isOk());
  std::vector<float> first, second, reference;
  for (int round = 0; round < 3; ++round) {
    Session &s = round == 2 ? *sd.value() : *sg.value();
    ASSERT_TRUE(s.restoreState(round == 2 ? snapDirect.value() : snap.value()).isOk());
    std::vector<float> &out = round == 0 ? first : round == 1 ? second : reference;
    for (int i = 0; i < 3; ++i) {
      auto d = s.decode(steps[size_t(i)].data(), size_t(batch));
      ASSERT_TRUE(d.isOk()) << d.status().message();
      out.insert(out.end(), d.value().data,
                 d.value().data + d.value().rows * d.value().vocab);
    }
  }
  EXPECT_LT(worstRowError(first, reference, size_t(vocab)), 1e-5);
  EXPECT_LT(worstRowError(second, reference, size_t(vocab)), 1e-5);
}

// k3-tiny-bf16-b3: k3-tiny-bf16 compiled for three sequences (--batch 3).
INSTANTIATE_TEST_SUITE_P(Models, BatchedModelGpu,
                         ::testing::Values(ModelCase{"k3-tiny-bf16-b3", 0, 0}),
                         [](const auto &info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// k3-tiny-bw: --gpu-bf16-weight-products (the activations entering a bf16
// weight's cuBLASLt product rounded to bf16) against the f32 CPU artifact,
// within twice what bf16 activations change on the CPU (k3-tiny-a16);
// every expert for every token (top-k = E), so routing cannot flip.
// k3-tiny-mxfp4: MXFP4 routed experts on both targets (random weights
// quantised to MXFP4): the GPU decode steps' routed-expert kernels decode
// the bytes in registers, the CPU in its loops; the 256-token prefill step's
// sorted expert products run as the tensor-core kernel with three bf16
// terms a row value (as exact as f32). k3-tiny-mxbw: the same kernel with
// its rows rounded to bf16 (the default products) on a top-k = E config,
// within twice what bf16 activations change on the CPU at MXFP4.
// k3-tiny: 300 tokens = one 256-token GPU prefill step + 44 decode steps
// (CPU: four 64-token steps + 44); k3-mini: 70 = one 64-token step + 6.
// k3-tiny-kda: k3-tiny with the generated KDA kernels (--gpu-kda-kernels)
// against the CPU target with their bf16 I/O rounding (--kda-bf16-io),
// bounded by what that rounding changes (k3-tiny-cpu, unrounded).
// k3-tiny-bf16 / k3-tiny-mxfp4-bf16 / k3-mini-bf16: the GPU's default
// configuration, bf16 activations (bf16 tensors between kernels, f32
// accumulation and KDA state, bf16 MLA cache) with the generated KDA and MLA
// kernels, dense bf16 or MXFP4 experts, against the f32 CPU artifact within
// twice what bf16 activations change on the CPU; top-k = E.
// k3-tiny-bf16-m32 / k3-tiny-mxfp4-bf16-m32: k3-tiny-bf16 and
// k3-tiny-mxfp4-bf16 in 16-token prefill steps whose experts are sorted
// (16 rows an expert): the expert products' 32-row tiles.
// k3-tiny-mxfp4-wide / -m32: k3-tiny-mxfp4-bf16 and its -m32 on wider
// experts (k 384 and 256: the MXFP4 expert products' cp.async stages, codes
// decoded in registers), against CPU artifacts of the same config.
// k3-tiny-mla / k3-mini-mla: MLA prefill through the generated kernel
// (--gpu-mla-kernels; f16 products inside) in 96- / 64-token steps, against
// CPU artifacts of the same configs, which route every token to every expert
// (test/gpu/CMakeLists.txt says why): no routing near-tie can turn the f16
// rounding into a different expert, so every row is bounded by 5e-4.
INSTANTIATE_TEST_SUITE_P(Models, ModelGpu,
                         ::testing::Values(ModelCase{"k3-tiny", 300, 6},
                                           ModelCase{"k3-tiny-f32", 300, 6},
                                           ModelCase{"k3-tiny-mxfp4", 300, 6},
                                           ModelCase{"k3-tiny-bw", 300, 6, 0,
                                                     "k3-tiny-a16"},
                                           ModelCase{"k3-tiny-mxbw", 300, 6, 0,
                                                     "k3-tiny-mxa16"},
                                           ModelCase{"k3-mini", 70, 3},
                                           ModelCase{"k3-tiny-kda", 300, 6, 0,
                                                     "k3-tiny"},
                                           ModelCase{"k3-tiny-mla", 300, 6, 5e-4,
                                                     nullptr, 5e-4},
                                           ModelCase{"k3-mini-mla", 70, 3, 5e-4,
                                                     nullptr, 5e-4},
                                           ModelCase{"k3-tiny-bf16", 300, 6, 0,
                                                     "k3-tiny-a16", 0, 1e-2},
                                           ModelCase{"k3-tiny-mxfp4-bf16", 300,
                                                     6, 0, "k3-tiny-mxa16", 0,
                                                     1e-2},
                                           ModelCase{"k3-tiny-bf16-m32", 300, 6,
                                                     0, "k3-tiny-a16", 0, 1e-2},
                                           ModelCase{"k3-tiny-mxfp4-bf16-m32",
                                                     300, 6, 0, "k3-tiny-mxa16",
                                                     0, 1e-2},
                                           ModelCase{"k3-tiny-mxfp4-wide", 300,
                                                     6, 0, "k3-tiny-mxwa16", 0,
                                                     1e-2},
                                           ModelCase{"k3-tiny-mxfp4-wide-m32",
                                                     300, 6, 0, "k3-tiny-mxwa16",
                                                     0, 1e-2},
                                           ModelCase{"k3-mini-bf16", 70, 3, 0,
                                                     "k3-mini-a16", 0, 1e-2}),
                         [](const auto &info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

} // namespace

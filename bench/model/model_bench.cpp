//===- model_bench.cpp - Prefill and decode tokens/s of a compiled model ---===//
//
//   kimi-bench-model MODEL.kimi [--batch-artifact MODEL_B64.kimi]
//                    [--prefill-tokens N] [--decode-steps N] [--context C]
//                    [--repeats R] [--warmup W] [--seed S]
//                    [--prefill-logits last|all]
//
// Runs any artifact (CPU or GPU target) with deterministic random weights
// and prints one JSON object:
//  * prefill: a fresh session prefills N random tokens (median of R, after
//    W untimed rounds of prefill and decode: the first call loads kernels
//    and times cuBLASLt's candidates),
//    copying out the last logits row (what generation needs) or, with
//    --prefill-logits all, every row as kimi-run --dump-logits does;
//  * decode batch 1: the same session decodes N more tokens, one at a time;
//  * decode batch B (with --batch-artifact, a model compiled with
//    --batch B): a session of B sequences restored from random states and
//    caches (C rows each; on a GPU they are uploaded once and stay there),
//    median time of a decode step;
//  * the batch-1 HBM floor: bytes a decode step must read (every weight
//    except the embedding table, k of E routed experts, the recurrent
//    states and C cache rows, in the artifact's stored types) over the
//    device-to-device copy rate measured in the same run (GPU targets),
//    and the same with the routed experts at the release's MXFP4 (the
//    floor of the model as shipped, whatever this artifact stores); the
//    manifest's weight bytes by type next to what the device holds;
//  * GPU targets: the most device memory in use (the driver's total - free)
//    seen after each phase, for the batch-1 and the batched model
//    (device_bytes_in_use_max).
// Numbers and commands are kept in docs/perf/model.md.
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/reader.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/gpu_model_executable.h"
#include "runtime/session/executable.h"
#include "runtime/session/session.h"
#include "runtime/weights/json.h"
#include "runtime/weights/random_weights.h"
#include "runtime/weights/weight_loader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kimi::rt;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
/// cuProfilerStart / cuProfilerStop of the driver the runtime loaded, for
/// `ncu --profile-from-start off` (--cuda-profiler-step).
void cudaProfiler(bool start) {
  void *cuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  using Fn = int (*)();
  Fn fn = cuda ? reinterpret_cast<Fn>(::dlsym(
                     cuda, start ? "cuProfilerStart" : "cuProfilerStop"))
               : nullptr;
  if (!fn || fn() != 0)
    std::fprintf(stderr, "kimi-bench-model: cuProfiler%s failed\n",
                 start ? "Start" : "Stop");
}
[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "kimi-bench-model: %s\n", what.c_str());
  std::exit(1);
}
template <typename T> T orDie(StatusOr<T> v, const char *what) {
  if (!v.isOk())
    die(std::string(what) + ": " + v.status().message());
  return std::move(v.value());
}

struct Loaded {
  std::shared_ptr<const ArtifactSpec> artifact;
  std::shared_ptr<Executable> exe;
};

/// The artifact at `path` with random weights for `seed`: written to a host
/// file and loaded, or with `onDevice` (GPU models) generated on the device,
/// the same values without the file.
Loaded load(const std::string &path, long seed, bool onDevice) {
  Loaded l;
  l.artifact = std::make_shared<const ArtifactSpec>(
      orDie(ArtifactReader::readFile(path), path.c_str()));
  if (onDevice) {
    if (l.artifact->target.kind != TargetKind::kSm90a)
      die(path + ": --device-random-weights needs a GPU model (target " +
          l.artifact->target.name() + ")");
    std::fprintf(stderr, "kimi-bench-model: generating %zu weights of %s on "
                         "the device\n", l.artifact->weights.size(), path.c_str());
    l.exe = orDie(GpuModelExecutable::createWithRandomWeights(l.artifact,
                                                              uint64_t(seed)),
                  path.c_str());
    return l;
  }
  auto loader = orDie(openRandomWeights(*l.artifact, uint64_t(seed), ""), "random weights");
  l.exe = orDie(createExecutable(l.artifact, *loader), path.c_str());
  return l;
}

int64_t configInt(const ArtifactSpec &a, const char *key, int64_t fallback) {
  auto json = parseJson(a.model.configJson.data(), a.model.configJson.size());
  if (!json.isOk())
    return fallback;
  const JsonValue *root = &json.value();
  if (const JsonValue *text = root->find("text_config"))
    root = text;
  const JsonValue *v = root->find(key);
  return v && v->isUint64 ? static_cast<int64_t>(v->uint64) : fallback;
}

/// Bytes one batch-1 decode step reads at context `context`, each weight at
/// its stored type, or with `mxfp4Experts` the routed experts at the
/// release's MXFP4 (17/32 of a byte a value: half a byte and an E8M0 scale
/// per 32) whatever the artifact stores.
double decodeBytes(const ArtifactSpec &a, int64_t context,
                   bool mxfp4Experts = false) {
  const double experts = configInt(a, "num_experts", 0);
  const double topK = configInt(a, "num_experts_per_token", 0);
  double bytes = 0;
  for (const WeightSpec &w : a.weights) {
    const bool expert = w.name.find(".experts.") != std::string::npos;
    double b = double(storedBytes(w.dtype, w.blockNumel()));
    if (expert && mxfp4Experts)
      b = w.dtype == DType::kF8E8M0 ? 0 : double(w.blockNumel()) * 17.0 / 32.0;
    if (w.name.find("embed_tokens") != std::string::npos)
      b = b / double(w.shape[0]); // one row
    else if (expert && experts > 0)
      b *= topK / experts;
    bytes += b;
  }
  if (const EntrySpec *d = a.findEntry("decode"))
    for (const TensorSpec &t : d->inputs) {
      if (t.role != TensorRole::kState && t.role != TensorRole::kCache)
        continue;
      double n = dtypeSize(t.dtype);
      for (int64_t dim : t.shape)
        n *= dim == -1 ? double(context) : double(dim);
      bytes += n;
    }
  return bytes;
}

/// Device-to-device copy rate, bytes read + written per second.
double copyRate() {
  auto device = CudaDevice::open(0);
  if (!device.isOk())
    return 0;
  const size_t bytes = size_t(1) << 30;
  auto a = DeviceBuffer::allocate(*device.value(), bytes);
  auto b = DeviceBuffer::allocate(*device.value(), bytes);
  auto stream = CudaStream::create(*device.value());
  auto e0 = CudaEvent::create(*device.value());
  auto e1 = CudaEvent::create(*device.value());
  if (!a.isOk() || !b.isOk() || !stream.isOk() || !e0.isOk() || !e1.isOk())
    return 0;
  std::vector<double> rates;
  for (int i = 0; i < 6; ++i) {
    (void)e0.value()->record(stream.value().get());
    (void)b.value().copyFrom(a.value(), bytes, stream.value().get());
    (void)e1.value()->record(stream.value().get());
    auto ms = CudaEvent::elapsedMs(*e0.value(), *e1.value());
    if (ms.isOk() && i > 0)
      rates.push_back(2.0 * double(bytes) / (ms.value() * 1e-3));
  }
  return rates.empty() ? 0 : median(rates);
}

HostTensor randomTensor(const TensorSpec &spec, int64_t dynamic, std::mt19937 &rng,
                        int64_t vocab) {
  HostTensor t;
  t.dtype = spec.dtype;
  t.shape = spec.shape;
  for (int64_t &d : t.shape)
    if (d == -1)
      d = dynamic;
  int64_t n = 1;
  for (int64_t d : t.shape)
    n *= d;
  t.buffer = orDie(HostBuffer::allocate(size_t(n) * dtypeSize(spec.dtype)), "host");
  if (spec.dtype == DType::kI32) {
    auto *p = reinterpret_cast<int32_t *>(t.buffer.data);
    for (int64_t i = 0; i < n; ++i)
      p[i] = int32_t(rng() % uint32_t(vocab));
  } else if (spec.dtype == DType::kF32) {
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    auto *p = reinterpret_cast<float *>(t.buffer.data);
    for (int64_t i = 0; i < n; ++i)
      p[i] = u(rng);
  } else {
    std::memset(t.buffer.data, 0, t.buffer.size);
  }
  return t;
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help")) {
    std::fprintf(stderr,
                 "usage: kimi-bench-model MODEL.kimi [--batch-artifact B.kimi] "
                 "[--prefill-tokens N] [--decode-steps N] [--context C] "
                 "[--repeats R] [--warmup W] [--seed S] "
                 "[--prefill-logits last|all] [--profile] "
                 "[--cuda-profiler-step N] [--device-random-weights]\n"
                 "  --device-random-weights  GPU models: generate the random "
                 "weights on the\n"
                 "             device (the same values; no host file: for "
                 "shapes too large\n"
                 "             for one), and release the batch-1 model "
                 "before the batched one\n"
                 "  --repeats  timed rounds of prefill and decode (median; "
                 "default 3),\n"
                 "             and timed batched decode steps after three "
                 "untimed ones\n"
                 "             (kernels, the graph key, its capture)\n"
                 "  --warmup   untimed rounds before them (default 1): the "
                 "first call loads\n"
                 "             kernels and times cuBLASLt's candidates\n"
                 "  --prefill-logits  logits a prefill copies out of the "
                 "executable:\n"
                 "             the last row (default) or every row\n"
                 "  --profile  GPU models: per-kernel device times of each "
                 "phase on stderr\n"
                 "             (CUDA events around every launch: the JSON "
                 "times include them)\n"
                 "  --profile-rows N  kernels listed per phase (default 40)\n"
                 "  --cuda-profiler-step N  GPU models: decode step N of the "
                 "last round\n"
                 "             between cuProfilerStart and cuProfilerStop "
                 "(for ncu\n"
                 "             --profile-from-start off: one step's kernels)\n");
    return 2;
  }
  std::string model = argv[1], batchModel;
  long prefillTokens = 8192, decodeSteps = 32, context = 1024, repeats = 3,
       warmup = 1, seed = 1, profileRows = 40, profilerStep = -1;
  bool profile = false, deviceWeights = false;
  PrefillLogits prefillLogits = PrefillLogits::kLast;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--profile") {
      profile = true;
      continue;
    }
    if (a == "--device-random-weights") {
      deviceWeights = true;
      continue;
    }
    if (i + 1 >= argc)
      die("option " + a + " needs a value");
    std::string value = argv[++i];
    if (a == "--batch-artifact") {
      batchModel = value;
      continue;
    }
    if (a == "--prefill-logits") {
      if (value != "last" && value != "all")
        die("--prefill-logits takes 'last' or 'all', not '" + value + "'");
      prefillLogits = value == "all" ? PrefillLogits::kAll : PrefillLogits::kLast;
      continue;
    }
    long v = std::atol(value.c_str());
    if (a == "--prefill-tokens") prefillTokens = v;
    else if (a == "--decode-steps") decodeSteps = v;
    else if (a == "--context") context = v;
    else if (a == "--repeats") repeats = v;
    else if (a == "--warmup") warmup = v;
    else if (a == "--profile-rows") profileRows = v;
    else if (a == "--seed") seed = v;
    else if (a == "--cuda-profiler-step") profilerStep = v;
    else
      die("unknown option " + a);
  }
  if (prefillTokens < 1 || decodeSteps < 1 || repeats < 1 || context < 1)
    die("counts must be positive");
  if (warmup < 0 || profileRows < 1)
    die("--warmup must be >= 0 and --profile-rows >= 1");

  Loaded m = load(model, seed, deviceWeights);
  const ArtifactSpec &a = *m.artifact;
  if (profile)
    m.exe->setProfiling(true);
  auto session = orDie(Session::create(m.exe), "session");
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<int32_t> prompt(prefillTokens);
  for (int32_t &t : prompt)
    t = static_cast<int32_t>(rng() % a.model.vocabSize);

  // Device memory in use (the driver's total - free), sampled after each
  // phase: the allocator keeps its blocks, so a phase's high-water mark of
  // buffers stays visible at its end.
  int64_t usedBatch1 = -1, usedBatched = -1;
  auto sampleUsed = [](const Executable &exe, int64_t &most) {
    if (auto *gpu = dynamic_cast<const GpuModelExecutable *>(&exe))
      most = std::max(most, gpu->deviceBytesInUse());
  };
  sampleUsed(*m.exe, usedBatch1);
  std::vector<double> prefillS, decodeS;
  std::vector<double> stepS; // every timed decode step by itself
  std::vector<Executable::CallTimes> decodeTimes; // per timed round
  for (long r = -warmup; r < repeats; ++r) {
    const bool timed = r >= 0;
    auto t0 = std::chrono::steady_clock::now();
    auto p = session->prefill(prompt, prefillLogits);
    auto t1 = std::chrono::steady_clock::now();
    if (!p.isOk())
      die("prefill: " + p.status().message());
    sampleUsed(*m.exe, usedBatch1);
    if (profile && timed)
      std::fprintf(stderr, "== prefill of %ld tokens\n%s", prefillTokens,
                   m.exe->profileReport(profileRows).c_str());
    m.exe->clearProfile(); // the profile and call times of the decode steps
    for (long i = 0; i < decodeSteps; ++i) {
      const bool ranged = r == repeats - 1 && i == profilerStep;
      if (ranged)
        cudaProfiler(true);
      auto s0 = std::chrono::steady_clock::now();
      auto d = session->decodeStep(prompt[i % prompt.size()]);
      if (!d.isOk())
        die("decode: " + d.status().message());
      if (ranged)
        cudaProfiler(false);
      if (timed)
        stepS.push_back(seconds(s0, std::chrono::steady_clock::now()));
    }
    auto t2 = std::chrono::steady_clock::now();
    sampleUsed(*m.exe, usedBatch1);
    const Executable::CallTimes times = m.exe->callTimes();
    if (profile && timed)
      std::fprintf(stderr, "== %ld decode steps, batch 1\n%s", decodeSteps,
                   m.exe->profileReport(profileRows).c_str());
    m.exe->clearProfile();
    if (!timed)
      continue;
    decodeTimes.push_back(times);
    prefillS.push_back(seconds(t0, t1));
    decodeS.push_back(seconds(t1, t2) / double(decodeSteps));
  }

  // What the report needs of the batch-1 model; with device weights it is
  // released before the batched one loads (both may not fit at once).
  const std::string deviceName = m.exe->deviceName();
  const int64_t weightBytes = m.exe->weightBytes();
  int64_t weightDeviceBytes = -1;
  if (auto *gpu = dynamic_cast<const GpuModelExecutable *>(m.exe.get()))
    weightDeviceBytes = gpu->weightDeviceBytes();
  if (deviceWeights) {
    session.reset();
    m.exe.reset();
  }

  // Batched decode: a session restored from random states and caches.
  long batch = 0;
  std::vector<double> batchS;
  Executable::CallTimes batchTimes; // the timed batched steps'
  if (!batchModel.empty()) {
    Loaded bm = load(batchModel, seed, deviceWeights);
    if (profile)
      bm.exe->setProfiling(true);
    const EntrySpec *d = bm.artifact->findEntry("decode");
    if (!d)
      die(batchModel + ": no decode entry");
    batch = d->inputs[0].shape[0];
    auto bs = orDie(Session::create(bm.exe), "batched session");
    SessionSnapshot start;
    for (const Session::Slot &slot : bs->slots())
      start.tensors.push_back(std::make_shared<HostCarriedTensor>(
          randomTensor(slot.spec, context, rng, bm.artifact->model.vocabSize)));
    start.length = context;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    start.lastLogits.resize(size_t(batch * bm.artifact->model.vocabSize));
    for (float &x : start.lastLogits)
      x = u(rng);
    Status restored = bs->restoreState(start);
    sampleUsed(*bm.exe, usedBatched);
    if (!restored.isOk())
      die("batched decode: " + restored.message());
    std::vector<int32_t> tokens(size_t(batch), 0);
    // Untimed: the first call loads the kernels, the second repeats its
    // graph key, the third captures the graph the timed steps replay.
    const long batchWarmup = 3;
    for (long r = -batchWarmup; r < repeats; ++r) {
      for (int32_t &t : tokens)
        t = int32_t(rng() % uint32_t(bm.artifact->model.vocabSize));
      auto t0 = std::chrono::steady_clock::now();
      auto st = bs->decode(tokens.data(), tokens.size());
      auto t1 = std::chrono::steady_clock::now();
      if (!st.isOk())
        die("batched decode: " + st.status().message());
      if (r >= 0)
        batchS.push_back(seconds(t0, t1));
      else
        bm.exe->clearProfile();
    }
    batchTimes = bm.exe->callTimes();
    sampleUsed(*bm.exe, usedBatched);
    if (profile)
      std::fprintf(stderr, "== %ld decode steps, batch %ld\n%s", repeats, batch,
                   bm.exe->profileReport(profileRows).c_str());
  }

  const double rate = a.target.kind == TargetKind::kCpu ? 0 : copyRate();
  const int64_t floorContext = prefillTokens + decodeSteps / 2;
  const double bytes = decodeBytes(a, floorContext);
  const double mxfp4Bytes = decodeBytes(a, floorContext, /*mxfp4Experts=*/true);
  // The manifest's bytes by stored type: what the floor counts, and what
  // the device should hold (weight_bytes, measured by the executable).
  std::map<std::string, int64_t> byType;
  int64_t manifestBytes = 0;
  for (const WeightSpec &w : a.weights) {
    const int64_t n = storedBytes(w.dtype, w.blockNumel());
    byType[dtypeName(w.dtype)] += n;
    manifestBytes += n;
  }
  const double p = median(prefillS), d = median(decodeS);
  std::printf("{\n  \"model\": \"%s\",\n  \"target\": \"%s\",\n"
              "  \"device\": \"%s\",\n  \"weight_bytes\": %lld,\n"
              "  \"manifest_weight_bytes\": %lld,\n",
              a.model.modelType.c_str(), a.target.name().c_str(),
              deviceName.c_str(), (long long)weightBytes,
              (long long)manifestBytes);
  // GPU models: the device memory the uploads took, by the driver.
  if (weightDeviceBytes >= 0)
    std::printf("  \"weight_device_bytes_measured\": %lld,\n",
                (long long)weightDeviceBytes);
  if (usedBatch1 >= 0 || usedBatched >= 0)
    std::printf("  \"device_bytes_in_use_max\": {\"batch1\": %lld, "
                "\"batched\": %lld},\n",
                (long long)usedBatch1, (long long)usedBatched);
  std::printf("  \"random_weights\": \"%s\",\n",
              deviceWeights ? "generated on the device" : "host file");
  std::printf("  \"weight_bytes_by_type\": {");
  for (auto it = byType.begin(); it != byType.end(); ++it)
    std::printf("%s\"%s\": %lld", it == byType.begin() ? "" : ", ",
                it->first.c_str(), (long long)it->second);
  std::printf("},\n");
  std::printf("  \"prefill\": {\"tokens\": %ld, \"logits\": \"%s\", "
              "\"ms_median\": %.3f, \"tokens_per_s\": %.1f},\n",
              prefillTokens,
              prefillLogits == PrefillLogits::kAll ? "all" : "last", p * 1e3,
              double(prefillTokens) / p);
  // Host issue and device wait per step (GPU models), of the round whose
  // step time is the median: a wait near zero means the host is the limit.
  std::vector<std::pair<double, Executable::CallTimes>> rounds;
  for (size_t i = 0; i < decodeS.size(); ++i)
    rounds.push_back({decodeS[i], decodeTimes[i]});
  std::sort(rounds.begin(), rounds.end(),
            [](const auto &x, const auto &y) { return x.first < y.first; });
  const Executable::CallTimes &mid = rounds[rounds.size() / 2].second;
  std::printf("  \"decode\": [\n    {\"batch\": 1, \"context\": %ld, "
              "\"ms_per_step_median\": %.3f, \"tokens_per_s\": %.1f",
              prefillTokens, d * 1e3, 1.0 / d);
  // The median single step: steady state, without a graph capture (the
  // mean above includes the steps that capture).
  std::printf(", \"ms_per_single_step_median\": %.3f", median(stepS) * 1e3);
  if (mid.calls > 0)
    std::printf(", \"host_issue_ms_per_step\": %.3f, "
                "\"device_wait_ms_per_step\": %.3f, \"graph_replays\": %lld, "
                "\"graph_captures\": %lld, \"graph_updates\": %lld, "
                "\"graph_capture_ms\": %.3f, \"graph_instantiate_ms\": %.3f",
                mid.issueMs / double(mid.calls), mid.waitMs / double(mid.calls),
                (long long)mid.graphReplays, (long long)mid.graphCaptures,
                (long long)mid.graphUpdates, mid.graphCaptureMs,
                mid.graphInstantiateMs);
  std::printf("}");
  if (batch > 0) {
    double b = median(batchS);
    std::printf(",\n    {\"batch\": %ld, \"context\": %ld, "
                "\"ms_per_step_median\": %.3f, \"tokens_per_s\": %.1f",
                batch, context, b * 1e3, double(batch) / b);
    // Host issue against device wait (a wait near zero: the host is the
    // limit), and graph replays, over the timed steps.
    if (batchTimes.calls > 0)
      std::printf(", \"host_issue_ms_per_step\": %.3f, "
                  "\"device_wait_ms_per_step\": %.3f, \"graph_replays\": %lld",
                  batchTimes.issueMs / double(batchTimes.calls),
                  batchTimes.waitMs / double(batchTimes.calls),
                  (long long)batchTimes.graphReplays);
    std::printf("}");
  }
  std::printf("\n  ],\n  \"hbm_floor_batch1\": {\"context\": %lld, "
              "\"bytes_per_step\": %.0f, \"copy_gbps\": %.1f, \"floor_ms\": %.4f, "
              "\"measured_over_floor\": %.2f, \"types\": \"stored\", "
              "\"bytes_per_step_mxfp4_experts\": %.0f, "
              "\"floor_ms_mxfp4_experts\": %.4f, "
              "\"measured_over_floor_mxfp4_experts\": %.2f},\n",
              (long long)floorContext, bytes, rate * 1e-9,
              rate > 0 ? bytes / rate * 1e3 : 0.0,
              rate > 0 ? d / (bytes / rate) : 0.0, mxfp4Bytes,
              rate > 0 ? mxfp4Bytes / rate * 1e3 : 0.0,
              rate > 0 ? d / (mxfp4Bytes / rate) : 0.0);
  std::printf("  \"repeats\": %ld,\n  \"warmup\": %ld\n}\n", repeats, warmup);
  return 0;
}

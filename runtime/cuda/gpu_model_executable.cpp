//===- gpu_model_executable.cpp - A GPU model artifact ready to run -------===//

#include "runtime/cuda/gpu_model_executable.h"
#include "runtime/cuda/device_random.h"
#include "runtime/cuda/gpu_module_table.h"
#include "runtime/cuda/segment_copy.h"
#include "runtime/comm/communicator.h"
#include "runtime/artifact/validate.h"
#include "runtime/cpu/entry_call.h"
#include "runtime/cpu/memref.h"
#include "runtime/support/text.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

namespace kimi::rt {

//===----------------------------------------------------------------------===//
// The shim table (runtime/abi/kimi_module_abi.h)
//===----------------------------------------------------------------------===//


/// Device time per kernel (GpuModelExecutable::setProfiling).
struct KernelProfile {
  struct Stat {
    int64_t calls = 0;
    double ms = 0;
    std::string shape; // of the last launch
  };
  struct Pending {
    std::string label, shape;
    size_t event; // events[event] and events[event + 1]
  };
  bool on = false;
  std::map<void *, std::string> names; // CUfunction -> kernel name
  std::vector<std::unique_ptr<CudaEvent>> events; // reused across calls
  std::vector<Pending> pending;
  size_t used = 0;
  std::map<std::string, Stat> stats;
  double entryMs = 0;
  int64_t entryCalls = 0;
  int64_t hostReads = 0; // synchronising reads (kimi.host_read)
  int64_t graphReplays = 0; // entry calls replayed as graphs
  Executable::CallTimes times; // kept with profiling off as well
  bool inGraph = false; // the events become nodes of the graph captured

  /// Two recorded events bracket `launch`.
  template <typename Launch>
  Status time(const CudaDevice &device, const CudaStream &stream,
              std::string label, std::string shape, Launch &&launch) {
    while (events.size() < used + 2) {
      KIMI_ASSIGN_OR_RETURN(std::unique_ptr<CudaEvent> e, CudaEvent::create(device));
      events.push_back(std::move(e));
    }
    KIMI_RETURN_IF_ERROR(events[used]->record(&stream, inGraph));
    KIMI_RETURN_IF_ERROR(launch());
    KIMI_RETURN_IF_ERROR(events[used + 1]->record(&stream, inGraph));
    pending.push_back({std::move(label), std::move(shape), used});
    used += 2;
    return Status::ok();
  }
  /// After the stream was synchronised: the pending times into the stats.
  void collect() {
    add(events, pending);
    pending.clear();
    used = 0;
  }
  /// The times of `recorded` (pairs of `in`) into the stats.
  void add(const std::vector<std::unique_ptr<CudaEvent>> &in,
           const std::vector<Pending> &recorded) {
    for (const Pending &p : recorded) {
      StatusOr<float> ms = CudaEvent::elapsedMs(*in[p.event], *in[p.event + 1]);
      Stat &st = stats[p.label];
      st.calls += 1;
      st.ms += ms.isOk() ? ms.value() : 0.0;
      st.shape = p.shape;
    }
  }
};

struct GpuModelExecutable::Shim {
  KernelProfile profile;
  const CudaDevice *device = nullptr;
  const CudaStream *stream = nullptr;
  DeviceAllocator *allocator = nullptr;
  CublasLt *blas = nullptr;
  std::string blasError; // why cuBLASLt could not be loaded
  std::vector<cuda::CUmodule> modules;
  Status error; // the first failure of the current call
  bool capturing = false; // the stream is being captured into a graph
  // The artifact's kernels begin with griddepcontrol.wait: launch them with
  // programmatic stream serialization, so that each one's launch overlaps
  // the end of the kernel before it (KIMI_GPU_PDL=0 turns it off).
  bool programmaticLaunch = false;
  // Kernels allowed their dynamic shared memory above the default 48 KiB
  // (cuFuncSetAttribute once each, before their first launch), and how much.
  std::map<void *, int32_t> sharedOptIn;

  int32_t fail(Status s) {
    if (error.isOk())
      error = std::move(s);
    return 1;
  }
  static Shim &of(void *ctx) { return *static_cast<Shim *>(ctx); }

  static int32_t loadModule(void *ctx, const void *image, uint64_t size,
                            void **module) {
    Shim &s = of(ctx);
    if (s.capturing)
      return s.fail(executionError("a kernel module loaded while capturing a "
                                   "graph (a kernel the direct call did not "
                                   "run)"));
    const CudaDriver &d = s.device->driver();
    cuda::CUmodule m = nullptr;
    // size 0: NUL-terminated PTX, JIT-compiled by the driver.
    cuda::CUresult r = d.cuModuleLoadDataEx(&m, image, 0, nullptr, nullptr);
    if (r != 0)
      return s.fail(d.check(r, size ? "cuModuleLoadDataEx (cubin)"
                                    : "cuModuleLoadDataEx (PTX)"));
    s.modules.push_back(m);
    *module = m;
    return 0;
  }
  static int32_t getFunction(void *ctx, void *module, const char *name,
                             void **function) {
    Shim &s = of(ctx);
    const CudaDriver &d = s.device->driver();
    cuda::CUfunction f = nullptr;
    cuda::CUresult r = d.cuModuleGetFunction(
        &f, static_cast<cuda::CUmodule>(module), name);
    if (r != 0)
      return s.fail(d.check(r, ("cuModuleGetFunction '" + std::string(name) +
                                "'").c_str()));
    *function = f;
    if (s.profile.on)
      s.profile.names[f] = name;
    return 0;
  }
  static int32_t launch(void *ctx, void *function, int64_t gx, int64_t gy,
                        int64_t gz, int64_t bx, int64_t by, int64_t bz,
                        int32_t smem, void **params) {
    Shim &s = of(ctx);
    if (gx > INT32_MAX || gy > 65535 || gz > 65535 || bx * by * bz > 1024)
      return s.fail(executionError(
          "kernel launch of grid (" + std::to_string(gx) + ", " +
          std::to_string(gy) + ", " + std::to_string(gz) + ") x block (" +
          std::to_string(bx) + ", " + std::to_string(by) + ", " +
          std::to_string(bz) + ") exceeds the hardware limits"));
    const CudaDriver &d = s.device->driver();
    if (smem > 48 * 1024) {
      int32_t &allowed = s.sharedOptIn[function];
      if (allowed < smem) {
        auto it = s.profile.names.find(function);
        Status st = s.device->allowDynamicSharedMemory(
            static_cast<cuda::CUfunction>(function), smem,
            it == s.profile.names.end() ? "a kernel" : "kernel '" + it->second + "'");
        if (!st.isOk())
          return s.fail(std::move(st));
        allowed = smem;
      }
    }
    auto go = [&] {
      cuda::CudaLaunchAttribute overlap;
      overlap.id = cuda::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      overlap.value.programmaticStreamSerializationAllowed = 1;
      cuda::CudaLaunchConfig config;
      config.gridDimX = unsigned(gx);
      config.gridDimY = unsigned(gy);
      config.gridDimZ = unsigned(gz);
      config.blockDimX = unsigned(bx);
      config.blockDimY = unsigned(by);
      config.blockDimZ = unsigned(bz);
      config.sharedMemBytes = unsigned(smem);
      config.hStream = s.stream->handle();
      // Without the attribute, cuLaunchKernelEx is cuLaunchKernel.
      config.attrs = s.programmaticLaunch ? &overlap : nullptr;
      config.numAttrs = s.programmaticLaunch ? 1 : 0;
      return d.check(d.cuLaunchKernelEx(&config,
                                        static_cast<cuda::CUfunction>(function),
                                        params, nullptr),
                     s.programmaticLaunch
                         ? "cuLaunchKernelEx (programmatic dependent launch)"
                         : "cuLaunchKernelEx");
    };
    Status st = Status::ok();
    if (s.profile.on) {
      auto it = s.profile.names.find(function);
      st = s.profile.time(
          *s.device, *s.stream,
          it == s.profile.names.end() ? "?" : it->second,
          std::to_string(gx) + "x" + std::to_string(gy) + "x" +
              std::to_string(gz) + " blocks of " +
              std::to_string(bx * by * bz),
          go);
    } else {
      st = go();
    }
    return st.isOk() ? 0 : s.fail(std::move(st));
  }
  static int32_t alloc(void *ctx, uint64_t bytes, void **ptr) {
    Shim &s = of(ctx);
    StatusOr<cuda::CUdeviceptr> p = s.allocator->allocate(bytes);
    if (!p.isOk())
      return s.fail(p.takeStatus());
    *ptr = reinterpret_cast<void *>(p.value());
    return 0;
  }
  static int32_t gemm(void *ctx, const int64_t *d) {
    Shim &s = of(ctx);
    if (!s.blas)
      return s.fail(moduleError("the model runs matrix products through "
                                "cuBLASLt, which could not be loaded: " +
                                s.blasError));
    GemmF32 g;
    g.a = cuda::CUdeviceptr(d[KIMI_GEMM_A]);
    g.b = cuda::CUdeviceptr(d[KIMI_GEMM_B]);
    g.c = cuda::CUdeviceptr(d[KIMI_GEMM_C]);
    g.m = d[KIMI_GEMM_M], g.n = d[KIMI_GEMM_N], g.k = d[KIMI_GEMM_K];
    g.batch = d[KIMI_GEMM_BATCH];
    g.aM = d[KIMI_GEMM_A_STRIDE_M], g.aK = d[KIMI_GEMM_A_STRIDE_K];
    g.aBatch = d[KIMI_GEMM_A_STRIDE_BATCH];
    g.bK = d[KIMI_GEMM_B_STRIDE_K], g.bN = d[KIMI_GEMM_B_STRIDE_N];
    g.bBatch = d[KIMI_GEMM_B_STRIDE_BATCH];
    g.cM = d[KIMI_GEMM_C_STRIDE_M], g.cN = d[KIMI_GEMM_C_STRIDE_N];
    g.cBatch = d[KIMI_GEMM_C_STRIDE_BATCH];
    g.precision = static_cast<int32_t>(d[KIMI_GEMM_PRECISION]);
    const int64_t flags = d[KIMI_GEMM_FLAGS];
    // Static sizes: time the candidates (never while capturing a graph: the
    // direct call before the capture has chosen them).
    g.tune = (flags & KIMI_GEMM_FLAG_STATIC_SIZES) != 0 && !s.capturing;
    g.overwrite = (flags & KIMI_GEMM_FLAG_OVERWRITE) != 0;
    g.cBf16 = (flags & KIMI_GEMM_FLAG_C_BF16) != 0;
    if (flags & ~int64_t(KIMI_GEMM_FLAGS_KNOWN))
      return s.fail(invalidArgument("kimi_gpu_gemm_f32: unknown flags " +
                                    std::to_string(flags)));
    // Profiling: the plan first (and its timing, for compile-time shapes),
    // so that the events time the product alone. Otherwise gemm() builds it
    // on first use, and the hot path looks the plan up once.
    if (s.profile.on)
      if (Status prepared = s.blas->prepare(g, s.stream->handle()); !prepared.isOk())
        return s.fail(std::move(prepared));
    auto go = [&] { return s.blas->gemm(g, s.stream->handle()); };
    // Profile rows by shape and layout (strides of m/k, k/n, m/n): one
    // shape can hide products of very different speed.
    auto strides = [](int64_t x, int64_t y) {
      return "(" + std::to_string(x) + "," + std::to_string(y) + ")";
    };
    Status st = s.profile.on
                    ? s.profile.time(*s.device, *s.stream,
                                     "cublasLt gemm " + std::to_string(g.m) +
                                         "x" + std::to_string(g.n) + "x" +
                                         std::to_string(g.k) + " a" +
                                         strides(g.aM, g.aK) + " b" +
                                         strides(g.bK, g.bN) + " c" +
                                         strides(g.cM, g.cN),
                                     "batch " + std::to_string(g.batch), go)
                    : go();
    if (!st.isOk())
      return s.fail(std::move(st));
    return 0;
  }
  /// A device value the host code needs (kimi.host_read): after the work
  /// queued before it.
  static int32_t readI32(void *ctx, const void *address, int32_t *value) {
    Shim &s = of(ctx);
    if (s.capturing)
      return s.fail(executionError(
          "the entry reads a device value on the host (kimi.host_read, e.g. "
          "sorted experts' largest count), which a graph cannot capture"));
    Status st = s.stream->synchronize();
    if (st.isOk()) {
      const CudaDriver &d = s.device->driver();
      st = d.check(d.cuMemcpyDtoH(value, reinterpret_cast<cuda::CUdeviceptr>(address),
                                  sizeof(int32_t)),
                   "cuMemcpyDtoH (host read)");
    }
    if (s.profile.on)
      s.profile.hostReads += 1;
    if (!st.isOk())
      return s.fail(st.addContext("host read of a device value"));
    return 0;
  }
  static int32_t release(void *ctx, void *ptr) {
    Shim &s = of(ctx);
    Status st = s.allocator->release(reinterpret_cast<cuda::CUdeviceptr>(ptr));
    return st.isOk() ? 0 : s.fail(std::move(st));
  }
};

//===----------------------------------------------------------------------===//
// GpuModelExecutable
//===----------------------------------------------------------------------===//

StatusOr<std::shared_ptr<GpuModelExecutable>>
GpuModelExecutable::create(std::shared_ptr<const ArtifactSpec> artifact,
                           const WeightLoader &weights, int device,
                           Communicator *comm) {
  return createImpl(std::move(artifact), &weights, nullptr, device, comm);
}

StatusOr<std::shared_ptr<GpuModelExecutable>>
GpuModelExecutable::createWithRandomWeights(
    std::shared_ptr<const ArtifactSpec> artifact, uint64_t seed, int device) {
  return createImpl(std::move(artifact), nullptr, &seed, device, nullptr);
}

StatusOr<std::shared_ptr<GpuModelExecutable>>
GpuModelExecutable::createImpl(std::shared_ptr<const ArtifactSpec> artifact,
                               const WeightLoader *weights,
                               const uint64_t *randomSeed, int device,
                               Communicator *comm) {
  if (!artifact)
    return invalidArgument("GPU executable: null artifact");
  const ArtifactSpec &a = *artifact;
  KIMI_RETURN_IF_ERROR(validateArtifact(a));
  if (a.target.kind != TargetKind::kSm90a || a.isKernelLibrary())
    return invalidArtifact("artifact target " + quoted(a.target.name()) +
                           " is not a GPU model");
  const int32_t commSize = comm ? comm->size() : 1;
  if (a.target.numRanks != commSize)
    return invalidArgument(
        "the artifact is partitioned over " + std::to_string(a.target.numRanks) +
        " ranks but runs on " + std::to_string(commSize) +
        (a.target.numRanks > 1 && !comm
             ? " (no communicator; start one process per rank, see kimi-run "
               "--help)"
             : ""));
  const int32_t rank = comm ? comm->rank() : 0;
  if (a.kernels.size() != 1 || a.kernels[0].kind != KernelKind::kCpuSharedObject)
    return invalidArtifact("a GPU model holds one host shared object, the "
                           "artifact has " + std::to_string(a.kernels.size()) +
                           " kernels");

  std::shared_ptr<GpuModelExecutable> exe(new GpuModelExecutable());
  exe->artifact_ = artifact;
  KIMI_ASSIGN_OR_RETURN(exe->device_, CudaDevice::open(device));
  if (exe->device_->computeMajor() != 9)
    return invalidArgument("the artifact is compiled for sm_90a; " +
                           exe->device_->describe() + " is not a Hopper GPU");
  KIMI_ASSIGN_OR_RETURN(exe->stream_, CudaStream::create(*exe->device_));
  exe->allocator_ = std::make_unique<DeviceAllocator>(*exe->device_);
  exe->shim_ = std::make_unique<Shim>();
  exe->shim_->device = exe->device_.get();
  exe->shim_->stream = exe->stream_.get();
  exe->shim_->allocator = exe->allocator_.get();
  if (const char *env = std::getenv("KIMI_GPU_PROFILE"))
    exe->shim_->profile.on = std::string(env) == "1";
  exe->shim_->programmaticLaunch = a.kernels[0].waitsGridDependencies;
  if (const char *env = std::getenv("KIMI_GPU_PDL"))
    exe->shim_->programmaticLaunch &= std::string(env) != "0";
  {
    bool on = true;
    int64_t bucket = 256, kept = 4;
    if (const char *env = std::getenv("KIMI_GPU_GRAPHS"))
      on = std::string(env) != "0";
    if (const char *env = std::getenv("KIMI_GPU_GRAPH_BUCKET"))
      bucket = std::atoll(env);
    if (const char *env = std::getenv("KIMI_GPU_GRAPHS_KEPT"))
      kept = std::atoll(env);
    if (bucket < 1 || kept < 1)
      return invalidArgument("KIMI_GPU_GRAPH_BUCKET and KIMI_GPU_GRAPHS_KEPT "
                             "must be positive integers");
    exe->setGraphs(on, bucket, size_t(kept));
    if (const char *env = std::getenv("KIMI_GPU_STATES_IN_PLACE"))
      exe->statesInPlace_ = std::string(env) != "0";
    if (const char *env = std::getenv("KIMI_GPU_STATE_COPY_KERNEL"))
      exe->stateCopyKernel_ = std::string(env) != "0";
  }

  // cuBLASLt is needed only by models with matrix products (all real ones);
  // its absence is reported by the first product.
  StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::load(*exe->device_);
  if (blas.isOk()) {
    exe->blas_ = std::move(blas.value());
    exe->shim_->blas = exe->blas_.get();
  } else {
    exe->shim_->blasError = blas.status().message();
  }

  const KernelImage &kernel = a.kernels[0];
  KIMI_ASSIGN_OR_RETURN(exe->module_,
                        CpuModule::load(kernel.image, kernel.name.empty()
                                                          ? "kernel 0"
                                                          : kernel.name));
  CpuModule &m = *exe->module_;
  kimi_rt_gpu_table callbacks{};
  callbacks.ctx = exe->shim_.get();
  callbacks.load_module = &Shim::loadModule;
  callbacks.get_function = &Shim::getFunction;
  callbacks.launch = &Shim::launch;
  callbacks.alloc = &Shim::alloc;
  callbacks.release = &Shim::release;
  callbacks.gemm = &Shim::gemm;
  callbacks.read_i32 = &Shim::readI32;
  KIMI_ASSIGN_OR_RETURN(exe->status_, installGpuModuleTable(m, callbacks));

  // Collectives: after the kernels before them (one stream), on the
  // communicator's own stream.
  if (a.target.numRanks > 1 && m.symbol(KIMI_COMM_ABI_VERSION_SYMBOL).isOk()) {
    CudaStream *stream = exe->stream_.get();
    StatusOr<std::unique_ptr<CommShim>> shim = CommShim::install(
        m, *comm, a.target.grid(), [stream] { return stream->synchronize(); });
    if (!shim.isOk())
      return shim.takeStatus();
    exe->comm_ = std::move(shim.value());
  }

  for (const EntrySpec &e : a.entries) {
    StatusOr<void *> fn = m.symbol(e.symbol);
    if (!fn.isOk()) {
      Status s = fn.takeStatus();
      return s.addContext("entry " + quoted(e.name));
    }
    exe->entries_[e.name] = fn.value();
    // Each state input's output of the same name, dtype and shape: where a
    // donated state may be updated in place.
    bool cache = false, lengths = false;
    for (const TensorSpec &t : e.inputs) {
      cache |= t.role == TensorRole::kCache;
      lengths |= t.role == TensorRole::kCacheLength;
    }
    exe->paddedCaches_ &= !cache || lengths;
    std::vector<size_t> &pairs = exe->stateOutputs_[e.name];
    pairs.assign(e.inputs.size(), kNoOutput);
    for (size_t i = 0; i < e.inputs.size(); ++i)
      for (size_t o = 0; o < e.outputs.size() &&
                         e.inputs[i].role == TensorRole::kState;
           ++o)
        if (e.outputs[o].role == TensorRole::kState &&
            e.outputs[o].name == e.inputs[i].name &&
            e.outputs[o].dtype == e.inputs[i].dtype &&
            e.outputs[o].shape == e.inputs[i].shape)
          pairs[i] = o;
  }

  // Weights: device buffers, their addresses in kimi_gpu_weights[slot].
  auto start = std::chrono::steady_clock::now();
  KIMI_ASSIGN_OR_RETURN(void *tableAddress, m.symbol("kimi_gpu_weights"));
  const int64_t tableBytes = m.symbolSize(tableAddress);
  if (tableBytes >= 0 &&
      tableBytes < static_cast<int64_t>(a.weights.size() * sizeof(void *)))
    return moduleError("GPU model: kimi_gpu_weights holds " +
                       std::to_string(tableBytes / sizeof(void *)) +
                       " entries for " + std::to_string(a.weights.size()) +
                       " weights");
  auto *weightTable = static_cast<cuda::CUdeviceptr *>(tableAddress);
  // The driver's free memory around the uploads: what the weights really
  // take on the device (the manifest's bytes plus allocation granularity),
  // reported so that benchmarks can show no hidden copy is made.
  const CudaDriver &driver = exe->device_->driver();
  size_t freeBefore = 0, freeAfter = 0, total = 0;
  const bool measured = driver.cuMemGetInfo &&
                        driver.cuMemGetInfo(&freeBefore, &total) == 0;
  std::unique_ptr<DeviceRandomFill> random;
  if (randomSeed) {
    if (a.target.numRanks != 1)
      return invalidArgument("random weights on the device: the artifact is "
                             "partitioned over " +
                             std::to_string(a.target.numRanks) +
                             " ranks (one rank only)");
    KIMI_ASSIGN_OR_RETURN(random, DeviceRandomFill::load(*exe->device_));
  }
  std::vector<uint8_t> staging;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const WeightSpec &w = a.weights[i];
    const size_t bytes = static_cast<size_t>(storedBytes(w.dtype, w.blockNumel()));
    KIMI_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                          DeviceBuffer::allocate(*exe->device_, bytes));
    if (random) {
      Status filled = random->fill(*exe->stream_, buffer.address(), w.blockNumel(),
                                   w.dtype,
                                   randomWeightRecipe(w.name, w.shape, *randomSeed));
      if (!filled.isOk())
        return filled.addContext("weight " + std::to_string(i) + " " + quoted(w.name));
    } else {
      staging.resize(bytes);
      Status loaded = weights->loadBlock(w, rank, staging.data(), bytes);
      if (!loaded.isOk())
        return loaded.addContext("weight " + std::to_string(i) + " " + quoted(w.name));
      KIMI_RETURN_IF_ERROR(buffer.upload(staging.data(), bytes));
    }
    weightTable[i] = buffer.address();
    exe->weightBytes_ += static_cast<int64_t>(bytes);
    exe->weights_.push_back(std::move(buffer));
  }
  if (random)
    KIMI_RETURN_IF_ERROR(exe->stream_->synchronize());
  if (measured && driver.cuMemGetInfo(&freeAfter, &total) == 0)
    exe->weightDeviceBytes_ = int64_t(freeBefore) - int64_t(freeAfter);
  exe->weightSeconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return exe;
}

GpuModelExecutable::~GpuModelExecutable() {
  if (stream_)
    (void)stream_->synchronize();
  if (shim_ && device_)
    for (cuda::CUmodule mod : shim_->modules)
      (void)device_->driver().cuModuleUnload(mod);
  // Members release the weights, the allocator's blocks, the stream and the
  // device in reverse order; the module (dlclose) goes first.
  module_.reset();
}

void GpuModelExecutable::setProfiling(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  shim_->profile.on = on;
}

void GpuModelExecutable::clearProfile() {
  std::lock_guard<std::mutex> lock(mutex_);
  shim_->profile.stats.clear();
  shim_->profile.entryMs = 0;
  shim_->profile.entryCalls = 0;
  shim_->profile.hostReads = 0;
  shim_->profile.graphReplays = 0;
  shim_->profile.times = {};
}

Executable::CallTimes GpuModelExecutable::callTimes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shim_->profile.times;
}

std::string GpuModelExecutable::profileReport(size_t top) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const KernelProfile &p = shim_->profile;
  if (!p.on && p.stats.empty())
    return std::string();
  std::vector<std::pair<std::string, KernelProfile::Stat>> rows(p.stats.begin(),
                                                                p.stats.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto &a, const auto &b) { return a.second.ms > b.second.ms; });
  double total = 0;
  int64_t calls = 0;
  for (const auto &r : rows) {
    total += r.second.ms;
    calls += r.second.calls;
  }
  std::string out =
      "kernel profile (device time, CUDA events around each launch" +
      std::string(p.graphReplays ? "; " + std::to_string(p.graphReplays) +
                                       " calls replayed as graphs, their "
                                       "events graph nodes"
                                 : "") +
      ")\n";
  char line[512];
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const auto &[name, st] = rows[i];
    std::snprintf(line, sizeof line, "%9.3f ms %5.1f %% %8lld calls %9.2f us  %s  [%s]\n",
                  st.ms, total > 0 ? 100.0 * st.ms / total : 0.0,
                  (long long)st.calls, st.calls ? 1e3 * st.ms / st.calls : 0.0,
                  name.c_str(), st.shape.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line,
                "total: %.3f ms of device time in %lld launches of %zu kernels; "
                "entry calls: %lld taking %.3f ms of wall time; %lld host "
                "reads\n",
                total, (long long)calls, rows.size(), (long long)p.entryCalls,
                p.entryMs, (long long)p.hostReads);
  out += line;
  if (blas_) {
    std::string tuned = blas_->tuningReport();
    if (!tuned.empty())
      out += "cuBLASLt algorithms chosen by timing (not in the device time "
             "above):\n" + tuned;
  }
  return out;
}

void GpuModelExecutable::setPoison(bool poison) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocator_->setPoison(poison ? stream_.get() : nullptr);
  captured_.clear(); // their temporaries were filled (or not) at capture
}

void GpuModelExecutable::setGraphs(bool on, int64_t bucketRows,
                                   size_t maxGraphs) {
  std::lock_guard<std::mutex> lock(mutex_);
  graphs_ = on;
  graphBucket_ = std::max<int64_t>(1, bucketRows);
  maxGraphs_ = std::max<size_t>(1, maxGraphs);
  captured_.clear();
  uncapturable_.clear();
  graphFailure_.clear();
}

std::string GpuModelExecutable::graphFailure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return graphFailure_;
}

//===----------------------------------------------------------------------===//
// Carried tensors in device memory
//===----------------------------------------------------------------------===//

struct GpuModelExecutable::DeviceBlock {
  DeviceBlock(std::shared_ptr<const GpuModelExecutable> owner,
              cuda::CUdeviceptr base, size_t size)
      : owner(std::move(owner)), base(base), size(size) {}
  ~DeviceBlock() { owner->allocator_->releaseRetained(base); }
  std::shared_ptr<const GpuModelExecutable> owner; // outlives its blocks
  cuda::CUdeviceptr base;
  size_t size;
};

/// A carried tensor at `data` inside `block`; `storage` when it may grow in
/// place (carried_tensor.h).
class DeviceCarriedTensor final : public CarriedTensor {
public:
  using Block = GpuModelExecutable::DeviceBlock;
  /// `rowPitch` > 0: a cache of several sequences [B, L, ...] whose
  /// sequences lie `rowPitch` rows apart (rows L .. rowPitch - 1 of each are
  /// zero): appends write in place, and entries read it padded to
  /// [B, rowPitch, ...] (GpuModelExecutable::appendRows).
  DeviceCarriedTensor(DType dtype, std::vector<int64_t> shape,
                      std::shared_ptr<Block> block, cuda::CUdeviceptr data,
                      std::shared_ptr<GrowableStorage> storage = nullptr,
                      int64_t rowPitch = 0)
      : CarriedTensor(dtype, std::move(shape)), block_(std::move(block)),
        data_(data), storage_(std::move(storage)), rowPitch_(rowPitch) {}
  const void *residence() const override { return block_->owner.get(); }
  StatusOr<HostTensor> toHost() const override {
    return block_->owner->download(data_, dtype(), shape(), rowPitch_);
  }
  const std::shared_ptr<Block> &block() const { return block_; }
  cuda::CUdeviceptr data() const { return data_; }
  const std::shared_ptr<GrowableStorage> &storage() const { return storage_; }
  int64_t rowPitch() const { return rowPitch_; }
  /// The shape an entry reads: padded to the pitch.
  std::vector<int64_t> readShape() const {
    std::vector<int64_t> s = shape();
    if (rowPitch_)
      s[1] = rowPitch_;
    return s;
  }

protected:
  StatusOr<HostTensor>
  regionToHost(size_t offset, const std::vector<int64_t> &shape) const override {
    if (!rowPitch_)
      return block_->owner->download(data_ + offset, dtype(), shape);
    // Rarely wanted of a cache: all of it, then the region.
    KIMI_ASSIGN_OR_RETURN(HostTensor all, toHost());
    int64_t numel = 0;
    checkedNumel(shape, numel);
    const size_t bytes = size_t(numel) * dtypeSize(dtype());
    KIMI_ASSIGN_OR_RETURN(HostBuffer part, HostBuffer::allocate(bytes));
    if (bytes)
      std::memcpy(part.data, all.data() + offset, bytes);
    return HostTensor{dtype(), shape, std::move(part)};
  }

private:
  std::shared_ptr<Block> block_;
  cuda::CUdeviceptr data_;
  std::shared_ptr<GrowableStorage> storage_;
  int64_t rowPitch_ = 0;
};

namespace {
/// Room to grow in place for a one-sequence tensor of `bytes` at `data`.
std::shared_ptr<GrowableStorage> growable(const GpuModelExecutable::DeviceBlock &b,
                                          cuda::CUdeviceptr data, size_t bytes) {
  auto storage = std::make_shared<GrowableStorage>();
  storage->capacity = b.size - size_t(data - b.base);
  storage->filled = bytes;
  return storage;
}
} // namespace

StatusOr<std::shared_ptr<GpuModelExecutable::DeviceBlock>>
GpuModelExecutable::allocateBlock(size_t bytes) const {
  KIMI_ASSIGN_OR_RETURN(cuda::CUdeviceptr p, allocator_->allocate(bytes));
  const size_t size = allocator_->retain(p);
  return std::make_shared<DeviceBlock>(shared_from_this(), p, size);
}

StatusOr<HostTensor> GpuModelExecutable::download(
    cuda::CUdeviceptr address, DType dtype, const std::vector<int64_t> &shape,
    int64_t rowPitch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t numel = 0;
  checkedNumel(shape, numel);
  const size_t bytes = size_t(numel) * dtypeSize(dtype);
  KIMI_ASSIGN_OR_RETURN(HostBuffer host, HostBuffer::allocate(bytes));
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  KIMI_RETURN_IF_ERROR(stream_->synchronize());
  const CudaDriver &d = device_->driver();
  if (bytes && rowPitch) {
    // [B, L, ...] out of sequences rowPitch rows apart.
    const size_t b = size_t(shape[0]), perSequence = bytes / b;
    const size_t rowBytes = perSequence / size_t(shape[1]);
    cuda::CudaMemcpy2D m;
    m.srcMemoryType = cuda::CU_MEMORYTYPE_DEVICE;
    m.srcDevice = address;
    m.srcPitch = size_t(rowPitch) * rowBytes;
    m.dstMemoryType = cuda::CU_MEMORYTYPE_HOST;
    m.dstHost = host.data;
    m.dstPitch = perSequence;
    m.WidthInBytes = perSequence;
    m.Height = b;
    KIMI_RETURN_IF_ERROR(
        d.check(d.cuMemcpy2DAsync(&m, stream_->handle()), "cuMemcpy2DAsync"));
    KIMI_RETURN_IF_ERROR(stream_->synchronize());
  } else if (bytes) {
    KIMI_RETURN_IF_ERROR(
        d.check(d.cuMemcpyDtoH(host.data, address, bytes), "cuMemcpyDtoH"));
  }
  return HostTensor{dtype, shape, std::move(host)};
}

StatusOr<CarriedRef> GpuModelExecutable::carry(const HostTensor &t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block,
                        allocateBlock(t.bytes()));
  const CudaDriver &d = device_->driver();
  if (t.bytes()) {
    // After the allocator's poison fill; the host bytes are read before the
    // synchronisation returns.
    KIMI_RETURN_IF_ERROR(d.check(d.cuMemcpyHtoDAsync(block->base, t.data(),
                                                     t.bytes(), stream_->handle()),
                                 "cuMemcpyHtoDAsync"));
    KIMI_RETURN_IF_ERROR(stream_->synchronize());
  }
  const cuda::CUdeviceptr base = block->base;
  return CarriedRef(std::make_shared<DeviceCarriedTensor>(
      t.dtype, t.shape, std::move(block), base));
}

StatusOr<CarriedRef>
GpuModelExecutable::carryZeros(DType dtype, const std::vector<int64_t> &shape) const {
  int64_t numel = 0;
  if (!checkedNumel(shape, numel))
    return invalidArgument("zeros of shape " + shapeToString(shape) +
                           ": too many elements");
  const size_t bytes = size_t(numel) * dtypeSize(dtype);
  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block, allocateBlock(bytes));
  const CudaDriver &d = device_->driver();
  if (bytes)
    KIMI_RETURN_IF_ERROR(
        d.check(d.cuMemsetD8Async(block->base, 0, bytes, stream_->handle()),
                "cuMemsetD8Async"));
  const cuda::CUdeviceptr base = block->base;
  return CarriedRef(
      std::make_shared<DeviceCarriedTensor>(dtype, shape, std::move(block), base));
}

StatusOr<CarriedRef> GpuModelExecutable::appendRows(const CarriedRef &cache,
                                                    const CarriedRef &rowsIn,
                                                    int64_t batch) const {
  if (!rowsIn)
    return invalidArgument("append of null cache rows");
  KIMI_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                        grownCacheShape(cache.get(), *rowsIn, batch));
  CarriedRef rows = rowsIn;
  if (rows->residence() != this) {
    KIMI_ASSIGN_OR_RETURN(HostTensor host, rows->toHost());
    KIMI_ASSIGN_OR_RETURN(rows, carry(host));
  }
  if (!cache)
    return rows;
  if (cache->residence() != this)
    return invalidArgument("cache of shape " + shapeToString(cache->shape()) +
                           " is not in this GPU model's memory");
  const auto &old = static_cast<const DeviceCarriedTensor &>(*cache);
  const auto &add = static_cast<const DeviceCarriedTensor &>(*rows);
  const size_t oldBytes = old.bytes(), addBytes = add.bytes();
  const size_t newBytes = oldBytes + addBytes;

  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  const CudaDriver &d = device_->driver();
  cuda::CUstream stream = stream_->handle();
  auto copy = [&](cuda::CUdeviceptr dst, cuda::CUdeviceptr src, size_t bytes) {
    return bytes ? d.check(d.cuMemcpyDtoDAsync(dst, src, bytes, stream),
                           "cuMemcpyDtoDAsync")
                 : Status::ok();
  };
  // One sequence: after the old rows, when nothing else was put there. With
  // graphs, only into zeroed storage (below): decode reads it padded.
  if (batch == 1 && old.storage() && (old.storage()->zeroTail || !graphs_) &&
      old.storage()->claim(oldBytes, newBytes)) {
    KIMI_RETURN_IF_ERROR(copy(old.data() + oldBytes, add.data(), addBytes));
    return CarriedRef(std::make_shared<DeviceCarriedTensor>(
        cache->dtype(), std::move(shape), old.block(), old.data(), old.storage()));
  }
  const size_t b = size_t(batch);
  auto pitchedCopy = [&](cuda::CUdeviceptr dst, size_t dstPitch,
                         cuda::CUdeviceptr src, size_t srcPitch,
                         size_t width) -> Status {
    if (!width)
      return Status::ok();
    cuda::CudaMemcpy2D m;
    m.srcMemoryType = m.dstMemoryType = cuda::CU_MEMORYTYPE_DEVICE;
    m.srcDevice = src;
    m.srcPitch = srcPitch;
    m.dstDevice = dst;
    m.dstPitch = dstPitch;
    m.WidthInBytes = width;
    m.Height = b;
    return d.check(d.cuMemcpy2DAsync(&m, stream), "cuMemcpy2DAsync");
  };
  // Several sequences, read padded (graphs and cache_length entries): each
  // sequence gets a whole number of buckets of rows, zeroed past its
  // length, and appends write into them in place (the newest tensor of the
  // storage only: an older one's continuation copies). The pitch stays
  // until a sequence outgrows it, so one graph serves a bucket of steps.
  const int64_t oldRows = cache->shape()[1], newRows = shape[1];
  if (batch > 1 && graphs_ && paddedCaches_ && newRows > 0 && newBytes) {
    const size_t rowBytes = newBytes / (b * size_t(newRows));
    const size_t oldWidth = size_t(oldRows) * rowBytes;
    const size_t addWidth = size_t(newRows - oldRows) * rowBytes;
    if (old.rowPitch() && old.storage() &&
        old.storage()->claim(oldBytes, newBytes)) {
      const size_t pitch = size_t(old.rowPitch()) * rowBytes;
      KIMI_RETURN_IF_ERROR(pitchedCopy(old.data() + oldWidth, pitch, add.data(),
                                       addWidth, addWidth));
      return CarriedRef(std::make_shared<DeviceCarriedTensor>(
          cache->dtype(), std::move(shape), old.block(), old.data(),
          old.storage(), old.rowPitch()));
    }
    const int64_t bucket = graphBucket_;
    const int64_t pitchRows = (newRows + bucket - 1) / bucket * bucket;
    const size_t pitch = size_t(pitchRows) * rowBytes;
    KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block,
                          allocateBlock(b * pitch));
    const cuda::CUdeviceptr base = block->base;
    KIMI_RETURN_IF_ERROR(d.check(
        d.cuMemsetD8Async(base, 0, b * pitch, stream), "cuMemsetD8Async (cache)"));
    const size_t oldPitch =
        size_t(old.rowPitch() ? old.rowPitch() : oldRows) * rowBytes;
    KIMI_RETURN_IF_ERROR(pitchedCopy(base, pitch, old.data(), oldPitch, oldWidth));
    KIMI_RETURN_IF_ERROR(
        pitchedCopy(base + oldWidth, pitch, add.data(), addWidth, addWidth));
    auto storage = std::make_shared<GrowableStorage>();
    storage->capacity = b * pitch; // claims count [B, L] rows: L <= pitchRows
    storage->filled = newBytes;
    storage->zeroTail = true;
    return CarriedRef(std::make_shared<DeviceCarriedTensor>(
        cache->dtype(), std::move(shape), std::move(block), base,
        std::move(storage), pitchRows));
  }
  // A new block: room to double for one sequence; several sequences are
  // interleaved [B, L + n, ...] by two pitched copies. With graphs, one
  // sequence's block holds whole buckets of rows and its tail is zeroed,
  // so that decode may read it padded to the next bucket.
  size_t capacity = batch == 1 ? std::max(newBytes, 2 * oldBytes) : newBytes;
  const size_t rowBytes = newRows > 0 ? newBytes / size_t(newRows) : 0;
  if (batch == 1 && graphs_ && rowBytes) {
    const size_t bucket = size_t(graphBucket_);
    const size_t rows = (capacity / rowBytes + bucket - 1) / bucket * bucket;
    capacity = std::max(rows, bucket) * rowBytes;
  }
  KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block,
                        allocateBlock(capacity));
  const cuda::CUdeviceptr base = block->base;
  if (batch == 1) {
    KIMI_RETURN_IF_ERROR(copy(base, old.data(), oldBytes));
    KIMI_RETURN_IF_ERROR(copy(base + oldBytes, add.data(), addBytes));
    std::shared_ptr<GrowableStorage> storage = growable(*block, base, newBytes);
    if (graphs_ && block->size > newBytes) {
      KIMI_RETURN_IF_ERROR(d.check(d.cuMemsetD8Async(base + newBytes, 0,
                                                     block->size - newBytes,
                                                     stream),
                                   "cuMemsetD8Async (cache tail)"));
      storage->zeroTail = true;
    }
    return CarriedRef(std::make_shared<DeviceCarriedTensor>(
        cache->dtype(), std::move(shape), std::move(block), base,
        std::move(storage)));
  }
  const size_t oldPer = oldBytes / b, addPer = addBytes / b;
  const size_t oldPitch =
      old.rowPitch() && oldRows ? size_t(old.rowPitch()) * (oldPer / size_t(oldRows))
                                : oldPer;
  KIMI_RETURN_IF_ERROR(
      pitchedCopy(base, oldPer + addPer, old.data(), oldPitch, oldPer));
  KIMI_RETURN_IF_ERROR(
      pitchedCopy(base + oldPer, oldPer + addPer, add.data(), addPer, addPer));
  return CarriedRef(std::make_shared<DeviceCarriedTensor>(
      cache->dtype(), std::move(shape), std::move(block), base));
}

//===----------------------------------------------------------------------===//
// Entry calls
//===----------------------------------------------------------------------===//

Status GpuModelExecutable::run(const std::string &entryName,
                               const std::vector<const HostTensor *> &inputs,
                               int64_t tokens,
                               std::vector<HostTensor> &outputs) const {
  std::vector<std::unique_ptr<HostCarriedTensor>> wrapped;
  std::vector<const CarriedTensor *> carried;
  for (const HostTensor *t : inputs) {
    wrapped.push_back(t ? std::make_unique<HostCarriedTensor>(*t) : nullptr);
    carried.push_back(wrapped.back().get());
  }
  std::vector<CarriedRef> out;
  KIMI_RETURN_IF_ERROR(runCarried(entryName, carried, tokens, {}, {}, out));
  outputs.clear();
  for (const CarriedRef &t : out)
    outputs.push_back(*t->host()); // nothing kept: all on the host
  return Status::ok();
}

Status GpuModelExecutable::runCarried(
    const std::string &entryName, const std::vector<const CarriedTensor *> &inputs,
    int64_t tokens, const std::vector<bool> &keep,
    const std::vector<bool> &donated, std::vector<CarriedRef> &outputs) const {
  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_ASSIGN_OR_RETURN(const EntrySpec *entry,
                        entryForCall(*artifact_, entryName, inputs.size()));
  auto fn = entries_.find(entryName); // every entry was resolved at load
  const std::string label = "entry " + quoted(entryName);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  const CudaDriver &d = device_->driver();
  {
    StatusOr<bool> replayed =
        runAsGraph(*entry, fn->second, inputs, tokens, keep, donated, outputs);
    if (!replayed.isOk())
      return replayed.takeStatus().addContext(label);
    if (replayed.value())
      return Status::ok();
  }

  // Every device buffer of this call, released on all paths.
  std::set<cuda::CUdeviceptr> owned, inputBuffers;
  auto releaseAll = [&] {
    for (cuda::CUdeviceptr p : owned)
      (void)allocator_->release(p);
    owned.clear();
  };
  // Blocks of carried inputs, by base address: an output that is one of
  // them shares it.
  std::map<cuda::CUdeviceptr, std::shared_ptr<DeviceBlock>> blocks;

  MemRefStruct args(ranksOf(entry->inputs));
  std::vector<void *> argPointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec &spec = entry->inputs[i];
    const CarriedTensor *t = inputs[i];
    const std::string where =
        label + ": input " + std::to_string(i) + " " + quoted(spec.name);
    if (Status checked = checkEntryInput(spec, t, where); !checked.isOk()) {
      releaseAll();
      return checked;
    }
    if (t->residence() == this) {
      const auto &dt = static_cast<const DeviceCarriedTensor &>(*t);
      blocks.emplace(dt.block()->base, dt.block());
      // A padded cache (its sequences a pitch apart) is read padded: the
      // entry's cache_length masks the zero rows past each length.
      args.setContiguous(i, reinterpret_cast<void *>(dt.data()), dt.readShape());
      argPointers.push_back(args.pointer(i));
      continue;
    }
    const HostTensor *h = t->host();
    if (!h) {
      releaseAll();
      return invalidArgument(where + ": device memory of another executable");
    }
    StatusOr<cuda::CUdeviceptr> p = allocator_->allocate(h->bytes());
    if (!p.isOk()) {
      releaseAll();
      Status s = p.takeStatus();
      return s.addContext(where);
    }
    owned.insert(p.value());
    inputBuffers.insert(p.value());
    if (h->bytes()) {
      // On the model's stream: ordered after the allocator's poison fill.
      Status up = d.check(d.cuMemcpyHtoDAsync(p.value(), h->data(), h->bytes(),
                                              stream_->handle()),
                          "cuMemcpyHtoDAsync");
      if (!up.isOk()) {
        releaseAll();
        return up.addContext(where);
      }
    }
    args.setContiguous(i, reinterpret_cast<void *>(p.value()), h->shape);
    argPointers.push_back(args.pointer(i));
  }

  // Call; the kernels run on the stream, then one synchronisation.
  *status_ = 0;
  shim_->error = Status::ok();
  MemRefStruct results(ranksOf(entry->outputs));
  auto started = std::chrono::steady_clock::now();
  Status called = callEntry(fn->second, results.structPointer(), argPointers);
  auto issued = std::chrono::steady_clock::now();
  Status synced = stream_->synchronize();
  {
    using Ms = std::chrono::duration<double, std::milli>;
    Executable::CallTimes &t = shim_->profile.times;
    t.calls += 1;
    t.issueMs += Ms(issued - started).count();
    t.waitMs += Ms(std::chrono::steady_clock::now() - issued).count();
  }
  if (shim_->profile.on) {
    shim_->profile.collect();
    shim_->profile.entryMs += std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - started)
                                  .count();
    shim_->profile.entryCalls += 1;
  }
  Status status = called;
  if (status.isOk() && !shim_->error.isOk())
    status = shim_->error;
  if (status.isOk() && *status_ != 0)
    status = executionError("the model's GPU shim failed (status " +
                            std::to_string(*status_) +
                            "; the runtime table was incomplete)");
  if (status.isOk())
    status = synced;
  if (comm_) {
    Status collectives = comm_->takeStatus();
    if (status.isOk())
      status = std::move(collectives);
  }

  // Outputs: every allocation the entry returned is this call's to release
  // (input buffers and weights are never among them), unless it is kept.
  std::map<cuda::CUdeviceptr, int> uses; // outputs per allocation
  for (size_t i = 0; i < entry->outputs.size(); ++i) {
    MemRefView v = results.view(i);
    auto p = reinterpret_cast<cuda::CUdeviceptr>(v.allocated());
    uses[p] += 1;
    if (p && !inputBuffers.count(p) && allocator_->isLive(p))
      owned.insert(p);
  }
  std::vector<CarriedRef> out(entry->outputs.size());
  for (size_t i = 0; i < entry->outputs.size() && status.isOk(); ++i) {
    const TensorSpec &spec = entry->outputs[i];
    const std::string where =
        label + ": output " + std::to_string(i) + " " + quoted(spec.name);
    MemRefView v = results.view(i);
    const std::vector<int64_t> expected = callShape(spec, tokens);
    if (v.sizes() != expected) {
      status = executionError(where + ": returned shape " +
                              shapeToString(v.sizes()) + ", expected " +
                              shapeToString(expected));
      break;
    }
    int64_t numel = 0;
    checkedNumel(expected, numel);
    const size_t elem = dtypeSize(spec.dtype);
    const size_t bytes = static_cast<size_t>(numel) * elem;
    if (numel > 0 && (!v.aligned() || !v.isContiguous() || v.offset() < 0)) {
      status = executionError(where + ": returned a null, negative-offset or "
                                      "non-contiguous device buffer");
      break;
    }
    auto p = reinterpret_cast<cuda::CUdeviceptr>(v.allocated());
    const cuda::CUdeviceptr src =
        reinterpret_cast<cuda::CUdeviceptr>(v.aligned()) +
        static_cast<cuda::CUdeviceptr>(v.offset()) * elem;

    if (i < keep.size() && keep[i]) {
      // Stays on the device: the entry's own block, a carried input's block
      // it returned, or (an uploaded input, a weight) a copy.
      std::shared_ptr<DeviceBlock> block;
      bool fresh = false;
      if (auto it = blocks.find(p); it != blocks.end()) {
        block = it->second;
      } else if (owned.count(p)) {
        owned.erase(p);
        block = std::make_shared<DeviceBlock>(shared_from_this(), p,
                                              allocator_->retain(p));
        blocks.emplace(p, block);
        fresh = true;
      }
      cuda::CUdeviceptr data = src;
      if (!block) {
        StatusOr<std::shared_ptr<DeviceBlock>> copy = allocateBlock(bytes);
        if (!copy.isOk()) {
          status = copy.takeStatus().addContext(where);
          break;
        }
        block = std::move(copy.value());
        data = block->base;
        fresh = true;
        if (bytes)
          status = d.check(d.cuMemcpyDtoDAsync(data, src, bytes, stream_->handle()),
                           "cuMemcpyDtoDAsync");
        if (!status.isOk()) {
          status = status.addContext(where);
          break;
        }
        p = 0; // its own block
      }
      // A block that holds only this output may grow in place.
      std::shared_ptr<GrowableStorage> storage;
      if (fresh && (p == 0 || uses[p] == 1))
        storage = growable(*block, data, bytes);
      out[i] = std::make_shared<DeviceCarriedTensor>(
          spec.dtype, expected, std::move(block), data, std::move(storage));
      continue;
    }

    StatusOr<HostBuffer> host = HostBuffer::allocate(bytes);
    if (!host.isOk()) {
      status = host.takeStatus();
      break;
    }
    if (bytes) {
      status = d.check(d.cuMemcpyDtoH(host->data, src, bytes), "cuMemcpyDtoH");
      if (!status.isOk()) {
        status = status.addContext(where);
        break;
      }
    }
    out[i] = std::make_shared<HostCarriedTensor>(
        HostTensor{spec.dtype, expected, std::move(host.value())});
  }
  releaseAll();
  // Nothing else the call allocated outlives it (a buffer the code did not
  // free is returned to the cache here).
  allocator_->releaseAll();
  if (!status.isOk())
    return status.addContext(label);
  outputs = std::move(out);
  directCalls_[entryName] += 1;
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Decode graphs
//===----------------------------------------------------------------------===//

struct GpuModelExecutable::CapturedCall {
  std::string key;
  /// The key without addresses and cache paddings: a call of the same
  /// signature may replace this one (update its executable).
  std::string signature;
  /// The blocks of the inputs read in place (caches, states), by input;
  /// empty for staged inputs. Once each has expired or is the new call's,
  /// no other sequence can replay this graph.
  std::vector<std::weak_ptr<DeviceBlock>> inPlaceBlocks;
  /// The graph's own memory: the inputs copied in, every temporary and
  /// output of the captured call (reused within it in stream order).
  std::unique_ptr<DeviceAllocator> pool;
  struct Staged {
    size_t input;
    cuda::CUdeviceptr at;
    size_t bytes;
  };
  std::vector<Staged> staged; // inputs other than caches and states in place
  struct Result {
    cuda::CUdeviceptr at;
    size_t bytes;
    std::vector<int64_t> shape;
    /// A state updated in place: the input whose memory holds it after the
    /// replay (kNoOutput: none, the result is copied out).
    size_t inPlaceOf = kNoOutput;
  };
  std::vector<Result> results;
  /// Profiled captures: the events recorded by the graph's nodes, and what
  /// each pair brackets.
  std::vector<std::unique_ptr<CudaEvent>> events;
  std::vector<KernelProfile::Pending> timed;
  std::unique_ptr<CudaGraph> graph; // last: destroyed before the pool it uses
};

StatusOr<bool> GpuModelExecutable::runAsGraph(
    const EntrySpec &entry, void *function,
    const std::vector<const CarriedTensor *> &inputs, int64_t tokens,
    const std::vector<bool> &keep, const std::vector<bool> &donated,
    std::vector<CarriedRef> &outputs) const {
  // Collectives synchronise with the host, and kernel modules and
  // cuBLASLt's choices are made by a direct call first. A profiled call is
  // captured with its events as graph nodes: replayed without the host's
  // gaps between launches, they time the kernels alone.
  KernelProfile &profile = shim_->profile;
  if (!graphs_ || comm_ || uncapturable_.count(entry.name) ||
      directCalls_[entry.name] == 0 || inputs.size() != entry.inputs.size())
    return false;
  bool lengths = false;
  for (const TensorSpec &s : entry.inputs)
    lengths |= s.role == TensorRole::kCacheLength;
  const std::vector<size_t> &stateOutput = stateOutputs_.at(entry.name);

  // The key: each cache by address and padded rows, each state updated in
  // place by address, the rest by shape.
  std::string key = entry.name + (profile.on ? "|profiled" : "");
  std::string signature = key;
  // The key less the addresses of states taken in place: a direct call
  // leaves its new states in new blocks, so those addresses change at every
  // step until a graph keeps them in place.
  std::string repeat = key;
  std::vector<std::vector<int64_t>> shapes(inputs.size());
  std::vector<cuda::CUdeviceptr> byReference(inputs.size(), 0);
  std::vector<std::shared_ptr<DeviceBlock>> referenced(inputs.size());
  std::vector<size_t> inPlace; // inputs whose state output is written over them
  for (size_t i = 0; i < inputs.size(); ++i) {
    const CarriedTensor *t = inputs[i];
    if (!t || !checkEntryInput(entry.inputs[i], t, "").isOk() ||
        (t->residence() != this && !t->host()))
      return false; // the direct path reports it
    shapes[i] = t->shape();
    if (entry.inputs[i].role != TensorRole::kCache) {
      key += "|" + shapeToString(shapes[i]);
      signature += "|" + shapeToString(shapes[i]);
      repeat += "|" + shapeToString(shapes[i]);
      // A donated state that nothing else views (the tensor alone holds its
      // block) is read where it is, and the graph ends by copying the new
      // state over it: a replay then copies no state in or out.
      const auto *dt = t->residence() == this
                           ? static_cast<const DeviceCarriedTensor *>(t)
                           : nullptr;
      if (dt && statesInPlace_ && stateOutput[i] != kNoOutput &&
          stateOutput[i] < keep.size() && keep[stateOutput[i]] &&
          i < donated.size() &&
          donated[i] && dt->block().use_count() == 1 &&
          std::find(byReference.begin(), byReference.end(), dt->data()) ==
              byReference.end()) {
        byReference[i] = dt->data();
        referenced[i] = dt->block();
        inPlace.push_back(i);
        key += "@" + std::to_string(dt->data());
      }
      continue;
    }
    // A cache: one sequence in zeroed storage with room for the padding,
    // or several a bucket-multiple pitch apart (appendRows).
    if (!lengths || t->residence() != this || shapes[i][1] < 1)
      return false;
    const auto &dt = static_cast<const DeviceCarriedTensor &>(*t);
    if (!dt.storage() || !dt.storage()->zeroTail)
      return false;
    int64_t padded = dt.rowPitch();
    if (shapes[i][0] == 1 && !padded) {
      const int64_t rows = shapes[i][1];
      const size_t rowBytes = t->bytes() / size_t(rows);
      padded = (rows + graphBucket_ - 1) / graphBucket_ * graphBucket_;
      if (size_t(padded) * rowBytes > dt.storage()->capacity)
        return false;
    }
    if (!padded)
      return false;
    shapes[i][1] = padded;
    byReference[i] = dt.data();
    referenced[i] = dt.block();
    key += "|" + std::to_string(dt.data()) + "x" + std::to_string(padded);
    repeat += "|" + std::to_string(dt.data()) + "x" + std::to_string(padded);
    signature += "|cache";
  }

  const CudaDriver &d = device_->driver();
  auto found = std::find_if(captured_.begin(), captured_.end(),
                            [&](const auto &c) { return c->key == key; });
  Executable::CallTimes &times = shim_->profile.times;
  if (found != captured_.end()) {
    captured_.splice(captured_.begin(), captured_, found);
  } else {
    // A key is captured when it comes a second time in a row (the same
    // shapes and caches; states may have moved): a graph is worth its
    // capture only if it is replayed. A chunked prefill's steps
    // (each a new padded length) and a bucket's first decode step run
    // directly; capturing them cost k3-mini's 8K prefill 6 ms (stop 50).
    std::string &last = lastKey_[entry.name];
    if (last != repeat) {
      last = repeat;
      return false;
    }
    // A graph of the same signature whose caches and states are gone or are
    // this call's (the sequence's previous bucket, or a sequence since
    // dropped) is replaced: the capture takes its memory and, when the
    // kernels are the same, updates its executable instead of
    // instantiating a new one. The least recently used such graph goes.
    auto replaceable = [&](const CapturedCall &c) {
      if (c.signature != signature)
        return false;
      for (size_t i = 0; i < c.inPlaceBlocks.size(); ++i) {
        std::shared_ptr<DeviceBlock> b = c.inPlaceBlocks[i].lock();
        if (b && b != referenced[i])
          return false;
      }
      return true;
    };
    std::unique_ptr<CapturedCall> replaced;
    auto victim = std::find_if(captured_.rbegin(), captured_.rend(),
                               [&](const auto &c) { return replaceable(*c); });
    if (victim != captured_.rend()) {
      replaced = std::move(*victim);
      captured_.erase(std::next(victim).base());
    }
    auto call = std::make_unique<CapturedCall>();
    call->key = key;
    call->signature = signature;
    call->inPlaceBlocks.assign(referenced.begin(), referenced.end());
    if (replaced) {
      // Nothing of the replaced graph runs again: all its memory is free,
      // and the same allocations find the same blocks.
      call->pool = std::move(replaced->pool);
      call->pool->releaseAll();
      call->pool->markReuse();
    } else {
      call->pool = std::make_unique<DeviceAllocator>(*device_);
    }
    call->pool->setPoison(allocator_->poison());
    MemRefStruct args(ranksOf(entry.inputs)), results(ranksOf(entry.outputs));
    std::vector<void *> argPointers;
    for (size_t i = 0; i < inputs.size(); ++i) {
      cuda::CUdeviceptr at = byReference[i];
      if (!at) {
        KIMI_ASSIGN_OR_RETURN(at, call->pool->allocate(inputs[i]->bytes()));
        call->staged.push_back({i, at, inputs[i]->bytes()});
      }
      args.setContiguous(i, reinterpret_cast<void *>(at), shapes[i]);
      argPointers.push_back(args.pointer(i));
    }
    // Checks output i as the call returned it: its place, or an error.
    auto resultOf = [&](size_t i) -> StatusOr<CapturedCall::Result> {
      const TensorSpec &spec = entry.outputs[i];
      MemRefView v = results.view(i);
      const std::vector<int64_t> expected = callShape(spec, tokens);
      int64_t numel = 0;
      checkedNumel(expected, numel);
      if (v.sizes() != expected ||
          (numel > 0 && (!v.aligned() || !v.isContiguous() || v.offset() < 0)))
        return executionError("output " + std::to_string(i) + " " +
                              quoted(spec.name) + ": returned shape " +
                              shapeToString(v.sizes()) + " (or a strided "
                              "buffer), expected " + shapeToString(expected));
      const size_t elem = dtypeSize(spec.dtype);
      return CapturedCall::Result{
          reinterpret_cast<cuda::CUdeviceptr>(v.aligned()) +
              static_cast<cuda::CUdeviceptr>(v.offset()) * elem,
          size_t(numel) * elem, expected};
    };
    // The states updated in place are copied back by one kernel launch
    // (SegmentCopy), from a table in the graph's memory written after the
    // capture, when the outputs' places are known.
    cuda::CUdeviceptr segmentTable = 0;
    if (!inPlace.empty() && stateCopyKernel_) {
      if (!segmentCopy_) {
        StatusOr<std::unique_ptr<SegmentCopy>> loaded = SegmentCopy::load(*device_);
        if (loaded.isOk())
          segmentCopy_ = std::move(loaded.value());
        else if (graphFailure_.empty()) // memcpy nodes then; say why
          graphFailure_ = "state copies as memcpy nodes: " + loaded.status().message();
      }
      if (segmentCopy_) {
        KIMI_ASSIGN_OR_RETURN(segmentTable,
                              call->pool->allocate(inPlace.size() *
                                                   SegmentCopy::kTableBytesPerSegment));
      }
    }
    std::vector<SegmentCopy::Segment> segments;
    // Poison fills of the staged inputs come before the capture.
    KIMI_RETURN_IF_ERROR(stream_->synchronize());
    *status_ = 0;
    shim_->error = Status::ok();
    shim_->allocator = call->pool.get();
    shim_->capturing = true;
    // The profile's events of the captured call are the graph's own.
    std::swap(profile.events, call->events);
    std::swap(profile.pending, call->timed);
    const size_t used = std::exchange(profile.used, 0);
    profile.inGraph = true;
    StatusOr<std::unique_ptr<CudaGraph>> graph = CudaGraph::capture(
        *device_, *stream_,
        [&]() -> Status {
          KIMI_RETURN_IF_ERROR(
              callEntry(function, results.structPointer(), argPointers));
          // The states updated in place: copied over their inputs after
          // every kernel of the call has read them (stream order), in one
          // launch where the segments allow.
          size_t largest = 0;
          for (size_t i : inPlace) {
            KIMI_ASSIGN_OR_RETURN(CapturedCall::Result r,
                                  resultOf(stateOutput[i]));
            SegmentCopy::Segment seg{byReference[i], r.at, r.bytes};
            if (!r.bytes || r.at == byReference[i])
              continue;
            if (segmentTable && SegmentCopy::fits(seg)) {
              segments.push_back(seg);
              largest = std::max(largest, seg.bytes);
              continue;
            }
            KIMI_RETURN_IF_ERROR(d.check(
                d.cuMemcpyDtoDAsync(byReference[i], r.at, r.bytes,
                                    stream_->handle()),
                "cuMemcpyDtoDAsync (state in place)"));
          }
          if (!segments.empty())
            KIMI_RETURN_IF_ERROR(segmentCopy_->launch(
                *stream_, segmentTable, uint32_t(segments.size()), largest));
          return Status::ok();
        },
        /*relaxed=*/true, // the call allocates from the pool
        replaced ? replaced->graph.get() : nullptr);
    profile.inGraph = false;
    std::swap(profile.events, call->events);
    std::swap(profile.pending, call->timed);
    profile.used = used;
    shim_->capturing = false;
    shim_->allocator = allocator_.get();
    Status st = graph.status();
    if (st.isOk() && !shim_->error.isOk())
      st = shim_->error;
    if (st.isOk() && *status_ != 0)
      st = executionError("the model's GPU shim failed (status " +
                          std::to_string(*status_) + ")");
    for (size_t i = 0; i < entry.outputs.size() && st.isOk(); ++i) {
      StatusOr<CapturedCall::Result> r = resultOf(i);
      if (!r.isOk()) {
        st = r.takeStatus();
        break;
      }
      call->results.push_back(std::move(r.value()));
    }
    for (size_t i : inPlace)
      if (st.isOk())
        call->results[stateOutput[i]].inPlaceOf = i;
    if (st.isOk() && !segments.empty()) {
      std::vector<uint64_t> table = SegmentCopy::table(segments);
      st = d.check(d.cuMemcpyHtoD(segmentTable, table.data(),
                                  table.size() * sizeof(uint64_t)),
                   "cuMemcpyHtoD (state copy table)");
    }
    *status_ = 0;
    shim_->error = Status::ok();
    if (!st.isOk()) {
      // This entry runs directly from now on; nothing of the call ran.
      uncapturable_.insert(entry.name);
      graphFailure_ = "entry " + quoted(entry.name) +
                      " is not captured as a graph: " + st.message();
      return false;
    }
    call->graph = std::move(graph.value());
    // Blocks of the replaced graph that this capture did not take (sizes
    // of its bucket only) go back to the driver.
    call->pool->trimUntouched();
    times.graphCaptures += 1;
    times.graphUpdates += call->graph->updated() ? 1 : 0;
    times.graphCaptureMs += call->graph->captureMs();
    times.graphInstantiateMs += call->graph->instantiateMs();
    captured_.push_front(std::move(call));
    while (captured_.size() > maxGraphs_)
      captured_.pop_back();
  }
  CapturedCall &call = *captured_.front();

  // Replay: the outputs' memory first (a failure there changes nothing),
  // then the inputs into the graph's copies, the graph, the outputs out.
  cuda::CUstream stream = stream_->handle();
  auto started = std::chrono::steady_clock::now();
  std::vector<CarriedRef> out(entry.outputs.size());
  std::vector<std::shared_ptr<DeviceBlock>> blocks(call.results.size());
  std::vector<HostBuffer> hosts(call.results.size());
  for (size_t i = 0; i < call.results.size(); ++i) {
    const CapturedCall::Result &r = call.results[i];
    if (r.inPlaceOf != kNoOutput)
      continue;
    if (i < keep.size() && keep[i]) {
      KIMI_ASSIGN_OR_RETURN(blocks[i], allocateBlock(r.bytes));
    } else {
      KIMI_ASSIGN_OR_RETURN(hosts[i], HostBuffer::allocate(r.bytes));
    }
  }
  for (const CapturedCall::Staged &s : call.staged) {
    if (!s.bytes)
      continue;
    const CarriedTensor *t = inputs[s.input];
    Status copied =
        t->residence() == this
            ? d.check(d.cuMemcpyDtoDAsync(
                          s.at, static_cast<const DeviceCarriedTensor &>(*t).data(),
                          s.bytes, stream),
                      "cuMemcpyDtoDAsync (graph input)")
            : d.check(d.cuMemcpyHtoDAsync(s.at, t->host()->data(), s.bytes, stream),
                      "cuMemcpyHtoDAsync (graph input)");
    KIMI_RETURN_IF_ERROR(copied);
  }
  KIMI_RETURN_IF_ERROR(call.graph->launch(*stream_));
  for (size_t i = 0; i < call.results.size(); ++i) {
    const CapturedCall::Result &r = call.results[i];
    if (r.inPlaceOf != kNoOutput) {
      const auto &in =
          static_cast<const DeviceCarriedTensor &>(*inputs[r.inPlaceOf]);
      out[i] = std::make_shared<DeviceCarriedTensor>(
          entry.outputs[i].dtype, r.shape, in.block(), in.data());
      continue;
    }
    if (!blocks[i])
      continue;
    if (r.bytes)
      KIMI_RETURN_IF_ERROR(
          d.check(d.cuMemcpyDtoDAsync(blocks[i]->base, r.at, r.bytes, stream),
                  "cuMemcpyDtoDAsync (graph output)"));
    const cuda::CUdeviceptr base = blocks[i]->base;
    std::shared_ptr<GrowableStorage> storage = growable(*blocks[i], base, r.bytes);
    out[i] = std::make_shared<DeviceCarriedTensor>(
        entry.outputs[i].dtype, r.shape, std::move(blocks[i]), base,
        std::move(storage));
  }
  auto issued = std::chrono::steady_clock::now();
  KIMI_RETURN_IF_ERROR(stream_->synchronize());
  for (size_t i = 0; i < call.results.size(); ++i) {
    if (out[i])
      continue;
    const CapturedCall::Result &r = call.results[i];
    if (r.bytes)
      KIMI_RETURN_IF_ERROR(d.check(d.cuMemcpyDtoH(hosts[i].data, r.at, r.bytes),
                                   "cuMemcpyDtoH (graph output)"));
    out[i] = std::make_shared<HostCarriedTensor>(
        HostTensor{entry.outputs[i].dtype, r.shape, std::move(hosts[i])});
  }
  using Ms = std::chrono::duration<double, std::milli>;
  if (profile.on) {
    profile.add(call.events, call.timed);
    profile.entryMs += Ms(std::chrono::steady_clock::now() - started).count();
    profile.entryCalls += 1;
    profile.graphReplays += 1;
  }
  times.calls += 1;
  times.graphReplays += 1;
  times.statesInPlace += inPlace.empty() ? 0 : 1;
  times.issueMs += Ms(issued - started).count();
  times.waitMs += Ms(std::chrono::steady_clock::now() - issued).count();
  outputs = std::move(out);
  return true;
}

} // namespace kimi::rt

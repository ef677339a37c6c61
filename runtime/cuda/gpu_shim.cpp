//===- gpu_shim.cpp - What a GPU model's host code calls ------------------===//

#include "runtime/cuda/gpu_shim.h"
#include "runtime/support/text.h"

#include <climits>

namespace kimi::rt {

int32_t GpuShim::loadModule(void *ctx, const void *image, uint64_t size,
                            void **module) {
  GpuShim &s = of(ctx);
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

int32_t GpuShim::getFunction(void *ctx, void *module, const char *name,
                             void **function) {
  GpuShim &s = of(ctx);
  const CudaDriver &d = s.device->driver();
  cuda::CUfunction f = nullptr;
  cuda::CUresult r =
      d.cuModuleGetFunction(&f, static_cast<cuda::CUmodule>(module), name);
  if (r != 0)
    return s.fail(d.check(
        r, ("cuModuleGetFunction '" + std::string(name) + "'").c_str()));
  *function = f;
  if (s.profile.on)
    s.profile.names[f] = name;
  return 0;
}

int32_t GpuShim::launch(void *ctx, void *function, int64_t gx, int64_t gy,
                        int64_t gz, int64_t bx, int64_t by, int64_t bz,
                        int32_t smem, void **params) {
  GpuShim &s = of(ctx);
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
          it == s.profile.names.end() ? "a kernel"
                                      : "kernel '" + it->second + "'");
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
        *s.device, *s.stream, it == s.profile.names.end() ? "?" : it->second,
        std::to_string(gx) + "x" + std::to_string(gy) + "x" +
            std::to_string(gz) + " blocks of " + std::to_string(bx * by * bz),
        go);
  } else {
    st = go();
  }
  return st.isOk() ? 0 : s.fail(std::move(st));
}

int32_t GpuShim::alloc(void *ctx, uint64_t bytes, void **ptr) {
  GpuShim &s = of(ctx);
  StatusOr<cuda::CUdeviceptr> p = s.allocator->allocate(bytes);
  if (!p.isOk())
    return s.fail(p.takeStatus());
  *ptr = reinterpret_cast<void *>(p.value());
  return 0;
}

int32_t GpuShim::gemm(void *ctx, const int64_t *d) {
  GpuShim &s = of(ctx);
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
    if (Status prepared = s.blas->prepare(g, s.stream->handle());
        !prepared.isOk())
      return s.fail(std::move(prepared));
  auto go = [&] { return s.blas->gemm(g, s.stream->handle()); };
  // Profile rows by shape and layout (strides of m/k, k/n, m/n): one
  // shape can hide products of very different speed.
  auto strides = [](int64_t x, int64_t y) {
    return "(" + std::to_string(x) + "," + std::to_string(y) + ")";
  };
  Status st =
      s.profile.on
          ? s.profile.time(*s.device, *s.stream,
                           "cublasLt gemm " + std::to_string(g.m) + "x" +
                               std::to_string(g.n) + "x" + std::to_string(g.k) +
                               " a" + strides(g.aM, g.aK) + " b" +
                               strides(g.bK, g.bN) + " c" + strides(g.cM, g.cN),
                           "batch " + std::to_string(g.batch), go)
          : go();
  if (!st.isOk())
    return s.fail(std::move(st));
  return 0;
}

/// A device value the host code needs (kimi.host_read): after the work
/// queued before it.
int32_t GpuShim::readI32(void *ctx, const void *address, int32_t *value) {
  GpuShim &s = of(ctx);
  if (s.capturing)
    return s.fail(executionError(
        "the entry reads a device value on the host (kimi.host_read, e.g. "
        "sorted experts' largest count), which a graph cannot capture"));
  Status st = s.stream->synchronize();
  if (st.isOk()) {
    const CudaDriver &d = s.device->driver();
    st = d.check(d.cuMemcpyDtoH(value,
                                reinterpret_cast<cuda::CUdeviceptr>(address),
                                sizeof(int32_t)),
                 "cuMemcpyDtoH (host read)");
  }
  if (s.profile.on)
    s.profile.hostReads += 1;
  if (!st.isOk())
    return s.fail(st.addContext("host read of a device value"));
  return 0;
}

int32_t GpuShim::release(void *ctx, void *ptr) {
  GpuShim &s = of(ctx);
  Status st = s.allocator->release(reinterpret_cast<cuda::CUdeviceptr>(ptr));
  return st.isOk() ? 0 : s.fail(std::move(st));
}

kimi_rt_gpu_table GpuShim::table() {
  kimi_rt_gpu_table callbacks{};
  callbacks.ctx = this;
  callbacks.load_module = &GpuShim::loadModule;
  callbacks.get_function = &GpuShim::getFunction;
  callbacks.launch = &GpuShim::launch;
  callbacks.alloc = &GpuShim::alloc;
  callbacks.release = &GpuShim::release;
  callbacks.gemm = &GpuShim::gemm;
  callbacks.read_i32 = &GpuShim::readI32;
  return callbacks;
}

} // namespace kimi::rt

//===- gpu_shim.h - What a GPU model's host code calls ----------*- C++ -*-===//
//
// A compiled GPU model's host object launches its kernels, allocates device
// memory, runs matrix products and reads device values through the table
// `kimi_rt_gpu` (runtime/abi/kimi_module_abi.h). GpuShim is the context
// behind that table for one GpuModelExecutable: the device, the stream, the
// allocator of the current call (the executable's, or a graph's pool while
// capturing), cuBLASLt, and the kernel profile. A callback that fails keeps
// the first error for the executable to report after the call.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_GPU_SHIM_H
#define KIMI_RUNTIME_CUDA_GPU_SHIM_H

#include "runtime/abi/kimi_module_abi.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/kernel_profile.h"

#include <map>
#include <string>
#include <vector>

namespace kimi::rt {

struct GpuShim {
  KernelProfile profile;
  const CudaDevice *device = nullptr;
  const CudaStream *stream = nullptr;
  DeviceAllocator *allocator = nullptr;
  CublasLt *blas = nullptr;
  std::string blasError; // why cuBLASLt could not be loaded
  std::vector<cuda::CUmodule> modules;
  Status error;           // the first failure of the current call
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
  static GpuShim &of(void *ctx) { return *static_cast<GpuShim *>(ctx); }

  /// The callbacks, for runtime/abi/kimi_module_abi.h's kimi_rt_gpu table
  /// (`ctx` is the GpuShim).
  static int32_t loadModule(void *ctx, const void *image, uint64_t size,
                            void **module);
  static int32_t getFunction(void *ctx, void *module, const char *name,
                             void **function);
  static int32_t launch(void *ctx, void *function, int64_t gx, int64_t gy,
                        int64_t gz, int64_t bx, int64_t by, int64_t bz,
                        int32_t smem, void **params);
  static int32_t alloc(void *ctx, uint64_t bytes, void **ptr);
  /// A matrix product through cuBLASLt (descriptor: KIMI_GEMM_* slots).
  static int32_t gemm(void *ctx, const int64_t *descriptor);
  /// A device value the host code needs (kimi.host_read): after the work
  /// queued before it.
  static int32_t readI32(void *ctx, const void *address, int32_t *value);
  static int32_t release(void *ctx, void *ptr);
  /// The table of these callbacks with this shim as their context.
  kimi_rt_gpu_table table();
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_GPU_SHIM_H

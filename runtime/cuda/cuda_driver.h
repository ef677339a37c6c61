//===- cuda_driver.h - The CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// A table of the CUDA driver functions the runtime uses, resolved with
// dlopen("libcuda.so.1") + dlsym, so the runtime builds, links and runs its
// tests on machines without an NVIDIA driver; only code that opens a
// `CudaDevice` needs one. Versioned entry points are resolved by the names the
// driver exports for the current API (cuMemAlloc_v2, cuStreamDestroy_v2, ...),
// the names <cuda.h> maps the plain calls to.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_CUDA_DRIVER_H
#define KIMI_RUNTIME_CUDA_CUDA_DRIVER_H

#include "runtime/cuda/cuda_api.h"
#include "runtime/support/status.h"

#include <memory>
#include <string>

namespace kimi::rt {

/// The driver library name used by default.
inline constexpr const char *kCudaDriverLibrary = "libcuda.so.1";

// X(member, signature, symbol names tried in order)
#define KIMI_CUDA_DRIVER_FUNCTIONS(X)                                          \
  X(cuInit, cuda::CUresult (*)(unsigned), "cuInit")                            \
  X(cuDriverGetVersion, cuda::CUresult (*)(int *), "cuDriverGetVersion")       \
  X(cuGetErrorName, cuda::CUresult (*)(cuda::CUresult, const char **),         \
    "cuGetErrorName")                                                          \
  X(cuGetErrorString, cuda::CUresult (*)(cuda::CUresult, const char **),       \
    "cuGetErrorString")                                                        \
  X(cuDeviceGetCount, cuda::CUresult (*)(int *), "cuDeviceGetCount")           \
  X(cuDeviceGet, cuda::CUresult (*)(cuda::CUdevice *, int), "cuDeviceGet")     \
  X(cuDeviceGetName, cuda::CUresult (*)(char *, int, cuda::CUdevice),          \
    "cuDeviceGetName")                                                         \
  X(cuDeviceGetAttribute,                                                      \
    cuda::CUresult (*)(int *, cuda::CUdevice_attribute, cuda::CUdevice),       \
    "cuDeviceGetAttribute")                                                    \
  X(cuDeviceTotalMem, cuda::CUresult (*)(size_t *, cuda::CUdevice),            \
    "cuDeviceTotalMem_v2")                                                     \
  X(cuDevicePrimaryCtxRetain,                                                  \
    cuda::CUresult (*)(cuda::CUcontext *, cuda::CUdevice),                     \
    "cuDevicePrimaryCtxRetain")                                                \
  X(cuDevicePrimaryCtxRelease, cuda::CUresult (*)(cuda::CUdevice),             \
    "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")               \
  X(cuCtxSetCurrent, cuda::CUresult (*)(cuda::CUcontext), "cuCtxSetCurrent")   \
  X(cuCtxSynchronize, cuda::CUresult (*)(), "cuCtxSynchronize")                \
  X(cuMemAlloc, cuda::CUresult (*)(cuda::CUdeviceptr *, size_t),               \
    "cuMemAlloc_v2")                                                           \
  X(cuMemFree, cuda::CUresult (*)(cuda::CUdeviceptr), "cuMemFree_v2")          \
  X(cuMemGetInfo, cuda::CUresult (*)(size_t *, size_t *), "cuMemGetInfo_v2")   \
  X(cuMemcpyHtoD,                                                              \
    cuda::CUresult (*)(cuda::CUdeviceptr, const void *, size_t),               \
    "cuMemcpyHtoD_v2")                                                         \
  X(cuMemcpyDtoH, cuda::CUresult (*)(void *, cuda::CUdeviceptr, size_t),       \
    "cuMemcpyDtoH_v2")                                                         \
  X(cuMemcpyHtoDAsync,                                                         \
    cuda::CUresult (*)(cuda::CUdeviceptr, const void *, size_t,                \
                       cuda::CUstream),                                        \
    "cuMemcpyHtoDAsync_v2")                                                    \
  X(cuMemcpyDtoHAsync,                                                         \
    cuda::CUresult (*)(void *, cuda::CUdeviceptr, size_t, cuda::CUstream),     \
    "cuMemcpyDtoHAsync_v2")                                                    \
  X(cuMemcpyDtoDAsync,                                                         \
    cuda::CUresult (*)(cuda::CUdeviceptr, cuda::CUdeviceptr, size_t,           \
                       cuda::CUstream),                                        \
    "cuMemcpyDtoDAsync_v2")                                                    \
  X(cuMemsetD32Async,                                                          \
    cuda::CUresult (*)(cuda::CUdeviceptr, unsigned, size_t, cuda::CUstream),   \
    "cuMemsetD32Async")                                                        \
  X(cuMemsetD8Async,                                                           \
    cuda::CUresult (*)(cuda::CUdeviceptr, unsigned char, size_t,               \
                       cuda::CUstream),                                        \
    "cuMemsetD8Async")                                                         \
  X(cuMemcpy2DAsync,                                                           \
    cuda::CUresult (*)(const cuda::CudaMemcpy2D *, cuda::CUstream),            \
    "cuMemcpy2DAsync_v2")                                                      \
  X(cuModuleLoadDataEx,                                                        \
    cuda::CUresult (*)(cuda::CUmodule *, const void *, unsigned,               \
                       cuda::CUjit_option *, void **),                         \
    "cuModuleLoadDataEx")                                                      \
  X(cuModuleUnload, cuda::CUresult (*)(cuda::CUmodule), "cuModuleUnload")      \
  X(cuModuleGetFunction,                                                       \
    cuda::CUresult (*)(cuda::CUfunction *, cuda::CUmodule, const char *),      \
    "cuModuleGetFunction")                                                     \
  X(cuFuncSetAttribute,                                                        \
    cuda::CUresult (*)(cuda::CUfunction, cuda::CUfunction_attribute, int),     \
    "cuFuncSetAttribute")                                                      \
  X(cuLaunchKernel,                                                            \
    cuda::CUresult (*)(cuda::CUfunction, unsigned, unsigned, unsigned,         \
                       unsigned, unsigned, unsigned, unsigned,                 \
                       cuda::CUstream, void **, void **),                      \
    "cuLaunchKernel")                                                          \
  X(cuLaunchKernelEx,                                                          \
    cuda::CUresult (*)(const cuda::CudaLaunchConfig *, cuda::CUfunction,       \
                       void **, void **),                                      \
    "cuLaunchKernelEx")                                                        \
  X(cuStreamCreate, cuda::CUresult (*)(cuda::CUstream *, unsigned),            \
    "cuStreamCreate")                                                          \
  X(cuStreamDestroy, cuda::CUresult (*)(cuda::CUstream),                       \
    "cuStreamDestroy_v2", "cuStreamDestroy")                                   \
  X(cuStreamSynchronize, cuda::CUresult (*)(cuda::CUstream),                   \
    "cuStreamSynchronize")                                                     \
  X(cuEventCreate, cuda::CUresult (*)(cuda::CUevent *, unsigned),              \
    "cuEventCreate")                                                           \
  X(cuEventDestroy, cuda::CUresult (*)(cuda::CUevent),                         \
    "cuEventDestroy_v2", "cuEventDestroy")                                     \
  X(cuEventRecord, cuda::CUresult (*)(cuda::CUevent, cuda::CUstream),          \
    "cuEventRecord")                                                           \
  X(cuEventSynchronize, cuda::CUresult (*)(cuda::CUevent),                     \
    "cuEventSynchronize")                                                      \
  X(cuEventRecordWithFlags,                                                    \
    cuda::CUresult (*)(cuda::CUevent, cuda::CUstream, unsigned),               \
    "cuEventRecordWithFlags")                                                  \
  X(cuStreamBeginCapture,                                                      \
    cuda::CUresult (*)(cuda::CUstream, cuda::CUstreamCaptureMode),             \
    "cuStreamBeginCapture_v2")                                                 \
  X(cuStreamEndCapture, cuda::CUresult (*)(cuda::CUstream, cuda::CUgraph *),   \
    "cuStreamEndCapture")                                                      \
  X(cuGraphInstantiateWithFlags,                                               \
    cuda::CUresult (*)(cuda::CUgraphExec *, cuda::CUgraph, unsigned long long), \
    "cuGraphInstantiateWithFlags")                                             \
  X(cuGraphExecUpdate,                                                         \
    cuda::CUresult (*)(cuda::CUgraphExec, cuda::CUgraph,                       \
                       cuda::CudaGraphExecUpdateResultInfo *),                 \
    "cuGraphExecUpdate_v2")                                                    \
  X(cuGraphLaunch, cuda::CUresult (*)(cuda::CUgraphExec, cuda::CUstream),      \
    "cuGraphLaunch")                                                           \
  X(cuGraphExecDestroy, cuda::CUresult (*)(cuda::CUgraphExec),                 \
    "cuGraphExecDestroy")                                                      \
  X(cuGraphDestroy, cuda::CUresult (*)(cuda::CUgraph), "cuGraphDestroy")       \
  X(cuEventElapsedTime,                                                        \
    cuda::CUresult (*)(float *, cuda::CUevent, cuda::CUevent),                 \
    "cuEventElapsedTime_v2", "cuEventElapsedTime")

namespace cuda {
template <typename T> using Identity = T; // names a function pointer type
} // namespace cuda

/// The resolved driver. Immutable once loaded; share it freely.
class CudaDriver {
public:
#define KIMI_CUDA_DRIVER_MEMBER(name, type, ...)                               \
  cuda::Identity<type> name = nullptr;
  KIMI_CUDA_DRIVER_FUNCTIONS(KIMI_CUDA_DRIVER_MEMBER)
#undef KIMI_CUDA_DRIVER_MEMBER

  /// dlopen()s `library` (a file name searched like any shared library, or a
  /// path) and resolves every function. Errors (kModule): "<library> not
  /// found: no NVIDIA driver on this machine (<dlerror>)", or
  /// "<library>: symbol cuX missing (driver too old?)". Does not call cuInit.
  static StatusOr<std::shared_ptr<const CudaDriver>>
  load(const std::string &library = kCudaDriverLibrary);

  /// The process-wide driver from libcuda.so.1, loaded on first use; later
  /// calls return the same driver, or the same error.
  static StatusOr<std::shared_ptr<const CudaDriver>> shared();

  ~CudaDriver();
  CudaDriver(const CudaDriver &) = delete;
  CudaDriver &operator=(const CudaDriver &) = delete;

  /// OK for CUDA_SUCCESS, else a kExecution error
  /// "<call>: CUDA_ERROR_X (<driver's description>)".
  Status check(cuda::CUresult result, const char *call) const;
  /// "CUDA_ERROR_X (<description>)" for `result`.
  std::string describe(cuda::CUresult result) const;

  const std::string &library() const { return library_; }

private:
  CudaDriver() = default;
  void *handle_ = nullptr;
  std::string library_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_CUDA_DRIVER_H

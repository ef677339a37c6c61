//===- cuda_api.h - The few CUDA driver API types the runtime uses -*- C++ -*-===//
//
// The runtime never includes <cuda.h> and never links libcuda: it loads the
// driver at run time (cuda_driver.h). These are the declarations it needs,
// with the values documented in the CUDA driver API (cuda.h of CUDA 12/13;
// the values are part of the stable ABI). Private to runtime/cuda/.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_CUDA_API_H
#define KIMI_RUNTIME_CUDA_CUDA_API_H

#include <cstddef>

namespace kimi::rt::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long; // 64-bit device address
// Opaque handles: pointers to incomplete driver structs.
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUgraph = struct CUgraph_st *;
using CUgraphExec = struct CUgraphExec_st *;
using CUstreamCaptureMode = int;
inline constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
inline constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_RELAXED = 2;
using CUjit_option = int;
using CUdevice_attribute = int;
using CUfunction_attribute = int;

// CUDA_MEMCPY2D (cuda.h's CUDA_MEMCPY2D_v2 layout).
struct CudaMemcpy2D {
  size_t srcXInBytes = 0, srcY = 0;
  int srcMemoryType = 0; // CUmemorytype
  const void *srcHost = nullptr;
  CUdeviceptr srcDevice = 0;
  void *srcArray = nullptr;
  size_t srcPitch = 0;
  size_t dstXInBytes = 0, dstY = 0;
  int dstMemoryType = 0;
  void *dstHost = nullptr;
  CUdeviceptr dstDevice = 0;
  void *dstArray = nullptr;
  size_t dstPitch = 0;
  size_t WidthInBytes = 0, Height = 0;
};
static_assert(sizeof(CudaMemcpy2D) == 128 &&
                  offsetof(CudaMemcpy2D, dstDevice) == 88 &&
                  offsetof(CudaMemcpy2D, Height) == 120,
              "CUDA_MEMCPY2D layout (checked against CUDA 13's cuda.h)");
constexpr int CU_MEMORYTYPE_HOST = 1;
constexpr int CU_MEMORYTYPE_DEVICE = 2;

// CUgraphExecUpdateResultInfo of cuGraphExecUpdate (cuda.h's layout).
struct CudaGraphExecUpdateResultInfo {
  int result = 0; // CUgraphExecUpdateResult: 0 success, 2 topology changed, ...
  void *errorNode = nullptr;
  void *errorFromNode = nullptr;
};
static_assert(sizeof(CudaGraphExecUpdateResultInfo) == 24,
              "CUgraphExecUpdateResultInfo layout (CUDA 13's cuda.h)");

// CUlaunchAttribute / CUlaunchConfig of cuLaunchKernelEx (cuda.h's layout;
// the value is a 64-byte union, of which the runtime sets one int).
using CUlaunchAttributeID = int;
constexpr CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CudaLaunchAttribute {
  CUlaunchAttributeID id = 0;
  char pad[4] = {};
  union {
    alignas(8) char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value = {};
};
struct CudaLaunchConfig {
  unsigned gridDimX = 1, gridDimY = 1, gridDimZ = 1;
  unsigned blockDimX = 1, blockDimY = 1, blockDimZ = 1;
  unsigned sharedMemBytes = 0;
  CUstream hStream = nullptr;
  CudaLaunchAttribute *attrs = nullptr;
  unsigned numAttrs = 0;
};
static_assert(sizeof(CudaLaunchAttribute) == 72 &&
                  offsetof(CudaLaunchAttribute, value) == 8 &&
                  sizeof(CudaLaunchConfig) == 56 &&
                  offsetof(CudaLaunchConfig, hStream) == 32 &&
                  offsetof(CudaLaunchConfig, numAttrs) == 48,
              "CUlaunchAttribute / CUlaunchConfig layout (CUDA 13's cuda.h)");

// CUresult
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
constexpr CUresult CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910;

// CUjit_option
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER = 3;
constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr CUjit_option CU_JIT_LOG_VERBOSE = 12;

// CUdevice_attribute
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// CUfunction_attribute
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// CUstream_flags / CUevent_flags
constexpr unsigned CU_STREAM_DEFAULT = 0x0;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DEFAULT = 0x0;

} // namespace kimi::rt::cuda

#endif // KIMI_RUNTIME_CUDA_CUDA_API_H

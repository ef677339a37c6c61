//===- captured_call.h - An entry call captured as a CUDA graph -*- C++ -*-===//
//
// Internal to GpuModelExecutable (decode_graphs.cpp): what a decode graph
// owns and where its replay finds the inputs and leaves the outputs.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_CAPTURED_CALL_H
#define KIMI_RUNTIME_CUDA_CAPTURED_CALL_H

#include "runtime/cuda/gpu_model_executable.h"
#include "runtime/cuda/kernel_profile.h"

namespace kimi::rt {

/// Where a captured call leaves one output.
struct CapturedResult {
  cuda::CUdeviceptr at;
  size_t bytes;
  std::vector<int64_t> shape;
  /// A state updated in place: the input whose memory holds it after the
  /// replay (none: the result is copied out).
  size_t inPlaceOf = kNone;
  static constexpr size_t kNone = ~size_t(0);
};

struct GpuModelExecutable::CapturedCall {
  std::string key;
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
  using Result = CapturedResult;
  std::vector<Result> results;
  /// Profiled captures: the events recorded by the graph's nodes, and what
  /// each pair brackets.
  std::vector<std::unique_ptr<CudaEvent>> events;
  std::vector<KernelProfile::Pending> timed;
  std::unique_ptr<CudaGraph> graph; // last: destroyed before the pool it uses
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_CAPTURED_CALL_H

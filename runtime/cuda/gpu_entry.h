//===- gpu_entry.h - run a GPU entry of an artifact -------------*- C++ -*-===//
//
// A GPU entry (docs/runtime-abi.md) is a list of buffers and a list of
// kernel launches over them. `GpuEntry` loads the entry's modules (a cubin
// when one of the same name exists and loads on this device, else the PTX,
// JIT-compiled by the driver), allocates its temporary and constant
// buffers, takes the caller's device memory for the input, output and inout
// buffers, and runs the launches in order on a stream.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_GPU_ENTRY_H
#define KIMI_RUNTIME_CUDA_GPU_ENTRY_H

#include "runtime/artifact/types.h"
#include "runtime/cuda/cuda_device.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

class GpuEntry {
public:
  /// Loads entry `entryName` of `artifact` (validated) on `device`.
  static StatusOr<std::unique_ptr<GpuEntry>>
  load(const CudaDevice &device, const ArtifactSpec &artifact,
       const std::string &entryName);

  const EntrySpec &spec() const { return spec_; }

  /// Binds the caller's memory to buffer `name` (input, output or inout);
  /// `bytes` must equal the buffer's size.
  Status bind(const std::string &name, cuda::CUdeviceptr address, size_t bytes);
  Status bind(const std::string &name, const DeviceBuffer &buffer) {
    return bind(name, buffer.address(), buffer.size());
  }

  /// Enqueues every launch on `stream` (nullptr: the default stream). Fails
  /// before launching anything if a caller buffer is unbound.
  Status run(const CudaStream *stream = nullptr);
  /// Enqueues launches [first, first + count) only (for per-kernel timing).
  Status runLaunches(size_t first, size_t count, const CudaStream *stream = nullptr);

  /// "cubin" or "ptx" per kernel image used, e.g. "kda_0: cubin".
  const std::vector<std::string> &moduleSources() const { return sources_; }

private:
  GpuEntry() = default;
  const CudaDevice *device_ = nullptr;
  EntrySpec spec_;
  std::vector<std::unique_ptr<CudaModule>> modules_;
  std::map<uint32_t, CudaModule *> moduleOfImage_;
  std::vector<CudaKernel> kernels_; // one per launch
  std::vector<DeviceBuffer> owned_; // temporaries and constants
  std::vector<cuda::CUdeviceptr> addresses_;
  std::vector<bool> bound_;
  std::vector<std::string> sources_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_GPU_ENTRY_H

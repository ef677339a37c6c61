//===- device_allocator.h - Cached device memory for one stream -*- C++ -*-===//
//
// The GPU model executable's allocator (runtime/cuda/gpu_model_executable.h):
// every buffer a compiled model's host code allocates comes from here, and
// a decode graph's own memory from an allocator of its own.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_DEVICE_ALLOCATOR_H
#define KIMI_RUNTIME_CUDA_DEVICE_ALLOCATOR_H

#include "runtime/cuda/cuda_device.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace kimi::rt {

/// Device memory with a cache of released blocks (by size class), so that
/// the allocations of one entry call are reused by the next.
class DeviceAllocator {
public:
  explicit DeviceAllocator(const CudaDevice &device) : device_(device) {}
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator &) = delete;
  DeviceAllocator &operator=(const DeviceAllocator &) = delete;

  StatusOr<cuda::CUdeviceptr> allocate(size_t bytes);
  /// With a stream: every allocation is filled with NaN (0x7fc00000) on it.
  void setPoison(const CudaStream *stream) { poison_ = stream; }
  const CudaStream *poison() const { return poison_; }
  /// Returns a block from allocate() to the cache; an error for an address
  /// it did not hand out.
  Status release(cuda::CUdeviceptr address);
  /// Frees every cached block (not the ones in use).
  void trim();
  bool isLive(cuda::CUdeviceptr address) const { return live_.count(address); }
  /// Returns every block in use to the cache (the end of a call: nothing
  /// the call allocated outlives it), except retained ones.
  void releaseAll();
  /// Keeps a block from allocate() past releaseAll() (a carried tensor's),
  /// until releaseRetained(); returns its size (the class), 0 when the
  /// address is not a live block.
  size_t retain(cuda::CUdeviceptr address);
  void releaseRetained(cuda::CUdeviceptr address);
  size_t bytesInUse() const;
  size_t peakBytesInUse() const;
  /// Bytes of cached blocks (freed, kept for reuse).
  size_t bytesCached() const;
  /// Starts recording which blocks allocate() hands out, for
  /// trimUntouched(): a pool taken over from finished work (releaseAll())
  /// serves new work from its cache.
  void markReuse();
  /// Frees the cached blocks allocate() has not handed out since
  /// markReuse() (sizes the new work no longer takes) and stops
  /// recording; nothing without markReuse(). Blocks it handed out stay,
  /// cached or in use: work captured in a graph reuses freed blocks at
  /// replay.
  void trimUntouched();

private:
  static size_t sizeClass(size_t bytes);
  void trimLocked();
  const CudaDevice &device_;
  mutable std::mutex mutex_; // carried tensors release from any thread
  std::map<cuda::CUdeviceptr, size_t> live_;         // address -> class
  std::map<cuda::CUdeviceptr, size_t> retained_;     // address -> class
  std::multimap<size_t, cuda::CUdeviceptr> cached_;  // class -> address
  size_t inUse_ = 0, peak_ = 0;
  const CudaStream *poison_ = nullptr;
  bool recording_ = false;
  std::set<cuda::CUdeviceptr> touched_; // handed out since markReuse()
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_DEVICE_ALLOCATOR_H

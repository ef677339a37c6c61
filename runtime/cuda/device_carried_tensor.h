//===- device_carried_tensor.h - Carried tensors on the GPU ---*- C++ -*-===//
//
// Internal to GpuModelExecutable (gpu_model_executable.cpp and
// decode_graphs.cpp): the states and caches a Session carries on the device
// are views of retained blocks of the executable's allocator; a block goes
// back to the allocator when the last tensor on it is gone.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_DEVICE_CARRIED_TENSOR_H
#define KIMI_RUNTIME_CUDA_DEVICE_CARRIED_TENSOR_H

#include "runtime/cuda/gpu_model_executable.h"

#include <cstring>

namespace kimi::rt {

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
  regionToHost(size_t offset,
               const std::vector<int64_t> &shape) const override {
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

/// Room to grow in place for a one-sequence tensor of `bytes` at `data`.
inline std::shared_ptr<GrowableStorage>
growable(const GpuModelExecutable::DeviceBlock &b, cuda::CUdeviceptr data,
         size_t bytes) {
  auto storage = std::make_shared<GrowableStorage>();
  storage->capacity = b.size - size_t(data - b.base);
  storage->filled = bytes;
  return storage;
}

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_DEVICE_CARRIED_TENSOR_H

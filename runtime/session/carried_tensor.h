//===- carried_tensor.h - States and caches between entry calls -*- C++ -*-===//
//
// A Session carries each state and cache from one entry call to the next.
// Where the tensor lives is the executable's choice: host memory for CPU
// models, device memory for GPU models, so that a decode step moves no
// state across PCIe. A carried tensor is immutable once made and shared by
// sessions and snapshots.
//
// Caches grow by appending rows. appendRows returns a new tensor; for one
// sequence (B = 1) it may share the old tensor's storage and write past its
// end, which no tensor of that storage covers (the storage remembers how far
// it is filled, and only the tensor that ends there may extend it). So a
// decode step appends in amortised O(row) while every earlier tensor, held
// by a snapshot say, still reads its own rows unchanged.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_SESSION_CARRIED_TENSOR_H
#define KIMI_RUNTIME_SESSION_CARRIED_TENSOR_H

#include "runtime/cpu/host_tensor.h"
#include "runtime/support/status.h"

#include <atomic>
#include <memory>
#include <vector>

namespace kimi::rt {

class CarriedTensor {
public:
  CarriedTensor(DType dtype, std::vector<int64_t> shape)
      : dtype_(dtype), shape_(std::move(shape)) {}
  virtual ~CarriedTensor() = default;
  CarriedTensor(const CarriedTensor &) = delete;
  CarriedTensor &operator=(const CarriedTensor &) = delete;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  size_t bytes() const;
  /// Who holds the bytes: null for host memory, else the executable whose
  /// device memory it is (Executable::residence()).
  virtual const void *residence() const = 0;
  /// The tensor itself when it is in host memory, else null.
  virtual const HostTensor *host() const { return nullptr; }
  /// A host copy (for host tensors, the tensor itself: no copy).
  virtual StatusOr<HostTensor> toHost() const = 0;
  /// Rows [first, first + count) of the tensor seen as a matrix
  /// [rows, last dim], copied to a host tensor [count, last dim]: what a
  /// caller that wants a few rows (the last logits row of a prefill) moves
  /// instead of the whole tensor. An error when the range is out of bounds.
  StatusOr<HostTensor> rowsToHost(int64_t first, int64_t count) const;

protected:
  /// `shape` worth of bytes from byte `offset` on (checked by the caller),
  /// as a host tensor.
  virtual StatusOr<HostTensor>
  regionToHost(size_t offset, const std::vector<int64_t> &shape) const = 0;

private:
  DType dtype_;
  std::vector<int64_t> shape_;
};

using CarriedRef = std::shared_ptr<const CarriedTensor>;

/// Append-only bytes that several carried tensors may share (see the file
/// comment): `filled` is the end of the longest tensor made on it.
struct GrowableStorage {
  size_t capacity = 0;
  std::atomic<size_t> filled{0};
  /// The bytes past `filled` (up to `capacity`) were zeroed when the storage
  /// was made, and claims only write rows there: they are finite, so a
  /// tensor may be read padded into them (a cache_length entry masks them).
  bool zeroTail = false;
  /// Claims [from, to) for the tensor that ends at `from`: true when nothing
  /// was appended there since, and the capacity suffices.
  bool claim(size_t from, size_t to) {
    size_t expected = from;
    return to <= capacity && filled.compare_exchange_strong(expected, to);
  }
};

/// A carried tensor in host memory.
class HostCarriedTensor final : public CarriedTensor {
public:
  /// Shares `tensor`'s bytes (no copy; its buffer has no room to grow).
  explicit HostCarriedTensor(HostTensor tensor);
  const void *residence() const override { return nullptr; }
  const HostTensor *host() const override { return &tensor_; }
  StatusOr<HostTensor> toHost() const override { return tensor_; }

  /// Executable::appendRows for host tensors.
  static StatusOr<CarriedRef> appendRows(const CarriedRef &cache,
                                         const CarriedTensor &rows,
                                         int64_t batch);

protected:
  StatusOr<HostTensor>
  regionToHost(size_t offset, const std::vector<int64_t> &shape) const override;

private:
  HostCarriedTensor(HostTensor tensor, std::shared_ptr<GrowableStorage> storage)
      : CarriedTensor(tensor.dtype, tensor.shape), tensor_(std::move(tensor)),
        storage_(std::move(storage)) {}
  HostTensor tensor_;
  std::shared_ptr<GrowableStorage> storage_; // null: the buffer cannot grow
};

/// The shape of `cache` ([B, L, ...]) with `rows` more positions per
/// sequence; an error naming both shapes when `rows` is not [B, n, ...] of
/// the same dtype and trailing dims.
StatusOr<std::vector<int64_t>> grownCacheShape(const CarriedTensor *cache,
                                               const CarriedTensor &rows,
                                               int64_t batch);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SESSION_CARRIED_TENSOR_H

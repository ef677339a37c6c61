//===- memref.h - MLIR memref descriptors of any rank -----------*- C++ -*-===//
//
// MLIR's C interface passes a ranked memref as
//   struct { T *allocated; T *aligned; int64_t offset;
//            int64_t sizes[R]; int64_t strides[R]; }
// i.e. 3 + 2R 64-bit words with no padding, and a function with several
// results writes them into a struct of such descriptors in signature order
// (docs/runtime-abi.md). These helpers build and read descriptors whose rank
// is known only at run time (from the artifact's signature).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CPU_MEMREF_H
#define KIMI_RUNTIME_CPU_MEMREF_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kimi::rt {

static_assert(sizeof(void *) == 8, "the memref ABI here assumes 64-bit pointers");

/// Words of a rank-`rank` descriptor.
inline constexpr size_t memrefWords(size_t rank) { return 3 + 2 * rank; }

/// A read-only view of one descriptor in memory.
class MemRefView {
public:
  MemRefView(const uint64_t *words, size_t rank) : w_(words), rank_(rank) {}
  size_t rank() const { return rank_; }
  void *allocated() const { return reinterpret_cast<void *>(w_[0]); }
  void *aligned() const { return reinterpret_cast<void *>(w_[1]); }
  int64_t offset() const { return static_cast<int64_t>(w_[2]); }
  int64_t size(size_t i) const { return static_cast<int64_t>(w_[3 + i]); }
  int64_t stride(size_t i) const {
    return static_cast<int64_t>(w_[3 + rank_ + i]);
  }
  std::vector<int64_t> sizes() const;
  /// True when the strides are the row-major strides of the sizes (dims of
  /// size 1 may have any stride).
  bool isContiguous() const;

private:
  const uint64_t *w_;
  size_t rank_;
};

/// Storage for a struct of descriptors (the arguments or the results of an
/// entry point), one per rank in `ranks`, laid out back to back.
class MemRefStruct {
public:
  explicit MemRefStruct(const std::vector<size_t> &ranks);
  size_t count() const { return ranks_.size(); }
  /// Pointer to descriptor `i` (what the C interface takes).
  void *pointer(size_t i) { return words_.data() + offsets_[i]; }
  void *structPointer() { return words_.data(); }
  MemRefView view(size_t i) const {
    return MemRefView(words_.data() + offsets_[i], ranks_[i]);
  }
  /// Fills descriptor `i` for a contiguous row-major buffer.
  void setContiguous(size_t i, const void *data, const std::vector<int64_t> &sizes);
  size_t bytes() const { return words_.size() * sizeof(uint64_t); }

private:
  std::vector<size_t> ranks_;
  std::vector<size_t> offsets_;
  std::vector<uint64_t> words_;
};

/// Copies the (possibly strided) elements of `view` into `out`, row-major
/// contiguous; `elemSize` bytes per element.
void copyStrided(const MemRefView &view, size_t elemSize, uint8_t *out);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CPU_MEMREF_H

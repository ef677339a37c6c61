//===- memref.cpp - MLIR memref descriptors of any rank -------------------===//

#include "runtime/cpu/memref.h"

#include <cstring>

namespace kimi::rt {

std::vector<int64_t> MemRefView::sizes() const {
  std::vector<int64_t> s(rank_);
  for (size_t i = 0; i < rank_; ++i)
    s[i] = size(i);
  return s;
}

bool MemRefView::isContiguous() const {
  int64_t expected = 1;
  for (size_t i = rank_; i-- > 0;) {
    if (size(i) != 1 && stride(i) != expected)
      return false;
    expected *= size(i);
  }
  return true;
}

MemRefStruct::MemRefStruct(const std::vector<size_t> &ranks) : ranks_(ranks) {
  size_t total = 0;
  for (size_t r : ranks_) {
    offsets_.push_back(total);
    total += memrefWords(r);
  }
  words_.assign(total ? total : 1, 0);
}

void MemRefStruct::setContiguous(size_t i, const void *data,
                                 const std::vector<int64_t> &sizes) {
  uint64_t *w = words_.data() + offsets_[i];
  const size_t rank = ranks_[i];
  w[0] = reinterpret_cast<uint64_t>(data);
  w[1] = reinterpret_cast<uint64_t>(data);
  w[2] = 0;
  int64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    w[3 + d] = static_cast<uint64_t>(sizes[d]);
    w[3 + rank + d] = static_cast<uint64_t>(stride);
    stride *= sizes[d];
  }
}

void copyStrided(const MemRefView &view, size_t elemSize, uint8_t *out) {
  const size_t rank = view.rank();
  const uint8_t *base = static_cast<const uint8_t *>(view.aligned()) +
                        view.offset() * static_cast<int64_t>(elemSize);
  int64_t numel = 1;
  for (size_t d = 0; d < rank; ++d)
    numel *= view.size(d);
  if (numel == 0)
    return;
  if (view.isContiguous()) {
    std::memcpy(out, base, static_cast<size_t>(numel) * elemSize);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d)
      off += index[d] * view.stride(d);
    std::memcpy(out + n * static_cast<int64_t>(elemSize),
                base + off * static_cast<int64_t>(elemSize), elemSize);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < view.size(d))
        break;
      index[d] = 0;
    }
  }
}

} // namespace kimi::rt

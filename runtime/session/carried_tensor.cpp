//===- carried_tensor.cpp - States and caches between entry calls ---------===//

#include "runtime/session/carried_tensor.h"
#include "runtime/support/text.h"

#include <algorithm>
#include <cstring>

namespace kimi::rt {

size_t CarriedTensor::bytes() const {
  int64_t numel = 0;
  checkedNumel(shape_, numel);
  return static_cast<size_t>(numel) * dtypeSize(dtype_);
}

StatusOr<HostTensor> CarriedTensor::rowsToHost(int64_t first,
                                               int64_t count) const {
  const int64_t cols = shape_.empty() ? 1 : shape_.back();
  const int64_t rows = cols ? static_cast<int64_t>(bytes() / dtypeSize(dtype_)) / cols : 0;
  if (first < 0 || count < 0 || first > rows || count > rows - first)
    return invalidArgument("rows [" + std::to_string(first) + ", " +
                      std::to_string(first + count) + ") of a " +
                      std::string(dtypeName(dtype_)) + " " +
                      shapeToString(shape_) + " tensor (" +
                      std::to_string(rows) + " rows)");
  const size_t rowBytes = static_cast<size_t>(cols) * dtypeSize(dtype_);
  return regionToHost(static_cast<size_t>(first) * rowBytes, {count, cols});
}

HostCarriedTensor::HostCarriedTensor(HostTensor tensor)
    : CarriedTensor(tensor.dtype, tensor.shape), tensor_(std::move(tensor)) {}

StatusOr<HostTensor>
HostCarriedTensor::regionToHost(size_t offset,
                                const std::vector<int64_t> &shape) const {
  int64_t numel = 0;
  checkedNumel(shape, numel);
  const size_t bytes = static_cast<size_t>(numel) * dtypeSize(dtype());
  KIMI_ASSIGN_OR_RETURN(HostBuffer copy, HostBuffer::allocate(bytes));
  if (bytes)
    std::memcpy(copy.data, tensor_.data() + offset, bytes);
  return HostTensor{dtype(), shape, std::move(copy)};
}

StatusOr<std::vector<int64_t>> grownCacheShape(const CarriedTensor *cache,
                                               const CarriedTensor &rows,
                                               int64_t batch) {
  const std::vector<int64_t> &r = rows.shape();
  bool ok = r.size() >= 2 && r[0] == batch;
  if (ok && cache) {
    const std::vector<int64_t> &c = cache->shape();
    ok = cache->dtype() == rows.dtype() && c.size() == r.size() &&
         c[0] == batch && std::equal(c.begin() + 2, c.end(), r.begin() + 2);
  }
  if (!ok)
    return invalidArgument(
        "cache rows " + std::string(dtypeName(rows.dtype())) + " " +
        shapeToString(r) + " cannot extend " +
        (cache ? std::string(dtypeName(cache->dtype())) + " " +
                     shapeToString(cache->shape())
               : std::string("an empty cache")) +
        " of " + std::to_string(batch) + " sequences");
  std::vector<int64_t> shape = r;
  if (cache)
    shape[1] += cache->shape()[1];
  return shape;
}

StatusOr<CarriedRef> HostCarriedTensor::appendRows(const CarriedRef &cache,
                                                   const CarriedTensor &rows,
                                                   int64_t batch) {
  KIMI_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                        grownCacheShape(cache.get(), rows, batch));
  const auto *old = dynamic_cast<const HostCarriedTensor *>(cache.get());
  if (cache && !old)
    return invalidArgument("cache of shape " + shapeToString(cache->shape()) +
                           " is not in host memory");
  KIMI_ASSIGN_OR_RETURN(HostTensor added, rows.toHost());
  const size_t oldBytes = old ? old->bytes() : 0;
  const size_t newBytes = oldBytes + added.bytes();

  // One sequence: write past the end of the old tensor when nothing else has.
  if (batch == 1 && old && old->storage_ &&
      old->storage_->claim(oldBytes, newBytes)) {
    uint8_t *base = old->tensor_.buffer.data;
    std::memcpy(base + oldBytes, added.data(), added.bytes());
    HostTensor grown{rows.dtype(), shape,
                     HostBuffer{old->tensor_.buffer.owner, base, newBytes}};
    return CarriedRef(new HostCarriedTensor(std::move(grown), old->storage_));
  }

  // New bytes: room to double for one sequence (amortised appends); several
  // sequences are interleaved [B, L + n, ...], exactly sized.
  const size_t capacity = batch == 1 ? std::max(newBytes, 2 * oldBytes) : newBytes;
  KIMI_ASSIGN_OR_RETURN(HostBuffer buffer, HostBuffer::allocate(capacity));
  const size_t oldPer = oldBytes / size_t(batch);
  const size_t addPer = added.bytes() / size_t(batch);
  for (size_t b = 0; b < size_t(batch); ++b) {
    uint8_t *dst = buffer.data + b * (oldPer + addPer);
    if (oldPer)
      std::memcpy(dst, old->tensor_.data() + b * oldPer, oldPer);
    std::memcpy(dst + oldPer, added.data() + b * addPer, addPer);
  }
  buffer.size = newBytes;
  std::shared_ptr<GrowableStorage> storage;
  if (batch == 1) {
    storage = std::make_shared<GrowableStorage>();
    storage->capacity = capacity;
    storage->filled = newBytes;
  }
  return CarriedRef(new HostCarriedTensor(
      HostTensor{rows.dtype(), std::move(shape), std::move(buffer)},
      std::move(storage)));
}

} // namespace kimi::rt

//===- device_allocator.cpp - Cached device memory for one stream ---------===//

#include "runtime/cuda/device_allocator.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kimi::rt {

size_t DeviceAllocator::sizeClass(size_t bytes) {
  // Powers of two up to 64 MiB (at least 256 B), then 2 MiB multiples: at
  // most 2x waste for small blocks, a few percent for large ones.
  size_t c = 256;
  if (bytes <= (size_t(64) << 20)) {
    while (c < bytes)
      c <<= 1;
    return c;
  }
  const size_t step = size_t(2) << 20;
  return (bytes + step - 1) / step * step;
}

StatusOr<cuda::CUdeviceptr> DeviceAllocator::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t c = sizeClass(bytes == 0 ? 1 : bytes);
  cuda::CUdeviceptr p = 0;
  auto hit = cached_.find(c);
  if (hit != cached_.end()) {
    p = hit->second;
    cached_.erase(hit);
  } else {
    const CudaDriver &d = device_.driver();
    cuda::CUresult r = d.cuMemAlloc(&p, c);
    if (r != 0) {
      trimLocked(); // give the cache back and try once more
      r = d.cuMemAlloc(&p, c);
    }
    if (r != 0)
      return d.check(r, ("cuMemAlloc of " + std::to_string(c) +
                         " bytes (" + std::to_string(inUse_) +
                         " in use)").c_str());
  }
  if (poison_) {
    const CudaDriver &d = device_.driver();
    KIMI_RETURN_IF_ERROR(d.check(
        d.cuMemsetD32Async(p, 0x7fc00000u, c / 4, poison_->handle()),
        "cuMemsetD32Async (poison)"));
  }
  live_[p] = c;
  inUse_ += c;
  peak_ = std::max(peak_, inUse_);
  if (recording_)
    touched_.insert(p);
  return p;
}

Status DeviceAllocator::release(cuda::CUdeviceptr address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end())
    return executionError("device allocator: release of an address it did "
                          "not allocate");
  inUse_ -= it->second;
  cached_.emplace(it->second, address);
  live_.erase(it);
  return Status::ok();
}

size_t DeviceAllocator::retain(cuda::CUdeviceptr address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end())
    return 0;
  const size_t c = it->second;
  retained_.emplace(address, c);
  live_.erase(it);
  return c;
}

void DeviceAllocator::releaseRetained(cuda::CUdeviceptr address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = retained_.find(address);
  if (it == retained_.end())
    return;
  inUse_ -= it->second;
  cached_.emplace(it->second, address);
  retained_.erase(it);
}

size_t DeviceAllocator::bytesInUse() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return inUse_;
}

size_t DeviceAllocator::peakBytesInUse() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

size_t DeviceAllocator::bytesCached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const auto &[c, p] : cached_)
    bytes += c;
  return bytes;
}

void DeviceAllocator::markReuse() {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = true;
  touched_.clear();
}

void DeviceAllocator::trimUntouched() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_)
    return; // no markReuse(): every cached block may be the work's
  for (auto it = cached_.begin(); it != cached_.end();) {
    if (touched_.count(it->second)) {
      ++it;
      continue;
    }
    (void)device_.driver().cuMemFree(it->second);
    it = cached_.erase(it);
  }
  recording_ = false;
  touched_.clear();
}

void DeviceAllocator::releaseAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto &[p, c] : live_) {
    cached_.emplace(c, p);
    inUse_ -= c;
  }
  live_.clear();
}

void DeviceAllocator::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  trimLocked();
}

void DeviceAllocator::trimLocked() {
  for (auto &[c, p] : cached_)
    (void)device_.driver().cuMemFree(p);
  cached_.clear();
}

DeviceAllocator::~DeviceAllocator() {
  trim();
  for (auto &[p, c] : live_)
    (void)device_.driver().cuMemFree(p);
  for (auto &[p, c] : retained_)
    (void)device_.driver().cuMemFree(p);
}

} // namespace kimi::rt

//===- host_tensor.h - Host memory tensors ----------------------*- C++ -*-===//
//
// A tensor in host memory whose bytes are shared and immutable once
// produced. The bytes are either allocated by the runtime or adopted from an
// output of compiled code (released with free(allocated), docs/runtime-abi.md),
// so a state returned by `decode` becomes the session's state without a copy.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CPU_HOST_TENSOR_H
#define KIMI_RUNTIME_CPU_HOST_TENSOR_H

#include "runtime/artifact/types.h"
#include "runtime/support/status.h"

#include <cstdlib>
#include <memory>
#include <vector>

namespace kimi::rt {

struct HostBuffer {
  std::shared_ptr<void> owner; // keeps `data` alive
  uint8_t *data = nullptr;
  size_t size = 0;

  /// `bytes` of fresh zeroed memory; an error when it cannot be allocated.
  static StatusOr<HostBuffer> allocate(size_t bytes);
  /// Takes ownership of `allocated` (released with free()).
  static std::shared_ptr<void> adoptMalloc(void *allocated) {
    return std::shared_ptr<void>(allocated, [](void *p) { std::free(p); });
  }
};

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  HostBuffer buffer;

  const uint8_t *data() const { return buffer.data; }
  size_t bytes() const { return buffer.size; }
};

inline StatusOr<HostBuffer> HostBuffer::allocate(size_t bytes) {
  void *p = std::calloc(bytes ? bytes : 1, 1);
  if (!p)
    return executionError("out of memory allocating " + std::to_string(bytes) +
                          " bytes");
  HostBuffer b;
  b.owner = adoptMalloc(p);
  b.data = static_cast<uint8_t *>(p);
  b.size = bytes;
  return b;
}

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CPU_HOST_TENSOR_H

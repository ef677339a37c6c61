//===- safetensors_writer.h - Writes safetensors files ----------*- C++ -*-===//
//
// For tests, demos and small tools: collects tensors in memory and writes
// one safetensors file (header padded with spaces to a multiple of 8 bytes,
// tensors in insertion order, contiguous).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_SAFETENSORS_WRITER_H
#define KIMI_RUNTIME_WEIGHTS_SAFETENSORS_WRITER_H

#include "runtime/support/status.h"
#include "runtime/weights/safetensors.h"

namespace kimi::rt {

class SafetensorsWriter {
public:
  /// Adds a tensor; `nbytes` must equal numel x element size (checked by
  /// serialize()). The bytes are copied.
  void add(std::string name, StDType dtype, std::vector<int64_t> shape,
           const void *data, size_t nbytes);
  /// Convenience for F32 tensors.
  void addF32(std::string name, std::vector<int64_t> shape,
              const std::vector<float> &values);
  void addMetadata(std::string key, std::string value);

  /// The file contents; fails on a duplicate name or a size mismatch.
  StatusOr<std::vector<uint8_t>> serialize() const;
  Status write(const std::string &path) const;

private:
  struct Entry {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

/// `s` as a JSON string literal (with quotes).
std::string jsonQuote(const std::string &s);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_SAFETENSORS_WRITER_H

//===- safetensors.h - Reads safetensors files ------------------*- C++ -*-===//
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON `{"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
// ..., "__metadata__": {..}}`, then the data section; offsets are relative to
// the data section. The file is mapped read-only; every header field is
// checked (dtype known, offsets inside the data section, end - begin = numel x
// element size, no two tensors overlap) before any tensor is exposed.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_SAFETENSORS_H
#define KIMI_RUNTIME_WEIGHTS_SAFETENSORS_H

#include "runtime/support/status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kimi::rt {

/// The safetensors dtypes. The first five are the ones the weight loader
/// converts; the others are recognised so that files holding them open, and
/// a weight stored in one of them is refused by name.
enum class StDType : uint8_t {
  kF32, kBF16, kF16, kU8, kF8E8M0,
  kF64, kI64, kI32, kI16, kI8, kU16, kU32, kU64, kBool, kF8E4M3, kF8E5M2,
};

const char *stDTypeName(StDType dtype); // "F32", "F8_E8M0", ...
size_t stDTypeSize(StDType dtype);
/// False for a string that is not a safetensors dtype.
bool parseStDType(const std::string &text, StDType &out);

/// One tensor of a file; `data` points into the mapping (not aligned).
struct TensorView {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0; // in the data section
  uint64_t nbytes = 0;
  const uint8_t *data = nullptr;
};

/// Largest accepted JSON header (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100u * 1000u * 1000u;

class SafetensorsFile {
public:
  /// Maps and parses `path`.
  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string &path);
  /// Parses bytes held in memory; `label` names them in messages.
  static StatusOr<std::unique_ptr<SafetensorsFile>>
  fromBytes(std::vector<uint8_t> bytes, const std::string &label = "<memory>");

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;

  const std::string &path() const { return path_; }
  const std::vector<TensorView> &tensors() const { return tensors_; }
  const TensorView *find(const std::string &name) const;
  const std::vector<std::pair<std::string, std::string>> &metadata() const {
    return metadata_;
  }

private:
  SafetensorsFile() = default;
  Status parse(const uint8_t *bytes, uint64_t size);

  std::string path_;
  void *mapping_ = nullptr;
  size_t mappingSize_ = 0;
  std::vector<uint8_t> owned_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_SAFETENSORS_H

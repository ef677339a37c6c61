//===- safetensors.cpp - Reads safetensors files --------------------------===//

#include "runtime/weights/safetensors.h"
#include "runtime/artifact/types.h"
#include "runtime/support/file_io.h"
#include "runtime/support/text.h"
#include "runtime/weights/json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kimi::rt {

namespace {
struct DTypeRow {
  StDType dtype;
  const char *name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::kF32, "F32", 4},       {StDType::kBF16, "BF16", 2},
    {StDType::kF16, "F16", 2},       {StDType::kU8, "U8", 1},
    {StDType::kF8E8M0, "F8_E8M0", 1}, {StDType::kF64, "F64", 8},
    {StDType::kI64, "I64", 8},       {StDType::kI32, "I32", 4},
    {StDType::kI16, "I16", 2},       {StDType::kI8, "I8", 1},
    {StDType::kU16, "U16", 2},       {StDType::kU32, "U32", 4},
    {StDType::kU64, "U64", 8},       {StDType::kBool, "BOOL", 1},
    {StDType::kF8E4M3, "F8_E4M3", 1}, {StDType::kF8E5M2, "F8_E5M2", 1},
};
} // namespace

const char *stDTypeName(StDType dtype) {
  for (const DTypeRow &row : kDTypes)
    if (row.dtype == dtype)
      return row.name;
  return "?";
}

size_t stDTypeSize(StDType dtype) {
  for (const DTypeRow &row : kDTypes)
    if (row.dtype == dtype)
      return row.size;
  return 0;
}

bool parseStDType(const std::string &text, StDType &out) {
  for (const DTypeRow &row : kDTypes)
    if (text == row.name) {
      out = row.dtype;
      return true;
    }
  return false;
}

const TensorView *SafetensorsFile::find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_)
    ::munmap(mapping_, mappingSize_);
}

namespace {

Status headerError(const std::string &what) { return invalidWeights(what); }

/// Reads a JSON array of non-negative integers.
bool readUints(const JsonValue &v, std::vector<uint64_t> &out) {
  if (!v.isArray())
    return false;
  out.clear();
  for (const JsonValue &e : v.array) {
    if (e.kind != JsonValue::Kind::kNumber || !e.isUint64)
      return false;
    out.push_back(e.uint64);
  }
  return true;
}

} // namespace

Status SafetensorsFile::parse(const uint8_t *bytes, uint64_t size) {
  if (size < 8)
    return headerError("file of " + std::to_string(size) +
                       " bytes is shorter than the 8-byte header length");
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | bytes[i];
  if (headerLen > kMaxSafetensorsHeader)
    return headerError("header length " + std::to_string(headerLen) +
                       " exceeds the limit of " +
                       std::to_string(kMaxSafetensorsHeader) + " bytes");
  if (headerLen > size - 8)
    return headerError("header length " + std::to_string(headerLen) +
                       " exceeds the " + std::to_string(size - 8) +
                       " bytes after the length field (file truncated?)");
  if (headerLen < 2)
    return headerError("header length " + std::to_string(headerLen) +
                       " is too short for a JSON object");
  StatusOr<JsonValue> parsed =
      parseJson(reinterpret_cast<const char *>(bytes + 8), headerLen);
  if (!parsed.isOk()) {
    Status s = parsed.takeStatus();
    return headerError("header: " + s.message());
  }
  const JsonValue &header = parsed.value();
  if (!header.isObject())
    return headerError(std::string("header is a JSON ") +
                       jsonKindName(header.kind) + ", expected an object");

  const uint8_t *data = bytes + 8 + headerLen;
  const uint64_t dataSize = size - 8 - headerLen;
  tensors_.reserve(header.object.size());
  for (const auto &[name, info] : header.object) {
    if (name == "__metadata__") {
      if (!info.isObject())
        return headerError("__metadata__ is not an object");
      for (const auto &[k, v] : info.object) {
        if (!v.isString())
          return headerError("__metadata__ value of " + quoted(k) +
                             " is not a string");
        metadata_.emplace_back(k, v.string);
      }
      continue;
    }
    const std::string where = "tensor " + quoted(name);
    if (!info.isObject())
      return headerError(where + ": entry is not an object");
    const JsonValue *dtypeV = info.find("dtype");
    const JsonValue *shapeV = info.find("shape");
    const JsonValue *offsetsV = info.find("data_offsets");
    if (!dtypeV || !dtypeV->isString())
      return headerError(where + ": missing or non-string \"dtype\"");
    if (!shapeV)
      return headerError(where + ": missing \"shape\"");
    if (!offsetsV)
      return headerError(where + ": missing \"data_offsets\"");
    TensorView t;
    t.name = name;
    if (!parseStDType(dtypeV->string, t.dtype))
      return headerError(where + ": unknown dtype " + quoted(dtypeV->string));
    std::vector<uint64_t> dims, offsets;
    if (!readUints(*shapeV, dims))
      return headerError(where + ": \"shape\" is not an array of non-negative "
                                 "integers");
    if (dims.size() > 16)
      return headerError(where + ": rank " + std::to_string(dims.size()) +
                         " is too large");
    for (uint64_t d : dims) {
      if (d > (uint64_t(1) << 53))
        return headerError(where + ": dimension " + std::to_string(d) +
                           " is too large");
      t.shape.push_back(static_cast<int64_t>(d));
    }
    if (!readUints(*offsetsV, offsets) || offsets.size() != 2)
      return headerError(where + ": \"data_offsets\" is not [begin, end]");
    int64_t numel = 0;
    if (!checkedNumel(t.shape, numel))
      return headerError(where + ": shape " + shapeToString(t.shape) +
                         " is too large");
    const uint64_t need = static_cast<uint64_t>(numel) * stDTypeSize(t.dtype);
    const uint64_t begin = offsets[0], end = offsets[1];
    const std::string range =
        "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (end < begin)
      return headerError(where + ": data_offsets " + range + " end before begin");
    if (end > dataSize)
      return headerError(where + ": data_offsets " + range +
                         " extend beyond the data section of " +
                         std::to_string(dataSize) + " bytes (file truncated?)");
    if (end - begin != need)
      return headerError(where + ": data_offsets " + range + " hold " +
                         std::to_string(end - begin) + " bytes but " +
                         stDTypeName(t.dtype) + " " + shapeToString(t.shape) +
                         " needs " + std::to_string(need));
    t.offset = begin;
    t.nbytes = need;
    t.data = data + begin;
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // No two tensors may share bytes, and every byte of the data section
  // belongs to one (the format's rule: no holes). A header length cut short
  // into the header's padding still parses, and would move every tensor by
  // as many bytes; the data then no longer ends where the last tensor does.
  std::vector<const TensorView *> sorted;
  for (const TensorView &t : tensors_)
    if (t.nbytes)
      sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorView *a, const TensorView *b) {
              return a->offset < b->offset;
            });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const TensorView *a = sorted[i - 1], *b = sorted[i];
    if (b->offset < a->offset + a->nbytes)
      return headerError("tensors " + quoted(a->name) + " and " +
                         quoted(b->name) + " overlap (bytes [" +
                         std::to_string(a->offset) + ", " +
                         std::to_string(a->offset + a->nbytes) + ") and [" +
                         std::to_string(b->offset) + ", " +
                         std::to_string(b->offset + b->nbytes) + "))");
  }
  uint64_t covered = 0; // the data section's bytes [0, covered) are indexed
  for (const TensorView *t : sorted) {
    if (t->offset != covered)
      return headerError("bytes [" + std::to_string(covered) + ", " +
                         std::to_string(t->offset) +
                         ") of the data section belong to no tensor (before " +
                         quoted(t->name) + ")");
    covered = t->offset + t->nbytes;
  }
  if (covered != dataSize)
    return headerError(
        "the data section is " + std::to_string(dataSize) +
        " bytes but its tensors end at byte " + std::to_string(covered) +
        " (a header length that does not match the header moves every "
        "tensor)");
  return Status::ok();
}

StatusOr<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::fromBytes(std::vector<uint8_t> bytes, const std::string &label) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = label;
  file->owned_ = std::move(bytes);
  Status s = file->parse(file->owned_.data(), file->owned_.size());
  if (!s.isOk())
    return s.addContext("safetensors " + quoted(label));
  return file;
}

StatusOr<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::open(const std::string &path) {
  const std::string label = "safetensors " + quoted(path);
  KIMI_ASSIGN_OR_RETURN(RegularFile regular, RegularFile::open(path, label));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const uint64_t size = regular.size();
  if (size < 8) {
    Status s = file->parse(nullptr, size);
    return s.addContext(label);
  }
  void *map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, regular.fd(), 0);
  int err = errno;
  if (map == MAP_FAILED)
    return ioError("cannot map " + label + ": " + std::strerror(err));
  file->mapping_ = map;
  file->mappingSize_ = size;
  Status s = file->parse(static_cast<const uint8_t *>(map), size);
  if (!s.isOk())
    return s.addContext(label);
  return file;
}

} // namespace kimi::rt

//===- safetensors_writer.cpp - Writes safetensors files ------------------===//

#include "runtime/weights/safetensors_writer.h"
#include "runtime/artifact/types.h"
#include "runtime/support/file_io.h"

#include <cstring>
#include <set>

namespace kimi::rt {

std::string jsonQuote(const std::string &s) {
  static const char *hex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void SafetensorsWriter::add(std::string name, StDType dtype,
                            std::vector<int64_t> shape, const void *data,
                            size_t nbytes) {
  Entry e{std::move(name), dtype, std::move(shape), {}};
  if (nbytes)
    e.bytes.assign(static_cast<const uint8_t *>(data),
                   static_cast<const uint8_t *>(data) + nbytes);
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::addF32(std::string name, std::vector<int64_t> shape,
                               const std::vector<float> &values) {
  add(std::move(name), StDType::kF32, std::move(shape), values.data(),
      values.size() * sizeof(float));
}

void SafetensorsWriter::addMetadata(std::string key, std::string value) {
  metadata_.emplace_back(std::move(key), std::move(value));
}

StatusOr<std::vector<uint8_t>> SafetensorsWriter::serialize() const {
  std::set<std::string> names;
  std::string header = "{";
  bool first = true;
  if (!metadata_.empty()) {
    header += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata_.size(); ++i) {
      if (i)
        header += ",";
      header += jsonQuote(metadata_[i].first) + ":" + jsonQuote(metadata_[i].second);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const Entry &e : entries_) {
    if (e.name == "__metadata__" || !names.insert(e.name).second)
      return invalidArgument("safetensors writer: duplicate or reserved name '" +
                             e.name + "'");
    int64_t numel = 0;
    if (!checkedNumel(e.shape, numel) ||
        static_cast<uint64_t>(numel) * stDTypeSize(e.dtype) != e.bytes.size())
      return invalidArgument("safetensors writer: tensor '" + e.name + "' " +
                             stDTypeName(e.dtype) + " " + shapeToString(e.shape) +
                             " does not match its " +
                             std::to_string(e.bytes.size()) + " bytes");
    if (!first)
      header += ",";
    first = false;
    header += jsonQuote(e.name) + ":{\"dtype\":\"" + stDTypeName(e.dtype) +
              "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i)
      header += (i ? "," : "") + std::to_string(e.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + e.bytes.size()) + "]}";
    offset += e.bytes.size();
  }
  header += "}";
  while (header.size() % 8)
    header += ' ';

  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + offset);
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(len >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const Entry &e : entries_)
    out.insert(out.end(), e.bytes.begin(), e.bytes.end());
  return out;
}

Status SafetensorsWriter::write(const std::string &path) const {
  KIMI_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, serialize());
  return writeBytesToFile(path, bytes);
}

} // namespace kimi::rt

//===- json.h - A small, strict JSON parser ---------------------*- C++ -*-===//
//
// Enough JSON for safetensors headers (and config text): RFC 8259 values,
// string escapes including surrogate pairs, integers kept exact up to 64
// bits. Built for untrusted input: bounded nesting depth, every error a
// Status with the byte offset, duplicate object keys rejected.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_JSON_H
#define KIMI_RUNTIME_WEIGHTS_JSON_H

#include "runtime/support/status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kimi::rt {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  /// Set when the literal is an integer (no fraction/exponent) that fits.
  bool isUint64 = false;
  uint64_t uint64 = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object; // in file order

  bool isObject() const { return kind == Kind::kObject; }
  bool isArray() const { return kind == Kind::kArray; }
  bool isString() const { return kind == Kind::kString; }
  /// The member `key` of an object, or null.
  const JsonValue *find(const std::string &key) const;
};

const char *jsonKindName(JsonValue::Kind kind);

/// Parses exactly one JSON value (surrounding whitespace allowed).
/// Errors are "JSON error at byte N: ...".
StatusOr<JsonValue> parseJson(const char *data, size_t size,
                              size_t maxDepth = 64);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_JSON_H

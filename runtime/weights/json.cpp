//===- json.cpp - A small, strict JSON parser -----------------------------===//

#include "runtime/weights/json.h"

#include <cmath>
#include <cstdlib>
#include <set>

namespace kimi::rt {

const JsonValue *JsonValue::find(const std::string &key) const {
  for (const auto &member : object)
    if (member.first == key)
      return &member.second;
  return nullptr;
}

const char *jsonKindName(JsonValue::Kind kind) {
  switch (kind) {
  case JsonValue::Kind::kNull: return "null";
  case JsonValue::Kind::kBool: return "boolean";
  case JsonValue::Kind::kNumber: return "number";
  case JsonValue::Kind::kString: return "string";
  case JsonValue::Kind::kArray: return "array";
  case JsonValue::Kind::kObject: return "object";
  }
  return "?";
}

namespace {

class Parser {
public:
  Parser(const char *data, size_t size, size_t maxDepth)
      : p_(data), end_(data + size), begin_(data), maxDepth_(maxDepth) {}

  Status parseDocument(JsonValue &out) {
    skipSpace();
    KIMI_RETURN_IF_ERROR(parseValue(out, 0));
    skipSpace();
    if (p_ != end_)
      return error("unexpected data after the JSON value");
    return Status::ok();
  }

private:
  Status error(const std::string &what) const {
    return invalidArgument("JSON error at byte " + std::to_string(p_ - begin_) +
                           ": " + what);
  }

  void skipSpace() {
    while (p_ != end_ &&
           (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r'))
      ++p_;
  }

  bool consumeLiteral(const char *lit) {
    const char *q = p_;
    for (; *lit; ++lit, ++q)
      if (q == end_ || *q != *lit)
        return false;
    p_ = q;
    return true;
  }

  Status parseValue(JsonValue &out, size_t depth) {
    if (p_ == end_)
      return error("unexpected end of input, expected a value");
    switch (*p_) {
    case '{': return parseObject(out, depth + 1);
    case '[': return parseArray(out, depth + 1);
    case '"':
      out.kind = JsonValue::Kind::kString;
      return parseString(out.string);
    case 't':
    case 'f':
      out.kind = JsonValue::Kind::kBool;
      out.boolean = *p_ == 't';
      if (!consumeLiteral(out.boolean ? "true" : "false"))
        return error("invalid literal");
      return Status::ok();
    case 'n':
      out.kind = JsonValue::Kind::kNull;
      if (!consumeLiteral("null"))
        return error("invalid literal");
      return Status::ok();
    default:
      if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9'))
        return parseNumber(out);
      return error(std::string("unexpected character '") +
                   (*p_ >= 0x20 && *p_ < 0x7f ? std::string(1, *p_)
                                              : std::string("\\x..")) +
                   "'");
    }
  }

  Status parseObject(JsonValue &out, size_t depth) {
    if (depth > maxDepth_)
      return error("nesting deeper than " + std::to_string(maxDepth_));
    out.kind = JsonValue::Kind::kObject;
    ++p_; // '{'
    skipSpace();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      return Status::ok();
    }
    std::set<std::string> keys;
    while (true) {
      skipSpace();
      if (p_ == end_ || *p_ != '"')
        return error("expected a string key in object");
      const char *keyStart = p_;
      std::string key;
      KIMI_RETURN_IF_ERROR(parseString(key));
      if (!keys.insert(key).second) {
        p_ = keyStart;
        return error("duplicate key \"" + key.substr(0, 100) + "\"");
      }
      skipSpace();
      if (p_ == end_ || *p_ != ':')
        return error("expected ':' after object key");
      ++p_;
      skipSpace();
      JsonValue value;
      KIMI_RETURN_IF_ERROR(parseValue(value, depth));
      out.object.emplace_back(std::move(key), std::move(value));
      skipSpace();
      if (p_ == end_)
        return error("unexpected end of input in object");
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == '}') {
        ++p_;
        return Status::ok();
      }
      return error("expected ',' or '}' in object");
    }
  }

  Status parseArray(JsonValue &out, size_t depth) {
    if (depth > maxDepth_)
      return error("nesting deeper than " + std::to_string(maxDepth_));
    out.kind = JsonValue::Kind::kArray;
    ++p_; // '['
    skipSpace();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      return Status::ok();
    }
    while (true) {
      skipSpace();
      JsonValue value;
      KIMI_RETURN_IF_ERROR(parseValue(value, depth));
      out.array.push_back(std::move(value));
      skipSpace();
      if (p_ == end_)
        return error("unexpected end of input in array");
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == ']') {
        ++p_;
        return Status::ok();
      }
      return error("expected ',' or ']' in array");
    }
  }

  static int hexValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  Status parseHex4(uint32_t &out) {
    if (end_ - p_ < 4)
      return error("truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hexValue(p_[i]);
      if (h < 0)
        return error("invalid hex digit in \\u escape");
      out = out * 16 + static_cast<uint32_t>(h);
    }
    p_ += 4;
    return Status::ok();
  }

  static void appendUtf8(std::string &s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Status parseString(std::string &out) {
    ++p_; // opening quote
    out.clear();
    while (true) {
      if (p_ == end_)
        return error("unterminated string");
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return Status::ok();
      }
      if (c < 0x20)
        return error("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++p_;
        continue;
      }
      ++p_;
      if (p_ == end_)
        return error("unterminated escape");
      char e = *p_++;
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t cp = 0;
        KIMI_RETURN_IF_ERROR(parseHex4(cp));
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
            return error("unpaired high surrogate in \\u escape");
          p_ += 2;
          uint32_t lo = 0;
          KIMI_RETURN_IF_ERROR(parseHex4(lo));
          if (lo < 0xDC00 || lo > 0xDFFF)
            return error("invalid low surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return error("unpaired low surrogate in \\u escape");
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        --p_;
        return error("invalid escape character");
      }
    }
  }

  Status parseNumber(JsonValue &out) {
    const char *start = p_;
    bool negative = false;
    if (*p_ == '-') {
      negative = true;
      ++p_;
    }
    if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9'))
      return error("expected a digit");
    if (*p_ == '0' && p_ + 1 != end_ && p_[1] >= '0' && p_[1] <= '9')
      return error("leading zero in number");
    bool integral = true;
    uint64_t u = 0;
    bool overflow = false;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      uint64_t digit = static_cast<uint64_t>(*p_ - '0');
      if (u > (UINT64_MAX - digit) / 10)
        overflow = true;
      else
        u = u * 10 + digit;
      ++p_;
    }
    if (p_ != end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9'))
        return error("expected a digit after '.'");
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9')
        ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-'))
        ++p_;
      if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9'))
        return error("expected a digit in exponent");
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9')
        ++p_;
    }
    out.kind = JsonValue::Kind::kNumber;
    std::string text(start, p_);
    out.number = std::strtod(text.c_str(), nullptr);
    if (integral && !negative && !overflow) {
      out.isUint64 = true;
      out.uint64 = u;
    }
    return Status::ok();
  }

  const char *p_;
  const char *end_;
  const char *begin_;
  size_t maxDepth_;
};

} // namespace

StatusOr<JsonValue> parseJson(const char *data, size_t size, size_t maxDepth) {
  if (!data && size)
    return invalidArgument("JSON error: null input");
  JsonValue value;
  Parser parser(data ? data : "", size, maxDepth);
  KIMI_RETURN_IF_ERROR(parser.parseDocument(value));
  return value;
}

} // namespace kimi::rt

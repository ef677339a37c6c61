//===- text.h - Small string helpers for messages ---------------*- C++ -*-===//

#ifndef KIMI_RUNTIME_SUPPORT_TEXT_H
#define KIMI_RUNTIME_SUPPORT_TEXT_H

#include <cstdio>
#include <string>

namespace kimi::rt {

/// `s` in single quotes with control and non-ASCII bytes as \xNN, cut after
/// `maxLen` bytes (names from a corrupt file can be anything).
inline std::string quoted(const std::string &s, size_t maxLen = 200) {
  static const char *hex = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < maxLen; ++i) {
    unsigned char u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u >= 0x7f || u == '\'' || u == '\\') {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += static_cast<char>(u);
    }
  }
  if (s.size() > maxLen)
    out += "...";
  return out + "'";
}

/// `s` as a JSON string literal (quotes, backslashes and control bytes
/// escaped; other bytes as they are).
inline std::string jsonQuoted(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out + "\"";
}

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SUPPORT_TEXT_H

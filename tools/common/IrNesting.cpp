//===- IrNesting.cpp - Bounding the nesting of textual IR -----------------===//

#include "tools/common/IrNesting.h"

namespace kimi {

std::string IrNestingExcess::message() const {
  return "IR nested deeper than " + std::to_string(limit) +
         " levels of (), [], {} and <> is refused before parsing (the parser "
         "recurses once a level)";
}

std::optional<IrNestingExcess> findIrNestingExcess(std::string_view text,
                                                   int64_t limit) {
  // The column is computed from where the line starts, so the scans that
  // skip comments, strings and arrows need not count it.
  int64_t depth = 0, line = 1;
  size_t lineStart = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      lineStart = i + 1;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
      continue;
    }
    if (c == '"') {
      // A string literal: escapes skip the next character; a newline
      // inside is the parser's error, not ours (it ends the scan here).
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i)
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] != '\n')
          ++i;
      if (i < text.size() && text[i] == '\n')
        --i; // the newline is counted by the loop
      continue;
    }
    if ((c == '-' || c == '>') && i + 1 < text.size() &&
        text[i + 1] == (c == '-' ? '>' : '=')) {
      ++i; // `->` and `>=` are no brackets
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > limit)
        return IrNestingExcess{line, static_cast<int64_t>(i - lineStart) + 1, limit};
    } else if ((c == ')' || c == ']' || c == '}' || c == '>') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

} // namespace kimi

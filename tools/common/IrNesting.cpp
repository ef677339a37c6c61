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
  int64_t depth = 0, line = 1, column = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
      continue;
    }
    if (c == '"') {
      // A string literal: escapes skip the next character; a newline
      // inside is the parser's error, not ours.
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i) {
        ++column;
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
          ++i;
          ++column;
        }
      }
      if (i < text.size() && text[i] == '\n')
        --i; // counted as a line above
      else
        ++column;
      continue;
    }
    if (c == '-' && i + 1 < text.size() && text[i + 1] == '>') {
      ++i;
      ++column;
      continue;
    }
    if (c == '>' && i + 1 < text.size() && text[i + 1] == '=') {
      ++i;
      ++column;
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > limit)
        return IrNestingExcess{line, column, limit};
    } else if ((c == ')' || c == ']' || c == '}' || c == '>') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

} // namespace kimi

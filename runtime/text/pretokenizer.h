//===- pretokenizer.h - Splitting text into pieces by a regex ---*- C++ -*-===//
//
// tiktoken-style tokenizers split text with a regular expression before
// byte-pair encoding each piece on its own. The expression runs on PCRE2
// (Debian's libpcre2-8, JIT-compiled where the platform has the JIT) in
// UTF-8 and Unicode-property mode. PCRE2 was chosen over ICU's regex after
// measuring both on Kimi's expression (docs/text.md: ICU 9.4 MB/s, PCRE2's
// JIT 64 MB/s on the same text). PCRE2 has no class intersection (`&&`),
// so kKimiPattern writes `[X&&[^\p{Han}]]` as `(?:(?!\p{sc=Han})[X])`,
// which matches the same characters (pretokenizer.cpp says why sc=Han);
// the tests check the pieces against the original expression run by
// another engine.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_TEXT_PRETOKENIZER_H
#define KIMI_RUNTIME_TEXT_PRETOKENIZER_H

#include "runtime/support/status.h"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace kimi::rt {

/// The pre-tokenizer expression of the released Kimi tokenizers (K2, Kimi
/// Linear and K3 share it): runs of Han characters; words with an optional
/// leading non-letter and an English contraction suffix; numbers of at most
/// three digits; punctuation runs; newlines; whitespace.
extern const char *const kKimiPattern;

class PreTokenizer {
public:
  /// Compiles `pattern` (PCRE2 syntax, UTF-8, Unicode properties); a bad
  /// expression is an error with the offset PCRE2 reports.
  static StatusOr<std::unique_ptr<PreTokenizer>> create(const std::string &pattern);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer &) = delete;
  PreTokenizer &operator=(const PreTokenizer &) = delete;

  const std::string &pattern() const { return pattern_; }

  /// Calls `piece(begin, end)` for each match in `text`, in order, with
  /// byte offsets. `text` must be valid UTF-8 (see firstInvalidUtf8). The
  /// bytes no match covers are passed as pieces too, so the pieces always
  /// tile the text and no byte is lost, whatever the expression.
  template <typename Fn> Status split(std::string_view text, Fn &&piece) const;

private:
  PreTokenizer() = default;
  /// The end of the first non-empty match starting at or after `offset`,
  /// its start in *start; -1 when none; -2 on a matching error (message in
  /// *error). Empty matches are skipped (PCRE2_NOTEMPTY): they carry no
  /// bytes, and the gap rule above keeps what they would have split.
  long next(std::string_view text, size_t offset, size_t *start,
            std::string *error) const;

  std::string pattern_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <typename Fn>
Status PreTokenizer::split(std::string_view text, Fn &&piece) const {
  size_t offset = 0;
  std::string error;
  while (offset < text.size()) {
    size_t start = 0;
    long end = next(text, offset, &start, &error);
    if (end == -2)
      return invalidArgument("pre-tokenizer: " + error);
    if (end < 0) {
      piece(offset, text.size());
      break;
    }
    if (start > offset)
      piece(offset, start);
    piece(start, static_cast<size_t>(end));
    offset = static_cast<size_t>(end);
  }
  return Status::ok();
}

/// The offset of the first byte of `text` that is not part of a valid UTF-8
/// sequence (overlong forms, surrogates and values past U+10FFFF are
/// invalid), or npos.
size_t firstInvalidUtf8(std::string_view text);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_TEXT_PRETOKENIZER_H

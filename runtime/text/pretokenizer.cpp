//===- pretokenizer.cpp - Splitting text into pieces by a regex -----------===//

#include "runtime/text/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kimi::rt {

// Kimi's expression, as released (Rust/Python `regex` syntax):
//   [\p{Han}]+
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*
//      [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+
//      [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with each intersection [X&&[^\p{Han}]] written (?:(?!\p{Han})[X]), and
// \p{Han} written \p{sc=Han}: there, as in JavaScript's \p{Script=Han}, it
// is the Script property; PCRE2's bare \p{Han} is Script_Extensions, which
// also holds CJK punctuation such as U+3002 and would take "。" into the
// run of Han characters before it. PCRE2's \s (with UCP) is Unicode's
// White_Space plus U+180E, which Unicode 6.3 took out of White_Space; no
// other character differs.
const char *const kKimiPattern =
    "\\p{sc=Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{sc=Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])*"
    "(?:(?!\\p{sc=Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{sc=Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])+"
    "(?:(?!\\p{sc=Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

struct PreTokenizer::Impl {
  pcre2_code *code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code)
      pcre2_code_free(code);
  }
};

namespace {

std::string pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0)
    return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char *>(buffer), static_cast<size_t>(n));
}

// Match data is per thread: a PreTokenizer is shared by threads that encode
// at once, and the code itself is read-only once compiled.
struct ThreadMatchData {
  pcre2_match_data *data = nullptr;
  ~ThreadMatchData() {
    if (data)
      pcre2_match_data_free(data);
  }
};

} // namespace

StatusOr<std::unique_ptr<PreTokenizer>>
PreTokenizer::create(const std::string &pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code *code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code)
    return invalidArgument("pre-tokenizer expression: " + pcre2Message(error) +
                           " at offset " + std::to_string(offset));
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  p->pattern_ = pattern;
  p->impl_ = std::make_unique<Impl>();
  p->impl_->code = code;
  // No JIT (a platform without it, or W^X memory) falls back to the
  // interpreter: slower, same matches.
  p->impl_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return p;
}

PreTokenizer::~PreTokenizer() = default;

long PreTokenizer::next(std::string_view text, size_t offset, size_t *start,
                        std::string *error) const {
  // One match block a thread, large enough for any expression (PCRE2
  // writes at most as many pairs as the block has; only pair 0 is read).
  thread_local ThreadMatchData md;
  if (!md.data)
    md.data = pcre2_match_data_create(64, nullptr);
  // The text was checked to be UTF-8 once, before the first call.
  const uint32_t options = PCRE2_NOTEMPTY | PCRE2_NO_UTF_CHECK;
  const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), offset,
                                        options, md.data, nullptr)
                      : pcre2_match(impl_->code, subject, text.size(), offset,
                                    options, md.data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH)
    return -1;
  if (rc < 0 && rc != 0) {
    *error = pcre2Message(rc);
    return -2;
  }
  PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(md.data);
  *start = ovector[0];
  return static_cast<long>(ovector[1]);
}

size_t firstInvalidUtf8(std::string_view text) {
  const auto *s = reinterpret_cast<const unsigned char *>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t min, cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2, min = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, min = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n)
      return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80)
        return i;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

} // namespace kimi::rt

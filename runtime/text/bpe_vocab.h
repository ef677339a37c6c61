//===- bpe_vocab.h - A byte-level BPE vocabulary (tiktoken.model) -*- C++ -*-===//
//
// The mergeable ranks of a tiktoken-style tokenizer: each token is a byte
// string and its rank is both its id and its merge priority (lower merges
// first). Read from the `tiktoken.model` format the released Kimi models
// ship: one `base64(token) rank` pair a line.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_TEXT_BPE_VOCAB_H
#define KIMI_RUNTIME_TEXT_BPE_VOCAB_H

#include "runtime/support/status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kimi::rt {

class BpeVocab {
public:
  /// The largest rank a file may give: ranks index a table, so a corrupt
  /// rank must not size it (released vocabularies hold ~200K tokens).
  static constexpr uint32_t kMaxRank = (1u << 24) - 1;

  /// Parses `tiktoken.model` text. Every line is `base64 rank` (blank lines
  /// are skipped); an error names the line (`label:N`). Ranks and tokens
  /// must be unique, and every single byte must be a token, so every byte
  /// string can be encoded.
  static StatusOr<BpeVocab> parse(std::string_view text, const std::string &label);
  /// From tokens in rank order (rank i = tokens[i]); same checks.
  static StatusOr<BpeVocab> fromTokens(std::vector<std::string> tokens);

  /// One past the largest rank.
  uint32_t size() const { return static_cast<uint32_t>(tokens_.size()); }
  /// The bytes of rank `r` (empty for a rank the file skipped).
  std::string_view token(uint32_t r) const { return tokens_[r]; }
  /// The rank of exactly these bytes, or -1.
  int32_t rank(std::string_view bytes) const;

  /// The file text: `base64(token) rank` lines in rank order.
  std::string serialize() const;

private:
  Status buildIndex();

  std::vector<std::string> tokens_;
  // Open addressing over rank+1 (0 = empty slot), keyed by the token bytes.
  std::vector<uint32_t> slots_;
  uint64_t mask_ = 0;
};

/// Standard base64 (RFC 4648, padding required); false on bad input.
bool decodeBase64(std::string_view in, std::string &out);
std::string encodeBase64(std::string_view in);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_TEXT_BPE_VOCAB_H

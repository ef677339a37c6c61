//===- tokenizer.h - tiktoken-style byte-level BPE tokenizer ----*- C++ -*-===//
//
// Text to token ids and back, as the released Kimi models do it: the text is
// cut at special tokens, each stretch is split into pieces by the
// pre-tokenizer expression, and each piece is byte-pair encoded by rank
// (lowest rank merges first, leftmost among equals). Decoding concatenates
// the tokens' bytes. Read from a tokenizer directory:
//   tiktoken.model          the mergeable ranks (required)
//   tokenizer_config.json   `added_tokens_decoder` (id -> special token) and
//                           `bos_token`/`eos_token` (optional)
// As in the released tokenizer code, the ids from the vocabulary's size up
// to size + 256 that the config does not name are `<|reserved_token_ID|>`.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_TEXT_TOKENIZER_H
#define KIMI_RUNTIME_TEXT_TOKENIZER_H

#include "runtime/support/status.h"
#include "runtime/text/bpe_vocab.h"
#include "runtime/text/pretokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kimi::rt {

struct SpecialToken {
  int32_t id = -1;
  std::string text;
};

struct TokenizerOptions {
  /// The pre-tokenizer expression (PCRE2 syntax).
  std::string pattern = kKimiPattern;
  /// Ids [vocab size, vocab size + this) not named by the config become
  /// `<|reserved_token_ID|>` (256 in the released Kimi tokenizers).
  int32_t reservedSpecialTokens = 256;
};

/// How special-token text inside encoded text is treated.
enum class SpecialText {
  kAsText,    // "<|im_end|>" in the text is ordinary bytes (user content)
  kRecognize, // each special token's text becomes its id
};

class Tokenizer {
public:
  static StatusOr<std::unique_ptr<Tokenizer>>
  load(const std::string &dir, const TokenizerOptions &options = {});
  /// From parts; `bosText`/`eosText` name special tokens (may be empty).
  static StatusOr<std::unique_ptr<Tokenizer>>
  create(BpeVocab vocab, std::vector<SpecialToken> specials,
         const TokenizerOptions &options, const std::string &bosText = "",
         const std::string &eosText = "");

  /// Appends the ids of `text`, which must be valid UTF-8: invalid bytes are
  /// an error naming their offset (text from a user is never silently
  /// changed; the tokens of the released models are UTF-8 text).
  Status encode(std::string_view text, SpecialText specials,
                std::vector<int32_t> &out) const;
  /// Appends the byte-pair encoding of one piece (any bytes).
  void encodePiece(std::string_view piece, std::vector<int32_t> &out) const;

  /// Appends the bytes of `ids`; an id outside the vocabulary is an error.
  Status decode(const int32_t *ids, size_t count, std::string &out) const;
  /// The bytes of one id (a special token's text), or an error.
  StatusOr<std::string_view> tokenBytes(int32_t id) const;

  /// One past the largest id (vocabulary and special tokens).
  int32_t size() const { return size_; }
  const BpeVocab &vocab() const { return vocab_; }
  const std::vector<SpecialToken> &specials() const { return specials_; }
  /// The id of a special token's text, or -1.
  int32_t specialId(std::string_view text) const;
  bool isSpecial(int32_t id) const;
  int32_t bosId() const { return bos_; }
  int32_t eosId() const { return eos_; }
  const std::string &pattern() const { return pre_->pattern(); }

private:
  Tokenizer() = default;
  /// The first special token in text[from..]: its offset and index in
  /// specials_, or npos.
  size_t findSpecial(std::string_view text, size_t from, size_t *which) const;
  void encodeOrdinary(std::string_view text, std::vector<int32_t> &out) const;

  BpeVocab vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  std::vector<SpecialToken> specials_;  // sorted by id
  std::vector<int32_t> specialById_;    // id - vocab size -> index, or -1
  std::vector<std::vector<uint32_t>> byFirstByte_; // indices, longest first
  int32_t size_ = 0, bos_ = -1, eos_ = -1;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_TEXT_TOKENIZER_H

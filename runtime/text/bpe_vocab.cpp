//===- bpe_vocab.cpp - A byte-level BPE vocabulary (tiktoken.model) -------===//

#include "runtime/text/bpe_vocab.h"
#include "runtime/support/text.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kimi::rt {

namespace {

int base64Value(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+')
    return 62;
  if (c == '/')
    return 63;
  return -1;
}

uint64_t hashBytes(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

} // namespace

bool decodeBase64(std::string_view in, std::string &out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0)
    return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      unsigned char c = static_cast<unsigned char>(in[i + j]);
      if (c == '=' && last && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad) // data after '='
        return false;
      v[j] = base64Value(c);
      if (v[j] < 0)
        return false;
    }
    uint32_t triple = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    // Canonical encoding only: the bits a padded group drops must be zero,
    // so each byte string has exactly one spelling (duplicates are found).
    if ((pad == 1 && (triple & 0xff)) || (pad == 2 && (triple & 0xffff)))
      return false;
    out += static_cast<char>(triple >> 16);
    if (pad < 2)
      out += static_cast<char>((triple >> 8) & 0xff);
    if (pad < 1)
      out += static_cast<char>(triple & 0xff);
  }
  return true;
}

std::string encodeBase64(std::string_view in) {
  static const char *alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t b0 = static_cast<unsigned char>(in[i]);
    uint32_t b1 = i + 1 < in.size() ? static_cast<unsigned char>(in[i + 1]) : 0;
    uint32_t b2 = i + 2 < in.size() ? static_cast<unsigned char>(in[i + 2]) : 0;
    uint32_t triple = (b0 << 16) | (b1 << 8) | b2;
    out += alphabet[triple >> 18];
    out += alphabet[(triple >> 12) & 63];
    out += i + 1 < in.size() ? alphabet[(triple >> 6) & 63] : '=';
    out += i + 2 < in.size() ? alphabet[triple & 63] : '=';
  }
  return out;
}

StatusOr<BpeVocab> BpeVocab::parse(std::string_view text,
                                   const std::string &label) {
  std::vector<std::string> tokens;
  std::vector<uint8_t> seen;
  std::string bytes;
  size_t lineNo = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos)
      end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty())
      continue;
    auto fail = [&](const std::string &what) {
      return invalidArgument(label + ":" + std::to_string(lineNo) + ": " + what);
    };
    size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 ||
        line.find(' ', space + 1) != std::string_view::npos)
      return fail("expected 'base64 rank', got " +
                  quoted(std::string(line), 80));
    std::string_view b64 = line.substr(0, space), rankText = line.substr(space + 1);
    if (!decodeBase64(b64, bytes))
      return fail("token " + quoted(std::string(b64), 80) +
                  " is not valid base64");
    uint64_t rank = 0;
    if (rankText.empty() || rankText.size() > 9)
      return fail("rank " + quoted(std::string(rankText), 20) +
                  " is not an integer of at most " + std::to_string(kMaxRank));
    for (char c : rankText) {
      if (c < '0' || c > '9')
        return fail("rank " + quoted(std::string(rankText), 20) +
                    " is not an integer");
      rank = rank * 10 + static_cast<uint64_t>(c - '0');
    }
    if (rank > kMaxRank)
      return fail("rank " + std::to_string(rank) + " exceeds " +
                  std::to_string(kMaxRank));
    if (rank >= tokens.size()) {
      tokens.resize(rank + 1);
      seen.resize(rank + 1, 0);
    }
    if (seen[rank])
      return fail("rank " + std::to_string(rank) + " appears twice");
    seen[rank] = 1;
    tokens[rank] = bytes;
  }
  if (tokens.empty())
    return invalidArgument(label + ": holds no tokens");
  for (size_t r = 0; r < tokens.size(); ++r)
    if (!seen[r])
      tokens[r].clear();
  StatusOr<BpeVocab> vocab = fromTokens(std::move(tokens));
  if (!vocab)
    return vocab.takeStatus().addContext(label);
  return vocab;
}

StatusOr<BpeVocab> BpeVocab::fromTokens(std::vector<std::string> tokens) {
  if (tokens.size() > static_cast<size_t>(kMaxRank) + 1)
    return invalidArgument(std::to_string(tokens.size()) +
                           " tokens exceed the limit");
  BpeVocab vocab;
  vocab.tokens_ = std::move(tokens);
  KIMI_RETURN_IF_ERROR(vocab.buildIndex());
  return vocab;
}

Status BpeVocab::buildIndex() {
  size_t capacity = 16;
  while (capacity < tokens_.size() * 2)
    capacity *= 2;
  slots_.assign(capacity, 0);
  mask_ = capacity - 1;
  for (uint32_t r = 0; r < tokens_.size(); ++r) {
    const std::string &t = tokens_[r];
    if (t.empty())
      continue;
    uint64_t h = hashBytes(t) & mask_;
    while (slots_[h] != 0) {
      if (tokens_[slots_[h] - 1] == t)
        return invalidArgument("token " + quoted(t, 80) + " has two ranks, " +
                               std::to_string(slots_[h] - 1) + " and " +
                               std::to_string(r));
      h = (h + 1) & mask_;
    }
    slots_[h] = r + 1;
  }
  for (int b = 0; b < 256; ++b) {
    char c = static_cast<char>(b);
    if (rank(std::string_view(&c, 1)) < 0) {
      static const char *hex = "0123456789abcdef";
      return invalidArgument(std::string("no token for the byte 0x") +
                             hex[b >> 4] + hex[b & 15] +
                             ": every single byte needs a rank");
    }
  }
  return Status::ok();
}

int32_t BpeVocab::rank(std::string_view bytes) const {
  if (bytes.empty() || slots_.empty())
    return -1;
  uint64_t h = hashBytes(bytes) & mask_;
  while (uint32_t slot = slots_[h]) {
    if (tokens_[slot - 1] == bytes)
      return static_cast<int32_t>(slot - 1);
    h = (h + 1) & mask_;
  }
  return -1;
}

std::string BpeVocab::serialize() const {
  std::string out;
  for (uint32_t r = 0; r < tokens_.size(); ++r) {
    if (tokens_[r].empty())
      continue;
    out += encodeBase64(tokens_[r]);
    out += ' ';
    out += std::to_string(r);
    out += '\n';
  }
  return out;
}

} // namespace kimi::rt

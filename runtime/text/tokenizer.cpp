//===- tokenizer.cpp - tiktoken-style byte-level BPE tokenizer ------------===//

#include "runtime/text/tokenizer.h"
#include "runtime/support/file_io.h"
#include "runtime/support/text.h"
#include "runtime/weights/json.h"

#include <algorithm>
#include <cerrno>
#include <sys/stat.h>
#include <queue>

namespace kimi::rt {

namespace {

// Released tokenizer files: tiktoken.model 2.8 MB, tokenizer_config.json a
// few KiB (its chat template included).
constexpr uint64_t kMaxModelBytes = 256ull << 20;
constexpr uint64_t kMaxConfigBytes = 16ull << 20;
// Special ids sit after the vocabulary; a config may not place one further
// than this past it (the table is indexed by id).
constexpr int64_t kMaxSpecialSpan = 1 << 20;

/// The text of a `bos_token`-style entry: a string or {"content": ...}.
StatusOr<std::string> tokenText(const JsonValue &v, const std::string &key) {
  if (v.isString())
    return v.string;
  if (v.isObject()) {
    const JsonValue *content = v.find("content");
    if (content && content->isString())
      return content->string;
  }
  if (v.kind == JsonValue::Kind::kNull)
    return std::string();
  return invalidArgument("'" + key + "' is neither a string nor an object with 'content'");
}

} // namespace

StatusOr<std::unique_ptr<Tokenizer>>
Tokenizer::load(const std::string &dir, const TokenizerOptions &options) {
  const std::string modelPath = dir + "/tiktoken.model";
  KIMI_ASSIGN_OR_RETURN(std::string modelText,
                        readRegularFile(modelPath, "tokenizer file '" + modelPath + "'",
                                        kMaxModelBytes));
  KIMI_ASSIGN_OR_RETURN(BpeVocab vocab, BpeVocab::parse(modelText, modelPath));

  std::vector<SpecialToken> specials;
  std::string bosText, eosText;
  const std::string configPath = dir + "/tokenizer_config.json";
  const std::string configLabel = "tokenizer config '" + configPath + "'";
  struct stat st;
  const bool hasConfig = ::stat(configPath.c_str(), &st) == 0 || errno != ENOENT;
  if (hasConfig) { // present, or there but unreadable (an error below)
    KIMI_ASSIGN_OR_RETURN(std::string configText,
                          readRegularFile(configPath, configLabel, kMaxConfigBytes));
    StatusOr<JsonValue> json = parseJson(configText.data(), configText.size());
    if (!json)
      return json.takeStatus().addContext(configLabel);
    if (!json->isObject())
      return invalidArgument(configLabel + ": not a JSON object");
    if (const JsonValue *added = json->find("added_tokens_decoder")) {
      if (!added->isObject())
        return invalidArgument(configLabel + ": 'added_tokens_decoder' is not an object");
      for (const auto &[key, entry] : added->object) {
        auto fail = [&](const std::string &what) {
          return invalidArgument(configLabel + ": added_tokens_decoder[" +
                                 quoted(key, 40) + "]: " + what);
        };
        int64_t id = 0;
        if (key.empty() || key.size() > 9)
          return fail("the key is not a token id");
        for (char c : key) {
          if (c < '0' || c > '9')
            return fail("the key is not a token id");
          id = id * 10 + (c - '0');
        }
        const JsonValue *content = entry.isObject() ? entry.find("content") : nullptr;
        if (!content || !content->isString())
          return fail("has no string 'content'");
        specials.push_back({static_cast<int32_t>(id), content->string});
      }
    }
    for (const char *key : {"bos_token", "eos_token"}) {
      if (const JsonValue *v = json->find(key)) {
        StatusOr<std::string> text = tokenText(*v, key);
        if (!text)
          return text.takeStatus().addContext(configLabel);
        (std::string(key) == "bos_token" ? bosText : eosText) = *text;
      }
    }
  }
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      create(std::move(vocab), std::move(specials), options, bosText, eosText);
  if (!tokenizer)
    return tokenizer.takeStatus().addContext("tokenizer '" + dir + "'");
  return tokenizer;
}

StatusOr<std::unique_ptr<Tokenizer>>
Tokenizer::create(BpeVocab vocab, std::vector<SpecialToken> specials,
                  const TokenizerOptions &options, const std::string &bosText,
                  const std::string &eosText) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  KIMI_ASSIGN_OR_RETURN(t->pre_, PreTokenizer::create(options.pattern));
  const int64_t base = vocab.size();
  t->vocab_ = std::move(vocab);
  if (options.reservedSpecialTokens < 0 || options.reservedSpecialTokens > kMaxSpecialSpan)
    return invalidArgument("reserved special tokens: " +
                           std::to_string(options.reservedSpecialTokens) +
                           " is out of range");
  int64_t end = base;
  for (const SpecialToken &s : specials) {
    if (s.id < base || s.id >= base + kMaxSpecialSpan)
      return invalidArgument(
          "special token " + quoted(s.text, 60) + " has id " + std::to_string(s.id) +
          ": special ids must lie in [" + std::to_string(base) + ", " +
          std::to_string(base + kMaxSpecialSpan) + "), after the vocabulary");
    if (s.text.empty())
      return invalidArgument("special token " + std::to_string(s.id) + " has empty text");
    end = std::max<int64_t>(end, s.id + 1);
  }
  end = std::max<int64_t>(end, base + options.reservedSpecialTokens);
  // Mark the named ids (a second name for one is an error), fill the rest
  // of the reserved range, then index all by id.
  t->specialById_.assign(static_cast<size_t>(end - base), -1);
  for (const SpecialToken &s : specials) {
    int32_t &slot = t->specialById_[s.id - base];
    if (slot >= 0)
      return invalidArgument("special token id " + std::to_string(s.id) + " is given twice");
    slot = 0;
  }
  for (int64_t id = base; id < base + options.reservedSpecialTokens; ++id)
    if (t->specialById_[id - base] < 0)
      specials.push_back({static_cast<int32_t>(id),
                          "<|reserved_token_" + std::to_string(id) + "|>"});
  std::sort(specials.begin(), specials.end(),
            [](const SpecialToken &a, const SpecialToken &b) { return a.id < b.id; });
  t->specials_ = std::move(specials);
  t->byFirstByte_.assign(256, {});
  for (size_t i = 0; i < t->specials_.size(); ++i) {
    t->specialById_[t->specials_[i].id - base] = static_cast<int32_t>(i);
    t->byFirstByte_[static_cast<unsigned char>(t->specials_[i].text[0])].push_back(
        static_cast<uint32_t>(i));
  }
  for (auto &list : t->byFirstByte_) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return t->specials_[a].text.size() > t->specials_[b].text.size();
    });
    for (size_t i = 1; i < list.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (t->specials_[list[i]].text == t->specials_[list[j]].text)
          return invalidArgument("special token text " +
                                 quoted(t->specials_[list[i]].text, 60) +
                                 " has two ids, " +
                                 std::to_string(t->specials_[list[j]].id) + " and " +
                                 std::to_string(t->specials_[list[i]].id));
  }
  t->size_ = static_cast<int32_t>(end);
  for (const auto &[text, out] : {std::pair<const std::string &, int32_t &>(bosText, t->bos_),
                                  std::pair<const std::string &, int32_t &>(eosText, t->eos_)}) {
    if (text.empty())
      continue;
    out = t->specialId(text);
    if (out < 0)
      return invalidArgument("bos/eos token " + quoted(text, 60) +
                             " is not a special token");
  }
  return t;
}

int32_t Tokenizer::specialId(std::string_view text) const {
  if (text.empty())
    return -1;
  for (uint32_t i : byFirstByte_[static_cast<unsigned char>(text[0])])
    if (specials_[i].text == text)
      return specials_[i].id;
  return -1;
}

bool Tokenizer::isSpecial(int32_t id) const {
  int64_t k = static_cast<int64_t>(id) - vocab_.size();
  return k >= 0 && k < static_cast<int64_t>(specialById_.size()) && specialById_[k] >= 0;
}

size_t Tokenizer::findSpecial(std::string_view text, size_t from, size_t *which) const {
  for (size_t i = from; i < text.size(); ++i) {
    const auto &list = byFirstByte_[static_cast<unsigned char>(text[i])];
    for (uint32_t k : list) {
      const std::string &s = specials_[k].text;
      if (text.compare(i, s.size(), s) == 0) {
        *which = k;
        return i;
      }
    }
  }
  return std::string_view::npos;
}

Status Tokenizer::encode(std::string_view text, SpecialText specials,
                         std::vector<int32_t> &out) const {
  size_t bad = firstInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    static const char *hex = "0123456789abcdef";
    unsigned char b = static_cast<unsigned char>(text[bad]);
    return invalidArgument(std::string("text is not valid UTF-8: byte 0x") +
                           hex[b >> 4] + hex[b & 15] + " at offset " +
                           std::to_string(bad));
  }
  if (specials == SpecialText::kAsText) {
    encodeOrdinary(text, out);
    return Status::ok();
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t which = 0;
    size_t at = findSpecial(text, pos, &which);
    if (at == std::string_view::npos) {
      encodeOrdinary(text.substr(pos), out);
      break;
    }
    encodeOrdinary(text.substr(pos, at - pos), out);
    out.push_back(specials_[which].id);
    pos = at + specials_[which].text.size();
  }
  return Status::ok();
}

void Tokenizer::encodeOrdinary(std::string_view text, std::vector<int32_t> &out) const {
  if (text.empty())
    return;
  // The text is valid UTF-8 (checked by encode), which is all split needs;
  // PCRE2 reports no other error for a compiled expression.
  Status s = pre_->split(text, [&](size_t begin, size_t end) {
    encodePiece(text.substr(begin, end - begin), out);
  });
  (void)s;
}

void Tokenizer::encodePiece(std::string_view piece, std::vector<int32_t> &out) const {
  if (piece.empty())
    return;
  int32_t whole = vocab_.rank(piece);
  if (whole >= 0) {
    out.push_back(whole);
    return;
  }
  // Byte-pair merging by rank: parts start as single bytes; the adjacent
  // pair whose concatenation has the lowest rank (leftmost among equals)
  // merges until no pair is a token. A heap with lazily dropped stale pairs
  // keeps this O(n log n), so a megabyte of spaces (one piece) does not
  // take quadratic time.
  const size_t n = piece.size();
  std::vector<uint32_t> end(n), next(n);
  std::vector<int32_t> prev(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    end[i] = static_cast<uint32_t>(i + 1);
    next[i] = static_cast<uint32_t>(i + 1); // n = none
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  struct Pair {
    int32_t rank;
    uint32_t left, rightEnd;
    bool operator>(const Pair &o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> heap;
  auto push = [&](uint32_t i) {
    if (next[i] >= n)
      return;
    uint32_t j = next[i];
    int32_t r = vocab_.rank(piece.substr(i, end[j] - i));
    if (r >= 0)
      heap.push({r, i, end[j]});
  };
  for (uint32_t i = 0; i + 1 < n; ++i)
    push(i);
  while (!heap.empty()) {
    Pair p = heap.top();
    heap.pop();
    uint32_t i = p.left;
    if (!alive[i] || next[i] >= n || end[next[i]] != p.rightEnd)
      continue; // stale: a part of this pair merged since
    uint32_t j = next[i];
    end[i] = end[j];
    next[i] = next[j];
    alive[j] = 0;
    if (next[i] < n)
      prev[next[i]] = static_cast<int32_t>(i);
    push(i);
    if (prev[i] >= 0)
      push(static_cast<uint32_t>(prev[i]));
  }
  for (uint32_t i = 0; i < n; i = next[i])
    out.push_back(vocab_.rank(piece.substr(i, end[i] - i)));
}

StatusOr<std::string_view> Tokenizer::tokenBytes(int32_t id) const {
  if (id >= 0 && static_cast<uint32_t>(id) < vocab_.size()) {
    std::string_view t = vocab_.token(static_cast<uint32_t>(id));
    if (!t.empty())
      return t;
  } else if (isSpecial(id)) {
    return std::string_view(specials_[specialById_[id - vocab_.size()]].text);
  }
  return invalidArgument("token id " + std::to_string(id) +
                         " is not in the tokenizer's vocabulary (" +
                         std::to_string(size_) + " ids)");
}

Status Tokenizer::decode(const int32_t *ids, size_t count, std::string &out) const {
  for (size_t i = 0; i < count; ++i) {
    StatusOr<std::string_view> bytes = tokenBytes(ids[i]);
    if (!bytes)
      return bytes.takeStatus().addContext("token " + std::to_string(i));
    out.append(bytes->data(), bytes->size());
  }
  return Status::ok();
}

} // namespace kimi::rt

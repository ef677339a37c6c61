//===- TokenizerTest.cpp - tiktoken.model reading, BPE, special tokens ----===//
//
// The byte-pair encoder against a plain transcription of tiktoken's merge
// rule (quadratic, no heap) on random vocabularies; the file reader's
// refusals; special tokens; UTF-8 checks. The comparison with an
// independent tiktoken implementation on real vocabularies is
// test/text/tiktoken-crosscheck.mjs.
//
//===----------------------------------------------------------------------===//

#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

using namespace kimi::rt;

namespace {

std::vector<std::string> byteTokens() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b)
    t.push_back(std::string(1, static_cast<char>(b)));
  return t;
}

// tiktoken's rule, written plainly: a piece that is a token is that token
// (tiktoken looks the whole piece up first; in a random vocabulary it may be
// out of the merges' reach); otherwise merge the adjacent pair of lowest
// rank, leftmost among equals, until no adjacent pair is a token.
std::vector<int32_t> referenceBpe(const BpeVocab &v, const std::string &piece) {
  if (v.rank(piece) >= 0)
    return {v.rank(piece)};
  std::vector<std::string> parts;
  for (char c : piece)
    parts.push_back(std::string(1, c));
  while (parts.size() > 1) {
    int32_t best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      int32_t r = v.rank(parts[i] + parts[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) {
        best = r;
        at = i;
      }
    }
    if (best < 0)
      break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + at + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string &p : parts)
    ids.push_back(v.rank(p));
  return ids;
}

std::unique_ptr<Tokenizer> makeTokenizer(std::vector<std::string> tokens,
                                         std::vector<SpecialToken> specials = {},
                                         int32_t reserved = 0) {
  StatusOr<BpeVocab> v = BpeVocab::fromTokens(std::move(tokens));
  EXPECT_TRUE(v.isOk()) << v.status().message();
  TokenizerOptions o;
  o.reservedSpecialTokens = reserved;
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::create(std::move(*v), specials, o);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return std::move(*t);
}

TEST(Tokenizer, BytePairEncodingMatchesTiktokensRuleOnRandomVocabularies) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    // Merges over a 4-letter alphabet, so pairs overlap and ranks compete.
    std::vector<std::string> tokens = byteTokens();
    std::set<std::string> seen(tokens.begin(), tokens.end());
    const std::string alphabet = "abcd";
    std::vector<std::string> pool;
    for (char c : alphabet)
      pool.push_back(std::string(1, c));
    while (tokens.size() < 256 + 60) {
      std::string t = pool[rng() % pool.size()] + pool[rng() % pool.size()];
      if (t.size() > 12 || !seen.insert(t).second)
        continue;
      tokens.push_back(t);
      pool.push_back(t);
    }
    std::unique_ptr<Tokenizer> tok = makeTokenizer(tokens);
    for (int i = 0; i < 300; ++i) {
      std::string piece;
      size_t n = 1 + rng() % 60;
      for (size_t k = 0; k < n; ++k)
        piece += alphabet[rng() % alphabet.size()];
      std::vector<int32_t> ids;
      tok->encodePiece(piece, ids);
      ASSERT_EQ(ids, referenceBpe(tok->vocab(), piece)) << "piece " << piece;
      std::string back;
      ASSERT_TRUE(tok->decode(ids.data(), ids.size(), back).isOk());
      ASSERT_EQ(back, piece);
    }
  }
}

TEST(Tokenizer, AMegabyteOfSpacesIsOnePieceEncodedInLinearithmicTime) {
  std::vector<std::string> tokens = byteTokens();
  for (std::string t = "  "; t.size() <= 64; t += t)
    tokens.push_back(t);
  std::unique_ptr<Tokenizer> tok = makeTokenizer(tokens);
  // The expression makes all but the last space one piece; a quadratic
  // merge loop would not finish within the test's timeout.
  std::string text(1 << 20, ' ');
  text += "x";
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->encode(text, SpecialText::kAsText, ids).isOk());
  std::string back;
  ASSERT_TRUE(tok->decode(ids.data(), ids.size(), back).isOk());
  EXPECT_EQ(back, text);
  EXPECT_LT(ids.size(), text.size() / 60);
}

TEST(Tokenizer, ReadsTiktokenModelText) {
  std::string text;
  for (int b = 0; b < 256; ++b)
    text += encodeBase64(std::string(1, static_cast<char>(b))) + " " +
            std::to_string(b) + "\n";
  text += encodeBase64("ab") + " 256\r\n\n" + encodeBase64("abc") + " 300\n";
  StatusOr<BpeVocab> v = BpeVocab::parse(text, "t.model");
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->size(), 301u);
  EXPECT_EQ(v->rank("ab"), 256);
  EXPECT_EQ(v->rank("abc"), 300);
  EXPECT_EQ(v->rank("abd"), -1);
  EXPECT_EQ(v->token(299), "");
  StatusOr<BpeVocab> again = BpeVocab::parse(v->serialize(), "t2.model");
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->serialize(), v->serialize());
}

TEST(Tokenizer, MalformedTiktokenModelLinesAreRefusedByLine) {
  std::string bytes;
  for (int b = 0; b < 256; ++b)
    bytes += encodeBase64(std::string(1, static_cast<char>(b))) + " " +
             std::to_string(b) + "\n";
  struct Case {
    std::string tail, expect;
  } cases[] = {
      {"YWI=\n", "t.model:257: expected 'base64 rank'"},
      {"YWI= 256 7\n", "t.model:257: expected 'base64 rank'"},
      {"YW!= 256\n", "t.model:257: token 'YW!=' is not valid base64"},
      {"YWJ= 256\n", "is not valid base64"}, // non-canonical padding bits
      {"YWI= 25x\n", "t.model:257: rank '25x' is not an integer"},
      {"YWI= 99999999\n", "t.model:257: rank 99999999 exceeds"},
      {"YWI= 12\n", "t.model:257: rank 12 appears twice"},
      {"YWI= 256\nYWI= 257\n", "token 'ab' has two ranks, 256 and 257"},
      {"YWI= -1\n", "is not an integer"},
  };
  for (const Case &c : cases) {
    StatusOr<BpeVocab> v = BpeVocab::parse(bytes + c.tail, "t.model");
    ASSERT_FALSE(v.isOk()) << c.tail;
    EXPECT_NE(v.status().message().find(c.expect), std::string::npos)
        << v.status().message();
  }
  // Every byte needs a rank.
  std::string missing = bytes.substr(bytes.find('\n') + 1);
  StatusOr<BpeVocab> v = BpeVocab::parse(missing, "t.model");
  ASSERT_FALSE(v.isOk());
  EXPECT_NE(v.status().message().find("no token for the byte 0x00"), std::string::npos)
      << v.status().message();
  EXPECT_FALSE(BpeVocab::parse("", "t.model").isOk());
}

TEST(Tokenizer, SpecialTokensAreRecognizedOrPlainText) {
  std::vector<std::string> tokens = byteTokens();
  std::unique_ptr<Tokenizer> tok =
      makeTokenizer(tokens, {{256, "<|a|>"}, {257, "<|ab|>"}, {300, "[X]"}}, 16);
  EXPECT_EQ(tok->size(), 301);
  EXPECT_EQ(tok->specialId("<|ab|>"), 257);
  EXPECT_EQ(tok->specialId("<|reserved_token_260|>"), 260);
  EXPECT_TRUE(tok->isSpecial(300));
  EXPECT_FALSE(tok->isSpecial(65));
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->encode("x<|ab|><|a|>[X]", SpecialText::kRecognize, ids).isOk());
  EXPECT_EQ(ids, (std::vector<int32_t>{'x', 257, 256, 300}));
  ids.clear();
  ASSERT_TRUE(tok->encode("<|a|>", SpecialText::kAsText, ids).isOk());
  EXPECT_EQ(ids.size(), 5u);
  std::string back;
  ASSERT_TRUE(tok->decode(std::vector<int32_t>{257, 'y'}.data(), 2, back).isOk());
  EXPECT_EQ(back, "<|ab|>y");
}

TEST(Tokenizer, BadSpecialTokensAndIdsAreErrors) {
  StatusOr<BpeVocab> v = BpeVocab::fromTokens(byteTokens());
  ASSERT_TRUE(v.isOk());
  TokenizerOptions o;
  o.reservedSpecialTokens = 0;
  StatusOr<std::unique_ptr<Tokenizer>> inside =
      Tokenizer::create(*v, {{100, "<|x|>"}}, o);
  ASSERT_FALSE(inside.isOk());
  EXPECT_NE(inside.status().message().find("after the vocabulary"), std::string::npos);
  StatusOr<std::unique_ptr<Tokenizer>> twice =
      Tokenizer::create(*v, {{256, "<|x|>"}, {257, "<|x|>"}}, o);
  ASSERT_FALSE(twice.isOk());
  EXPECT_NE(twice.status().message().find("has two ids"), std::string::npos);
  StatusOr<std::unique_ptr<Tokenizer>> badEos =
      Tokenizer::create(*v, {{256, "<|x|>"}}, o, "", "<|y|>");
  ASSERT_FALSE(badEos.isOk());

  std::unique_ptr<Tokenizer> tok = makeTokenizer(byteTokens(), {{256, "<|x|>"}});
  std::string out;
  int32_t bad[] = {65, 9999};
  Status s = tok->decode(bad, 2, out);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("token id 9999 is not in the tokenizer's vocabulary (257 ids)"),
            std::string::npos)
      << s.message();
  int32_t negative = -3;
  EXPECT_FALSE(tok->decode(&negative, 1, out).isOk());
}

TEST(Tokenizer, InvalidUtf8TextIsAnErrorNamingTheOffset) {
  std::unique_ptr<Tokenizer> tok = makeTokenizer(byteTokens());
  const std::pair<std::string, size_t> cases[] = {
      {"ab\xff", 2},             // never a UTF-8 byte
      {"a\xc3", 1},              // cut sequence
      {"a\xc0\xaf", 1},          // overlong '/'
      {"\xed\xa0\x80", 0},       // a surrogate
      {"xy\xf4\x90\x80\x80", 2}, // past U+10FFFF
      {"ok \x80", 3},            // stray continuation byte
  };
  for (const auto &[text, offset] : cases) {
    std::vector<int32_t> ids;
    Status s = tok->encode(text, SpecialText::kAsText, ids);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("at offset " + std::to_string(offset)), std::string::npos)
        << s.message();
    EXPECT_EQ(firstInvalidUtf8(text), offset);
  }
  EXPECT_EQ(firstInvalidUtf8("h\xc3\xa9llo \xe4\xb8\xad \xf0\x9f\x98\x80"),
            std::string_view::npos);
}

TEST(Tokenizer, APatternThatLeavesGapsLosesNoBytes) {
  std::vector<std::string> tokens = byteTokens();
  TokenizerOptions o;
  o.reservedSpecialTokens = 0;
  o.pattern = "[a-z]+"; // matches letters only, and cannot match empty
  StatusOr<std::unique_ptr<Tokenizer>> tok =
      Tokenizer::create(*BpeVocab::fromTokens(tokens), {}, o);
  ASSERT_TRUE(tok.isOk());
  std::vector<int32_t> ids;
  ASSERT_TRUE((*tok)->encode("12 ab, cd!", SpecialText::kAsText, ids).isOk());
  std::string back;
  ASSERT_TRUE((*tok)->decode(ids.data(), ids.size(), back).isOk());
  EXPECT_EQ(back, "12 ab, cd!");
  o.pattern = "(unclosed";
  StatusOr<std::unique_ptr<Tokenizer>> bad =
      Tokenizer::create(*BpeVocab::fromTokens(tokens), {}, o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("pre-tokenizer expression"), std::string::npos);
}

} // namespace

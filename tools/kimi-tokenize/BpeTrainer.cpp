//===- BpeTrainer.cpp - Learning a byte-level BPE vocabulary --------------===//

#include "BpeTrainer.h"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

using namespace kimi::rt;

namespace kimi::tools {

StatusOr<BpeVocab> trainBpe(std::string_view corpus, const PreTokenizer &pre,
                            uint32_t size) {
  if (size < 256)
    return invalidArgument("a vocabulary needs at least the 256 single bytes");
  if (firstInvalidUtf8(corpus) != std::string_view::npos)
    return invalidArgument("the corpus is not valid UTF-8");
  // Distinct pieces and how often each occurs.
  std::unordered_map<std::string, uint64_t> counts;
  KIMI_RETURN_IF_ERROR(pre.split(corpus, [&](size_t b, size_t e) {
    ++counts[std::string(corpus.substr(b, e - b))];
  }));
  // In a fixed order, so ties and the result do not depend on hashing.
  std::map<std::string, uint64_t> ordered(counts.begin(), counts.end());
  std::vector<std::vector<uint32_t>> words;
  std::vector<uint64_t> freq;
  for (const auto &[piece, n] : ordered) {
    std::vector<uint32_t> w;
    for (unsigned char c : piece)
      w.push_back(c);
    words.push_back(std::move(w));
    freq.push_back(n);
  }
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back(std::string(1, static_cast<char>(b)));
  std::unordered_map<std::string, uint32_t> known;
  for (uint32_t i = 0; i < 256; ++i)
    known[tokens[i]] = i;
  std::unordered_map<uint64_t, uint64_t> pairs;
  while (tokens.size() < size) {
    pairs.clear();
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t i = 0; i + 1 < words[w].size(); ++i)
        pairs[(uint64_t(words[w][i]) << 32) | words[w][i + 1]] += freq[w];
    // The most frequent pair, ties to the smaller key: independent of the
    // hash table's order.
    uint64_t best = 0, bestCount = 1; // a pair seen once is not worth a token
    for (const auto &[key, n] : pairs) {
      if ((n > bestCount || (n == bestCount && bestCount > 1 && key < best)) &&
          !known.count(tokens[key >> 32] + tokens[key & 0xffffffffu])) {
        best = key;
        bestCount = n;
      }
    }
    if (bestCount <= 1)
      break;
    const uint32_t first = static_cast<uint32_t>(best >> 32),
                   second = static_cast<uint32_t>(best & 0xffffffffu);
    const uint32_t id = static_cast<uint32_t>(tokens.size());
    tokens.push_back(tokens[first] + tokens[second]);
    known[tokens.back()] = id;
    for (auto &w : words) {
      size_t out = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == first && w[i + 1] == second) {
          w[out++] = id;
          ++i;
        } else {
          w[out++] = w[i];
        }
      }
      w.resize(out);
    }
  }
  return BpeVocab::fromTokens(std::move(tokens));
}

} // namespace kimi::tools

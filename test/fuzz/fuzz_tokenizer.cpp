//===- fuzz_tokenizer.cpp - libFuzzer target: the tokenizer ---------------===//
//
// The input is `LINES \0 TEXT`. LINES is parsed as tiktoken.model text on
// its own (any bytes: a vocabulary or an error), and again after the 256
// single-byte tokens, so that most inputs give a vocabulary with the
// fuzzer's merges. With one, TEXT is encoded (special tokens recognised),
// and its ids must decode to TEXT exactly; TEXT as one raw piece (any
// bytes) must round-trip too; and TEXT streamed through Utf8Stream in
// chunks must come out as valid UTF-8. A failed property aborts.
//
//===----------------------------------------------------------------------===//

#include "runtime/text/text_stream.h"
#include "runtime/text/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

using namespace kimi::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string input(reinterpret_cast<const char *>(data), size);
  const size_t split = input.find('\0');
  const std::string lines = input.substr(0, split);
  const std::string text = split == std::string::npos ? "" : input.substr(split + 1);

  (void)BpeVocab::parse(lines, "fuzz.model");
  static const std::string base = [] {
    std::string lines;
    for (int b = 0; b < 256; ++b)
      lines += encodeBase64(std::string(1, static_cast<char>(b))) + " " +
               std::to_string(b) + "\n";
    return lines;
  }();
  StatusOr<BpeVocab> vocab = BpeVocab::parse(base + lines, "fuzz.model");
  if (!vocab)
    return 0;
  const int32_t n = static_cast<int32_t>(vocab->size());
  TokenizerOptions options;
  options.reservedSpecialTokens = 4;
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::create(
      std::move(*vocab), {{n, "<|im_end|>"}, {n + 1, "<|im"}, {n + 5, "x"}}, options);
  if (!tok)
    abort(); // these specials are valid for any vocabulary

  std::vector<int32_t> ids;
  std::string back;
  if ((*tok)->encode(text, SpecialText::kRecognize, ids).isOk()) {
    if (!(*tok)->decode(ids.data(), ids.size(), back).isOk() || back != text)
      abort();
  } else if (firstInvalidUtf8(text) == std::string_view::npos) {
    abort(); // valid UTF-8 is always encodable
  }
  ids.clear();
  back.clear();
  (*tok)->encodePiece(text, ids);
  if (!(*tok)->decode(ids.data(), ids.size(), back).isOk() || back != text)
    abort();

  Utf8Stream stream;
  std::string shown;
  for (size_t i = 0; i < text.size(); i += 3)
    shown += stream.push(std::string_view(text).substr(i, 3));
  shown += stream.finish();
  if (firstInvalidUtf8(shown) != std::string_view::npos)
    abort();
  if (firstInvalidUtf8(text) == std::string_view::npos && shown != text)
    abort();
  return 0;
}

//===- kimi-tokenize.cpp - text to token ids and back, and vocabularies ---===//
//
// The runtime's tokenizer on the command line: encode text to ids, decode
// ids to text, and train a small vocabulary in the released format (what
// the tests and the demo use, since no real vocabulary can be fetched).
//
//===----------------------------------------------------------------------===//

#include "BpeTrainer.h"
#include "runtime/support/file_io.h"
#include "runtime/support/text.h"
#include "runtime/text/tokenizer.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace kimi::rt;

namespace {

const char *kUsage =
    "usage: kimi-tokenize encode --tokenizer DIR [options] [FILE]\n"
    "       kimi-tokenize decode --tokenizer DIR [options] [ID...]\n"
    "       kimi-tokenize train --corpus FILE [--corpus FILE...] --vocab-size N\n"
    "                           [--kimi-specials N] [--pattern RE] -o DIR\n"
    "\n"
    "encode  prints the token ids of FILE (standard input without one) on one\n"
    "        line. The text must be valid UTF-8.\n"
    "decode  writes the bytes of the ids given (or read from standard input,\n"
    "        separated by white space) to standard output.\n"
    "train   learns a byte-level BPE vocabulary of N tokens (256 single bytes,\n"
    "        then the most frequent pairs) from the corpus files, split by the\n"
    "        pre-tokenizer expression, and writes DIR/tiktoken.model. With\n"
    "        --kimi-specials N it also writes DIR/tokenizer_config.json naming\n"
    "        N special tokens after the vocabulary at the released Kimi\n"
    "        tokenizer's offsets ([BOS], [EOS], <|im_end|>, <|im_user|>, ...;\n"
    "        [UNK] and [PAD] last).\n"
    "\n"
    "options:\n"
    "  --tokenizer DIR         a directory with tiktoken.model and, optionally,\n"
    "                          tokenizer_config.json (special tokens)\n"
    "  --pattern RE            the pre-tokenizer expression (PCRE2 syntax;\n"
    "                          default: the released Kimi expression)\n"
    "  --reserved-special N    ids [vocab, vocab+N) not named by the config are\n"
    "                          <|reserved_token_ID|> (default 256, as released)\n"
    "  --special text|recognize\n"
    "                          encode: special-token text in the input is plain\n"
    "                          text, or becomes its id (default recognize)\n";

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "kimi-tokenize: error: %s\n", message.c_str());
  std::exit(1);
}

// The released Kimi tokenizer's special tokens, by offset after the
// vocabulary ([UNK] and [PAD] are the last two of the reserved range).
struct KimiSpecial {
  int offset;
  const char *text;
};
const KimiSpecial kKimiSpecials[] = {
    {0, "[BOS]"},
    {1, "[EOS]"},
    {2, "<|im_end|>"},
    {3, "<|im_user|>"},
    {4, "<|im_assistant|>"},
    {6, "<|start_header_id|>"},
    {7, "<|end_header_id|>"},
    {9, "[EOT]"},
    {10, "<|im_system|>"},
    {11, "<|tool_calls_section_begin|>"},
    {12, "<|tool_calls_section_end|>"},
    {13, "<|tool_call_begin|>"},
    {14, "<|tool_call_argument_begin|>"},
    {15, "<|tool_call_end|>"},
    {17, "<|im_middle|>"},
    {18, "<|media_start|>"},
    {19, "<|media_content|>"},
    {20, "<|media_end|>"},
    {21, "<|media_pad|>"},
};

std::string readInput(const std::string &path) {
  if (path.empty() || path == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)),
                     std::istreambuf_iterator<char>());
    return text;
  }
  StatusOr<std::string> text =
      readRegularFile(path, "input '" + path + "'", 1ull << 32);
  if (!text)
    die(text.status().message());
  return *text;
}

void writeFile(const std::string &path, const std::string &text) {
  Status s = writeBytesToFile(path, std::vector<uint8_t>(text.begin(), text.end()));
  if (!s.isOk())
    die(s.message());
}

int train(const std::vector<std::string> &corpora, long vocabSize, long specials,
          const std::string &pattern, const std::string &outDir) {
  if (corpora.empty())
    die("train needs --corpus FILE");
  if (vocabSize < 256 || vocabSize > BpeVocab::kMaxRank)
    die("--vocab-size must be in [256, " + std::to_string(BpeVocab::kMaxRank) + "]");
  if (outDir.empty())
    die("train needs -o DIR");
  if (specials < 0 || specials > 4096)
    die("--kimi-specials must be in [0, 4096]");
  if (specials > 0 && specials < 24)
    die("--kimi-specials must be 0 or at least 24 (the named tokens and [UNK], [PAD])");
  std::string corpus;
  for (const std::string &c : corpora)
    corpus += readInput(c);
  StatusOr<std::unique_ptr<PreTokenizer>> pre = PreTokenizer::create(pattern);
  if (!pre)
    die(pre.status().message());
  StatusOr<BpeVocab> vocab =
      kimi::tools::trainBpe(corpus, **pre, static_cast<uint32_t>(vocabSize));
  if (!vocab)
    die(vocab.status().message());
  if (::mkdir(outDir.c_str(), 0777) != 0 && errno != EEXIST)
    die("cannot create '" + outDir + "': " + std::strerror(errno));
  writeFile(outDir + "/tiktoken.model", vocab->serialize());
  if (specials > 0) {
    const int64_t base = vocab->size();
    std::vector<std::string> names(static_cast<size_t>(specials));
    for (long i = 0; i < specials; ++i)
      names[i] = "<|reserved_token_" + std::to_string(base + i) + "|>";
    for (const KimiSpecial &k : kKimiSpecials)
      names[k.offset] = k.text;
    names[specials - 2] = "[UNK]";
    names[specials - 1] = "[PAD]";
    std::string json = "{\n  \"added_tokens_decoder\": {\n";
    for (long i = 0; i < specials; ++i)
      json += "    \"" + std::to_string(base + i) + "\": {\"content\": " +
              jsonQuoted(names[i]) + ", \"special\": true}" +
              (i + 1 < specials ? ",\n" : "\n");
    json += "  },\n  \"bos_token\": \"[BOS]\",\n  \"eos_token\": \"[EOS]\",\n"
            "  \"pad_token\": \"[PAD]\",\n  \"unk_token\": \"[UNK]\",\n"
            "  \"tokenizer_class\": \"TikTokenTokenizer\"\n}\n";
    writeFile(outDir + "/tokenizer_config.json", json);
  }
  std::fprintf(stderr, "kimi-tokenize: %u tokens (%u merges) from %zu bytes -> %s\n",
               vocab->size(), vocab->size() - 256, corpus.size(), outDir.c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command != "encode" && command != "decode" && command != "train")
    die("unknown command '" + command + "' (encode, decode or train; --help)");
  TokenizerOptions options;
  std::string dir, outDir;
  std::vector<std::string> corpora, rest;
  long vocabSize = 0, kimiSpecials = 0;
  SpecialText specials = SpecialText::kRecognize;
  auto value = [&](int &i) -> std::string {
    if (i + 1 >= argc)
      die(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int &i) -> long {
    std::string v = value(i);
    char *end = nullptr;
    errno = 0;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || errno)
      die(std::string(argv[i - 1]) + ": '" + v + "' is not an integer");
    return n;
  };
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tokenizer")
      dir = value(i);
    else if (a == "--pattern")
      options.pattern = value(i);
    else if (a == "--reserved-special") {
      long n = number(i);
      if (n < 0 || n > (1 << 20))
        die("--reserved-special must be in [0, 1048576]");
      options.reservedSpecialTokens = static_cast<int32_t>(n);
    } else if (a == "--special") {
      std::string v = value(i);
      if (v == "text")
        specials = SpecialText::kAsText;
      else if (v == "recognize")
        specials = SpecialText::kRecognize;
      else
        die("--special must be 'text' or 'recognize', not '" + v + "'");
    } else if (a == "--corpus")
      corpora.push_back(value(i));
    else if (a == "--vocab-size")
      vocabSize = number(i);
    else if (a == "--kimi-specials")
      kimiSpecials = number(i);
    else if (a == "-o")
      outDir = value(i);
    else if (a.size() > 1 && a[0] == '-' && a != "-")
      die("unknown option '" + a + "' (--help)");
    else
      rest.push_back(a);
  }
  if (command == "train") {
    if (!dir.empty() || !rest.empty())
      die("train takes --corpus, --vocab-size, --kimi-specials, --pattern and -o");
    return train(corpora, vocabSize, kimiSpecials, options.pattern, outDir);
  }
  if (!corpora.empty() || vocabSize || kimiSpecials || !outDir.empty())
    die("--corpus, --vocab-size, --kimi-specials and -o are options of train");
  if (dir.empty())
    die(command + " needs --tokenizer DIR");
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::load(dir, options);
  if (!tokenizer)
    die(tokenizer.status().message());
  if (command == "encode") {
    if (rest.size() > 1)
      die("encode takes one FILE");
    std::string text = readInput(rest.empty() ? "" : rest[0]);
    std::vector<int32_t> ids;
    Status s = (*tokenizer)->encode(text, specials, ids);
    if (!s.isOk())
      die(s.message());
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i)
      line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
  }
  std::vector<std::string> words = rest;
  if (words.empty()) {
    std::string text = readInput("");
    size_t p = 0;
    while (p < text.size()) {
      size_t b = text.find_first_not_of(" \t\r\n", p);
      if (b == std::string::npos)
        break;
      size_t e = text.find_first_of(" \t\r\n", b);
      if (e == std::string::npos)
        e = text.size();
      words.push_back(text.substr(b, e - b));
      p = e;
    }
  }
  std::vector<int32_t> ids;
  for (const std::string &w : words) {
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(w.c_str(), &end, 10);
    if (w.empty() || *end || errno || v < INT32_MIN || v > INT32_MAX)
      die("'" + w + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  std::string bytes;
  Status s = (*tokenizer)->decode(ids.data(), ids.size(), bytes);
  if (!s.isOk())
    die(s.message());
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

//===- tokenizer_bench.cpp - encoding and decoding throughput, as JSON ----===//
//
// usage: kimi-bench-tokenizer --tokenizer DIR [--pattern RE]
//                             [--reserved-special N] [--repeats R] FILE...
//
// Encodes the concatenated files (valid UTF-8) on one thread, R times, and
// prints the best and median encode throughput in MB/s (10^6 bytes of text
// a second), tokens per second and bytes per token, and the decode
// throughput, as JSON. The encoded ids are decoded and compared with the
// text, so a broken tokenizer cannot report a speed.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/file_io.h"
#include "runtime/support/text.h"
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace kimi::rt;

namespace {

[[noreturn]] void die(const std::string &m) {
  std::fprintf(stderr, "kimi-bench-tokenizer: error: %s\n", m.c_str());
  std::exit(1);
}

double seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

} // namespace

int main(int argc, char **argv) {
  std::string dir;
  TokenizerOptions options;
  bool patternGiven = false;
  int repeats = 5;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokenizer")
      dir = value();
    else if (a == "--pattern") {
      options.pattern = value();
      patternGiven = true;
    } else if (a == "--reserved-special")
      options.reservedSpecialTokens = std::atoi(value().c_str());
    else if (a == "--repeats")
      repeats = std::atoi(value().c_str());
    else if (a == "--help" || a == "-h") {
      std::puts("usage: kimi-bench-tokenizer --tokenizer DIR [--pattern RE] "
                "[--reserved-special N] [--repeats R] FILE...");
      return 0;
    } else if (!a.empty() && a[0] == '-')
      die("unknown option '" + a + "'");
    else
      files.push_back(a);
  }
  if (dir.empty() || files.empty() || repeats < 1)
    die("needs --tokenizer DIR, at least one FILE and --repeats >= 1 (--help)");
  std::string text;
  for (const std::string &f : files) {
    StatusOr<std::string> t = readRegularFile(f, "'" + f + "'", 1ull << 30);
    if (!t)
      die(t.status().message());
    text += *t;
  }
  auto loadStart = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::load(dir, options);
  if (!tok)
    die(tok.status().message());
  const double loadSeconds = seconds(loadStart, std::chrono::steady_clock::now());

  std::vector<double> encode, decode;
  std::vector<int32_t> ids;
  for (int r = 0; r < repeats; ++r) {
    ids.clear();
    auto t0 = std::chrono::steady_clock::now();
    Status s = (*tok)->encode(text, SpecialText::kAsText, ids);
    auto t1 = std::chrono::steady_clock::now();
    if (!s.isOk())
      die(s.message());
    std::string back;
    back.reserve(text.size());
    auto t2 = std::chrono::steady_clock::now();
    s = (*tok)->decode(ids.data(), ids.size(), back);
    auto t3 = std::chrono::steady_clock::now();
    if (!s.isOk() || back != text)
      die("the ids do not decode to the text");
    encode.push_back(seconds(t0, t1));
    decode.push_back(seconds(t2, t3));
  }
  std::sort(encode.begin(), encode.end());
  std::sort(decode.begin(), decode.end());
  const double mb = text.size() / 1e6;
  std::printf("{\n  \"tokenizer\": %s,\n  \"pattern\": %s,\n  \"vocab\": %u,\n"
              "  \"bytes\": %zu,\n  \"tokens\": %zu,\n  \"bytes_per_token\": %.3f,\n"
              "  \"repeats\": %d,\n  \"load_s\": %.4f,\n"
              "  \"encode_mb_per_s_best\": %.2f,\n  \"encode_mb_per_s_median\": %.2f,\n"
              "  \"encode_tokens_per_s_median\": %.0f,\n"
              "  \"decode_mb_per_s_median\": %.1f\n}\n",
              jsonQuoted(dir).c_str(),
              jsonQuoted(patternGiven ? options.pattern : std::string("kimi")).c_str(),
              (*tok)->vocab().size(), text.size(), ids.size(),
              double(text.size()) / double(ids.size()), repeats, loadSeconds,
              mb / encode.front(), mb / encode[encode.size() / 2],
              ids.size() / encode[encode.size() / 2], mb / decode[decode.size() / 2]);
  return 0;
}

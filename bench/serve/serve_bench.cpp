//===- serve_bench.cpp - a load generator for kimi-serve, JSON out --------===//
//
// usage: kimi-bench-serve --url http://127.0.0.1:8000 --model NAME
//          [--requests N] [--concurrency C | --rate R] [--seed S]
//          [--prompt-words LO:HI] [--output-tokens LO:HI] [--chat]
//
// In the style of vLLM's serving benchmark: N streamed requests (completions,
// or chats with --chat) with prompt lengths (in words of a fixed vocabulary)
// and output lengths (max_tokens, with ignore_eos) drawn uniformly from the
// given ranges with a fixed seed, sent either C at a time (closed loop) or
// arriving as a Poisson process of R requests a second (open loop). Prints
// request and output-token throughput, and time to first token and
// inter-token latency (mean, p50, p99) in milliseconds, as JSON. Every
// response must end with [DONE] and the requested number of tokens, or the
// run fails.
//
//===----------------------------------------------------------------------===//

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string &m) {
  std::fprintf(stderr, "kimi-bench-serve: error: %s\n", m.c_str());
  std::exit(1);
}

struct Range {
  long lo = 0, hi = 0;
};

Range parseRange(const std::string &flag, const std::string &v) {
  Range r;
  if (std::sscanf(v.c_str(), "%ld:%ld", &r.lo, &r.hi) != 2 || r.lo < 1 || r.hi < r.lo)
    die(flag + " '" + v + "': expected LO:HI with 1 <= LO <= HI");
  return r;
}

struct Outcome {
  bool ok = false;
  std::string error;
  double ttftMs = 0, totalMs = 0;
  std::vector<double> itlMs;
  long tokens = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double mean(const std::vector<double> &v) {
  double s = 0;
  for (double x : v)
    s += x;
  return v.empty() ? 0 : s / v.size();
}

} // namespace

int main(int argc, char **argv) {
  std::string url = "http://127.0.0.1:8000", model;
  long requests = 64, concurrency = 8;
  double rate = 0;
  unsigned long seed = 1;
  Range promptWords{16, 64}, outputTokens{16, 64};
  bool chat = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--url")
      url = value();
    else if (a == "--model")
      model = value();
    else if (a == "--requests")
      requests = std::atol(value().c_str());
    else if (a == "--concurrency")
      concurrency = std::atol(value().c_str());
    else if (a == "--rate")
      rate = std::atof(value().c_str());
    else if (a == "--seed")
      seed = std::strtoul(value().c_str(), nullptr, 10);
    else if (a == "--prompt-words")
      promptWords = parseRange(a, value());
    else if (a == "--output-tokens")
      outputTokens = parseRange(a, value());
    else if (a == "--chat")
      chat = true;
    else if (a == "--help" || a == "-h") {
      std::puts("usage: kimi-bench-serve --url URL --model NAME [--requests N] "
                "[--concurrency C | --rate R] [--seed S] [--prompt-words LO:HI] "
                "[--output-tokens LO:HI] [--chat]");
      return 0;
    } else
      die("unknown option '" + a + "'");
  }
  if (model.empty() || requests < 1 || concurrency < 1 || rate < 0)
    die("needs --model, --requests >= 1, --concurrency >= 1, --rate >= 0 (--help)");

  // The workload, fixed by the seed.
  static const char *words[] = {"the", "model", "answers", "questions", "and", "writes",
                                "code", "today", "weather", "park", "lunch", "kimi"};
  std::mt19937_64 rng(seed);
  struct Work {
    std::string body;
    long maxTokens;
    double arrival; // seconds after the start (open loop)
  };
  std::vector<Work> work;
  double t = 0;
  std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);
  for (long r = 0; r < requests; ++r) {
    long n = promptWords.lo + static_cast<long>(rng() % (promptWords.hi - promptWords.lo + 1));
    long out = outputTokens.lo + static_cast<long>(rng() % (outputTokens.hi - outputTokens.lo + 1));
    std::string prompt = "Request " + std::to_string(r) + ":";
    for (long w = 0; w < n; ++w)
      prompt += std::string(" ") + words[rng() % (sizeof words / sizeof *words)];
    std::string common = "\"model\": \"" + model + "\", \"max_tokens\": " + std::to_string(out) +
                         ", \"ignore_eos\": true, \"temperature\": 0, \"stream\": true";
    std::string body = chat ? "{" + common + ", \"messages\": [{\"role\": \"user\", \"content\": \"" +
                                  prompt + "\"}]}"
                            : "{" + common + ", \"prompt\": \"" + prompt + "\"}";
    if (rate > 0)
      t += gap(rng);
    work.push_back({body, out, t});
  }

  std::vector<Outcome> outcomes(work.size());
  std::atomic<long> next{0};
  const Clock::time_point start = Clock::now();
  const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
  auto runOne = [&](long r) {
    Outcome &o = outcomes[r];
    httplib::Client cli(url);
    cli.set_read_timeout(600, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = work[r].body;
    req.set_header("Content-Type", "application/json");
    const Clock::time_point sent = Clock::now();
    Clock::time_point last = sent;
    std::string buffer;
    bool sawDone = false;
    req.content_receiver = [&](const char *data, size_t len, uint64_t, uint64_t) {
      buffer.append(data, len);
      size_t end;
      while ((end = buffer.find("\n\n")) != std::string::npos) {
        std::string event = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (event == "data: [DONE]") {
          sawDone = true;
          continue;
        }
        // The tokens this chunk carries (kimi-serve's `token_ids`): the
        // first starts the time to first token; the gap since the last
        // chunk is spread over them for the inter-token latency.
        const size_t at = event.find("\"token_ids\": [");
        if (at == std::string::npos)
          continue;
        const size_t close = event.find(']', at);
        const std::string ids = event.substr(at + 14, close - at - 14);
        long n = ids.empty() ? 0 : 1 + static_cast<long>(std::count(ids.begin(), ids.end(), ','));
        if (n == 0)
          continue;
        const Clock::time_point now = Clock::now();
        if (o.tokens == 0) {
          o.ttftMs = std::chrono::duration<double, std::milli>(now - sent).count();
          for (long k = 1; k < n; ++k) // came with the first: no gap seen
            o.itlMs.push_back(0.0);
        } else {
          const double gapMs = std::chrono::duration<double, std::milli>(now - last).count();
          for (long k = 0; k < n; ++k)
            o.itlMs.push_back(gapMs / static_cast<double>(n));
        }
        last = now;
        o.tokens += n;
      }
      return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool sentOk = cli.send(req, res, error);
    o.totalMs = std::chrono::duration<double, std::milli>(Clock::now() - sent).count();
    if (!sentOk || res.status != 200)
      o.error = "request " + std::to_string(r) + ": " +
                (sentOk ? "HTTP " + std::to_string(res.status) + " " + res.body
                        : httplib::to_string(error));
    else if (!sawDone)
      o.error = "request " + std::to_string(r) + ": the stream did not end with [DONE]";
    else if (o.tokens != work[r].maxTokens)
      o.error = "request " + std::to_string(r) + ": " + std::to_string(o.tokens) +
                " tokens streamed, " + std::to_string(work[r].maxTokens) + " asked for";
    else
      o.ok = true;
  };
  std::vector<std::thread> threads;
  if (rate > 0) {
    for (long r = 0; r < requests; ++r)
      threads.emplace_back([&, r] {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(work[r].arrival)));
        runOne(r);
      });
  } else {
    for (long c = 0; c < std::min(concurrency, requests); ++c)
      threads.emplace_back([&] {
        for (long r; (r = next++) < requests;)
          runOne(r);
      });
  }
  for (std::thread &th : threads)
    th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, itl;
  long tokens = 0, failed = 0;
  std::string firstError;
  for (const Outcome &o : outcomes) {
    if (!o.ok) {
      if (!failed++)
        firstError = o.error;
      continue;
    }
    ttft.push_back(o.ttftMs);
    itl.insert(itl.end(), o.itlMs.begin(), o.itlMs.end());
    tokens += o.tokens;
  }
  if (failed)
    die(std::to_string(failed) + " of " + std::to_string(requests) + " requests failed; " +
        firstError);
  std::printf("{\n  \"endpoint\": \"%s\",\n  \"requests\": %ld,\n  \"concurrency\": %ld,\n"
              "  \"rate\": %.3f,\n  \"seed\": %lu,\n  \"duration_s\": %.3f,\n"
              "  \"request_throughput\": %.3f,\n  \"output_tokens\": %ld,\n"
              "  \"output_token_throughput\": %.2f,\n"
              "  \"ttft_ms\": {\"mean\": %.2f, \"p50\": %.2f, \"p99\": %.2f},\n"
              "  \"itl_ms\": {\"mean\": %.3f, \"p50\": %.3f, \"p99\": %.3f}\n}\n",
              path.c_str(), requests, rate > 0 ? 0 : concurrency, rate, seed, seconds,
              requests / seconds, tokens, tokens / seconds, mean(ttft), percentile(ttft, 0.5),
              percentile(ttft, 0.99), mean(itl), percentile(itl, 0.5), percentile(itl, 0.99));
  return 0;
}

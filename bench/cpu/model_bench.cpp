//===- model_bench.cpp - CPU tokens/s of a compiled model ------------------===//
//
//   kimi-bench-cpu MODEL.kimi [--prefill-tokens N] [--decode-tokens N]
//                  [--repeats R] [--seed S]
//
// Prefill and decode throughput of a compiled artifact on this CPU with
// deterministic random weights; prints one JSON object (medians over the
// repeats). Numbers and commands are kept in docs/perf/cpu.md.
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/reader.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/session/session.h"
#include "runtime/weights/random_weights.h"
#include "runtime/weights/weight_loader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kimi::rt;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.kimi [--prefill-tokens N] "
                         "[--decode-tokens N] [--repeats R] [--seed S]\n",
                 argv[0]);
    return 2;
  }
  std::string model = argv[1];
  long prefillTokens = 256, decodeTokens = 64, repeats = 5, seed = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    long v = std::atol(argv[i + 1]);
    if (a == "--prefill-tokens") prefillTokens = v;
    else if (a == "--decode-tokens") decodeTokens = v;
    else if (a == "--repeats") repeats = v;
    else if (a == "--seed") seed = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (prefillTokens < 1 || decodeTokens < 1 || repeats < 1) {
    std::fprintf(stderr, "counts must be positive\n");
    return 2;
  }
  auto spec = ArtifactReader::readFile(model);
  if (!spec.isOk()) {
    std::fprintf(stderr, "%s\n", spec.status().message().c_str());
    return 1;
  }
  auto artifact = std::make_shared<const ArtifactSpec>(std::move(spec.value()));
  auto loader = openRandomWeights(*artifact, static_cast<uint64_t>(seed), "");
  if (!loader.isOk()) {
    std::fprintf(stderr, "weights: %s\n", loader.status().message().c_str());
    return 1;
  }
  auto exe = CpuExecutable::create(artifact, *loader.value());
  if (!exe.isOk()) {
    std::fprintf(stderr, "%s\n", exe.status().message().c_str());
    return 1;
  }
  auto session = Session::create(exe.value());
  if (!session.isOk()) {
    std::fprintf(stderr, "%s\n", session.status().message().c_str());
    return 1;
  }
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<int32_t> prompt(prefillTokens);
  for (int32_t &t : prompt)
    t = static_cast<int32_t>(rng() % artifact->model.vocabSize);

  std::vector<double> prefillSeconds, decodeSeconds;
  for (long r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto p = session.value()->prefill(prompt);
    auto t1 = std::chrono::steady_clock::now();
    if (!p.isOk()) {
      std::fprintf(stderr, "%s\n", p.status().message().c_str());
      return 1;
    }
    for (long i = 0; i < decodeTokens; ++i) {
      auto d = session.value()->decodeStep(prompt[i % prompt.size()]);
      if (!d.isOk()) {
        std::fprintf(stderr, "%s\n", d.status().message().c_str());
        return 1;
      }
    }
    auto t2 = std::chrono::steady_clock::now();
    prefillSeconds.push_back(std::chrono::duration<double>(t1 - t0).count());
    decodeSeconds.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  double p = median(prefillSeconds), d = median(decodeSeconds);
  std::printf("{\n  \"model\": \"%s\",\n  \"layers\": \"%s\",\n"
              "  \"target\": \"cpu\",\n  \"threads\": 1,\n"
              "  \"prefill_tokens\": %ld,\n  \"prefill_seconds\": %.6f,\n"
              "  \"prefill_tokens_per_second\": %.2f,\n"
              "  \"decode_tokens\": %ld,\n  \"decode_seconds\": %.6f,\n"
              "  \"decode_tokens_per_second\": %.2f,\n"
              "  \"repeats\": %ld,\n  \"weight_bytes\": %lld\n}\n",
              artifact->model.modelType.c_str(),
              artifact->model.layerKinds.c_str(), prefillTokens, p,
              prefillTokens / p, decodeTokens, d, decodeTokens / d, repeats,
              (long long)exe.value()->weightBytes());
  return 0;
}

//===- make_toy.cpp - Writes the toy artifact, weights, expected output --===//
//
// usage: kimi-runtime-make-toy <dir>
// Writes <dir>/toy.kimi, <dir>/toy.safetensors and <dir>/toy.expected (the
// line kimi-embed must print for `-p 1,2,3 -n 8`), for the embed tests.
//
//===----------------------------------------------------------------------===//

#include "toy_artifact.h"
#include "toy_model_config.h"

#include "runtime/artifact/writer.h"

#include <cstdio>
#include <fstream>
#include <sys/stat.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  ::mkdir(dir.c_str(), 0755);
  kimi::rt::Status s = kimi::rt::ArtifactWriter(toy::artifact()).writeFile(dir + "/toy.kimi");
  if (s.isOk())
    s = toy::writeWeights(dir + "/toy.safetensors");
  if (!s.isOk()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  const std::vector<int32_t> prompt = {1, 2, 3};
  std::vector<int32_t> generated = toy::referenceGreedy(prompt, 8);
  // Greedy decisions must not hinge on rounding: require a clear winner.
  std::vector<int32_t> seq = prompt;
  for (int32_t next : generated) {
    std::vector<double> logits = toy::referenceLogits(seq).back();
    for (int32_t v = 0; v < TOY_VOCAB; ++v)
      if (v != next && logits[next] - logits[v] < 1e-3) {
        std::fprintf(stderr, "error: near tie at position %zu\n", seq.size());
        return 1;
      }
    seq.push_back(next);
  }
  std::ofstream out(dir + "/toy.expected");
  out << "generated:";
  for (int32_t t : generated)
    out << " " << t;
  out << "\n";
  std::printf("wrote %s/toy.kimi, toy.safetensors, toy.expected\n", dir.c_str());
  return out.good() ? 0 : 1;
}

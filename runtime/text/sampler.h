//===- sampler.h - Choosing the next token from logits ----------*- C++ -*-===//
//
// The sampling rules users know from OpenAI-style and vLLM-style servers,
// applied in this order to one row of logits:
//   1. presence and frequency penalties: logit -= frequency * count +
//      presence * (count > 0), counting the tokens generated so far;
//   2. temperature 0: the largest logit (the lowest id among equals), else
//      logits / temperature;
//   3. top-k: the k largest; 4. top-p: the smallest set of the most likely
//      tokens whose probability (renormalised after top-k) reaches p;
//   5. min-p: tokens at least min-p times as likely as the most likely one;
//   6. one draw from the softmax of what is left.
// Draws come from xoshiro256** seeded by `seed` through splitmix64: the
// same seed and logits give the same tokens on every machine.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_TEXT_SAMPLER_H
#define KIMI_RUNTIME_TEXT_SAMPLER_H

#include "runtime/support/status.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace kimi::rt {

struct SamplingParams {
  double temperature = 0; // 0: greedy
  int64_t topK = 0;       // 0: no limit
  double topP = 1;        // 1: no limit
  double minP = 0;        // 0: no limit
  double presencePenalty = 0;
  double frequencyPenalty = 0;
  uint64_t seed = 0;
};

/// The parameters' ranges: temperature in [0, 100], top-k >= 0, top-p in
/// (0, 1], min-p in [0, 1], penalties in [-2, 2] (OpenAI's ranges).
Status validateSamplingParams(const SamplingParams &params);

class Sampler {
public:
  explicit Sampler(const SamplingParams &params);

  /// The next token of one logits row of `vocab` entries. A NaN or +inf
  /// logit is an error naming its token (the model's output is broken).
  StatusOr<int32_t> sample(const float *logits, int64_t vocab);
  /// Counts a generated token for the penalties (sample() does not, so a
  /// caller may also feed tokens it chose itself).
  void accept(int32_t token);

  /// The next uniform double in [0, 1) of the generator.
  double uniform();

private:
  SamplingParams params_;
  uint64_t state_[4];
  std::unordered_map<int32_t, int64_t> counts_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_TEXT_SAMPLER_H

//===- sampler.cpp - Choosing the next token from logits ------------------===//

#include "runtime/text/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kimi::rt {

namespace {

uint64_t splitmix64(uint64_t &x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

} // namespace

Status validateSamplingParams(const SamplingParams &p) {
  auto bad = [](const char *name, double v, const char *range) {
    return invalidArgument(std::string(name) + " " + std::to_string(v) +
                           " is out of range (" + range + ")");
  };
  if (!(p.temperature >= 0 && p.temperature <= 100))
    return bad("temperature", p.temperature, "0 to 100; 0 is greedy");
  if (p.topK < 0)
    return invalidArgument("top-k " + std::to_string(p.topK) +
                           " is out of range (0 = no limit, or a count)");
  if (!(p.topP > 0 && p.topP <= 1))
    return bad("top-p", p.topP, "greater than 0, at most 1");
  if (!(p.minP >= 0 && p.minP <= 1))
    return bad("min-p", p.minP, "0 to 1");
  if (!(p.presencePenalty >= -2 && p.presencePenalty <= 2))
    return bad("presence penalty", p.presencePenalty, "-2 to 2");
  if (!(p.frequencyPenalty >= -2 && p.frequencyPenalty <= 2))
    return bad("frequency penalty", p.frequencyPenalty, "-2 to 2");
  return Status::ok();
}

Sampler::Sampler(const SamplingParams &params) : params_(params) {
  uint64_t x = params.seed;
  for (uint64_t &s : state_)
    s = splitmix64(x);
}

double Sampler::uniform() {
  // xoshiro256**
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return static_cast<double>(result >> 11) * 0x1.0p-53;
}

void Sampler::accept(int32_t token) { ++counts_[token]; }

StatusOr<int32_t> Sampler::sample(const float *logits, int64_t vocab) {
  if (vocab <= 0)
    return invalidArgument("an empty logits row");
  scratch_.assign(logits, logits + vocab);
  for (int64_t i = 0; i < vocab; ++i)
    if (std::isnan(scratch_[i]) || scratch_[i] == INFINITY)
      return executionError("the logits of token " + std::to_string(i) + " are " +
                            (std::isnan(scratch_[i]) ? "NaN" : "+inf"));
  if (params_.presencePenalty != 0 || params_.frequencyPenalty != 0)
    for (const auto &[token, count] : counts_)
      if (token >= 0 && token < vocab)
        scratch_[token] -= static_cast<float>(params_.frequencyPenalty * count +
                                              params_.presencePenalty);
  const int64_t best = std::max_element(scratch_.begin(), scratch_.end()) - scratch_.begin();
  if (params_.temperature == 0 || params_.topK == 1 || scratch_[best] == -INFINITY)
    return static_cast<int32_t>(best);

  // Candidates, most likely first where an order is needed. Probabilities
  // are exp((logit - max) / T): relative to the most likely token.
  const double invT = 1.0 / params_.temperature, top = scratch_[best];
  auto weight = [&](int32_t i) { return std::exp((scratch_[i] - top) * invT); };
  order_.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    order_[i] = static_cast<int32_t>(i);
  auto higher = [&](int32_t a, int32_t b) {
    return scratch_[a] != scratch_[b] ? scratch_[a] > scratch_[b] : a < b;
  };
  size_t kept = order_.size();
  if (params_.topK > 0 && static_cast<size_t>(params_.topK) < kept) {
    kept = static_cast<size_t>(params_.topK);
    std::nth_element(order_.begin(), order_.begin() + kept - 1, order_.end(), higher);
  }
  if (params_.topP < 1) {
    double total = 0;
    for (size_t i = 0; i < kept; ++i)
      total += weight(order_[i]);
    // Sort only as many of the most likely as the mass needs: the top m,
    // doubling m until they reach p.
    const double goal = params_.topP * total;
    size_t m = std::min<size_t>(kept, 64);
    for (;;) {
      std::partial_sort(order_.begin(), order_.begin() + m, order_.begin() + kept, higher);
      double mass = 0;
      size_t n = 0;
      while (n < m && mass < goal)
        mass += weight(order_[n++]);
      if (mass >= goal || m == kept) {
        kept = n;
        break;
      }
      m = std::min(kept, m * 4);
    }
  }
  if (params_.minP > 0) {
    // Relative to the most likely token, whose weight is 1
    // and which top-k and top-p keep.
    size_t out = 0;
    for (size_t i = 0; i < kept; ++i)
      if (weight(order_[i]) >= params_.minP)
        order_[out++] = order_[i];
    kept = out;
  }
  double total = 0;
  for (size_t i = 0; i < kept; ++i)
    total += weight(order_[i]);
  double u = uniform() * total;
  for (size_t i = 0; i < kept; ++i) {
    u -= weight(order_[i]);
    if (u < 0)
      return order_[i];
  }
  return order_[kept - 1]; // rounding left u >= 0 after the last
}

} // namespace kimi::rt

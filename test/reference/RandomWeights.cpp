//===- RandomWeights.cpp - deterministic random model weights -------------===//

#include "test/reference/RandomWeights.h"
#include <cmath>
#include <cstring>

using namespace kimi;
using namespace kimi::reference;
using R = kimi::WeightRole;

uint64_t SplitMix64::next() {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() { return double(next() >> 11) * 0x1.0p-53; }

uint64_t kimi::reference::fnv1a64(std::string_view text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

void kimi::reference::randomRecipe(const WeightSpec &spec, double &offset,
                                   double &spread) {
  offset = 0.0;
  switch (spec.role) {
  case R::Embed:
    spread = std::sqrt(3.0);
    return;
  case R::FinalNorm:
  case R::OutputResNorm:
  case R::InputNorm:
  case R::PostAttnNorm:
  case R::AttnResNorm:
  case R::MlpResNorm:
  case R::KdaONorm:
  case R::MlaQANorm:
  case R::MlaKvANorm:
  case R::LatentNorm:
    offset = 1.0;
    spread = 0.1;
    return;
  case R::KdaALog:
    spread = 1.0;
    return;
  case R::KdaDtBias:
    offset = -2.0;
    spread = 4.0;
    return;
  case R::RouterBias:
    spread = 0.05;
    return;
  default:
    // A projection: std 1/sqrt(fan_in), fan_in the last dimension.
    spread = std::sqrt(3.0 / double(spec.shape.back()));
    return;
  }
}

Tensor kimi::reference::randomTensor(const WeightSpec &spec, uint64_t seed) {
  double offset, spread;
  randomRecipe(spec, offset, spread);
  SplitMix64 rng{seed ^ fnv1a64(spec.name)};
  Tensor t;
  t.shape = spec.shape;
  t.data.resize(Tensor::numElements(spec.shape));
  for (double &v : t.data)
    v = offset + spread * (2.0 * rng.uniform() - 1.0);
  return t;
}

WeightMap kimi::reference::randomWeights(const ModelConfig &config,
                                         uint64_t seed) {
  WeightMap weights;
  for (const WeightSpec &spec : weightSpecs(config))
    weights[spec.name] = randomTensor(spec, seed);
  return weights;
}

static double toBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7F800000u) != 0x7F800000u) // finite: round to nearest even
    bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

void kimi::reference::roundValues(std::vector<double> &values,
                                  Rounding rounding) {
  for (double &v : values) {
    float f = static_cast<float>(v);
    v = rounding == Rounding::F32 ? double(f) : toBf16(f);
  }
}

void kimi::reference::roundWeights(WeightMap &weights, Rounding rounding) {
  for (auto &entry : weights)
    roundValues(entry.second.data, rounding);
}

//===- RandomWeights.h - deterministic random model weights -----*- C++ -*-===//
//
// Random weights for any config, reproducible from a 64-bit seed and simple
// enough to re-implement elsewhere (e.g. a safetensors writer in Python).
// The recipe (docs/reference-model.md, "Random weights"):
//
//   stream   splitmix64, one per tensor, starting state seed ^ fnv1a64(name)
//            (name: the canonical name as in the WeightMap, `{e}` kept)
//   uniform  u = (next() >> 11) * 2^-53 in [0, 1); r = 2u - 1 in [-1, 1)
//   value    element i (row-major) = offset + spread * r_i (IEEE double,
//            in this order; spread = sqrt(3.0 / fan_in) rounded once), by role:
//              projections (every [.., out, in] matrix, stacked experts,
//              router, lm_head, conv [C,1,K], AttnRes pseudo-queries [1,D]):
//                offset 0, spread sqrt(3 / fan_in), fan_in = last dimension
//                (std 1/sqrt(fan_in))
//              embedding:              offset 0, spread sqrt(3)   (std 1)
//              RMSNorm weights:        offset 1, spread 0.1
//              A_log:                  offset 0, spread 1
//              dt_bias:                offset -2, spread 4   (U(-6, 2))
//              router bias:            offset 0, spread 0.05
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_REFERENCE_RANDOMWEIGHTS_H
#define KIMI_TEST_REFERENCE_RANDOMWEIGHTS_H

#include "test/reference/ReferenceModel.h"
#include <cstdint>
#include <string_view>

namespace kimi::reference {

/// splitmix64 (Steele, Lea, Flood 2014).
struct SplitMix64 {
  uint64_t state;
  uint64_t next();
  /// (next() >> 11) * 2^-53, in [0, 1).
  double uniform();
};

/// 64-bit FNV-1a of the bytes of `text`.
uint64_t fnv1a64(std::string_view text);

/// The offset and spread of `role`'s values (see the recipe above).
void randomRecipe(const WeightSpec &spec, double &offset, double &spread);

/// One tensor of the recipe.
Tensor randomTensor(const WeightSpec &spec, uint64_t seed);

/// Every weight of `config` (weightSpecs), from `seed`.
WeightMap randomWeights(const ModelConfig &config, uint64_t seed);

/// Rounds every value to the storage type the compiled model reads, so that
/// the reference and the compiled path see the same numbers: F32 is
/// round-to-nearest-even; BF16 first rounds to f32, then to bf16 (nearest,
/// ties to even), as a writer holding f32 values does.
void roundWeights(WeightMap &weights, Rounding rounding);


} // namespace kimi::reference

#endif

//===- random_weights.h - deterministic random weights ----------*- C++ -*-===//
//
// Weights for demos and tests when no checkpoint is at hand: every tensor of
// an artifact's manifest filled from a splitmix64 stream seeded by the seed
// and the tensor's name, scaled so activations stay O(1) (norm weights near
// 1, projections with std 1/sqrt(fan_in), gate parameters in their usual
// ranges). Same seed, same weights, on any machine.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_RANDOM_WEIGHTS_H
#define KIMI_RUNTIME_WEIGHTS_RANDOM_WEIGHTS_H

#include "runtime/artifact/types.h"
#include "runtime/support/status.h"
#include "runtime/weights/weight_loader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

/// How the values of weight `name` are drawn: element i (row-major, from
/// 0) of the tensor is offset + spread * (2 u_i - 1), in double, rounded to
/// f32, where u_i = (z >> 11) 2^-53 and z is splitmix64's output for the
/// counter state + (i + 1) 0x9E3779B97F4A7C15. A generator on another
/// device (runtime/cuda/device_random.h) computes the same values from
/// this recipe.
struct RandomWeightRecipe {
  uint64_t state = 0;
  double offset = 0, spread = 0;
};
RandomWeightRecipe randomWeightRecipe(const std::string &name,
                                      const std::vector<int64_t> &shape,
                                      uint64_t seed);

/// Values of the weight `name` with `shape`, in f32.
std::vector<float> randomWeight(const std::string &name,
                                const std::vector<int64_t> &shape,
                                uint64_t seed);

/// Writes every weight of `artifact` to one safetensors file (F32), under
/// the canonical names (`{e}` stacks as one tensor).
Status writeRandomWeights(const ArtifactSpec &artifact, uint64_t seed,
                          const std::string &path);

/// Random weights of `seed` for every tensor of `artifact`, opened: written
/// to `keepAs` (kept), or to a temporary file that is unlinked once mapped
/// when `keepAs` is empty.
StatusOr<std::unique_ptr<WeightLoader>>
openRandomWeights(const ArtifactSpec &artifact, uint64_t seed, const std::string &keepAs);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_RANDOM_WEIGHTS_H

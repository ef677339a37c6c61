//===- toy_artifact.h - The toy model's artifact, weights, reference -----===//
//
// Builds the artifact of toy_model.c with ArtifactWriter, its safetensors
// weights (stored in every format the loader reads: BF16 under a
// `language_model.` prefix, F32, MXFP4, per-expert F16 under an alias), and
// computes its logits independently in double precision.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_RUNTIME_TOY_ARTIFACT_H
#define KIMI_TEST_RUNTIME_TOY_ARTIFACT_H

#include "runtime/artifact/types.h"
#include "runtime/support/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace toy {

/// The bytes of the toy shared object (built by CMake).
std::vector<uint8_t> sharedObject();

/// The toy's artifact; `decodeSymbol` picks one of the decode variants.
kimi::rt::ArtifactSpec artifact(const std::string &decodeSymbol = "kimi_entry_decode");

/// The weights as the model sees them (after conversion), row-major.
struct Weights {
  std::vector<double> embed;  // [V, D]
  std::vector<double> decay;  // [D]
  std::vector<double> lmHead; // [V, D]
  std::vector<double> gate;   // [E, D]
};
const Weights &weights();

/// Writes the safetensors file the artifact's manifest reads.
kimi::rt::Status writeWeights(const std::string &path);

/// Logits [tokens.size()][V] of the toy recurrence, computed in double.
std::vector<std::vector<double>> referenceLogits(const std::vector<int32_t> &tokens);

/// Greedy continuation of `prompt` by `steps` tokens under the reference.
std::vector<int32_t> referenceGreedy(const std::vector<int32_t> &prompt, int steps);

/// A fresh directory under $TMPDIR (or /tmp), removed with its files when
/// the object goes away.
class TempDir {
public:
  explicit TempDir(const std::string &name);
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

} // namespace toy

#endif

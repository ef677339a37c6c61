//===- ReleasedCheckpoint.h - checkpoints in the released layouts -*- C++ -*-===//
//
// The tensors a released Kimi checkpoint holds, as it holds them
// (shared/reference/kimi-k3.md §9), and a writer of such checkpoints for any
// config: real names, shapes and dtypes, shards plus
// `model.safetensors.index.json`, and a verbatim-style `config.json` with
// the PretrainedConfig boilerplate and, for K3, the compressed-tensors
// `quantization_config`. Tests write tiny checkpoints with it and load them
// the way a user loads a downloaded one (`kimi-checkpoint` is the CLI).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_MODELS_CHECKPOINT_RELEASEDCHECKPOINT_H
#define KIMI_MODELS_CHECKPOINT_RELEASEDCHECKPOINT_H

#include "models/import/ModelConfig.h"
#include "models/import/WeightNames.h"
#include "llvm/Support/Error.h"
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kimi {

enum class StoredType { BF16, F32, MXFP4Values, MXFP4Scales };

/// One tensor of a released checkpoint.
struct ReleasedTensor {
  WeightRole role;
  int64_t layer;  // -1 at model level
  int64_t expert; // -1 unless one routed expert's piece
  /// The name in the checkpoint (`language_model.` prefix, `block_sparse_moe`,
  /// `w1/w2/w3`, `_packed` / `_scale` for MXFP4 pieces).
  std::string name;
  /// The weight kimi reads it as: its canonical name (`{e}` kept for
  /// experts) and logical shape (experts stacked, [E, ...]).
  std::string canonical;
  std::vector<int64_t> logicalShape;
  std::vector<int64_t> shape; // as stored
  StoredType type;
};

/// Every text tensor of the checkpoint of `config`, in its layout
/// (config.layout) and quantization (config.quantization), in module order.
std::vector<ReleasedTensor> releasedTensors(const ModelConfig &config);

/// `config` (the text of a kimi config) rewritten as the release writes
/// it: the PretrainedConfig boilerplate keys, and for the K3 layout the
/// multimodal wrapper with `quantization_config` (MXFP4 routed experts
/// when `mxfp4Experts`) and a `vision_config`.
llvm::Expected<std::string> releasedConfigText(llvm::StringRef configText,
                                               bool mxfp4Experts);

/// A weight's values by canonical name: experts stacked as [E, ...].
using WeightValuesFn = std::function<std::vector<double>(
    const std::string &canonical, const std::vector<int64_t> &logicalShape)>;

/// Changes a tensor before it is written (tests' layout mutations): may
/// edit the name, shape and bytes; returns false to leave it out.
using TensorEditFn = std::function<bool(std::string &name,
                                        std::vector<int64_t> &shape,
                                        std::vector<uint8_t> &bytes)>;

struct CheckpointWriteOptions {
  int shards = 3;
  /// K3 layout: also write a few `vision_tower.*` and `mm_projector.*`
  /// tensors, which a loader must skip.
  bool visionTensors = true;
  TensorEditFn edit;
};

/// Writes `config.json` (`configText` as is), the shards
/// `model-0000i-of-0000n.safetensors` and the index into `dir` (created).
/// Returns each weight's values as stored, by canonical name: rounded to
/// bf16 or f32, experts quantized to MXFP4 and decoded again, so that a
/// reference computes with exactly what the checkpoint holds.
llvm::Expected<std::map<std::string, std::vector<double>>>
writeReleasedCheckpoint(const ModelConfig &config, llvm::StringRef configText,
                        const std::string &dir, const WeightValuesFn &values,
                        const CheckpointWriteOptions &options = {});

/// MXFP4 of one row of `values.size()` (a multiple of 32) values: packed
/// codes (low nibble = even element) and E8M0 scales, OCP's rule (scale
/// 2^(floor(log2 amax) - 2), codes rounded to nearest, ties to even).
void quantizeMxfp4Row(const double *values, int64_t n, uint8_t *packed,
                      uint8_t *scales);
/// The value of code `c` (0..15) of E2M1.
double e2m1Value(uint8_t c);

} // namespace kimi

#endif

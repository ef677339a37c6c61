//===- ModelConfig.h - a Hugging Face config read and validated -*- C++ -*-===//
//
// The architecture of a Kimi-family model as read from a Hugging Face style
// `config.json` (flat, or nested under `text_config` as in K3). Parsing checks
// every field kimi reads and names the field at fault in its error.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_MODELS_IMPORT_MODELCONFIG_H
#define KIMI_MODELS_IMPORT_MODELCONFIG_H

#include "llvm/Support/Error.h"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kimi {

enum class AttentionKind { Kda, Mla };
enum class MlpActivation { Silu, Situ };

struct KdaConfig {
  int64_t numHeads = 0;
  int64_t headDim = 0;
  int64_t convKernel = 0;
  /// Full-rank output gate `g_proj`; otherwise low rank `g_b_proj g_a_proj`.
  bool fullRankGate = false;
  /// `gate_lower_bound` (K3: -5): the lower-bounded gate form; the softplus
  /// form when absent.
  std::optional<double> gateLowerBound;
};

struct MlaConfig {
  int64_t numHeads = 0;
  /// 0 when queries are projected directly (`q_lora_rank: null`).
  int64_t qLoraRank = 0;
  int64_t kvLoraRank = 0;
  int64_t nopeDim = 0;
  int64_t ropeDim = 0;
  int64_t vDim = 0;
  bool outputGate = false;
};

struct MoeConfig {
  int64_t numExperts = 0;
  int64_t topK = 0;
  int64_t numShared = 0;
  int64_t intermediate = 0;
  /// Width the routed experts see: `routed_expert_hidden_size` (LatentMoE),
  /// or 0 when experts run at the hidden width.
  int64_t latent = 0;
  bool latentNorm = false;
  bool renormalize = true;
  double scaling = 1.0;
  int64_t firstDense = 0;
};

/// How a released checkpoint of the model stores its tensors
/// (shared/reference/kimi-k3.md §9). Decided by the config's shape: a
/// `text_config` inside a `kimi_k3` wrapper is a K3 release, anything else
/// is laid out like Kimi Linear.
enum class CheckpointLayout {
  /// No name prefix; `A_log` [1, 1, H, 1]; bf16 short-conv taps.
  KimiLinear,
  /// Every text tensor under `language_model.`; `A_log` [128] (H values,
  /// then zeros); f32 short-conv taps and `o_norm`; layer 0 stores the
  /// AttnRes tensors it never uses.
  K3,
};

/// What the config's `quantization_config` says is stored quantized.
struct QuantizationConfig {
  /// The config has a `quantization_config`.
  bool present = false;
  /// Routed experts are MXFP4 (compressed-tensors `mxfp4-pack-quantized`:
  /// `<name>_packed` U8 values, `<name>_scale` E8M0 bytes per 32).
  bool mxfp4Experts = false;
};

struct ModelConfig {
  std::string modelType;
  CheckpointLayout layout = CheckpointLayout::KimiLinear;
  QuantizationConfig quantization;
  int64_t hidden = 0;
  int64_t numLayers = 0;
  int64_t vocab = 0;
  int64_t denseIntermediate = 0;
  int64_t maxPositions = 0;
  double rmsNormEps = 1e-5;
  bool tieEmbeddings = false;
  /// Decoder layers per AttnRes block; 0 for an ordinary residual stream.
  int64_t attnResBlock = 0;
  MlpActivation activation = MlpActivation::Silu;
  double situBeta = 0.0, situLinearBeta = 0.0;
  /// Attention kind of each layer, 0-based.
  std::vector<AttentionKind> layers;
  KdaConfig kda;
  MlaConfig mla;
  MoeConfig moe;

  bool isMoeLayer(int64_t layer) const { return layer >= moe.firstDense; }
  /// Length of `A_log` as the release stores it (§9: K3 pads to 128).
  int64_t storedALogLength() const {
    return layout == CheckpointLayout::K3 ? (kda.numHeads + 127) / 128 * 128
                                          : kda.numHeads;
  }
  /// K3 stores the KDA short-conv taps and o_norm in f32; Kimi Linear in
  /// bf16 like its other dense weights (§9).
  bool storesKdaConvAndONormF32() const {
    return layout == CheckpointLayout::K3;
  }
  int64_t expertWidth() const { return moe.latent ? moe.latent : hidden; }
  int64_t countLayers(AttentionKind kind) const;
};

/// Options of config reading.
struct ConfigReadOptions {
  /// Fields kimi neither reads nor knows to ignore are an error unless set
  /// (then they are skipped): a misspelled field must not pass silently.
  bool allowUnknownFields = false;
};

/// Parses and validates `text`, the contents of a config.json. `source` names
/// the file in messages.
llvm::Expected<ModelConfig> parseModelConfig(llvm::StringRef text,
                                             llvm::StringRef source,
                                             const ConfigReadOptions &options = {});

/// Reads and parses the file at `path`.
llvm::Expected<ModelConfig> readModelConfig(llvm::StringRef path,
                                            const ConfigReadOptions &options = {});

} // namespace kimi

#endif

//===- ReferenceModel.h - float64 reference forward pass --------*- C++ -*-===//
//
// An independent, deliberately plain float64 implementation of the whole
// Kimi-family model, written from shared/reference/kimi-k3.md (§2 KDA, §3
// gated MLA without positional encoding, §4 Attention Residuals, §5 Stable
// LatentMoE, §6 epsilons and names). It is the oracle compiled logits are
// compared against, so it shares no code with the compiler's lowering: it
// only uses the config reader (what the model *is*) and the weight-name table
// (what its parameters are called). See docs/reference-model.md.
//
// Everything is computed straightforwardly: KDA in its recurrent form, MLA as
// explicit causal softmax attention over materialised per-head K and V (not
// the absorbed form), routing as an explicit per-token top-k.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_REFERENCE_REFERENCEMODEL_H
#define KIMI_TEST_REFERENCE_REFERENCEMODEL_H

#include "models/import/ModelConfig.h"
#include "models/import/WeightNames.h"
#include "test/reference/ReferenceOps.h"
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kimi::reference {

/// A dense row-major tensor of doubles with its logical shape.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  static int64_t numElements(const std::vector<int64_t> &shape);
};

/// Parameters by canonical Hugging Face name (kimi::weightName). Routed
/// experts are one tensor per projection whose name keeps `{e}` and whose
/// leading dimension is the expert, exactly as the importer declares them
/// (`model.layers.N.mlp.experts.{e}.gate_proj.weight : [E, I, W]`).
using WeightMap = std::map<std::string, Tensor>;

/// One parameter the model reads.
struct WeightSpec {
  WeightRole role;
  int64_t layer; // -1 for model-level parameters
  std::string name;
  std::vector<int64_t> shape;
};

/// Every parameter the model reads for `config`, with its logical shape: the
/// set the importer declares (with dense experts). Layer 0 of an AttnRes
/// model has no `self_attention_res_*` (its attention input is the embedding,
/// §4 "layer 0 skips this").
std::vector<WeightSpec> weightSpecs(const ModelConfig &config);


//===----------------------------------------------------------------------===//
// The model
//===----------------------------------------------------------------------===//

/// Recurrent state of one KDA layer: per head `S : [dk, dv]` (as [H, dk, dv])
/// and the q, k, v short-conv states `[K-1, H*dk]` (the last K-1 projected
/// inputs, before the convolution).
struct KdaState {
  std::vector<double> S;
  std::vector<double> conv[3];
};

/// Cache of one MLA layer: per past token the row `[RMSNorm(ckv) | k_pe]`
/// (R + dr values, the layout of the compiled model's latent cache).
struct MlaState {
  std::vector<double> cache; // [length, R + dr]
  int64_t length = 0;
};

struct ModelState {
  std::vector<KdaState> kda; // indexed by layer (empty for MLA layers)
  std::vector<MlaState> mla; // indexed by layer (empty for KDA layers)
  int64_t position = 0;      // tokens processed so far
};

/// Intermediate values of one `run`, for locating a mismatch.
struct Trace {
  /// Per layer, `[T, D]` each: the attention's input before input_layernorm
  /// (the AttnRes mix, or the residual stream), the attention's output, the
  /// MLP's input before post_attention_layernorm (the mix, or the residual
  /// stream), the MLP's output, and the layer's output h_next (for AttnRes
  /// models the running partial sum of the current block).
  std::vector<std::vector<double>> attnInputs, attnOutputs, mlpInputs,
      mlpOutputs, layerOutputs;
  /// The input of the final norm `[T, D]`.
  std::vector<double> finalHidden;
  /// Per layer, the smallest gap over the tokens between the k-th and the
  /// (k+1)-th largest biased router score (+inf for dense layers): a compiled
  /// model in lower precision may route differently where it is tiny.
  std::vector<double> routingMargin;
};

/// A storage type values are rounded to (round to nearest, ties to even).
enum class Rounding { F32, BF16 };
/// Rounds values to f32, or to f32 then bf16 (RandomWeights.cpp).
void roundValues(std::vector<double> &values, Rounding rounding);

class ReferenceModel {
public:
  /// `weights` must hold every parameter of weightSpecs(config) with its
  /// shape (extra entries are ignored); aborts with a message otherwise.
  ReferenceModel(const ModelConfig &config, WeightMap weights);

  /// Empty when `weights` fits `config`, else what is missing or mis-shaped.
  static std::string checkWeights(const ModelConfig &config,
                                  const WeightMap &weights);

  /// Logits `[T * V]` of `tokens` from an empty state; does not touch the
  /// model's own state.
  std::vector<double> forward(const std::vector<int32_t> &tokens) const;

  /// Resets the model's state and runs `tokens`: logits `[T * V]`.
  std::vector<double> prefill(const std::vector<int32_t> &tokens);
  /// Runs one more token from the model's state: logits `[V]`.
  std::vector<double> decodeStep(int32_t token);

  /// Runs `tokens` from `state` (positions state.position ...), updating it.
  std::vector<double> run(const std::vector<int32_t> &tokens,
                          ModelState &state, Trace *trace = nullptr) const;

  ModelState initialState() const;
  /// Rounds the activations to bf16 (BF16) where a bf16 executable holds
  /// them (every matrix product's input and output, norm outputs, the
  /// residual stream), or leaves them exact (F32, the default): what bf16
  /// activations alone change in the float64 model, a floor for an
  /// executable that computes with them.
  void setProductRounding(Rounding rounding) { productRounding_ = rounding; }
  const ModelState &state() const { return state_; }
  const ModelConfig &config() const { return config_; }
  const WeightMap &weights() const { return weights_; }

private:
  Rounding productRounding_ = Rounding::F32;
  /// Rounds `values` to bf16 under setProductRounding(BF16).
  void roundActivations(std::vector<double> &values) const;
  const Tensor &w(WeightRole role, int64_t layer = -1) const;
  std::vector<double> linear(const std::vector<double> &x, int64_t T,
                             WeightRole role, int64_t layer = -1) const;
  std::vector<double> rmsNormRows(const std::vector<double> &x, int64_t T,
                                  WeightRole role, int64_t layer,
                                  double eps) const;
  std::vector<double> mixRows(const std::vector<const std::vector<double> *>
                                  &sources,
                              int64_t T, WeightRole normRole,
                              WeightRole queryRole, int64_t layer) const;
  double activation(double gate, double up) const;
  std::vector<double> gatedMlp(const std::vector<double> &x, int64_t T,
                               WeightRole gate, WeightRole up, WeightRole down,
                               int64_t layer) const;

  std::vector<double> kda(const std::vector<double> &x, int64_t T,
                          int64_t layer, KdaState &state) const;
  std::vector<double> mla(const std::vector<double> &x, int64_t T,
                          int64_t layer, MlaState &state) const;
  std::vector<double> moe(const std::vector<double> &x, int64_t T,
                          int64_t layer, double &margin) const;
  std::vector<double> mlp(const std::vector<double> &x, int64_t T,
                          int64_t layer, Trace *trace) const;
  std::vector<double> attention(const std::vector<double> &x, int64_t T,
                                int64_t layer, ModelState &state) const;

  ModelConfig config_;
  WeightMap weights_;
  ModelState state_;
};

} // namespace kimi::reference

#endif

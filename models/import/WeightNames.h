//===- WeightNames.h - Hugging Face parameter names -------------*- C++ -*-===//
//
// The one table that maps each parameter role of the model to its Hugging
// Face name (shared/reference/kimi-k3.md §6), with the alternative spellings
// released checkpoints use. `{l}` stands for the 0-based layer index and
// `{e}` for the expert index (a stacked expert tensor keeps `{e}` in its name).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_MODELS_IMPORT_WEIGHTNAMES_H
#define KIMI_MODELS_IMPORT_WEIGHTNAMES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <vector>

namespace kimi {

enum class WeightRole {
  // Model level.
  Embed, FinalNorm, LmHead, OutputResNorm, OutputResProj,
  // Per layer: norms and Attention Residuals.
  InputNorm, PostAttnNorm, AttnResNorm, AttnResProj, MlpResNorm, MlpResProj,
  // KDA.
  KdaQ, KdaK, KdaV, KdaQConv, KdaKConv, KdaVConv, KdaFA, KdaFB, KdaALog,
  KdaDtBias, KdaB, KdaG, KdaGA, KdaGB, KdaONorm, KdaO,
  // MLA.
  MlaQ, MlaQA, MlaQANorm, MlaQB, MlaKvA, MlaKvANorm, MlaKvB, MlaG, MlaO,
  // Dense MLP.
  MlpGate, MlpUp, MlpDown,
  // MoE.
  Router, RouterBias, ExpertGate, ExpertUp, ExpertDown, ExpertGateScale,
  ExpertUpScale, ExpertDownScale, LatentDown, LatentNorm, LatentUp,
  SharedGate, SharedUp, SharedDown,
};

struct WeightNameRule {
  WeightRole role;
  /// The name kimi emits (the HF module tree of K3).
  llvm::StringRef canonical;
  /// Other spellings of released checkpoints (for example Kimi Linear's
  /// `block_sparse_moe.experts.{e}.w1`). Every name may also carry a
  /// `language_model.` prefix.
  std::vector<llvm::StringRef> aliases;
};

/// The whole table, one row per role.
llvm::ArrayRef<WeightNameRule> weightNameTable();

/// The canonical name of `role` for 0-based `layer` (ignored for model-level
/// roles); `{e}` stays in expert names.
std::string weightName(WeightRole role, int64_t layer = -1);

/// Every accepted spelling of `role` at `layer` and, for per-expert tensors,
/// `expert` (>= 0 substitutes `{e}`), canonical first.
std::vector<std::string> weightNameSpellings(WeightRole role, int64_t layer,
                                             int64_t expert = -1);

/// The name a released checkpoint gives `role` (§9): MoE tensors under
/// `block_sparse_moe.` with experts `w1` (gate), `w3` (up), `w2` (down), and
/// `language_model.` before every name when `prefixed` (K3). `{e}` is
/// replaced by `expert` when it is >= 0.
std::string releasedWeightName(WeightRole role, int64_t layer, int64_t expert,
                               bool prefixed);

/// Whether `role` is the weight of an `nn.Linear` module in the released
/// modeling code (the modules a compressed-tensors `targets: ["Linear"]`
/// selects). Embeddings, norms, convolutions, gate parameters, the router
/// (`MoEGate`), AttnRes queries and the LatentMoE projections are not.
bool isLinearModule(WeightRole role);

/// The alternative spellings of a canonical name as the importer emits it
/// (layer substituted, `{e}` kept): the aliases of the table row it matches,
/// with the same layer. Empty when the name has none.
std::vector<std::string> weightNameAliases(llvm::StringRef canonicalName);

/// Whether a checkpoint may store the 1-D weight called `canonicalName`
/// padded (§9): `A_log`, which Kimi Linear stores as [1, 1, H, 1] and K3 as
/// [128], the per-head values followed by zeros.
bool weightHasPaddedForms(llvm::StringRef canonicalName);

} // namespace kimi

#endif

//===- Patterns.h - kimi -> linalg pattern sets -----------------*- C++ -*-===//

#ifndef KIMI_LOWERING_KIMITOLINALG_PATTERNS_H
#define KIMI_LOWERING_KIMITOLINALG_PATTERNS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace kimi {
class RoutedExpertsOp;
} // namespace kimi

namespace kimi::lowering {

/// embed, linear, norms, sigmoid, situ_glu, short_conv, kda_gate.
void populateTokenwiseLoweringPatterns(mlir::RewritePatternSet &patterns);
/// mla, mla_decode, attn_res.
void populateAttentionLoweringPatterns(mlir::RewritePatternSet &patterns);
/// router, routed_experts, latent_moe, quantile_balance / counts / update.
/// `sortedExpertsMinTokens` > 0: routed experts over at least that many
/// tokens are sorted by expert and run as products batched over experts
/// (kimi-lower-to-linalg's option).
void populateMoeLoweringPatterns(mlir::RewritePatternSet &patterns,
                                 int64_t sortedExpertsMinTokens = 0);
/// The row tiles of a token-sorted step whose products are kernels
/// (SortedExpertKernels): [tiles] i32 each; row tile y is rows start[y] ..
/// end[y] (at most tileRows; empty past the last tile) of expert expert[y].
struct SortedExpertTiles {
  mlir::Value expert, start, end;
  int64_t tiles = 0;
  /// The sorted rows: T k.
  int64_t rows = 0;
  /// [T k] i32: the token of each sorted row (rows past the dispatched
  /// slots: unwritten).
  mlir::Value token;
};
/// Products of the token-sorted routed experts as kernels that read only
/// the rows the experts hold: the dispatched slots' rows lie back to back
/// by expert in [T k, ...] buffers (no padding, no host read; the linalg
/// contractions instead batch over experts padded to the largest count).
struct SortedExpertKernels {
  int64_t tileRows = 64;
  /// act(gate, up) of the sorted rows, row m being token `token[m]` of
  /// `tokens` [T, W]: [T k, I], f32 or bf16.
  llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location,
                                 mlir::Value tokens, const SortedExpertTiles &)>
      glu;
  /// down of h [T k, I]: [T k, W] f32.
  llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location,
                                 mlir::Value h, const SortedExpertTiles &)>
      down;
  /// Optional: the tables of `tiles` (whose `tiles` and `rows` are set)
  /// from the router's `ids` and `weights` [T, k] in one kernel; returns
  /// the sorted row of each dispatched slot, [T, k] i32. Null, or a null
  /// result: the tables are linalg ops.
  llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location,
                                 mlir::Value ids, mlir::Value weights,
                                 SortedExpertTiles &tiles)>
      tables;
};
/// kimi.routed_experts over its tokens sorted by expert: the lowering
/// kimi-lower-to-linalg takes for steps of at least its
/// sorted-experts-min-tokens tokens, with the products as `kernels` when
/// given, else as linalg contractions (decoding MXFP4 where they read it)
/// over blocks of the largest count, which the host reads. Returns the
/// op's replacement.
mlir::Value lowerSortedRoutedExperts(mlir::OpBuilder &b, RoutedExpertsOp op,
                                     const SortedExpertKernels *kernels = nullptr);
/// Defines kimi::kHostReadFn (a load of its i32 buffer, which the GPU
/// target turns into a device-to-host read) in `module` when something
/// there calls it and it is not defined yet.
void defineHostRead(mlir::ModuleOp module);
/// The tokens `op` runs over when static (the product of its leading
/// dimensions), else 0.
int64_t sortedTokens(RoutedExpertsOp op);
/// latent_moe -> linear (down), routed_experts, rms_norm, linear (up): kimi
/// ops, each lowered by its own pattern (or GPU kernel pass).
void populateLatentMoeDecompositionPatterns(mlir::RewritePatternSet &patterns);
/// kda_transition (the sequence split of kimi.kda).
void populateKdaTransitionLoweringPatterns(mlir::RewritePatternSet &patterns);

/// f32 scalar SiTU(g, u) and SiLU(g) * u.
mlir::Value situ(mlir::OpBuilder &b, mlir::Location loc, mlir::Value g,
                 mlir::Value u, double beta, double linearBeta);
mlir::Value siluGlu(mlir::OpBuilder &b, mlir::Location loc, mlir::Value g,
                    mlir::Value u);

} // namespace kimi::lowering

#endif

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
/// One product of the token-sorted routed experts: `rows` [E, cap, K] f32
/// (rows past an expert's count hold anything) times table `which` (0 gate,
/// 1 up, 2 down) of `op`, as [E, cap, out] f32 of which only each expert's
/// first counts[e] rows are read; `counts` is [E] i32.
using SortedExpertProduct = llvm::function_ref<mlir::Value(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Value rows, unsigned which,
    int64_t out, mlir::Value cap, mlir::Value counts)>;
/// The gate and up products of the token-sorted routed experts and their
/// GLU at once: `rows` as for SortedExpertProduct, the result
/// act(gate, up) as [E, cap, I] (f32 or bf16) of which only each expert's
/// first counts[e] rows are read.
using SortedExpertGlu = llvm::function_ref<mlir::Value(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Value rows, mlir::Value cap,
    mlir::Value counts)>;
/// kimi.routed_experts over its tokens sorted by expert: the lowering
/// kimi-lower-to-linalg takes for steps of at least its
/// sorted-experts-min-tokens tokens, with each of the three products built
/// by `product` (null: linalg contractions, decoding MXFP4 where they read
/// it), and gate, up and the activation by `glu` when given (else the two
/// products and an elementwise op). Returns the op's replacement.
mlir::Value lowerSortedRoutedExperts(mlir::OpBuilder &b, RoutedExpertsOp op,
                                     SortedExpertProduct product = nullptr,
                                     SortedExpertGlu glu = nullptr);
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

//===- Patterns.h - kimi -> linalg pattern sets -----------------*- C++ -*-===//

#ifndef KIMI_LOWERING_KIMITOLINALG_PATTERNS_H
#define KIMI_LOWERING_KIMITOLINALG_PATTERNS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

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

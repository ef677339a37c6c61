//===- LatentAttention.h - the absorbed MLA form's two projections -*- C++ -*-===//
//
// The absorbed MLA computation (reference §3) starts by folding q_nope
// through W_uk into the latent space and ends by applying W_uv to the
// softmax-mixed latent. kimi-lower-to-linalg builds the attention between
// them from linalg; kimi-gpu-mla-kernels runs that middle part as generated
// kernels and shares these two ends, so both targets compute them alike.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_KIMITOLINALG_LATENTATTENTION_H
#define KIMI_LOWERING_KIMITOLINALG_LATENTATTENTION_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace kimi::lowering {

/// qa[b, t, h, r] = sum_i q_nope[b, t, h, i] W_uk[h, i, r]: the queries
/// `q : [B, T, H, dn + rope]` in the latent space of
/// `kv_b_proj : [H * (dn + dv), R]` (f32 `[B, T, H, R]`).
mlir::Value absorbLatentQueries(mlir::OpBuilder &b, mlir::Location loc,
                                mlir::Value q, mlir::Value kvb, int64_t rope);

/// out[b, t, h, j] = (sum_r mixed[b, t, h, r] W_uv[h, j, r]) / rowSum[b, h, t]
/// * sigmoid(gate[b, t, h, j]), the division left out when `rowSum` is null
/// (a mix already normalised) and the gate when `gate` is.
mlir::Value expandLatentOutput(mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Value mixed, mlir::Value rowSum,
                               mlir::Value kvb, mlir::Value gate, int64_t nope,
                               mlir::RankedTensorType outType);

} // namespace kimi::lowering

#endif

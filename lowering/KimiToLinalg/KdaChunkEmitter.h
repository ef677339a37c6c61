//===- KdaChunkEmitter.h - IR for one chunk of chunked KDA ------*- C++ -*-===//
//
// Builds the linalg/tensor/arith/math IR of one chunk of Kimi Delta Attention
// in the chunked form of shared/reference/kimi-k3.md §2, for one batch entry
// and one head, on static-shaped f32 tensors. Used by `kimi-lower-kda`.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_KIMITOLINALG_KDACHUNKEMITTER_H
#define KIMI_LOWERING_KIMITOLINALG_KDACHUNKEMITTER_H

#include "dialects/Kimi/KimiAttrs.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

namespace kimi {

/// Operands of one chunk of `n` tokens, all f32 tensors with static shapes.
struct KdaChunkInputs {
  mlir::Value q;     ///< [n, dk]
  mlir::Value k;     ///< [n, dk]
  mlir::Value v;     ///< [n, dv]
  mlir::Value g;     ///< [n, dk] per-step log decay (<= 0)
  mlir::Value beta;  ///< [n]
  mlir::Value state; ///< [dk, dv] state before the chunk
};

/// What one chunk produces.
struct KdaChunkResults {
  mlir::Value out;   ///< [n, dv] of `outElementType`
  mlir::Value state; ///< [dk, dv] f32 state after the chunk
};

/// Emits the chunk at the builder's insertion point. `diag` selects how the
/// diagonal-tile products Akk and Aqk are formed (dense rescaled matmuls or
/// a pairwise log-space contraction); everything else is shared.
KdaChunkResults emitKdaChunk(mlir::OpBuilder &builder, mlir::Location loc,
                             const KdaChunkInputs &in, DiagStrategy diag,
                             double scale, mlir::Type outElementType);

/// Number of factors of the Neumann product (I - N)(I + N^2)(I + N^4)...
/// that inverts I + N for a strictly lower-triangular n x n matrix N:
/// ceil(log2 n) (0 for n <= 1, where the inverse is I).
int64_t neumannFactorCount(int64_t n);

} // namespace kimi

#endif // KIMI_LOWERING_KIMITOLINALG_KDACHUNKEMITTER_H

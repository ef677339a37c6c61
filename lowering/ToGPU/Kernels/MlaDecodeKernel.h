//===- MlaDecodeKernel.h - split-key MLA decode over the latent cache -*- C++ -*-===//
//
// The generated kernels behind kimi-gpu-mla-kernels for decode steps
// (docs/lowering/gpu-model.md, "MLA decode kernels"): the absorbed form's
// attention of few queries against the cached latent rows, split over the
// keys so that every SM reads its share of the cache (flash-decoding), and a
// deterministic combine of the splits.
//
// Every key row [latent (R) | k_pe (dr)] is shared by all heads, so the
// T * H query rows of a sequence are one m16 tensor-core operand per 16
// rows: block (split, row tile, sequence) stages 32 keys at a time in shared
// memory (f32 read, f16 kept), forms their scores against its 16 absorbed
// query rows (mma.sync, f32 accumulation), keeps an online softmax and adds
// P [latent] to its accumulators. It writes its unnormalised partial mix
// with its row max and sum; the combine kernel weights the splits by
// exp2(m_split - m) in split order and divides by the total sum.
//
// Keys: key p of sequence b is cache row p for p < L_b (L_b = lengths[b],
// or the cache's S rows) and, when the step's new rows are passed on their
// own (the model's cache insert or concatenation, which then need not be
// materialised), row p - L_b of `rows` for L_b <= p < L_b + Tr. With K_b
// keys in all, query t of T sees keys p <= K_b - T + t.
//
// Split kernel buffers (flat, row-major, f32 unless said):
//   qa      [B, T, H, R]        queries folded through W_uk
//   q       [B, T, H, dn + dr]  the queries (their k_pe part is read)
//   cache   [B, S, R + dr]
//   rows    [B, Tr, R + dr]     (optional)
//   lengths [B] i32             (optional)
//   acc     [B, splits, P, R]   partial mixes, P = 16 ceil(T H / 16)
//   m, l    [B, splits, P]      partial row max (base 2, scaled) and sum
// Combine: acc, m, l -> mixed [B, T, H, R], normalised.
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_MLADECODEKERNEL_H
#define KIMI_LOWERING_TOGPU_MLADECODEKERNEL_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <string>

namespace kimi::gpu {

struct MlaDecodeShape {
  int64_t heads = 0;
  int64_t nope = 0, rope = 0, latent = 0;
  bool hasRows = false, hasLengths = false;
  double scale = 1.0;
  /// bf16 activations: the queries q, and the cache and its new rows, are
  /// bf16 (widened as they are staged); else f32. The absorbed queries,
  /// partial mixes and the mixture stay f32.
  bool bf16Queries = false, bf16Cache = false;

  int64_t width() const { return latent + rope; }
  int64_t dq() const { return nope + rope; }
};

inline constexpr int64_t kMlaDecodeThreads = 256;
/// Keys per shared-memory tile and query rows per block.
inline constexpr int64_t kMlaDecodeTileKeys = 32;
inline constexpr int64_t kMlaDecodeRows = 16;
/// The combine kernel keeps one weight per split in shared memory.
inline constexpr int64_t kMlaDecodeMaxSplits = 1024;
/// Latent columns per combine block when there are many splits (its 256
/// threads are 16 groups of 16, each group a share of the splits), and
/// when there are at most kMlaDecodeFewSplits (a batch fills the SMs with
/// few splits a sequence: a thread a column, the splits in one trip).
inline constexpr int64_t kMlaDecodeCombineColumns = 16;
inline constexpr int64_t kMlaDecodeCombineWideColumns = 256;
inline constexpr int64_t kMlaDecodeFewSplits = 8;

/// Checks what the generators support; `why` names the field at fault.
llvm::LogicalResult verifyMlaDecodeShape(const MlaDecodeShape &shape,
                                         std::string &why);

/// Emits the split kernel `gpu.func @name`: grid (splits, ceil(T H / 16), B),
/// block 256. Arguments: qa, q, cache, [rows], [lengths], acc, m, l
/// (memref<?x...>), then T, S, [Tr], keys per split, splits (index).
mlir::gpu::GPUFuncOp emitMlaDecodeSplitKernel(mlir::OpBuilder &b,
                                              mlir::Location loc,
                                              mlir::gpu::GPUModuleOp module,
                                              llvm::StringRef name,
                                              const MlaDecodeShape &shape);

/// Emits the combine kernel: grid (ceil(R / columns), T H, B), block 256,
/// `columns` kMlaDecodeCombineColumns or kMlaDecodeCombineWideColumns.
/// Arguments: acc, m, l, mixed (memref<?xf32>), then T H, splits (index).
mlir::gpu::GPUFuncOp emitMlaDecodeCombineKernel(mlir::OpBuilder &b,
                                                mlir::Location loc,
                                                mlir::gpu::GPUModuleOp module,
                                                llvm::StringRef name,
                                                const MlaDecodeShape &shape,
                                                int64_t columns);

} // namespace kimi::gpu

#endif

//===- ExpertProductKernel.h - expert products on tensor cores -*- C++ -*-===//
//
// The products of a step's token-sorted routed experts
// (kimi-gpu-routed-experts-kernels, above its decode kernels' token count:
// prefill chunks and batches of decode tokens): the rows the experts hold,
// back to back by expert and cut into tiles of one expert's rows, times
// each expert's table [E, N, K] as the checkpoint holds it (bf16, or MXFP4
// codes and E8M0 scales), on bf16 tensor cores with f32 accumulation.
// MXFP4 codes are decoded into shared memory tile by tile (exactly: an
// MXFP4 value has two significant bits, so bf16 holds it), never into HBM.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_EXPERTPRODUCTKERNEL_H
#define KIMI_LOWERING_TOGPU_EXPERTPRODUCTKERNEL_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <array>
#include <string>

namespace kimi::gpu {

/// What the kernel is specialised on.
struct ExpertProductSpec {
  int64_t experts = 0, n = 0, k = 0;
  /// bf16 terms each f32 row value is split into before the products: 1
  /// rounds the activations to bf16 (the default products); 3 holds all 24
  /// bits of an f32 significand (hi + mid + lo), so with the exactly
  /// decoded weights the products are as exact as f32 arithmetic
  /// (--gpu-bf16-weight-products=false, the reference configuration).
  int terms = 1;
  /// The rows are bf16 (bf16 activations): read at 2 bytes, one term.
  bool bf16Rows = false;
  /// The tables are bf16 values [E, N, K] (the dense release type), else
  /// MXFP4: codes [E, N, K/2] and E8M0 scales [E, N, K/32].
  bool bf16Tables = false;
  /// Gate and up at once: two tables, and the result is the GLU
  /// act(gate, up) (SiTU with beta and linearBeta, else SiLU), so neither
  /// product is stored.
  bool glu = false, situ = false;
  double beta = 0, linearBeta = 0;
  /// The results are stored as bf16 (else f32).
  bool bf16Out = false;
  /// Row m is row rowToken[m] of the rows buffer (the step's tokens, read
  /// where they are instead of copied into expert order first).
  bool gatherRows = false;
  /// Rows of a tile: 128, or 32 for a step whose experts hold a few rows
  /// each (a batch of decode tokens), where a 128-row tile would spend its
  /// tensor cores on zero rows. A 32-row tile is 128 columns wide.
  int64_t tileM = 128;

  int tables() const { return glu ? 2 : 1; }
  /// Rows and tables reach shared memory by cp.async, as they are, several
  /// stages ahead of the products: bf16 rows with bf16 tables, or with
  /// MXFP4 tables whose k is a multiple of kMxfp4StageDepth (their codes
  /// and scales are decoded from shared memory into the products'
  /// registers). Other rows pass through registers, one stage ahead.
  bool asyncCopies() const {
    return bf16Rows && terms == 1 && (bf16Tables || k % kMxfp4StageDepth == 0);
  }
  /// The k of a cp.async stage: 32 for bf16 tables; 128 for MXFP4 ones
  /// (64 bytes of codes and four scales a table row, the smallest piece of
  /// scales a cp.async copies being 4 bytes).
  static constexpr int64_t kMxfp4StageDepth = 128;
  int64_t stageDepth() const {
    return asyncCopies() && !bf16Tables ? kMxfp4StageDepth : 32;
  }
  /// Columns of a tile (of each table). A 128-row tile of cp.async copies
  /// is 256 columns of products wide (128 of each of gate and up), in
  /// warps of 64 x 64: the fewest shared-memory reads a product (the
  /// tensor cores wait on them at 32 x 32); the register path keeps 64
  /// columns and warps of 32 x 32 (its staging registers leave no room).
  int64_t tileN() const {
    if (tileM == 32)
      return 128;
    return asyncCopies() ? (glu ? 128 : 256) : 64;
  }
  /// Rows of a warp's tile: 64 for the 128-row cp.async tile, else 32.
  int64_t warpRows() const { return tileM == 128 && asyncCopies() ? 64 : 32; }
  /// cp.async stages: later stages' copies in flight while a stage's
  /// products run (an MXFP4 128-row stage is 49 KiB: four fit an SM).
  int64_t asyncStages() const { return tileM == 32 && bf16Tables ? 3 : 4; }
  std::string key() const;
};

/// Empty when the kernel covers `s`, else what it does not support.
std::string verifyExpertProductSpec(const ExpertProductSpec &s);

inline constexpr int64_t kExpertProductThreads = 256;
/// The rows a tile takes for a step of `rows` dispatched rows over
/// `experts` experts: 32 when they average at most 16 an expert.
int64_t chooseExpertProductTileM(int64_t rows, int64_t experts);

/// The dynamic shared memory `s`'s kernel is launched with (bytes; 0 when
/// its tiles are static shared memory).
int64_t expertProductSharedBytes(const ExpertProductSpec &s);

/// `gpu.func @name(rows [R K] f32 or bf16 (gatherRows: [T K] and rowToken
/// [R] i32), per table: its values (bf16
/// [E N K]) or its codes [E N K/2] i8 and scales [E N K/32] i8; the tile
/// table tileExpert, tileStart, tileEnd [tiles] i32, out [R N] f32 or
/// bf16)`, grid (ceil(N / s.tileN()), tiles), 256 threads and
/// expertProductSharedBytes(s) of dynamic shared memory: row tile y is rows
/// tileStart[y] .. tileEnd[y] (at most s.tileM; none past the last tile) of
/// expert tileExpert[y], and out gets those rows (the others are not
/// written).
mlir::gpu::GPUFuncOp emitExpertProductKernel(mlir::OpBuilder &b,
                                             mlir::Location loc,
                                             mlir::gpu::GPUModuleOp module,
                                             llvm::StringRef name,
                                             const ExpertProductSpec &s);

} // namespace kimi::gpu

#endif

//===- SortedExpertTablesKernel.h - a sorted step's tables in one block -*- C++ -*-===//
//
// The bookkeeping of the token-sorted routed experts (LowerMoeOps'
// sortedExperts): each dispatched (token, slot)'s row among its expert's
// rows (back to back by expert, in token order), each row's token, and the
// tiles of one expert's rows that the expert product kernels take. As
// linalg it is about a dozen small kernels (a histogram, scans, ranks,
// tile bounds, and the fills of their outputs), a few microseconds each,
// which a batched decode step pays in every MoE layer; this is one launch
// of one block that takes the slots in rounds of one a thread (the .cpp
// says how), its shared memory sized by the experts, not the slots.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_SORTEDEXPERTTABLESKERNEL_H
#define KIMI_LOWERING_TOGPU_SORTEDEXPERTTABLESKERNEL_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <string>

namespace kimi::gpu {

/// Threads of the kernel's one block.
constexpr int64_t kSortedExpertTablesThreads = 1024;

/// What the kernel is specialised on.
struct SortedExpertTablesSpec {
  /// T k dispatch slots, k a token, E experts.
  int64_t slots = 0, topK = 0, experts = 0;
  /// Rows of a tile, and the tiles the tables hold (at least the tiles
  /// any routing needs: sum_e ceil(count_e / tileRows)).
  int64_t tileRows = 0, tiles = 0;
  /// The router weights are bf16 (else f32); a slot is dispatched when its
  /// weight is nonzero.
  bool bf16Weights = false;

  std::string key() const;
};

/// Why the kernel cannot take `s` (empty when it can).
std::string verifySortedExpertTablesSpec(const SortedExpertTablesSpec &s);
/// Bytes of dynamic shared memory a launch passes.
int64_t sortedExpertTablesSharedBytes(const SortedExpertTablesSpec &s);

/// gpu.func @name(ids [R] i32, weights [R], row [R] i32, token [R] i32,
/// tileExpert [Y] i32, tileStart [Y] i32, tileEnd [Y] i32), R = slots,
/// Y = tiles; one block of kSortedExpertTablesThreads.
///
/// row[i]: the sorted row of dispatched slot i (offsets[e] plus the
/// dispatched slots of its expert e ahead of it), 0 for the others;
/// token[row[i]] = i / k. Tile y belongs to expert tileExpert[y] (E past
/// the last tile) and holds rows tileStart[y] .. tileEnd[y] (0 .. 0 past
/// the last).
mlir::gpu::GPUFuncOp emitSortedExpertTablesKernel(
    mlir::OpBuilder &b, mlir::Location loc, mlir::gpu::GPUModuleOp module,
    llvm::StringRef name, const SortedExpertTablesSpec &s);

} // namespace kimi::gpu

#endif

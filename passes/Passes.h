//===- Passes.h - kimi analyses and transforms ------------------*- C++ -*-===//
//
// Declarations of kimi's passes (generated from Passes.td) and their
// registration with the pass registry (`kimi-opt`).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_PASSES_PASSES_H
#define KIMI_PASSES_PASSES_H

#include "dialects/Kimi/KimiDialect.h"
#include "passes/DecayBoundAnalysis.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include <memory>

namespace kimi {

/// `force` option of kimi-chunk-kda.
enum class DiagForce {
  none,     // "auto": decide from the proof
  dense,    // dense diagonal tiles (warns when nothing is proven)
  pairwise, // log-space pairwise diagonal tiles
};

/// Name of the discardable attribute in which kimi-prove-decay-bounds
/// records the interval of a kimi.kda's `g` (a #kimi.interval).
constexpr llvm::StringLiteral kDecayIntervalAttrName = "kimi.decay_interval";
/// Name of the per-op interval attached by kimi-prove-decay-bounds with
/// `annotate-all`.
constexpr llvm::StringLiteral kIntervalAttrName = "kimi.interval";

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// The partitioning pipeline on an imported model (docs/passes/shard.md):
/// inline, symbol-dce, kimi-shard{grid, strategy}, per function
/// sharding-propagation{traversal=forward} and shard-partition, then
/// kimi-localize-weights and canonicalize. The context needs
/// registerKimiShardingModels (passes/ShardingModels.h).
void buildPartitionPipeline(mlir::OpPassManager &pm,
                            llvm::ArrayRef<int64_t> grid,
                            llvm::ArrayRef<std::string> strategies);

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace kimi

#endif // KIMI_PASSES_PASSES_H

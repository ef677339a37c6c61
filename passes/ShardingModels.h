//===- ShardingModels.h - ShardingInterface for kimi ops --------*- C++ -*-===//
//
// External models of the upstream `shard::ShardingInterface` for every kimi
// op, for `kimi.weight_ref`, and for the tensor reshapes and arith
// elementwise ops the importer emits. With them `sharding-propagation` and
// `shard-partition` work on kimi IR. Rules and rationale: docs/passes/shard.md.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_PASSES_SHARDINGMODELS_H
#define KIMI_PASSES_SHARDINGMODELS_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace kimi {

/// Registers the external models (and the shard dialect they produce), plus
/// the func.call / func.return sharding models and the func inliner.
void registerKimiShardingModels(mlir::DialectRegistry &registry);

} // namespace kimi

#endif // KIMI_PASSES_SHARDINGMODELS_H

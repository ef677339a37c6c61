//===- Pipelines.h - the model lowering pipelines ---------------*- C++ -*-===//
//
// The stages a model goes through after its front pipeline (the decay proof
// and chunking, and on the GPU target the kernel passes), each a pass
// pipeline registered with kimi-opt so that any stage runs and is tested on
// its own (docs/lowering/pipelines.md):
//
//   kimi-to-linalg-pipeline   kimi ops -> linalg/tensor, weights as globals,
//                             collectives as runtime calls
//   kimi-to-memref-pipeline   the above, then bufferized memrefs with
//                             ownership-based deallocation
//   kimi-cpu-to-llvm-pipeline bufferized memrefs -> the LLVM dialect (CPU)
//
// kimi-compile builds the same pipelines from the same option structs.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_PIPELINES_H
#define KIMI_LOWERING_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace kimi {

struct KimiToMemRefOptions
    : mlir::PassPipelineOptions<KimiToMemRefOptions> {
  Option<int64_t> sortedExpertsMinTokens{
      *this, "sorted-experts-min-tokens",
      llvm::cl::desc("kimi-lower-to-linalg's option: steps of at least this "
                     "many tokens run routed experts token-sorted (0: "
                     "gathers)"),
      llvm::cl::init(0)};
  Option<bool> fuseElementwise{
      *this, "fuse-elementwise",
      llvm::cl::desc("Run kimi-gpu-fuse-elementwise on linalg over tensors "
                     "(the GPU target)"),
      llvm::cl::init(false)};
  Option<bool> splatsAsFills{
      *this, "splats-as-fills",
      llvm::cl::desc("kimi-prepare-bufferization's option (the GPU target)"),
      llvm::cl::init(false)};
  Option<bool> emptyPerWriter{
      *this, "empty-per-writer",
      llvm::cl::desc("kimi-prepare-bufferization's option (the GPU target)"),
      llvm::cl::init(false)};
};

/// kimi IR (after the front pipeline) -> linalg on tensors: KDA and the
/// other kimi ops lowered, collectives as runtime calls, elementwise ops as
/// linalg, weights as runtime-filled globals; fails on any kimi op left.
void buildKimiToLinalgPipeline(mlir::OpPassManager &pm,
                               const KimiToMemRefOptions &options);

/// Linalg on tensors -> memrefs: (optionally) elementwise fusion,
/// kimi-prepare-bufferization, kimi-bufferize, ownership-based deallocation
/// and copies as linalg.copy.
void buildLinalgToMemRefPipeline(mlir::OpPassManager &pm,
                                 const KimiToMemRefOptions &options);

/// buildKimiToLinalgPipeline, then buildLinalgToMemRefPipeline.
void buildKimiToMemRefPipeline(mlir::OpPassManager &pm,
                               const KimiToMemRefOptions &options);

/// Bufferized memrefs -> the LLVM dialect for the host (the CPU target).
void buildCpuToLLVMPipeline(mlir::OpPassManager &pm);

/// Registers the pipelines above with their names (kimi-opt).
void registerKimiPipelines();

} // namespace kimi

#endif // KIMI_LOWERING_PIPELINES_H

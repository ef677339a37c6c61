//===- MapLoopsToGpu.cpp - scf.parallel -> 1-D block/thread mapping -------===//
//
// kimi-gpu-map-loops: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Dialect/GPU/Transforms/ParallelLoopMapper.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/IR/PatternMatch.h"

#include <numeric>

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUMAPLOOPS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {

SmallVector<scf::ParallelOp> outermostLoops(func::FuncOp fn) {
  SmallVector<scf::ParallelOp> loops;
  fn.walk([&](scf::ParallelOp loop) {
    if (!loop->getParentOfType<scf::ParallelOp>())
      loops.push_back(loop);
  });
  return loops;
}

LogicalResult map(scf::ParallelOp loop, gpu::Processor processor) {
  MLIRContext *ctx = loop.getContext();
  AffineMap id = AffineMap::getMultiDimIdentityMap(1, ctx);
  SmallVector<gpu::ParallelLoopDimMappingAttr> dims(
      loop.getNumLoops(),
      gpu::ParallelLoopDimMappingAttr::get(ctx, gpu::Processor::Sequential, id,
                                           id));
  if (!dims.empty())
    dims[0] = gpu::ParallelLoopDimMappingAttr::get(ctx, processor, id, id);
  return gpu::setMappingAttr(loop, dims);
}

struct KimiGpuMapLoops : kimi::impl::KimiGpuMapLoopsBase<KimiGpuMapLoops> {
  using Base::Base;
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn->getParentOfType<gpu::GPUModuleOp>())
      return;
    if (blockSize < 1 || blockSize > 1024) {
      fn.emitError() << "kimi-gpu-map-loops: block-size " << blockSize
                     << " is outside 1..1024";
      return signalPassFailure();
    }
    IRRewriter rewriter(&getContext());
    // 1. One linear dimension per loop nest.
    for (scf::ParallelOp loop : outermostLoops(fn)) {
      if (loop.getNumLoops() < 2)
        continue;
      std::vector<unsigned> all(loop.getNumLoops());
      std::iota(all.begin(), all.end(), 0u);
      rewriter.setInsertionPoint(loop);
      collapseParallelLoops(rewriter, loop, {all});
    }
    // 2. Blocks of `blockSize` threads; 3. the mapping.
    for (scf::ParallelOp loop : outermostLoops(fn)) {
      auto [blocks, threads] =
          scf::tileParallelLoop(loop, {blockSize}, /*noMinMaxBounds=*/true);
      if (failed(map(blocks, gpu::Processor::BlockX)) ||
          failed(map(threads, gpu::Processor::ThreadX)))
        return signalPassFailure();
      // Deeper parallel loops (none from linalg today) run inside a thread.
      threads.getBody()->walk([&](scf::ParallelOp inner) {
        (void)map(inner, gpu::Processor::Sequential);
      });
    }
  }
};
} // namespace

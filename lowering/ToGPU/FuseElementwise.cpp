//===- FuseElementwise.cpp - elementwise chains into one kernel each ------===//
//
// kimi-gpu-fuse-elementwise: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUFUSEELEMENTWISE
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
/// A consumer the producer may be inlined into: a generic that is not a
/// matrix product (those stay plain contractions for kimi-gpu-gemm-calls).
bool acceptsProducers(Operation *op) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  return generic && !linalg::isaContractionOpInterface(
                        cast<linalg::LinalgOp>(generic.getOperation()));
}

struct KimiGpuFuseElementwise
    : kimi::impl::KimiGpuFuseElementwiseBase<KimiGpuFuseElementwise> {
  using Base::Base;

  void runOnOperation() override {
    // Fuse only when every user of the producer's results takes it, so the
    // producer (its kernel and its buffer) goes away; it is recomputed in
    // each consumer, which costs arithmetic, not memory traffic.
    linalg::ControlFusionFn control = [](OpOperand *fused) {
      Operation *producer = fused->get().getDefiningOp();
      if (!producer || !acceptsProducers(fused->getOwner()))
        return false;
      for (Operation *user : producer->getUsers())
        if (!acceptsProducers(user))
          return false;
      return true;
    };
    RewritePatternSet patterns(&getContext());
    linalg::populateElementwiseOpsFusionPatterns(patterns, control);
    linalg::GenericOp::getCanonicalizationPatterns(patterns, &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace

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

/// How many times the consumer reads each element of `operand`: the product
/// of the extents of the loops its indexing map leaves out (a gathered
/// expert's activations are read once per output column); INT64_MAX when
/// one of them is dynamic.
int64_t readsPerElement(OpOperand *operand) {
  auto consumer = cast<linalg::LinalgOp>(operand->getOwner());
  AffineMap map = consumer.getMatchingIndexingMap(operand);
  SmallVector<int64_t> ranges = consumer.getStaticLoopRanges();
  int64_t reads = 1;
  for (unsigned d = 0; d < ranges.size(); ++d) {
    if (map.isFunctionOfDim(d))
      continue;
    if (ShapedType::isDynamic(ranges[d]))
      return INT64_MAX;
    reads = ranges[d] > INT64_MAX / reads ? INT64_MAX : reads * ranges[d];
  }
  return reads;
}

/// Above this many reads per element, a producer is computed once into a
/// buffer rather than again by every reader.
constexpr int64_t kMaxRecomputation = 16;

struct KimiGpuFuseElementwise
    : kimi::impl::KimiGpuFuseElementwiseBase<KimiGpuFuseElementwise> {
  using Base::Base;

  void runOnOperation() override {
    // Fuse only when every user of the producer's results takes it, so the
    // producer (its kernel and its buffer) goes away; it is recomputed in
    // each consumer, which costs arithmetic, not memory traffic, unless the
    // consumer reads each element many times: a decode step's expert down
    // projection read the SiTU of each of its 768 inputs for every one of
    // its 1,024 outputs, and spent 33 us on tanh and exp for a 25 MB read.
    linalg::ControlFusionFn control = [](OpOperand *fused) {
      Operation *producer = fused->get().getDefiningOp();
      if (!producer || !acceptsProducers(fused->getOwner()) ||
          readsPerElement(fused) > kMaxRecomputation)
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

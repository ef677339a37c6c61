//===- ProveDecayBounds.cpp - kimi-prove-decay-bounds ---------------------===//
//
// Runs the decay-bound analysis and records, on every kimi.kda, the interval
// proven for its log decay `g` (see Passes.td and docs/passes/decay-bound.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/Kimi/KimiOps.h"
#include "passes/DecayBoundAnalysis.h"

#include <cmath>

namespace kimi {
#define GEN_PASS_DEF_KIMIPROVEDECAYBOUNDS
#include "passes/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

/// The #kimi.interval of a (initialized) FloatInterval.
static IntervalAttr toAttr(MLIRContext *ctx, const FloatInterval &range) {
  std::optional<double> lower, upper;
  if (range.isLowerBounded())
    lower = range.lower();
  if (range.isUpperBounded())
    upper = range.upper();
  return IntervalAttr::get(ctx, lower, range.isLowerOpen(), upper,
                           range.isUpperOpen());
}

namespace {
struct ProveDecayBoundsPass
    : kimi::impl::KimiProveDecayBoundsBase<ProveDecayBoundsPass> {
  using KimiProveDecayBoundsBase::KimiProveDecayBoundsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    DecayBounds bounds(module, rounding);
    if (!bounds.succeeded()) {
      module.emitError("kimi-prove-decay-bounds: the decay-bound analysis "
                       "did not reach a fixpoint");
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();

    if (annotateAll)
      module.walk([&](Operation *op) {
        if (op->getNumResults() != 1 ||
            !hasFloatElements(op->getResult(0).getType()))
          return;
        FloatInterval range = bounds.getInterval(op->getResult(0));
        if (!range.isUninitialized())
          op->setAttr(kIntervalAttrName, toAttr(ctx, range));
      });

    module.walk([&](KdaOp kda) {
      FloatInterval range = bounds.getInterval(kda.getG());
      if (range.isUninitialized()) {
        if (remarks)
          kda.emitRemark("'g' of kimi.kda was not reached by the decay-bound "
                         "analysis (dead code); no interval recorded");
        return;
      }
      kda->setAttr(kDecayIntervalAttrName, toAttr(ctx, range));
      if (remarks)
        kda.emitRemark() << "'g' of kimi.kda lies in " << range.str()
                         << " (from " << describeValue(kda.getG()) << " at "
                         << formatLocation(valueLocation(kda.getG())) << ")";
    });
  }
};
} // namespace

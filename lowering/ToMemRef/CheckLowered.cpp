//===- CheckLowered.cpp - no kimi op past the lowering to linalg ----------===//

#include "dialects/Kimi/KimiDialect.h"
#include "lowering/Passes.h"

namespace kimi {
#define GEN_PASS_DEF_KIMICHECKLOWERED
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
struct KimiCheckLowered : kimi::impl::KimiCheckLoweredBase<KimiCheckLowered> {
  void runOnOperation() override {
    WalkResult r = getOperation().walk([](Operation *op) {
      if (!isa<kimi::KimiDialect>(op->getDialect()))
        return WalkResult::advance();
      op->emitError() << "'" << op->getName()
                      << "' was not lowered (is the decay proof in the front "
                         "pipeline?)";
      return WalkResult::interrupt();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace

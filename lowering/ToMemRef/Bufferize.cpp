//===- Bufferize.cpp - One-Shot Bufferize as the runtime calls a model ----===//

#include "lowering/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotModuleBufferize.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIBUFFERIZE
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
struct KimiBufferize : kimi::impl::KimiBufferizeBase<KimiBufferize> {
  void runOnOperation() override {
    bufferization::OneShotBufferizationOptions options;
    options.bufferizeFunctionBoundaries = true;
    options.allowReturnAllocsFromLoops = true;
    options.setFunctionBoundaryTypeConversion(
        bufferization::LayoutMapOption::IdentityLayoutMap);
    options.memCpyFn = [](OpBuilder &b, Location loc, Value from,
                          Value to) -> LogicalResult {
      linalg::CopyOp::create(b, loc, from, to);
      return success();
    };
    bufferization::BufferizationState state;
    if (failed(bufferization::runOneShotModuleBufferize(getOperation(),
                                                        options, state)))
      signalPassFailure();
  }
};
} // namespace

//===- LowerToLinalg.cpp - the kimi-lower-to-linalg pass ------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "lowering/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kimi {
#define GEN_PASS_DEF_KIMILOWERTOLINALG
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
struct KimiLowerToLinalg
    : kimi::impl::KimiLowerToLinalgBase<KimiLowerToLinalg> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    kimi::lowering::populateTokenwiseLoweringPatterns(patterns);
    kimi::lowering::populateAttentionLoweringPatterns(patterns);
    kimi::lowering::populateMoeLoweringPatterns(patterns,
                                                sortedExpertsMinTokens);
    kimi::lowering::populateKdaTransitionLoweringPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) {
      getOperation()->emitError("kimi-lower-to-linalg did not converge");
      return signalPassFailure();
    }
    Operation *top = getOperation();
    auto module = dyn_cast<ModuleOp>(top);
    kimi::lowering::defineHostRead(module ? module
                                          : top->getParentOfType<ModuleOp>());
    // Whatever is left could not be lowered; say which op and why.
    WalkResult result = getOperation()->walk([](Operation *op) {
      if (!isa<kimi::KimiDialect>(op->getDialect()) ||
          isa<kimi::WeightOp, kimi::WeightRefOp, kimi::KdaOp>(op))
        return WalkResult::advance();
      op->emitError() << "kimi-lower-to-linalg cannot lower this op (CPU "
                         "lowering needs dense f32/bf16/f16 weights)";
      return WalkResult::interrupt();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace

void kimi::lowering::defineHostRead(ModuleOp module) {
  if (!module || module.lookupSymbol(kimi::kHostReadFn))
    return;
  bool called = false;
  module.walk([&](func::CallOp call) {
    called |= call.getCallee() == kimi::kHostReadFn;
  });
  if (!called)
    return;
  OpBuilder b(module.getContext());
  b.setInsertionPointToEnd(module.getBody());
  Location loc = module.getLoc();
  auto buffer = MemRefType::get({}, b.getI32Type());
  auto fn = func::FuncOp::create(b, loc, kimi::kHostReadFn,
                                 b.getFunctionType({buffer}, {b.getI32Type()}));
  fn.setPrivate();
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  Value value = memref::LoadOp::create(b, loc, body->getArgument(0), ValueRange{});
  func::ReturnOp::create(b, loc, value);
}

//===- DecomposeLatentMoe.cpp - kimi.latent_moe -> its kimi parts ---------===//
//
// kimi-decompose-latent-moe: see lowering/Passes.td. The same pattern is
// part of kimi-lower-to-linalg, which decomposes whatever latent MoE is
// left.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/LinalgBuilders.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "lowering/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIDECOMPOSELATENTMOE
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;
using namespace kimi::lowering;

namespace {

/// latent_moe = up(norm(routed_experts(down(x)))).
struct LatentMoeDecomposition : OpRewritePattern<LatentMoeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LatentMoeOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value x = op.getX();
    RankedTensorType xType = typeOf(x);
    int64_t width = typeOf(op.getDownLatent()).getDimSize(0);
    SmallVector<int64_t> shape(xType.getShape());
    shape.back() = width;
    auto latentType = RankedTensorType::get(
        shape, op.getOut().getType().getElementType());
    Value z = LinearOp::create(rewriter, loc, latentType, x, op.getDownLatent(),
                               Value());
    Value r = RoutedExpertsOp::create(
        rewriter, loc, latentType, z, op.getWeights(), op.getIndices(),
        op.getGateProj(), op.getUpProj(), op.getDownProj(), op.getScales(),
        op.getActivationAttr(), op.getBetaAttr(), op.getLinearBetaAttr());
    if (Value norm = op.getNorm())
      r = RmsNormOp::create(rewriter, loc, latentType, r, norm,
                            op.getEpsAttr());
    rewriter.replaceOpWithNewOp<LinearOp>(op, op.getOut().getType(), r,
                                          op.getUpLatent(), Value());
    return success();
  }
};

struct KimiDecomposeLatentMoe
    : kimi::impl::KimiDecomposeLatentMoeBase<KimiDecomposeLatentMoe> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateLatentMoeDecompositionPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void kimi::lowering::populateLatentMoeDecompositionPatterns(
    RewritePatternSet &patterns) {
  patterns.add<LatentMoeDecomposition>(patterns.getContext());
}

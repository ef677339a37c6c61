//===- LowerTokenwiseOps.cpp - token-wise kimi ops -> linalg --------------===//
//
// embed, linear, the norms, sigmoid, situ_glu, short_conv and kda_gate as
// linalg.generic ops on tensors, computing in f32.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/LinalgBuilders.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace kimi;
using namespace kimi::lowering;
using IT = utils::IteratorType;

namespace {


LogicalResult rejectMicroscaled(PatternRewriter &rewriter, Operation *op,
                                Value weight) {
  Type et = typeOf(weight).getElementType();
  if (isa<Float4E2M1FNType, Float8E4M3FNType>(et))
    return rewriter.notifyMatchFailure(
        op, "microscaled weights are read by the routed-expert loops only; "
            "import dense weights for linear layers");
  return success();
}

/// sum over the last dim of f(x...) -> tensor of the leading dims (f32).
Value reduceLast(OpBuilder &b, Location loc, ValueRange inputs,
                 ArrayRef<AffineMap> inputMaps, unsigned numDims,
                 ArrayRef<OpFoldResult> outSizes, BodyFn term) {
  Value init = filled(b, loc, outSizes, b.getF32Type(), 0.0);
  SmallVector<AffineMap> maps(inputMaps);
  maps.push_back(prefixMap(b.getContext(), numDims, numDims - 1));
  SmallVector<IT> iterators(numDims - 1, IT::parallel);
  iterators.push_back(IT::reduction);
  return generic(b, loc, init, inputs, maps, iterators,
                 [&](OpBuilder &nb, Location nloc, ValueRange args) {
                   Value t = term(nb, nloc, args.drop_back());
                   return arith::AddFOp::create(nb, nloc, args.back(), t);
                 });
}

SmallVector<OpFoldResult> leadingSizes(OpBuilder &b, Location loc, Value v) {
  SmallVector<OpFoldResult> sizes = sizesOf(b, loc, v);
  sizes.pop_back();
  return sizes;
}

/// RMS statistics of `x` over its last dim: rsqrt(mean(x^2) + eps), or with
/// `mean = false` rsqrt(sum(x^2) + eps).
Value inverseNorm(OpBuilder &b, Location loc, Value x, double eps, bool mean) {
  unsigned rank = typeOf(x).getRank();
  int64_t width = typeOf(x).getShape().back();
  Value ss = reduceLast(b, loc, x, {b.getMultiDimIdentityMap(rank)}, rank,
                        leadingSizes(b, loc, x),
                        [](OpBuilder &nb, Location nloc, ValueRange a) {
                          return arith::MulFOp::create(nb, nloc, a[0], a[0]);
                        });
  return elementwise(
      b, loc, typeOf(ss), ss, [&](OpBuilder &nb, Location nloc, ValueRange a) {
        Value v = a[0];
        if (mean)
          v = arith::DivFOp::create(nb, nloc, v,
                                    constF32(nb, nloc, double(width)));
        v = arith::AddFOp::create(nb, nloc, v, constF32(nb, nloc, eps));
        return math::RsqrtOp::create(nb, nloc, v);
      });
}

struct EmbedLowering : OpRewritePattern<EmbedOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(EmbedOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType outType = op.getOut().getType();
    unsigned rank = outType.getRank();
    SmallVector<OpFoldResult> sizes = sizesOf(rewriter, loc, op.getIds());
    sizes.push_back(rewriter.getIndexAttr(outType.getShape().back()));
    Value init = tensor::EmptyOp::create(rewriter, loc, sizes,
                                         outType.getElementType());
    Value table = op.getTable();
    Value result = generic(
        rewriter, loc, init, op.getIds(),
        {prefixMap(getContext(), rank, rank - 1),
         rewriter.getMultiDimIdentityMap(rank)},
        SmallVector<IT>(rank, IT::parallel),
        [&](OpBuilder &b, Location l, ValueRange args) {
          Value row = arith::IndexCastOp::create(b, l, b.getIndexType(),
                                                 args[0]);
          Value col = linalg::IndexOp::create(b, l, rank - 1);
          Value v = tensor::ExtractOp::create(b, l, table, ValueRange{row, col});
          return toF32(b, l, v);
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// out[..., n] = sum_k x[..., k] W[n, k]
struct LinearLowering : OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LinearOp op,
                                PatternRewriter &rewriter) const override {
    if (failed(rejectMicroscaled(rewriter, op, op.getWeight())))
      return failure();
    Location loc = op.getLoc();
    Value x = op.getX();
    unsigned rank = typeOf(x).getRank(); // loops: leading..., n, k
    unsigned numDims = rank + 1;
    SmallVector<OpFoldResult> sizes = leadingSizes(rewriter, loc, x);
    sizes.push_back(rewriter.getIndexAttr(typeOf(op.getWeight()).getDimSize(0)));
    Value init = filled(rewriter, loc, sizes,
                        op.getOut().getType().getElementType(), 0.0);
    SmallVector<unsigned> xDims, outDims;
    for (unsigned i = 0; i + 1 < rank; ++i)
      xDims.push_back(i);
    outDims = xDims;
    xDims.push_back(rank);     // k
    outDims.push_back(rank - 1); // n
    MLIRContext *ctx = getContext();
    SmallVector<IT> iterators(rank, IT::parallel);
    iterators.push_back(IT::reduction);
    Value result = generic(
        rewriter, loc, init, {x, op.getWeight()},
        {dimsMap(ctx, numDims, xDims), dimsMap(ctx, numDims, {rank - 1, rank}),
         dimsMap(ctx, numDims, outDims)},
        iterators, [](OpBuilder &b, Location l, ValueRange a) {
          return arith::AddFOp::create(
              b, l, a[2], arith::MulFOp::create(b, l, a[0], a[1]));
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// out = x * inv(x) [* weight] [* sigmoid(gate)] over the last dim, where
/// inv is rsqrt(mean(x^2) + eps) (RMS) or rsqrt(sum(x^2) + eps) (L2). The
/// one shape shared by rms_norm, gated_rms_norm and l2_norm.
Value normalize(OpBuilder &b, Location loc, Value x, double eps, bool mean,
                Value weight, Value gate, Type outElement) {
  MLIRContext *ctx = b.getContext();
  unsigned rank = typeOf(x).getRank();
  AffineMap id = b.getMultiDimIdentityMap(rank);
  SmallVector<Value> inputs = {x, inverseNorm(b, loc, x, eps, mean)};
  SmallVector<AffineMap> maps = {id, prefixMap(ctx, rank, rank - 1)};
  if (weight) {
    inputs.push_back(weight);
    maps.push_back(dimsMap(ctx, rank, {rank - 1}));
  }
  if (gate) {
    inputs.push_back(gate);
    maps.push_back(id);
  }
  maps.push_back(id);
  Value init = tensor::EmptyOp::create(b, loc, sizesOf(b, loc, x), outElement);
  return generic(b, loc, init, inputs, maps, SmallVector<IT>(rank, IT::parallel),
                 [&](OpBuilder &nb, Location l, ValueRange a) {
                   Value v = arith::MulFOp::create(nb, l, a[0], a[1]);
                   unsigned next = 2;
                   if (weight)
                     v = arith::MulFOp::create(nb, l, v, a[next++]);
                   if (gate)
                     v = arith::MulFOp::create(nb, l, v,
                                               sigmoid(nb, l, a[next++]));
                   return v;
                 });
}

struct RmsNormLowering : OpRewritePattern<RmsNormOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RmsNormOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, normalize(rewriter, op.getLoc(), op.getX(),
                      op.getEps().convertToDouble(), /*mean=*/true,
                      op.getWeight(), Value(),
                      op.getOut().getType().getElementType()));
    return success();
  }
};

struct GatedRmsNormLowering : OpRewritePattern<GatedRmsNormOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GatedRmsNormOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, normalize(rewriter, op.getLoc(), op.getX(),
                      op.getEps().convertToDouble(), /*mean=*/true,
                      op.getWeight(), op.getGate(),
                      op.getOut().getType().getElementType()));
    return success();
  }
};

struct L2NormLowering : OpRewritePattern<L2NormOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(L2NormOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, normalize(rewriter, op.getLoc(), op.getX(),
                      op.getEps().convertToDouble(), /*mean=*/false, Value(),
                      Value(), op.getOut().getType().getElementType()));
    return success();
  }
};

struct SigmoidLowering : OpRewritePattern<SigmoidOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SigmoidOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, elementwise(rewriter, op.getLoc(), op.getOut().getType(),
                        op.getX(), [](OpBuilder &b, Location l, ValueRange a) {
                          return sigmoid(b, l, a[0]);
                        }));
    return success();
  }
};

} // namespace

Value kimi::lowering::situ(OpBuilder &b, Location loc, Value g, Value u,
                           double beta, double linearBeta) {
  Value bt = constF32(b, loc, beta), lb = constF32(b, loc, linearBeta);
  Value left = arith::MulFOp::create(
      b, loc,
      arith::MulFOp::create(
          b, loc, bt,
          math::TanhOp::create(b, loc, arith::DivFOp::create(b, loc, g, bt))),
      sigmoid(b, loc, g));
  Value right = arith::MulFOp::create(
      b, loc, lb,
      math::TanhOp::create(b, loc, arith::DivFOp::create(b, loc, u, lb)));
  return arith::MulFOp::create(b, loc, left, right);
}

Value kimi::lowering::siluGlu(OpBuilder &b, Location loc, Value g, Value u) {
  return arith::MulFOp::create(
      b, loc, arith::MulFOp::create(b, loc, g, sigmoid(b, loc, g)), u);
}

namespace {

struct SituGluLowering : OpRewritePattern<SituGluOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SituGluOp op,
                                PatternRewriter &rewriter) const override {
    double beta = op.getBeta().convertToDouble();
    double linearBeta = op.getLinearBeta().convertToDouble();
    rewriter.replaceOp(
        op, elementwise(rewriter, op.getLoc(), op.getOut().getType(),
                        {op.getGate(), op.getUp()},
                        [&](OpBuilder &b, Location l, ValueRange a) {
                          return situ(b, l, a[0], a[1], beta, linearBeta);
                        }));
    return success();
  }
};

/// y[b,t,c] = sum_j w[c,0,j] ext[b,t+j,c] with ext = state ++ x.
struct ShortConvLowering : OpRewritePattern<ShortConvOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ShortConvOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value x = op.getX();
    RankedTensorType xType = typeOf(x);
    RankedTensorType stateType = op.getFinalState().getType();
    int64_t taps = typeOf(op.getWeight()).getDimSize(2);
    Type f32 = rewriter.getF32Type();
    Value xf = x;
    if (xType.getElementType() != f32)
      xf = elementwise(rewriter, loc, xType.clone(f32), x,
                       [](OpBuilder &, Location, ValueRange a) { return a[0]; });
    Value state = op.getState();
    if (!state)
      state = filled(rewriter, loc,
                     {rewriter.getIndexAttr(xType.getDimSize(0)),
                      rewriter.getIndexAttr(taps - 1),
                      rewriter.getIndexAttr(xType.getDimSize(2))},
                     f32, 0.0);
    Value ext = tensor::ConcatOp::create(rewriter, loc, 1,
                                         ValueRange{state, xf});
    MLIRContext *ctx = getContext();
    AffineExpr d0 = getAffineDimExpr(0, ctx), d1 = getAffineDimExpr(1, ctx),
               d2 = getAffineDimExpr(2, ctx), d3 = getAffineDimExpr(3, ctx);
    Value init = filled(rewriter, loc, sizesOf(rewriter, loc, x), f32, 0.0);
    Value conv = generic(
        rewriter, loc, init, {ext, op.getWeight()},
        {AffineMap::get(4, 0, {d0, d1 + d3, d2}, ctx),
         AffineMap::get(4, 0, {d2, getAffineConstantExpr(0, ctx), d3}, ctx),
         dimsMap(ctx, 4, {0, 1, 2})},
        {IT::parallel, IT::parallel, IT::parallel, IT::reduction},
        [](OpBuilder &b, Location l, ValueRange a) {
          return arith::AddFOp::create(b, l, a[2],
                                       arith::MulFOp::create(b, l, a[0], a[1]));
        });
    bool silu = op.getSilu();
    Value out = elementwise(rewriter, loc, op.getOut().getType(), conv,
                            [&](OpBuilder &b, Location l, ValueRange a) {
                              return silu ? arith::MulFOp::create(
                                                b, l, a[0], sigmoid(b, l, a[0]))
                                                .getResult()
                                          : a[0];
                            });
    // The last K-1 inputs of state ++ x.
    SmallVector<OpFoldResult> offsets = {rewriter.getIndexAttr(0),
                                         sizesOf(rewriter, loc, x)[1],
                                         rewriter.getIndexAttr(0)};
    SmallVector<OpFoldResult> sizes = {
        rewriter.getIndexAttr(stateType.getDimSize(0)),
        rewriter.getIndexAttr(taps - 1),
        rewriter.getIndexAttr(stateType.getDimSize(2))};
    SmallVector<OpFoldResult> strides(3, rewriter.getIndexAttr(1));
    Value finalState = tensor::ExtractSliceOp::create(
        rewriter, loc, stateType, ext, offsets, sizes, strides);
    rewriter.replaceOp(op, {out, finalState});
    return success();
  }
};

struct KdaGateLowering : OpRewritePattern<KdaGateOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(KdaGateOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    bool bounded = op.getForm() == GateForm::lower_bound;
    double lower = bounded ? op.getLowerAttr().getValueAsDouble() : 0.0;
    Value init = tensor::EmptyOp::create(
        rewriter, loc, sizesOf(rewriter, loc, op.getZ()),
        op.getG().getType().getElementType());
    Value result = generic(
        rewriter, loc, init, {op.getZ(), op.getALog(), op.getDtBias()},
        {rewriter.getMultiDimIdentityMap(4), dimsMap(ctx, 4, {2}),
         dimsMap(ctx, 4, {2, 3}), rewriter.getMultiDimIdentityMap(4)},
        SmallVector<IT>(4, IT::parallel),
        [&](OpBuilder &b, Location l, ValueRange a) -> Value {
          Value x = arith::AddFOp::create(b, l, a[0], a[2]);
          Value rate = math::ExpOp::create(b, l, a[1]);
          if (bounded)
            return arith::MulFOp::create(
                b, l, constF32(b, l, lower),
                sigmoid(b, l, arith::MulFOp::create(b, l, rate, x)));
          // softplus(x) = max(x, 0) + log1p(exp(-|x|)), stable for any x.
          Value zero = constF32(b, l, 0.0);
          Value relu = arith::MaximumFOp::create(b, l, x, zero);
          Value negAbs =
              arith::NegFOp::create(b, l, math::AbsFOp::create(b, l, x));
          Value sp = arith::AddFOp::create(
              b, l, relu,
              math::Log1pOp::create(b, l, math::ExpOp::create(b, l, negAbs)));
          return arith::NegFOp::create(b, l,
                                       arith::MulFOp::create(b, l, rate, sp));
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

} // namespace

void kimi::lowering::populateTokenwiseLoweringPatterns(
    RewritePatternSet &patterns) {
  patterns.add<EmbedLowering, LinearLowering, RmsNormLowering,
               GatedRmsNormLowering, L2NormLowering, SigmoidLowering,
               SituGluLowering, ShortConvLowering, KdaGateLowering>(
      patterns.getContext());
}

//===- LowerMoeOps.cpp - router and experts -> linalg + scf ---------------===//
//
// The router's scores are a linalg contraction; top-k selection ranks every
// expert against all others (ties to the lower index) and picks ranks
// 0..k-1, all as linalg contractions. Routed experts gather each selected
// expert's rows inside the contractions (reference §5). Neither needs host
// code that reads tensor elements, so the GPU target maps them to kernels.
// kimi.latent_moe is first decomposed into linear / routed_experts /
// rms_norm / linear, which the other patterns then lower.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/LinalgBuilders.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include <limits>

using namespace mlir;
using namespace kimi;
using namespace kimi::lowering;
using IT = utils::IteratorType;

namespace {


Value cIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// (max value, its first index) of a 1-D f32 tensor.
std::pair<Value, Value> argmax(OpBuilder &b, Location loc, Value v) {
  Value n = getValueOrCreateConstantIndexOp(b, loc, sizesOf(b, loc, v)[0]);
  Value negInf = constF32(b, loc, -std::numeric_limits<double>::infinity());
  auto loop = scf::ForOp::create(
      b, loc, cIndex(b, loc, 0), n, cIndex(b, loc, 1),
      ValueRange{negInf, cIndex(b, loc, 0)},
      [&](OpBuilder &nb, Location l, Value e, ValueRange iter) {
        Value x = tensor::ExtractOp::create(nb, l, v, e);
        Value greater =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT, x, iter[0]);
        Value best = arith::SelectOp::create(nb, l, greater, x, iter[0]);
        Value at = arith::SelectOp::create(nb, l, greater, e, iter[1]);
        scf::YieldOp::create(nb, l, ValueRange{best, at});
      });
  return {loop.getResult(0), loop.getResult(1)};
}

struct RouterLowering : OpRewritePattern<RouterOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(RouterOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Type f32 = rewriter.getF32Type();
    OpBuilder &b = rewriter;
    Value x = collapseLeading(b, loc, op.getX());
    int64_t experts = typeOf(op.getWeight()).getDimSize(0);
    int64_t k = op.getTopK();
    OpFoldResult tokens = sizesOf(b, loc, x)[0];

    // s = sigmoid(x w^T), biased = s + bias.
    Value logits = generic(
        b, loc, filled(b, loc, {tokens, b.getIndexAttr(experts)}, f32, 0),
        {x, op.getWeight()},
        {dimsMap(ctx, 3, {0, 2}), dimsMap(ctx, 3, {1, 2}),
         dimsMap(ctx, 3, {0, 1})},
        {IT::parallel, IT::parallel, IT::reduction},
        [](OpBuilder &nb, Location l, ValueRange a) {
          return arith::AddFOp::create(nb, l, a[2],
                                       arith::MulFOp::create(nb, l, a[0], a[1]));
        });
    RankedTensorType scoreType = typeOf(logits);
    Value scores = elementwise(b, loc, scoreType, logits,
                               [](OpBuilder &nb, Location l, ValueRange a) {
                                 return sigmoid(nb, l, a[0]);
                               });
    Value biased = generic(
        b, loc, tensor::EmptyOp::create(b, loc, sizesOf(b, loc, scores), f32),
        {scores, op.getBias()},
        {b.getMultiDimIdentityMap(2), dimsMap(ctx, 2, {1}),
         b.getMultiDimIdentityMap(2)},
        {IT::parallel, IT::parallel},
        [](OpBuilder &nb, Location l, ValueRange a) {
          return arith::AddFOp::create(nb, l, a[0], a[1]);
        });

    // Top-k by rank, as data-parallel contractions (no per-token host loop,
    // so the same code runs as GPU kernels): rank[t, e] counts the experts
    // ahead of e (larger biased score, or equal score and lower index);
    // the expert of rank j fills slot j, and rank k gives the margin alpha.
    Type i32 = b.getI32Type();
    Type indexElement = op.getIndices().getType().getElementType();
    auto index = [&](OpBuilder &nb, Location l, unsigned d) -> Value {
      return linalg::IndexOp::create(nb, l, d);
    };
    Value rankInit =
        filled(b, loc, {tokens, b.getIndexAttr(experts)}, i32, 0);
    Value rank =
        linalg::GenericOp::create(
            b, loc, TypeRange{rankInit.getType()}, ValueRange{biased, biased},
            ValueRange{rankInit},
            ArrayRef<AffineMap>{dimsMap(ctx, 3, {0, 1}), dimsMap(ctx, 3, {0, 2}),
                                dimsMap(ctx, 3, {0, 1})},
            ArrayRef<IT>{IT::parallel, IT::parallel, IT::reduction},
            [&](OpBuilder &nb, Location l, ValueRange a) {
              Value greater = arith::CmpFOp::create(
                  nb, l, arith::CmpFPredicate::OGT, a[1], a[0]);
              Value equal = arith::CmpFOp::create(
                  nb, l, arith::CmpFPredicate::OEQ, a[1], a[0]);
              Value before = arith::CmpIOp::create(
                  nb, l, arith::CmpIPredicate::ult, index(nb, l, 2),
                  index(nb, l, 1));
              Value ahead = arith::OrIOp::create(
                  nb, l, greater, arith::AndIOp::create(nb, l, equal, before));
              Value inc = arith::ExtUIOp::create(nb, l, i32, ahead);
              linalg::YieldOp::create(nb, l,
                                      ValueRange{arith::AddIOp::create(
                                          nb, l, a[2], inc)});
            })
            .getResult(0);
    Value rawInit = filled(b, loc, {tokens, b.getIndexAttr(k)}, f32, 0);
    Value idxInit =
        filled(b, loc, {tokens, b.getIndexAttr(k)}, indexElement, 0);
    auto pick = linalg::GenericOp::create(
        b, loc, TypeRange{rawInit.getType(), idxInit.getType()},
        ValueRange{rank, scores}, ValueRange{rawInit, idxInit},
        ArrayRef<AffineMap>{dimsMap(ctx, 3, {0, 2}), dimsMap(ctx, 3, {0, 2}),
                            dimsMap(ctx, 3, {0, 1}), dimsMap(ctx, 3, {0, 1})},
        ArrayRef<IT>{IT::parallel, IT::parallel, IT::reduction},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value slot =
              arith::IndexCastOp::create(nb, l, i32, index(nb, l, 1));
          Value hit = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                            a[0], slot);
          Value e =
              arith::IndexCastOp::create(nb, l, indexElement, index(nb, l, 2));
          Value raw = arith::SelectOp::create(nb, l, hit, a[1], a[2]);
          Value id = arith::SelectOp::create(nb, l, hit, e, a[3]);
          linalg::YieldOp::create(nb, l, ValueRange{raw, id});
        });
    Value raw = pick.getResult(0), ids = pick.getResult(1);
    bool margins = bool(op.getMargins());
    Value alpha;
    if (margins) {
      Value alphaInit = filled(b, loc, {tokens}, f32, 0);
      alpha =
          linalg::GenericOp::create(
              b, loc, TypeRange{alphaInit.getType()}, ValueRange{rank, biased},
              ValueRange{alphaInit},
              ArrayRef<AffineMap>{dimsMap(ctx, 2, {0, 1}),
                                  dimsMap(ctx, 2, {0, 1}), dimsMap(ctx, 2, {0})},
              ArrayRef<IT>{IT::parallel, IT::reduction},
              [&](OpBuilder &nb, Location l, ValueRange a) {
                Value kth = arith::ConstantOp::create(
                    nb, l, nb.getI32IntegerAttr(static_cast<int32_t>(k)));
                Value hit = arith::CmpIOp::create(
                    nb, l, arith::CmpIPredicate::eq, a[0], kth);
                linalg::YieldOp::create(
                    nb, l,
                    ValueRange{arith::SelectOp::create(nb, l, hit, a[1], a[2])});
              })
              .getResult(0);
    }

    // Weights: scores of the selected experts, renormalised, scaled.
    double scaling = op.getScaling().convertToDouble();
    Value weights;
    if (op.getRenormalize()) {
      Value sum = generic(
          b, loc, filled(b, loc, {tokens}, f32, 0), {raw},
          {b.getMultiDimIdentityMap(2), dimsMap(ctx, 2, {0})},
          {IT::parallel, IT::reduction},
          [](OpBuilder &nb, Location l, ValueRange a) {
            return arith::AddFOp::create(nb, l, a[0], a[1]);
          });
      weights = generic(
          b, loc, tensor::EmptyOp::create(b, loc, sizesOf(b, loc, raw), f32),
          {raw, sum},
          {b.getMultiDimIdentityMap(2), dimsMap(ctx, 2, {0}),
           b.getMultiDimIdentityMap(2)},
          {IT::parallel, IT::parallel},
          [&](OpBuilder &nb, Location l, ValueRange a) {
            Value denom =
                arith::AddFOp::create(nb, l, a[1], constF32(nb, l, 1e-20));
            return arith::MulFOp::create(
                nb, l, arith::DivFOp::create(nb, l, a[0], denom),
                constF32(nb, l, scaling));
          });
    } else {
      weights = elementwise(b, loc, typeOf(raw), raw,
                            [&](OpBuilder &nb, Location l, ValueRange a) {
                              return arith::MulFOp::create(
                                  nb, l, a[0], constF32(nb, l, scaling));
                            });
    }
    SmallVector<Value> results = {
        expandLeadingLike(b, loc, weights, op.getX()),
        expandLeadingLike(b, loc, ids, op.getX())};
    if (margins) {
      Value m = generic(
          b, loc, tensor::EmptyOp::create(b, loc, sizesOf(b, loc, biased), f32),
          {biased, alpha},
          {b.getMultiDimIdentityMap(2), dimsMap(ctx, 2, {0}),
           b.getMultiDimIdentityMap(2)},
          {IT::parallel, IT::parallel},
          [](OpBuilder &nb, Location l, ValueRange a) {
            return arith::SubFOp::create(nb, l, a[0], a[1]);
          });
      results.push_back(expandLeadingLike(b, loc, m, op.getX()));
    }
    rewriter.replaceOp(op, results);
    return success();
  }
};

struct RoutedExpertsLowering : OpRewritePattern<RoutedExpertsOp> {
  RoutedExpertsLowering(MLIRContext *ctx, int64_t denseMinTokens)
      : OpRewritePattern(ctx), denseMinTokens(denseMinTokens) {}
  int64_t denseMinTokens;

  /// Every expert on every token as matrix products, combined with the
  /// router weights scattered to [T, E].
  Value dense(OpBuilder &b, Location loc, RoutedExpertsOp op, Value z,
              Value wts, Value ids, bool isSitu, double beta,
              double linearBeta) const {
    MLIRContext *ctx = b.getContext();
    Type f32 = b.getF32Type();
    auto gateType = typeOf(op.getGateProj());
    int64_t E = gateType.getDimSize(0), I = gateType.getDimSize(1),
            W = gateType.getDimSize(2);
    int64_t T = typeOf(z).getDimSize(0), k = typeOf(wts).getDimSize(1);
    SmallVector<ReassociationIndices> rows = {{0, 1}, {2}};
    auto mulAdd = [](OpBuilder &nb, Location l, ValueRange a) {
      return arith::AddFOp::create(nb, l, a[2],
                                   arith::MulFOp::create(nb, l, a[0], a[1]));
    };
    auto project = [&](Value weights) {
      Value flat = tensor::CollapseShapeOp::create(b, loc, weights, rows);
      return generic(b, loc,
                     filled(b, loc, {b.getIndexAttr(T), b.getIndexAttr(E * I)},
                            f32, 0.0),
                     {z, flat},
                     {dimsMap(ctx, 3, {0, 2}), dimsMap(ctx, 3, {1, 2}),
                      dimsMap(ctx, 3, {0, 1})},
                     {IT::parallel, IT::parallel, IT::reduction}, mulAdd);
    };
    Value g = project(op.getGateProj()), u = project(op.getUpProj());
    Value h = elementwise(b, loc, typeOf(g), {g, u},
                          [&](OpBuilder &hb, Location hl, ValueRange a) {
                            return isSitu ? situ(hb, hl, a[0], a[1], beta,
                                                 linearBeta)
                                          : siluGlu(hb, hl, a[0], a[1]);
                          });
    Value h3 = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({T, E, I}, f32), h,
        SmallVector<ReassociationIndices>{{0}, {1, 2}});
    // y[t, e, d] = sum_i down[e, d, i] h[t, e, i]: a product batched over e.
    Value y = generic(
        b, loc,
        filled(b, loc, {b.getIndexAttr(T), b.getIndexAttr(E), b.getIndexAttr(W)},
               f32, 0.0),
        {h3, op.getDownProj()},
        {dimsMap(ctx, 4, {0, 1, 3}), dimsMap(ctx, 4, {1, 2, 3}),
         dimsMap(ctx, 4, {0, 1, 2})},
        {IT::parallel, IT::parallel, IT::parallel, IT::reduction}, mulAdd);
    // The router weight of expert e for token t (0 when not selected).
    Value wInit = filled(b, loc, {b.getIndexAttr(T), b.getIndexAttr(E)}, f32, 0);
    Value wDense =
        linalg::GenericOp::create(
            b, loc, TypeRange{wInit.getType()}, ValueRange{ids, wts},
            ValueRange{wInit},
            ArrayRef<AffineMap>{dimsMap(ctx, 3, {0, 2}), dimsMap(ctx, 3, {0, 2}),
                                dimsMap(ctx, 3, {0, 1})},
            ArrayRef<IT>{IT::parallel, IT::parallel, IT::reduction},
            [&](OpBuilder &nb, Location l, ValueRange a) {
              Value e = arith::IndexCastOp::create(
                  nb, l, a[0].getType(), linalg::IndexOp::create(nb, l, 1));
              Value hit = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                                a[0], e);
              Value w = toF32(nb, l, a[1]);
              Value zero = constF32(nb, l, 0.0);
              linalg::YieldOp::create(
                  nb, l,
                  ValueRange{arith::AddFOp::create(
                      nb, l, a[2], arith::SelectOp::create(nb, l, hit, w, zero))});
            })
            .getResult(0);
    (void)k;
    return generic(
        b, loc, filled(b, loc, {b.getIndexAttr(T), b.getIndexAttr(W)}, f32, 0.0),
        {wDense, y},
        {dimsMap(ctx, 3, {0, 2}), dimsMap(ctx, 3, {0, 2, 1}),
         dimsMap(ctx, 3, {0, 1})},
        {IT::parallel, IT::parallel, IT::reduction}, mulAdd);
  }

  LogicalResult matchAndRewrite(RoutedExpertsOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.getScales().empty())
      return rewriter.notifyMatchFailure(
          op, "MXFP4 experts are dequantised by the runtime on CPU");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Type f32 = b.getF32Type();
    Value z = collapseLeading(b, loc, op.getX());
    Value wts = collapseLeading(b, loc, op.getWeights());
    Value ids = collapseLeading(b, loc, op.getIndices());
    int64_t width = typeOf(z).getDimSize(1);
    int64_t k = typeOf(wts).getDimSize(1);
    OpFoldResult tokens = sizesOf(b, loc, z)[0];
    bool isSitu = op.getActivation() == GluActivation::situ;
    double beta = isSitu ? op.getBetaAttr().getValueAsDouble() : 0.0;
    double linearBeta =
        isSitu ? op.getLinearBetaAttr().getValueAsDouble() : 0.0;

    std::optional<int64_t> staticTokens = getConstantIntValue(tokens);
    if (denseMinTokens > 0 && staticTokens && *staticTokens >= denseMinTokens) {
      Value result = dense(b, loc, op, z, wts, ids, isSitu, beta, linearBeta);
      Type outElement = op.getOut().getType().getElementType();
      if (outElement != f32)
        result = elementwise(b, loc, typeOf(result).clone(outElement), result,
                             [](OpBuilder &, Location, ValueRange a) {
                               return a[0];
                             });
      rewriter.replaceOp(op, expandLeadingLike(b, loc, result, op.getX()));
      return success();
    }

    // Each (token, slot) gathers its expert's rows inside the contraction
    // (ids are read where they are used, never by host code), so the whole
    // layer is data-parallel: g/u[t, j, i], then y[t, j, d], then the
    // weighted sum over the k slots.
    int64_t inner = typeOf(op.getGateProj()).getDimSize(1);
    MLIRContext *ctx = b.getContext();
    auto index = [](OpBuilder &nb, Location l, unsigned d) -> Value {
      return linalg::IndexOp::create(nb, l, d);
    };
    auto expertRow = [&](OpBuilder &nb, Location l, Value table, Value id,
                         Value row, Value col) {
      Value e = arith::IndexCastOp::create(nb, l, nb.getIndexType(), id);
      return toF32(nb, l,
                   tensor::ExtractOp::create(nb, l, table,
                                             ValueRange{e, row, col}));
    };
    Value guInit = filled(
        b, loc, {tokens, b.getIndexAttr(k), b.getIndexAttr(inner)}, f32, 0.0);
    auto gu = linalg::GenericOp::create(
        b, loc, TypeRange{guInit.getType(), guInit.getType()},
        ValueRange{ids, z}, ValueRange{guInit, guInit},
        ArrayRef<AffineMap>{dimsMap(ctx, 4, {0, 1}), dimsMap(ctx, 4, {0, 3}),
                            dimsMap(ctx, 4, {0, 1, 2}),
                            dimsMap(ctx, 4, {0, 1, 2})},
        ArrayRef<IT>{IT::parallel, IT::parallel, IT::parallel, IT::reduction},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value i = index(nb, l, 2), w = index(nb, l, 3);
          Value x = toF32(nb, l, a[1]);
          Value wg = expertRow(nb, l, op.getGateProj(), a[0], i, w);
          Value wu = expertRow(nb, l, op.getUpProj(), a[0], i, w);
          Value g = arith::AddFOp::create(nb, l, a[2],
                                          arith::MulFOp::create(nb, l, wg, x));
          Value u = arith::AddFOp::create(nb, l, a[3],
                                          arith::MulFOp::create(nb, l, wu, x));
          linalg::YieldOp::create(nb, l, ValueRange{g, u});
        });
    Value h = elementwise(
        b, loc, typeOf(gu.getResult(0)), {gu.getResult(0), gu.getResult(1)},
        [&](OpBuilder &hb, Location hl, ValueRange a) {
          return isSitu ? situ(hb, hl, a[0], a[1], beta, linearBeta)
                        : siluGlu(hb, hl, a[0], a[1]);
        });
    Value yInit = filled(
        b, loc, {tokens, b.getIndexAttr(k), b.getIndexAttr(width)}, f32, 0.0);
    Value y =
        linalg::GenericOp::create(
            b, loc, TypeRange{yInit.getType()}, ValueRange{ids, h},
            ValueRange{yInit},
            ArrayRef<AffineMap>{dimsMap(ctx, 4, {0, 1}),
                                dimsMap(ctx, 4, {0, 1, 3}),
                                dimsMap(ctx, 4, {0, 1, 2})},
            ArrayRef<IT>{IT::parallel, IT::parallel, IT::parallel,
                         IT::reduction},
            [&](OpBuilder &nb, Location l, ValueRange a) {
              Value wd = expertRow(nb, l, op.getDownProj(), a[0],
                                   index(nb, l, 2), index(nb, l, 3));
              linalg::YieldOp::create(
                  nb, l,
                  ValueRange{arith::AddFOp::create(
                      nb, l, a[2], arith::MulFOp::create(nb, l, wd, a[1]))});
            })
            .getResult(0);
    Value result = generic(
        b, loc, filled(b, loc, {tokens, b.getIndexAttr(width)}, f32, 0.0),
        {wts, y},
        {dimsMap(ctx, 3, {0, 2}), dimsMap(ctx, 3, {0, 2, 1}),
         dimsMap(ctx, 3, {0, 1})},
        {IT::parallel, IT::parallel, IT::reduction},
        [](OpBuilder &nb, Location l, ValueRange a) {
          return arith::AddFOp::create(nb, l, a[2],
                                       arith::MulFOp::create(nb, l, a[0], a[1]));
        });
    Type outElement = op.getOut().getType().getElementType();
    if (outElement != f32)
      result = elementwise(b, loc, typeOf(result).clone(outElement), result,
                           [](OpBuilder &, Location, ValueRange a) {
                             return a[0];
                           });
    rewriter.replaceOp(op, expandLeadingLike(b, loc, result, op.getX()));
    return success();
  }
};

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

/// new_bias[j] = bias[j] - threshold(j, bias[j]) for every expert column j
/// (the shape of both Quantile Balancing updates).
Value subtractPerColumn(
    OpBuilder &b, Location loc, Value bias,
    llvm::function_ref<Value(OpBuilder &, Location, Value j, Value bj)>
        threshold) {
  int64_t experts = typeOf(bias).getDimSize(0);
  return carryLoop(b, loc, experts, bias,
                   [&](OpBuilder &cb, Location l, Value j, Value current) {
                     Value bj = tensor::ExtractOp::create(cb, l, current,
                                                          ValueRange{j});
                     Value updated = arith::SubFOp::create(
                         cb, l, bj, threshold(cb, l, j, bj));
                     return Value(tensor::InsertOp::create(
                         cb, l, updated, current, ValueRange{j}));
                   });
}

/// new_bias[j] = bias[j] - (the (q+1)-th largest margin of column j),
/// q = floor(N k / E): per column, q+1 rounds of arg-max with the winner
/// knocked out. The quantile is computed exactly; with `bins` the sharded
/// form reads it from a histogram, which approximates this value to the
/// histogram's resolution.
struct QuantileBalanceLowering : OpRewritePattern<QuantileBalanceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(QuantileBalanceOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    if (std::optional<int64_t> bins = op.getBins()) {
      // The histogram form: the same two ops a token-sharded batch runs,
      // with its all-reduce in between.
      int64_t rows = typeOf(op.getMargins()).getDimSize(0);
      if (ShapedType::isDynamic(rows))
        return rewriter.notifyMatchFailure(op, "histogram form needs static N");
      int64_t experts = typeOf(op.getBias()).getDimSize(0);
      auto countsType = RankedTensorType::get({experts, *bins}, b.getI32Type());
      Value counts = QuantileCountsOp::create(b, loc, countsType,
                                              op.getMargins(), op.getBias(),
                                              *bins);
      rewriter.replaceOpWithNewOp<QuantileUpdateOp>(
          op, op.getNewBias().getType(), counts, op.getBias(), rows,
          op.getTopK());
      return success();
    }
    Value margins = op.getMargins();
    int64_t experts = typeOf(margins).getDimSize(1);
    OpFoldResult tokenCount = sizesOf(b, loc, margins)[0];
    Value tokens = getValueOrCreateConstantIndexOp(b, loc, tokenCount);
    // q + 1 = floor(N k / E) + 1 rounds.
    Value rounds = arith::AddIOp::create(
        b, loc,
        arith::DivUIOp::create(
            b, loc,
            arith::MulIOp::create(b, loc, tokens, cIndex(b, loc, op.getTopK())),
            cIndex(b, loc, experts)),
        cIndex(b, loc, 1));
    Value negInf = constF32(b, loc, -std::numeric_limits<double>::infinity());
    Type f32 = b.getF32Type();
    Value updated = subtractPerColumn(
        b, loc, op.getBias(),
        [&](OpBuilder &nb, Location l, Value j, Value) -> Value {
          // Column j as a 1-D tensor.
          Value column = tensor::EmptyOp::create(
              nb, l, ArrayRef<OpFoldResult>{tokenCount}, f32);
          auto copy = scf::ForOp::create(
              nb, l, cIndex(nb, l, 0), tokens, cIndex(nb, l, 1),
              ValueRange{column},
              [&](OpBuilder &cb, Location cl, Value n, ValueRange it) {
                Value m = tensor::ExtractOp::create(cb, cl, margins,
                                                    ValueRange{n, j});
                scf::YieldOp::create(
                    cb, cl,
                    Value(tensor::InsertOp::create(cb, cl, m, it[0],
                                                   ValueRange{n})));
              });
          auto select = scf::ForOp::create(
              nb, l, cIndex(nb, l, 0), rounds, cIndex(nb, l, 1),
              ValueRange{copy.getResult(0), negInf},
              [&](OpBuilder &sb, Location sl, Value, ValueRange it) {
                auto [best, at] = argmax(sb, sl, it[0]);
                Value work = tensor::InsertOp::create(sb, sl, negInf, it[0],
                                                      ValueRange{at});
                scf::YieldOp::create(sb, sl, ValueRange{work, best});
              });
          return select.getResult(1);
        });
    rewriter.replaceOp(op, updated);
    return success();
  }
};

/// The histogram range of column j: [bias_j - max(bias) - 1,
/// bias_j - min(bias) + 1] (kimi.quantile_counts).
struct HistogramRange {
  Value maxBias, minBias;
  static HistogramRange of(OpBuilder &b, Location loc, Value bias) {
    int64_t experts = typeOf(bias).getDimSize(0);
    Value inf = constF32(b, loc, std::numeric_limits<double>::infinity());
    Value negInf = constF32(b, loc, -std::numeric_limits<double>::infinity());
    auto loop = scf::ForOp::create(
        b, loc, cIndex(b, loc, 0), cIndex(b, loc, experts), cIndex(b, loc, 1),
        ValueRange{negInf, inf},
        [&](OpBuilder &lb, Location l, Value j, ValueRange it) {
          Value v = tensor::ExtractOp::create(lb, l, bias, ValueRange{j});
          scf::YieldOp::create(
              lb, l,
              ValueRange{arith::MaximumFOp::create(lb, l, it[0], v),
                         arith::MinimumFOp::create(lb, l, it[1], v)});
        });
    return {loop.getResult(0), loop.getResult(1)};
  }
  /// (lo_j, bin width) for bias value `bj`.
  std::pair<Value, Value> column(OpBuilder &b, Location loc, Value bj,
                                 int64_t bins) const {
    Value one = constF32(b, loc, 1.0);
    Value lo = arith::SubFOp::create(
        b, loc, arith::SubFOp::create(b, loc, bj, maxBias), one);
    Value hi = arith::AddFOp::create(
        b, loc, arith::SubFOp::create(b, loc, bj, minBias), one);
    Value width = arith::DivFOp::create(
        b, loc, arith::SubFOp::create(b, loc, hi, lo),
        constF32(b, loc, double(bins)));
    return {lo, width};
  }
};

/// counts[j, c] = number of margins of column j in bin c.
struct QuantileCountsLowering : OpRewritePattern<QuantileCountsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(QuantileCountsOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Value margins = op.getMargins();
    int64_t experts = typeOf(margins).getDimSize(1), bins = op.getBins();
    Value tokens = getValueOrCreateConstantIndexOp(
        b, loc, sizesOf(b, loc, margins)[0]);
    HistogramRange range = HistogramRange::of(b, loc, op.getBias());
    Type i32 = b.getI32Type();
    Value zeros = filled(b, loc, {b.getIndexAttr(experts), b.getIndexAttr(bins)},
                         i32, 0.0);
    auto columns = scf::ForOp::create(
        b, loc, cIndex(b, loc, 0), cIndex(b, loc, experts), cIndex(b, loc, 1),
        ValueRange{zeros},
        [&](OpBuilder &cb, Location l, Value j, ValueRange it) {
          Value bj = tensor::ExtractOp::create(cb, l, op.getBias(), ValueRange{j});
          std::pair<Value, Value> edges = range.column(cb, l, bj, bins);
          Value lo = edges.first, width = edges.second;
          auto rows = scf::ForOp::create(
              cb, l, cIndex(cb, l, 0), tokens, cIndex(cb, l, 1), it,
              [&](OpBuilder &rb, Location rl, Value n, ValueRange acc) {
                Value m = tensor::ExtractOp::create(rb, rl, margins,
                                                    ValueRange{n, j});
                Value pos = math::FloorOp::create(
                    rb, rl,
                    arith::DivFOp::create(
                        rb, rl, arith::SubFOp::create(rb, rl, m, lo), width));
                // Clamp into [0, bins - 1] in f32 (NaN-free: the range is
                // finite), then to an index.
                pos = arith::MaximumFOp::create(rb, rl, pos, constF32(rb, rl, 0));
                pos = arith::MinimumFOp::create(
                    rb, rl, pos, constF32(rb, rl, double(bins - 1)));
                Value c = arith::IndexCastOp::create(
                    rb, rl, rb.getIndexType(),
                    arith::FPToSIOp::create(rb, rl, rb.getI64Type(), pos));
                Value old = tensor::ExtractOp::create(rb, rl, acc[0],
                                                      ValueRange{j, c});
                Value inc = arith::AddIOp::create(
                    rb, rl, old, arith::ConstantIntOp::create(rb, rl, 1, 32));
                scf::YieldOp::create(
                    rb, rl,
                    Value(tensor::InsertOp::create(rb, rl, inc, acc[0],
                                                   ValueRange{j, c})));
              });
          scf::YieldOp::create(cb, l, rows.getResults());
        });
    rewriter.replaceOp(op, columns.getResult(0));
    return success();
  }
};

/// new_bias[j] = bias[j] - upper edge of the bin holding the (q+1)-th
/// largest margin of column j, q = floor(rows k / E).
struct QuantileUpdateLowering : OpRewritePattern<QuantileUpdateOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(QuantileUpdateOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Value counts = op.getCounts(), bias = op.getBias();
    int64_t experts = typeOf(bias).getDimSize(0);
    int64_t bins = typeOf(counts).getDimSize(1);
    int64_t need = int64_t(op.getRows()) * int64_t(op.getTopK()) / experts + 1;
    HistogramRange range = HistogramRange::of(b, loc, bias);
    Value needV = arith::ConstantIntOp::create(b, loc, need, 32);
    Value updated = subtractPerColumn(
        b, loc, bias, [&](OpBuilder &cb, Location l, Value j, Value bj) {
          // From the top bin down, the first bin where the running count
          // reaches q + 1.
          Value zero = arith::ConstantIntOp::create(cb, l, 0, 32);
          auto scan = scf::ForOp::create(
              cb, l, cIndex(cb, l, 0), cIndex(cb, l, bins), cIndex(cb, l, 1),
              ValueRange{zero, cIndex(cb, l, 0)},
              [&](OpBuilder &sb, Location sl, Value i, ValueRange acc) {
                Value c = arith::SubIOp::create(sb, sl, cIndex(sb, sl, bins - 1), i);
                Value n = tensor::ExtractOp::create(sb, sl, counts,
                                                    ValueRange{j, c});
                Value after = arith::AddIOp::create(sb, sl, acc[0], n);
                Value crosses = arith::AndIOp::create(
                    sb, sl,
                    arith::CmpIOp::create(sb, sl, arith::CmpIPredicate::slt,
                                          acc[0], needV),
                    arith::CmpIOp::create(sb, sl, arith::CmpIPredicate::sge,
                                          after, needV));
                Value bin = arith::SelectOp::create(sb, sl, crosses, c, acc[1]);
                scf::YieldOp::create(sb, sl, ValueRange{after, bin});
              });
          auto [lo, width] = range.column(cb, l, bj, bins);
          Value upper = arith::UIToFPOp::create(
              cb, l, cb.getF32Type(),
              arith::IndexCastOp::create(
                  cb, l, cb.getI64Type(),
                  arith::AddIOp::create(cb, l, scan.getResult(1),
                                        cIndex(cb, l, 1))));
          return Value(arith::AddFOp::create(
              cb, l, lo, arith::MulFOp::create(cb, l, upper, width)));
        });
    rewriter.replaceOp(op, updated);
    return success();
  }
};

} // namespace

void kimi::lowering::populateMoeLoweringPatterns(RewritePatternSet &patterns,
                                                 int64_t denseExpertsMinTokens) {
  patterns.add<RouterLowering, LatentMoeDecomposition, QuantileBalanceLowering,
               QuantileCountsLowering, QuantileUpdateLowering>(
      patterns.getContext());
  patterns.add<RoutedExpertsLowering>(patterns.getContext(),
                                      denseExpertsMinTokens);
}

//===- LowerAttentionOps.cpp - MLA and AttnRes -> linalg ------------------===//
//
// Both MLA forms lower to the absorbed computation over the latent (one
// code path; reference §3): q_nope is folded through W_uk into the R-wide
// latent space, scores are taken against [ckv | k_pe], the softmax-weighted
// latent is mixed, then W_uv is applied. Causality: query t (of T) sits at
// key position S - T + t.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/LatentAttention.h"
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


OpFoldResult idx(OpBuilder &b, int64_t v) { return b.getIndexAttr(v); }

/// Static slice [offset, offset + size) of dimension `dim` (others whole).
Value sliceDim(OpBuilder &b, Location loc, Value v, unsigned dim,
               int64_t offset, int64_t size) {
  RankedTensorType type = typeOf(v);
  SmallVector<OpFoldResult> offsets(type.getRank(), idx(b, 0));
  SmallVector<OpFoldResult> sizes = sizesOf(b, loc, v);
  SmallVector<OpFoldResult> strides(type.getRank(), idx(b, 1));
  offsets[dim] = idx(b, offset);
  sizes[dim] = idx(b, size);
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), v, offsets,
      sizes, strides);
}

Value mulAdd(OpBuilder &b, Location l, ValueRange a) {
  return arith::AddFOp::create(b, l, a[2],
                               arith::MulFOp::create(b, l, a[0], a[1]));
}

/// The latent attention shared by kimi.mla and kimi.mla_decode; `lengths`
/// ([B] i32, or null for S) are the valid key rows of each sequence.
Value latentAttention(OpBuilder &b, Location loc, Value q, Value ckv,
                      Value kpe, Value kvb, Value gate, Value lengths,
                      double scale, RankedTensorType outType) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  RankedTensorType qType = typeOf(q);
  int64_t heads = qType.getDimSize(2), dq = qType.getDimSize(3);
  int64_t latent = typeOf(ckv).getDimSize(2), rope = typeOf(kpe).getDimSize(2);
  int64_t nope = dq - rope;
  SmallVector<OpFoldResult> qSizes = sizesOf(b, loc, q);
  OpFoldResult B = qSizes[0], T = qSizes[1];
  OpFoldResult S = sizesOf(b, loc, ckv)[1];

  Value qPe = sliceDim(b, loc, q, 3, nope, rope);

  Value qa = absorbLatentQueries(b, loc, q, kvb, rope);
  // scores[b,h,t,s] = sum_r qa[b,t,h,r] ckv[b,s,r] + sum_p q_pe[b,t,h,p] kpe[b,s,p]
  //                                                       loops b h t s r
  SmallVector<IT> contract = {IT::parallel, IT::parallel, IT::parallel,
                              IT::parallel, IT::reduction};
  AffineMap scoreMap = dimsMap(ctx, 5, {0, 1, 2, 3});
  Value scores = generic(
      b, loc, filled(b, loc, {B, idx(b, heads), T, S}, f32, 0.0), {qa, ckv},
      {dimsMap(ctx, 5, {0, 2, 1, 4}), dimsMap(ctx, 5, {0, 3, 4}), scoreMap},
      contract, mulAdd);
  scores = generic(
      b, loc, scores, {qPe, kpe},
      {dimsMap(ctx, 5, {0, 2, 1, 4}), dimsMap(ctx, 5, {0, 3, 4}), scoreMap},
      contract, mulAdd);

  // Scale and causal mask, applied where the scores are read (the row max
  // and the exponentials) rather than in a pass of their own over
  // [B, H, T, S]: key s is visible to query t iff s <= t + L - T, with L the
  // valid rows (S, or lengths[b] read in the loop: no host read).
  Value sVal = getValueOrCreateConstantIndexOp(b, loc, S);
  Value tVal = getValueOrCreateConstantIndexOp(b, loc, T);
  Value offset = arith::SubIOp::create(b, loc, sVal, tVal);
  double negInf = -std::numeric_limits<double>::infinity();
  auto masked = [&](OpBuilder &nb, Location l, Value score,
                    Value length) -> Value {
    Value t = linalg::IndexOp::create(nb, l, 2);
    Value s = linalg::IndexOp::create(nb, l, 3);
    Value shift = offset;
    if (length)
      shift = arith::SubIOp::create(
          nb, l,
          arith::IndexCastOp::create(nb, l, nb.getIndexType(), length), tVal);
    Value limit = arith::AddIOp::create(nb, l, t, shift);
    // Signed: with lengths, limit < 0 (no visible key) is possible.
    Value visible = arith::CmpIOp::create(
        nb, l, length ? arith::CmpIPredicate::sle : arith::CmpIPredicate::ule,
        s, limit);
    Value scaled = arith::MulFOp::create(nb, l, score, constF32(nb, l, scale));
    return arith::SelectOp::create(nb, l, visible, scaled,
                                   constF32(nb, l, negInf));
  };

  // Softmax over s, normalised at the end: the exponentials are mixed as
  // they are and the output is divided by their row sum (exact: the mix and
  // W_uv are linear). That saves a pass over [B, H, T, S] (at an 8K context
  // and a 2,048-token step, 1 GB each way) for one over [B, T, H, dv].
  SmallVector<OpFoldResult> rowSizes = {B, idx(b, heads), T};
  SmallVector<IT> rowReduce = {IT::parallel, IT::parallel, IT::parallel,
                               IT::reduction};
  AffineMap all4 = b.getMultiDimIdentityMap(4), row = prefixMap(ctx, 4, 3);
  AffineMap batchOnly = dimsMap(ctx, 4, {0});
  SmallVector<Value> maxIns = {scores};
  SmallVector<AffineMap> maxMaps = {all4};
  if (lengths) {
    maxIns.push_back(lengths);
    maxMaps.push_back(batchOnly);
  }
  maxMaps.push_back(row);
  Value rowMax = generic(b, loc, filled(b, loc, rowSizes, f32, negInf), maxIns,
                         maxMaps, rowReduce,
                         [&](OpBuilder &nb, Location l, ValueRange a) {
                           return arith::MaximumFOp::create(
                               nb, l,
                               masked(nb, l, a[0], lengths ? a[1] : Value()),
                               a.back());
                         });
  SmallVector<Value> expIns = {scores, rowMax};
  SmallVector<AffineMap> expMaps = {all4, row};
  if (lengths) {
    expIns.push_back(lengths);
    expMaps.push_back(batchOnly);
  }
  expMaps.push_back(all4);
  Value exps = generic(
      b, loc, tensor::EmptyOp::create(b, loc, sizesOf(b, loc, scores), f32),
      expIns, expMaps, SmallVector<IT>(4, IT::parallel),
      [&](OpBuilder &nb, Location l, ValueRange a) {
        return math::ExpOp::create(
            nb, l,
            arith::SubFOp::create(
                nb, l, masked(nb, l, a[0], lengths ? a[2] : Value()), a[1]));
      });
  Value rowSum = generic(b, loc, filled(b, loc, rowSizes, f32, 0.0), {exps},
                         {all4, row}, rowReduce,
                         [](OpBuilder &nb, Location l, ValueRange a) {
                           return arith::AddFOp::create(nb, l, a[0], a[1]);
                         });

  // mixed[b,t,h,r] = sum_s e[b,h,t,s] ckv[b,s,r]          loops b t h r s
  Value mixed = generic(
      b, loc, filled(b, loc, {B, T, idx(b, heads), idx(b, latent)}, f32, 0.0),
      {exps, ckv},
      {dimsMap(ctx, 5, {0, 2, 1, 4}), dimsMap(ctx, 5, {0, 4, 3}),
       dimsMap(ctx, 5, {0, 1, 2, 3})},
      contract, mulAdd);
  return expandLatentOutput(b, loc, mixed, rowSum, kvb, gate, nope, outType);
}

struct MlaLowering : OpRewritePattern<MlaOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MlaOp op,
                                PatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, latentAttention(rewriter, op.getLoc(), op.getQ(), op.getCkv(),
                            op.getKPe(), op.getKvBProj(), op.getGate(),
                            /*lengths=*/Value(), op.getScale().convertToDouble(),
                            op.getOut().getType()));
    return success();
  }
};

struct MlaDecodeLowering : OpRewritePattern<MlaDecodeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MlaDecodeOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value cache = op.getCache();
    int64_t latent = typeOf(op.getKvBProj()).getDimSize(1);
    int64_t rope = typeOf(cache).getDimSize(2) - latent;
    Value ckv = sliceDim(rewriter, loc, cache, 2, 0, latent);
    Value kpe = sliceDim(rewriter, loc, cache, 2, latent, rope);
    rewriter.replaceOp(
        op, latentAttention(rewriter, loc, op.getQ(), ckv, kpe,
                            op.getKvBProj(), op.getGate(), op.getLengths(),
                            op.getScale().convertToDouble(),
                            op.getOut().getType()));
    return success();
  }
};

/// out[b, p] = rows[b, p - len_b] on [len_b, len_b + T), else cache[b, p]
/// for p < S, else 0: one pass; the reads are guarded, so an empty cache
/// (S = 0) is never touched.
struct CacheInsertLowering : OpRewritePattern<CacheInsertOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CacheInsertOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Value cache = op.getCache(), rows = op.getRows();
    Type et = typeOf(cache).getElementType();
    SmallVector<OpFoldResult> cs = sizesOf(rewriter, loc, cache);
    Value S = getValueOrCreateConstantIndexOp(rewriter, loc, cs[1]);
    Value T = getValueOrCreateConstantIndexOp(rewriter, loc,
                                              sizesOf(rewriter, loc, rows)[1]);
    Value total = arith::AddIOp::create(rewriter, loc, S, T);
    Value init = tensor::EmptyOp::create(
        rewriter, loc, SmallVector<OpFoldResult>{cs[0], total, cs[2]}, et);
    Value out = generic(
        rewriter, loc, init, {op.getLengths()},
        {dimsMap(ctx, 3, {0}), rewriter.getMultiDimIdentityMap(3)},
        SmallVector<IT>(3, IT::parallel),
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value bi = linalg::IndexOp::create(nb, l, 0);
          Value p = linalg::IndexOp::create(nb, l, 1);
          Value w = linalg::IndexOp::create(nb, l, 2);
          Value len = arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[0]);
          Value r = arith::SubIOp::create(nb, l, p, len);
          Value zero = arith::ConstantIndexOp::create(nb, l, 0);
          Value isRow = arith::AndIOp::create(
              nb, l,
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, r, zero),
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, r, T));
          Value inCache =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, p, S);
          Type f32 = nb.getF32Type();
          auto read = [&](OpBuilder &ib, Location il, Value t, Value at) {
            Value v = tensor::ExtractOp::create(ib, il, t, ValueRange{bi, at, w});
            return et.isF32() ? v : Value(arith::ExtFOp::create(ib, il, f32, v));
          };
          auto value = scf::IfOp::create(
              nb, l, isRow,
              [&](OpBuilder &ib, Location il) {
                scf::YieldOp::create(ib, il, read(ib, il, rows, r));
              },
              [&](OpBuilder &ib, Location il) {
                auto fromCache = scf::IfOp::create(
                    ib, il, inCache,
                    [&](OpBuilder &cb, Location cl) {
                      scf::YieldOp::create(cb, cl, read(cb, cl, cache, p));
                    },
                    [&](OpBuilder &cb, Location cl) {
                      scf::YieldOp::create(cb, cl, constF32(cb, cl, 0.0));
                    });
                scf::YieldOp::create(ib, il, fromCache.getResult(0));
              });
          return value.getResult(0);
        });
    rewriter.replaceOp(op, out);
    return success();
  }
};

/// score_i = (v_i . (norm * query)) * rsqrt(mean(v_i^2) + eps);
/// out = sum_i softmax_i(score) v_i.
struct AttnResLowering : OpRewritePattern<AttnResOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttnResOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = getContext();
    Type f32 = rewriter.getF32Type();
    ValueRange sources = op.getSources();
    Value first = sources.front();
    unsigned rank = typeOf(first).getRank();
    int64_t width = typeOf(first).getShape().back();
    double eps = op.getEps().convertToDouble();
    SmallVector<OpFoldResult> rowSizes = sizesOf(rewriter, loc, first);
    rowSizes.pop_back();
    AffineMap all = rewriter.getMultiDimIdentityMap(rank);
    AffineMap lead = prefixMap(ctx, rank, rank - 1);
    AffineMap lastDim = dimsMap(ctx, rank, {rank - 1});
    AffineMap queryMap =
        typeOf(op.getQuery()).getRank() == 2
            ? AffineMap::get(rank, 0,
                             {getAffineConstantExpr(0, ctx),
                              getAffineDimExpr(rank - 1, ctx)},
                             ctx)
            : lastDim;
    SmallVector<IT> reduceLast(rank - 1, IT::parallel);
    reduceLast.push_back(IT::reduction);

    SmallVector<Value> scores;
    for (Value v : sources) {
      Value ss = generic(rewriter, loc, filled(rewriter, loc, rowSizes, f32, 0),
                         {v}, {all, lead}, reduceLast,
                         [](OpBuilder &b, Location l, ValueRange a) {
                           return arith::AddFOp::create(
                               b, l, a[1], arith::MulFOp::create(b, l, a[0], a[0]));
                         });
      Value dot = generic(
          rewriter, loc, filled(rewriter, loc, rowSizes, f32, 0),
          {v, op.getNorm(), op.getQuery()}, {all, lastDim, queryMap, lead},
          reduceLast, [](OpBuilder &b, Location l, ValueRange a) {
            Value w = arith::MulFOp::create(b, l, a[1], a[2]);
            return arith::AddFOp::create(
                b, l, a[3], arith::MulFOp::create(b, l, a[0], w));
          });
      scores.push_back(generic(
          rewriter, loc,
          tensor::EmptyOp::create(rewriter, loc, rowSizes, f32), {dot, ss},
          {prefixMap(ctx, rank - 1, rank - 1), prefixMap(ctx, rank - 1, rank - 1),
           prefixMap(ctx, rank - 1, rank - 1)},
          SmallVector<IT>(rank - 1, IT::parallel),
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value mean = arith::DivFOp::create(b, l, a[1],
                                               constF32(b, l, double(width)));
            Value inv = math::RsqrtOp::create(
                b, l, arith::AddFOp::create(b, l, mean, constF32(b, l, eps)));
            return arith::MulFOp::create(b, l, a[0], inv);
          }));
    }

    // One generic mixes all sources with the softmax of their scores.
    size_t n = sources.size();
    SmallVector<Value> inputs(sources.begin(), sources.end());
    inputs.append(scores.begin(), scores.end());
    SmallVector<AffineMap> maps(n, all);
    maps.append(n, lead);
    maps.push_back(all);
    Value init = tensor::EmptyOp::create(
        rewriter, loc, sizesOf(rewriter, loc, first),
        op.getOut().getType().getElementType());
    Value out = generic(
        rewriter, loc, init, inputs, maps, SmallVector<IT>(rank, IT::parallel),
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value m = a[n];
          for (size_t i = 1; i < n; ++i)
            m = arith::MaximumFOp::create(b, l, m, a[n + i]);
          Value sum = constF32(b, l, 0.0), acc = constF32(b, l, 0.0);
          for (size_t i = 0; i < n; ++i) {
            Value e = math::ExpOp::create(
                b, l, arith::SubFOp::create(b, l, a[n + i], m));
            sum = arith::AddFOp::create(b, l, sum, e);
            acc = arith::AddFOp::create(b, l, acc,
                                        arith::MulFOp::create(b, l, e, a[i]));
          }
          return arith::DivFOp::create(b, l, acc, sum);
        });
    rewriter.replaceOp(op, out);
    return success();
  }
};

} // namespace

/// W_uk and W_uv of kv_b_proj [H * (dn + dv), R] as [H, dn, R] and [H, dv, R].
static std::pair<Value, Value> splitKvB(OpBuilder &b, Location loc, Value kvb,
                                        int64_t heads, int64_t nope) {
  int64_t latent = typeOf(kvb).getDimSize(1);
  int64_t dv = typeOf(kvb).getDimSize(0) / heads - nope;
  SmallVector<ReassociationIndices> split = {{0, 1}, {2}};
  Value kvb3 = tensor::ExpandShapeOp::create(
      b, loc,
      RankedTensorType::get({heads, nope + dv, latent},
                            typeOf(kvb).getElementType()),
      kvb, split);
  return {sliceDim(b, loc, kvb3, 1, 0, nope), sliceDim(b, loc, kvb3, 1, nope, dv)};
}

Value kimi::lowering::absorbLatentQueries(OpBuilder &b, Location loc, Value q,
                                          Value kvb, int64_t rope) {
  MLIRContext *ctx = b.getContext();
  RankedTensorType qType = typeOf(q);
  int64_t heads = qType.getDimSize(2), nope = qType.getDimSize(3) - rope;
  int64_t latent = typeOf(kvb).getDimSize(1);
  SmallVector<OpFoldResult> qSizes = sizesOf(b, loc, q);
  Value wuk = splitKvB(b, loc, kvb, heads, nope).first;
  Value qNope = sliceDim(b, loc, q, 3, 0, nope);
  // qa[b,t,h,r] = sum_i q_nope[b,t,h,i] W_uk[h,i,r]        loops b t h r i
  return generic(
      b, loc,
      filled(b, loc, {qSizes[0], qSizes[1], idx(b, heads), idx(b, latent)},
             b.getF32Type(), 0.0),
      {qNope, wuk},
      {dimsMap(ctx, 5, {0, 1, 2, 4}), dimsMap(ctx, 5, {2, 4, 3}),
       dimsMap(ctx, 5, {0, 1, 2, 3})},
      {IT::parallel, IT::parallel, IT::parallel, IT::parallel, IT::reduction},
      mulAdd);
}

Value kimi::lowering::expandLatentOutput(OpBuilder &b, Location loc,
                                         Value mixed, Value rowSum, Value kvb,
                                         Value gate, int64_t nope,
                                         RankedTensorType outType) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  int64_t heads = typeOf(mixed).getDimSize(2);
  int64_t dv = typeOf(kvb).getDimSize(0) / heads - nope;
  SmallVector<OpFoldResult> mSizes = sizesOf(b, loc, mixed);
  OpFoldResult B = mSizes[0], T = mSizes[1];
  SmallVector<IT> contract = {IT::parallel, IT::parallel, IT::parallel,
                              IT::parallel, IT::reduction};
  Value wuv = splitKvB(b, loc, kvb, heads, nope).second;
  // o[b,t,h,j] = sum_r mixed[b,t,h,r] W_uv[h,j,r]          loops b t h j r
  Value o = generic(
      b, loc, filled(b, loc, {B, T, idx(b, heads), idx(b, dv)}, f32, 0.0),
      {mixed, wuv},
      {dimsMap(ctx, 5, {0, 1, 2, 4}), dimsMap(ctx, 5, {2, 3, 4}),
       dimsMap(ctx, 5, {0, 1, 2, 3})},
      contract, mulAdd);
  // out = o [/ rowSum] [* sigmoid(gate)]                   loops b t h j
  AffineMap all4 = b.getMultiDimIdentityMap(4);
  SmallVector<Value> ins = {o};
  SmallVector<AffineMap> maps = {all4};
  if (rowSum) {
    ins.push_back(rowSum);
    maps.push_back(dimsMap(ctx, 4, {0, 2, 1}));
  }
  if (gate) {
    ins.push_back(gate);
    maps.push_back(all4);
  }
  maps.push_back(all4);
  return generic(
      b, loc,
      tensor::EmptyOp::create(b, loc, sizesOf(b, loc, o),
                              outType.getElementType()),
      ins, maps, SmallVector<IT>(4, IT::parallel),
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value v = a[0];
        if (rowSum)
          v = arith::DivFOp::create(nb, l, v, a[1]);
        if (!gate)
          return v;
        return arith::MulFOp::create(nb, l, v, sigmoid(nb, l, a[rowSum ? 2 : 1]));
      });
}

void kimi::lowering::populateAttentionLoweringPatterns(
    RewritePatternSet &patterns) {
  patterns.add<MlaLowering, MlaDecodeLowering, CacheInsertLowering,
               AttnResLowering>(
      patterns.getContext());
}

//===- LowerMoeOps.cpp - router and experts -> linalg + scf ---------------===//
//
// The router's scores are a linalg contraction; top-k selection ranks every
// expert against all others (ties to the lower index) and picks ranks
// 0..k-1, all as linalg contractions. Routed experts gather each selected
// expert's rows inside the contractions (reference §5), or, for steps of
// many tokens, are sorted by expert into products batched over experts;
// the only element the host reads is the largest expert count, which sizes
// those products. Everything else maps to kernels on the GPU target.
// kimi.latent_moe is first decomposed into linear / routed_experts /
// rms_norm / linear, which the other patterns then lower.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/LinalgBuilders.h"
#include "lowering/KimiToLinalg/Mxfp4Decode.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "lowering/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include <limits>

using namespace mlir;
using namespace kimi;
using namespace kimi::lowering;
using kimi::kHostReadFn;
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

/// The gate, up and down tables of an MXFP4 `routed_experts` as bytes, or
/// none for dense experts.
SmallVector<Mxfp4Table, 3> mxfp4Tables(OpBuilder &b, Location loc,
                                       RoutedExpertsOp op) {
  SmallVector<Mxfp4Table, 3> tables;
  if (op.getScales().empty())
    return tables;
  Value weights[] = {op.getGateProj(), op.getUpProj(), op.getDownProj()};
  for (unsigned i = 0; i < 3; ++i)
    tables.push_back(packedTable(b, loc, weights[i], op.getScales()[i]));
  return tables;
}

/// Token-sorted experts: every dispatched (token, slot) gets a row of its
/// expert's block in a [E, cap, W] buffer, so the three projections are
/// matrix products batched over the experts that cover the dispatched
/// rows only (cap = the largest expert count, read by the host: the one
/// data-dependent shape), and each token gathers its k rows back.
///
/// A slot is dispatched when its weight is nonzero (router weights are
/// positive; expert-parallel ranks give experts held elsewhere weight 0,
/// which contributes nothing). Its row is its rank among the dispatched
/// slots of the same expert in token order, so every buffer has a static
/// bound (cap <= T) and nothing is dropped.
Value sortedExperts(OpBuilder &b, Location loc, RoutedExpertsOp op, Value z,
                    Value wts, Value ids, bool isSitu, double beta,
                    double linearBeta, Type outElement,
                    const SortedExpertKernels *kernels) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), indexType = b.getIndexType();
  auto gateType = typeOf(op.getGateProj());
  int64_t E = gateType.getDimSize(0), I = gateType.getDimSize(1),
          W = gateType.getDimSize(2);
  int64_t T = typeOf(z).getDimSize(0), k = typeOf(wts).getDimSize(1);
  auto index = [](OpBuilder &nb, Location l, unsigned d) -> Value {
    return linalg::IndexOp::create(nb, l, d);
  };
  auto asIndex = [&](OpBuilder &nb, Location l, Value v) -> Value {
    return isa<IndexType>(v.getType())
               ? v
               : Value(arith::IndexCastOp::create(nb, l, indexType, v));
  };
  auto dispatched = [&](OpBuilder &nb, Location l, Value w) -> Value {
    return arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNE,
                                 toF32(nb, l, w), constF32(nb, l, 0.0));
  };
  auto count = [&](OpBuilder &nb, Location l, Value acc, Value hit) {
    return arith::AddIOp::create(nb, l, acc,
                                 arith::ExtUIOp::create(nb, l, i32, hit));
  };

  auto bufferOf = [&](Value t) {
    RankedTensorType type = typeOf(t);
    return bufferization::ToBufferOp::create(
        b, loc, MemRefType::get(type.getShape(), type.getElementType()), t,
        /*readOnly=*/true);
  };
  Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
  // Rows at the tokens' type when that is bf16 (half the bytes, the same
  // values: the products widen them), else f32.
  Type rowElement = typeOf(z).getElementType().isBF16() ? typeOf(z).getElementType()
                                                        : Type(f32);
  // Scatter: the row of every dispatched slot (t, j), at the indices
  // `rowAt` gives for its expert and rank, gets z[t, :].
  using RowAt = llvm::function_ref<SmallVector<Value>(OpBuilder &, Location,
                                                      Value e, Value r)>;
  auto scatter = [&](Value rows, Value rank, RowAt rowAt) {
    Value zBuf = bufferOf(z), idsBuf = bufferOf(ids), rankBuf = bufferOf(rank),
          wtsBuf = bufferOf(wts);
    scf::ParallelOp::create(
        b, loc, ValueRange{c0, c0, c0},
        ValueRange{cIndex(b, loc, T), cIndex(b, loc, k), cIndex(b, loc, W)},
        ValueRange{c1, c1, c1}, [&](OpBuilder &pb, Location l, ValueRange iv) {
          Value w = memref::LoadOp::create(pb, l, wtsBuf, ValueRange{iv[0], iv[1]});
          scf::IfOp::create(
              pb, l, dispatched(pb, l, w), [&](OpBuilder &ib, Location il) {
                Value e = asIndex(ib, il,
                                  memref::LoadOp::create(ib, il, idsBuf,
                                                         ValueRange{iv[0], iv[1]}));
                Value r = asIndex(ib, il,
                                  memref::LoadOp::create(ib, il, rankBuf,
                                                         ValueRange{iv[0], iv[1]}));
                Value x = fromF32(
                    ib, il,
                    toF32(ib, il,
                          memref::LoadOp::create(ib, il, zBuf,
                                                 ValueRange{iv[0], iv[2]})),
                    rowElement);
                SmallVector<Value> at = rowAt(ib, il, e, r);
                at.push_back(iv[2]);
                memref::StoreOp::create(ib, il, x, rows, at);
                scf::YieldOp::create(ib, il);
              });
        });
  };
  // Gather: out[t, d] = sum_j w[t, j] y[rowAt(ids[t, j], rank[t, j]), d]
  // over dispatched slots (the others read nothing: with no dispatched
  // slot y may have no rows), summed in slot order in f32 and stored at the
  // op's element type: one parallel loop nest, no fill of the sums first
  // and no conversion after.
  auto gather = [&](Value y, Value slotRank, RowAt rowAt) {
    Value init = tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{T, W},
                                         outElement);
    return generic(
        b, loc, init, {}, {b.getMultiDimIdentityMap(2)},
        {IT::parallel, IT::parallel},
        [&](OpBuilder &nb, Location l, ValueRange) -> Value {
          Value t = linalg::IndexOp::create(nb, l, 0);
          Value d = linalg::IndexOp::create(nb, l, 1);
          auto slots = scf::ForOp::create(nb, l, cIndex(nb, l, 0),
                                          cIndex(nb, l, k), cIndex(nb, l, 1),
                                          ValueRange{constF32(nb, l, 0.0)});
          OpBuilder fb = OpBuilder::atBlockBegin(slots.getBody());
          Value j = slots.getInductionVar();
          Value w = tensor::ExtractOp::create(fb, l, wts, ValueRange{t, j});
          auto term = scf::IfOp::create(
              fb, l, dispatched(fb, l, w),
              [&](OpBuilder &ib, Location il) {
                Value e = tensor::ExtractOp::create(ib, il, ids, ValueRange{t, j});
                Value r = tensor::ExtractOp::create(ib, il, slotRank,
                                                    ValueRange{t, j});
                SmallVector<Value> at =
                    rowAt(ib, il, asIndex(ib, il, e), asIndex(ib, il, r));
                at.push_back(d);
                Value row = toF32(ib, il, tensor::ExtractOp::create(ib, il, y, at));
                scf::YieldOp::create(
                    ib, il,
                    ValueRange{arith::MulFOp::create(ib, il, toF32(ib, il, w), row)});
              },
              [&](OpBuilder &ib, Location il) {
                scf::YieldOp::create(ib, il, ValueRange{constF32(ib, il, 0.0)});
              });
          scf::YieldOp::create(
              fb, l,
              ValueRange{arith::AddFOp::create(fb, l, slots.getRegionIterArg(0),
                                               term.getResult(0))});
          return fromF32(nb, l, slots.getResult(0), outElement);
        });
  };

  // The products as kernels over `tiles`, whose tables are built.
  auto kernelProducts = [&](const SortedExpertTiles &tiles) {
    Value tokens = z;
    if (typeOf(z).getElementType() != rowElement)
      tokens = elementwise(b, loc, typeOf(z).clone(rowElement), z,
                           [&](OpBuilder &nb, Location l, ValueRange a) {
                             return a[0];
                           });
    Value h = kernels->glu(b, loc, tokens, tiles);
    return kernels->down(b, loc, h, tiles);
  };
  const int64_t R = T * k;
  // sum_e ceil(counts[e] / tr) <= (sum_e counts[e] + (tr - 1) E) / tr.
  auto tilesFor = [&](int64_t tr) {
    SortedExpertTiles tiles;
    tiles.tiles = std::max<int64_t>(1, (R + (tr - 1) * E) / tr);
    tiles.rows = R;
    return tiles;
  };
  if (kernels && kernels->tables) {
    // One kernel builds the tables; the gather reads each slot's row.
    SortedExpertTiles tiles = tilesFor(kernels->tileRows);
    if (Value row = kernels->tables(b, loc, ids, wts, tiles))
      return gather(kernelProducts(tiles), row,
                    [](OpBuilder &, Location, Value, Value r) {
                      return SmallVector<Value>{r};
                    });
  }

  // Counts and ranks by token blocks of B (a power of two dividing T):
  // hist[e, b] counts the dispatched slots of expert e in block b,
  // before[e, b] those in the blocks ahead of b, and a slot's rank is
  // before[e, its block] plus the slots of e ahead of it in its block (a
  // token's k experts are distinct). The longest reduction is then
  // max(B*k, T/B) instead of T*k; B ~ sqrt(T/k) balances the two (T=2048,
  // k=8: B=16, 128 steps).
  int64_t B = 1;
  while (T % (2 * B) == 0 && 4 * B * B * k <= T)
    B *= 2;
  int64_t blocks = T / B;
  SmallVector<ReassociationIndices> byBlock = {{0, 1}, {2}};
  auto blocked = [&](Value v) {
    RankedTensorType type = typeOf(v);
    return tensor::ExpandShapeOp::create(
        b, loc,
        RankedTensorType::get({blocks, B, k}, type.getElementType()), v,
        byBlock);
  };
  Value ids3 = blocked(ids), wts3 = blocked(wts);
  auto i32Tensor = [&](ArrayRef<int64_t> shape) {
    SmallVector<OpFoldResult> sizes;
    for (int64_t d : shape)
      sizes.push_back(b.getIndexAttr(d));
    return filled(b, loc, sizes, i32, 0);
  };
  // Loops (block, expert, token, slot): the expert innermost of the
  // parallel ones, so that the GPU's threads of a warp, one expert each,
  // read the same block's slots (one broadcast load, not 32 scattered ones:
  // k3-mini's 2048-token chunk took 38 us a call the other way round).
  Value hist =
      linalg::GenericOp::create(
          b, loc, TypeRange{RankedTensorType::get({E, blocks}, i32)},
          ValueRange{ids3, wts3}, ValueRange{i32Tensor({E, blocks})},
          ArrayRef<AffineMap>{dimsMap(ctx, 4, {0, 2, 3}),
                              dimsMap(ctx, 4, {0, 2, 3}),
                              dimsMap(ctx, 4, {1, 0})},
          ArrayRef<IT>{IT::parallel, IT::parallel, IT::reduction,
                       IT::reduction},
          [&](OpBuilder &nb, Location l, ValueRange a) {
            Value mine = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                               asIndex(nb, l, a[0]),
                                               index(nb, l, 1));
            Value hit = arith::AndIOp::create(nb, l, mine,
                                              dispatched(nb, l, a[1]));
            linalg::YieldOp::create(nb, l, ValueRange{count(nb, l, a[2], hit)});
          })
          .getResult(0);
  Value before =
      linalg::GenericOp::create(
          b, loc, TypeRange{RankedTensorType::get({E, blocks}, i32)},
          ValueRange{hist}, ValueRange{i32Tensor({E, blocks})},
          ArrayRef<AffineMap>{dimsMap(ctx, 3, {0, 2}), dimsMap(ctx, 3, {0, 1})},
          ArrayRef<IT>{IT::parallel, IT::parallel, IT::reduction},
          [&](OpBuilder &nb, Location l, ValueRange a) {
            Value ahead = arith::CmpIOp::create(
                nb, l, arith::CmpIPredicate::ult, index(nb, l, 2),
                index(nb, l, 1));
            Value add = arith::SelectOp::create(
                nb, l, ahead, a[0], arith::ConstantIntOp::create(nb, l, 0, 32));
            linalg::YieldOp::create(
                nb, l, ValueRange{arith::AddIOp::create(nb, l, a[1], add)});
          })
          .getResult(0);
  // counts[e]: dispatched slots of expert e.
  Value counts =
      linalg::GenericOp::create(
          b, loc, TypeRange{RankedTensorType::get({E}, i32)}, ValueRange{hist},
          ValueRange{i32Tensor({E})},
          ArrayRef<AffineMap>{dimsMap(ctx, 2, {0, 1}), dimsMap(ctx, 2, {0})},
          ArrayRef<IT>{IT::parallel, IT::reduction},
          [&](OpBuilder &nb, Location l, ValueRange a) {
            linalg::YieldOp::create(
                nb, l, ValueRange{arith::AddIOp::create(nb, l, a[0], a[1])});
          })
          .getResult(0);
  Value inBlock =
      linalg::GenericOp::create(
          b, loc, TypeRange{RankedTensorType::get({blocks, B, k}, i32)},
          ValueRange{ids3, ids3, wts3}, ValueRange{i32Tensor({blocks, B, k})},
          ArrayRef<AffineMap>{dimsMap(ctx, 5, {0, 1, 2}),
                              dimsMap(ctx, 5, {0, 3, 4}),
                              dimsMap(ctx, 5, {0, 3, 4}),
                              dimsMap(ctx, 5, {0, 1, 2})},
          ArrayRef<IT>{IT::parallel, IT::parallel, IT::parallel,
                       IT::reduction, IT::reduction},
          [&](OpBuilder &nb, Location l, ValueRange a) {
            Value same = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                               a[0], a[1]);
            Value earlier = arith::CmpIOp::create(
                nb, l, arith::CmpIPredicate::ult, index(nb, l, 3),
                index(nb, l, 1));
            Value hit = arith::AndIOp::create(
                nb, l, arith::AndIOp::create(nb, l, same, earlier),
                dispatched(nb, l, a[2]));
            linalg::YieldOp::create(nb, l, ValueRange{count(nb, l, a[3], hit)});
          })
          .getResult(0);
  // rank[t, j] = before[e, block] + inBlock (slots not dispatched read
  // expert 0's entry; their rank is never used).
  Value rank3 = generic(
      b, loc, i32Tensor({blocks, B, k}), {ids3, wts3, inBlock},
      {b.getMultiDimIdentityMap(3), b.getMultiDimIdentityMap(3),
       b.getMultiDimIdentityMap(3), b.getMultiDimIdentityMap(3)},
      {IT::parallel, IT::parallel, IT::parallel},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value e = arith::SelectOp::create(nb, l, dispatched(nb, l, a[1]),
                                          asIndex(nb, l, a[0]),
                                          cIndex(nb, l, 0));
        Value ahead = tensor::ExtractOp::create(
            nb, l, before, ValueRange{e, linalg::IndexOp::create(nb, l, 0)});
        return arith::AddIOp::create(nb, l, ahead, a[2]);
      });
  Value rank = tensor::CollapseShapeOp::create(b, loc, rank3, byBlock);

  if (kernels) {
    // The dispatched rows back to back by expert: expert e's are rows
    // offsets[e] .. offsets[e] + counts[e] of [T k, ...] buffers (static:
    // no host read, no padding), cut into tiles of tileRows rows that the
    // kernels' blocks take. tileEnd[e]: the tiles of experts 0 .. e.
    const int64_t tr = kernels->tileRows;
    SortedExpertTiles tiles = tilesFor(tr);
    auto i32c = [&](OpBuilder &nb, Location l, int64_t v) -> Value {
      return arith::ConstantIntOp::create(nb, l, v, 32);
    };
    auto tilesOf = [&](OpBuilder &nb, Location l, Value count) -> Value {
      return arith::DivUIOp::create(
          nb, l, arith::AddIOp::create(nb, l, count, i32c(nb, l, tr - 1)),
          i32c(nb, l, tr));
    };
    // out[e] = sum over e' (before e, or up to e) of f(counts[e']).
    auto scanCounts = [&](bool inclusive, bool inTiles) {
      return generic(
          b, loc, i32Tensor({E}), {counts},
          {dimsMap(ctx, 2, {1}), dimsMap(ctx, 2, {0})},
          {IT::parallel, IT::reduction},
          [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
            Value ahead = arith::CmpIOp::create(
                nb, l,
                inclusive ? arith::CmpIPredicate::ule : arith::CmpIPredicate::ult,
                index(nb, l, 1), index(nb, l, 0));
            Value v = inTiles ? tilesOf(nb, l, a[0]) : a[0];
            return arith::AddIOp::create(
                nb, l, a[1], arith::SelectOp::create(nb, l, ahead, v, i32c(nb, l, 0)));
          });
    };
    Value offsets = scanCounts(false, false);
    Value tileEnd = scanCounts(true, true);
    // Tile y's expert: the number of experts whose tiles end at or before
    // y (experts without rows have no tiles); E past the last tile.
    Value tileExpert = generic(
        b, loc, i32Tensor({tiles.tiles}), {tileEnd},
        {dimsMap(ctx, 2, {1}), dimsMap(ctx, 2, {0})},
        {IT::parallel, IT::reduction},
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value y = arith::IndexCastOp::create(nb, l, i32, index(nb, l, 0));
          Value done = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ule,
                                             a[0], y);
          return count(nb, l, a[1], done);
        });
    // Its rows: start = offsets[e] + (y - first tile of e) tr, end =
    // min(start + tr, offsets[e] + counts[e]); empty past the last tile.
    auto bounds = linalg::GenericOp::create(
        b, loc, TypeRange{typeOf(tileExpert), typeOf(tileExpert)},
        ValueRange{tileExpert},
        ValueRange{i32Tensor({tiles.tiles}), i32Tensor({tiles.tiles})},
        ArrayRef<AffineMap>{b.getMultiDimIdentityMap(1),
                            b.getMultiDimIdentityMap(1),
                            b.getMultiDimIdentityMap(1)},
        ArrayRef<IT>{IT::parallel}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value ex = a[0];
          Value live = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult,
                                             ex, i32c(nb, l, E));
          Value at = asIndex(nb, l, arith::SelectOp::create(nb, l, live, ex,
                                                            i32c(nb, l, 0)));
          Value cnt = tensor::ExtractOp::create(nb, l, counts, ValueRange{at});
          Value off = tensor::ExtractOp::create(nb, l, offsets, ValueRange{at});
          Value firstTile = arith::SubIOp::create(
              nb, l, tensor::ExtractOp::create(nb, l, tileEnd, ValueRange{at}),
              tilesOf(nb, l, cnt));
          Value y = arith::IndexCastOp::create(nb, l, i32, index(nb, l, 0));
          Value start = arith::AddIOp::create(
              nb, l, off,
              arith::MulIOp::create(nb, l, arith::SubIOp::create(nb, l, y, firstTile),
                                    i32c(nb, l, tr)));
          Value end = arith::MinUIOp::create(
              nb, l, arith::AddIOp::create(nb, l, start, i32c(nb, l, tr)),
              arith::AddIOp::create(nb, l, off, cnt));
          linalg::YieldOp::create(
              nb, l,
              ValueRange{arith::SelectOp::create(nb, l, live, start, i32c(nb, l, 0)),
                         arith::SelectOp::create(nb, l, live, end, i32c(nb, l, 0))});
        });
    tiles.expert = tileExpert;
    tiles.start = bounds.getResult(0);
    tiles.end = bounds.getResult(1);

    auto rowAt = [&](OpBuilder &nb, Location l, Value e, Value r) {
      Value off = asIndex(nb, l, tensor::ExtractOp::create(nb, l, offsets, ValueRange{e}));
      return SmallVector<Value>{arith::AddIOp::create(nb, l, off, r)};
    };
    // The kernels read the tokens where they are: only each sorted row's
    // token is scattered, token[offsets[e] + rank] = t.
    Value token = memref::AllocOp::create(b, loc, MemRefType::get({R}, i32));
    {
      Value idsBuf = bufferOf(ids), rankBuf = bufferOf(rank), wtsBuf = bufferOf(wts);
      scf::ParallelOp::create(
          b, loc, ValueRange{c0, c0},
          ValueRange{cIndex(b, loc, T), cIndex(b, loc, k)}, ValueRange{c1, c1},
          [&](OpBuilder &pb, Location l, ValueRange iv) {
            Value w = memref::LoadOp::create(pb, l, wtsBuf, iv);
            scf::IfOp::create(
                pb, l, dispatched(pb, l, w), [&](OpBuilder &ib, Location il) {
                  Value e = asIndex(ib, il, memref::LoadOp::create(ib, il, idsBuf, iv));
                  Value r = asIndex(ib, il, memref::LoadOp::create(ib, il, rankBuf, iv));
                  memref::StoreOp::create(
                      ib, il, arith::IndexCastOp::create(ib, il, i32, iv[0]), token,
                      rowAt(ib, il, e, r));
                  scf::YieldOp::create(ib, il);
                });
          });
    }
    tiles.token = bufferization::ToTensorOp::create(
        b, loc, RankedTensorType::get({R}, i32), token,
        /*restrict=*/true, /*writable=*/true);
    return gather(kernelProducts(tiles), rank, rowAt);
  }
  Value largest =
      linalg::GenericOp::create(
          b, loc, TypeRange{RankedTensorType::get({}, i32)}, ValueRange{counts},
          ValueRange{filled(b, loc, {}, i32, 0)},
          ArrayRef<AffineMap>{dimsMap(ctx, 1, {0}), AffineMap::get(1, 0, ctx)},
          ArrayRef<IT>{IT::reduction},
          [&](OpBuilder &nb, Location l, ValueRange a) {
            linalg::YieldOp::create(
                nb, l, ValueRange{arith::MaxSIOp::create(nb, l, a[0], a[1])});
          })
          .getResult(0);

  // The host reads the largest count (kHostReadFn: on the GPU target a
  // synchronising copy) and sizes the blocks by it, rounded up to 16 rows
  // (fewer distinct product shapes), at most T.
  Value largestBuffer = bufferization::ToBufferOp::create(
      b, loc, MemRefType::get({}, i32), largest, /*readOnly=*/true);
  Value read = func::CallOp::create(b, loc, kHostReadFn, TypeRange{i32},
                                    ValueRange{largestBuffer})
                   .getResult(0);
  Value c15 = cIndex(b, loc, 15), c16 = cIndex(b, loc, 16);
  Value cap = arith::MinUIOp::create(
      b, loc, cIndex(b, loc, T),
      arith::MulIOp::create(
          b, loc,
          arith::DivUIOp::create(
              b, loc,
              arith::AddIOp::create(b, loc, asIndex(b, loc, read), c15), c16),
          c16));

  // Scatter: rows[e, rank, :] = z[t, :] for every dispatched slot.
  auto rowAt = [](OpBuilder &, Location, Value e, Value r) {
    return SmallVector<Value>{e, r};
  };
  auto rowsType = MemRefType::get({E, ShapedType::kDynamic, W}, rowElement);
  Value rows = memref::AllocOp::create(b, loc, rowsType, ValueRange{cap});
  scatter(rows, rank, rowAt);
  Value sortedRows = bufferization::ToTensorOp::create(
      b, loc, RankedTensorType::get({E, ShapedType::kDynamic, W}, rowElement),
      rows,
      /*restrict=*/true, /*writable=*/true);

  // The projections, batched over experts: rows beyond an expert's count
  // hold nothing and are never read back.
  auto mulAdd = [](OpBuilder &nb, Location l, ValueRange a) {
    return arith::AddFOp::create(nb, l, a[2],
                                 arith::MulFOp::create(nb, l, a[0], toF32(nb, l, a[1])));
  };
  SmallVector<IT> batched = {IT::parallel, IT::parallel, IT::parallel,
                             IT::reduction};
  SmallVector<Mxfp4Table, 3> mx = mxfp4Tables(b, loc, op);
  // `which`: 0 gate, 1 up, 2 down. MXFP4 weights are decoded where they
  // are read, (e, n, k) from the loop indices.
  auto project = [&](Value input, Value weights, unsigned which,
                     int64_t out) {
    if (!mx.empty())
      return generic(
          b, loc,
          filled(b, loc, {b.getIndexAttr(E), cap, b.getIndexAttr(out)}, f32,
                 0.0),
          {input}, {dimsMap(ctx, 4, {0, 1, 3}), dimsMap(ctx, 4, {0, 1, 2})},
          batched, [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
            Value wv = mxfp4Element(nb, l, mx[which], index(nb, l, 0),
                                    index(nb, l, 2), index(nb, l, 3));
            return arith::AddFOp::create(
                nb, l, a[1], arith::MulFOp::create(nb, l, a[0], wv));
          });
    return generic(
        b, loc,
        filled(b, loc, {b.getIndexAttr(E), cap, b.getIndexAttr(out)}, f32, 0.0),
        {input, weights},
        {dimsMap(ctx, 4, {0, 1, 3}), dimsMap(ctx, 4, {0, 2, 3}),
         dimsMap(ctx, 4, {0, 1, 2})},
        batched, mulAdd);
  };
  Value g = project(sortedRows, op.getGateProj(), 0, I);
  Value u = project(sortedRows, op.getUpProj(), 1, I);
  Value h = elementwise(b, loc, typeOf(g), {g, u},
                        [&](OpBuilder &hb, Location hl, ValueRange a) {
                          return isSitu ? situ(hb, hl, a[0], a[1], beta,
                                               linearBeta)
                                        : siluGlu(hb, hl, a[0], a[1]);
                        });
  Value y = project(h, op.getDownProj(), 2, W);
  return gather(y, rank, rowAt);
}

struct RoutedExpertsLowering : OpRewritePattern<RoutedExpertsOp> {
  RoutedExpertsLowering(MLIRContext *ctx, int64_t sortedMinTokens)
      : OpRewritePattern(ctx), sortedMinTokens(sortedMinTokens) {}
  int64_t sortedMinTokens;

  LogicalResult matchAndRewrite(RoutedExpertsOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Type f32 = b.getF32Type();
    if (sortedMinTokens > 0 && sortedTokens(op) >= sortedMinTokens) {
      rewriter.replaceOp(op, lowerSortedRoutedExperts(b, op));
      return success();
    }
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

    // Each (token, slot) gathers its expert's rows inside the contraction
    // (ids are read where they are used, never by host code), so the whole
    // layer is data-parallel: g/u[t, j, i], then y[t, j, d], then the
    // weighted sum over the k slots.
    int64_t inner = typeOf(op.getGateProj()).getDimSize(1);
    MLIRContext *ctx = b.getContext();
    auto index = [](OpBuilder &nb, Location l, unsigned d) -> Value {
      return linalg::IndexOp::create(nb, l, d);
    };
    SmallVector<Mxfp4Table, 3> mx = mxfp4Tables(b, loc, op);
    // `which`: 0 gate, 1 up, 2 down (the MXFP4 table to decode).
    auto expertRow = [&](OpBuilder &nb, Location l, Value table,
                         unsigned which, Value id, Value row,
                         Value col) -> Value {
      Value e = arith::IndexCastOp::create(nb, l, nb.getIndexType(), id);
      if (!mx.empty())
        return mxfp4Element(nb, l, mx[which], e, row, col);
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
          Value wg = expertRow(nb, l, op.getGateProj(), 0, a[0], i, w);
          Value wu = expertRow(nb, l, op.getUpProj(), 1, a[0], i, w);
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
              Value wd = expertRow(nb, l, op.getDownProj(), 2, a[0],
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
                                                 int64_t sortedExpertsMinTokens) {
  patterns.add<RouterLowering, QuantileBalanceLowering, QuantileCountsLowering,
               QuantileUpdateLowering>(patterns.getContext());
  populateLatentMoeDecompositionPatterns(patterns);
  patterns.add<RoutedExpertsLowering>(patterns.getContext(),
                                      sortedExpertsMinTokens);
}

Value kimi::lowering::lowerSortedRoutedExperts(OpBuilder &b, RoutedExpertsOp op,
                                               const SortedExpertKernels *kernels) {
  Location loc = op.getLoc();
  Value z = collapseLeading(b, loc, op.getX());
  Value wts = collapseLeading(b, loc, op.getWeights());
  Value ids = collapseLeading(b, loc, op.getIndices());
  bool isSitu = op.getActivation() == GluActivation::situ;
  double beta = isSitu ? op.getBetaAttr().getValueAsDouble() : 0.0;
  double linearBeta = isSitu ? op.getLinearBetaAttr().getValueAsDouble() : 0.0;
  Value result =
      sortedExperts(b, loc, op, z, wts, ids, isSitu, beta, linearBeta,
                    op.getOut().getType().getElementType(), kernels);
  return expandLeadingLike(b, loc, result, op.getX());
}

int64_t kimi::lowering::sortedTokens(RoutedExpertsOp op) {
  ArrayRef<int64_t> shape = op.getX().getType().getShape().drop_back();
  int64_t tokens = 1;
  for (int64_t d : shape)
    if (ShapedType::isDynamic(d))
      return 0;
    else
      tokens *= d;
  return tokens;
}

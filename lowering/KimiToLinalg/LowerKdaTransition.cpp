//===- LowerKdaTransition.cpp - kimi.kda_transition -> loops --------------===//
//
// M = A_T ... A_1 with A_t = Diag(a_t) - beta_t k_t (a_t * k_t)^T, applied
// one token at a time from M = I: r = k_t^T (Diag(a_t) M) (a row of dk), then
// M <- Diag(a_t) M - beta_t k_t r. Each step reads the old M once: O(dk^2)
// per token and head, in f32 (reference §2). The loops are plain scf over
// tensors (bufferized in place); the op runs once per segment and rank.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/LinalgBuilders.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace kimi;
using namespace kimi::lowering;

namespace {

struct KdaTransitionLowering : OpRewritePattern<KdaTransitionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(KdaTransitionOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    auto kType = typeOf(op.getK());
    if (!kType.hasStaticShape())
      return rewriter.notifyMatchFailure(op, "needs static shapes");
    int64_t B = kType.getDimSize(0), T = kType.getDimSize(1),
            H = kType.getDimSize(2), D = kType.getDimSize(3);
    Value k = op.getK(), g = op.getG(), beta = op.getBeta();
    auto at = [](OpBuilder &ob, Location l, Value t, ValueRange idx) {
      return toF32(ob, l, tensor::ExtractOp::create(ob, l, t, idx));
    };
    Type f32 = b.getF32Type();
    Value m = filled(b, loc,
                     {b.getIndexAttr(B), b.getIndexAttr(H), b.getIndexAttr(D),
                      b.getIndexAttr(D)},
                     f32, 0.0);
    Value row = filled(b, loc, {b.getIndexAttr(D)}, f32, 0.0);
    Value result = carryLoop(b, loc, B, m, [&](OpBuilder &b1, Location l1, Value bi,
                                           Value m1) {
      return carryLoop(b1, l1, H, m1, [&](OpBuilder &b2, Location l2, Value h,
                                      Value m2) {
        // M = I for this (batch, head).
        m2 = carryLoop(b2, l2, D, m2, [&](OpBuilder &b3, Location l3, Value i,
                                     Value m3) {
          return Value(tensor::InsertOp::create(
              b3, l3, constF32(b3, l3, 1.0), m3, ValueRange{bi, h, i, i}));
        });
        return carryLoop(b2, l2, T, m2, [&](OpBuilder &b3, Location l3, Value t,
                                        Value m3) {
          // r[j] = sum_l k_l a_l M[l, j]
          Value r = carryLoop(b3, l3, D, row, [&](OpBuilder &b4, Location l4,
                                              Value j, Value r4) {
            auto sum = scf::ForOp::create(
                b4, l4, arith::ConstantIndexOp::create(b4, l4, 0),
                arith::ConstantIndexOp::create(b4, l4, D),
                arith::ConstantIndexOp::create(b4, l4, 1),
                ValueRange{constF32(b4, l4, 0.0)},
                [&](OpBuilder &b5, Location l5, Value li, ValueRange acc) {
                  Value kl = at(b5, l5, k, {bi, t, h, li});
                  Value al = math::ExpOp::create(b5, l5, at(b5, l5, g, {bi, t, h, li}));
                  Value mlj = tensor::ExtractOp::create(b5, l5, m3,
                                                        ValueRange{bi, h, li, j});
                  Value term = arith::MulFOp::create(
                      b5, l5, arith::MulFOp::create(b5, l5, kl, al), mlj);
                  scf::YieldOp::create(
                      b5, l5, Value(arith::AddFOp::create(b5, l5, acc[0], term)));
                });
            return Value(tensor::InsertOp::create(b4, l4, sum.getResult(0), r4,
                                                  ValueRange{j}));
          });
          Value bt = at(b3, l3, beta, {bi, t, h});
          // M[i, j] <- a_i M[i, j] - beta k_i r[j]
          return carryLoop(b3, l3, D, m3, [&](OpBuilder &b4, Location l4, Value i,
                                          Value m4) {
            Value ai = math::ExpOp::create(b4, l4, at(b4, l4, g, {bi, t, h, i}));
            Value bk = arith::MulFOp::create(b4, l4, bt,
                                             at(b4, l4, k, {bi, t, h, i}));
            return carryLoop(b4, l4, D, m4, [&](OpBuilder &b5, Location l5, Value j,
                                            Value m5) {
              Value mij = tensor::ExtractOp::create(b5, l5, m5,
                                                    ValueRange{bi, h, i, j});
              Value rj = tensor::ExtractOp::create(b5, l5, r, ValueRange{j});
              Value v = arith::SubFOp::create(
                  b5, l5, arith::MulFOp::create(b5, l5, ai, mij),
                  arith::MulFOp::create(b5, l5, bk, rj));
              return Value(tensor::InsertOp::create(b5, l5, v, m5,
                                                    ValueRange{bi, h, i, j}));
            });
          });
        });
      });
    });
    rewriter.replaceOp(op, result);
    return success();
  }
};

} // namespace

void kimi::lowering::populateKdaTransitionLoweringPatterns(
    RewritePatternSet &patterns) {
  patterns.add<KdaTransitionLowering>(patterns.getContext());
}

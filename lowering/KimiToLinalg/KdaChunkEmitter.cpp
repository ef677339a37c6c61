//===- KdaChunkEmitter.cpp - IR for one chunk of chunked KDA --------------===//
//
// One chunk of n tokens (n = C, or T mod C for the partial last chunk), with
// G the inclusive cumsum of g from the chunk's first token (causal anchor):
//
//   Akk[i,j] = beta_i sum_d k_id exp(G_id - G_jd) k_jd        (j <  i)
//   Aqk[i,j] =        sum_d q_id exp(G_id - G_jd) k_jd        (j <= i)
//   Tm       = (I + Akk)^-1 = (I - N)(I + N^2)(I + N^4)...   (N = Akk)
//   W = Tm Diag(beta) (exp(G) ⊙ K),   U = Tm Diag(beta) V
//   V_new = U - W S
//   O     = scale ((exp(G) ⊙ Q) S + Aqk V_new)
//   S     = Diag(exp(G_last)) S + (exp(G_last - G) ⊙ K)^T V_new
//
// Derivation from the recurrence (per chunk, S the state before it): the
// state after token t is Diag(e^{G_t}) S + sum_{j<=t} Diag(e^{G_t-G_j}) k_j
// u_j^T, so u_t = beta_t (v_t - (e^{G_t} ⊙ k_t)^T S - sum_{j<t} a_tj u_j)
// with a_tj = sum_d k_td e^{G_td - G_jd} k_jd, i.e. (I + Akk) U_true =
// Diag(beta) (V - (e^G ⊙ K) S): beta multiplies the rows of Akk, W and U.
// o_t = scale S_t^T q_t gives O above with `scale` applied once (the
// reference's Aqk carries the scale; here it is factored out of the sum).
//
// Only matmul-class ops (linalg.matmul, possibly with transposing
// indexing_maps, and for `pairwise` one (i, j, d) contraction generic per
// diagonal matrix) and elementwise linalg.generic ops are used.
//
//===----------------------------------------------------------------------===//

#include "lowering/KimiToLinalg/KdaChunkEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace kimi {

int64_t neumannFactorCount(int64_t n) {
  return n <= 1 ? 0 : static_cast<int64_t>(llvm::Log2_64_Ceil(n));
}

namespace {

using BodyFn = function_ref<Value(OpBuilder &, Location, ValueRange)>;

/// Small helpers that build linalg ops on static f32 tensors.
class TileBuilder {
public:
  TileBuilder(OpBuilder &b, Location loc)
      : b(b), loc(loc), f32(b.getF32Type()) {}

  Value f32Const(double v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }

  Value zeros(ArrayRef<int64_t> shape) {
    Value init = tensor::EmptyOp::create(b, loc, shape, f32);
    return linalg::FillOp::create(b, loc, ValueRange{f32Const(0.0)},
                                  ValueRange{init})
        .getResult(0);
  }

  /// Affine map (d0, ..., d{rank-1}) -> (d{dims[0]}, d{dims[1]}, ...).
  AffineMap proj(unsigned rank, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(rank, 0, exprs, b.getContext());
  }

  /// Elementwise linalg.generic over `shape` (identity output map) producing
  /// one tensor of element type `elt` from `ins` read through `inMaps`.
  /// `body` receives the scalar operands (the output's current value last)
  /// and returns the new element.
  Value elementwise(ArrayRef<int64_t> shape, ArrayRef<Value> ins,
                    ArrayRef<AffineMap> inMaps, BodyFn body,
                    Type elt = nullptr) {
    elt = elt ? elt : f32;
    unsigned rank = shape.size();
    Value init = tensor::EmptyOp::create(b, loc, shape, elt);
    SmallVector<AffineMap> maps(inMaps);
    maps.push_back(b.getMultiDimIdentityMap(rank));
    SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
    auto op = linalg::GenericOp::create(
        b, loc, TypeRange{init.getType()}, ins, ValueRange{init}, maps, iters,
        [&](OpBuilder &nb, Location nl, ValueRange args) {
          linalg::YieldOp::create(nb, nl, body(nb, nl, args));
        });
    return op.getResult(0);
  }

  /// acc + op(A) op(B) as linalg.matmul (transposes through indexing_maps);
  /// `acc` defaults to zeros.
  Value matmul(Value lhs, Value rhs, bool transLhs = false,
               bool transRhs = false, Value acc = nullptr) {
    auto lt = cast<RankedTensorType>(lhs.getType());
    auto rt = cast<RankedTensorType>(rhs.getType());
    int64_t m = lt.getDimSize(transLhs ? 1 : 0);
    int64_t n = rt.getDimSize(transRhs ? 0 : 1);
    if (!acc)
      acc = zeros({m, n});
    auto mm = linalg::MatmulOp::create(b, loc, TypeRange{acc.getType()},
                                       ValueRange{lhs, rhs}, ValueRange{acc});
    if (transLhs || transRhs) {
      // Loop dims (m, n, k).
      AffineMap a = transLhs ? proj(3, {2, 0}) : proj(3, {0, 2});
      AffineMap bm = transRhs ? proj(3, {1, 2}) : proj(3, {2, 1});
      AffineMap c = proj(3, {0, 1});
      mm.setIndexingMapsAttr(b.getAffineMapArrayAttr({a, bm, c}));
    }
    return mm.getResult(0);
  }

  /// i `pred` j on the loop indices of the enclosing linalg.generic.
  static Value indexCmp(OpBuilder &nb, Location nl, arith::CmpIPredicate pred,
                        unsigned lhsDim, unsigned rhsDim) {
    Value i = linalg::IndexOp::create(nb, nl, lhsDim);
    Value j = linalg::IndexOp::create(nb, nl, rhsDim);
    return arith::CmpIOp::create(nb, nl, pred, i, j);
  }

  /// n x n lower-triangular 0/1 matrix (j <= i, or j < i when strict).
  Value lowerTriangle(int64_t n, bool strict) {
    return elementwise(
        {n, n}, {}, {}, [&](OpBuilder &nb, Location nl, ValueRange) -> Value {
          Value in = indexCmp(nb, nl,
                              strict ? arith::CmpIPredicate::ult
                                     : arith::CmpIPredicate::ule,
                              1, 0);
          Value one =
              arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(1.0f));
          Value zero =
              arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(0.0f));
          return arith::SelectOp::create(nb, nl, in, one, zero);
        });
  }

  /// Pairwise log-space contraction for the diagonal tile:
  ///   out[i,j] = sum_d x_id * exp(G_id - G_jd) * k_jd   where j `pred` i,
  /// as one linalg.generic over (i, j, d) with d a reduction; the exponent
  /// is formed as a difference (masked to 0 outside the triangle) before
  /// math.exp, so no factor exp(-G) ever exists.
  Value pairwise(Value x, Value k, Value G, bool strict) {
    auto xt = cast<RankedTensorType>(x.getType());
    int64_t n = xt.getDimSize(0);
    Value init = zeros({n, n});
    SmallVector<AffineMap> maps = {proj(3, {0, 2}), proj(3, {1, 2}),
                                   proj(3, {0, 2}), proj(3, {1, 2}),
                                   proj(3, {0, 1})};
    SmallVector<utils::IteratorType> iters = {utils::IteratorType::parallel,
                                              utils::IteratorType::parallel,
                                              utils::IteratorType::reduction};
    auto op = linalg::GenericOp::create(
        b, loc, TypeRange{init.getType()}, ValueRange{x, k, G, G},
        ValueRange{init}, maps, iters,
        [&](OpBuilder &nb, Location nl, ValueRange a) {
          Value in = indexCmp(nb, nl,
                              strict ? arith::CmpIPredicate::ult
                                     : arith::CmpIPredicate::ule,
                              1, 0);
          Value zero =
              arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(0.0f));
          Value diff = arith::SubFOp::create(nb, nl, a[2], a[3]);
          diff = arith::SelectOp::create(nb, nl, in, diff, zero);
          Value decay = math::ExpOp::create(nb, nl, diff);
          Value t = arith::MulFOp::create(nb, nl, a[0], decay);
          t = arith::MulFOp::create(nb, nl, t, a[1]);
          t = arith::SelectOp::create(nb, nl, in, t, zero);
          linalg::YieldOp::create(
              nb, nl, Value(arith::AddFOp::create(nb, nl, a[4], t)));
        });
    op->setAttr("kimi.pairwise_diagonal", b.getUnitAttr());
    return op.getResult(0);
  }

  OpBuilder &b;
  Location loc;
  Type f32;
};

} // namespace

KdaChunkResults emitKdaChunk(OpBuilder &builder, Location loc,
                             const KdaChunkInputs &in, DiagStrategy diag,
                             double scale, Type outElementType) {
  TileBuilder t(builder, loc);
  OpBuilder &b = builder;
  auto qType = cast<RankedTensorType>(in.q.getType());
  int64_t n = qType.getDimSize(0), dk = qType.getDimSize(1);
  int64_t dv = cast<RankedTensorType>(in.v.getType()).getDimSize(1);

  AffineMap id2 = b.getMultiDimIdentityMap(2);
  AffineMap row = t.proj(2, {0}); // (i, x) -> (i): per-row scalar
  AffineMap col = t.proj(2, {1}); // (i, d) -> (d): per-column vector

  // G = inclusive cumsum of g from the chunk start, as tril(1) @ g: row i
  // adds g_0 .. g_i in order (later rows contribute exact zeros).
  Value G = t.matmul(t.lowerTriangle(n, /*strict=*/false), in.g);
  Value expG = t.elementwise({n, dk}, {G}, {id2},
                             [](OpBuilder &nb, Location nl, ValueRange a) {
                               return Value(math::ExpOp::create(nb, nl, a[0]));
                             });
  auto mul = [](OpBuilder &nb, Location nl, ValueRange a) {
    return Value(arith::MulFOp::create(nb, nl, a[0], a[1]));
  };
  Value qg = t.elementwise({n, dk}, {in.q, expG}, {id2, id2}, mul);
  Value kg = t.elementwise({n, dk}, {in.k, expG}, {id2, id2}, mul);

  // Diagonal-tile products, masked to the (strict) lower triangle.
  Value akk, aqk;
  if (diag == DiagStrategy::dense) {
    // K ⊙ exp(-G): finite only because the decay proof bounds C |L|.
    Value kinv =
        t.elementwise({n, dk}, {in.k, G}, {id2, id2},
                      [](OpBuilder &nb, Location nl, ValueRange a) {
                        Value e = math::ExpOp::create(
                            nb, nl, arith::NegFOp::create(nb, nl, a[1]));
                        return Value(arith::MulFOp::create(nb, nl, a[0], e));
                      });
    Value kk = t.matmul(kg, kinv, false, /*transRhs=*/true);
    Value qk = t.matmul(qg, kinv, false, /*transRhs=*/true);
    akk = t.elementwise(
        {n, n}, {kk, in.beta}, {id2, row},
        [](OpBuilder &nb, Location nl, ValueRange a) {
          Value lower =
              TileBuilder::indexCmp(nb, nl, arith::CmpIPredicate::ult, 1, 0);
          Value zero =
              arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(0.0f));
          Value scaled = arith::MulFOp::create(nb, nl, a[1], a[0]);
          return Value(arith::SelectOp::create(nb, nl, lower, scaled, zero));
        });
    aqk = t.elementwise(
        {n, n}, {qk}, {id2}, [](OpBuilder &nb, Location nl, ValueRange a) {
          Value lower =
              TileBuilder::indexCmp(nb, nl, arith::CmpIPredicate::ule, 1, 0);
          Value zero =
              arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(0.0f));
          return Value(arith::SelectOp::create(nb, nl, lower, a[0], zero));
        });
  } else {
    Value kk = t.pairwise(in.k, in.k, G, /*strict=*/true);
    akk =
        t.elementwise({n, n}, {kk, in.beta}, {id2, row},
                      [](OpBuilder &nb, Location nl, ValueRange a) {
                        return Value(arith::MulFOp::create(nb, nl, a[1], a[0]));
                      });
    aqk = t.pairwise(in.q, in.k, G, /*strict=*/false);
  }

  // Tm = (I + N)^-1 = (I - N)(I + N^2)(I + N^4)... ; X (I + P) = X + X P.
  Value tm = t.elementwise(
      {n, n}, {akk}, {id2}, [](OpBuilder &nb, Location nl, ValueRange a) {
        Value diagonal =
            TileBuilder::indexCmp(nb, nl, arith::CmpIPredicate::eq, 0, 1);
        Value one = arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(1.0f));
        Value zero =
            arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(0.0f));
        Value eye = arith::SelectOp::create(nb, nl, diagonal, one, zero);
        return Value(arith::SubFOp::create(nb, nl, eye, a[0]));
      });
  Value power = akk;
  for (int64_t f = 1; f < neumannFactorCount(n); ++f) {
    power = t.matmul(power, power);
    tm = t.matmul(tm, power, false, false, /*acc=*/tm);
  }

  // W = Tm Diag(beta) (exp(G) ⊙ K), U = Tm Diag(beta) V.
  auto rowScale = [](OpBuilder &nb, Location nl, ValueRange a) {
    return Value(arith::MulFOp::create(nb, nl, a[1], a[0]));
  };
  Value bk = t.elementwise({n, dk}, {kg, in.beta}, {id2, row}, rowScale);
  Value bv = t.elementwise({n, dv}, {in.v, in.beta}, {id2, row}, rowScale);
  Value w = t.matmul(tm, bk);
  Value u = t.matmul(tm, bv);

  // V_new = U - W S.
  Value ws = t.matmul(w, in.state);
  Value vnew =
      t.elementwise({n, dv}, {u, ws}, {id2, id2},
                    [](OpBuilder &nb, Location nl, ValueRange a) {
                      return Value(arith::SubFOp::create(nb, nl, a[0], a[1]));
                    });

  // O = scale ((exp(G) ⊙ Q) S + Aqk V_new).
  Value inter = t.matmul(qg, in.state);
  Value o = t.matmul(aqk, vnew, false, false, /*acc=*/inter);
  Value out = t.elementwise(
      {n, dv}, {o}, {id2},
      [&](OpBuilder &nb, Location nl, ValueRange a) {
        Value s = arith::ConstantOp::create(
            nb, nl, nb.getF32FloatAttr(static_cast<float>(scale)));
        Value r = arith::MulFOp::create(nb, nl, s, a[0]);
        if (outElementType != t.f32)
          r = arith::TruncFOp::create(nb, nl, outElementType, r);
        return r;
      },
      outElementType);

  // S = Diag(exp(G_last)) S + (exp(G_last - G) ⊙ K)^T V_new.
  SmallVector<OpFoldResult> offs = {b.getIndexAttr(n - 1), b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(1), b.getIndexAttr(dk)};
  SmallVector<OpFoldResult> ones = {b.getIndexAttr(1), b.getIndexAttr(1)};
  Value gLast = tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get({dk}, t.f32), G, offs, sizes, ones);
  Value kd =
      t.elementwise({n, dk}, {in.k, G, gLast}, {id2, id2, col},
                    [](OpBuilder &nb, Location nl, ValueRange a) {
                      Value diff = arith::SubFOp::create(nb, nl, a[2], a[1]);
                      Value e = math::ExpOp::create(nb, nl, diff);
                      return Value(arith::MulFOp::create(nb, nl, a[0], e));
                    });
  Value decayed =
      t.elementwise({dk, dv}, {in.state, gLast}, {id2, row},
                    [](OpBuilder &nb, Location nl, ValueRange a) {
                      Value e = math::ExpOp::create(nb, nl, a[1]);
                      return Value(arith::MulFOp::create(nb, nl, e, a[0]));
                    });
  Value state = t.matmul(kd, vnew, /*transLhs=*/true, false, /*acc=*/decayed);
  return {out, state};
}

} // namespace kimi

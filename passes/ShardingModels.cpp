//===- ShardingModels.cpp - ShardingInterface for kimi ops ----------------===//
//
// Each op describes its iteration space as a loop nest: one loop per index
// of the op's math, its kind (parallel or reduction), whether it may be split
// over grid axes, and one map per operand and result from the loops to the
// tensor's dimensions. Upstream's default `getShardingOption` reads the maps;
// ours then refuses options that split a loop the op cannot split (a
// normalised dimension, the recurrence's time axis, a top-k axis) or that do
// not divide its extent, so propagation picks another option and inserts a
// resharding instead.
//
// Partitioning clones the op with per-rank types and all-reduces results
// whose reduction loops are split. Three rules need more:
//   * kimi.weight_ref yields one block of the parameter (`parts`);
//   * routed experts split by expert (EP) remap the routing to the local
//     experts and drop the others' contributions before the all-reduce; with
//     tokens also split, the tokens are all-gathered first and the result
//     reduce-scattered back, so nothing is dropped and no buffer depends on
//     the routing;
//   * kimi.latent_moe with split experts is decomposed (down projection,
//     local experts, all-reduce, norm, up projection): the norm needs the
//     complete sum.
//
//===----------------------------------------------------------------------===//

#include "passes/ShardingModels.h"
#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/Dialect/Func/Extensions/ShardingExtensions.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::shard;
using namespace kimi;
using utils::IteratorType;

namespace {

//===----------------------------------------------------------------------===//
// Loop nests
//===----------------------------------------------------------------------===//

struct LoopNest {
  explicit LoopNest(MLIRContext *ctx) : ctx(ctx) {}

  unsigned loop(IteratorType kind, bool canSplit) {
    kinds.push_back(kind);
    splittable.push_back(canSplit);
    return kinds.size() - 1;
  }
  unsigned par(bool canSplit = true) {
    return loop(IteratorType::parallel, canSplit);
  }
  unsigned red(bool canSplit = false) {
    return loop(IteratorType::reduction, canSplit);
  }
  SmallVector<unsigned> pars(int64_t n, bool canSplit = true) {
    SmallVector<unsigned> loops;
    for (int64_t i = 0; i < n; ++i)
      loops.push_back(par(canSplit));
    return loops;
  }
  /// The next operand or result indexes these loops, one per dimension.
  void tensor(ArrayRef<unsigned> loops) {
    maps.emplace_back(loops.begin(), loops.end());
  }
  void tensor(ArrayRef<unsigned> prefix, ArrayRef<unsigned> rest) {
    SmallVector<unsigned> all(prefix);
    all.append(rest.begin(), rest.end());
    tensor(all);
  }
  SmallVector<AffineMap> affineMaps() const {
    SmallVector<AffineMap> out;
    for (const SmallVector<unsigned> &m : maps) {
      SmallVector<AffineExpr> exprs;
      for (unsigned l : m)
        exprs.push_back(getAffineDimExpr(l, ctx));
      out.push_back(AffineMap::get(kinds.size(), 0, exprs, ctx));
    }
    return out;
  }

  MLIRContext *ctx;
  SmallVector<IteratorType> kinds;
  SmallVector<bool> splittable;
  SmallVector<SmallVector<unsigned>> maps; // operands, then results
};

int64_t rankOf(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }

/// Elementwise: every dimension is an independent parallel loop.
LoopNest elementwise(Operation *op) {
  LoopNest n(op->getContext());
  SmallVector<unsigned> all = n.pars(rankOf(op->getResult(0)));
  for (unsigned i = 0, e = op->getNumOperands() + op->getNumResults(); i < e; ++i)
    n.tensor(all);
  return n;
}

/// `[tokens..., D]` in and out with a weight `[D]`: D is normalised over.
LoopNest normalised(Operation *op, unsigned rowOperands, bool weight) {
  LoopNest n(op->getContext());
  SmallVector<unsigned> t = n.pars(rankOf(op->getResult(0)) - 1);
  unsigned d = n.par(/*canSplit=*/false);
  for (unsigned i = 0; i < rowOperands; ++i)
    n.tensor(t, {d});
  if (weight)
    n.tensor({d});
  n.tensor(t, {d});
  return n;
}

/// The routed-expert part shared by routed_experts and latent_moe:
/// loops e (expert), i (intermediate), the expert input width `in` and the
/// output width `out`; expert weights gate/up [E, I, in], down [E, out, I].
struct ExpertLoops {
  unsigned e, i;
};
ExpertLoops expertWeights(LoopNest &n, unsigned in, unsigned out,
                          unsigned numScales) {
  ExpertLoops x;
  x.e = n.red(/*canSplit=*/true);
  x.i = n.red(/*canSplit=*/true);
  n.tensor({x.e, x.i, in});  // gate_proj
  n.tensor({x.e, x.i, in});  // up_proj
  n.tensor({x.e, out, x.i}); // down_proj
  unsigned shapes[3][3] = {{x.e, x.i, in}, {x.e, x.i, in}, {x.e, out, x.i}};
  for (unsigned s = 0; s < numScales; ++s)
    n.tensor(shapes[s % 3]);
  return x;
}

/// Expand or collapse shape: one loop per expanded dimension; a split of a
/// collapsed dimension is a split of the outermost dimension of its group.
LoopNest reshape(MLIRContext *ctx, ArrayRef<ReassociationIndices> groups,
                 bool expand) {
  LoopNest n(ctx);
  SmallVector<unsigned> collapsed, expanded;
  for (const ReassociationIndices &group : groups)
    for (size_t j = 0; j < group.size(); ++j) {
      expanded.push_back(n.par(/*canSplit=*/j == 0));
      if (j == 0)
        collapsed.push_back(expanded.back());
    }
  n.tensor(expand ? collapsed : expanded);
  n.tensor(expand ? expanded : collapsed);
  return n;
}

/// kimi.mla (latents ckv and k_pe) and kimi.mla_decode (one cache): batch
/// and heads split; kv_b_proj [H * (dn + dv), R] is cut in whole heads.
LoopNest mla(MLIRContext *ctx, unsigned latents, bool gate,
             bool lengths = false) {
  LoopNest n(ctx);
  unsigned b = n.par(), t = n.par(false), h = n.par();
  unsigned e = n.par(false), s = n.red(), v = n.par(false);
  n.tensor({b, t, h, e});
  for (unsigned i = 0; i < latents; ++i)
    n.tensor({b, s, n.red()});
  n.tensor({h, n.red()});
  if (gate)
    n.tensor({b, t, h, v});
  if (lengths)
    n.tensor({b});
  n.tensor({b, t, h, v});
  return n;
}

LoopNest nestOf(Operation *op) {
  MLIRContext *ctx = op->getContext();
  return llvm::TypeSwitch<Operation *, LoopNest>(op)
      .Case<WeightRefOp>([&](auto) {
        LoopNest n(ctx);
        n.tensor(n.pars(rankOf(op->getResult(0))));
        return n;
      })
      .Case<EmbedOp>([&](EmbedOp e) {
        LoopNest n(ctx);
        SmallVector<unsigned> t = n.pars(rankOf(e.getIds()));
        unsigned v = n.red(), d = n.par();
        n.tensor({v, d});
        n.tensor(t);
        n.tensor(t, {d});
        return n;
      })
      .Case<LinearOp>([&](LinearOp l) {
        LoopNest n(ctx);
        SmallVector<unsigned> t = n.pars(rankOf(l.getX()) - 1);
        unsigned o = n.par(), k = n.red(/*canSplit=*/true);
        n.tensor(t, {k});
        n.tensor({o, k});
        if (l.getScale())
          n.tensor({o, k});
        n.tensor(t, {o});
        return n;
      })
      .Case<RmsNormOp>([&](auto) { return normalised(op, 1, true); })
      .Case<L2NormOp>([&](auto) { return normalised(op, 1, false); })
      .Case<GatedRmsNormOp>([&](auto) { return normalised(op, 2, true); })
      .Case<SigmoidOp, SituGluOp>([&](auto) { return elementwise(op); })
      .Case<ShortConvOp>([&](ShortConvOp c) {
        LoopNest n(ctx);
        // Time splits with a (K-1)-token halo from the previous rank.
        unsigned b = n.par(), t = n.par(), ch = n.par();
        unsigned one = n.par(false), tap = n.par(false), s = n.par(false);
        n.tensor({b, t, ch});
        n.tensor({ch, one, tap});
        if (c.getState())
          n.tensor({b, s, ch});
        n.tensor({b, t, ch});
        n.tensor({b, s, ch});
        return n;
      })
      .Case<KdaGateOp>([&](auto) {
        LoopNest n(ctx);
        unsigned b = n.par(), t = n.par(), h = n.par(), d = n.par();
        n.tensor({b, t, h, d});
        n.tensor({h});
        n.tensor({h, d});
        n.tensor({b, t, h, d});
        return n;
      })
      .Case<KdaOp>([&](KdaOp k) {
        // dv columns of the state evolve independently; dk is contracted.
        // Time splits by segments summarised as (M, S_ext).
        // Packed variable-length sequences (cu_seqlens) keep T and the
        // sequence axis whole: the states are [N, ...], not [B, ...].
        LoopNest n(ctx);
        const bool varlen = static_cast<bool>(k.getCuSeqlens());
        unsigned b = n.par(!varlen), t = n.par(!varlen), h = n.par();
        unsigned dk = n.par(false), dv = n.par();
        unsigned sq = varlen ? n.par(false) : b;
        n.tensor({b, t, h, dk}); // q
        n.tensor({b, t, h, dk}); // k
        n.tensor({b, t, h, dv}); // v
        n.tensor({b, t, h, dk}); // g
        n.tensor({b, t, h});     // beta
        if (k.getInitialState())
          n.tensor({sq, h, dk, dv});
        if (varlen)
          n.tensor({n.par(false)}); // cu_seqlens
        n.tensor({b, t, h, dv});
        n.tensor({sq, h, dk, dv});
        return n;
      })
      .Case<MlaOp>([&](MlaOp m) { return mla(ctx, 2, m.getGate() != nullptr); })
      .Case<MlaDecodeOp>(
          [&](MlaDecodeOp m) {
            return mla(ctx, 1, m.getGate() != nullptr,
                       m.getLengths() != nullptr);
          })
      .Case<AttnResOp>([&](AttnResOp a) {
        LoopNest n(ctx);
        SmallVector<unsigned> t = n.pars(rankOf(a.getOut()) - 1);
        unsigned d = n.par(false);
        for (size_t i = 0; i < a.getSources().size(); ++i)
          n.tensor(t, {d});
        if (rankOf(a.getQuery()) == 2)
          n.tensor({n.par(false), d});
        else
          n.tensor({d});
        n.tensor({d});
        n.tensor(t, {d});
        return n;
      })
      .Case<RouterOp>([&](RouterOp r) {
        LoopNest n(ctx);
        SmallVector<unsigned> t = n.pars(rankOf(r.getX()) - 1);
        unsigned d = n.red(), e = n.par(false), k = n.par(false);
        n.tensor(t, {d});
        n.tensor({e, d});
        n.tensor({e});
        n.tensor(t, {k});
        n.tensor(t, {k});
        if (r.getMargins())
          n.tensor(t, {e});
        return n;
      })
      .Case<RoutedExpertsOp>([&](RoutedExpertsOp r) {
        LoopNest n(ctx);
        SmallVector<unsigned> t = n.pars(rankOf(r.getX()) - 1);
        unsigned k = n.red(), in = n.red(), out = n.par(false);
        n.tensor(t, {in});
        n.tensor(t, {k});
        n.tensor(t, {k});
        // expertWeights appends the expert maps in operand order.
        expertWeights(n, in, out, r.getScales().size());
        n.tensor(t, {out});
        return n;
      })
      .Case<LatentMoeOp>([&](LatentMoeOp m) {
        LoopNest n(ctx);
        SmallVector<unsigned> t = n.pars(rankOf(m.getX()) - 1);
        unsigned k = n.red(), d = n.red(), w = n.par(false),
                 out = n.par(false);
        n.tensor(t, {d});
        n.tensor(t, {k});
        n.tensor(t, {k});
        n.tensor({w, d}); // down_latent
        expertWeights(n, w, w, m.getScales().size());
        if (m.getNorm())
          n.tensor({w});
        n.tensor({out, w}); // up_latent
        n.tensor(t, {out});
        return n;
      })
      .Case<QuantileBalanceOp>([&](QuantileBalanceOp q) {
        // Rows (tokens) split only in the histogram form: per-rank counts,
        // one integer all-reduce. The exact quantile needs every row.
        LoopNest n(ctx);
        unsigned rows = n.red(/*canSplit=*/q.getBins().has_value()),
                 e = n.par(false);
        n.tensor({rows, e});
        n.tensor({e});
        n.tensor({e});
        return n;
      })
      .Case<tensor::ExpandShapeOp>([&](tensor::ExpandShapeOp x) {
        return reshape(ctx, x.getReassociationIndices(), /*expand=*/true);
      })
      .Case<tensor::CollapseShapeOp>([&](tensor::CollapseShapeOp x) {
        return reshape(ctx, x.getReassociationIndices(), /*expand=*/false);
      })
      .Case<tensor::ExtractSliceOp>([&](tensor::ExtractSliceOp x) {
        // Only dimensions taken whole may be split.
        LoopNest n(ctx);
        SmallVector<unsigned> all;
        ArrayRef<int64_t> src = x.getSourceType().getShape();
        for (int64_t d = 0; d < x.getSourceType().getRank(); ++d) {
          bool whole = x.getStaticOffsets()[d] == 0 &&
                       x.getStaticStrides()[d] == 1 &&
                       x.getStaticSizes()[d] == src[d] &&
                       !ShapedType::isDynamic(src[d]);
          all.push_back(n.par(whole));
        }
        n.tensor(all);
        n.tensor(all);
        return n;
      })
      .Case<tensor::ConcatOp>([&](tensor::ConcatOp c) {
        LoopNest n(ctx);
        SmallVector<unsigned> all;
        for (int64_t d = 0; d < c.getResultType().getRank(); ++d)
          all.push_back(n.par(d != static_cast<int64_t>(c.getDim())));
        for (unsigned i = 0; i < c.getInputs().size() + 1; ++i)
          n.tensor(all);
        return n;
      })
      .Default([&](Operation *) { return LoopNest(ctx); });
}

//===----------------------------------------------------------------------===//
// Partitioning helpers
//===----------------------------------------------------------------------===//

GridOp gridOf(Operation *op, ArrayRef<Sharding> operands,
              ArrayRef<Sharding> results, SymbolTableCollection &symbols) {
  for (ArrayRef<Sharding> list : {results, operands})
    for (const Sharding &s : list)
      if (s && s.getGridAttr())
        return getGridOrNull(op, s.getGridAttr(), symbols);
  return nullptr;
}

/// Grid axes assigned to each loop by the operand and result shardings.
SmallVector<SmallVector<GridAxis>> loopAxes(const LoopNest &nest,
                                            ArrayRef<Sharding> operands,
                                            ArrayRef<Sharding> results) {
  SmallVector<SmallVector<GridAxis>> axes(nest.kinds.size());
  auto visit = [&](const Sharding &s, ArrayRef<unsigned> map) {
    if (!s)
      return;
    for (auto [d, split] : llvm::enumerate(s.getSplitAxes()))
      if (d < map.size() && axes[map[d]].empty())
        axes[map[d]].assign(split.asArrayRef().begin(),
                            split.asArrayRef().end());
  };
  for (auto [i, s] : llvm::enumerate(operands))
    if (i < nest.maps.size())
      visit(s, nest.maps[i]);
  for (auto [i, s] : llvm::enumerate(results))
    if (operands.size() + i < nest.maps.size())
      visit(s, nest.maps[operands.size() + i]);
  return axes;
}

int64_t groupSize(GridOp grid, ArrayRef<GridAxis> axes) {
  int64_t n = 1;
  for (GridAxis a : axes)
    n *= grid.getShape()[a];
  return n;
}

Type localType(Type t, GridOp grid, const Sharding &s) {
  if (!s || !grid || !isa<RankedTensorType>(t))
    return t;
  return shardType(t, grid, s);
}

/// Clones `op` on the partitioned operands with per-rank result types.
Operation *cloneLocal(Operation &op, ArrayRef<Value> operands,
                      ArrayRef<Sharding> results, GridOp grid, OpBuilder &b) {
  IRMapping map;
  map.map(op.getOperands(), operands);
  Operation *copy = b.clone(op, map);
  for (auto [r, s] : llvm::zip(copy->getResults(), results))
    r.setType(localType(r.getType(), grid, s));
  return copy;
}

Value allReduce(OpBuilder &b, Location loc, Value v, GridOp grid,
                ArrayRef<GridAxis> axes) {
  return AllReduceOp::create(b, loc, v, grid.getSymName(), axes,
                             ReductionKind::Sum)
      .getResult();
}

/// The linear index of this process within the group of grid `axes`.
Value groupIndex(OpBuilder &b, Location loc, GridOp grid,
                 ArrayRef<GridAxis> axes) {
  auto multi = ProcessMultiIndexOp::create(b, loc, grid.getSymName(), axes);
  Value index = arith::ConstantIndexOp::create(b, loc, 0);
  for (auto [j, a] : llvm::enumerate(axes)) {
    Value size = arith::ConstantIndexOp::create(b, loc, grid.getShape()[a]);
    index = arith::MulIOp::create(b, loc, index, size);
    index = arith::AddIOp::create(b, loc, index, multi->getResult(j));
  }
  return index;
}

Value filled(OpBuilder &b, Location loc, RankedTensorType type, Value scalar) {
  return tensor::SplatOp::create(b, loc, scalar, type).getResult();
}

/// Routing restricted to the experts of this rank: indices become local
/// (`global - first`), and the weight of an expert held elsewhere is 0 (its
/// index is clamped to 0, a valid local expert, so the gather stays in range).
std::pair<Value, Value> localRouting(OpBuilder &b, Location loc, Value weights,
                                     Value indices, int64_t localExperts,
                                     GridOp grid, ArrayRef<GridAxis> axes) {
  auto idxType = cast<RankedTensorType>(indices.getType());
  auto wType = cast<RankedTensorType>(weights.getType());
  Type it = idxType.getElementType();
  Value first = arith::MulIOp::create(
      b, loc, groupIndex(b, loc, grid, axes),
      arith::ConstantIndexOp::create(b, loc, localExperts));
  Value firstI = arith::IndexCastOp::create(b, loc, it, first);
  Value local = arith::SubIOp::create(b, loc, indices,
                                      filled(b, loc, idxType, firstI));
  Value zeroI = filled(b, loc, idxType,
                       arith::ConstantOp::create(b, loc, b.getIntegerAttr(it, 0)));
  Value countI = filled(
      b, loc, idxType,
      arith::ConstantOp::create(b, loc, b.getIntegerAttr(it, localExperts)));
  Value geZero =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, local, zeroI);
  Value ltCount =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, local, countI);
  Value mine = arith::AndIOp::create(b, loc, geZero, ltCount);
  Value zeroW = filled(b, loc, wType,
                       arith::ConstantOp::create(
                           b, loc, b.getFloatAttr(wType.getElementType(), 0.0)));
  Value w = arith::SelectOp::create(b, loc, mine, weights, zeroW);
  Value idx = arith::SelectOp::create(b, loc, mine, local, zeroI);
  return {w, idx};
}

/// The token loops split by the shardings, as (tensor dim, grid axes).
SmallVector<std::pair<int64_t, SmallVector<GridAxis>>>
splitTokenDims(const SmallVector<SmallVector<GridAxis>> &axes,
               int64_t tokenDims) {
  SmallVector<std::pair<int64_t, SmallVector<GridAxis>>> out;
  for (int64_t d = 0; d < tokenDims; ++d)
    if (!axes[d].empty())
      out.push_back({d, axes[d]});
  return out;
}

Value gatherTokens(OpBuilder &b, Location loc, Value v, GridOp grid,
                   ArrayRef<std::pair<int64_t, SmallVector<GridAxis>>> dims) {
  for (auto &[dim, axes] : dims) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape[dim] *= groupSize(grid, axes);
    v = AllGatherOp::create(b, loc, t.clone(shape), grid.getSymName(), axes, v,
                            APInt(64, dim))
            .getResult();
  }
  return v;
}

/// Block `index` (a dynamic index) of `blocks` rows along dim 0 of `v`.
Value blockAt(OpBuilder &b, Location loc, Value v, Value index, int64_t rows) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  shape[0] = rows;
  SmallVector<OpFoldResult> offsets(t.getRank(), b.getIndexAttr(0)), sizes,
      strides(t.getRank(), b.getIndexAttr(1));
  offsets[0] = arith::MulIOp::create(
                   b, loc, index, arith::ConstantIndexOp::create(b, loc, rows))
                   .getResult();
  for (int64_t d : shape)
    sizes.push_back(b.getIndexAttr(d));
  return tensor::ExtractSliceOp::create(b, loc, t.clone(shape), v, offsets,
                                        sizes, strides);
}

/// All ranks' copies of `v` stacked along dim 0.
Value gatherRows(OpBuilder &b, Location loc, Value v, GridOp grid,
                 ArrayRef<GridAxis> axes) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(t.getShape());
  shape[0] *= groupSize(grid, axes);
  return AllGatherOp::create(b, loc, t.clone(shape), grid.getSymName(), axes,
                             v, APInt(64, 0))
      .getResult();
}

Value zerosLike(OpBuilder &b, Location loc, RankedTensorType t) {
  Value zero = arith::ConstantOp::create(
      b, loc, b.getFloatAttr(t.getElementType(), 0.0));
  return tensor::SplatOp::create(b, loc, zero, t).getResult();
}

/// Identity matrices over the last two dimensions of `t` (f32), one per
/// index of the others.
Value identityLike(OpBuilder &b, Location loc, RankedTensorType t) {
  Value empty = tensor::EmptyOp::create(b, loc, t.getShape(), t.getElementType());
  int64_t rank = t.getRank();
  SmallVector<AffineMap> maps{b.getMultiDimIdentityMap(rank)};
  SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, loc, TypeRange{t}, ValueRange{}, ValueRange{empty}, maps, iters,
             [&](OpBuilder &nb, Location nl, ValueRange) {
               Value i = linalg::IndexOp::create(nb, nl, rank - 2);
               Value j = linalg::IndexOp::create(nb, nl, rank - 1);
               Value diag = arith::CmpIOp::create(
                   nb, nl, arith::CmpIPredicate::eq, i, j);
               Value one = arith::ConstantOp::create(
                   nb, nl, nb.getFloatAttr(t.getElementType(), 1.0));
               Value zero = arith::ConstantOp::create(
                   nb, nl, nb.getFloatAttr(t.getElementType(), 0.0));
               linalg::YieldOp::create(
                   nb, nl, ValueRange{arith::SelectOp::create(nb, nl, diag, one, zero)});
             })
      .getResult(0);
}

/// short_conv with time split: each rank convolves its segment starting
/// from the last K-1 inputs of the previous rank's segment (rank 0: the
/// initial state), taken from one all-gather of every rank's tail; the final
/// state is the last rank's tail.
LogicalResult partitionShortConvTime(ShortConvOp conv, ArrayRef<Value> operands,
                                     GridOp grid, ArrayRef<GridAxis> axes,
                                     IRMapping &partitionMap, OpBuilder &b) {
  Location loc = conv.getLoc();
  Value x = operands[0], w = operands[1];
  auto xt = cast<RankedTensorType>(x.getType());
  int64_t batch = xt.getDimSize(0), tokens = xt.getDimSize(1),
          channels = xt.getDimSize(2);
  int64_t halo = cast<RankedTensorType>(w.getType()).getDimSize(2) - 1;
  if (tokens < halo)
    return conv.emitOpError() << "sequence split leaves " << tokens
                              << " tokens per rank, fewer than the "
                              << halo << "-token halo";
  auto haloType = RankedTensorType::get({batch, halo, channels},
                                        xt.getElementType());
  SmallVector<OpFoldResult> offsets = {b.getIndexAttr(0),
                                       b.getIndexAttr(tokens - halo),
                                       b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(batch), b.getIndexAttr(halo),
                                     b.getIndexAttr(channels)};
  SmallVector<OpFoldResult> strides(3, b.getIndexAttr(1));
  Value tail = tensor::ExtractSliceOp::create(b, loc, haloType, x, offsets,
                                              sizes, strides);
  Value tails = gatherRows(b, loc, tail, grid, axes);
  Value rank = groupIndex(b, loc, grid, axes);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rank,
                                      zero);
  Value prevRank = arith::SelectOp::create(
      b, loc, first, zero,
      arith::SubIOp::create(b, loc, rank,
                            arith::ConstantIndexOp::create(b, loc, 1)));
  Value prev = blockAt(b, loc, tails, prevRank, batch);
  Value init = conv.getState() ? operands[2] : zerosLike(b, loc, haloType);
  if (init.getType() != haloType)
    return conv.emitOpError() << "sequence split needs the state in the "
                                 "activation type "
                              << xt.getElementType();
  Value state = arith::SelectOp::create(b, loc, first, init, prev);
  auto finalType = cast<RankedTensorType>(conv.getFinalState().getType());
  auto local = ShortConvOp::create(
      b, loc, xt, finalType.clone({batch, halo, channels}), x, w, state,
      conv.getSiluAttr());
  Value last = blockAt(
      b, loc, tails,
      arith::ConstantIndexOp::create(b, loc, groupSize(grid, axes) - 1), batch);
  if (xt.getElementType() != finalType.getElementType())
    last = arith::ExtFOp::create(b, loc, finalType.clone({batch, halo, channels}),
                                 last);
  partitionMap.map(conv.getOut(), local.getOut());
  partitionMap.map(conv.getFinalState(), last);
  return success();
}

/// S <- M_p S + S_p for p in [0, count): the composition of the gathered
/// segment summaries (reference §2), M in f32.
Value foldSegments(OpBuilder &b, Location loc, Value state, Value ms, Value ss,
                   Value count, int64_t batch) {
  auto st = cast<RankedTensorType>(state.getType());
  int64_t heads = st.getDimSize(1), dk = st.getDimSize(2), dv = st.getDimSize(3);
  auto loop = scf::ForOp::create(
      b, loc, arith::ConstantIndexOp::create(b, loc, 0), count,
      arith::ConstantIndexOp::create(b, loc, 1), ValueRange{state},
      [&](OpBuilder &lb, Location l, Value p, ValueRange it) {
        SmallVector<ReassociationIndices> merge = {{0, 1}, {2}, {3}};
        Value m = tensor::CollapseShapeOp::create(
            lb, l, blockAt(lb, l, ms, p, batch), merge);
        Value s = tensor::CollapseShapeOp::create(lb, l, it[0], merge);
        auto prodType = RankedTensorType::get({batch * heads, dk, dv},
                                              st.getElementType());
        Value init = zerosLike(lb, l, prodType);
        Value prod = linalg::BatchMatmulOp::create(lb, l, ValueRange{m, s},
                                                   ValueRange{init})
                         ->getResult(0);
        Value next = arith::AddFOp::create(
            lb, l, tensor::ExpandShapeOp::create(lb, l, st, prod, merge),
            blockAt(lb, l, ss, p, batch));
        scf::YieldOp::create(lb, l, next);
      });
  return loop.getResult(0);
}

/// kda with time split: each rank summarises its segment as (M, S_ext) (the
/// transition product and the final state from zero), one all-gather each,
/// folds the earlier ranks' summaries into its initial state and runs its
/// segment from there; the final state folds all of them.
LogicalResult partitionKdaTime(KdaOp kda, ArrayRef<Value> operands,
                               ArrayRef<Sharding> resultShardings, GridOp grid,
                               ArrayRef<GridAxis> axes, IRMapping &partitionMap,
                               OpBuilder &b) {
  Location loc = kda.getLoc();
  auto outType = cast<RankedTensorType>(
      localType(kda.getOut().getType(), grid, resultShardings[0]));
  auto kt = cast<RankedTensorType>(operands[1].getType());
  int64_t batch = kt.getDimSize(0), heads = kt.getDimSize(2),
          dk = kt.getDimSize(3), dv = outType.getDimSize(3);
  if (!cast<RankedTensorType>(kda.getFinalState().getType()).getElementType().isF32() ||
      kda.getCuSeqlens())
    return kda.emitOpError("sequence parallelism needs an f32 state and no "
                           "cu_seqlens (one sequence per batch row)");
  auto stateType = RankedTensorType::get({batch, heads, dk, dv}, b.getF32Type());
  ValueRange qkvgb = ValueRange(operands).take_front(5);
  auto ext = KdaOp::create(b, loc, outType, stateType, qkvgb[0], qkvgb[1],
                           qkvgb[2], qkvgb[3], qkvgb[4], Value(), Value(),
                           kda.getScaleAttr(), kda.getDecayAttr());
  // M is the segment's final state from S = I with no values (M I + 0):
  // one more kimi.kda, so it takes the chunked path (and the KDA kernels on
  // the GPU) like the segment itself, where the transition op walks the
  // tokens one by one. Its output (q = k) is unused.
  auto mType = RankedTensorType::get({batch, heads, dk, dk}, b.getF32Type());
  auto noValues = zerosLike(b, loc, kt);
  auto transition = KdaOp::create(
      b, loc, kt, mType, qkvgb[1], qkvgb[1], noValues, qkvgb[3], qkvgb[4],
      identityLike(b, loc, mType), Value(), kda.getScaleAttr(),
      kda.getDecayAttr());
  Value m = transition.getFinalState();
  Value ms = gatherRows(b, loc, m, grid, axes);
  Value ss = gatherRows(b, loc, ext.getFinalState(), grid, axes);
  Value init = kda.getInitialState() ? operands[5] : zerosLike(b, loc, stateType);
  Value rank = groupIndex(b, loc, grid, axes);
  Value start = foldSegments(b, loc, init, ms, ss, rank, batch);
  Value all = arith::ConstantIndexOp::create(b, loc, groupSize(grid, axes));
  Value final = foldSegments(b, loc, init, ms, ss, all, batch);
  auto local = KdaOp::create(b, loc, outType, stateType, qkvgb[0], qkvgb[1],
                             qkvgb[2], qkvgb[3], qkvgb[4], start, Value(),
                             kda.getScaleAttr(), kda.getDecayAttr());
  partitionMap.map(kda.getOut(), local.getOut());
  partitionMap.map(kda.getFinalState(), final);
  return success();
}

/// Routed experts (or the latent MoE) with experts or their intermediate
/// dimension split.
///
/// Tokens replicated (tp): each rank runs its experts on the tokens routed to
/// them (weight 0 for experts held elsewhere) and the contributions are
/// all-reduced. Tokens split too (sp/dp, with ep): the dispatch gathers the
/// routed tokens of the group (for the latent MoE the 3584-wide latents,
/// projected down on their own rank first) with their routing, each rank
/// computes its experts' contributions to every token, and the combine is a
/// reduce-scatter that hands each rank the complete sums of its own tokens.
/// Every buffer has a static shape: nothing is dropped and no count crosses
/// to the host.
LogicalResult partitionExperts(Operation &op, ArrayRef<Value> operands,
                               ArrayRef<Sharding> operandShardings,
                               ArrayRef<Sharding> resultShardings,
                               IRMapping &partitionMap,
                               SymbolTableCollection &symbols,
                               OpBuilder &b) {
  LoopNest nest = nestOf(&op);
  GridOp grid = gridOf(&op, operandShardings, resultShardings, symbols);
  SmallVector<SmallVector<GridAxis>> axes =
      loopAxes(nest, operandShardings, resultShardings);
  Location loc = op.getLoc();
  auto moe = dyn_cast<LatentMoeOp>(op);
  Value x = operands[0], weights = operands[1], indices = operands[2];
  int64_t tokenDims = rankOf(x) - 1;
  // Loop numbering of nestOf: tokens, k, then (latent: d, w, out | routed:
  // in, out), then e, i.
  unsigned eLoop = tokenDims + (moe ? 4 : 3), iLoop = eLoop + 1;
  bool splitE = !axes[eLoop].empty(), splitI = !axes[iLoop].empty();
  if (!splitE && !splitI) {
    Operation *copy = cloneLocal(op, operands, resultShardings, grid, b);
    partitionMap.map(op.getResult(0), copy->getResult(0));
    return success();
  }
  auto opType = cast<RankedTensorType>(op.getResult(0).getType());
  auto withLast = [](Value v, int64_t last, Type et) {
    SmallVector<int64_t> shape(cast<RankedTensorType>(v.getType()).getShape());
    shape.back() = last;
    return RankedTensorType::get(shape, et);
  };
  // The experts' input: the latent for the latent MoE, computed on the
  // token's own rank.
  Value in = x;
  if (moe) {
    int64_t width =
        cast<RankedTensorType>(operands[3].getType()).getDimSize(0);
    in = LinearOp::create(b, loc, withLast(x, width, opType.getElementType()),
                          x, operands[3], Value());
  }
  auto tokens = splitTokenDims(axes, tokenDims);
  if (!tokens.empty()) {
    // Dispatch: the group's routed tokens and their routing.
    in = gatherTokens(b, loc, in, grid, tokens);
    weights = gatherTokens(b, loc, weights, grid, tokens);
    indices = gatherTokens(b, loc, indices, grid, tokens);
  }
  ValueRange expert = ValueRange(operands).slice(moe ? 4 : 3, 3);
  int64_t localExperts =
      cast<RankedTensorType>(expert[0].getType()).getDimSize(0);
  if (splitE)
    std::tie(weights, indices) = localRouting(b, loc, weights, indices,
                                              localExperts, grid, axes[eLoop]);
  size_t firstScale = moe ? 7 : 6;
  size_t numScales = moe ? moe.getScales().size()
                         : operands.size() - firstScale;
  SmallVector<Value> scales(operands.begin() + firstScale,
                            operands.begin() + firstScale + numScales);
  auto attrs = [&](auto o) {
    return std::make_tuple(o.getActivationAttr(), o.getBetaAttr(),
                           o.getLinearBetaAttr());
  };
  auto [act, beta, linearBeta] =
      moe ? attrs(moe) : attrs(cast<RoutedExpertsOp>(op));
  int64_t width = cast<RankedTensorType>(in.getType()).getShape().back();
  Value r = RoutedExpertsOp::create(
      b, loc, withLast(in, width, opType.getElementType()), in, weights,
      indices, expert[0], expert[1], expert[2], scales, act, beta, linearBeta);

  // Combine: sum the contributions over the expert group; with tokens split
  // on the same axes, scatter each rank its own tokens' sums.
  SmallVector<GridAxis> reduceAxes(axes[eLoop]);
  reduceAxes.append(axes[iLoop]);
  SmallVector<GridAxis> tokenAxes;
  for (auto &[dim, dimAxes] : tokens)
    tokenAxes.append(dimAxes);
  if (tokens.size() == 1 && tokenAxes == reduceAxes) {
    auto t = cast<RankedTensorType>(r.getType());
    SmallVector<int64_t> shape(t.getShape());
    int64_t dim = tokens[0].first;
    shape[dim] /= groupSize(grid, tokenAxes);
    r = ReduceScatterOp::create(b, loc, t.clone(shape), grid.getSymName(),
                                tokenAxes, r, ReductionKind::Sum,
                                APInt(64, dim))
            .getResult();
  } else {
    r = allReduce(b, loc, r, grid, reduceAxes);
    for (auto &[dim, dimAxes] : tokens)
      r = AllSliceOp::create(b, loc, r, grid, dimAxes, dim).getResult();
  }
  if (moe) {
    if (moe.getNorm())
      r = RmsNormOp::create(b, loc, r.getType(), r,
                            operands[operands.size() - 2], moe.getEpsAttr());
    r = LinearOp::create(b, loc,
                         withLast(r, opType.getShape().back(),
                                  opType.getElementType()),
                         r, operands.back(), Value());
  }
  partitionMap.map(op.getResult(0), r);
  return success();
}

/// Tensor reshapes, slices and concatenations rebuilt on per-rank operands
/// (their static shapes live in attributes); null for other ops.
Value rebuildTensorOp(Operation *op, ArrayRef<Value> operands, Type resultType,
                      OpBuilder &b) {
  Location loc = op->getLoc();
  auto type = dyn_cast_or_null<RankedTensorType>(resultType);
  if (auto x = dyn_cast<tensor::ExpandShapeOp>(op))
    return tensor::ExpandShapeOp::create(b, loc, type, operands[0],
                                         x.getReassociationIndices());
  if (auto x = dyn_cast<tensor::CollapseShapeOp>(op))
    return tensor::CollapseShapeOp::create(b, loc, type, operands[0],
                                           x.getReassociationIndices());
  if (auto x = dyn_cast<tensor::ExtractSliceOp>(op)) {
    SmallVector<OpFoldResult> sizes;
    for (int64_t d : type.getShape())
      sizes.push_back(b.getIndexAttr(d));
    return tensor::ExtractSliceOp::create(b, loc, type, operands[0],
                                          x.getMixedOffsets(), sizes,
                                          x.getMixedStrides());
  }
  if (auto x = dyn_cast<tensor::ConcatOp>(op))
    return tensor::ConcatOp::create(b, loc, x.getDim(), operands);
  return Value();
}

//===----------------------------------------------------------------------===//
// The model
//===----------------------------------------------------------------------===//

template <typename OpTy>
struct KimiSharding
    : public ShardingInterface::ExternalModel<KimiSharding<OpTy>, OpTy> {
  SmallVector<IteratorType> getLoopIteratorTypes(Operation *op) const {
    return nestOf(op).kinds;
  }

  SmallVector<ReductionKind> getReductionLoopIteratorKinds(Operation *op) const {
    SmallVector<ReductionKind> kinds;
    for (IteratorType t : nestOf(op).kinds)
      if (t == IteratorType::reduction)
        kinds.push_back(ReductionKind::Sum);
    return kinds;
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    return nestOf(op).affineMaps();
  }

  FailureOr<ShardingOption>
  getShardingOption(Operation *op, ArrayRef<Sharding> operandShardings,
                    ArrayRef<Sharding> resultShardings) const {
    FailureOr<ShardingOption> option = shard::detail::defaultGetShardingOption(
        op, operandShardings, resultShardings);
    // Upstream refuses one grid axis on two loops; routed experts take
    // tokens and experts split on the same axes (dispatch and combine).
    if (failed(option) && isa<RoutedExpertsOp, LatentMoeOp>(op))
      option = expertOption(op, operandShardings);
    if (failed(option) || option->empty)
      return option;
    LoopNest nest = nestOf(op);
    SymbolTableCollection symbols;
    GridOp grid = getGridOrNull(op, option->grid, symbols);
    SmallVector<int64_t> extent = loopExtents(op, nest);
    for (auto [l, axes] : llvm::enumerate(option->shardingArray)) {
      if (axes.empty())
        continue;
      if (!nest.splittable[l])
        return failure();
      if (grid && extent[l] > 0 && extent[l] % groupSize(grid, axes))
        return failure();
    }
    // A time split of the short conv needs segments of at least its halo.
    if (auto conv = dyn_cast<ShortConvOp>(op); conv && grid &&
                                              option->shardingArray.size() > 1 &&
                                              !option->shardingArray[1].empty()) {
      int64_t halo = conv.getWeight().getType().getDimSize(2) - 1;
      if (extent[1] / groupSize(grid, option->shardingArray[1]) < halo)
        return failure();
    }
    return option;
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbols,
                          OpBuilder &b) const {
    GridOp grid = gridOf(op, operandShardings, resultShardings, symbols);
    Location loc = op->getLoc();
    if (isa<RoutedExpertsOp, LatentMoeOp>(op))
      return partitionExperts(*op, operands, operandShardings, resultShardings,
                              partitionMap, symbols, b);
    if (isa<ShortConvOp, KdaOp>(op)) {
      SmallVector<SmallVector<GridAxis>> axes =
          loopAxes(nestOf(op), operandShardings, resultShardings);
      if (!axes[1].empty()) {
        if (auto conv = dyn_cast<ShortConvOp>(op))
          return partitionShortConvTime(conv, operands, grid, axes[1],
                                        partitionMap, b);
        return partitionKdaTime(cast<KdaOp>(op), operands, resultShardings,
                                grid, axes[1], partitionMap, b);
      }
    }
    if (auto q = dyn_cast<QuantileBalanceOp>(op)) {
      SmallVector<SmallVector<GridAxis>> axes =
          loopAxes(nestOf(op), operandShardings, resultShardings);
      if (!axes[0].empty()) {
        // Histogram of this rank's rows, counts summed over the ranks, the
        // bias from the sums (q from all rows).
        auto margins = cast<RankedTensorType>(q.getMargins().getType());
        int64_t experts = margins.getDimSize(1), bins = *q.getBins();
        Value counts = QuantileCountsOp::create(
            b, loc, RankedTensorType::get({experts, bins}, b.getI32Type()),
            operands[0], operands[1], bins);
        counts = allReduce(b, loc, counts, grid, axes[0]);
        Value bias = QuantileUpdateOp::create(
            b, loc, q.getNewBias().getType(), counts, operands[1],
            margins.getDimSize(0), q.getTopK());
        partitionMap.map(q.getNewBias(), bias);
        return success();
      }
    }
    if (auto ref = dyn_cast<WeightRefOp>(op)) {
      Sharding s = resultShardings.empty() ? Sharding() : resultShardings[0];
      auto type = cast<RankedTensorType>(localType(ref.getType(), grid, s));
      SmallVector<int64_t> parts;
      bool split = false;
      for (auto [whole, block] :
           llvm::zip(ref.getType().getShape(), type.getShape())) {
        parts.push_back(whole / block);
        split |= whole != block;
      }
      auto local = WeightRefOp::create(b, loc, type, ref.getNameAttr(),
                                       split ? b.getDenseI64ArrayAttr(parts)
                                             : DenseI64ArrayAttr());
      partitionMap.map(ref.getResult(), local.getResult());
      return success();
    }
    Type resultType = op->getNumResults()
                          ? localType(op->getResult(0).getType(), grid,
                                      resultShardings[0])
                          : Type();
    if (Value v = rebuildTensorOp(op, operands, resultType, b)) {
      partitionMap.map(op->getResult(0), v);
      return success();
    }
    // Generic: clone with per-rank types, then sum the partial results of
    // split reduction loops.
    LoopNest nest = nestOf(op);
    SmallVector<SmallVector<GridAxis>> axes =
        loopAxes(nest, operandShardings, resultShardings);
    SmallVector<GridAxis> reduceAxes;
    for (auto [l, kind] : llvm::enumerate(nest.kinds))
      if (kind == IteratorType::reduction)
        reduceAxes.append(axes[l]);
    // A result without uses has no annotation: it is split like its loops.
    std::vector<Sharding> results(resultShardings.begin(), resultShardings.end());
    for (auto [i, s] : llvm::enumerate(results)) {
      if (s || !grid || !isa<RankedTensorType>(op->getResult(i).getType()))
        continue;
      SmallVector<GridAxesAttr> split;
      for (unsigned l : nest.maps[op->getNumOperands() + i])
        split.push_back(GridAxesAttr::get(op->getContext(), axes[l]));
      s = Sharding::get(FlatSymbolRefAttr::get(grid.getSymNameAttr()), split);
    }
    Operation *copy = cloneLocal(*op, operands, results, grid, b);
    for (auto [orig, local] : llvm::zip(op->getResults(), copy->getResults())) {
      Value v = local;
      if (!reduceAxes.empty())
        v = allReduce(b, loc, v, grid, reduceAxes);
      partitionMap.map(orig, v);
    }
    return success();
  }

private:
  /// Tokens from the tokens' shardings, experts from the expert weights'.
  static FailureOr<ShardingOption>
  expertOption(Operation *op, ArrayRef<Sharding> operandShardings) {
    LoopNest nest = nestOf(op);
    SmallVector<SmallVector<GridAxis>> axes =
        loopAxes(nest, operandShardings, {});
    FlatSymbolRefAttr grid;
    for (const Sharding &s : operandShardings)
      if (s && s.getGridAttr())
        grid = s.getGridAttr();
    if (!grid)
      return failure();
    ShardingArray array(axes.begin(), axes.end());
    removeTrailingEmptySubArray(array);
    return ShardingOption(array, grid);
  }

  /// The extent of each loop: the smallest tensor dimension it indexes
  /// (kv_b_proj's head rows index h with H * (dn + dv) rows).
  static SmallVector<int64_t> loopExtents(Operation *op, const LoopNest &nest) {
    SmallVector<int64_t> extent(nest.kinds.size(), -1);
    SmallVector<Value> values(op->getOperands());
    values.append(op->getResults().begin(), op->getResults().end());
    for (auto [v, map] : llvm::zip(values, nest.maps)) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      if (!t)
        continue;
      for (auto [d, l] : llvm::enumerate(map)) {
        int64_t size = t.getDimSize(d);
        if (!ShapedType::isDynamic(size) &&
            (extent[l] < 0 || size < extent[l]))
          extent[l] = size;
      }
    }
    return extent;
  }
};

/// func.call of a layer function: kimi-shard annotates its operands and
/// results as the callee's arguments and results (the callee is partitioned
/// on its own), so propagation has nothing to decide and partitioning only
/// retypes the call to the callee's per-rank signature.
struct CallSharding
    : public ShardingInterface::ExternalModel<CallSharding, func::CallOp> {
  SmallVector<IteratorType> getLoopIteratorTypes(Operation *) const {
    return {};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *) const { return {}; }
  FailureOr<ShardingOption> getShardingOption(Operation *, ArrayRef<Sharding>,
                                              ArrayRef<Sharding>) const {
    return ShardingOption::makeEmpty();
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<Sharding> operandShardings,
                          ArrayRef<Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbols,
                          OpBuilder &b) const {
    GridOp grid = gridOf(op, operandShardings, resultShardings, symbols);
    Operation *copy = cloneLocal(*op, operands, resultShardings, grid, b);
    partitionMap.map(op->getResults(), copy->getResults());
    return success();
  }
};

template <typename... Ops>
void attachKimi(MLIRContext *ctx) {
  (Ops::template attachInterface<KimiSharding<Ops>>(*ctx), ...);
}

template <typename... Ops>
void attachElementwise(MLIRContext *ctx) {
  (Ops::template attachInterface<ElementwiseShardingInterface<Ops>>(*ctx), ...);
}

} // namespace

void kimi::registerKimiShardingModels(DialectRegistry &registry) {
  registry.insert<ShardDialect, linalg::LinalgDialect, scf::SCFDialect>();
  // func.return forwards the shardings of the results; func.call of a layer
  // function takes its callee's. (The inliner extension lets a pipeline
  // inline the layers instead.)
  func::registerInlinerExtension(registry);
  func::registerShardingInterfaceExternalModels(registry);
  registry.addExtension(+[](MLIRContext *ctx, func::FuncDialect *) {
    func::CallOp::attachInterface<CallSharding>(*ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, KimiDialect *) {
    attachKimi<WeightRefOp, EmbedOp, LinearOp, RmsNormOp, L2NormOp,
               GatedRmsNormOp, SigmoidOp, SituGluOp, ShortConvOp, KdaGateOp,
               KdaOp, MlaOp, MlaDecodeOp, AttnResOp, RouterOp, RoutedExpertsOp,
               LatentMoeOp, QuantileBalanceOp>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    attachKimi<tensor::ExpandShapeOp, tensor::CollapseShapeOp,
               tensor::ExtractSliceOp, tensor::ConcatOp>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, arith::ArithDialect *) {
    attachElementwise<arith::AddFOp, arith::SubFOp, arith::MulFOp,
                      arith::DivFOp, arith::MaximumFOp, arith::MinimumFOp,
                      arith::NegFOp>(ctx);
  });
}

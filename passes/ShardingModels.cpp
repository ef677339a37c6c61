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
LoopNest mla(MLIRContext *ctx, unsigned latents, bool gate) {
  LoopNest n(ctx);
  unsigned b = n.par(), t = n.par(false), h = n.par();
  unsigned e = n.par(false), s = n.red(), v = n.par(false);
  n.tensor({b, t, h, e});
  for (unsigned i = 0; i < latents; ++i)
    n.tensor({b, s, n.red()});
  n.tensor({h, n.red()});
  if (gate)
    n.tensor({b, t, h, v});
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
        unsigned b = n.par(), t = n.par(false), ch = n.par();
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
        LoopNest n(ctx);
        unsigned b = n.par(), t = n.par(false), h = n.par();
        unsigned dk = n.par(false), dv = n.par();
        n.tensor({b, t, h, dk}); // q
        n.tensor({b, t, h, dk}); // k
        n.tensor({b, t, h, dv}); // v
        n.tensor({b, t, h, dk}); // g
        n.tensor({b, t, h});     // beta
        if (k.getInitialState())
          n.tensor({b, h, dk, dv});
        n.tensor({b, t, h, dv});
        n.tensor({b, h, dk, dv});
        return n;
      })
      .Case<MlaOp>([&](MlaOp m) { return mla(ctx, 2, m.getGate() != nullptr); })
      .Case<MlaDecodeOp>(
          [&](MlaDecodeOp m) { return mla(ctx, 1, m.getGate() != nullptr); })
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
      .Case<QuantileBalanceOp>([&](auto) {
        // The target load N k / E needs every row and every expert: the
        // histogram form that shards rows is not implemented yet.
        LoopNest n(ctx);
        unsigned rows = n.red(), e = n.par(false);
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

/// Routed experts (or the latent MoE) with experts or their intermediate
/// dimension split. `expertIn` is the experts' input (tokens, width W).
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
  bool latent = isa<LatentMoeOp>(op);
  Value x = operands[0], weights = operands[1], indices = operands[2];
  int64_t tokenDims = rankOf(x) - 1;
  // Loop numbering of nestOf: tokens, k, then (latent: d, w, out | routed:
  // in, out), then e, i.
  unsigned eLoop = tokenDims + (latent ? 4 : 3), iLoop = eLoop + 1;
  bool splitE = !axes[eLoop].empty(), splitI = !axes[iLoop].empty();
  if (!splitE && !splitI) {
    Operation *copy = cloneLocal(op, operands, resultShardings, grid, b);
    partitionMap.map(op.getResult(0), copy->getResult(0));
    return success();
  }
  auto tokens = splitTokenDims(axes, tokenDims);
  if (!tokens.empty() && (splitE || splitI)) {
    // Experts see every token: gather the routed tokens, scatter the sums.
    x = gatherTokens(b, loc, x, grid, tokens);
    weights = gatherTokens(b, loc, weights, grid, tokens);
    indices = gatherTokens(b, loc, indices, grid, tokens);
  }
  ValueRange expert = ValueRange(operands).slice(latent ? 4 : 3, 3);
  int64_t localExperts = cast<RankedTensorType>(expert[0].getType()).getDimSize(0);
  if (splitE)
    std::tie(weights, indices) = localRouting(b, loc, weights, indices,
                                              localExperts, grid, axes[eLoop]);
  SmallVector<GridAxis> reduceAxes(axes[eLoop]);
  reduceAxes.append(axes[iLoop]);

  SmallVector<int64_t> outShape(cast<RankedTensorType>(x.getType()).getShape());
  auto opType = cast<RankedTensorType>(op.getResult(0).getType());
  outShape.back() = opType.getShape().back();
  auto outType = RankedTensorType::get(outShape, opType.getElementType());
  Value result;
  if (auto routed = dyn_cast<RoutedExpertsOp>(op)) {
    SmallVector<Value> scales(operands.begin() + 6, operands.end());
    result = RoutedExpertsOp::create(
        b, loc, outType, x, weights, indices, expert[0], expert[1], expert[2],
        scales, routed.getActivationAttr(), routed.getBetaAttr(),
        routed.getLinearBetaAttr());
    if (!reduceAxes.empty())
      result = allReduce(b, loc, result, grid, reduceAxes);
  } else {
    auto moe = cast<LatentMoeOp>(op);
    Value downLatent = operands[3];
    int64_t width = cast<RankedTensorType>(downLatent.getType()).getDimSize(0);
    SmallVector<int64_t> zShape(outType.getShape());
    zShape.back() = width;
    auto zType = outType.clone(zShape);
    Value z = LinearOp::create(b, loc, zType, x, downLatent, Value());
    SmallVector<Value> scales(operands.begin() + 7,
                              operands.begin() + 7 + moe.getScales().size());
    Value r = RoutedExpertsOp::create(
        b, loc, zType, z, weights, indices, expert[0], expert[1], expert[2],
        scales, moe.getActivationAttr(), moe.getBetaAttr(),
        moe.getLinearBetaAttr());
    if (!reduceAxes.empty())
      r = allReduce(b, loc, r, grid, reduceAxes);
    if (moe.getNorm())
      r = RmsNormOp::create(b, loc, zType, r, operands[operands.size() - 2],
                            moe.getEpsAttr());
    result = LinearOp::create(b, loc, outType, r, operands.back(), Value());
  }
  if (!tokens.empty() && (splitE || splitI)) {
    // Every rank holds the full sum of all tokens: keep its own rows.
    // (The reduce-scatter over a replicated sum would multiply it by the
    // group size, so slice instead.)
    for (auto &[dim, dimAxes] : tokens)
      result = AllSliceOp::create(b, loc, result, grid, dimAxes, dim)
                   .getResult();
  }
  partitionMap.map(op.getResult(0), result);
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
  registry.insert<ShardDialect>();
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

//===- WarpReductions.cpp - reduction loops over the lanes of a warp ------===//
//
// kimi-gpu-warp-reductions: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <algorithm>
#include <limits>

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUWARPREDUCTIONS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
constexpr int64_t kWarp = 32;

/// One accumulation `store(combine(load(M[I]), x), M[I])` of the loop body.
struct Accumulator {
  memref::LoadOp load;
  Operation *combine;
  memref::StoreOp store;
  Value x; // the value combined in
};

bool isCombiner(Operation *op) {
  return isa<arith::AddFOp, arith::MaximumFOp, arith::MaxNumFOp>(op);
}

/// The combiner's identity in `type`: what lanes with no iteration
/// contribute.
APFloat identityValue(Operation *combine, FloatType type) {
  return isa<arith::AddFOp>(combine)
             ? APFloat::getZero(type.getFloatSemantics())
             : APFloat::getInf(type.getFloatSemantics(), /*Negative=*/true);
}

Value identity(OpBuilder &b, Location loc, Operation *combine, Type type) {
  auto ft = cast<FloatType>(type);
  return arith::ConstantOp::create(
      b, loc, b.getFloatAttr(ft, identityValue(combine, ft)));
}

Value combineWith(OpBuilder &b, Location loc, Operation *combine, Value a,
                  Value c) {
  if (isa<arith::AddFOp>(combine))
    return arith::AddFOp::create(b, loc, a, c);
  if (isa<arith::MaximumFOp>(combine))
    return arith::MaximumFOp::create(b, loc, a, c);
  return arith::MaxNumFOp::create(b, loc, a, c);
}

/// Whether `v` is computed inside `loop` (its body or a nested region).
bool definedIn(Value v, scf::ForOp loop) {
  return loop->isAncestor(v.getParentBlock()->getParentOp());
}

/// The loop's accumulators, or failure when the body is anything else.
FailureOr<SmallVector<Accumulator>> matchAccumulators(scf::ForOp loop) {
  SmallVector<Accumulator> accs;
  Block *body = loop.getBody();
  for (Operation &op : body->without_terminator()) {
    if (auto store = dyn_cast<memref::StoreOp>(&op)) {
      Operation *combine = store.getValue().getDefiningOp();
      // f32 only: a shuffle moves one 32-bit value per lane.
      if (!combine || !isCombiner(combine) || combine->getBlock() != body ||
          !store.getValue().getType().isF32())
        return failure();
      for (Value i : store.getIndices())
        if (definedIn(i, loop))
          return failure();
      // One operand is the load of the same element, the other the input.
      for (unsigned side = 0; side < 2; ++side) {
        auto load = combine->getOperand(side).getDefiningOp<memref::LoadOp>();
        if (!load || load.getMemRef() != store.getMemRef() ||
            load.getIndices() != store.getIndices() ||
            load->getBlock() != body || !load->hasOneUse() ||
            !combine->hasOneUse())
          continue;
        accs.push_back({load, combine, store, combine->getOperand(1 - side)});
        break;
      }
      if (accs.empty() || accs.back().store != store)
        return failure();
      continue;
    }
    if (isa<memref::LoadOp>(op) || isPure(&op))
      continue;
    return failure();
  }
  if (accs.empty())
    return failure();
  // Nothing else touches an accumulated buffer, and the inputs never read
  // the running value.
  for (Accumulator &a : accs) {
    for (Operation &op : body->without_terminator()) {
      auto load = dyn_cast<memref::LoadOp>(&op);
      if (load && load != a.load && load.getMemRef() == a.store.getMemRef())
        return failure();
    }
    SmallVector<Value> work = {a.x};
    DenseSet<Value> seen;
    while (!work.empty()) {
      Value v = work.pop_back_val();
      if (!seen.insert(v).second)
        continue;
      Operation *def = v.getDefiningOp();
      if (!def || def->getBlock() != body)
        continue;
      if (def == a.load || llvm::any_of(accs, [&](Accumulator &o) {
            return def == o.load.getOperation() || def == o.combine;
          }))
        return failure();
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
  }
  return accs;
}

/// The buffer `v` is: itself, or what a view of it (subview, reshape, ...)
/// looks into.
Value viewedBuffer(Value v) {
  while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
    v = view.getViewSource();
  return v;
}

/// Whether `op` or an op nested in it has an operand that views `buffer`.
bool touches(Operation *op, Value buffer) {
  WalkResult r = op->walk([&](Operation *nested) {
    for (Value v : nested->getOperands())
      if (viewedBuffer(v) == buffer)
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return r.wasInterrupted();
}

/// Whether `par` runs one iteration per element of `m` and `indices` (of
/// an access of `m` in its body) are its induction variables: every
/// dimension of `m` is one variable ranging over it from 0 by 1.
bool onePerElement(scf::ParallelOp par, ValueRange indices, Value m) {
  auto type = dyn_cast<MemRefType>(m.getType());
  if (!type || !type.hasStaticShape() ||
      indices.size() != par.getInductionVars().size() ||
      indices.size() != size_t(type.getRank()))
    return false;
  llvm::SmallDenseSet<unsigned> used;
  for (auto [d, index] : llvm::enumerate(indices)) {
    auto arg = dyn_cast<BlockArgument>(index);
    if (!arg || arg.getOwner() != par.getBody() ||
        !used.insert(arg.getArgNumber()).second)
      return false;
    unsigned k = arg.getArgNumber();
    std::optional<int64_t> lo = getConstantIntValue(par.getLowerBound()[k]),
                           hi = getConstantIntValue(par.getUpperBound()[k]),
                           st = getConstantIntValue(par.getStep()[k]);
    if (lo != 0 || st != 1 || hi != type.getDimSize(d))
      return false;
  }
  return true;
}

/// The fill that leaves accumulator `a`'s buffer at the identity of its
/// combine right before `par` (which writes each element once): the
/// nearest op before `par` that touches the buffer is an `scf.parallel`
/// whose body is one store of that constant to each element. Null when
/// there is none, the buffer is a view, or the value is another one.
scf::ParallelOp identityFill(scf::ParallelOp par, Accumulator a) {
  Value m = a.store.getMemRef();
  if (viewedBuffer(m) != m || !m.getDefiningOp<memref::AllocOp>() ||
      !onePerElement(par, a.store.getIndices(), m))
    return nullptr;
  for (Operation *op = par->getPrevNode(); op; op = op->getPrevNode()) {
    if (!touches(op, m))
      continue;
    auto fill = dyn_cast<scf::ParallelOp>(op);
    if (!fill || !fill.getInitVals().empty() ||
        !llvm::hasSingleElement(fill.getBody()->without_terminator()))
      return nullptr;
    auto store = dyn_cast<memref::StoreOp>(&fill.getBody()->front());
    FloatAttr value;
    if (!store || store.getMemRef() != m ||
        !matchPattern(store.getValue(), m_Constant(&value)) ||
        !onePerElement(fill, store.getIndices(), m))
      return nullptr;
    auto type = cast<FloatType>(value.getType());
    return identityValue(a.combine, type).bitwiseIsEqual(value.getValue())
               ? fill
               : nullptr;
  }
  return nullptr;
}

struct KimiGpuWarpReductions
    : kimi::impl::KimiGpuWarpReductionsBase<KimiGpuWarpReductions> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn->getParentOfType<gpu::GPUModuleOp>())
      return;
    SmallVector<scf::ParallelOp> loops;
    fn.walk([&](scf::ParallelOp loop) {
      if (!loop->getParentOfType<scf::ParallelOp>() &&
          !loop->getParentOfType<gpu::LaunchOp>())
        loops.push_back(loop);
    });
    DenseSet<Operation *> erased; // fills folded into their reduction
    for (scf::ParallelOp loop : loops)
      if (!erased.contains(loop))
        (void)rewrite(loop, erased);
  }

  LogicalResult rewrite(scf::ParallelOp par, DenseSet<Operation *> &erased) {
    if (!par.getInitVals().empty())
      return failure();
    // The body: pure ops, then the reduction loop.
    scf::ForOp loop;
    for (Operation &op : par.getBody()->without_terminator()) {
      if (auto f = dyn_cast<scf::ForOp>(&op)) {
        if (loop)
          return failure();
        loop = f;
        continue;
      }
      if (loop || !isPure(&op))
        return failure();
    }
    if (!loop || !loop.getInitArgs().empty())
      return failure();
    FailureOr<SmallVector<Accumulator>> accs = matchAccumulators(loop);
    if (failed(accs))
      return failure();
    // Accumulators whose buffer a fill has just set to the identity: the
    // reduction's result is stored without reading it, and the fill (one
    // kernel launch) goes.
    SmallVector<scf::ParallelOp> fills;
    bool allFilled = true;
    for (Accumulator &a : *accs) {
      fills.push_back(identityFill(par, a));
      allFilled &= bool(fills.back());
    }
    auto eraseFills = [&] {
      for (scf::ParallelOp fill : fills)
        if (fill && erased.insert(fill).second)
          fill.erase();
    };
    // A dynamic trip count is a sequence or cache length: long enough.
    if (std::optional<APInt> trips = loop.getStaticTripCount();
        trips && trips->getSExtValue() < minTripCount) {
      // Too short for a warp: with every buffer filled, the thread sums in
      // registers instead.
      if (!allFilled)
        return failure();
      accumulateInRegisters(loop, *accs);
      eraseFills();
      return success();
    }

    Location loc = par.getLoc();
    OpBuilder b(par);
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value warp = arith::ConstantIndexOp::create(b, loc, kWarp);
    SmallVector<Value> lbs(par.getLowerBound()), ubs(par.getUpperBound()),
        steps(par.getStep());
    lbs.push_back(zero);
    ubs.push_back(warp);
    steps.push_back(one);
    auto wide = scf::ParallelOp::create(b, loc, lbs, ubs, steps);
    Block *wideBody = wide.getBody();
    b.setInsertionPointToStart(wideBody);
    IRMapping map;
    for (auto [from, to] : llvm::zip(par.getInductionVars(),
                                     ArrayRef<Value>(wide.getInductionVars()).drop_back()))
      map.map(from, to);
    Value lane = wide.getInductionVars().back();
    for (Operation &op : par.getBody()->without_terminator())
      if (&op != loop.getOperation())
        b.clone(op, map);

    // Lane l takes iterations l, l + 32, ... in registers, `unroll` of them
    // per trip with one partial result each: a lane's loads are then in
    // flight together instead of one memory latency per iteration (a
    // decode step's reductions have few outputs, so one warp's latency is
    // the kernel's time). The partials are combined in a fixed order.
    Value lb = map.lookupOrDefault(loop.getLowerBound());
    Value ub = map.lookupOrDefault(loop.getUpperBound());
    Value step = map.lookupOrDefault(loop.getStep());
    Value start = arith::AddIOp::create(
        b, loc, lb, arith::MulIOp::create(b, loc, lane, step));
    Value stride = arith::MulIOp::create(b, loc, step, warp);
    // Only reductions with few outputs: with many, the warps of the GPU
    // already keep memory busy, and k3-mini's decode expert products (8,192
    // outputs, two accumulators) ran 41 -> 65 us unrolled.
    int64_t outputs = 1;
    for (auto [lo, hi, st] : llvm::zip(par.getLowerBound(), par.getUpperBound(),
                                       par.getStep())) {
      std::optional<int64_t> l = getConstantIntValue(lo),
                             h = getConstantIntValue(hi),
                             s = getConstantIntValue(st);
      if (!l || !h || !s || *s <= 0) {
        outputs = std::numeric_limits<int64_t>::max();
        break;
      }
      outputs *= std::max<int64_t>((*h - *l + *s - 1) / *s, 0);
    }
    int64_t copies = outputs <= unrollMaxOutputs ? std::max<int64_t>(unroll, 1) : 1;
    if (std::optional<APInt> trips = loop.getStaticTripCount())
      while (copies > 1 && trips->getSExtValue() < kWarp * copies * 2)
        copies /= 2;
    DenseSet<Operation *> skip;
    for (Accumulator &a : *accs)
      for (Operation *op : {a.load.getOperation(), a.combine,
                            a.store.getOperation()})
        skip.insert(op);
    // One copy of the body at iteration `iv`: the values it combines in.
    auto body = [&](OpBuilder &nb, Value iv) {
      IRMapping inner = map;
      inner.map(loop.getInductionVar(), iv);
      for (Operation &op : loop.getBody()->without_terminator())
        if (!skip.contains(&op))
          nb.clone(op, inner);
      SmallVector<Value> xs;
      for (const Accumulator &a : *accs)
        xs.push_back(inner.lookupOrDefault(a.x));
      return xs;
    };
    size_t n = accs->size();
    SmallVector<Value> partials;
    for (int64_t c = 0; c < copies; ++c)
      for (const Accumulator &a : *accs)
        partials.push_back(identity(b, loc, a.combine, a.x.getType()));
    Value rest = start;
    if (copies > 1) {
      // Whole trips while iv + (copies - 1) * stride < ub, then one
      // iteration per trip for the remainder.
      Value span = arith::MulIOp::create(
          b, loc, stride, arith::ConstantIndexOp::create(b, loc, copies));
      Value mainUb = arith::SubIOp::create(
          b, loc, ub,
          arith::MulIOp::create(
              b, loc, stride,
              arith::ConstantIndexOp::create(b, loc, copies - 1)));
      auto unrolled = scf::ForOp::create(
          b, loc, start, mainUb, span, partials,
          [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
            SmallVector<Value> next;
            for (int64_t c = 0; c < copies; ++c) {
              Value at = c == 0 ? iv
                                : arith::AddIOp::create(
                                      nb, l, iv,
                                      arith::MulIOp::create(
                                          nb, l, stride,
                                          arith::ConstantIndexOp::create(nb, l, c)));
              SmallVector<Value> xs = body(nb, at);
              for (size_t k = 0; k < n; ++k)
                next.push_back(combineWith(nb, l, (*accs)[k].combine,
                                           iter[c * n + k], xs[k]));
            }
            scf::YieldOp::create(nb, l, next);
          });
      partials.assign(unrolled.getResults().begin(), unrolled.getResults().end());
      Value trips = arith::CeilDivSIOp::create(
          b, loc,
          arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, mainUb, start),
                                 zero),
          span);
      rest = arith::AddIOp::create(b, loc, start,
                                   arith::MulIOp::create(b, loc, trips, span));
    }
    SmallVector<Value> inits;
    for (size_t k = 0; k < n; ++k) {
      Value v = partials[k];
      for (int64_t c = 1; c < copies; ++c)
        v = combineWith(b, loc, (*accs)[k].combine, v, partials[c * n + k]);
      inits.push_back(v);
    }
    auto lanes = scf::ForOp::create(
        b, loc, rest, ub, stride, inits,
        [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
          SmallVector<Value> xs = body(nb, iv);
          SmallVector<Value> next;
          for (size_t k = 0; k < n; ++k)
            next.push_back(combineWith(nb, l, (*accs)[k].combine, iter[k], xs[k]));
          scf::YieldOp::create(nb, l, next);
        });

    // The butterfly leaves every lane with the warp's result; lane 0 stores.
    SmallVector<Value> results;
    for (auto [a, partial] : llvm::zip(*accs, lanes.getResults())) {
      Value v = partial;
      for (int32_t offset = kWarp / 2; offset > 0; offset /= 2) {
        auto shuffled = gpu::ShuffleOp::create(b, loc, v, offset, kWarp,
                                               gpu::ShuffleMode::XOR);
        v = combineWith(b, loc, a.combine, v, shuffled.getShuffleResult());
      }
      results.push_back(v);
    }
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane,
                                        zero);
    auto ifFirst = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
    b.setInsertionPointToStart(ifFirst.thenBlock());
    for (auto [a, r, fill] : llvm::zip(*accs, results, fills)) {
      SmallVector<Value> indices;
      for (Value i : a.store.getIndices())
        indices.push_back(map.lookupOrDefault(i));
      Value memref = map.lookupOrDefault(a.store.getMemRef());
      Value value = r;
      if (!fill)
        value = combineWith(
            b, loc, a.combine, memref::LoadOp::create(b, loc, memref, indices), r);
      memref::StoreOp::create(b, loc, value, memref, indices);
    }
    par.erase();
    eraseFills();
    return success();
  }

  /// `loop`'s accumulators summed in registers from the identity (their
  /// buffers hold it), each stored once after the loop.
  void accumulateInRegisters(scf::ForOp loop, ArrayRef<Accumulator> accs) {
    OpBuilder b(loop);
    Location loc = loop.getLoc();
    SmallVector<Value> inits;
    for (Accumulator a : accs)
      inits.push_back(identity(b, loc, a.combine, a.x.getType()));
    DenseSet<Operation *> skip;
    for (Accumulator a : accs)
      for (Operation *op :
           {a.load.getOperation(), a.combine, a.store.getOperation()})
        skip.insert(op);
    auto sums = scf::ForOp::create(
        b, loc, loop.getLowerBound(), loop.getUpperBound(), loop.getStep(),
        inits, [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
          IRMapping map;
          map.map(loop.getInductionVar(), iv);
          for (Operation &op : loop.getBody()->without_terminator())
            if (!skip.contains(&op))
              nb.clone(op, map);
          SmallVector<Value> next;
          for (auto [a, acc] : llvm::zip(accs, iter))
            next.push_back(combineWith(nb, l, a.combine, acc,
                                       map.lookupOrDefault(a.x)));
          scf::YieldOp::create(nb, l, next);
        });
    for (auto [a, sum] : llvm::zip(accs, sums.getResults())) {
      memref::StoreOp store = a.store;
      memref::StoreOp::create(b, loc, sum, store.getMemRef(), store.getIndices());
    }
    loop.erase();
  }
};
} // namespace

//===- RegisterAccumulators.cpp - loop accumulators out of memory --------===//
//
// kimi-gpu-register-accumulators: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUREGISTERACCUMULATORS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {

/// The one load and the one store of `memref[indices]` in `loop`'s body,
/// when that is all the loop does to `memref` and the indices are defined
/// outside it.
struct Accumulator {
  memref::LoadOp load;
  memref::StoreOp store;
};

/// Whether `v` is defined outside `loop`.
bool definedOutside(Value v, scf::ForOp loop) {
  return !loop->isAncestor(v.getParentRegion()->getParentOp());
}

/// A load/store pair of `loop`'s body (top level) that can live in a
/// register, or nothing. The rest of the body may only read memory (or not
/// touch it): a write elsewhere could be to the accumulator's element.
std::optional<Accumulator> findAccumulator(scf::ForOp loop) {
  Block *body = loop.getBody();
  // Every memory effect of the body: loads anywhere, stores only at the
  // top level.
  SmallVector<memref::StoreOp> stores;
  bool otherWrites = false;
  loop.getBody()->walk([&](Operation *op) {
    if (auto store = dyn_cast<memref::StoreOp>(op)) {
      if (store->getBlock() == body)
        stores.push_back(store);
      else
        otherWrites = true;
      return;
    }
    if (isa<memref::LoadOp>(op) || op->hasTrait<OpTrait::IsTerminator>() ||
        isa<scf::ForOp, scf::IfOp>(op) || isPure(op))
      return;
    otherWrites = true; // a call, an atomic, anything else
  });
  if (otherWrites)
    return std::nullopt;
  for (memref::StoreOp store : stores) {
    Value m = store.getMemRef();
    if (!definedOutside(m, loop) ||
        !llvm::all_of(store.getIndices(),
                      [&](Value i) { return definedOutside(i, loop); }))
      continue;
    // Every other store of the body is to another buffer... which may be a
    // view of the same memory: one store in all.
    if (stores.size() != 1)
      return std::nullopt;
    memref::LoadOp load;
    bool clean = true;
    loop.getBody()->walk([&](memref::LoadOp l) {
      if (l.getMemRef() != m)
        return;
      if (load || l->getBlock() != body || l.getIndices() != store.getIndices())
        clean = false;
      load = l;
    });
    if (!clean || !load || !load->isBeforeInBlock(store))
      continue;
    return Accumulator{load, store};
  }
  return std::nullopt;
}

struct KimiGpuRegisterAccumulators
    : kimi::impl::KimiGpuRegisterAccumulatorsBase<KimiGpuRegisterAccumulators> {
  using Base::Base;

  void runOnOperation() override {
    // Innermost loops first: an outer loop may then see its inner loop's
    // result stored once after it.
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops) {
      // A loop may hold several accumulators, only one stored per trip in
      // what findAccumulator accepts; each rewrite makes a new loop.
      while (std::optional<Accumulator> acc = findAccumulator(loop))
        loop = promote(loop, *acc);
    }
  }

  /// `init = load M[I]` before the loop, the value carried through it, and
  /// `store result, M[I]` after it.
  static scf::ForOp promote(scf::ForOp loop, Accumulator acc) {
    IRRewriter b(loop);
    Location loc = acc.load.getLoc();
    Value init = memref::LoadOp::create(b, loc, acc.load.getMemRef(),
                                        acc.load.getIndices());
    Value stored = acc.store.getValueToStore();
    auto yieldNew = [&](OpBuilder &, Location, ArrayRef<BlockArgument>)
        -> SmallVector<Value> { return {stored}; };
    FailureOr<LoopLikeOpInterface> grown =
        loop.replaceWithAdditionalYields(b, ValueRange{init},
                                         /*replaceInitOperandUsesInLoop=*/false,
                                         yieldNew);
    auto next = cast<scf::ForOp>(grown->getOperation());
    BlockArgument carried = next.getRegionIterArgs().back();
    acc.load.getResult().replaceAllUsesWith(carried);
    acc.load->erase();
    b.setInsertionPointAfter(next);
    memref::StoreOp::create(b, acc.store.getLoc(), next.getResults().back(),
                            acc.store.getMemRef(), acc.store.getIndices());
    acc.store->erase();
    return next;
  }
};

} // namespace

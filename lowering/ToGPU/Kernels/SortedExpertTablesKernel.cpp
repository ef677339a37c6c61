//===- SortedExpertTablesKernel.cpp - a sorted step's tables in one block -===//
//
// Thread t < S E (S = max(1, threads / E) segments of the slots, E
// experts) owns expert t % E in segment t / E, so the threads of a warp
// read each slot's expert id by broadcast. Four phases, a barrier apart:
//   1. the ids of the dispatched slots (-1 for the others) into shared
//      memory;
//   2. each thread counts its expert's slots in its segment;
//   3. thread e scans its expert's segment counts (each segment's rows
//      start after the ones ahead of it) and keeps the total;
//   4. warp 0 scans the totals over the experts: the first row of each
//      expert (offsets) and the tiles up to it;
// then each thread numbers its expert's slots in its segment, in slot
// order (the token order of the linalg form), while every thread finds
// its tiles' experts by binary search over the tile scan.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/SortedExpertTablesKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace kimi::gpu {

namespace {

int64_t segmentsOf(const SortedExpertTablesSpec &s) {
  return std::max<int64_t>(1, kSortedExpertTablesThreads / s.experts);
}

/// i32 elements of shared memory: ids [R], segment counts [S E], and per
/// expert the count, the first row and the tiles up to it.
int64_t sharedWords(const SortedExpertTablesSpec &s) {
  return s.slots + segmentsOf(s) * s.experts + 3 * s.experts;
}

} // namespace

std::string SortedExpertTablesSpec::key() const {
  std::string str;
  llvm::raw_string_ostream os(str);
  os << slots << "_" << topK << "_" << experts << "_" << tileRows << "_"
     << tiles << (bf16Weights ? "_bf16" : "_f32");
  return str;
}

std::string verifySortedExpertTablesSpec(const SortedExpertTablesSpec &s) {
  if (s.slots <= 0 || s.topK <= 0 || s.tileRows <= 0 || s.tiles <= 0)
    return "empty step";
  if (s.experts <= 0 || s.experts > kSortedExpertTablesThreads)
    return "more experts (" + std::to_string(s.experts) + ") than the " +
           std::to_string(kSortedExpertTablesThreads) + " threads of a block";
  // An H100/H200 block has 227 KiB of shared memory.
  if (sortedExpertTablesSharedBytes(s) > 227 * 1024)
    return std::to_string(s.slots) + " slots do not fit a block's shared memory";
  return "";
}

int64_t sortedExpertTablesSharedBytes(const SortedExpertTablesSpec &s) {
  return 4 * sharedWords(s);
}

mlir::gpu::GPUFuncOp emitSortedExpertTablesKernel(OpBuilder &b, Location loc,
                                                  mlir::gpu::GPUModuleOp module,
                                                  StringRef name,
                                                  const SortedExpertTablesSpec &s) {
  const int64_t R = s.slots, E = s.experts, P = kSortedExpertTablesThreads;
  const int64_t S = segmentsOf(s), L = (R + S - 1) / S, tr = s.tileRows;
  Type i32 = b.getI32Type();
  Type weightType = s.bf16Weights ? Type(b.getBF16Type()) : Type(b.getF32Type());
  SmallVector<Type> args = {flatMemRef(i32, R),     flatMemRef(weightType, R),
                            flatMemRef(i32, R),     flatMemRef(i32, R),
                            flatMemRef(i32, s.tiles), flatMemRef(i32, s.tiles),
                            flatMemRef(i32, s.tiles)};
  GPUFuncOpAndEmitter k(b, loc, module, name, args,
                        {static_cast<int32_t>(P), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value ids = body.getArgument(0), weights = body.getArgument(1),
        row = body.getArgument(2), token = body.getArgument(3),
        tileExpert = body.getArgument(4), tileStart = body.getArgument(5),
        tileEnd = body.getArgument(6);

  Value idsS = e.dynamicSharedBuffer(0, R, i32);
  Value segment = e.dynamicSharedBuffer(4 * R, S * E, i32);
  Value count = e.dynamicSharedBuffer(4 * (R + S * E), E, i32);
  Value first = e.dynamicSharedBuffer(4 * (R + S * E + E), E, i32);
  Value tilesUpTo = e.dynamicSharedBuffer(4 * (R + S * E + 2 * E), E, i32);

  Value t = e.threadId();
  auto strided = [&](int64_t end, llvm::function_ref<void(Value)> fn) {
    auto loop = scf::ForOp::create(b, loc, t, e.idx(end), e.idx(P));
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    fn(loop.getInductionVar());
  };
  auto ifThen = [&](Value cond, llvm::function_ref<void()> fn) {
    auto op = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&op.getThenRegion().front());
    fn();
  };
  auto tilesOf = [&](Value c) { return e.divu(e.add(c, tr - 1), e.i32(tr)); };

  // 1. Dispatched ids; the other slots' rows are 0.
  strided(R, [&](Value i) {
    Value w = e.toF32(e.load(weights, i));
    Value live = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, w,
                                       e.f32(0.0));
    e.store(e.select(live, e.load(ids, i), e.i32(-1)), idsS, i);
    ifThen(arith::XOrIOp::create(b, loc, live,
                                 arith::ConstantIntOp::create(b, loc, 1, 1)),
           [&] { e.store(e.i32(0), row, i); });
  });
  e.barrier();

  // 2. Thread (segment, expert) counts.
  Value owner = e.ult(t, e.idx(S * E));
  Value expert = e.remu(t, e.idx(E)), expertI32 = e.toI32(expert);
  Value lo = e.mul(e.divu(t, e.idx(E)), L);
  Value hi = e.minu(e.add(lo, L), e.idx(R));
  auto overSegment = [&](Value init,
                         llvm::function_ref<Value(Value i, Value mine, Value acc)>
                             step) {
    auto loop = scf::ForOp::create(b, loc, lo, hi, e.idx(1), ValueRange{init});
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    Value mine = e.eq(e.load(idsS, i), expertI32);
    scf::YieldOp::create(b, loc, step(i, mine, loop.getRegionIterArg(0)));
    return loop.getResult(0);
  };
  ifThen(owner, [&] {
    Value n = overSegment(e.i32(0), [&](Value, Value mine, Value acc) {
      return e.add(acc, arith::ExtUIOp::create(b, loc, i32, mine).getResult());
    });
    e.store(n, segment, t);
  });
  e.barrier();

  // 3. Thread e: each segment's first rank, and the expert's count.
  ifThen(e.ult(t, e.idx(E)), [&] {
    auto loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(S), e.idx(1),
                                   ValueRange{e.i32(0)});
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loop.getBody());
      Value at = e.add(e.mul(loop.getInductionVar(), E), t);
      Value n = e.load(segment, at), ahead = loop.getRegionIterArg(0);
      e.store(ahead, segment, at);
      scf::YieldOp::create(b, loc, ValueRange{e.add(ahead, n)});
    }
    e.store(loop.getResult(0), count, t);
  });
  e.barrier();

  // 4. Warp 0 scans the experts: lane l takes experts l C .. l C + C - 1.
  const int64_t C = (E + 31) / 32;
  ifThen(e.ult(t, e.idx(32)), [&] {
    Value base = e.mul(t, C);
    // This lane's rows and tiles.
    Value rows = e.i32(0), tiles = e.i32(0);
    for (int64_t j = 0; j < C; ++j) {
      Value ex = e.add(base, j), in = e.ult(ex, e.idx(E));
      Value n = e.select(in, e.load(count, e.minu(ex, e.idx(E - 1))), e.i32(0));
      rows = e.add(rows, n);
      tiles = e.add(tiles, tilesOf(n));
    }
    // Inclusive scans over the lanes, then this lane's exclusive bases.
    Value rowScan = rows, tileScan = tiles;
    for (int32_t d = 1; d < 32; d *= 2) {
      for (Value *v : {&rowScan, &tileScan}) {
        auto up = mlir::gpu::ShuffleOp::create(b, loc, *v, d, 32,
                                               mlir::gpu::ShuffleMode::UP);
        *v = e.add(*v, e.select(up.getValid(), up.getShuffleResult(), e.i32(0)));
      }
    }
    Value rowAt = e.sub(rowScan, rows), tileAt = e.sub(tileScan, tiles);
    for (int64_t j = 0; j < C; ++j) {
      Value ex = e.add(base, j), in = e.ult(ex, e.idx(E));
      Value n = e.select(in, e.load(count, e.minu(ex, e.idx(E - 1))), e.i32(0));
      Value tileNext = e.add(tileAt, tilesOf(n));
      ifThen(in, [&] {
        e.store(rowAt, first, ex);
        e.store(tileNext, tilesUpTo, ex);
      });
      rowAt = e.add(rowAt, n);
      tileAt = tileNext;
    }
  });
  e.barrier();

  // Rows of the owned slots, in slot order.
  ifThen(owner, [&] {
    Value start = e.add(e.load(first, expert), e.load(segment, t));
    overSegment(start, [&](Value i, Value mine, Value next) -> Value {
      auto hit = scf::IfOp::create(b, loc, TypeRange{i32}, mine,
                                   /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&hit.getThenRegion().front());
        e.store(next, row, i);
        e.store(e.toI32(e.divu(i, e.idx(s.topK))), token, e.toIndex(next));
        scf::YieldOp::create(b, loc, ValueRange{e.add(next, 1)});
        b.setInsertionPointToStart(&hit.getElseRegion().front());
        scf::YieldOp::create(b, loc, ValueRange{next});
      }
      return hit.getResult(0);
    });
  });

  // Tiles: the expert of tile y is the number of experts whose tiles end
  // at or before it (tilesUpTo is nondecreasing: a binary search).
  int64_t steps = 1;
  while ((int64_t{1} << steps) <= E)
    ++steps;
  strided(s.tiles, [&](Value y) {
    Value yI32 = e.toI32(y);
    Value l = e.idx(0), h = e.idx(E);
    for (int64_t i = 0; i < steps; ++i) {
      Value open = e.ult(l, h);
      Value mid = e.divu(e.add(l, h), e.idx(2));
      Value done = e.ule(e.load(tilesUpTo, e.minu(mid, e.idx(E - 1))), yI32);
      l = e.select(e.andI(open, done), e.add(mid, 1), l);
      h = e.select(e.andI(open, arith::XOrIOp::create(
                                     b, loc, done,
                                     arith::ConstantIntOp::create(b, loc, 1, 1))),
                   mid, h);
    }
    Value live = e.ult(l, e.idx(E));
    Value at = e.minu(l, e.idx(E - 1));
    Value n = e.load(count, at), off = e.load(first, at);
    Value firstTile = e.sub(e.load(tilesUpTo, at), tilesOf(n));
    Value begin = e.add(off, e.mul(e.sub(yI32, firstTile), e.i32(tr)));
    Value end = e.minu(e.add(begin, e.i32(tr)), e.add(off, n));
    e.store(e.toI32(l), tileExpert, y);
    e.store(e.select(live, begin, e.i32(0)), tileStart, y);
    e.store(e.select(live, end, e.i32(0)), tileEnd, y);
  });
  return k.func;
}

} // namespace kimi::gpu

//===- SortedExpertTablesKernel.cpp - a sorted step's tables in one block -===//
//
// One block of 1024 threads (32 warps). The slots go through in rounds of
// one slot a thread (slot r * 1024 + t in round r):
//   1. the experts' counts: each warp groups its lanes by expert
//      (match.any) and the first lane of each group adds the group's size
//      to its expert's count (shared atomics: counts need no order);
//   2. warp 0 scans the counts over the experts: each expert's first row
//      and the tiles up to it;
//   3. the rows, in slot order (the token order of the linalg form): in
//      each round a slot's row is its expert's first row, plus the
//      expert's slots in earlier rounds, plus its slots in earlier warps
//      of this round, plus the lanes of its group below it. Each warp
//      writes its groups' sizes into a [warp, expert] table; warp w then
//      scans experts w, w + 32, ... over the warps (one shuffle scan an
//      expert) into each warp's offset and the expert's next base. The
//      table and the bases are double-buffered, so a round needs two
//      barriers: one after the groups' sizes, one after the scans (which
//      also clear the other table for the next round).
// Every thread then finds its tiles' experts by binary search over the tile
// scan. The linalg form is a dozen kernels; the first form of this one had
// a thread scan a whole segment of slots for one expert, which took 86 us
// for an 8K prefill chunk's 16,384 slots (stop 53's profile).
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/SortedExpertTablesKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace kimi::gpu {

namespace {

constexpr int64_t kWarps = kSortedExpertTablesThreads / 32;

/// Bytes of shared memory: per expert the count, the first row, the tiles
/// up to it and two round bases (i32), then two [warp, expert] tables of
/// group sizes and offsets (i16: a round has 1024 slots).
int64_t sharedBytesOf(const SortedExpertTablesSpec &s) {
  return 4 * 5 * s.experts + 2 * 2 * kWarps * s.experts;
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
  if (s.slots > int64_t(INT32_MAX))
    return std::to_string(s.slots) + " slots do not fit i32 rows";
  // An H100/H200 block has 227 KiB of shared memory.
  if (sortedExpertTablesSharedBytes(s) > 227 * 1024)
    return std::to_string(s.experts) +
           " experts do not fit a block's shared memory";
  return "";
}

int64_t sortedExpertTablesSharedBytes(const SortedExpertTablesSpec &s) {
  return sharedBytesOf(s);
}

mlir::gpu::GPUFuncOp emitSortedExpertTablesKernel(OpBuilder &b, Location loc,
                                                  mlir::gpu::GPUModuleOp module,
                                                  StringRef name,
                                                  const SortedExpertTablesSpec &s) {
  const int64_t R = s.slots, E = s.experts, P = kSortedExpertTablesThreads;
  const int64_t rounds = (R + P - 1) / P, tr = s.tileRows;
  Type i32 = b.getI32Type(), i16 = b.getI16Type();
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

  Value count = e.dynamicSharedBuffer(0, E, i32);
  Value first = e.dynamicSharedBuffer(4 * E, E, i32);
  Value tilesUpTo = e.dynamicSharedBuffer(8 * E, E, i32);
  Value base = e.dynamicSharedBuffer(12 * E, 2 * E, i32); // [2, E]
  Value groups = e.dynamicSharedBuffer(20 * E, 2 * kWarps * E, i16); // [2, W, E]

  Value t = e.threadId();
  Value lane = e.laneId(), warp = e.divu(t, e.idx(32));
  Value laneI32 = e.toI32(lane);
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
  auto overRounds = [&](llvm::function_ref<void(Value r, Value i)> fn) {
    auto loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(rounds), e.idx(1));
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value r = loop.getInductionVar();
    fn(r, e.add(e.mul(r, e.idx(P)), t));
  };
  auto notI1 = [&](Value v) {
    return arith::XOrIOp::create(b, loc, v,
                                 arith::ConstantIntOp::create(b, loc, 1, 1));
  };
  auto tilesOf = [&](Value c) { return e.divu(e.add(c, tr - 1), e.i32(tr)); };
  // Slot i's expert: -1 past the slots and for a slot not dispatched (zero
  // weight), whose row is 0.
  auto expertOf = [&](Value i, bool storeDeadRows) {
    Value in = e.ult(i, e.idx(R));
    Value at = e.minu(i, e.idx(R - 1));
    Value w = e.toF32(e.load(weights, at));
    Value live = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, w,
                                       e.f32(0.0));
    if (storeDeadRows)
      ifThen(e.andI(in, notI1(live)), [&] { e.store(e.i32(0), row, at); });
    return e.select(e.andI(in, live), e.load(ids, at), e.i32(-1));
  };
  // The lanes of this warp with the same expert as this one, and how many
  // of them are below it.
  Value fullMask = e.i32(-1);
  auto groupOf = [&](Value ex) {
    Value mask = NVVM::MatchSyncOp::create(b, loc, i32, fullMask, ex,
                                           NVVM::MatchSyncKind::any);
    Value below = NVVM::LaneMaskLtOp::create(b, loc, i32);
    Value rank = math::CtPopOp::create(
        b, loc, arith::AndIOp::create(b, loc, mask, below));
    Value size = math::CtPopOp::create(b, loc, mask);
    return std::array<Value, 2>{rank, size};
  };
  auto isLeader = [&](Value rank, Value ex) {
    return e.andI(e.eq(rank, e.i32(0)),
                  arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, ex,
                                        e.i32(0)));
  };

  // 0. Counts and round-0 bases to zero, the first group table cleared.
  strided(E, [&](Value x) {
    e.store(e.i32(0), count, x);
    e.store(e.i32(0), base, x);
  });
  strided(kWarps * E,
          [&](Value x) { e.store(arith::ConstantIntOp::create(b, loc, i16, 0), groups, x); });
  e.barrier();

  // 1. Counts.
  overRounds([&](Value, Value i) {
    Value ex = expertOf(i, /*storeDeadRows=*/true);
    auto [rank, size] = groupOf(ex);
    ifThen(isLeader(rank, ex), [&] {
      memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, size,
                                  count, ValueRange{e.toIndex(ex)});
    });
  });
  e.barrier();

  // 2. Warp 0 scans the experts: lane l takes experts l C .. l C + C - 1.
  const int64_t C = (E + 31) / 32;
  ifThen(e.ult(t, e.idx(32)), [&] {
    Value laneBase = e.mul(t, C);
    Value rows = e.i32(0), tiles = e.i32(0);
    for (int64_t j = 0; j < C; ++j) {
      Value ex = e.add(laneBase, j), in = e.ult(ex, e.idx(E));
      Value n = e.select(in, e.load(count, e.minu(ex, e.idx(E - 1))), e.i32(0));
      rows = e.add(rows, n);
      tiles = e.add(tiles, tilesOf(n));
    }
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
      Value ex = e.add(laneBase, j), in = e.ult(ex, e.idx(E));
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

  // 3. Rows, round by round.
  overRounds([&](Value r, Value i) {
    Value parity = e.remu(r, e.idx(2)), other = e.sub(e.idx(1), parity);
    Value table = e.mul(parity, e.idx(kWarps * E));
    Value nextTable = e.mul(other, e.idx(kWarps * E));
    Value ex = expertOf(i, /*storeDeadRows=*/false);
    Value exAt = e.toIndex(e.select(
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, ex, e.i32(0)),
        ex, e.i32(0)));
    auto [rank, size] = groupOf(ex);
    ifThen(isLeader(rank, ex), [&] {
      e.store(arith::TruncIOp::create(b, loc, i16, size), groups,
              e.add(table, e.add(e.mul(warp, e.idx(E)), exAt)));
    });
    e.barrier();
    // Warp w scans experts w, w + 32, ...: lane l holds warp l's group.
    {
      auto loop = scf::ForOp::create(b, loc, warp, e.idx(E), e.idx(kWarps));
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loop.getBody());
      Value x = loop.getInductionVar();
      Value at = e.add(table, e.add(e.mul(lane, e.idx(E)), x));
      Value n = arith::ExtUIOp::create(b, loc, i32, e.load(groups, at));
      Value scan = n;
      for (int32_t d = 1; d < 32; d *= 2) {
        auto up = mlir::gpu::ShuffleOp::create(b, loc, scan, d, 32,
                                               mlir::gpu::ShuffleMode::UP);
        scan = e.add(scan, e.select(up.getValid(), up.getShuffleResult(), e.i32(0)));
      }
      e.store(arith::TruncIOp::create(b, loc, i16, e.sub(scan, n)), groups, at);
      Value total = mlir::gpu::ShuffleOp::create(b, loc, scan, 31, 32,
                                                 mlir::gpu::ShuffleMode::IDX)
                        .getShuffleResult();
      ifThen(e.eq(laneI32, e.i32(0)), [&] {
        Value mine = e.load(base, e.add(e.mul(parity, e.idx(E)), x));
        e.store(e.add(mine, total), base, e.add(e.mul(other, e.idx(E)), x));
      });
    }
    // The other table, for the next round (its last reader was the round
    // before, a barrier ago).
    strided(kWarps * E, [&](Value x) {
      e.store(arith::ConstantIntOp::create(b, loc, i16, 0), groups,
              e.add(nextTable, x));
    });
    e.barrier();
    ifThen(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, ex,
                                 e.i32(0)),
           [&] {
             Value inWarps = arith::ExtUIOp::create(
                 b, loc, i32,
                 e.load(groups,
                        e.add(table, e.add(e.mul(warp, e.idx(E)), exAt))));
             Value at = e.add(
                 e.add(e.load(first, exAt),
                       e.load(base, e.add(e.mul(parity, e.idx(E)), exAt))),
                 e.add(inWarps, rank));
             e.store(at, row, i);
             e.store(e.toI32(e.divu(i, e.idx(s.topK))), token, e.toIndex(at));
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
    for (int64_t j = 0; j < steps; ++j) {
      Value open = e.ult(l, h);
      Value mid = e.divu(e.add(l, h), e.idx(2));
      Value done = e.ule(e.load(tilesUpTo, e.minu(mid, e.idx(E - 1))), yI32);
      l = e.select(e.andI(open, done), e.add(mid, 1), l);
      h = e.select(e.andI(open, notI1(done)), mid, h);
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

//===- MlaDecodeKernel.cpp - split-key MLA decode over the latent cache ---===//
//
// Split kernel: eight warps. For the scores, warp w takes key half w / 4
// (16 of the tile's 32 keys) and k-group w % 4 (a quarter of the R + dr
// columns); the four k-groups' partial scores meet in shared memory and
// every warp sums them in the same order, so all warps hold the same
// scores and softmax state without a further exchange. For P [latent],
// warp w owns the 16-column units w, w + 8, ... of the R latent columns.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/MlaDecodeKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <limits>

using namespace mlir;

namespace kimi::gpu {

namespace {
constexpr int64_t kPad = 8;          // f16 elements of row padding (no bank conflicts)
constexpr int64_t kScoreLd = 36;     // f32 row stride of the score exchange
constexpr int64_t kKGroups = 4;      // warps that split the score columns
constexpr int64_t kWarps = kMlaDecodeThreads / 32;
constexpr int64_t kSharedBytes = 48 * 1024;

int64_t tileBytes(const MlaDecodeShape &s) {
  return 2 * kMlaDecodeTileKeys * (s.width() + kPad) +
         4 * kKGroups * kMlaDecodeRows * kScoreLd;
}
} // namespace

LogicalResult verifyMlaDecodeShape(const MlaDecodeShape &s, std::string &why) {
  auto fail = [&](const std::string &msg) {
    why = msg;
    return failure();
  };
  if (s.heads <= 0)
    return fail("heads must be positive");
  if (s.latent <= 0 || s.latent % 16 != 0)
    return fail("latent width " + std::to_string(s.latent) +
                ": the decode kernel needs a multiple of 16");
  if (s.rope < 0 || s.rope % 16 != 0)
    return fail("k_pe width " + std::to_string(s.rope) +
                ": the decode kernel needs a multiple of 16");
  if (s.nope <= 0 || s.nope % 4 != 0)
    return fail("q_nope width " + std::to_string(s.nope) +
                ": the decode kernel needs a multiple of 4");
  if (tileBytes(s) > kSharedBytes)
    return fail("cache rows " + std::to_string(s.width()) + " wide need " +
                std::to_string(tileBytes(s)) +
                " bytes of shared memory per decode block, over 48 KiB");
  return success();
}

namespace {

struct MlaDecodeEmitter {
  MlaDecodeEmitter(OpBuilder &b, Location loc, const MlaDecodeShape &s)
      : e(b, loc), s(s), W(s.width()), R(s.latent), ld(s.width() + kPad) {}

  KernelEmitter e;
  const MlaDecodeShape &s;
  const int64_t W, R, ld;

  /// Four elements of an f32 or bf16 buffer as f32 (a bf16 piece is 8
  /// bytes, widened in registers).
  Value vec4(Value memref, Value index) {
    auto type = VectorType::get({4}, e.b.getF32Type());
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    if (element.isF32())
      return vector::LoadOp::create(e.b, e.loc, type, memref, ValueRange{index},
                                    /*nontemporal=*/false, llvm::MaybeAlign(16));
    Value narrow = vector::LoadOp::create(
        e.b, e.loc, VectorType::get({4}, element), memref, ValueRange{index},
        /*nontemporal=*/false, llvm::MaybeAlign(8));
    return arith::ExtFOp::create(e.b, e.loc, type, narrow);
  }
  Value zeros4() {
    auto type = VectorType::get({4}, e.b.getF32Type());
    return arith::ConstantOp::create(
        e.b, e.loc, DenseElementsAttr::get(type, e.b.getF32FloatAttr(0.0)));
  }
  /// Element `at` of `memref` if `valid` (else zeros), read at a clamped
  /// address so the load stays in bounds.
  Value guardedVec4(Value memref, Value at, Value valid) {
    Value v = vec4(memref, e.select(valid, at, e.idx(0)));
    return e.select(valid, v, zeros4());
  }
  /// `inFirst ? first[atFirst] : second[atSecond]`, zeros unless `valid`:
  /// one load from the chosen buffer (a select, not a branch, so that the
  /// loads of a tile stay in flight together).
  Value eitherVec4(Value inFirst, Value first, Value atFirst, Value second,
                   Value atSecond, Value valid) {
    // Buffers of two types (f32 absorbed queries, bf16 q_pe): a guarded
    // load from each.
    if (first.getType() != second.getType())
      return e.select(inFirst, guardedVec4(first, atFirst, e.andI(valid, inFirst)),
                      guardedVec4(second, atSecond, valid));
    Value from = e.select(inFirst, first, second);
    return guardedVec4(from, e.select(inFirst, atFirst, atSecond), valid);
  }

  /// Fills rows [0, rows) of the f16 tile from f32 pieces of four:
  /// `source(row, col)` gives the piece (zeros where invalid). The IR has
  /// all loads before the conversions, but in the split kernel ptxas, short
  /// of registers, still converts each piece before the next load issues;
  /// the prefetches in emitSplit are what hide that latency.
  void stage(Value tile, int64_t rows, Value tid,
             const std::function<Value(Value, Value)> &source) {
    OpBuilder &b = e.b;
    const int64_t perRow = W / 4, total = rows * perRow;
    const int64_t steps = (total + kMlaDecodeThreads - 1) / kMlaDecodeThreads;
    auto halfType = VectorType::get({4}, b.getF16Type());
    SmallVector<StagedPiece> loaded;
    for (int64_t u = 0; u < steps; ++u) {
      Value piece = e.add(tid, e.idx(u * kMlaDecodeThreads));
      Value exists = total % kMlaDecodeThreads ? e.ult(piece, e.idx(total)) : Value();
      // Past the tile: any in-range coordinates, and nothing stored.
      Value p = exists ? e.select(exists, piece, e.idx(0)) : piece;
      Value row = e.divu(p, e.idx(perRow));
      Value col = e.mul(e.remu(p, e.idx(perRow)), e.idx(4));
      loaded.push_back({source(row, col), e.add(e.mul(row, e.idx(ld)), col), exists});
    }
    for (StagedPiece &piece : loaded)
      piece.value = arith::TruncFOp::create(b, e.loc, halfType, piece.value);
    storeStaged(e, loaded, tile, 8);
  }

  /// `prefetch.global.L1` of the 128-byte lines of elements [start, start
  /// + count) of `buffer` (f32), the block's threads a line each in turn;
  /// `most` bounds `count`. Lines past the range are not fetched (the
  /// buffer's first line is named instead: a prefetch outside the buffer
  /// could name unmapped memory).
  void prefetchRangeL1(Value buffer, Value start, Value count, int64_t most,
                       Value tid) {
    // Elements of a 128-byte line.
    const int64_t kLine =
        128 / (cast<MemRefType>(buffer.getType()).getElementTypeBitWidth() / 8);
    const int64_t trips =
        ((most + kLine - 1) / kLine + kMlaDecodeThreads - 1) / kMlaDecodeThreads;
    Value lines = e.divu(e.add(count, e.idx(kLine - 1)), e.idx(kLine));
    for (int64_t i = 0; i < trips; ++i) {
      Value line = e.add(tid, e.idx(i * kMlaDecodeThreads));
      Value at = e.select(e.ult(line, lines),
                          e.add(start, e.mul(line, e.idx(kLine))), e.idx(0));
      e.prefetchL1(buffer, at);
    }
  }

  void emitSplit(mlir::gpu::GPUModuleOp module, StringRef name, Value qa,
                 Value q, Value cache, Value rows, Value lengths, Value accOut,
                 Value mOut, Value lOut, Value T, Value S, Value Tr, Value kps,
                 Value splits) {
    OpBuilder &b = e.b;
    Type f16 = b.getF16Type();
    const int64_t H = s.heads, dq = s.dq();
    const int64_t cacheBytes = s.bf16Cache ? 2 : 4;
    Value tile = e.sharedBuffer(module, (name + "_keys").str(),
                                kMlaDecodeTileKeys * ld, f16);
    Value xchg = e.sharedBuffer(module, (name + "_scores").str(),
                                kKGroups * kMlaDecodeRows * kScoreLd,
                                b.getF32Type());
    Value tid = e.threadId(), lane = e.laneId();
    Value warp = e.divu(tid, e.idx(32));
    Value g = e.divu(lane, e.idx(4)), tq = e.remu(lane, e.idx(4));
    Value split = e.blockId(mlir::gpu::Dimension::x);
    Value rowTile = e.blockId(mlir::gpu::Dimension::y);
    Value seq = e.blockId(mlir::gpu::Dimension::z);
    Value TH = e.mul(T, e.idx(H));
    auto slt = [&](Value a, Value c) {
      return arith::CmpIOp::create(b, e.loc, arith::CmpIPredicate::slt, a, c);
    };
    auto sle = [&](Value a, Value c) {
      return arith::CmpIOp::create(b, e.loc, arith::CmpIPredicate::sle, a, c);
    };

    // Keys of this sequence and of this split.
    Value cacheRows = s.hasLengths ? e.toIndex(e.load(lengths, seq)) : S;
    Value keys = s.hasRows ? e.add(cacheRows, Tr) : cacheRows;
    Value k0 = e.mul(split, kps);
    Value k1 = arith::MinSIOp::create(b, e.loc, e.add(k0, kps), keys);
    Value count = e.maxs(e.sub(k1, k0), e.idx(0));
    Value tiles = e.divu(e.add(count, e.idx(kMlaDecodeTileKeys - 1)),
                         e.idx(kMlaDecodeTileKeys));
    Value shift = e.sub(keys, T); // query t sees keys p <= shift + t

    // Prefetches. With 230 registers a thread, the compiler keeps one
    // 16-byte load of a tile's staging in flight at a time (each waits for
    // memory before the next issues), so the lines are brought in ahead:
    // the split's cache rows into L2 at once (one bulk request), the query
    // rows and the first tile into L1 now, each next tile into L1 while the
    // block works on the one before.
    Value row0 = e.mul(rowTile, e.idx(kMlaDecodeRows));
    Value cacheEnd = s.hasRows ? arith::MinSIOp::create(b, e.loc, k1, cacheRows).getResult()
                               : k1;
    auto cacheRowsFrom = [&](Value first) {
      return e.mul(e.add(e.mul(seq, S), first), e.idx(W));
    };
    {
      // At most about 1 MiB a block: the request's size is 32-bit, and L2
      // holds only so much (a batch-1 8K step asks 221 KB a split).
      constexpr int64_t kMaxL2PrefetchBytes = int64_t(1) << 20;
      Value cached = arith::MinSIOp::create(
          b, e.loc, e.maxs(e.sub(cacheEnd, k0), e.idx(0)),
          e.idx(std::max<int64_t>(1, kMaxL2PrefetchBytes / (W * cacheBytes))));
      auto first = scf::IfOp::create(
          b, e.loc, e.andI(e.eq(tid, e.idx(0)), e.ult(e.idx(0), cached)), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&first.getThenRegion().front());
      e.prefetchL2(cache, cacheRowsFrom(k0),
                   e.toI32(e.mul(cached, e.idx(W * cacheBytes))));
    }
    Value qRows = arith::MinSIOp::create(b, e.loc, e.sub(TH, row0),
                                         e.idx(kMlaDecodeRows));
    Value qRow0 = e.add(e.mul(seq, TH), row0);
    prefetchRangeL1(qa, e.mul(qRow0, e.idx(R)), e.mul(qRows, e.idx(R)),
                    kMlaDecodeRows * R, tid);
    prefetchRangeL1(q, e.mul(qRow0, e.idx(dq)), e.mul(qRows, e.idx(dq)),
                    kMlaDecodeRows * dq, tid);
    auto prefetchTile = [&](Value key0) {
      Value count = arith::MinSIOp::create(
          b, e.loc, e.maxs(e.sub(cacheEnd, key0), e.idx(0)),
          e.idx(kMlaDecodeTileKeys));
      prefetchRangeL1(cache, cacheRowsFrom(key0), e.mul(count, e.idx(W)),
                      kMlaDecodeTileKeys * W, tid);
    };
    prefetchTile(k0);

    // The block's 16 query rows [qa | q_pe] -> shared -> A fragments.
    stage(tile, kMlaDecodeRows, tid, [&](Value row, Value col) {
      Value r = e.add(row0, row);
      Value valid = e.ult(r, TH);
      Value qRow = e.add(e.mul(seq, TH), r); // (b, t, h) flattened
      Value inLatent = e.ult(col, e.idx(R));
      return eitherVec4(inLatent, qa, e.add(e.mul(qRow, e.idx(R)), col), q,
                        e.add(e.mul(qRow, e.idx(dq)),
                              e.add(e.idx(s.nope), e.sub(col, e.idx(R)))),
                        valid);
    });
    e.barrier();
    const int64_t kSteps = W / 16;
    const int64_t perGroup = (kSteps + kKGroups - 1) / kKGroups;
    Value kGroup = e.remu(warp, e.idx(kKGroups));
    Value keyHalf = e.divu(warp, e.idx(kKGroups));
    SmallVector<Value> stepCol;   // column of each of this warp's k-steps
    SmallVector<Value> stepValid; // null when every group's steps exist
    SmallVector<FragA> qFrags;
    for (int64_t i = 0; i < perGroup; ++i) {
      Value ks = e.add(e.mul(kGroup, e.idx(perGroup)), e.idx(i));
      Value valid = kSteps % kKGroups ? e.ult(ks, e.idx(kSteps)) : Value();
      Value col = e.mul(valid ? e.select(valid, ks, e.idx(0)) : ks, e.idx(16));
      FragA a = e.fragA(tile, e.idx(0), ld, col);
      if (valid)
        for (Value &reg : a)
          reg = e.select(valid, reg, e.i32(0));
      stepCol.push_back(col);
      stepValid.push_back(valid);
      qFrags.push_back(a);
    }

    // This warp's 16-column units of the latent.
    const int64_t units = R / 16;
    const int64_t perWarp = (units + kWarps - 1) / kWarps;
    SmallVector<Value> unitCol, unitValid;
    for (int64_t i = 0; i < perWarp; ++i) {
      Value u = e.add(warp, e.idx(i * kWarps));
      Value valid = units % kWarps ? e.ult(u, e.idx(units)) : Value();
      unitCol.push_back(e.mul(valid ? e.select(valid, u, e.idx(0)) : u, e.idx(16)));
      unitValid.push_back(valid);
    }

    // The row of each accumulator element (el / 2) and the query's t.
    std::array<Value, 2> rowIn = {g, e.add(g, e.idx(8))};
    std::array<Value, 2> limit;
    for (int r = 0; r < 2; ++r)
      limit[r] = e.add(shift, e.divu(e.add(row0, rowIn[r]), e.idx(H)));

    const int64_t oTiles = perWarp * 2;
    SmallVector<Value> init = {e.f32(-1e30), e.f32(-1e30), e.f32(0.0), e.f32(0.0)};
    for (int64_t i = 0; i < oTiles * 4; ++i)
      init.push_back(e.f32(0.0));
    const double log2e = 1.4426950408889634;
    Value scale2 = e.f32(s.scale * log2e);
    Value negInf = e.f32(-std::numeric_limits<double>::infinity());

    auto loop = scf::ForOp::create(b, e.loc, e.idx(0), tiles, e.idx(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value j = loop.getInductionVar();
      ValueRange it = loop.getRegionIterArgs();
      Value key0 = e.add(k0, e.mul(j, e.idx(kMlaDecodeTileKeys)));
      prefetchTile(e.add(key0, e.idx(kMlaDecodeTileKeys)));
      // The previous tile's readers (and the query fragments) are done.
      e.barrier();
      stage(tile, kMlaDecodeTileKeys, tid, [&](Value row, Value col) {
        Value p = e.add(key0, row);
        Value valid = e.ult(p, k1);
        Value atCache = e.add(e.mul(e.add(e.mul(seq, S), p), e.idx(W)), col);
        if (!s.hasRows)
          return guardedVec4(cache, atCache, valid);
        Value atRows = e.add(
            e.mul(e.add(e.mul(seq, Tr), e.sub(p, cacheRows)), e.idx(W)), col);
        return eitherVec4(e.ult(p, cacheRows), cache, atCache, rows, atRows,
                          valid);
      });
      e.barrier();

      // Partial scores of this warp's 16 keys over its k-group's columns.
      std::array<Acc, 2> part = {e.zeroAcc(), e.zeroAcc()};
      Value keyRow = e.mul(keyHalf, e.idx(16));
      for (int64_t i = 0; i < perGroup; ++i) {
        auto bk = e.fragBRows(tile, keyRow, ld, stepCol[i]);
        part[0] = e.mma(qFrags[i], bk[0], part[0], f16);
        part[1] = e.mma(qFrags[i], bk[1], part[1], f16);
      }
      auto vec2 = VectorType::get({2}, b.getF32Type());
      for (int n = 0; n < 2; ++n)
        for (int r = 0; r < 2; ++r) {
          Value key = e.add(keyRow, e.add(e.idx(n * 8), e.mul(tq, e.idx(2))));
          Value at = e.add(
              e.mul(e.add(e.mul(kGroup, e.idx(kMlaDecodeRows)), rowIn[r]),
                    e.idx(kScoreLd)),
              key);
          Value v = vector::FromElementsOp::create(
              b, e.loc, vec2, ValueRange{part[n][2 * r], part[n][2 * r + 1]});
          vector::StoreOp::create(b, e.loc, v, xchg, ValueRange{at},
                                  /*nontemporal=*/false, llvm::MaybeAlign(8));
        }
      e.barrier();

      // The tile's full scores, summed over the k-groups in order, scaled
      // (base 2) and masked.
      const int64_t nTiles = kMlaDecodeTileKeys / 8;
      SmallVector<Acc> sc(nTiles);
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int r = 0; r < 2; ++r) {
          Value key = e.add(e.idx(nt * 8), e.mul(tq, e.idx(2)));
          Value sum;
          for (int64_t kg = 0; kg < kKGroups; ++kg) {
            Value at = e.add(e.mul(e.add(e.idx(kg * kMlaDecodeRows), rowIn[r]),
                                   e.idx(kScoreLd)),
                             key);
            Value v = vector::LoadOp::create(b, e.loc, vec2, xchg, ValueRange{at},
                                             false, llvm::MaybeAlign(8));
            sum = sum ? arith::AddFOp::create(b, e.loc, sum, v).getResult() : v;
          }
          for (int c = 0; c < 2; ++c) {
            Value raw = vector::ExtractOp::create(b, e.loc, sum, int64_t(c));
            Value p = e.add(key0, e.add(key, e.idx(c)));
            Value visible = e.andI(slt(p, k1), sle(p, limit[r]));
            sc[nt][2 * r + c] = e.select(visible, e.fmul(raw, scale2), negInf);
          }
        }
      OnlineSoftmaxTile st = onlineSoftmaxTile(e, sc, it);
      SmallVector<Acc> &o = st.o;
      // O += P [latent]: P's A fragments straight from the scores; the
      // latent columns of the key tile are the B operand (k = keys).
      for (int64_t kk = 0; kk < kMlaDecodeTileKeys / 16; ++kk) {
        FragA p = e.accToFragA(sc[2 * kk], sc[2 * kk + 1], f16);
        for (int64_t i = 0; i < perWarp; ++i) {
          auto bv = e.fragBCols(tile, e.idx(kk * 16), ld, unitCol[i]);
          o[2 * i] = e.mma(p, bv[0], o[2 * i], f16);
          o[2 * i + 1] = e.mma(p, bv[1], o[2 * i + 1], f16);
        }
      }
      SmallVector<Value> next(st.next.begin(), st.next.end());
      for (int64_t nt = 0; nt < oTiles; ++nt)
        for (int el = 0; el < 4; ++el)
          next.push_back(o[nt][el]);
      scf::YieldOp::create(b, e.loc, next);
    }

    // Epilogue: the partial (unnormalised) mix, its row max and row sum.
    Value padded = e.mul(e.divu(e.add(TH, e.idx(kMlaDecodeRows - 1)),
                                e.idx(kMlaDecodeRows)),
                         e.idx(kMlaDecodeRows));
    Value partRow0 = e.add(e.mul(e.add(e.mul(seq, splits), split), padded), row0);
    std::array<Value, 2> l;
    for (int r = 0; r < 2; ++r) {
      l[r] = loop.getResult(2 + r);
      for (int32_t off : {1, 2})
        l[r] = e.fadd(l[r], e.shuffleXor(l[r], off));
    }
    {
      auto writer = scf::IfOp::create(
          b, e.loc, e.andI(e.eq(warp, e.idx(0)), e.eq(tq, e.idx(0))), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&writer.getThenRegion().front());
      for (int r = 0; r < 2; ++r) {
        Value at = e.add(partRow0, rowIn[r]);
        e.store(loop.getResult(r), mOut, at);
        e.store(l[r], lOut, at);
      }
    }
    auto vec2 = VectorType::get({2}, b.getF32Type());
    for (int64_t i = 0; i < perWarp; ++i) {
      std::optional<OpBuilder::InsertionGuard> guard;
      if (unitValid[i]) {
        auto owns = scf::IfOp::create(b, e.loc, unitValid[i], false);
        guard.emplace(b);
        b.setInsertionPointToStart(&owns.getThenRegion().front());
      }
      for (int n = 0; n < 2; ++n)
        for (int r = 0; r < 2; ++r) {
          Value col = e.add(unitCol[i], e.add(e.idx(n * 8), e.mul(tq, e.idx(2))));
          Value at = e.add(e.mul(e.add(partRow0, rowIn[r]), e.idx(R)), col);
          Value v = vector::FromElementsOp::create(
              b, e.loc, vec2,
              ValueRange{loop.getResult(4 + (2 * i + n) * 4 + 2 * r),
                         loop.getResult(4 + (2 * i + n) * 4 + 2 * r + 1)});
          vector::StoreOp::create(b, e.loc, v, accOut, ValueRange{at},
                                  /*nontemporal=*/false, llvm::MaybeAlign(8));
        }
    }
  }

  /// Sum (or max) of `v` over the block: shuffles within each warp, then
  /// the eight warp results in order, through `scratch` (8 f32). Every
  /// thread gets the result.
  Value blockReduce(Value v, Value scratch, Value lane, Value warp, bool max) {
    OpBuilder &b = e.b;
    auto combine = [&](Value a, Value c) { return max ? e.fmax(a, c) : e.fadd(a, c); };
    for (int32_t off : {16, 8, 4, 2, 1})
      v = combine(v, e.shuffleXor(v, off));
    {
      auto first = scf::IfOp::create(b, e.loc, e.eq(lane, e.idx(0)), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&first.getThenRegion().front());
      e.store(v, scratch, warp);
    }
    e.barrier();
    Value r = e.load(scratch, e.idx(0));
    for (int64_t w = 1; w < kWarps; ++w)
      r = combine(r, e.load(scratch, e.idx(w)));
    return r;
  }

  /// The combine: block (column group, row, sequence) sums its columns
  /// latent columns of one query row over the splits. Each of the block's
  /// groups thread groups takes every groups-th split, kUnroll splits a
  /// trip with their loads issued together, and the groups meet in shared
  /// memory in order. The first trip's loads go out before the split maxima
  /// and sums are read and reduced, so that both wait for memory at once.
  void emitCombine(mlir::gpu::GPUModuleOp module, StringRef name, Value acc,
                   Value mIn, Value lIn, Value mixed, Value TH, Value splits,
                   int64_t columns) {
    OpBuilder &b = e.b;
    Type f32 = b.getF32Type();
    const int64_t groups = kMlaDecodeThreads / columns;
    constexpr int64_t kUnroll = 8;
    constexpr int64_t kPerThread = kMlaDecodeMaxSplits / kMlaDecodeThreads;
    static_assert(kMlaDecodeMaxSplits % kMlaDecodeThreads == 0 &&
                      kMlaDecodeThreads % kMlaDecodeCombineColumns == 0 &&
                      kMlaDecodeThreads % kMlaDecodeCombineWideColumns == 0 &&
                      kMlaDecodeFewSplits <= kUnroll,
                  "the combine's split and column shares must divide evenly");
    Value weights = e.sharedBuffer(module, (name + "_weights").str(),
                                   kMlaDecodeMaxSplits, f32);
    Value maxScratch = e.sharedBuffer(module, (name + "_max").str(), kWarps, f32);
    Value sumScratch = e.sharedBuffer(module, (name + "_sum").str(), kWarps, f32);
    Value parts = e.sharedBuffer(module, (name + "_parts").str(),
                                 kMlaDecodeThreads, f32);
    Value tid = e.threadId(), lane = e.laneId();
    Value warp = e.divu(tid, e.idx(32));
    Value r = e.blockId(mlir::gpu::Dimension::y);
    Value seq = e.blockId(mlir::gpu::Dimension::z);
    Value padded = e.mul(e.divu(e.add(TH, e.idx(kMlaDecodeRows - 1)),
                                e.idx(kMlaDecodeRows)),
                         e.idx(kMlaDecodeRows));
    // Partial row of split s: (seq * splits + s) * padded + r.
    Value rowOf0 = e.add(e.mul(e.mul(seq, splits), padded), r);
    auto partRow = [&](Value split) { return e.add(rowOf0, e.mul(split, padded)); };

    Value gi = e.divu(tid, e.idx(columns));
    Value c = e.add(e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(columns)),
                    e.remu(tid, e.idx(columns)));
    Value inRow = R % columns ? e.ult(c, e.idx(R)) : Value();
    Value col = inRow ? e.select(inRow, c, e.idx(0)) : c;

    // One trip: this group's splits base + gi + u groups, loads first
    // (clamped to split 0 past the end, and weighted by zero there).
    struct Term {
      Value valid, split, x;
    };
    auto tripLoads = [&](Value base) {
      SmallVector<Term> terms;
      for (int64_t u = 0; u < kUnroll; ++u) {
        Value sIdx = e.add(base, e.add(gi, e.idx(u * groups)));
        Value valid = e.ult(sIdx, splits);
        Value at = e.select(valid, sIdx, e.idx(0));
        terms.push_back(
            {valid, at, e.load(acc, e.add(e.mul(partRow(at), e.idx(R)), col))});
      }
      return terms;
    };
    auto tripSum = [&](ArrayRef<Term> terms, Value sum) {
      for (const Term &t : terms)
        sum = e.fadd(sum, e.select(t.valid,
                                   e.fmul(e.load(weights, t.split), t.x),
                                   e.f32(0.0)));
      return sum;
    };
    SmallVector<Term> first = tripLoads(e.idx(0));

    // Every split's max and sum (thread t holds splits t, t + 256, ...),
    // the largest max, each split's weight exp2(m_s - m) and the weighted
    // sum of the row sums.
    SmallVector<Value> mine, ms, ls;
    Value localMax = e.f32(-1e30);
    for (int64_t q = 0; q < kPerThread; ++q) {
      Value sIdx = e.add(tid, e.idx(q * kMlaDecodeThreads));
      Value valid = e.ult(sIdx, splits);
      Value at = partRow(e.select(valid, sIdx, e.idx(0)));
      mine.push_back(valid);
      ms.push_back(e.select(valid, e.load(mIn, at), e.f32(-1e30)));
      ls.push_back(e.select(valid, e.load(lIn, at), e.f32(0.0)));
    }
    for (Value m : ms)
      localMax = e.fmax(localMax, m);
    Value mAll = blockReduce(localMax, maxScratch, lane, warp, true);
    Value localSum = e.f32(0.0);
    for (int64_t q = 0; q < kPerThread; ++q) {
      Value w = math::Exp2Op::create(b, e.loc, e.fsub(ms[q], mAll));
      auto owned = scf::IfOp::create(b, e.loc, mine[q], false);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&owned.getThenRegion().front());
        e.store(w, weights, e.add(tid, e.idx(q * kMlaDecodeThreads)));
      }
      localSum = e.fadd(localSum, e.select(mine[q], e.fmul(w, ls[q]), e.f32(0.0)));
    }
    // Its barrier also publishes the weights.
    Value lAll = blockReduce(localSum, sumScratch, lane, warp, false);

    Value sum = tripSum(first, e.f32(0.0));
    const int64_t perTrip = groups * kUnroll;
    auto rest = scf::ForOp::create(b, e.loc, e.idx(perTrip), splits,
                                   e.idx(perTrip), ValueRange{sum});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(rest.getBody());
      SmallVector<Term> terms = tripLoads(rest.getInductionVar());
      scf::YieldOp::create(b, e.loc,
                           tripSum(terms, rest.getRegionIterArgs()[0]));
    }
    e.store(rest.getResult(0), parts, tid);
    e.barrier();
    Value write = e.ult(tid, e.idx(columns));
    if (inRow)
      write = e.andI(write, inRow);
    auto writer = scf::IfOp::create(b, e.loc, write, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&writer.getThenRegion().front());
    Value total = e.load(parts, tid);
    for (int64_t k = 1; k < groups; ++k)
      total = e.fadd(total, e.load(parts, e.add(tid, e.idx(k * columns))));
    Value positive = arith::CmpFOp::create(b, e.loc, arith::CmpFPredicate::OGT,
                                           lAll, e.f32(0.0));
    Value out = e.select(positive, e.fdiv(total, lAll), e.f32(0.0));
    e.store(out, mixed, e.add(e.mul(e.add(e.mul(seq, TH), r), e.idx(R)), c));
  }
};

MemRefType dyn(Type t) { return MemRefType::get({ShapedType::kDynamic}, t); }

} // namespace

mlir::gpu::GPUFuncOp emitMlaDecodeSplitKernel(OpBuilder &b, Location loc,
                                              mlir::gpu::GPUModuleOp module,
                                              StringRef name,
                                              const MlaDecodeShape &s) {
  OpBuilder::InsertionGuard guard(b);
  Type f32 = b.getF32Type(), index = b.getIndexType();
  Type queryType = s.bf16Queries ? b.getBF16Type() : f32,
       cacheType = s.bf16Cache ? b.getBF16Type() : f32;
  SmallVector<Type> args = {dyn(f32), dyn(queryType), dyn(cacheType)};
  if (s.hasRows)
    args.push_back(dyn(cacheType));
  if (s.hasLengths)
    args.push_back(dyn(b.getI32Type()));
  args.append({dyn(f32), dyn(f32), dyn(f32), index, index});
  if (s.hasRows)
    args.push_back(index);
  args.append({index, index});
  auto fn = createKernel(b, loc, module, name, args,
                         {int32_t(kMlaDecodeThreads), 1, 1});
  b.setInsertionPoint(fn.getBody().front().getTerminator());
  Block &body = fn.getBody().front();
  unsigned a = 0;
  auto next = [&] { return body.getArgument(a++); };
  Value qa = next(), q = next(), cache = next();
  Value rows = s.hasRows ? next() : Value();
  Value lengths = s.hasLengths ? next() : Value();
  Value acc = next(), m = next(), l = next(), T = next(), S = next();
  Value Tr = s.hasRows ? next() : Value();
  Value kps = next(), splits = next();
  MlaDecodeEmitter em(b, loc, s);
  em.emitSplit(module, name, qa, q, cache, rows, lengths, acc, m, l, T, S, Tr,
               kps, splits);
  return fn;
}

mlir::gpu::GPUFuncOp emitMlaDecodeCombineKernel(OpBuilder &b, Location loc,
                                                mlir::gpu::GPUModuleOp module,
                                                StringRef name,
                                                const MlaDecodeShape &s,
                                                int64_t columns) {
  assert((columns == kMlaDecodeCombineColumns ||
          columns == kMlaDecodeCombineWideColumns) &&
         "a combine block takes 16 or 256 columns");
  OpBuilder::InsertionGuard guard(b);
  Type f32 = b.getF32Type(), index = b.getIndexType();
  auto fn = createKernel(b, loc, module, name,
                         {dyn(f32), dyn(f32), dyn(f32), dyn(f32), index, index},
                         {int32_t(kMlaDecodeThreads), 1, 1});
  b.setInsertionPoint(fn.getBody().front().getTerminator());
  Block &body = fn.getBody().front();
  MlaDecodeEmitter em(b, loc, s);
  em.emitCombine(module, name, body.getArgument(0), body.getArgument(1),
                 body.getArgument(2), body.getArgument(3), body.getArgument(4),
                 body.getArgument(5), columns);
  return fn;
}

} // namespace kimi::gpu

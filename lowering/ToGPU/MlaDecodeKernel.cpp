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

#include "lowering/ToGPU/MlaDecodeKernel.h"
#include "lowering/ToGPU/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

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

  Value vec4(Value memref, Value index) {
    auto type = VectorType::get({4}, e.b.getF32Type());
    return vector::LoadOp::create(e.b, e.loc, type, memref, ValueRange{index},
                                  /*nontemporal=*/false, llvm::MaybeAlign(16));
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
  /// `inFirst ? first[atFirst] : second[atSecond]`, zeros unless `valid`.
  Value eitherVec4(Value inFirst, Value first, Value atFirst, Value second,
                   Value atSecond, Value valid) {
    auto type = VectorType::get({4}, e.b.getF32Type());
    auto pick = scf::IfOp::create(e.b, e.loc, TypeRange{type}, inFirst, true);
    {
      OpBuilder::InsertionGuard g(e.b);
      e.b.setInsertionPointToStart(&pick.getThenRegion().front());
      scf::YieldOp::create(e.b, e.loc, guardedVec4(first, atFirst, valid));
      e.b.setInsertionPointToStart(&pick.getElseRegion().front());
      scf::YieldOp::create(e.b, e.loc, guardedVec4(second, atSecond, valid));
    }
    return pick.getResult(0);
  }

  /// Fills rows [0, rows) of the f16 tile from f32 pieces of four:
  /// `source(row, col)` gives the piece (zeros where invalid). All loads of
  /// a thread are issued before its first store.
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
      Value v = arith::TruncFOp::create(b, e.loc, halfType, source(row, col));
      loaded.push_back({v, e.add(e.mul(row, e.idx(ld)), col), exists});
    }
    storeStaged(e, loaded, tile, 8);
  }

  void emitSplit(mlir::gpu::GPUModuleOp module, StringRef name, Value qa,
                 Value q, Value cache, Value rows, Value lengths, Value accOut,
                 Value mOut, Value lOut, Value T, Value S, Value Tr, Value kps,
                 Value splits) {
    OpBuilder &b = e.b;
    Type f16 = b.getF16Type();
    const int64_t H = s.heads, dq = s.dq();
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

    // The block's 16 query rows [qa | q_pe] -> shared -> A fragments.
    Value row0 = e.mul(rowTile, e.idx(kMlaDecodeRows));
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

  void emitCombine(mlir::gpu::GPUModuleOp module, StringRef name, Value acc,
                   Value mIn, Value lIn, Value mixed, Value TH, Value splits) {
    OpBuilder &b = e.b;
    Type f32 = b.getF32Type();
    Value weights = e.sharedBuffer(module, (name + "_weights").str(),
                                   kMlaDecodeMaxSplits, f32);
    Value maxScratch = e.sharedBuffer(module, (name + "_max").str(), kWarps, f32);
    Value sumScratch = e.sharedBuffer(module, (name + "_sum").str(), kWarps, f32);
    constexpr int64_t groups = kMlaDecodeThreads / kMlaDecodeCombineColumns;
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
    Value step = e.idx(kMlaDecodeThreads);

    // The largest split max, then each split's weight exp2(m_s - m) and the
    // weighted sum of the row sums.
    auto maxLoop = scf::ForOp::create(b, e.loc, tid, splits, step,
                                      ValueRange{e.f32(-1e30)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(maxLoop.getBody());
      Value m = e.load(mIn, partRow(maxLoop.getInductionVar()));
      scf::YieldOp::create(b, e.loc, e.fmax(maxLoop.getRegionIterArgs()[0], m));
    }
    Value mAll = blockReduce(maxLoop.getResult(0), maxScratch, lane, warp, true);
    auto sumLoop = scf::ForOp::create(b, e.loc, tid, splits, step,
                                      ValueRange{e.f32(0.0)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(sumLoop.getBody());
      Value sIdx = sumLoop.getInductionVar();
      Value w = math::Exp2Op::create(b, e.loc,
                                     e.fsub(e.load(mIn, partRow(sIdx)), mAll));
      e.store(w, weights, sIdx);
      scf::YieldOp::create(
          b, e.loc,
          e.fadd(sumLoop.getRegionIterArgs()[0], e.fmul(w, e.load(lIn, partRow(sIdx)))));
    }
    Value lAll = blockReduce(sumLoop.getResult(0), sumScratch, lane, warp, false);

    // Group gi of the block sums splits gi, gi + 4, ... of its column,
    // four loads in flight per trip.
    Value gi = e.divu(tid, e.idx(kMlaDecodeCombineColumns));
    Value c = e.add(e.mul(e.blockId(mlir::gpu::Dimension::x),
                          e.idx(kMlaDecodeCombineColumns)),
                    e.remu(tid, e.idx(kMlaDecodeCombineColumns)));
    Value inRow = R % kMlaDecodeCombineColumns ? e.ult(c, e.idx(R)) : Value();
    Value col = inRow ? e.select(inRow, c, e.idx(0)) : c;
    constexpr int64_t unroll = 4;
    Value full = e.mul(e.divu(splits, e.idx(groups * unroll)), e.idx(groups * unroll));
    auto term = [&](Value sIdx, Value sum) {
      Value x = e.load(acc, e.add(e.mul(partRow(sIdx), e.idx(R)), col));
      return e.fadd(sum, e.fmul(e.load(weights, sIdx), x));
    };
    auto mainLoop = scf::ForOp::create(b, e.loc, e.idx(0), full,
                                       e.idx(groups * unroll), ValueRange{e.f32(0.0)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(mainLoop.getBody());
      Value base = e.add(mainLoop.getInductionVar(), gi);
      SmallVector<Value> xs, ws;
      for (int64_t u = 0; u < unroll; ++u) {
        Value sIdx = e.add(base, e.idx(u * groups));
        xs.push_back(e.load(acc, e.add(e.mul(partRow(sIdx), e.idx(R)), col)));
        ws.push_back(e.load(weights, sIdx));
      }
      Value sum = mainLoop.getRegionIterArgs()[0];
      for (int64_t u = 0; u < unroll; ++u)
        sum = e.fadd(sum, e.fmul(ws[u], xs[u]));
      scf::YieldOp::create(b, e.loc, sum);
    }
    auto restLoop = scf::ForOp::create(b, e.loc, e.add(full, gi), splits,
                                       e.idx(groups), ValueRange{mainLoop.getResult(0)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(restLoop.getBody());
      scf::YieldOp::create(b, e.loc,
                           term(restLoop.getInductionVar(),
                                restLoop.getRegionIterArgs()[0]));
    }
    e.store(restLoop.getResult(0), parts, tid);
    e.barrier();
    Value write = e.ult(tid, e.idx(kMlaDecodeCombineColumns));
    if (inRow)
      write = e.andI(write, inRow);
    auto writer = scf::IfOp::create(b, e.loc, write, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&writer.getThenRegion().front());
    Value total = e.load(parts, tid);
    for (int64_t k = 1; k < groups; ++k)
      total = e.fadd(total, e.load(parts, e.add(tid, e.idx(k * kMlaDecodeCombineColumns))));
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
  SmallVector<Type> args = {dyn(f32), dyn(f32), dyn(f32)};
  if (s.hasRows)
    args.push_back(dyn(f32));
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
                                                const MlaDecodeShape &s) {
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
                 body.getArgument(5));
  return fn;
}

} // namespace kimi::gpu

//===- MlaPrefillKernel.cpp - flash-style causal MLA for many queries -----===//
//
// One block per (64 queries, head, sequence); four warps of 16 query rows.
// The block stages its queries once in shared memory (f16, 16-byte pieces)
// and keeps them as tensor-core A fragments in registers; then, per tile of
// 64 keys, it stages [k_nope | k_pe] and v by cp.async into one of two
// stages of dynamic shared memory (the next tile's copies fly while this
// tile's products run, in no registers) and each warp forms its 16 x 64 scores (mma.sync, f32), masks
// them causally, updates the running row max m and sum l (online softmax,
// in base 2), rescales its output accumulators and adds P V with P taken
// straight from the score registers. The epilogue divides by l and applies
// the output gate. Key tiles past the block's last visible key are never
// read.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/MlaPrefillKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <functional>
#include <optional>
#include <limits>
#include <numeric>

using namespace mlir;

namespace kimi::gpu {

namespace {
constexpr int64_t kPad = 8; // f16 elements of row padding: no bank conflicts
/// Key tiles in flight: the one being used and the next.
constexpr int64_t kStages = 2;
/// A block's dynamic shared memory at most (an H100/H200 block may opt in to
/// 227 KiB).
constexpr int64_t kSharedBytes = 227 * 1024;
} // namespace

int64_t mlaPrefillSharedBytes(const MlaPrefillShape &s) {
  return kStages * 2 * kMlaTileKeys * (s.dq() + kPad + s.dv + kPad);
}

LogicalResult verifyMlaPrefillShape(const MlaPrefillShape &s, std::string &why) {
  auto fail = [&](const std::string &msg) {
    why = msg;
    return failure();
  };
  if (s.heads <= 0)
    return fail("heads must be positive");
  if (s.nope <= 0 || s.nope % 8 != 0 || s.rope < 0 || s.rope % 8 != 0 ||
      s.dq() % 16 != 0)
    return fail("qk head width " + std::to_string(s.nope) + " + " +
                std::to_string(s.rope) +
                ": the kernel needs multiples of 8 summing to a multiple of 16");
  if (s.dv <= 0 || s.dv % 16 != 0)
    return fail("v head width " + std::to_string(s.dv) +
                ": the kernel needs a multiple of 16");
  int64_t shared = mlaPrefillSharedBytes(s);
  if (shared > kSharedBytes)
    return fail("qk width " + std::to_string(s.dq()) + " and v width " +
                std::to_string(s.dv) + " need " + std::to_string(shared) +
                " bytes of shared memory per block, over 227 KiB");
  // Registers per thread: query fragments dq / 4, output dv / 2, scores 32.
  if (s.dq() / 4 + s.dv / 2 > 160)
    return fail("qk width " + std::to_string(s.dq()) + " and v width " +
                std::to_string(s.dv) + " do not fit the kernel's registers");
  return success();
}

namespace {

struct MlaPrefillEmitter {
  MlaPrefillEmitter(OpBuilder &b, Location loc, const MlaPrefillShape &s)
      : e(b, loc), s(s), dq(s.dq()), ldk(s.dq() + kPad), ldv(s.dv + kPad) {}

  KernelEmitter e;
  const MlaPrefillShape &s;
  const int64_t dq, ldk, ldv;
  Value q, kv, pe, gate, lengths, out, T, S;
  // Shared [2][64][ldk] (queries first, then key tiles) and [2][64][ldv]:
  // key tile j in stage j mod 2.
  Value kTile, vTile;
  Value tid, lane, warp, g, tq, seq, head, t0;

  /// Copies a [64][cols] f16 region into columns [dstCol, dstCol + cols) of
  /// a shared tile in 16-byte pieces (8 halves), every load of a thread in
  /// flight before the first store: `source(row, col)` gives (element
  /// index, in bounds); rows out of bounds are zeros.
  void stage(Value tile, int64_t ld, int64_t dstCol, int64_t cols,
             const std::function<std::pair<Value, Value>(Value, Value)> &source,
             Value memref) {
    if (cols == 0)
      return;
    OpBuilder &b = e.b;
    auto vecType = VectorType::get({8}, b.getF16Type());
    const int64_t piecesPerRow = cols / 8;
    const int64_t total = kMlaBlockQueries * piecesPerRow;
    const int64_t steps = (total + kMlaThreads - 1) / kMlaThreads;
    Value zeros = arith::ConstantOp::create(
        b, e.loc, DenseElementsAttr::get(vecType, b.getF16FloatAttr(0.0)));
    SmallVector<StagedPiece> loaded;
    for (int64_t u = 0; u < steps; ++u) {
      Value piece = e.add(tid, e.idx(u * kMlaThreads));
      Value row = e.divu(piece, e.idx(piecesPerRow));
      Value col = e.mul(e.remu(piece, e.idx(piecesPerRow)), e.idx(8));
      auto [at, valid] = source(row, col);
      Value exists = total % kMlaThreads ? e.ult(piece, e.idx(total)) : Value();
      if (exists)
        valid = e.andI(valid, exists);
      // A clamped address keeps the load in bounds; its value is dropped.
      Value v = vector::LoadOp::create(b, e.loc, vecType, memref,
                                       ValueRange{e.select(valid, at, e.idx(0))},
                                       /*nontemporal=*/false, llvm::MaybeAlign(16));
      v = arith::SelectOp::create(b, e.loc, valid, v, zeros);
      loaded.push_back({v, e.add(e.mul(row, e.idx(ld)), e.add(col, e.idx(dstCol))),
                        exists});
    }
    // Pieces past the tile (a partial last step) have no place to go.
    storeStaged(e, loaded, tile, 16);
  }

  /// Key tile `j`'s [k_nope | k_pe] and v, by cp.async into stage `st`, as
  /// one group: 16-byte pieces, rows past S (or a tile past the last)
  /// zero-filled.
  Value issueTile(Value j, Value st, Value tiles) {
    OpBuilder &b = e.b;
    const int64_t dn = s.nope, dv = s.dv, kvw = s.heads * (dn + dv);
    Value key0 = e.mul(j, e.idx(kMlaTileKeys));
    Value live = e.ult(j, tiles);
    auto token = nvgpu::DeviceAsyncTokenType::get(b.getContext());
    SmallVector<Value> tokens;
    // cols columns of every row: from `from(row, sIdx) + col` of `src` to
    // column dstCol + col of the stage's row.
    auto copy = [&](Value tile, int64_t ld, int64_t dstCol, int64_t cols,
                    const std::function<Value(Value)> &rowStart, Value src) {
      if (cols == 0)
        return;
      const int64_t piecesPerRow = cols / 8, total = kMlaTileKeys * piecesPerRow;
      for (int64_t u = 0; u < (total + kMlaThreads - 1) / kMlaThreads; ++u) {
        Value piece = e.add(tid, e.idx(u * kMlaThreads));
        Value row = e.divu(piece, e.idx(piecesPerRow));
        Value col = e.mul(e.remu(piece, e.idx(piecesPerRow)), e.idx(8));
        Value sIdx = e.add(key0, row);
        Value valid = e.andI(live, e.ult(sIdx, S));
        Value from = e.select(valid, e.add(rowStart(e.add(e.mul(seq, S), sIdx)), col),
                              e.idx(0));
        Value to = e.add(e.mul(e.add(e.mul(st, e.idx(kMlaTileKeys)), row), e.idx(ld)),
                         e.add(col, e.idx(dstCol)));
        auto issue = [&] {
          tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
              b, e.loc, token, tile, ValueRange{to}, src, ValueRange{from},
              b.getIndexAttr(8), e.select(valid, e.idx(8), e.idx(0)),
              b.getUnitAttr()));
        };
        if (total % kMlaThreads == 0) {
          issue();
          continue;
        }
        // A partial last step: pieces past the tile copy nothing.
        auto exists = scf::IfOp::create(b, e.loc, e.ult(piece, e.idx(total)), false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&exists.getThenRegion().front());
        issue();
        // (The copy's token stays inside; the group waits for all copies.)
        tokens.pop_back();
      }
    };
    Value headAt = e.mul(head, e.idx(dn + dv));
    copy(kTile, ldk, 0, dn,
         [&](Value r) { return e.add(e.mul(r, e.idx(kvw)), headAt); }, kv);
    copy(kTile, ldk, dn, s.rope, [&](Value r) { return e.mul(r, e.idx(s.rope)); }, pe);
    copy(vTile, ldv, 0, dv,
         [&](Value r) { return e.add(e.add(e.mul(r, e.idx(kvw)), headAt), e.idx(dn)); },
         kv);
    return nvgpu::DeviceAsyncCreateGroupOp::create(b, e.loc, token, tokens);
  }

  void emit(mlir::gpu::GPUModuleOp module, StringRef name) {
    OpBuilder &b = e.b;
    Type f16 = b.getF16Type();
    const int64_t H = s.heads, dv = s.dv;
    const int64_t kElems = kStages * kMlaTileKeys * ldk;
    kTile = e.dynamicSharedBuffer(0, kElems, f16);
    vTile = e.dynamicSharedBuffer(2 * kElems, kStages * kMlaTileKeys * ldv, f16);
    tid = e.threadId();
    lane = e.laneId();
    warp = e.divu(tid, e.idx(32));
    g = e.divu(lane, e.idx(4));
    tq = e.remu(lane, e.idx(4));
    t0 = e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(kMlaBlockQueries));
    head = e.blockId(mlir::gpu::Dimension::y);
    seq = e.blockId(mlir::gpu::Dimension::z);
    // Valid rows L and the position offset L - T of the queries (signed).
    Value L = s.hasLengths ? e.toIndex(e.load(lengths, seq)) : S;
    Value offset = e.sub(L, T);
    auto sle = [&](Value a, Value c) {
      return arith::CmpIOp::create(b, e.loc, arith::CmpIPredicate::sle, a, c);
    };
    auto slt = [&](Value a, Value c) {
      return arith::CmpIOp::create(b, e.loc, arith::CmpIPredicate::slt, a, c);
    };

    // Queries -> shared -> A fragments (dq / 16 of them per warp).
    stage(kTile, ldk, 0, dq,
          [&](Value row, Value col) {
            Value t = e.add(t0, row);
            Value at = e.add(e.mul(e.add(e.mul(e.add(e.mul(seq, T), t), e.idx(H)), head),
                                   e.idx(dq)),
                             col);
            return std::make_pair(at, e.ult(t, T));
          },
          q);
    e.barrier();
    Value warpRow = e.mul(warp, e.idx(16));
    SmallVector<FragA> qFrags;
    for (int64_t ks = 0; ks < dq / 16; ++ks)
      qFrags.push_back(e.fragA(kTile, warpRow, ldk, e.idx(ks * 16)));
    // Every warp has its fragments before key tile 0 overwrites the queries.
    e.barrier();

    // Key tiles up to the block's last visible key (offset + last query).
    Value lastQuery = e.sub(e.minu(e.add(t0, e.idx(kMlaBlockQueries)), T), e.idx(1));
    Value visibleKeys = e.add(e.add(offset, lastQuery), e.idx(1));
    visibleKeys = arith::MinSIOp::create(b, e.loc, visibleKeys, S);
    visibleKeys = arith::MaxSIOp::create(b, e.loc, visibleKeys, e.idx(0));
    Value tiles = e.divu(e.add(visibleKeys, e.idx(kMlaTileKeys - 1)),
                         e.idx(kMlaTileKeys));

    const int64_t nTiles = kMlaTileKeys / 8, oTiles = dv / 8;
    // Running max starts finite: a row whose first tile is all masked then
    // gives exp2(-inf - m) = 0 rather than NaN.
    SmallVector<Value> init = {e.f32(-1e30), e.f32(-1e30), e.f32(0.0), e.f32(0.0)};
    for (int64_t i = 0; i < oTiles * 4; ++i)
      init.push_back(e.f32(0.0));
    const double log2e = 1.4426950408889634;
    Value scale2 = e.f32(s.scale * log2e);
    Value negInf = e.f32(-std::numeric_limits<double>::infinity());
    // The two query rows of this lane (t of the accumulators' el / 2).
    std::array<Value, 2> rowT = {e.add(t0, e.add(warpRow, g)),
                                 e.add(t0, e.add(warpRow, e.add(g, e.idx(8))))};
    std::array<Value, 2> limit = {e.add(offset, rowT[0]), e.add(offset, rowT[1])};

    // Tile 0's copies first; trip j issues tile j + 1's into the other
    // stage (which trip j - 1 read: the barrier orders it), waits for its
    // own tile's and uses it.
    Value first = issueTile(e.idx(0), e.idx(0), tiles);
    auto loop = scf::ForOp::create(b, e.loc, e.idx(0), tiles, e.idx(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value j = loop.getInductionVar();
      ValueRange it = loop.getRegionIterArgs();
      Value key0 = e.mul(j, e.idx(kMlaTileKeys));
      Value stageIdx = e.remu(j, e.idx(kStages));
      Value next = e.add(j, e.idx(1));
      // The previous tile's readers are done with the stage tile j + 1 takes.
      e.barrier();
      issueTile(next, e.remu(next, e.idx(kStages)), tiles);
      nvgpu::DeviceAsyncWaitOp::create(b, e.loc, first, b.getI32IntegerAttr(1));
      e.barrier();
      Value kRow0 = e.mul(stageIdx, e.idx(kMlaTileKeys));

      // Scores: 16 x 64 per warp, eight n8 tiles.
      SmallVector<Acc> sc(nTiles, e.zeroAcc());
      for (int64_t ks = 0; ks < dq / 16; ++ks)
        for (int64_t np = 0; np < nTiles / 2; ++np) {
          auto bk = e.fragBRows(kTile, e.add(kRow0, e.idx(np * 16)), ldk,
                                e.idx(ks * 16));
          sc[2 * np] = e.mma(qFrags[ks], bk[0], sc[2 * np], f16);
          sc[2 * np + 1] = e.mma(qFrags[ks], bk[1], sc[2 * np + 1], f16);
        }
      // Scale (base 2) and causal mask. Only the tiles on the diagonal (or
      // past S) need the mask: the test is uniform over the warp, whose
      // first row sees the fewest keys.
      Value lastKey = e.add(key0, e.idx(kMlaTileKeys - 1));
      Value whole = e.andI(sle(lastKey, e.add(offset, e.add(t0, warpRow))),
                           slt(lastKey, S));
      SmallVector<Type> scoreTypes(nTiles * 4, b.getF32Type());
      auto masking = scf::IfOp::create(b, e.loc, scoreTypes, whole, true);
      {
        OpBuilder::InsertionGuard ig(b);
        b.setInsertionPointToStart(&masking.getThenRegion().front());
        SmallVector<Value> scaled;
        for (int64_t nt = 0; nt < nTiles; ++nt)
          for (int el = 0; el < 4; ++el)
            scaled.push_back(e.fmul(sc[nt][el], scale2));
        scf::YieldOp::create(b, e.loc, scaled);
        b.setInsertionPointToStart(&masking.getElseRegion().front());
        SmallVector<Value> masked;
        for (int64_t nt = 0; nt < nTiles; ++nt)
          for (int el = 0; el < 4; ++el) {
            Value key = e.add(key0, e.add(e.idx(nt * 8),
                                          e.add(e.mul(tq, e.idx(2)), e.idx(el % 2))));
            Value visible = e.andI(sle(key, limit[el / 2]), slt(key, S));
            masked.push_back(e.select(visible, e.fmul(sc[nt][el], scale2), negInf));
          }
        scf::YieldOp::create(b, e.loc, masked);
      }
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int el = 0; el < 4; ++el)
          sc[nt][el] = masking.getResult(nt * 4 + el);
      OnlineSoftmaxTile st = onlineSoftmaxTile(e, sc, it);
      SmallVector<Acc> &o = st.o;
      // O += P V: P's A fragments straight from the score accumulators.
      for (int64_t kk = 0; kk < kMlaTileKeys / 16; ++kk) {
        FragA p = e.accToFragA(sc[2 * kk], sc[2 * kk + 1], f16);
        for (int64_t np = 0; np < oTiles / 2; ++np) {
          auto bv = e.fragBCols(vTile, e.add(kRow0, e.idx(kk * 16)), ldv,
                                e.idx(np * 16));
          o[2 * np] = e.mma(p, bv[0], o[2 * np], f16);
          o[2 * np + 1] = e.mma(p, bv[1], o[2 * np + 1], f16);
        }
      }
      SmallVector<Value> carried(st.next.begin(), st.next.end());
      for (int64_t nt = 0; nt < oTiles; ++nt)
        for (int el = 0; el < 4; ++el)
          carried.push_back(o[nt][el]);
      scf::YieldOp::create(b, e.loc, carried);
    }
    // The last trip's copies (of nothing) complete before the block ends.
    nvgpu::DeviceAsyncWaitOp::create(b, e.loc, first, b.getI32IntegerAttr(0));

    // Epilogue: the row sums over the quad, out = O / l [* sigmoid(gate)].
    std::array<Value, 2> inv;
    for (int r = 0; r < 2; ++r) {
      Value l = loop.getResult(2 + r);
      for (int32_t off : {1, 2})
        l = e.fadd(l, mlir::gpu::ShuffleOp::create(b, e.loc, l, off, 32,
                                                   mlir::gpu::ShuffleMode::XOR)
                          .getShuffleResult());
      Value positive = arith::CmpFOp::create(b, e.loc, arith::CmpFPredicate::OGT,
                                             l, e.f32(0.0));
      inv[r] = e.select(positive, e.fdiv(e.f32(1.0), l), e.f32(0.0));
    }
    for (int r = 0; r < 2; ++r) {
      auto inRange = scf::IfOp::create(b, e.loc, e.ult(rowT[r], T), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&inRange.getThenRegion().front());
      Value rowBase = e.mul(e.add(e.mul(e.add(e.mul(seq, T), rowT[r]), e.idx(H)), head),
                            e.idx(dv));
      for (int64_t nt = 0; nt < oTiles; ++nt)
        for (int c = 0; c < 2; ++c) {
          Value col = e.add(e.idx(nt * 8), e.add(e.mul(tq, e.idx(2)), e.idx(c)));
          Value at = e.add(rowBase, col);
          Value v = e.fmul(loop.getResult(4 + nt * 4 + r * 2 + c), inv[r]);
          if (s.hasGate) {
            Value z = e.toF32(e.load(gate, at));
            Value sig = e.fdiv(e.f32(1.0), e.fadd(e.f32(1.0), e.exp(e.fneg(z))));
            v = e.fmul(v, sig);
          }
          e.store(e.fromF32(v, cast<MemRefType>(out.getType()).getElementType()),
                  out, at);
        }
    }
  }
};

} // namespace

mlir::gpu::GPUFuncOp emitMlaPrefillKernel(OpBuilder &b, Location loc,
                                          mlir::gpu::GPUModuleOp module,
                                          StringRef name,
                                          const MlaPrefillShape &s) {
  OpBuilder::InsertionGuard guard(b);
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), index = b.getIndexType();
  auto dyn = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type f16 = b.getF16Type();
  Type io = s.bf16Io ? b.getBF16Type() : f32;
  SmallVector<Type> args = {dyn(f16), dyn(f16), dyn(f16)};
  if (s.hasGate)
    args.push_back(dyn(io));
  if (s.hasLengths)
    args.push_back(dyn(i32));
  args.append({dyn(io), index, index, index});
  auto fn = createKernel(b, loc, module, name, args,
                         {int32_t(kMlaThreads), 1, 1});
  b.setInsertionPoint(fn.getBody().front().getTerminator());
  MlaPrefillEmitter m(b, loc, s);
  Block &body = fn.getBody().front();
  unsigned a = 0;
  m.q = body.getArgument(a++);
  m.kv = body.getArgument(a++);
  m.pe = body.getArgument(a++);
  if (s.hasGate)
    m.gate = body.getArgument(a++);
  if (s.hasLengths)
    m.lengths = body.getArgument(a++);
  m.out = body.getArgument(a++);
  ++a; // B: the grid's z extent already says it
  m.T = body.getArgument(a++);
  m.S = body.getArgument(a++);
  m.emit(module, name);
  return fn;
}

} // namespace kimi::gpu

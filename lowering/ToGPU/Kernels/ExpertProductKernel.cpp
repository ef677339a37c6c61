//===- ExpertProductKernel.cpp - expert products on tensor cores ----------===//
//
// One block per (columns, 128 rows of one expert), eight warps: with
// cp.async copies (bf16 rows and tables) 256 columns of products (128 each
// of gate and up, or 256 of one table) in warps of 64 x 64, else 64
// columns in warps of 32 x 32; or, when the experts hold a few rows each (a
// batch of decode tokens), per (128 columns, 32 rows), eight warps of
// 32 x 16. Per
// 32-deep step (one MXFP4 scale block) the block stages its rows' values,
// split into `terms` bf16 tiles, and each table's slice as a bf16 tile
// (rows n, k contiguous; MXFP4 codes decoded with their scale), then each
// warp runs mma.sync m16n8k16 over both 16-deep halves into f32
// accumulators. Later steps' global loads are issued before the products
// of step s, so they are in flight while the tensor cores work: when rows
// and tables are bf16 (nothing to convert), as cp.async copies of the next
// ExpertProductSpec::asyncStages() - 1 steps into stages of dynamic shared memory
// (what keeps HBM busy when a batch of decode tokens gives each expert a
// few rows); else the next step's, into registers.
// A block's row tile is one expert's rows, from the step's tile table: the
// rows of all experts lie back to back, with no padding, and the launch
// covers a bound on the tiles (blocks past the last return at once).
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/ExpertProductKernel.h"
#include "lowering/ToGPU/Kernels/GemvKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"
#include "lowering/KimiToLinalg/Patterns.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace kimi::gpu {

namespace {
constexpr int64_t kDepth = 32; // one E8M0 block of k
constexpr int64_t kLd = kDepth + 8; // bf16 row stride: no bank conflicts
} // namespace

std::string ExpertProductSpec::key() const {
  std::string k = "expert_product_e" + std::to_string(experts) + "_n" +
                  std::to_string(n) + "_k" + std::to_string(this->k) + "_t" +
                  std::to_string(terms) + (bf16Rows ? "_r16" : "") +
                  (bf16Tables ? "_w16" : "_mx") + (bf16Out ? "_o16" : "") +
                  (gatherRows ? "_g" : "") +
                  (tileM != 128 ? "_m" + std::to_string(tileM) : "");
  if (glu)
    k += situ ? "_situ_" + std::to_string(beta) + "_" + std::to_string(linearBeta)
              : "_silu";
  return k;
}

std::string verifyExpertProductSpec(const ExpertProductSpec &s) {
  if (s.experts <= 0 || s.n <= 0 || s.k <= 0)
    return "empty tables";
  if (s.k % kDepth != 0)
    return "k = " + std::to_string(s.k) + " is not a multiple of 32 (the kernel's depth, one MXFP4 block)";
  if (s.n % 8 != 0)
    return "n = " + std::to_string(s.n) + " is not a multiple of 8";
  if (s.terms != 1 && s.terms != 3)
    return "terms = " + std::to_string(s.terms) + " is not 1 or 3";
  if (s.bf16Rows && s.terms != 1)
    return "bf16 rows are one term (terms = " + std::to_string(s.terms) + ")";
  if (s.tileM != 128 && s.tileM != 32)
    return "a tile of " + std::to_string(s.tileM) + " rows (128 or 32)";
  return "";
}

int64_t expertProductSharedBytes(const ExpertProductSpec &s) {
  if (!s.asyncCopies())
    return 0;
  return s.asyncStages() * 2 * (s.tileM + s.tables() * s.tileN()) * kLd;
}

int64_t chooseExpertProductTileM(int64_t rows, int64_t experts) {
  return rows <= 16 * experts ? 32 : 128;
}

namespace {

struct ExpertProductEmitter {
  ExpertProductEmitter(OpBuilder &b, Location loc, const ExpertProductSpec &s)
      : e(b, loc), s(s) {}

  KernelEmitter e;
  const ExpertProductSpec &s;
  Value rows, rowToken, tileExpert, tileStart, tileEnd, out;
  /// Per table: its bf16 values, or its MXFP4 codes and scales.
  SmallVector<Value, 2> values, scales;

  /// The tile: TM rows by TN columns, eight warps of WM rows by warpCols
  /// columns (2 x 4 warps of 64 x 32 (64 gate/up) or 64 x 64 for the
  /// cp.async 128-row tile, 4 x 2 of 32 x 32 for 128 x 64, 1 x 8 of 32 x
  /// 16 for 32 x 128), MI m16 and NT n8 tiles a warp.
  const int64_t TM = s.tileM, TN = s.tileN(), WM = s.warpRows(),
                warpsM = TM / WM, warpsN = 8 / warpsM, warpCols = TN / warpsN,
                MI = WM / 16, NT = warpCols / 8;
  /// Per step, a thread's share of the rows: vectors of four values.
  const int64_t kRowPieces = TM * kDepth / 4 / kExpertProductThreads;
  /// And of each table: vectors of eight values (one word of codes).
  const int64_t kTablePieces = TN * kDepth / 8 / kExpertProductThreads;

  void emit(mlir::gpu::GPUModuleOp module, StringRef name) {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i32 = b.getI32Type();
    const int tables = s.tables();
    // bf16 rows and tables are copied into shared memory as they are, by
    // cp.async into asyncStages() stages of dynamic shared
    // memory (later steps' copies fly while this step's products run, in
    // no registers); the others pass through registers to be split into
    // terms or decoded, one static stage.
    const bool async = s.asyncCopies();
    const int64_t stages = async ? s.asyncStages() : 1;
    SmallVector<Value, 3> aTiles;
    SmallVector<Value, 2> bTiles;
    if (async) {
      const int64_t aElems = stages * TM * kLd, bElems = stages * TN * kLd;
      aTiles.push_back(e.dynamicSharedBuffer(0, aElems, bf16));
      for (int t = 0; t < tables; ++t)
        bTiles.push_back(
            e.dynamicSharedBuffer(2 * (aElems + t * bElems), bElems, bf16));
    } else {
      for (int t = 0; t < s.terms; ++t)
        aTiles.push_back(e.sharedBuffer(module, (name + "_a" + Twine(t)).str(),
                                        TM * kLd, bf16));
      for (int t = 0; t < tables; ++t)
        bTiles.push_back(e.sharedBuffer(module, (name + "_b" + Twine(t)).str(),
                                        TN * kLd, bf16));
    }
    Value tid = e.threadId(), lane = e.laneId();
    Value warp = e.divu(tid, e.idx(32));
    Value wm = e.divu(warp, e.idx(warpsN)), wn = e.remu(warp, e.idx(warpsN));
    Value g = e.divu(lane, e.idx(4)), tq = e.remu(lane, e.idx(4));
    Value n0 = e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(TN));
    // Row tile y: rows m0 .. limit of expert ex (none past the last tile).
    Value y = e.blockId(mlir::gpu::Dimension::y);
    Value ex = e.toIndex(e.load(tileExpert, y));
    Value m0 = e.toIndex(e.load(tileStart, y));
    Value limit = e.toIndex(e.load(tileEnd, y));
    auto live = scf::IfOp::create(b, loc, e.ult(m0, limit), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&live.getThenRegion().front());

    const int64_t K = s.k, N = s.n, steps = K / kDepth;
    Value rowBase = e.mul(m0, e.idx(K));
    Value tableRow0 = e.add(e.mul(ex, e.idx(N)), n0);
    auto vec = [&](int64_t n, Type t) { return VectorType::get({n}, t); };
    auto zeros = [&](int64_t n, Type t) -> Value {
      return arith::ConstantOp::create(
          b, loc, DenseElementsAttr::get(vec(n, t), b.getZeroAttr(t)));
    };
    Type rowType = s.bf16Rows ? bf16 : f32;

    // Where each piece comes from and goes, the same every step: rows past
    // the count and table rows past N read row 0 and are zeroed.
    // (`col`: a table piece's first k within the step.)
    // Row m0 + r's first value (when valid): in expert order, or its
    // token's.
    auto rowStartOf = [&](Value r, Value valid) {
      if (!s.gatherRows)
        return e.add(rowBase, e.mul(r, e.idx(K)));
      return e.mul(
          e.toIndex(e.load(rowToken, e.select(valid, e.add(m0, r), e.idx(0)))),
          e.idx(K));
    };
    struct Piece { Value valid, from, to, col; };
    SmallVector<Piece> rowPieces, tablePieces;
    // (The cp.async path has pieces of its own, below.)
    for (int64_t u = 0; u < (async ? 0 : kRowPieces); ++u) {
      Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
      Value r = e.divu(piece, e.idx(kDepth / 4));
      Value c = e.mul(e.remu(piece, e.idx(kDepth / 4)), e.idx(4));
      Value valid = e.ult(e.add(m0, r), limit);
      Value from = e.select(valid, e.add(rowStartOf(r, valid), c), e.idx(0));
      rowPieces.push_back({valid, from, e.add(e.mul(r, e.idx(kLd)), c), c});
    }
    for (int64_t u = 0; u < (async ? 0 : kTablePieces); ++u) {
      Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
      Value r = e.divu(piece, e.idx(kDepth / 8));
      Value part = e.remu(piece, e.idx(kDepth / 8));
      Value valid = e.ult(e.add(n0, r), e.idx(N));
      Value tableRow = e.select(valid, e.add(tableRow0, r), e.idx(0));
      Value col = e.mul(part, e.idx(8));
      tablePieces.push_back({valid, tableRow, e.add(e.mul(r, e.idx(kLd)), col), col});
    }
    // One step's global loads, all issued before any is used: per row
    // piece a vector of four; per table piece a vector of eight bf16, or a
    // word of eight codes and its scale.
    auto loadStep = [&](Value kb) -> SmallVector<Value> {
      Value k0 = e.mul(kb, e.idx(kDepth));
      SmallVector<Value> loaded;
      for (const Piece &p : rowPieces)
        loaded.push_back(vector::LoadOp::create(
            b, loc, vec(4, rowType), rows, ValueRange{e.add(p.from, k0)}, false,
            llvm::MaybeAlign(s.bf16Rows ? 8 : 16)));
      for (int t = 0; t < tables; ++t)
        for (const Piece &p : tablePieces) {
          Value inRow = p.col;
          if (s.bf16Tables) {
            loaded.push_back(vector::LoadOp::create(
                b, loc, vec(8, bf16), values[t],
                ValueRange{e.add(e.mul(p.from, e.idx(K)), e.add(k0, inRow))},
                false, llvm::MaybeAlign(16)));
            continue;
          }
          Value byteAt = e.add(e.mul(p.from, e.idx(K / 2)),
                               e.divu(e.add(k0, inRow), e.idx(2)));
          Value bytes = vector::LoadOp::create(b, loc, vec(4, b.getI8Type()),
                                               values[t], ValueRange{byteAt},
                                               false, llvm::MaybeAlign(4));
          loaded.push_back(vector::ExtractOp::create(
              b, loc, vector::BitCastOp::create(b, loc, vec(1, i32), bytes),
              ArrayRef<int64_t>{0}));
          loaded.push_back(arith::ExtUIOp::create(
              b, loc, i32,
              memref::LoadOp::create(
                  b, loc, scales[t],
                  ValueRange{e.add(e.mul(p.from, e.idx(K / kDepth)), kb)})));
        }
      return loaded;
    };
    // Writes one step's loads into the shared tiles.
    auto stage = [&](ValueRange loaded) {
      unsigned at = 0;
      for (const Piece &p : rowPieces) {
        Value v = loaded[at++];
        if (s.bf16Rows) // exact; the one term rounds nothing
          v = arith::ExtFOp::create(b, loc, vec(4, f32), v);
        Value rest = arith::SelectOp::create(b, loc, p.valid, v, zeros(4, f32));
        for (int t = 0; t < s.terms; ++t) {
          Value term = arith::TruncFOp::create(b, loc, vec(4, bf16), rest);
          vector::StoreOp::create(b, loc, term, aTiles[t], ValueRange{p.to},
                                  false, llvm::MaybeAlign(8));
          if (t + 1 < s.terms)
            rest = arith::SubFOp::create(
                b, loc, rest, arith::ExtFOp::create(b, loc, vec(4, f32), term));
        }
      }
      for (int t = 0; t < tables; ++t)
        for (const Piece &p : tablePieces) {
          Value w;
          if (s.bf16Tables) {
            w = arith::SelectOp::create(b, loc, p.valid, loaded[at++],
                                        zeros(8, bf16));
          } else {
            Value word = loaded[at++], scale = loaded[at++];
            Value decoded = arith::SelectOp::create(
                b, loc, p.valid, decodeMxfp4Word(e, word, scale), zeros(8, f32));
            // Exact: an MXFP4 value has two significant bits.
            w = arith::TruncFOp::create(b, loc, vec(8, bf16), decoded);
          }
          vector::StoreOp::create(b, loc, w, bTiles[t], ValueRange{p.to}, false,
                                  llvm::MaybeAlign(16));
        }
    };

    // Accumulators: per table MI NT m16n8 tiles of a warp's WM rows.
    const int64_t tilesPerTable = MI * NT, accPerTable = 4 * tilesPerTable;
    auto accOf = [&](ValueRange it) {
      SmallVector<Acc> acc;
      for (int64_t i = 0; i < tables * tilesPerTable; ++i)
        acc.push_back({it[4 * i], it[4 * i + 1], it[4 * i + 2], it[4 * i + 3]});
      return acc;
    };
    // One staged step's products, the tiles' rows from aRow0 and bRow0.
    auto products = [&](SmallVector<Acc> &acc, Value aRow0, Value bRow0) {
      for (int64_t ks = 0; ks < kDepth; ks += 16) {
        SmallVector<std::array<FragB, 4>, 2> bf(tables);
        for (int t = 0; t < tables; ++t)
          for (int64_t j = 0; j < NT / 2; ++j) {
            auto two = e.fragBRows(
                bTiles[t],
                e.add(bRow0, e.add(e.mul(wn, e.idx(warpCols)), e.idx(16 * j))),
                kLd, e.idx(ks));
            bf[t][2 * j] = two[0];
            bf[t][2 * j + 1] = two[1];
          }
        // The smallest term first: it is added to the smallest sums.
        for (int term = s.terms - 1; term >= 0; --term)
          for (int64_t i = 0; i < MI; ++i) {
            FragA a = e.fragA(
                aTiles[term], e.add(aRow0, e.add(e.mul(wm, e.idx(WM)), e.idx(16 * i))),
                kLd, e.idx(ks));
            for (int t = 0; t < tables; ++t)
              for (int64_t nt = 0; nt < NT; ++nt) {
                Acc &c = acc[t * tilesPerTable + NT * i + nt];
                c = e.mma(a, bf[t][nt], c);
              }
          }
      }
    };
    auto flatten = [](ArrayRef<Acc> acc) {
      SmallVector<Value> flat;
      for (const Acc &a : acc)
        flat.append(a.begin(), a.end());
      return flat;
    };
    SmallVector<Value> init(tables * accPerTable, e.f32(0.0));
    scf::ForOp loop;
    if (async) {
      // Pieces of the rows (16 bytes, eight values; 8 bytes for a 32-row
      // tile, so that every thread copies one) and of each table (16
      // bytes), their sources fixed but for the step's k; invalid rows
      // copy 0 bytes and are zero-filled.
      struct AsyncPiece { Value from, to, bytes; };
      SmallVector<AsyncPiece> aPieces, bPieces;
      const int64_t VA = std::min<int64_t>(8, TM * kDepth / kExpertProductThreads);
      for (int64_t u = 0; u < TM * kDepth / VA / kExpertProductThreads; ++u) {
        Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
        Value r = e.divu(piece, e.idx(kDepth / VA));
        Value c = e.mul(e.remu(piece, e.idx(kDepth / VA)), e.idx(VA));
        Value valid = e.ult(e.add(m0, r), limit);
        aPieces.push_back({e.select(valid, e.add(rowStartOf(r, valid), c), e.idx(0)),
                           e.add(e.mul(r, e.idx(kLd)), c),
                           e.select(valid, e.idx(VA), e.idx(0))});
      }
      for (int64_t u = 0; u < TN * kDepth / 8 / kExpertProductThreads; ++u) {
        Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
        Value r = e.divu(piece, e.idx(kDepth / 8));
        Value c = e.mul(e.remu(piece, e.idx(kDepth / 8)), e.idx(8));
        Value valid = e.ult(e.add(n0, r), e.idx(N));
        Value tableRow = e.select(valid, e.add(tableRow0, r), e.idx(0));
        bPieces.push_back({e.add(e.mul(tableRow, e.idx(K)), c),
                           e.add(e.mul(r, e.idx(kLd)), c),
                           e.select(valid, e.idx(8), e.idx(0))});
      }
      auto asyncToken = nvgpu::DeviceAsyncTokenType::get(b.getContext());
      // Step kb's copies into stage kb mod stages; returns their group. A
      // step past the last copies nothing (its group still counts, so
      // every trip waits for the same number of groups).
      auto issue = [&](Value kb) {
        Value inRange = e.ult(kb, e.idx(steps));
        Value st = e.remu(kb, e.idx(stages));
        Value k0 = e.mul(e.minu(kb, e.idx(steps - 1)), e.idx(kDepth));
        SmallVector<Value> tokens;
        // (L1 is bypassed for 16-byte copies, the only size that may.)
        auto copy = [&](Value dst, Value dstAt, Value src, Value srcAt, Value n,
                        int64_t values) {
          tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
              b, loc, asyncToken, dst, ValueRange{dstAt}, src, ValueRange{srcAt},
              b.getIndexAttr(values), e.select(inRange, n, e.idx(0)),
              values == 8 ? b.getUnitAttr() : UnitAttr()));
        };
        Value aBase = e.mul(st, e.idx(TM * kLd));
        for (const AsyncPiece &p : aPieces)
          copy(aTiles[0], e.add(aBase, p.to), rows, e.add(p.from, k0), p.bytes, VA);
        Value bBase = e.mul(st, e.idx(TN * kLd));
        for (int t = 0; t < tables; ++t)
          for (const AsyncPiece &p : bPieces)
            copy(bTiles[t], e.add(bBase, p.to), values[t], e.add(p.from, k0),
                 p.bytes, 8);
        return nvgpu::DeviceAsyncCreateGroupOp::create(b, loc, asyncToken, tokens);
      };
      // Steps 0 .. stages - 2 first; trip kb waits for step kb's group
      // (stages - 2 later ones may still fly), then issues step kb +
      // stages - 1 into the stage trip kb - 1 read: the barrier between
      // them orders every warp's reads of it before the copies.
      Value last;
      for (int64_t st = 0; st + 1 < stages; ++st)
        last = issue(e.idx(st));
      loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(steps), e.idx(1), init);
      OpBuilder::InsertionGuard lg(b);
      b.setInsertionPointToStart(loop.getBody());
      Value kb = loop.getInductionVar();
      nvgpu::DeviceAsyncWaitOp::create(b, loc, last,
                                       b.getI32IntegerAttr(stages - 2));
      e.barrier();
      issue(e.add(kb, e.idx(stages - 1)));
      Value st = e.remu(kb, e.idx(stages));
      SmallVector<Acc> acc = accOf(loop.getRegionIterArgs());
      products(acc, e.mul(st, e.idx(TM)), e.mul(st, e.idx(TN)));
      scf::YieldOp::create(b, loc, flatten(acc));
    } else {
      SmallVector<Value> first = loadStep(e.idx(0));
      init.append(first.begin(), first.end());
      loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(steps), e.idx(1), init);
      OpBuilder::InsertionGuard lg(b);
      b.setInsertionPointToStart(loop.getBody());
      Value kb = loop.getInductionVar();
      ValueRange it = loop.getRegionIterArgs();
      // The previous step's fragments are read.
      e.barrier();
      stage(it.drop_front(tables * accPerTable));
      e.barrier();
      // The next step's loads (the last step reloads itself: in bounds,
      // unused) fly while this step's products run.
      SmallVector<Value> next =
          loadStep(e.minu(e.add(kb, e.idx(1)), e.idx(steps - 1)));
      SmallVector<Acc> acc = accOf(it);
      products(acc, e.idx(0), e.idx(0));
      SmallVector<Value> yielded = flatten(acc);
      yielded.append(next.begin(), next.end());
      scf::YieldOp::create(b, loc, yielded);
    }
    if (async) {
      // The last trips' empty groups complete before the block ends.
      Value drain = nvgpu::DeviceAsyncCreateGroupOp::create(
          b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), ValueRange{});
      nvgpu::DeviceAsyncWaitOp::create(b, loc, drain, b.getI32IntegerAttr(0));
    }

    // Epilogue: two adjacent columns a register pair, rows within the
    // count; the GLU of gate and up where there are two tables.
    Type outType = s.bf16Out ? bf16 : f32;
    Value outBase = e.mul(m0, e.idx(N));
    auto result = [&](int t, int64_t tile, int64_t half, int64_t l) {
      return loop.getResult(t * accPerTable + 4 * tile + 2 * half + l);
    };
    for (int64_t i = 0; i < MI; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        Value r = e.add(e.mul(wm, e.idx(WM)), e.add(e.idx(16 * i + 8 * half), g));
        auto rowIf = scf::IfOp::create(b, loc, e.ult(e.add(m0, r), limit), false);
        OpBuilder::InsertionGuard rg(b);
        b.setInsertionPointToStart(&rowIf.getThenRegion().front());
        for (int64_t nt = 0; nt < NT; ++nt) {
          Value col = e.add(e.mul(wn, e.idx(warpCols)), e.idx(8 * nt));
          Value n = e.add(n0, e.add(col, e.mul(tq, e.idx(2))));
          Value at = e.add(outBase, e.add(e.mul(r, e.idx(N)), n));
          SmallVector<Value, 2> pair;
          for (int64_t l = 0; l < 2; ++l) {
            Value v = result(0, NT * i + nt, half, l);
            if (s.glu) {
              Value u = result(1, NT * i + nt, half, l);
              v = s.situ ? lowering::situ(b, loc, v, u, s.beta, s.linearBeta)
                         : lowering::siluGlu(b, loc, v, u);
            }
            pair.push_back(s.bf16Out ? e.fromF32(v, bf16) : v);
          }
          Value packed = vector::FromElementsOp::create(b, loc, vec(2, outType), pair);
          auto store = [&] {
            vector::StoreOp::create(b, loc, packed, out, ValueRange{at}, false,
                                    llvm::MaybeAlign(s.bf16Out ? 4 : 8));
          };
          if (N % TN == 0) {
            store();
            continue;
          }
          // n8 tiles lie wholly inside or outside N (a multiple of 8).
          auto colIf = scf::IfOp::create(b, loc, e.ult(e.add(n0, col), e.idx(N)), false);
          OpBuilder::InsertionGuard cg(b);
          b.setInsertionPointToStart(&colIf.getThenRegion().front());
          store();
        }
      }
  }
};

} // namespace

mlir::gpu::GPUFuncOp emitExpertProductKernel(OpBuilder &b, Location loc,
                                             mlir::gpu::GPUModuleOp module,
                                             StringRef name,
                                             const ExpertProductSpec &s) {
  OpBuilder::InsertionGuard guard(b);
  auto dyn = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type f32 = b.getF32Type(), i8 = b.getI8Type(), bf16 = b.getBF16Type();
  Type i32 = b.getI32Type();
  SmallVector<Type> args = {dyn(s.bf16Rows ? bf16 : f32)};
  if (s.gatherRows)
    args.push_back(dyn(i32));
  for (int t = 0; t < s.tables(); ++t) {
    if (s.bf16Tables) {
      args.push_back(dyn(bf16));
    } else {
      args.append({dyn(i8), dyn(i8)});
    }
  }
  args.append({dyn(i32), dyn(i32), dyn(i32), dyn(s.bf16Out ? bf16 : f32)});
  auto fn = createKernel(b, loc, module, name, args,
                         {int32_t(kExpertProductThreads), 1, 1});
  b.setInsertionPoint(fn.getBody().front().getTerminator());
  ExpertProductEmitter m(b, loc, s);
  Block &body = fn.getBody().front();
  unsigned a = 0;
  m.rows = body.getArgument(a++);
  if (s.gatherRows)
    m.rowToken = body.getArgument(a++);
  for (int t = 0; t < s.tables(); ++t) {
    m.values.push_back(body.getArgument(a++));
    m.scales.push_back(s.bf16Tables ? Value() : body.getArgument(a++));
  }
  m.tileExpert = body.getArgument(a++);
  m.tileStart = body.getArgument(a++);
  m.tileEnd = body.getArgument(a++);
  m.out = body.getArgument(a++);
  m.emit(module, name);
  return fn;
}

} // namespace kimi::gpu

//===- ExpertProductKernel.cpp - expert products on tensor cores ----------===//
//
// One block per (columns, 128 rows of one expert), eight warps: with
// cp.async copies (bf16 rows) 256 columns of products (128 each of gate and
// up, or 256 of one table) in warps of 64 x 64, else 64 columns in warps of
// 32 x 32; or, when the experts hold a few rows each (a batch of decode
// tokens), per (128 columns, 32 rows), eight warps of 32 x 16. Each warp
// runs mma.sync m16n8k16 into f32 accumulators.
//
// Three main loops, by what the operands are:
// - bf16 rows and tables: cp.async copies of 32-deep steps into
//   ExpertProductSpec::asyncStages() stages of dynamic shared memory, read
//   by ldmatrix (the copies of later steps fly while a step's products run,
//   which keeps HBM busy when a batch of decode tokens gives each expert a
//   few rows).
// - bf16 rows and MXFP4 tables (k a multiple of 128): cp.async copies of
//   128-deep stages of the rows, the codes and the scales as they are; each
//   lane decodes its own B operands from the codes in registers
//   (mxfp4AsyncLoop says how the lanes' k are paired).
// - otherwise (f32 rows, split into `terms` bf16 tiles): per 32-deep step
//   (one MXFP4 scale block) the block stages its rows and each table's
//   slice as bf16 tiles (MXFP4 codes decoded with their scale), the next
//   step's global loads in registers while this step's products run.
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
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
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

namespace {
/// An MXFP4 cp.async stage (mxfp4AsyncLoop): the rows' bf16 values, the
/// codes' bytes, the scales' bytes, then the scales' region with a
/// thread's 4 bytes of scratch each.
struct Mxfp4Stage {
  int64_t aElems, codeBytes, scaleBytes, scaleStage;
  int64_t bytes() const { return 2 * aElems + codeBytes + scaleStage; }
};
Mxfp4Stage mxfp4Stage(const ExpertProductSpec &s) {
  const int64_t D = ExpertProductSpec::kMxfp4StageDepth;
  const int64_t tableRows = s.tables() * s.tileN();
  const int64_t scaleBytes = tableRows * (D / 32);
  return {s.tileM * D, tableRows * (D / 2), scaleBytes,
          scaleBytes + kExpertProductThreads * (D / 32)};
}
} // namespace

int64_t expertProductSharedBytes(const ExpertProductSpec &s) {
  if (!s.asyncCopies())
    return 0;
  if (s.bf16Tables)
    return s.asyncStages() * 2 * (s.tileM + s.tables() * s.tileN()) * kLd;
  return s.asyncStages() * mxfp4Stage(s).bytes();
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
  const int tables = s.tables();
  /// Accumulators: per table MI NT m16n8 tiles of a warp's WM rows.
  const int64_t tilesPerTable = MI * NT, accPerTable = 4 * tilesPerTable;

  /// This lane's coordinates (warp wm, wn; g = lane / 4, tq = lane % 4)
  /// and its block's tile: columns n0 .., rows m0 .. limit of expert ex.
  Value tid, wm, wn, g, tq, n0, ex, m0, limit, rowBase, tableRow0;

  VectorType vec(int64_t n, Type t) { return VectorType::get({n}, t); }
  Value zeros(int64_t n, Type t) {
    return arith::ConstantOp::create(
        e.b, e.loc, DenseElementsAttr::get(vec(n, t), e.b.getZeroAttr(t)));
  }
  Value xorI(Value a, Value c) { return arith::XOrIOp::create(e.b, e.loc, a, c); }

  /// Row m0 + r's first value (when valid): in expert order, or its
  /// token's.
  Value rowStartOf(Value r, Value valid) {
    if (!s.gatherRows)
      return e.add(rowBase, e.mul(r, e.idx(s.k)));
    return e.mul(
        e.toIndex(e.load(rowToken, e.select(valid, e.add(m0, r), e.idx(0)))),
        e.idx(s.k));
  }

  SmallVector<Acc> accOf(ValueRange it) {
    SmallVector<Acc> acc;
    for (int64_t i = 0; i < tables * tilesPerTable; ++i)
      acc.push_back({it[4 * i], it[4 * i + 1], it[4 * i + 2], it[4 * i + 3]});
    return acc;
  }
  static SmallVector<Value> flatten(ArrayRef<Acc> acc) {
    SmallVector<Value> flat;
    for (const Acc &a : acc)
      flat.append(a.begin(), a.end());
    return flat;
  }

  /// One staged 32-deep step's products from bf16 tiles of row stride kLd
  /// (ldmatrix), the tiles' rows from aRow0 and bRow0.
  void products(SmallVector<Acc> &acc, ArrayRef<Value> aTiles,
                ArrayRef<Value> bTiles, Value aRow0, Value bRow0) {
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
  }

  scf::ForOp registerLoop(mlir::gpu::GPUModuleOp module, StringRef name,
                          SmallVector<Value> init);
  SmallVector<Value> bf16AsyncLoop(SmallVector<Value> init);
  SmallVector<Value> mxfp4AsyncLoop(SmallVector<Value> init);
  void mxfp4Products(SmallVector<Acc> &acc, Value aTile, Value codeTile,
                     Value scaleTile, Value stage);
  void epilogue(ValueRange results);

  void emit(mlir::gpu::GPUModuleOp module, StringRef name) {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    tid = e.threadId();
    Value lane = e.laneId();
    Value warp = e.divu(tid, e.idx(32));
    wm = e.divu(warp, e.idx(warpsN));
    wn = e.remu(warp, e.idx(warpsN));
    g = e.divu(lane, e.idx(4));
    tq = e.remu(lane, e.idx(4));
    n0 = e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(TN));
    // Row tile y: rows m0 .. limit of expert ex (none past the last tile).
    Value y = e.blockId(mlir::gpu::Dimension::y);
    ex = e.toIndex(e.load(tileExpert, y));
    m0 = e.toIndex(e.load(tileStart, y));
    limit = e.toIndex(e.load(tileEnd, y));
    auto live = scf::IfOp::create(b, loc, e.ult(m0, limit), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&live.getThenRegion().front());
    rowBase = e.mul(m0, e.idx(s.k));
    tableRow0 = e.add(e.mul(ex, e.idx(s.n)), n0);
    SmallVector<Value> init(tables * accPerTable, e.f32(0.0));
    SmallVector<Value> results =
        !s.asyncCopies() ? SmallVector<Value>(registerLoop(module, name, init).getResults())
        : s.bf16Tables   ? bf16AsyncLoop(init)
                         : mxfp4AsyncLoop(init);
    epilogue(results);
  }
};

/// Rows that are not bf16 (split into `terms` bf16 tiles) or tables that
/// are MXFP4 with a k that is no multiple of 128: one step's global loads
/// into registers while the step before it is multiplied, then converted
/// into static shared tiles between two barriers.
scf::ForOp ExpertProductEmitter::registerLoop(mlir::gpu::GPUModuleOp module,
                                              StringRef name,
                                              SmallVector<Value> init) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i32 = b.getI32Type();
  SmallVector<Value, 3> aTiles;
  SmallVector<Value, 2> bTiles;
  for (int t = 0; t < s.terms; ++t)
    aTiles.push_back(e.sharedBuffer(module, (name + "_a" + Twine(t)).str(),
                                    TM * kLd, bf16));
  for (int t = 0; t < tables; ++t)
    bTiles.push_back(e.sharedBuffer(module, (name + "_b" + Twine(t)).str(),
                                    TN * kLd, bf16));
  const int64_t K = s.k, N = s.n, steps = K / kDepth;
  // Per step, a thread's share of the rows: vectors of four values; and of
  // each table: vectors of eight values (one word of codes).
  const int64_t rowPieces = TM * kDepth / 4 / kExpertProductThreads;
  const int64_t tablePieces = TN * kDepth / 8 / kExpertProductThreads;
  Type rowType = s.bf16Rows ? bf16 : f32;

  // Where each piece comes from and goes, the same every step: rows past
  // the count and table rows past N read row 0 and are zeroed.
  // (`col`: a table piece's first k within the step.)
  struct Piece { Value valid, from, to, col; };
  SmallVector<Piece> rowPiece, tablePiece;
  for (int64_t u = 0; u < rowPieces; ++u) {
    Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
    Value r = e.divu(piece, e.idx(kDepth / 4));
    Value c = e.mul(e.remu(piece, e.idx(kDepth / 4)), e.idx(4));
    Value valid = e.ult(e.add(m0, r), limit);
    Value from = e.select(valid, e.add(rowStartOf(r, valid), c), e.idx(0));
    rowPiece.push_back({valid, from, e.add(e.mul(r, e.idx(kLd)), c), c});
  }
  for (int64_t u = 0; u < tablePieces; ++u) {
    Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
    Value r = e.divu(piece, e.idx(kDepth / 8));
    Value part = e.remu(piece, e.idx(kDepth / 8));
    Value valid = e.ult(e.add(n0, r), e.idx(N));
    Value tableRow = e.select(valid, e.add(tableRow0, r), e.idx(0));
    Value col = e.mul(part, e.idx(8));
    tablePiece.push_back({valid, tableRow, e.add(e.mul(r, e.idx(kLd)), col), col});
  }
  // One step's global loads, all issued before any is used: per row
  // piece a vector of four; per table piece a vector of eight bf16, or a
  // word of eight codes and its scale.
  auto loadStep = [&](Value kb) -> SmallVector<Value> {
    Value k0 = e.mul(kb, e.idx(kDepth));
    SmallVector<Value> loaded;
    for (const Piece &p : rowPiece)
      loaded.push_back(vector::LoadOp::create(
          b, loc, vec(4, rowType), rows, ValueRange{e.add(p.from, k0)}, false,
          llvm::MaybeAlign(s.bf16Rows ? 8 : 16)));
    for (int t = 0; t < tables; ++t)
      for (const Piece &p : tablePiece) {
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
    for (const Piece &p : rowPiece) {
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
      for (const Piece &p : tablePiece) {
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

  SmallVector<Value> first = loadStep(e.idx(0));
  const size_t accValues = init.size();
  init.append(first.begin(), first.end());
  auto loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(steps), e.idx(1), init);
  OpBuilder::InsertionGuard lg(b);
  b.setInsertionPointToStart(loop.getBody());
  Value kb = loop.getInductionVar();
  ValueRange it = loop.getRegionIterArgs();
  // The previous step's fragments are read.
  e.barrier();
  stage(it.drop_front(accValues));
  e.barrier();
  // The next step's loads (the last step reloads itself: in bounds,
  // unused) fly while this step's products run.
  SmallVector<Value> next =
      loadStep(e.minu(e.add(kb, e.idx(1)), e.idx(steps - 1)));
  SmallVector<Acc> acc = accOf(it);
  products(acc, aTiles, bTiles, e.idx(0), e.idx(0));
  SmallVector<Value> yielded = flatten(acc);
  yielded.append(next.begin(), next.end());
  scf::YieldOp::create(b, loc, yielded);
  return loop;
}

/// A step's async copies into stage `stage` (kb mod stages, a constant:
/// the pipeline is unrolled by its stages), each `Copy` a piece whose
/// source moves by `step` elements a step; returns their group. A step
/// past the last copies nothing (its group still counts, so every trip
/// waits for the same number of groups). Invalid pieces copy 0 elements
/// and are zero-filled.
struct AsyncCopy {
  Value dst, src;       // the stage-0 shared buffer and the source
  Value to, from, count; // offsets (elements), elements copied (else 0)
  int64_t elements, stageElements, step;
};

Value issueAsyncCopies(KernelEmitter &e, ArrayRef<AsyncCopy> copies, Value kb,
                       int64_t stage, int64_t steps) {
  OpBuilder &b = e.b;
  Value inRange = e.ult(kb, e.idx(steps));
  Value kc = e.minu(kb, e.idx(steps - 1));
  auto token = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  SmallVector<Value> tokens;
  for (const AsyncCopy &c : copies) {
    const int64_t bytes =
        c.elements * cast<MemRefType>(c.dst.getType()).getElementTypeBitWidth() / 8;
    // (L1 is bypassed for 16-byte copies, the only size that may.)
    tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
        b, e.loc, token, c.dst,
        ValueRange{e.add(c.to, e.idx(stage * c.stageElements))}, c.src,
        ValueRange{e.add(c.from, e.mul(kc, e.idx(c.step)))},
        b.getIndexAttr(c.elements), e.select(inRange, c.count, e.idx(0)),
        bytes == 16 ? b.getUnitAttr() : UnitAttr()));
  }
  return nvgpu::DeviceAsyncCreateGroupOp::create(b, e.loc, token, tokens);
}

/// The pipeline over `steps` steps of `copies`: steps 0 .. stages - 2
/// first; trip kb waits for step kb's group (stages - 2 later ones may
/// still fly), then issues step kb + stages - 1 into the stage trip kb - 1
/// read: the barrier between them orders every warp's reads of it before
/// the copies. `body` multiplies stage kb mod stages. The loop runs rounds
/// of `stages` trips, unrolled, and the steps % stages trips left follow
/// it: every trip's stage is a constant, so each shared-memory address is
/// a per-thread base plus an immediate offset (with the stage a loop
/// value, every address was recomputed every trip: most of the
/// instructions a product issued). Returns the accumulators.
SmallVector<Value> asyncPipeline(
    KernelEmitter &e, ArrayRef<AsyncCopy> copies, int64_t steps, int64_t stages,
    ValueRange init,
    function_ref<SmallVector<Value>(ValueRange, Value stage)> body) {
  OpBuilder &b = e.b;
  // (The waits count groups; their token operand is the prologue's last.)
  Value last;
  for (int64_t st = 0; st + 1 < stages; ++st)
    last = issueAsyncCopies(e, copies, e.idx(st), st, steps);
  auto trip = [&](Value kb, int64_t stage, ValueRange acc) {
    nvgpu::DeviceAsyncWaitOp::create(b, e.loc, last,
                                     b.getI32IntegerAttr(stages - 2));
    e.barrier();
    issueAsyncCopies(e, copies, e.add(kb, e.idx(stages - 1)),
                     (stage + stages - 1) % stages, steps);
    return body(acc, e.idx(stage));
  };
  const int64_t rounds = steps / stages;
  SmallVector<Value> acc(init.begin(), init.end());
  if (rounds > 0) {
    auto loop = scf::ForOp::create(b, e.loc, e.idx(0), e.idx(rounds * stages),
                                   e.idx(stages), acc);
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> it(loop.getRegionIterArgs());
    for (int64_t j = 0; j < stages; ++j)
      it = trip(e.add(loop.getInductionVar(), e.idx(j)), j, it);
    scf::YieldOp::create(b, e.loc, it);
    acc.assign(loop.getResults().begin(), loop.getResults().end());
  }
  for (int64_t kb = rounds * stages; kb < steps; ++kb)
    acc = trip(e.idx(kb), kb % stages, acc);
  // The last trips' empty groups complete before the block ends.
  auto token = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  Value drain = nvgpu::DeviceAsyncCreateGroupOp::create(b, e.loc, token, ValueRange{});
  nvgpu::DeviceAsyncWaitOp::create(b, e.loc, drain, b.getI32IntegerAttr(0));
  return acc;
}

/// bf16 rows and tables: 32-deep stages of both, copied as they are into
/// tiles of row stride kLd (16-byte pieces; 8 bytes for a 32-row tile, so
/// that every thread copies one).
SmallVector<Value> ExpertProductEmitter::bf16AsyncLoop(SmallVector<Value> init) {
  Type bf16 = e.b.getBF16Type();
  const int64_t stages = s.asyncStages(), steps = s.k / kDepth;
  const int64_t aElems = TM * kLd, bElems = TN * kLd;
  Value aTile = e.dynamicSharedBuffer(0, stages * aElems, bf16);
  SmallVector<Value, 2> bTiles;
  for (int t = 0; t < tables; ++t)
    bTiles.push_back(e.dynamicSharedBuffer(2 * stages * (aElems + t * bElems),
                                           stages * bElems, bf16));
  SmallVector<AsyncCopy> copies;
  const int64_t VA = std::min<int64_t>(8, TM * kDepth / kExpertProductThreads);
  for (int64_t u = 0; u < TM * kDepth / VA / kExpertProductThreads; ++u) {
    Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
    Value r = e.divu(piece, e.idx(kDepth / VA));
    Value c = e.mul(e.remu(piece, e.idx(kDepth / VA)), e.idx(VA));
    Value valid = e.ult(e.add(m0, r), limit);
    copies.push_back({aTile, rows, e.add(e.mul(r, e.idx(kLd)), c),
                      e.select(valid, e.add(rowStartOf(r, valid), c), e.idx(0)),
                      e.select(valid, e.idx(VA), e.idx(0)), VA, aElems, kDepth});
  }
  for (int t = 0; t < tables; ++t)
    for (int64_t u = 0; u < TN * kDepth / 8 / kExpertProductThreads; ++u) {
      Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
      Value r = e.divu(piece, e.idx(kDepth / 8));
      Value c = e.mul(e.remu(piece, e.idx(kDepth / 8)), e.idx(8));
      Value valid = e.ult(e.add(n0, r), e.idx(s.n));
      Value tableRow = e.select(valid, e.add(tableRow0, r), e.idx(0));
      copies.push_back({bTiles[t], values[t], e.add(e.mul(r, e.idx(kLd)), c),
                        e.add(e.mul(tableRow, e.idx(s.k)), c),
                        e.select(valid, e.idx(8), e.idx(0)), 8, bElems, kDepth});
    }
  return asyncPipeline(e, copies, steps, stages, init,
                       [&](ValueRange it, Value st) {
                         SmallVector<Acc> acc = accOf(it);
                         products(acc, {aTile}, bTiles, e.mul(st, e.idx(TM)),
                                  e.mul(st, e.idx(TN)));
                         return flatten(acc);
                       });
}

/// MXFP4 tables with bf16 rows: 128-deep stages of the rows (256 bytes a
/// row), each table row's 64 bytes of codes and its four scales, copied as
/// they are. The products pair each lane's k differently from the mma's
/// own order (a sum does not care): in each 32-deep step, lane (g, tq)
/// takes k = 8 tq .. 8 tq + 7, four for each 16-deep half, so that its A
/// operand is one 16-byte shared load a row and its B operand one 4-byte
/// word of codes a table row, decoded in registers: no decoded tile, no
/// second barrier. The stages are swizzled against bank conflicts: row r's
/// 16-byte piece c of A at c ^ 4 (r & 1), of the codes at c ^ (r / 2 % 4).
SmallVector<Value> ExpertProductEmitter::mxfp4AsyncLoop(SmallVector<Value> init) {
  OpBuilder &b = e.b;
  Type bf16 = b.getBF16Type(), i8 = b.getI8Type();
  const int64_t D = ExpertProductSpec::kMxfp4StageDepth;
  const int64_t stages = s.asyncStages(), steps = s.k / D;
  const Mxfp4Stage m = mxfp4Stage(s);
  const int64_t aElems = m.aElems, codeBytes = m.codeBytes,
                scaleBytes = m.scaleBytes, scaleStage = m.scaleStage;
  Value aTile = e.dynamicSharedBuffer(0, stages * aElems, bf16);
  Value codeTile = e.dynamicSharedBuffer(2 * stages * aElems, stages * codeBytes, i8);
  Value scaleTile = e.dynamicSharedBuffer(2 * stages * aElems + stages * codeBytes,
                                          stages * scaleStage, i8);
  SmallVector<AsyncCopy> copies;
  for (int64_t u = 0; u < TM * (D / 8) / kExpertProductThreads; ++u) {
    Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
    Value r = e.divu(piece, e.idx(D / 8)), c = e.remu(piece, e.idx(D / 8));
    Value valid = e.ult(e.add(m0, r), limit);
    Value at = xorI(c, e.mul(e.remu(r, e.idx(2)), e.idx(4)));
    copies.push_back(
        {aTile, rows, e.add(e.mul(r, e.idx(D)), e.mul(at, e.idx(8))),
         e.select(valid, e.add(rowStartOf(r, valid), e.mul(c, e.idx(8))), e.idx(0)),
         e.select(valid, e.idx(8), e.idx(0)), 8, aElems, D});
  }
  auto tableRowOf = [&](Value r, Value &valid) {
    valid = e.ult(e.add(n0, r), e.idx(s.n));
    return e.select(valid, e.add(tableRow0, r), e.idx(0));
  };
  for (int t = 0; t < tables; ++t)
    for (int64_t u = 0; u < TN * (D / 32) / kExpertProductThreads; ++u) {
      Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
      Value r = e.divu(piece, e.idx(D / 32)), c = e.remu(piece, e.idx(D / 32));
      Value valid, tableRow = tableRowOf(r, valid);
      Value at = xorI(c, e.remu(e.divu(r, e.idx(2)), e.idx(4)));
      copies.push_back(
          {codeTile, values[t],
           e.add(e.idx(t * TN * (D / 2)), e.add(e.mul(r, e.idx(D / 2)), e.mul(at, e.idx(16)))),
           e.add(e.mul(tableRow, e.idx(s.k / 2)), e.mul(c, e.idx(16))),
           e.select(valid, e.idx(16), e.idx(0)), 16, codeBytes, D / 2});
    }
  // Four scales a table row, a thread a row; threads past a table's TN
  // rows copy nothing, into scratch bytes of their own past the scales.
  for (int t = 0; t < tables; ++t)
    for (int64_t u = 0; u * kExpertProductThreads < TN; ++u) {
      Value r = e.add(tid, e.idx(u * kExpertProductThreads));
      Value mine = e.ult(r, e.idx(TN));
      r = e.select(mine, r, e.idx(0));
      Value valid, tableRow = tableRowOf(r, valid);
      copies.push_back(
          {scaleTile, scales[t],
           e.select(mine, e.add(e.idx(t * TN * (D / 32)), e.mul(r, e.idx(D / 32))),
                    e.add(e.idx(scaleBytes), e.mul(tid, e.idx(D / 32)))),
           e.mul(tableRow, e.idx(s.k / 32)),
           e.select(e.andI(mine, valid), e.idx(D / 32), e.idx(0)), D / 32,
           scaleStage, D / 32});
    }
  return asyncPipeline(e, copies, steps, stages, init,
                       [&](ValueRange it, Value st) {
                         SmallVector<Acc> acc = accOf(it);
                         mxfp4Products(acc, aTile, codeTile, scaleTile, st);
                         return flatten(acc);
                       });
}

/// One MXFP4 stage's products (see mxfp4AsyncLoop): per 32-deep step j,
/// lane (g, tq)'s A values are k = 32 j + 8 tq .. + 7 of its rows, and its
/// word of codes the same k of its table rows; byte 2 h + i of the word is
/// B register i of half h (two codes, k and k + 1), as the A registers
/// are.
void ExpertProductEmitter::mxfp4Products(SmallVector<Acc> &acc, Value aTile,
                                         Value codeTile, Value scaleTile,
                                         Value st) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type i8 = b.getI8Type(), i32 = b.getI32Type(), bf16 = b.getBF16Type();
  const int64_t D = ExpertProductSpec::kMxfp4StageDepth;
  const Mxfp4Stage m = mxfp4Stage(s);
  Value aBase = e.mul(st, e.idx(m.aElems));
  Value codeBase = e.mul(st, e.idx(m.codeBytes));
  Value scaleBase = e.mul(st, e.idx(m.scaleStage));
  auto word = [&](Value tile, Value at) {
    Value bytes = vector::LoadOp::create(b, loc, vec(4, i8), tile, ValueRange{at},
                                         false, llvm::MaybeAlign(4));
    return vector::ExtractOp::create(
        b, loc, vector::BitCastOp::create(b, loc, vec(1, i32), bytes),
        ArrayRef<int64_t>{0});
  };
  auto shl = [&](Value v, int64_t by) -> Value {
    return arith::ShLIOp::create(b, loc, v, e.i32(by));
  };
  auto byteOf = [&](Value w, int64_t j) -> Value {
    Value v = j ? Value(arith::ShRUIOp::create(b, loc, w, e.i32(8 * j))) : w;
    return j < 3 ? e.andI(v, e.i32(0xff)) : v;
  };
  auto orI = [&](Value x, Value y) -> Value {
    return arith::OrIOp::create(b, loc, x, y);
  };
  auto bf16x2 = vec(2, bf16);
  auto asPair = [&](Value v) -> Value {
    return LLVM::BitcastOp::create(b, loc, bf16x2, v);
  };
  // 2^126 in each half: turns a code's bits (its exponent and mantissa
  // where a bf16's lowest ones are) into its value.
  Value two126 = asPair(e.i32(0x7e807e80));
  // Per table and n8 tile, this lane's table row and its four scales.
  const int64_t tableTiles = tables * NT;
  SmallVector<Value> codeAt(tableTiles), scaleWord(tableTiles);
  Value swizzleB = e.divu(g, e.idx(2)); // (row / 2) % 4 of every row a lane reads
  for (int t = 0; t < tables; ++t)
    for (int64_t nt = 0; nt < NT; ++nt) {
      Value r = e.add(e.mul(wn, e.idx(warpCols)), e.add(e.idx(8 * nt), g));
      codeAt[t * NT + nt] =
          e.add(codeBase, e.add(e.idx(t * TN * (D / 2)), e.mul(r, e.idx(D / 2))));
      scaleWord[t * NT + nt] = word(
          scaleTile,
          e.add(scaleBase, e.add(e.idx(t * TN * (D / 32)), e.mul(r, e.idx(D / 32)))));
    }
  Value swizzleA = e.mul(e.remu(g, e.idx(2)), e.idx(4)); // 4 (row & 1)
  for (int64_t j = 0; j < D / kDepth; ++j) {
    // A: per m16 tile, 16 bytes of its rows g and g + 8.
    SmallVector<std::array<Value, 4>> aLo(MI), aHi(MI);
    Value chunk = e.add(e.mul(xorI(e.idx(4 * j), swizzleA), e.idx(8)),
                        e.mul(tq, e.idx(8)));
    for (int64_t i = 0; i < MI; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        Value r = e.add(e.mul(wm, e.idx(WM)), e.add(e.idx(16 * i + 8 * half), g));
        Value v = vector::LoadOp::create(
            b, loc, vec(8, bf16), aTile,
            ValueRange{e.add(aBase, e.add(e.mul(r, e.idx(D)), chunk))}, false,
            llvm::MaybeAlign(16));
        Value w = vector::BitCastOp::create(b, loc, vec(4, i32), v);
        for (int64_t q = 0; q < 4; ++q)
          (half ? aHi : aLo)[i][q] =
              vector::ExtractOp::create(b, loc, w, ArrayRef<int64_t>{q});
      }
    // Per table tile its word of codes and its scale as a bf16 pair
    // (2^(s - 127); 0 is the subnormal 2^-127).
    SmallVector<Value> codes(tableTiles), scale(tableTiles);
    for (int64_t i = 0; i < tableTiles; ++i) {
      codes[i] = word(
          codeTile,
          e.add(codeAt[i], e.add(e.mul(xorI(e.idx(j), swizzleB), e.idx(16)),
                                 e.mul(tq, e.idx(4)))));
      Value sc = byteOf(scaleWord[i], j);
      Value sb = e.select(e.eq(sc, e.i32(0)), e.i32(0x40), shl(sc, 7));
      scale[i] = asPair(orI(sb, shl(sb, 16)));
    }
    // Byte q of a word: its low code's sign and exponent-mantissa bits to
    // bits 15 and 8..6, its high code's to 31 and 24..22, times 2^126 and
    // the scale (both products exact: a code has two significant bits).
    auto decode = [&](int64_t i, int64_t q) -> Value {
      Value t = arith::MulIOp::create(b, loc, byteOf(codes[i], q), e.i32(0x1001));
      Value bits = orI(e.andI(shl(t, 6), e.i32(0x01c001c0)),
                       e.andI(shl(t, 12), e.i32(int32_t(0x80008000u))));
      Value v = LLVM::FMulOp::create(b, loc, asPair(bits), two126);
      v = LLVM::FMulOp::create(b, loc, v, scale[i]);
      return LLVM::BitcastOp::create(b, loc, i32, v);
    };
    // Half h: B registers from bytes 2h and 2h + 1, decoded just before
    // their products (fewer live registers).
    for (int64_t h = 0; h < 2; ++h) {
      SmallVector<FragB> bFrag;
      for (int64_t i = 0; i < tableTiles; ++i)
        bFrag.push_back({decode(i, 2 * h), decode(i, 2 * h + 1)});
      for (int64_t i = 0; i < MI; ++i) {
        FragA a = {aLo[i][2 * h], aHi[i][2 * h], aLo[i][2 * h + 1],
                   aHi[i][2 * h + 1]};
        for (int t = 0; t < tables; ++t)
          for (int64_t nt = 0; nt < NT; ++nt) {
            Acc &c = acc[t * tilesPerTable + NT * i + nt];
            c = e.mma(a, bFrag[t * NT + nt], c);
          }
      }
    }
  }
}

/// Two adjacent columns a register pair, rows within the count; the GLU of
/// gate and up where there are two tables.
void ExpertProductEmitter::epilogue(ValueRange results) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type outType = s.bf16Out ? b.getBF16Type() : b.getF32Type();
  const int64_t N = s.n;
  Value outBase = e.mul(m0, e.idx(N));
  // The GLU of gate v and up u. Stored as bf16, it is computed through the
  // SFU (fastTanh, fastSigmoid: relative error below 2^-17, far under
  // bf16's 2^-9) and with divisions by beta as products by 1/beta: with
  // libdevice's tanhf and a correctly rounded division, the epilogue of a
  // 1024-deep gate/up tile issued about as many instructions as its
  // products. Stored as f32 (the reference configuration) it is exact.
  auto glu = [&](Value v, Value u) -> Value {
    if (!s.bf16Out)
      return s.situ ? lowering::situ(b, loc, v, u, s.beta, s.linearBeta)
                    : lowering::siluGlu(b, loc, v, u);
    if (!s.situ)
      return e.fmul(e.fmul(v, e.fastSigmoid(v)), u);
    // SiTU: beta tanh(g / beta) sigmoid(g) * linearBeta tanh(u / linearBeta).
    Value left = e.fmul(e.fmul(e.f32(s.beta), e.fastTanh(e.fmul(v, e.f32(1.0 / s.beta)))),
                        e.fastSigmoid(v));
    Value right = e.fmul(e.f32(s.linearBeta),
                         e.fastTanh(e.fmul(u, e.f32(1.0 / s.linearBeta))));
    return e.fmul(left, right);
  };
  auto result = [&](int t, int64_t tile, int64_t half, int64_t l) {
    return results[t * accPerTable + 4 * tile + 2 * half + l];
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
            v = glu(v, u);
          }
          pair.push_back(s.bf16Out ? e.fromF32(v, outType) : v);
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

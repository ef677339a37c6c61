//===- ExpertProductKernel.cpp - MXFP4 expert products on tensor cores ----===//
//
// One block per (64 columns, 64 rows, expert); four warps of 32 x 32. Per
// 32-deep step (one MXFP4 scale block) the block stages its rows' values,
// split into `terms` bf16 tiles, and the table's codes decoded with their
// scale into a bf16 tile (rows n, k contiguous), then each warp runs
// mma.sync m16n8k16 over both 16-deep halves into f32 accumulators. Blocks
// past an expert's count return at once: the launch covers the largest
// expert, most experts hold fewer rows.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/ExpertProductKernel.h"
#include "lowering/ToGPU/GemvKernel.h"
#include "lowering/ToGPU/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace kimi::gpu {

namespace {
constexpr int64_t kDepth = 32; // one E8M0 block of k
constexpr int64_t kLd = kDepth + 8; // bf16 row stride: no bank conflicts
} // namespace

std::string ExpertProductSpec::key() const {
  return "expert_product_e" + std::to_string(experts) + "_n" +
         std::to_string(n) + "_k" + std::to_string(k) + "_t" +
         std::to_string(terms) + (bf16Rows ? "_r16" : "");
}

std::string verifyExpertProductSpec(const ExpertProductSpec &s) {
  if (s.experts <= 0 || s.n <= 0 || s.k <= 0)
    return "empty tables";
  if (s.k % kDepth != 0)
    return "k = " + std::to_string(s.k) + " is not a multiple of 32 (MXFP4 blocks)";
  if (s.n % 8 != 0)
    return "n = " + std::to_string(s.n) + " is not a multiple of 8";
  if (s.terms != 1 && s.terms != 3)
    return "terms = " + std::to_string(s.terms) + " is not 1 or 3";
  if (s.bf16Rows && s.terms != 1)
    return "bf16 rows are one term (terms = " + std::to_string(s.terms) + ")";
  return "";
}

namespace {

struct ExpertProductEmitter {
  ExpertProductEmitter(OpBuilder &b, Location loc, const ExpertProductSpec &s)
      : e(b, loc), s(s) {}

  KernelEmitter e;
  const ExpertProductSpec &s;
  Value rows, codes, scales, counts, out, cap;
  SmallVector<Value, 3> aTiles;
  Value bTile;

  void emit(mlir::gpu::GPUModuleOp module, StringRef name) {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    Type bf16 = b.getBF16Type(), f32 = b.getF32Type();
    for (int t = 0; t < s.terms; ++t)
      aTiles.push_back(e.sharedBuffer(module, (name + "_a" + Twine(t)).str(),
                                      kExpertProductTileM * kLd, bf16));
    bTile = e.sharedBuffer(module, (name + "_b").str(),
                           kExpertProductTileN * kLd, bf16);
    Value tid = e.threadId(), lane = e.laneId();
    Value warp = e.divu(tid, e.idx(32));
    Value wm = e.divu(warp, e.idx(2)), wn = e.remu(warp, e.idx(2));
    Value g = e.divu(lane, e.idx(4)), tq = e.remu(lane, e.idx(4));
    Value n0 = e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(kExpertProductTileN));
    Value m0 = e.mul(e.blockId(mlir::gpu::Dimension::y), e.idx(kExpertProductTileM));
    Value ex = e.blockId(mlir::gpu::Dimension::z);
    Value limit = e.minu(cap, e.toIndex(e.load(counts, ex)));
    auto live = scf::IfOp::create(b, loc, e.ult(m0, limit), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&live.getThenRegion().front());

    const int64_t K = s.k, N = s.n;
    Value rowBase = e.mul(e.add(e.mul(ex, cap), m0), e.idx(K));
    Value tableRow0 = e.add(e.mul(ex, e.idx(N)), n0);
    auto vec = [&](int64_t n, Type t) { return VectorType::get({n}, t); };
    Value zeros4 = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(vec(4, f32), b.getF32FloatAttr(0.0)));
    Value zeros8 = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(vec(8, f32), b.getF32FloatAttr(0.0)));

    SmallVector<Value> init(2 * 4 * 4, e.f32(0.0));
    auto loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(K / kDepth),
                                   e.idx(1), init);
    {
      OpBuilder::InsertionGuard lg(b);
      b.setInsertionPointToStart(loop.getBody());
      Value kb = loop.getInductionVar();
      Value k0 = e.mul(kb, e.idx(kDepth));
      // Loads first (rows: four f32 x 4 a thread; table: two 8-code words
      // and their scales), so that they are in flight together.
      struct RowPiece { Value v, at; };
      SmallVector<RowPiece> rowPieces;
      for (int64_t u = 0; u < kExpertProductTileM * kDepth / 4 / kExpertProductThreads;
           ++u) {
        Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
        Value r = e.divu(piece, e.idx(kDepth / 4));
        Value c = e.mul(e.remu(piece, e.idx(kDepth / 4)), e.idx(4));
        Value valid = e.ult(e.add(m0, r), limit);
        Value at = e.add(rowBase, e.add(e.mul(r, e.idx(K)), e.add(k0, c)));
        Value v = vector::LoadOp::create(
            b, loc, vec(4, s.bf16Rows ? bf16 : f32), rows,
            ValueRange{e.select(valid, at, e.idx(0))}, false,
            llvm::MaybeAlign(s.bf16Rows ? 8 : 16));
        if (s.bf16Rows) // exact; the one term rounds nothing
          v = arith::ExtFOp::create(b, loc, vec(4, f32), v);
        v = arith::SelectOp::create(b, loc, valid, v, zeros4);
        rowPieces.push_back({v, e.add(e.mul(r, e.idx(kLd)), c)});
      }
      struct TablePiece { Value word, scale, valid, at; };
      SmallVector<TablePiece> tablePieces;
      for (int64_t u = 0; u < kExpertProductTileN * kDepth / 8 / kExpertProductThreads;
           ++u) {
        Value piece = e.add(tid, e.idx(u * kExpertProductThreads));
        Value r = e.divu(piece, e.idx(kDepth / 8));
        Value part = e.remu(piece, e.idx(kDepth / 8));
        Value valid = e.ult(e.add(n0, r), e.idx(N));
        Value tableRow = e.select(valid, e.add(tableRow0, r), e.idx(0));
        Value byteAt = e.add(e.mul(tableRow, e.idx(K / 2)),
                             e.add(e.divu(k0, e.idx(2)), e.mul(part, e.idx(4))));
        Value bytes = vector::LoadOp::create(b, loc, vec(4, b.getI8Type()), codes,
                                             ValueRange{byteAt}, false,
                                             llvm::MaybeAlign(4));
        Value word = vector::ExtractOp::create(
            b, loc, vector::BitCastOp::create(b, loc, vec(1, b.getI32Type()), bytes),
            ArrayRef<int64_t>{0});
        Value scale = arith::ExtUIOp::create(
            b, loc, b.getI32Type(),
            memref::LoadOp::create(
                b, loc, scales,
                ValueRange{e.add(e.mul(tableRow, e.idx(K / kDepth)), kb)}));
        tablePieces.push_back({word, scale, valid,
                               e.add(e.mul(r, e.idx(kLd)), e.mul(part, e.idx(8)))});
      }
      // The previous step's fragments are read.
      e.barrier();
      for (const RowPiece &p : rowPieces) {
        Value rest = p.v;
        for (int t = 0; t < s.terms; ++t) {
          Value term = arith::TruncFOp::create(b, loc, vec(4, bf16), rest);
          vector::StoreOp::create(b, loc, term, aTiles[t], ValueRange{p.at},
                                  false, llvm::MaybeAlign(8));
          if (t + 1 < s.terms)
            rest = arith::SubFOp::create(
                b, loc, rest, arith::ExtFOp::create(b, loc, vec(4, f32), term));
        }
      }
      for (const TablePiece &p : tablePieces) {
        Value values = decodeMxfp4Word(e, p.word, p.scale);
        values = arith::SelectOp::create(b, loc, p.valid, values, zeros8);
        // Exact: an MXFP4 value has two significant bits.
        Value w = arith::TruncFOp::create(b, loc, vec(8, bf16), values);
        vector::StoreOp::create(b, loc, w, bTile, ValueRange{p.at}, false,
                                llvm::MaybeAlign(16));
      }
      e.barrier();

      SmallVector<Acc> acc;
      ValueRange it = loop.getRegionIterArgs();
      for (int64_t i = 0; i < 8; ++i)
        acc.push_back({it[4 * i], it[4 * i + 1], it[4 * i + 2], it[4 * i + 3]});
      for (int64_t ks = 0; ks < kDepth; ks += 16) {
        std::array<FragB, 4> bf;
        for (int64_t j = 0; j < 2; ++j) {
          auto two = e.fragBRows(bTile, e.add(e.mul(wn, e.idx(32)), e.idx(16 * j)),
                                 kLd, e.idx(ks));
          bf[2 * j] = two[0];
          bf[2 * j + 1] = two[1];
        }
        // The smallest term first: it is added to the smallest sums.
        for (int t = s.terms - 1; t >= 0; --t)
          for (int64_t i = 0; i < 2; ++i) {
            FragA a = e.fragA(aTiles[t], e.add(e.mul(wm, e.idx(32)), e.idx(16 * i)),
                              kLd, e.idx(ks));
            for (int64_t nt = 0; nt < 4; ++nt)
              acc[4 * i + nt] = e.mma(a, bf[nt], acc[4 * i + nt]);
          }
      }
      SmallVector<Value> next;
      for (const Acc &a : acc)
        next.append(a.begin(), a.end());
      scf::YieldOp::create(b, loc, next);
    }

    // Epilogue: two adjacent columns a register pair, rows within the count.
    Value outBase = e.mul(e.add(e.mul(ex, cap), m0), e.idx(N));
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        Value r = e.add(e.mul(wm, e.idx(32)), e.add(e.idx(16 * i + 8 * half), g));
        auto rowIf = scf::IfOp::create(b, loc, e.ult(e.add(m0, r), limit), false);
        OpBuilder::InsertionGuard rg(b);
        b.setInsertionPointToStart(&rowIf.getThenRegion().front());
        for (int64_t nt = 0; nt < 4; ++nt) {
          Value col = e.add(e.mul(wn, e.idx(32)), e.idx(8 * nt));
          Value n = e.add(n0, e.add(col, e.mul(tq, e.idx(2))));
          Value at = e.add(outBase, e.add(e.mul(r, e.idx(N)), n));
          Value pair = vector::FromElementsOp::create(
              b, loc, vec(2, f32),
              ValueRange{loop.getResult(4 * (4 * i + nt) + 2 * half),
                         loop.getResult(4 * (4 * i + nt) + 2 * half + 1)});
          auto store = [&] {
            vector::StoreOp::create(b, loc, pair, out, ValueRange{at}, false,
                                    llvm::MaybeAlign(8));
          };
          if (N % kExpertProductTileN == 0) {
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
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  SmallVector<Type> args = {dyn(s.bf16Rows ? b.getBF16Type() : f32), dyn(i8),
                            dyn(i8), dyn(b.getI32Type()),
                            dyn(f32), b.getIndexType()};
  auto fn = createKernel(b, loc, module, name, args,
                         {int32_t(kExpertProductThreads), 1, 1});
  b.setInsertionPoint(fn.getBody().front().getTerminator());
  ExpertProductEmitter m(b, loc, s);
  Block &body = fn.getBody().front();
  m.rows = body.getArgument(0);
  m.codes = body.getArgument(1);
  m.scales = body.getArgument(2);
  m.counts = body.getArgument(3);
  m.out = body.getArgument(4);
  m.cap = body.getArgument(5);
  m.emit(module, name);
  return fn;
}

} // namespace kimi::gpu

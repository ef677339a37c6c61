//===- GemvKernel.cpp - products of a few rows, read at HBM speed ---------===//
//
// Per warp: rowsPerWarp rows of B and every row of A. Lane l reads the
// 16-byte pieces k = 128 c + 4 l of each, groups of chunks c are unrolled
// so that all their loads are in flight before the FMAs that use them, and
// vector accumulators are summed over the lanes at the end.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/GemvKernel.h"
#include "lowering/ToGPU/KdaKernelSupport.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace kimi::gpu {

namespace {
constexpr int64_t kChunk = 128; // k values a warp reads per row and chunk
} // namespace

std::string GemvKernelSpec::key() const {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
         "_" + std::to_string(lda) + "_" + std::to_string(ldb) + "_" +
         std::to_string(ldc) + "_r" + std::to_string(rowsPerWarp) +
         (accumulate ? "_acc" : "");
}

std::string GemvGroupSpec::key() const {
  std::string k;
  for (const GemvKernelSpec &p : products)
    k += (k.empty() ? "" : "__") + p.key();
  return k;
}

int64_t gemvBlocks(const GemvKernelSpec &spec) {
  const int64_t rowsPerBlock = kGemvWarps * spec.rowsPerWarp;
  return (spec.n + rowsPerBlock - 1) / rowsPerBlock;
}

int64_t gemvBlocks(const GemvGroupSpec &group) {
  int64_t blocks = 0;
  for (const GemvKernelSpec &p : group.products)
    blocks += gemvBlocks(p);
  return blocks;
}

LogicalResult verifyGemvGroupSpec(const GemvGroupSpec &group, std::string &why) {
  if (group.products.empty() || group.products.size() > 8) {
    why = std::to_string(group.products.size()) +
          " products in a group (1..8 are supported)";
    return failure();
  }
  const GemvKernelSpec &first = group.products.front();
  for (size_t i = 0; i < group.products.size(); ++i) {
    const GemvKernelSpec &p = group.products[i];
    if (failed(verifyGemvKernelSpec(p, why))) {
      why = "product " + std::to_string(i) + ": " + why;
      return failure();
    }
    if (p.m != first.m || p.k != first.k || p.lda != first.lda ||
        p.rowsPerWarp != first.rowsPerWarp) {
      why = "product " + std::to_string(i) +
            " differs from product 0 in m, k, lda or rows per warp";
      return failure();
    }
  }
  return success();
}

LogicalResult verifyGemvKernelSpec(const GemvKernelSpec &spec, std::string &why) {
  if (spec.m < 1 || spec.m > 8)
    why = "m = " + std::to_string(spec.m) + " is outside 1..8";
  else if (spec.n < 1 || spec.k < 1)
    why = "n and k must be positive";
  else if (spec.k % 4 != 0)
    why = "k = " + std::to_string(spec.k) + " is not a multiple of 4 (16-byte loads)";
  else if (spec.lda % 4 != 0 || spec.ldb % 4 != 0)
    why = "row strides of A and B must be multiples of 4 (16-byte loads)";
  else if (spec.rowsPerWarp < 1 || spec.rowsPerWarp > 4)
    why = "rows per warp must be 1..4";
  return success(why.empty());
}

MemRefType gemvBufferType(MLIRContext *ctx) {
  return MemRefType::get(
      {ShapedType::kDynamic}, Float32Type::get(ctx),
      StridedLayoutAttr::get(ctx, ShapedType::kDynamic, {1}));
}

mlir::gpu::GPUFuncOp emitGemvKernel(OpBuilder &b, Location loc,
                                    mlir::gpu::GPUModuleOp module, StringRef name,
                                    const GemvGroupSpec &group) {
  const GemvKernelSpec &shared = group.products.front();
  const int64_t M = shared.m, K = shared.k, R = shared.rowsPerWarp;
  MemRefType buffer = gemvBufferType(b.getContext());
  SmallVector<Type> args(1 + 2 * group.products.size(), buffer);
  GPUFuncOpAndEmitter k(b, loc, module, name, args,
                        {static_cast<int32_t>(kGemvThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value A = body.getArgument(0);
  Type f32 = b.getF32Type();
  auto vec = VectorType::get({4}, f32);
  Value tid = e.threadId(), lane = e.laneId(), warp = e.divu(tid, e.idx(32));
  Value laneK = e.mul(lane, e.idx(4));
  Value zeroVec = arith::ConstantOp::create(b, loc, vec, DenseElementsAttr::get(
                                                             vec, b.getF32FloatAttr(0)));
  auto load = [&](Value buf, Value index) -> Value {
    // Row strides and offsets are multiples of 4 floats (checked by the
    // caller), so every piece is 16-byte aligned.
    return vector::LoadOp::create(b, loc, vec, buf, ValueRange{index}, false,
                                  llvm::MaybeAlign(16));
  };

  // One product over the blocks [0, gemvBlocks(spec)) of `blockIndex`.
  auto product = [&](const GemvKernelSpec &spec, Value B, Value C,
                     Value blockIndex) {
    const int64_t N = spec.n;
    Value firstRow = e.mul(e.add(e.mul(blockIndex, e.idx(kGemvWarps)), warp),
                           e.idx(R));
    // Rows past N read row N - 1 and are not stored.
    SmallVector<Value> row(R), rowValid(R), rowBase(R);
    for (int64_t r = 0; r < R; ++r) {
      row[r] = e.add(firstRow, e.idx(r));
      rowValid[r] = e.ult(row[r], e.idx(N));
      rowBase[r] = e.mul(e.minu(row[r], e.idx(N - 1)), e.idx(spec.ldb));
    }
    // One chunk at k = kBase + 4 lane: all loads, then the FMAs.
    auto chunk = [&](Value kBase, ArrayRef<Value> acc, bool masked) {
      Value kk = e.add(kBase, laneK), inRange;
      if (masked) {
        inRange = e.ult(kk, e.idx(K));
        kk = e.select(inRange, kk, e.idx(0));
      }
      SmallVector<Value> w(R), x(M);
      for (int64_t r = 0; r < R; ++r)
        w[r] = load(B, e.add(rowBase[r], kk));
      for (int64_t m = 0; m < M; ++m)
        x[m] = load(A, e.add(e.idx(m * spec.lda), kk));
      if (masked)
        for (Value &v : w)
          v = e.select(inRange, v, zeroVec);
      SmallVector<Value> out(acc.begin(), acc.end());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < R; ++r)
          out[m * R + r] = vector::FMAOp::create(b, loc, x[m], w[r], out[m * R + r]);
      return out;
    };

    const int64_t chunks = (K + kChunk - 1) / kChunk;
    const bool ragged = K % kChunk != 0;
    // Loads in flight per lane and group: group * (R + M) pieces of 16 bytes.
    const int64_t group = R + M <= 3 ? 8 : 4;
    // The last chunk, when ragged, is unrolled after the loop with its mask.
    const int64_t full = ragged ? chunks - 1 : chunks;
    const int64_t groups = full / group;
    SmallVector<Value> acc(M * R, zeroVec);
    if (groups > 0) {
      auto loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(groups), e.idx(1), acc);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loop.getBody());
      SmallVector<Value> inner(loop.getRegionIterArgs().begin(),
                               loop.getRegionIterArgs().end());
      Value base = e.mul(loop.getInductionVar(), e.idx(group * kChunk));
      for (int64_t i = 0; i < group; ++i)
        inner = chunk(e.add(base, e.idx(i * kChunk)), inner, false);
      scf::YieldOp::create(b, loc, inner);
      b.setInsertionPointAfter(loop);
      acc.assign(loop.getResults().begin(), loop.getResults().end());
    }
    for (int64_t c = groups * group; c < chunks; ++c)
      acc = chunk(e.idx(c * kChunk), acc, ragged && c == chunks - 1);

    // Lane sums, then a butterfly: every lane ends with every total.
    SmallVector<Value> total;
    Value width = e.i32(32);
    for (Value v : acc) {
      Value s = vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, v);
      for (int off = 16; off >= 1; off /= 2) {
        auto sh = mlir::gpu::ShuffleOp::create(b, loc, s, e.i32(off), width,
                                               mlir::gpu::ShuffleMode::XOR);
        s = e.fadd(s, sh.getShuffleResult());
      }
      total.push_back(s);
    }
    // Output (m, r) is stored by lane (m R + r) mod 32.
    for (int64_t m = 0; m < M; ++m)
      for (int64_t r = 0; r < R; ++r) {
        Value mine = e.andI(e.eq(lane, e.idx((m * R + r) % 32)), rowValid[r]);
        auto guard = scf::IfOp::create(b, loc, mine, false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&guard.getThenRegion().front());
        Value at = e.add(e.idx(m * spec.ldc), row[r]);
        Value v = total[m * R + r];
        if (spec.accumulate)
          v = e.fadd(e.load(C, at), v);
        e.store(v, C, at);
      }
  };

  // Product p owns blocks [start_p, start_p + gemvBlocks(p)): a chain of
  // ifs on the block index, the last product in the innermost else.
  Value block = e.blockId(mlir::gpu::Dimension::x);
  int64_t start = 0;
  const size_t P = group.products.size();
  for (size_t p = 0; p < P; ++p) {
    const GemvKernelSpec &spec = group.products[p];
    Value B = body.getArgument(1 + 2 * p), C = body.getArgument(2 + 2 * p);
    Value local = start ? e.sub(block, e.idx(start)) : block;
    const int64_t end = start + gemvBlocks(spec);
    if (p + 1 == P) {
      product(spec, B, C, local);
      break;
    }
    auto branch = scf::IfOp::create(b, loc, e.ult(block, e.idx(end)),
                                    /*withElseRegion=*/true);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    product(spec, B, C, local);
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    start = end;
  }
  return k.func;
}

} // namespace kimi::gpu

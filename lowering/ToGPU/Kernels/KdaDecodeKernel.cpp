//===- KdaDecodeKernel.cpp - one KDA token per sequence --------------------===//
//
// Decode is memory bound: each (sequence, head) reads and writes its f32
// state (dk x dv) once and everything else is tiny. The columns of the
// state are independent, so each (sequence, head) takes G blocks of four
// warps (grid (B H, G)), block y over dv / G consecutive columns; warp w owns
// state rows [w dk/4, (w+1) dk/4), lane l owns dv / (32 G) consecutive
// columns of its block's, so every state row is one coalesced access. A
// thread issues its state loads first, before the small q, k, g staging
// and its barrier, so that both wait for memory once. The state is read
// from one buffer and the new one written to another: every thread loads
// its rows before any thread stores (the first reduction's barrier is
// between), and blocks own disjoint columns, so the two may also be one
// buffer. Per column c:
//
//   Sd     = Diag(exp(g)) S
//   u_c    = beta (v_c - sum_i k_i Sd_ic)      (partial sums per warp,
//   S_ic   = Sd_ic + k_i u_c                    reduced through shared memory)
//   o_c    = scale sum_i q_i S_ic
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/KdaKernelSupport.h"
#include "lowering/ToGPU/Kernels/KdaKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace kimi::gpu {

LogicalResult verifyKdaDecodeShape(const KdaDecodeShape &s, std::string &why) {
  if (s.batch <= 0 || s.heads <= 0) {
    why = "batch and heads must be positive";
    return failure();
  }
  if (s.dk % 4 != 0 || s.dk < 4 || s.dk > 256) {
    why = "dk = " + std::to_string(s.dk) +
          ": the decode kernel needs a multiple of 4 up to 256";
    return failure();
  }
  if (s.dv % 32 != 0 || s.dv > 256) {
    why = "dv = " + std::to_string(s.dv) +
          ": the decode kernel needs a multiple of 32 up to 256";
    return failure();
  }
  if (s.columnGroups < 1 || s.dv % s.columnGroups != 0 ||
      (s.dv / s.columnGroups) % 32 != 0) {
    why = "column groups = " + std::to_string(s.columnGroups) +
          ": dv = " + std::to_string(s.dv) +
          " must split into groups of a multiple of 32 columns";
    return failure();
  }
  if (!s.actType || !(s.actType.isBF16() || s.actType.isF16() || s.actType.isF32())) {
    why = "q/k/v/beta/o must be bf16, f16 or f32";
    return failure();
  }
  if (!s.gateType || !(s.gateType.isBF16() || s.gateType.isF32())) {
    why = "g must be bf16 or f32";
    return failure();
  }
  if (!s.stateType || !(s.stateType.isF32() || s.stateType.isBF16() || s.stateType.isF16())) {
    why = "the state must be stored as f32, bf16 or f16";
    return failure();
  }
  return success();
}

int64_t chooseKdaDecodeColumnGroups(int64_t sequences, int64_t heads,
                                    int64_t dv, int64_t smCount) {
  int64_t groups = 1;
  while (sequences * heads * groups < smCount && dv % (2 * groups) == 0 &&
         (dv / (2 * groups)) % 32 == 0)
    groups *= 2;
  return groups;
}

mlir::gpu::GPUFuncOp emitKdaDecodeKernel(OpBuilder &b, Location loc,
                                         mlir::gpu::GPUModuleOp module,
                                         const KdaDecodeShape &s) {
  OpBuilder::InsertionGuard guard(b);
  const int64_t BH = s.batch * s.heads, DK = s.dk, DV = s.dv;
  constexpr int64_t kWarps = 4, kThreads = 32 * kWarps;
  const int64_t rows = DK / kWarps, cpl = DV / s.columnGroups / 32;
  Type f32 = b.getF32Type();
  SmallVector<Type> args = {
      flatMemRef(s.actType, BH * DK), flatMemRef(s.actType, BH * DK),
      flatMemRef(s.actType, BH * DV), flatMemRef(s.gateType, BH * DK),
      flatMemRef(s.actType, BH),      flatMemRef(s.stateType, BH * DK * DV),
      flatMemRef(s.stateType, BH * DK * DV), flatMemRef(s.actType, BH * DV)};
  const bool fused = s.gate.form != KdaGateFusion::Form::None;
  if (fused) {
    args.push_back(flatMemRef(f32, s.heads));
    args.push_back(flatMemRef(f32, s.heads * DK));
  }
  GPUFuncOpAndEmitter k(b, loc, module, "kda_decode", args,
                        {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value q = body.getArgument(0), kk = body.getArgument(1), v = body.getArgument(2);
  Value g = body.getArgument(3), beta = body.getArgument(4);
  Value state = body.getArgument(5), finalState = body.getArgument(6);
  Value o = body.getArgument(7);

  Value kS = e.sharedBuffer(module, "kda_decode_k", DK, f32);
  Value aS = e.sharedBuffer(module, "kda_decode_a", DK, f32);
  Value qS = e.sharedBuffer(module, "kda_decode_q", DK, f32);
  Value red = e.sharedBuffer(module, "kda_decode_red", kWarps * DV, f32);

  Value bh = e.blockId(mlir::gpu::Dimension::x);
  Value group = e.blockId(mlir::gpu::Dimension::y);
  Value tid = e.threadId();
  Value lane = e.laneId();
  Value warp = e.divu(tid, e.idx(32));

  // This thread's state rows, loaded first (nothing they need is staged).
  auto vecType = VectorType::get({cpl}, f32);
  Value col = e.add(e.mul(group, e.idx(DV / s.columnGroups)), e.mul(lane, e.idx(cpl)));
  auto splat = [&](Value scalar) {
    return vector::BroadcastOp::create(b, loc, vecType, scalar).getResult();
  };
  const llvm::MaybeAlign stateAlign(cpl * s.stateType.getIntOrFloatBitWidth() / 8);
  SmallVector<Value> sd(rows);
  SmallVector<Value> rowIdx(rows);
  for (int64_t r = 0; r < rows; ++r) {
    rowIdx[r] = e.add(e.mul(warp, e.idx(rows)), e.idx(r));
    Value at = e.add(e.mul(e.add(e.mul(bh, e.idx(DK)), rowIdx[r]), e.idx(DV)), col);
    // Row starts and lane columns are multiples of cpl: aligned accesses.
    sd[r] = vector::LoadOp::create(b, loc, VectorType::get({cpl}, s.stateType), state,
                                   ValueRange{at}, false, stateAlign);
  }
  // The step's v and beta for these columns, also ahead of their use.
  Value betaV = e.toF32(e.load(beta, bh));
  SmallVector<Value> vv;
  for (int64_t c = 0; c < cpl; ++c)
    vv.push_back(e.toF32(e.load(v, e.add(e.mul(bh, e.idx(DV)), e.add(col, e.idx(c))))));

  for (int64_t base = 0; base < DK; base += kThreads) {
    Value i = e.add(tid, e.idx(base));
    auto in = scf::IfOp::create(b, loc, e.ult(i, e.idx(DK)), false);
    OpBuilder::InsertionGuard ig(b);
    b.setInsertionPointToStart(&in.getThenRegion().front());
    Value at = e.add(e.mul(bh, e.idx(DK)), i);
    e.store(e.toF32(e.load(kk, at)), kS, i);
    Value gv = e.toF32(e.load(g, at));
    if (fused) {
      Value h = e.remu(bh, e.idx(s.heads));
      gv = emitGate(e, s.gate, gv, e.exp(e.load(body.getArgument(8), h)),
                    e.load(body.getArgument(9), e.add(e.mul(h, DK), i)));
    }
    e.store(e.exp(gv), aS, i);
    e.store(e.toF32(e.load(q, at)), qS, i);
  }
  e.barrier();

  if (!s.stateType.isF32())
    for (Value &row : sd)
      row = arith::ExtFOp::create(b, loc, vecType, row);
  Value part = splat(e.f32(0.0));
  for (int64_t r = 0; r < rows; ++r) {
    sd[r] = e.fmul(sd[r], splat(e.load(aS, rowIdx[r])));
    part = e.fadd(part, e.fmul(sd[r], splat(e.load(kS, rowIdx[r]))));
  }
  // Sum of the four warps' partials, for this lane's columns.
  auto reduce = [&](Value partial) {
    vector::StoreOp::create(b, loc, partial, red,
                            ValueRange{e.add(e.mul(warp, e.idx(DV)), col)});
    e.barrier();
    Value sum = splat(e.f32(0.0));
    for (int64_t w = 0; w < kWarps; ++w)
      sum = e.fadd(sum, vector::LoadOp::create(b, loc, vecType, red,
                                               ValueRange{e.add(e.idx(w * DV), col)}));
    return sum;
  };
  Value kv = reduce(part);
  Value vVec = vector::FromElementsOp::create(b, loc, vecType, vv);
  Value u = e.fmul(splat(betaV), e.fsub(vVec, kv));
  Value opart = splat(e.f32(0.0));
  for (int64_t r = 0; r < rows; ++r) {
    Value sn = e.fadd(sd[r], e.fmul(splat(e.load(kS, rowIdx[r])), u));
    Value at = e.add(e.mul(e.add(e.mul(bh, e.idx(DK)), rowIdx[r]), e.idx(DV)), col);
    Value stored = sn;
    if (!s.stateType.isF32())
      stored = arith::TruncFOp::create(b, loc, VectorType::get({cpl}, s.stateType), sn);
    vector::StoreOp::create(b, loc, stored, finalState, ValueRange{at}, false,
                            stateAlign);
    opart = e.fadd(opart, e.fmul(sn, splat(e.load(qS, rowIdx[r]))));
  }
  e.barrier(); // every warp has read `red` before it is reused
  Value ov = e.fmul(reduce(opart), splat(e.f32(s.scale)));
  auto first = scf::IfOp::create(b, loc, e.eq(warp, e.idx(0)), false);
  b.setInsertionPointToStart(&first.getThenRegion().front());
  for (int64_t c = 0; c < cpl; ++c) {
    Value x = vector::ExtractOp::create(b, loc, ov, ArrayRef<int64_t>{c});
    e.store(e.fromF32(x, s.actType), o,
            e.add(e.mul(bh, e.idx(DV)), e.add(col, e.idx(c))));
  }
  return k.func;
}

} // namespace kimi::gpu

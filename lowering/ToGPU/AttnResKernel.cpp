//===- AttnResKernel.cpp - one fused kernel per AttnRes application --------===//
//
// `kimi.attn_res` (reference §4) and, when its result feeds one
// `kimi.rms_norm`, that norm too, as one kernel: one block per token, 256
// threads, each holding vectors of up to 8 contiguous columns. Sources are read once: per
// source a block reduction gives sum v^2 and sum v norm query (so the score
// of the RMS-normalised key), and an online softmax folds the source into
// the running mix held in registers. The mix is written (when used) and,
// fused, RMS-normalised with the following norm's weight.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/AttnResKernel.h"
#include "lowering/ToGPU/KdaKernelSupport.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>

using namespace mlir;

namespace kimi::gpu {
namespace {

constexpr int64_t kThreads = 256, kWarps = kThreads / 32;

/// Sum over the block of `values` (each thread's partials), returned to
/// every thread: warp shuffles, then one shared-memory round.
SmallVector<Value> blockSum(KernelEmitter &e, Value scratch, Value warp, Value lane,
                            ArrayRef<Value> values) {
  OpBuilder &b = e.b;
  SmallVector<Value> out;
  Value width = e.i32(32);
  for (Value v : values) {
    for (int off = 16; off >= 1; off /= 2) {
      auto sh = mlir::gpu::ShuffleOp::create(b, e.loc, v, e.i32(off), width,
                                             mlir::gpu::ShuffleMode::XOR);
      v = e.fadd(v, sh.getShuffleResult());
    }
    out.push_back(v);
  }
  const int64_t n = static_cast<int64_t>(values.size());
  auto first = scf::IfOp::create(b, e.loc, e.eq(lane, e.idx(0)), false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&first.getThenRegion().front());
    for (int64_t i = 0; i < n; ++i)
      e.store(out[i], scratch, e.add(e.mul(warp, e.idx(n)), e.idx(i)));
  }
  e.barrier();
  SmallVector<Value> total(n, e.f32(0.0));
  for (int64_t w = 0; w < kWarps; ++w)
    for (int64_t i = 0; i < n; ++i)
      total[i] = e.fadd(total[i], e.load(scratch, e.idx(w * n + i)));
  e.barrier(); // the scratch is reused by the next reduction
  return total;
}

} // namespace

FailureOr<GpuEntryPlan> planAttnResEntry(AttnResOp op, RmsNormOp norm,
                                         StringRef name) {
  auto outType = cast<RankedTensorType>(op.getOut().getType());
  if (!outType.hasStaticShape())
    return op.emitOpError("the GPU target needs static shapes"), failure();
  const int64_t D = outType.getShape().back();
  const int64_t tokens = outType.getNumElements() / D;
  const int64_t nSources = static_cast<int64_t>(op.getSources().size());
  // Each thread reads vw contiguous columns at a time (16-byte bf16 loads
  // when D allows), vectors tid, tid + 256, ...
  int64_t vw = 8;
  while (D % vw != 0)
    vw /= 2;
  const int64_t vectors = D / vw;
  const int64_t perThread = (vectors + kThreads - 1) / kThreads;
  if (perThread * vw > 64)
    return op.emitOpError("hidden size ") << D << " exceeds the fused GPU "
                                             "kernel's limit of 16384",
           failure();
  Type act = outType.getElementType();
  for (Value v : op.getSources())
    if (cast<RankedTensorType>(v.getType()).getElementType() != act)
      return op.emitOpError("the GPU kernel needs every source in the output "
                            "type ")
                 << act,
             failure();

  Location loc = op.getLoc();
  GpuEntryPlanBuilder pb(op.getContext(), loc, name, ("attn_res_" + name).str());
  mlir::gpu::GPUModuleOp module = pb.module;
  OpBuilder b(op.getContext());
  Type f32 = b.getF32Type();
  Type qType = cast<RankedTensorType>(op.getQuery().getType()).getElementType();
  Type nType = cast<RankedTensorType>(op.getNorm().getType()).getElementType();
  SmallVector<Type> args;
  for (int64_t i = 0; i < nSources; ++i)
    args.push_back(flatMemRef(act, tokens * D));
  args.push_back(flatMemRef(qType, D));
  args.push_back(flatMemRef(nType, D));
  args.push_back(flatMemRef(act, tokens * D)); // the mix
  Type wType;
  if (norm) {
    wType = cast<RankedTensorType>(norm.getWeight().getType()).getElementType();
    args.push_back(flatMemRef(wType, D));
    args.push_back(flatMemRef(act, tokens * D));
  }
  GPUFuncOpAndEmitter k(b, loc, module, "attn_res", args,
                        {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value scratch = e.sharedBuffer(module, "attn_res_scratch", kWarps * 2, f32);
  Value token = e.blockId(mlir::gpu::Dimension::x);
  Value tid = e.threadId(), lane = e.laneId(), warp = e.divu(tid, e.idx(32));
  Value base = e.mul(token, e.idx(D));
  Value zero = e.f32(0.0);
  // Vector j of this thread covers columns col[j] .. col[j] + vw - 1
  // (coalesced across the block); vectors past D read as zeros.
  SmallVector<Value> col(perThread), valid(perThread);
  for (int64_t j = 0; j < perThread; ++j) {
    Value vi = e.add(tid, e.idx(j * kThreads));
    valid[j] = e.ult(vi, e.idx(vectors));
    col[j] = e.mul(e.minu(vi, e.idx(vectors - 1)), e.idx(vw));
  }
  // The vw values of vector j at `base + col[j]` of `buf`, as f32.
  auto loadVec = [&](Value buf, Value rowBase, int64_t j) {
    Type elt = cast<MemRefType>(buf.getType()).getElementType();
    // col[j] and rowBase are multiples of vw and buffers 256-byte aligned:
    // the access is aligned to its size (one 16-byte load for bf16 x 8).
    Value vec = vector::LoadOp::create(
        b, loc, VectorType::get({vw}, elt), buf, ValueRange{e.add(rowBase, col[j])},
        false, llvm::MaybeAlign(vw * elt.getIntOrFloatBitWidth() / 8));
    SmallVector<Value> out;
    for (int64_t c = 0; c < vw; ++c)
      out.push_back(e.select(
          valid[j], e.toF32(vector::ExtractOp::create(b, loc, vec, ArrayRef<int64_t>{c})),
          zero));
    return out;
  };
  const int64_t n = perThread * vw; // values per thread
  Value query = body.getArgument(nSources), normW = body.getArgument(nSources + 1);
  Value mixOut = body.getArgument(nSources + 2);
  SmallVector<Value> nq;
  for (int64_t j = 0; j < perThread; ++j) {
    auto qv = loadVec(query, e.idx(0), j), nv = loadVec(normW, e.idx(0), j);
    for (int64_t c = 0; c < vw; ++c)
      nq.push_back(e.fmul(qv[c], nv[c]));
  }

  Value m = e.f32(-std::numeric_limits<float>::infinity()), l = zero;
  SmallVector<Value> acc(n, zero);
  const double eps = op.getEps().convertToDouble();
  for (int64_t i = 0; i < nSources; ++i) {
    SmallVector<Value> v;
    for (int64_t j = 0; j < perThread; ++j)
      for (Value x : loadVec(body.getArgument(i), base, j))
        v.push_back(x);
    Value ss = zero, dot = zero;
    for (int64_t j = 0; j < n; ++j) {
      ss = e.fadd(ss, e.fmul(v[j], v[j]));
      dot = e.fadd(dot, e.fmul(v[j], nq[j]));
    }
    SmallVector<Value> sums = blockSum(e, scratch, warp, lane, {ss, dot});
    Value rms = math::RsqrtOp::create(
        b, loc, e.fadd(e.fdiv(sums[0], e.f32(double(D))), e.f32(eps)));
    Value score = e.fmul(sums[1], rms);
    Value mNew = e.fmax(m, score);
    Value keep = e.exp(e.fsub(m, mNew)), w = e.exp(e.fsub(score, mNew));
    l = e.fadd(e.fmul(l, keep), w);
    for (int64_t j = 0; j < n; ++j)
      acc[j] = e.fadd(e.fmul(acc[j], keep), e.fmul(w, v[j]));
    m = mNew;
  }
  Value invL = e.fdiv(e.f32(1.0), l);
  Value ss = zero;
  SmallVector<Value> mix(n);
  for (int64_t j = 0; j < n; ++j) {
    mix[j] = e.fmul(acc[j], invL);
    // What the kernel stores is what the fused norm sees.
    mix[j] = e.toF32(e.fromF32(mix[j], act));
    ss = e.fadd(ss, e.fmul(mix[j], mix[j]));
  }
  auto storeCols = [&](ArrayRef<Value> vals, Value buf) {
    for (int64_t j = 0; j < perThread; ++j) {
      auto guard = scf::IfOp::create(b, loc, valid[j], false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&guard.getThenRegion().front());
      SmallVector<Value> conv;
      for (int64_t c = 0; c < vw; ++c)
        conv.push_back(e.fromF32(vals[j * vw + c], act));
      Value vec = vector::FromElementsOp::create(b, loc, VectorType::get({vw}, act), conv);
      vector::StoreOp::create(b, loc, vec, buf, ValueRange{e.add(base, col[j])}, false,
                              llvm::MaybeAlign(vw * act.getIntOrFloatBitWidth() / 8));
    }
  };
  storeCols(mix, mixOut);
  if (norm) {
    Value w2 = body.getArgument(nSources + 3), out2 = body.getArgument(nSources + 4);
    Value total = blockSum(e, scratch, warp, lane, {ss})[0];
    Value r = math::RsqrtOp::create(
        b, loc, e.fadd(e.fdiv(total, e.f32(double(D))),
                       e.f32(norm.getEps().convertToDouble())));
    SmallVector<Value> y;
    for (int64_t j = 0; j < perThread; ++j) {
      auto wv = loadVec(w2, e.idx(0), j);
      for (int64_t c = 0; c < vw; ++c)
        y.push_back(e.fmul(e.fmul(mix[j * vw + c], r), wv[c]));
    }
    storeCols(y, out2);
  }

  // Buffers: sources, query, norm, the mix, [the norm weight and output];
  // the kernel takes them in that order.
  std::vector<int64_t> shape(outType.getShape().begin(), outType.getShape().end());
  std::vector<uint32_t> launchArgs;
  for (int64_t i = 0; i < nSources; ++i)
    launchArgs.push_back(pb.add("source" + std::to_string(i), rt::BufferKind::kInput, act, shape));
  launchArgs.push_back(pb.add("query", rt::BufferKind::kInput, qType, {D}));
  launchArgs.push_back(pb.add("norm", rt::BufferKind::kInput, nType, {D}));
  launchArgs.push_back(pb.add("out", rt::BufferKind::kOutput, act, shape));
  if (norm) {
    launchArgs.push_back(pb.add("norm_weight", rt::BufferKind::kInput, wType, {D}));
    launchArgs.push_back(pb.add("norm_out", rt::BufferKind::kOutput, act, shape));
  }
  pb.launch("attn_res", {tokens, 1, 1}, kThreads, launchArgs);
  GpuEntryPlan &plan = pb.plan;
  plan.summary = "attn_res: " + std::to_string(nSources) + " sources, " +
                 std::to_string(tokens) + " tokens of " + std::to_string(D) +
                 (norm ? ", following rms_norm fused" : "");
  return std::move(plan);
}

} // namespace kimi::gpu

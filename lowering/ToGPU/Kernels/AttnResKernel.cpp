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

#include "lowering/ToGPU/Kernels/AttnResKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

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

constexpr int64_t kThreads = kAttnResThreads, kWarps = kThreads / 32;

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

namespace {
/// Vectors of `vw` contiguous columns (16-byte loads of bf16 x 8 when D
/// allows), `perThread` of them per thread.
struct AttnResLayout {
  int64_t vw = 8, vectors = 0, perThread = 0;
  explicit AttnResLayout(int64_t D) {
    while (D % vw != 0)
      vw /= 2;
    vectors = D / vw;
    perThread = (vectors + kThreads - 1) / kThreads;
  }
};
} // namespace

LogicalResult verifyAttnResKernelSpec(const AttnResKernelSpec &spec,
                                      std::string &why) {
  if (spec.sources < 1) {
    why = "it needs at least one source";
    return failure();
  }
  if (spec.width < 1 || ShapedType::isDynamic(spec.width)) {
    why = "the hidden width must be static";
    return failure();
  }
  AttnResLayout layout(spec.width);
  if (layout.perThread * layout.vw > 64) {
    why = "hidden size " + std::to_string(spec.width) +
          " exceeds the fused GPU kernel's limit of 16384";
    return failure();
  }
  if (!spec.writeMix && !spec.normWeight) {
    why = "it must store the mix or its norm";
    return failure();
  }
  return success();
}

mlir::gpu::GPUFuncOp emitAttnResKernel(OpBuilder &b, Location loc,
                                       mlir::gpu::GPUModuleOp module,
                                       StringRef name,
                                       const AttnResKernelSpec &spec) {
  const int64_t D = spec.width, nSources = spec.sources;
  AttnResLayout layout(D);
  const int64_t vw = layout.vw, perThread = layout.perThread;
  Type act = spec.act, f32 = b.getF32Type();
  const int64_t rows = ShapedType::isDynamic(spec.tokens)
                           ? ShapedType::kDynamic
                           : spec.tokens * D;
  SmallVector<Type> args;
  for (int64_t i = 0; i < nSources; ++i)
    args.push_back(flatMemRef(act, rows));
  args.push_back(flatMemRef(spec.query, D));
  args.push_back(flatMemRef(spec.norm, D));
  if (spec.writeMix)
    args.push_back(flatMemRef(act, rows));
  if (spec.normWeight) {
    args.push_back(flatMemRef(spec.normWeight, D));
    args.push_back(flatMemRef(act, rows));
  }
  GPUFuncOpAndEmitter k(b, loc, module, name, args,
                        {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value scratch =
      e.sharedBuffer(module, (name + "_scratch").str(), kWarps * 2, f32);
  Value token = e.blockId(mlir::gpu::Dimension::x);
  Value tid = e.threadId(), lane = e.laneId(), warp = e.divu(tid, e.idx(32));
  Value base = e.mul(token, e.idx(D));
  Value zero = e.f32(0.0);
  RowVectors row(e, tid, kThreads, D, vw);
  const int64_t n = perThread * vw; // values per thread
  Value query = body.getArgument(nSources), normW = body.getArgument(nSources + 1);
  SmallVector<Value> nq = row.loadAll(query, e.idx(0)),
                     nw = row.loadAll(normW, e.idx(0));
  for (int64_t j = 0; j < n; ++j)
    nq[j] = e.fmul(nq[j], nw[j]);

  Value m = e.f32(-std::numeric_limits<float>::infinity()), l = zero;
  SmallVector<Value> acc(n, zero);
  for (int64_t i = 0; i < nSources; ++i) {
    SmallVector<Value> v = row.loadAll(body.getArgument(i), base);
    Value ss = zero, dot = zero;
    for (int64_t j = 0; j < n; ++j) {
      ss = e.fadd(ss, e.fmul(v[j], v[j]));
      dot = e.fadd(dot, e.fmul(v[j], nq[j]));
    }
    SmallVector<Value> sums = blockSum(e, scratch, warp, lane, {ss, dot});
    Value rms = math::RsqrtOp::create(
        b, loc, e.fadd(e.fdiv(sums[0], e.f32(double(D))), e.f32(spec.eps)));
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
  int64_t next = nSources + 2;
  if (spec.writeMix)
    row.storeAll(mix, body.getArgument(next++), base);
  if (spec.normWeight) {
    Value w2 = body.getArgument(next), out2 = body.getArgument(next + 1);
    Value total = blockSum(e, scratch, warp, lane, {ss})[0];
    Value r = math::RsqrtOp::create(
        b, loc, e.fadd(e.fdiv(total, e.f32(double(D))), e.f32(spec.normEps)));
    SmallVector<Value> y = row.loadAll(w2, e.idx(0));
    for (int64_t j = 0; j < n; ++j)
      y[j] = e.fmul(e.fmul(mix[j], r), y[j]);
    row.storeAll(y, out2, base);
  }
  return k.func;
}

FailureOr<GpuEntryPlan> planAttnResEntry(AttnResOp op, RmsNormOp norm,
                                         StringRef name) {
  auto outType = cast<RankedTensorType>(op.getOut().getType());
  if (!outType.hasStaticShape())
    return op.emitOpError("the GPU target needs static shapes"), failure();
  AttnResKernelSpec spec;
  spec.width = outType.getShape().back();
  spec.tokens = outType.getNumElements() / spec.width;
  spec.sources = static_cast<int64_t>(op.getSources().size());
  spec.act = outType.getElementType();
  spec.query = cast<RankedTensorType>(op.getQuery().getType()).getElementType();
  spec.norm = cast<RankedTensorType>(op.getNorm().getType()).getElementType();
  spec.eps = op.getEps().convertToDouble();
  if (norm) {
    spec.normWeight =
        cast<RankedTensorType>(norm.getWeight().getType()).getElementType();
    spec.normEps = norm.getEps().convertToDouble();
  }
  std::string why;
  if (failed(verifyAttnResKernelSpec(spec, why)))
    return op.emitOpError(why), failure();
  for (Value v : op.getSources())
    if (cast<RankedTensorType>(v.getType()).getElementType() != spec.act)
      return op.emitOpError("the GPU kernel needs every source in the output "
                            "type ")
                 << spec.act,
             failure();

  Location loc = op.getLoc();
  GpuEntryPlanBuilder pb(op.getContext(), loc, name, ("attn_res_" + name).str());
  OpBuilder b(op.getContext());
  emitAttnResKernel(b, loc, pb.module, "attn_res", spec);

  // Buffers in the kernel's argument order: sources, query, norm, the mix,
  // [the norm weight and output].
  const int64_t D = spec.width;
  Type act = spec.act;
  std::vector<int64_t> shape(outType.getShape().begin(), outType.getShape().end());
  std::vector<uint32_t> launchArgs;
  for (int64_t i = 0; i < spec.sources; ++i)
    launchArgs.push_back(pb.add("source" + std::to_string(i), rt::BufferKind::kInput, act, shape));
  launchArgs.push_back(pb.add("query", rt::BufferKind::kInput, spec.query, {D}));
  launchArgs.push_back(pb.add("norm", rt::BufferKind::kInput, spec.norm, {D}));
  launchArgs.push_back(pb.add("out", rt::BufferKind::kOutput, act, shape));
  if (norm) {
    launchArgs.push_back(pb.add("norm_weight", rt::BufferKind::kInput, spec.normWeight, {D}));
    launchArgs.push_back(pb.add("norm_out", rt::BufferKind::kOutput, act, shape));
  }
  pb.launch("attn_res", {spec.tokens, 1, 1}, kThreads, launchArgs);
  GpuEntryPlan &plan = pb.plan;
  plan.summary = "attn_res: " + std::to_string(spec.sources) + " sources, " +
                 std::to_string(spec.tokens) + " tokens of " + std::to_string(D) +
                 (norm ? ", following rms_norm fused" : "");
  return std::move(plan);
}

} // namespace kimi::gpu

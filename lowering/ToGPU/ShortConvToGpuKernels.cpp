//===- ShortConvToGpuKernels.cpp - kimi.short_conv -> one kernel ----------===//
//
// kimi-gpu-short-conv-kernels: see lowering/Passes.td.
//
// The kernel works on the extended sequence xpad = state ++ x, [B, K-1+T, C]
// (zeros for a missing state), one thread per (b, r, four channels) of its
// rows r < T + K - 1. Threads with r < T write
// out[b, r] = act(sum_j w[c, j] xpad[b, r + j]); the K - 1 threads with
// r >= T write the final state, final[b, r - T] = xpad[b, r].
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/KdaKernelSupport.h"
#include "lowering/ToGPU/KernelLaunchSupport.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUSHORTCONVKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

constexpr int64_t kThreads = 256;

struct ShortConvSpec {
  int64_t channels = 0, taps = 0;
  Type act, weight;
  bool hasState = false, silu = false;
  /// With a following kimi.l2_norm over groups of `normWidth` channels
  /// (one warp's 32 threads of four), fused: 0 for none.
  int64_t normWidth = 0;
  double normEps = 0;

  /// Channels per thread: one 16-byte vector of f32 when they divide.
  int64_t width() const { return channels % 4 == 0 ? 4 : 1; }
  std::string key() const {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << channels << "x" << taps << " " << act << " " << weight << " "
       << hasState << silu << " " << normWidth << " " << normEps;
    return s;
  }
};

/// gpu.func @name(x, weight, [state], out, final_state, B, T): grid
/// ceil(B (T + K - 1) C / (width 256)), 256 threads.
mlir::gpu::GPUFuncOp emitShortConvKernel(OpBuilder &b, Location loc,
                                         mlir::gpu::GPUModuleOp module,
                                         StringRef name, const ShortConvSpec &s) {
  using kimi::gpu::KernelEmitter;
  const int64_t C = s.channels, K = s.taps, vw = s.width(), CV = C / vw;
  Type f32 = b.getF32Type(), index = b.getIndexType();
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(s.act), kimi::gpu::flatMemRef(s.weight, C * K)};
  if (s.hasState)
    args.push_back(dyn(f32));
  args.append({dyn(s.act), dyn(f32), index, index});
  kimi::gpu::GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  unsigned a = 0;
  Value x = body.getArgument(a++), w = body.getArgument(a++);
  Value state = s.hasState ? body.getArgument(a++) : Value();
  Value out = body.getArgument(a++), finalState = body.getArgument(a++);
  Value B = body.getArgument(a++), T = body.getArgument(a++);

  Value rows = e.add(T, e.idx(K - 1)); // of the extended sequence
  Value total = e.mul(e.mul(B, rows), e.idx(CV));
  Value i = e.add(e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(kThreads)),
                  e.threadId());
  auto inRange = scf::IfOp::create(b, loc, e.ult(i, total), false);
  b.setInsertionPointToStart(&inRange.getThenRegion().front());
  Value c0 = e.mul(e.remu(i, e.idx(CV)), e.idx(vw));
  Value rest = e.divu(i, e.idx(CV));
  Value r = e.remu(rest, rows), bi = e.divu(rest, rows);
  auto vecType = [&](Type t) { return VectorType::get({vw}, t); };
  auto loadVec = [&](Value buf, Value at) -> SmallVector<Value> {
    Type t = cast<MemRefType>(buf.getType()).getElementType();
    Value v = vector::LoadOp::create(
        b, loc, vecType(t), buf, ValueRange{at}, false,
        llvm::MaybeAlign(vw * t.getIntOrFloatBitWidth() / 8));
    SmallVector<Value> out;
    for (int64_t l = 0; l < vw; ++l)
      out.push_back(e.toF32(vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{l})));
    return out;
  };
  // Row p of the extended sequence: state rows first (zeros without a
  // state), then x. Both candidates are read at clamped rows and one kept.
  auto xpad = [&](Value p) -> SmallVector<Value> {
    Value fromX = e.ule(e.idx(K - 1), p);
    Value px = e.select(fromX, e.sub(p, e.idx(K - 1)), e.idx(0));
    SmallVector<Value> xv =
        loadVec(x, e.add(e.mul(e.add(e.mul(bi, T), px), e.idx(C)), c0));
    SmallVector<Value> sv(vw, e.f32(0.0));
    if (s.hasState) {
      Value ps = e.minu(p, e.idx(K - 2));
      sv = loadVec(state, e.add(e.mul(e.add(e.mul(bi, e.idx(K - 1)), ps),
                                      e.idx(C)),
                                c0));
    }
    SmallVector<Value> v;
    for (int64_t l = 0; l < vw; ++l)
      v.push_back(e.select(fromX, xv[l], sv[l]));
    return v;
  };
  auto storeVec = [&](ArrayRef<Value> vals, Value buf, Value at) {
    Type t = cast<MemRefType>(buf.getType()).getElementType();
    SmallVector<Value> conv;
    for (Value v : vals)
      conv.push_back(e.fromF32(v, t));
    Value vec = vector::FromElementsOp::create(b, loc, vecType(t), conv);
    vector::StoreOp::create(b, loc, vec, buf, ValueRange{at}, false,
                            llvm::MaybeAlign(vw * t.getIntOrFloatBitWidth() / 8));
  };
  auto isOutput = scf::IfOp::create(b, loc, e.ult(r, T), true);
  {
    // out[b, r] = act(sum_j w[c, j] xpad[r + j]), the taps in order (as
    // the linalg decomposition sums them).
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&isOutput.getThenRegion().front());
    SmallVector<Value> acc(vw, e.f32(0.0));
    for (int64_t j = 0; j < K; ++j) {
      SmallVector<Value> v = xpad(e.add(r, e.idx(j)));
      for (int64_t l = 0; l < vw; ++l) {
        Value wj = e.toF32(e.load(w, e.add(e.mul(e.add(c0, e.idx(l)), e.idx(K)),
                                           e.idx(j))));
        acc[l] = e.fadd(acc[l], e.fmul(v[l], wj));
      }
    }
    if (s.silu)
      for (Value &y : acc)
        y = e.fmul(y, e.fdiv(e.f32(1.0),
                             e.fadd(e.f32(1.0), e.exp(e.fneg(y)))));
    if (s.normWidth) {
      // The fused L2 norm: the warp's 32 threads hold one group (all take
      // this branch: a warp is one row), and the values are rounded to x's
      // type first, as the unfused norm reads them. Sums as the norm
      // kernel takes them: in the thread, then the butterfly.
      Value ss = e.f32(0.0);
      for (Value &y : acc) {
        y = e.toF32(e.fromF32(y, s.act));
        ss = e.fadd(ss, e.fmul(y, y));
      }
      for (int32_t off = 16; off >= 1; off /= 2)
        ss = e.fadd(ss, e.shuffleXor(ss, off));
      Value rs = math::RsqrtOp::create(b, loc, e.fadd(ss, e.f32(s.normEps)));
      for (Value &y : acc)
        y = e.fmul(y, rs);
    }
    storeVec(acc, out, e.add(e.mul(e.add(e.mul(bi, T), r), e.idx(C)), c0));
    // final[b, q] = xpad[T + q] for q < K - 1: the threads r = T + q.
    b.setInsertionPointToStart(&isOutput.getElseRegion().front());
    Value q = e.sub(r, T);
    storeVec(xpad(r), finalState,
             e.add(e.mul(e.add(e.mul(bi, e.idx(K - 1)), q), e.idx(C)), c0));
  }
  return k.func;
}

struct KimiGpuShortConvKernels
    : kimi::impl::KimiGpuShortConvKernelsBase<KimiGpuShortConvKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ShortConvOp> ops;
    module.walk([&](ShortConvOp op) { ops.push_back(op); });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_short_conv");
    for (ShortConvOp op : ops)
      rewrite(kernels, op);
  }

  void rewrite(kimi::gpu::GeneratedKernels &kernels, ShortConvOp op) {
    Location loc = op.getLoc();
    auto xType = cast<RankedTensorType>(op.getX().getType());
    auto wType = cast<RankedTensorType>(op.getWeight().getType());
    ShortConvSpec spec;
    spec.channels = xType.getDimSize(2);
    spec.taps = wType.getDimSize(2);
    spec.act = xType.getElementType();
    spec.weight = wType.getElementType();
    spec.hasState = bool(op.getState());
    spec.silu = op.getSilu();
    auto isFloat = [](Type t) { return t.isF32() || t.isBF16() || t.isF16(); };
    // An L2 norm of the output's heads (`expand_shape` to [B, T, H, D],
    // then kimi.l2_norm, the output's only use), whose heads are one warp's
    // 32 threads of four channels, runs in the kernel.
    tensor::ExpandShapeOp heads;
    L2NormOp norm;
    if (op.getOut().hasOneUse())
      heads = dyn_cast<tensor::ExpandShapeOp>(*op.getOut().getUsers().begin());
    if (heads && heads.getResult().hasOneUse())
      norm = dyn_cast<L2NormOp>(*heads.getResult().getUsers().begin());
    if (norm) {
      RankedTensorType headsType = heads.getResultType();
      int64_t D = headsType.getRank() == 4 ? headsType.getDimSize(3) : 0;
      SmallVector<ReassociationIndices> groups = heads.getReassociationIndices();
      bool fits = D > 0 && !ShapedType::isDynamic(spec.channels) &&
                  spec.channels % 4 == 0 && D == 32 * spec.width() &&
                  spec.channels % D == 0 && groups.size() == 3 &&
                  groups[2] == ReassociationIndices{2, 3} &&
                  norm.getResult().getType() == headsType;
      if (fits) {
        spec.normWidth = D;
        spec.normEps = norm.getEps().convertToDouble();
      } else {
        norm = nullptr;
      }
    }
    std::string why;
    if (ShapedType::isDynamic(spec.channels) || ShapedType::isDynamic(spec.taps))
      why = "channels and taps must be static";
    else if (spec.taps < 2)
      why = "a kernel of one tap has no state";
    else if (!isFloat(spec.act) || !isFloat(spec.weight) ||
             op.getOut().getType().getElementType() != spec.act)
      why = "the kernel reads and writes f32, bf16 or f16 in x's type";
    if (!why.empty()) {
      op.emitRemark() << "kept for kimi-lower-to-linalg (no GPU short-conv "
                         "kernel): "
                      << why;
      return;
    }
    std::string name = "short_conv_" + std::to_string(kernels.size());
    auto fn = kernels.get(spec.key(), [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
      return emitShortConvKernel(mb, loc, m, name, spec);
    });

    OpBuilder b(op);
    SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, op.getX());
    Value B = getValueOrCreateConstantIndexOp(b, loc, sizes[0]);
    Value T = getValueOrCreateConstantIndexOp(b, loc, sizes[1]);
    auto input = [&](Value t) {
      return kimi::gpu::asDynamicBuffer(b, loc, kimi::gpu::flatInputBuffer(b, loc, t));
    };
    SmallVector<Value> args = {input(op.getX()),
                               kimi::gpu::flatInputBuffer(b, loc, op.getWeight())};
    if (spec.hasState)
      args.push_back(input(op.getState()));
    Value out = kimi::gpu::allocFlatBuffer(b, loc, sizes, spec.act);
    RankedTensorType stateType = op.getFinalState().getType();
    SmallVector<OpFoldResult> stateSizes = {
        sizes[0], b.getIndexAttr(spec.taps - 1), b.getIndexAttr(spec.channels)};
    Value finalState = kimi::gpu::allocFlatBuffer(b, loc, stateSizes, b.getF32Type());
    args.append({kimi::gpu::asDynamicBuffer(b, loc, out),
                 kimi::gpu::asDynamicBuffer(b, loc, finalState), B, T});
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    // Threads: B (T + K - 1) C / width.
    Value threads = arith::MulIOp::create(
        b, loc,
        arith::MulIOp::create(b, loc, B,
                              arith::AddIOp::create(b, loc, T, c(spec.taps - 1))),
        c(spec.channels / spec.width()));
    Value blocks = arith::CeilDivUIOp::create(b, loc, threads, c(kThreads));
    mlir::gpu::LaunchFuncOp::create(b, loc, fn,
                                    mlir::gpu::KernelDim3{blocks, c(1), c(1)},
                                    mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)},
                                    Value(), args);
    op.getOut().replaceAllUsesWith(kimi::gpu::tensorOfFlatBuffer(
        b, loc, out, op.getOut().getType(), sizes));
    if (norm) {
      // The heads of `out` are normalised already.
      norm.getResult().replaceAllUsesWith(heads.getResult());
      norm.erase();
    }
    op.getFinalState().replaceAllUsesWith(
        kimi::gpu::tensorOfFlatBuffer(b, loc, finalState, stateType, stateSizes));
    op.erase();
  }
};

} // namespace

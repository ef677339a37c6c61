//===- NormToGpuKernels.cpp - rms_norm, l2_norm, gated_rms_norm -> one kernel -===//
//
// kimi-gpu-norm-kernels: see lowering/Passes.td.
//
// One kernel per norm: a group of 32 to 256 threads per row (the last
// dimension), each thread holding up to 32 of the row's values in
// registers (16-byte loads when the width allows), a butterfly over the
// warp and, for groups of several warps, one round through shared memory.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUNORMKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

constexpr int64_t kThreads = 256;

enum class NormKind { Rms, L2, GatedRms };

struct NormSpec {
  NormKind kind = NormKind::Rms;
  int64_t width = 0; // D
  Type act, weight, gate;
  double eps = 1e-5;

  int64_t vw() const { return width % 4 == 0 ? 4 : 1; }
  /// Threads per row: the fewest (32..256) that hold the row in at most
  /// 32 values each.
  int64_t group() const {
    int64_t g = 32;
    while (g < kThreads && width > g * 32)
      g *= 2;
    return g;
  }
  std::string key() const {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << static_cast<int>(kind) << "_" << width << " " << act << " " << weight
       << " " << gate << " " << eps;
    return s;
  }
};

/// gpu.func @name(x, [gate], [weight], out, rows): grid
/// ceil(rows / (256 / group)), 256 threads.
mlir::gpu::GPUFuncOp emitNormKernel(OpBuilder &b, Location loc,
                                    mlir::gpu::GPUModuleOp module, StringRef name,
                                    const NormSpec &s) {
  using kimi::gpu::KernelEmitter;
  const int64_t D = s.width, vw = s.vw(), G = s.group(), rowsPerBlock = kThreads / G;
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(s.act)};
  if (s.kind == NormKind::GatedRms)
    args.push_back(dyn(s.gate));
  if (s.kind != NormKind::L2)
    args.push_back(kimi::gpu::flatMemRef(s.weight, D));
  args.append({dyn(s.act), b.getIndexType()});
  kimi::gpu::GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  unsigned a = 0;
  Value x = body.getArgument(a++);
  Value gate = s.kind == NormKind::GatedRms ? body.getArgument(a++) : Value();
  Value weight = s.kind != NormKind::L2 ? body.getArgument(a++) : Value();
  Value out = body.getArgument(a++), rows = body.getArgument(a++);
  Type f32 = b.getF32Type();
  // Cross-warp partial sums of groups wider than a warp.
  Value scratch;
  if (G > 32)
    scratch = e.sharedBuffer(module, (name + "_scratch").str(), kThreads / 32, f32);

  Value tid = e.threadId();
  Value t = e.remu(tid, e.idx(G));
  Value row = e.add(e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(rowsPerBlock)),
                    e.divu(tid, e.idx(G)));
  // Rows past the end compute on row 0 and store nothing (every thread
  // takes part in the barrier).
  Value rowValid = e.ult(row, rows);
  Value base = e.mul(e.select(rowValid, row, e.idx(0)), e.idx(D));
  Value zero = e.f32(0.0);
  kimi::gpu::RowVectors slice(e, t, G, D, vw);
  SmallVector<Value> v = slice.loadAll(x, base);
  Value ss = zero;
  for (Value value : v)
    ss = e.fadd(ss, e.fmul(value, value));
  Value width = e.i32(32);
  for (int off = 16; off >= 1; off /= 2) {
    auto sh = mlir::gpu::ShuffleOp::create(b, loc, ss, e.i32(off), width,
                                           mlir::gpu::ShuffleMode::XOR);
    ss = e.fadd(ss, sh.getShuffleResult());
  }
  if (G > 32) {
    // The group's warps are consecutive: sum their partials.
    Value warp = e.divu(tid, e.idx(32));
    auto first = scf::IfOp::create(b, loc, e.eq(e.laneId(), e.idx(0)), false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&first.getThenRegion().front());
      e.store(ss, scratch, warp);
    }
    e.barrier();
    Value firstWarp = e.mul(e.divu(tid, e.idx(G)), e.idx(G / 32));
    ss = zero;
    for (int64_t w = 0; w < G / 32; ++w)
      ss = e.fadd(ss, e.load(scratch, e.add(firstWarp, e.idx(w))));
  }
  Value meanOrSum = s.kind == NormKind::L2 ? ss : e.fdiv(ss, e.f32(double(D)));
  Value r = math::RsqrtOp::create(b, loc, e.fadd(meanOrSum, e.f32(s.eps)));

  auto store = scf::IfOp::create(b, loc, rowValid, false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&store.getThenRegion().front());
  SmallVector<Value> w, gt;
  if (weight)
    w = slice.loadAll(weight, e.idx(0));
  if (gate)
    gt = slice.loadAll(gate, base);
  SmallVector<Value> y;
  for (size_t i = 0; i < v.size(); ++i) {
    Value yi = e.fmul(v[i], r);
    if (s.kind == NormKind::Rms)
      yi = e.fmul(yi, w[i]);
    if (s.kind == NormKind::GatedRms) {
      Value sig = e.fdiv(e.f32(1.0), e.fadd(e.f32(1.0), e.exp(e.fneg(gt[i]))));
      yi = e.fmul(e.fmul(w[i], yi), sig);
    }
    y.push_back(yi);
  }
  slice.storeAll(y, out, base);
  return k.func;
}

struct KimiGpuNormKernels : kimi::impl::KimiGpuNormKernelsBase<KimiGpuNormKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (isa<RmsNormOp, L2NormOp, GatedRmsNormOp>(op))
        ops.push_back(op);
    });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_norm");
    for (Operation *op : ops)
      rewrite(kernels, op);
  }

  void rewrite(kimi::gpu::GeneratedKernels &kernels, Operation *op) {
    Location loc = op->getLoc();
    Value x = op->getOperand(0), gate, weight;
    NormSpec spec;
    auto elementType = [](Value v) {
      return v ? cast<RankedTensorType>(v.getType()).getElementType() : Type();
    };
    if (auto rms = dyn_cast<RmsNormOp>(op)) {
      weight = rms.getWeight();
      spec.eps = rms.getEps().convertToDouble();
    } else if (auto l2 = dyn_cast<L2NormOp>(op)) {
      spec.kind = NormKind::L2;
      spec.eps = l2.getEps().convertToDouble();
    } else {
      auto gated = cast<GatedRmsNormOp>(op);
      spec.kind = NormKind::GatedRms;
      gate = gated.getGate();
      weight = gated.getWeight();
      spec.eps = gated.getEps().convertToDouble();
    }
    auto xType = cast<RankedTensorType>(x.getType());
    auto outType = cast<RankedTensorType>(op->getResult(0).getType());
    spec.width = xType.getShape().back();
    spec.act = xType.getElementType();
    spec.weight = elementType(weight);
    spec.gate = elementType(gate);
    auto isFloat = [](Type t) { return !t || t.isF32() || t.isBF16() || t.isF16(); };
    std::string why;
    if (ShapedType::isDynamic(spec.width))
      why = "the normalised width must be static";
    else if (spec.width > kThreads * 32)
      why = "width " + std::to_string(spec.width) + " exceeds the kernel's 8192";
    else if (!isFloat(spec.act) || !isFloat(spec.weight) || !isFloat(spec.gate) ||
             outType.getElementType() != spec.act ||
             (gate && gate.getType() != xType))
      why = "the kernel reads and writes f32, bf16 or f16 in x's type";
    if (!why.empty()) {
      op->emitRemark() << "kept for kimi-lower-to-linalg (no GPU norm kernel): "
                       << why;
      return;
    }
    std::string name = "norm_" + std::to_string(kernels.size());
    auto fn = kernels.get(spec.key(), [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
      return emitNormKernel(mb, loc, m, name, spec);
    });

    OpBuilder b(op);
    SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, x);
    Value rows = kimi::gpu::rowCount(b, loc, sizes);
    auto input = [&](Value t) {
      return kimi::gpu::asDynamicBuffer(b, loc, kimi::gpu::flatInputBuffer(b, loc, t));
    };
    SmallVector<Value> args = {input(x)};
    if (gate)
      args.push_back(input(gate));
    if (weight)
      args.push_back(kimi::gpu::flatInputBuffer(b, loc, weight));
    Value out = kimi::gpu::allocFlatBuffer(b, loc, sizes, spec.act);
    args.append({kimi::gpu::asDynamicBuffer(b, loc, out), rows});
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    Value blocks =
        arith::CeilDivUIOp::create(b, loc, rows, c(kThreads / spec.group()));
    mlir::gpu::LaunchFuncOp::create(b, loc, fn,
                                    mlir::gpu::KernelDim3{blocks, c(1), c(1)},
                                    mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)},
                                    Value(), args);
    op->getResult(0).replaceAllUsesWith(
        kimi::gpu::tensorOfFlatBuffer(b, loc, out, outType, sizes));
    op->erase();
  }
};

} // namespace

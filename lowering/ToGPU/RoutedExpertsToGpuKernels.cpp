//===- RoutedExpertsToGpuKernels.cpp - kimi.routed_experts -> two kernels -===//
//
// kimi-gpu-routed-experts-kernels: see lowering/Passes.td.
//
// A decode step's routed experts read each selected expert's three
// matrices once: the step's cost is those bytes. Both kernels are built on
// the GEMV core (emitWarpDotPartials: 16-byte loads of f32 experts, 8-byte
// of bf16, a group of chunks in flight per lane):
//   gate_up  block row y = a (token, slot) pair s; each warp takes a row i
//            of the slot's expert and dots both gate[e, i] and up[e, i]
//            with z[t], then stores h[s, i] = act(g, u);
//   down     block (d, t) = an output column of a token; warp w dots
//            down[e_j, d] with h[t, j] for its slots j = w, w + 4, ...
//            (their loads in flight together) and sums them with their
//            routing weights; shared memory adds the four warps' totals.
// So the whole op is two launches, with no fill, no separate activation
// and no separate weighted sum.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "lowering/ToGPU/GemvKernel.h"
#include "lowering/ToGPU/KdaKernelSupport.h"
#include "lowering/ToGPU/KernelLaunchSupport.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUROUTEDEXPERTSKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;
using kimi::gpu::KernelEmitter;
using kimi::gpu::WarpDotRow;
using kimi::gpu::WarpDotVector;

namespace {

constexpr int64_t kThreads = 128;
constexpr int64_t kWarps = kThreads / 32;
/// Rows a warp takes of each of gate and up in gate_up: one, so that a
/// decode step has thousands of warps (several dozen per SM) with their
/// loads in flight; fewer, longer warps left the H200's HBM half idle.
constexpr int64_t kGateUpRows = 1;
/// 16-byte pieces a lane keeps in flight per group of chunks.
constexpr int64_t kPiecesInFlight = 24;
/// The grid's y dimension (one row per (token, slot) pair) is at most this.
constexpr int64_t kMaxGridY = 65535;

struct RoutedExpertsSpec {
  int64_t tokens = 0, topK = 0, experts = 0, inner = 0, width = 0;
  bool situ = false;
  double beta = 0, linearBeta = 0;
  unsigned idBits = 32;
  /// The experts' stored type: f32 or bf16 (read at its size, widened in
  /// registers).
  bool bf16Weights = false;

  Type weightType(OpBuilder &b) const {
    return bf16Weights ? Type(b.getBF16Type()) : Type(b.getF32Type());
  }

  /// Slots each warp of the down kernel reads.
  int64_t slotsPerWarp() const { return (topK + kWarps - 1) / kWarps; }
  std::string key() const {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << tokens << "x" << topK << "_" << experts << "x" << inner << "x" << width
       << "_" << (situ ? "situ" : "silu") << "_" << beta << "_" << linearBeta
       << "_i" << idBits << (bf16Weights ? "_bf16" : "");
    return s;
  }
};

/// The slot's expert: its index from the routing, clamped into [0, E) so
/// that a bad index reads a real expert rather than memory past the
/// weights (kimi.routed_experts leaves such an index undefined).
Value expertOf(KernelEmitter &e, const RoutedExpertsSpec &s, Value ids,
               Value slot) {
  Value id = e.toIndex(e.load(ids, slot));
  return e.minu(id, e.idx(s.experts - 1));
}

/// gpu.func @name(z [T W], ids [T k], gate [E I W], up [E I W], h [T k I]):
/// grid (ceil(I / (4 R)), T k), 128 threads.
mlir::gpu::GPUFuncOp emitGateUpKernel(OpBuilder &b, Location loc,
                                      mlir::gpu::GPUModuleOp module,
                                      StringRef name,
                                      const RoutedExpertsSpec &s) {
  const int64_t T = s.tokens, K = s.topK, E = s.experts, I = s.inner,
                W = s.width, R = kGateUpRows;
  Type f32 = b.getF32Type();
  SmallVector<Type> args = {kimi::gpu::flatMemRef(f32, T * W),
                            kimi::gpu::flatMemRef(b.getIntegerType(s.idBits), T * K),
                            kimi::gpu::flatMemRef(s.weightType(b), E * I * W),
                            kimi::gpu::flatMemRef(s.weightType(b), E * I * W),
                            kimi::gpu::flatMemRef(f32, T * K * I)};
  kimi::gpu::GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value z = body.getArgument(0), ids = body.getArgument(1);
  Value gate = body.getArgument(2), up = body.getArgument(3);
  Value h = body.getArgument(4);

  Value lane = e.laneId(), warp = e.divu(e.threadId(), e.idx(32));
  Value slot = e.blockId(mlir::gpu::Dimension::y);
  Value token = e.divu(slot, e.idx(K));
  Value expertBase = e.mul(expertOf(e, s, ids, slot), e.idx(I));
  Value firstRow = e.mul(
      e.add(e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(kWarps)), warp),
      e.idx(R));
  // Rows past I read row I - 1 and are not stored.
  SmallVector<Value> row(R), valid(R);
  SmallVector<WarpDotRow> dots(2 * R);
  for (int64_t r = 0; r < R; ++r) {
    row[r] = e.add(firstRow, e.idx(r));
    valid[r] = e.ult(row[r], e.idx(I));
    Value base =
        e.mul(e.add(expertBase, e.minu(row[r], e.idx(I - 1))), e.idx(W));
    dots[r] = {gate, base, 0};
    dots[R + r] = {up, base, 0};
  }
  SmallVector<WarpDotVector> x = {{z, e.mul(token, e.idx(W))}};
  SmallVector<Value> partial = kimi::gpu::emitWarpDotPartials(
      e, x, dots, W, kPiecesInFlight / (2 * R + 1));
  for (int64_t r = 0; r < R; ++r) {
    Value g = kimi::gpu::emitWarpTotal(e, partial[r]);
    Value u = kimi::gpu::emitWarpTotal(e, partial[R + r]);
    Value act = s.situ ? lowering::situ(b, loc, g, u, s.beta, s.linearBeta)
                       : lowering::siluGlu(b, loc, g, u);
    auto mine = scf::IfOp::create(
        b, loc, e.andI(e.eq(lane, e.idx(r)), valid[r]), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&mine.getThenRegion().front());
    e.store(act, h, e.add(e.mul(slot, e.idx(I)), row[r]));
  }
  return k.func;
}

/// gpu.func @name(h [T k I], ids [T k], weights [T k], down [E W I],
/// out [T W]): grid (W, T), 128 threads; warp w takes slots w, w + 4, ...
mlir::gpu::GPUFuncOp emitDownKernel(OpBuilder &b, Location loc,
                                    mlir::gpu::GPUModuleOp module,
                                    StringRef name, const RoutedExpertsSpec &s) {
  const int64_t T = s.tokens, K = s.topK, E = s.experts, I = s.inner,
                W = s.width, Q = s.slotsPerWarp();
  Type f32 = b.getF32Type();
  SmallVector<Type> args = {kimi::gpu::flatMemRef(f32, T * K * I),
                            kimi::gpu::flatMemRef(b.getIntegerType(s.idBits), T * K),
                            kimi::gpu::flatMemRef(f32, T * K),
                            kimi::gpu::flatMemRef(s.weightType(b), E * W * I),
                            kimi::gpu::flatMemRef(f32, T * W)};
  kimi::gpu::GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value h = body.getArgument(0), ids = body.getArgument(1);
  Value weights = body.getArgument(2), down = body.getArgument(3);
  Value out = body.getArgument(4);
  Value partials = e.sharedBuffer(module, (name + "_partials").str(), kWarps, f32);

  Value tid = e.threadId(), lane = e.laneId(), warp = e.divu(tid, e.idx(32));
  Value col = e.blockId(mlir::gpu::Dimension::x);
  Value token = e.blockId(mlir::gpu::Dimension::y);
  // This warp's slots j = warp + 4 q, all their loads in flight together;
  // slots past k read slot k - 1 and count zero.
  SmallVector<WarpDotVector> vectors;
  SmallVector<WarpDotRow> dots;
  SmallVector<Value> weight, valid;
  for (int64_t q = 0; q < Q; ++q) {
    Value j = e.add(warp, e.idx(kWarps * q));
    valid.push_back(e.ult(j, e.idx(K)));
    Value slot = e.add(e.mul(token, e.idx(K)), e.minu(j, e.idx(K - 1)));
    Value expertBase = e.mul(expertOf(e, s, ids, slot), e.idx(W));
    weight.push_back(e.load(weights, slot));
    vectors.push_back({h, e.mul(slot, e.idx(I))});
    dots.push_back({down, e.mul(e.add(expertBase, col), e.idx(I)),
                    static_cast<unsigned>(q)});
  }
  SmallVector<Value> partial = kimi::gpu::emitWarpDotPartials(
      e, vectors, dots, I, std::max<int64_t>(1, kPiecesInFlight / (2 * Q)));
  // Per lane: sum over the slots of weight_j * (this lane's share of
  // down[e_j, d] . h[t, j]); a butterfly totals the warp's slots.
  Value acc = e.f32(0.0);
  for (int64_t q = 0; q < Q; ++q) {
    Value lanePart = vector::ReductionOp::create(
        b, loc, vector::CombiningKind::ADD, partial[q]);
    acc = e.fadd(acc, e.select(valid[q], e.fmul(weight[q], lanePart), e.f32(0.0)));
  }
  Value warpTotal = kimi::gpu::emitWarpTotal(e, acc);
  {
    auto first = scf::IfOp::create(b, loc, e.eq(lane, e.idx(0)), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&first.getThenRegion().front());
    e.store(warpTotal, partials, warp);
  }
  e.barrier();
  // Thread 0 adds the warps' totals in warp order.
  auto first = scf::IfOp::create(b, loc, e.eq(tid, e.idx(0)), false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&first.getThenRegion().front());
  Value total = e.load(partials, e.idx(0));
  for (int64_t w = 1; w < kWarps; ++w)
    total = e.fadd(total, e.load(partials, e.idx(w)));
  e.store(total, out, e.add(e.mul(token, e.idx(W)), col));
  return k.func;
}

struct KimiGpuRoutedExpertsKernels
    : kimi::impl::KimiGpuRoutedExpertsKernelsBase<KimiGpuRoutedExpertsKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<RoutedExpertsOp> ops;
    module.walk([&](RoutedExpertsOp op) { ops.push_back(op); });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_routed_experts");
    for (RoutedExpertsOp op : ops)
      rewrite(kernels, op);
  }

  /// The op's spec, or why the kernels do not take it (empty `why` with
  /// no spec: more tokens than max-tokens, or a dynamic count — the sorted
  /// products' domain, not an error).
  std::optional<RoutedExpertsSpec> specOf(RoutedExpertsOp op, std::string &why) {
    auto xType = cast<RankedTensorType>(op.getX().getType());
    auto wType = cast<RankedTensorType>(op.getWeights().getType());
    auto gType = cast<RankedTensorType>(op.getGateProj().getType());
    auto dType = cast<RankedTensorType>(op.getDownProj().getType());
    if (!xType.hasStaticShape() || !wType.hasStaticShape())
      return std::nullopt;
    RoutedExpertsSpec s;
    s.tokens = xType.getNumElements() / xType.getShape().back();
    if (s.tokens > maxTokens)
      return std::nullopt;
    s.width = xType.getShape().back();
    s.topK = wType.getShape().back();
    s.experts = gType.getDimSize(0);
    s.inner = gType.getDimSize(1);
    s.situ = op.getActivation() == GluActivation::situ;
    if (s.situ) {
      s.beta = op.getBetaAttr().getValueAsDouble();
      s.linearBeta = op.getLinearBetaAttr().getValueAsDouble();
    }
    s.idBits = op.getIndices().getType().getElementType().getIntOrFloatBitWidth();
    auto elementOf = [](Value v) {
      return cast<ShapedType>(v.getType()).getElementType();
    };
    auto isF32 = [&](Value v) { return elementOf(v).isF32(); };
    Type stored = elementOf(op.getGateProj());
    s.bf16Weights = stored.isBF16();
    if (!op.getScales().empty())
      why = "MXFP4 experts (scale operands) are not read by the kernels";
    else if (!gType.hasStaticShape() || !dType.hasStaticShape())
      why = "the expert weights must have static shapes";
    else if (!(stored.isF32() || stored.isBF16())) // the op: one type for all
      why = "the expert weights must be f32 or bf16";
    else if (!isF32(op.getX()) || !isF32(op.getOut()))
      why = "the tokens and the result must be f32";
    else if (s.width % 4 != 0 || s.inner % 4 != 0)
      why = "the hidden width " + std::to_string(s.width) + " and the inner "
            "size " + std::to_string(s.inner) +
            " must be multiples of 4 (4-element loads)";
    else if (s.tokens * s.topK > kMaxGridY)
      why = std::to_string(s.tokens * s.topK) +
            " (token, slot) pairs exceed the grid's " + std::to_string(kMaxGridY);
    if (!why.empty())
      return std::nullopt;
    return s;
  }

  void rewrite(kimi::gpu::GeneratedKernels &kernels, RoutedExpertsOp op) {
    std::string why;
    std::optional<RoutedExpertsSpec> spec = specOf(op, why);
    if (!spec) {
      if (!why.empty())
        op.emitRemark()
            << "kept for kimi-lower-to-linalg (no GPU routed-experts kernels): "
            << why;
      return;
    }
    const RoutedExpertsSpec &s = *spec;
    Location loc = op.getLoc();
    std::string base = "routed_experts_" + std::to_string(kernels.size() / 2);
    auto gateUp = kernels.get(s.key() + "_gate_up", [&](OpBuilder &mb,
                                                       mlir::gpu::GPUModuleOp m) {
      return emitGateUpKernel(mb, loc, m, base + "_gate_up", s);
    });
    auto down = kernels.get(s.key() + "_down", [&](OpBuilder &mb,
                                                  mlir::gpu::GPUModuleOp m) {
      return emitDownKernel(mb, loc, m, base + "_down", s);
    });

    OpBuilder b(op);
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    Type f32 = b.getF32Type();
    Value z = kimi::gpu::flatInputBuffer(b, loc, op.getX());
    Value ids = kimi::gpu::flatInputBuffer(b, loc, op.getIndices());
    Value weights = kimi::gpu::flatInputBuffer(b, loc, op.getWeights());
    Value gate = kimi::gpu::flatInputBuffer(b, loc, op.getGateProj());
    Value up = kimi::gpu::flatInputBuffer(b, loc, op.getUpProj());
    Value downProj = kimi::gpu::flatInputBuffer(b, loc, op.getDownProj());
    Value h = kimi::gpu::allocFlatBuffer(
        b, loc, {b.getIndexAttr(s.tokens * s.topK * s.inner)}, f32);
    SmallVector<OpFoldResult> outSizes =
        tensor::getMixedSizes(b, loc, op.getX());
    Value out = kimi::gpu::allocFlatBuffer(b, loc, outSizes, f32);
    const int64_t gateUpRowsPerBlock = kWarps * kGateUpRows;
    mlir::gpu::LaunchFuncOp::create(
        b, loc, gateUp,
        mlir::gpu::KernelDim3{
            c((s.inner + gateUpRowsPerBlock - 1) / gateUpRowsPerBlock),
            c(s.tokens * s.topK), c(1)},
        mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)}, Value(),
        ValueRange{z, ids, gate, up, h});
    mlir::gpu::LaunchFuncOp::create(
        b, loc, down,
        mlir::gpu::KernelDim3{c(s.width), c(s.tokens), c(1)},
        mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)}, Value(),
        ValueRange{h, ids, weights, downProj, out});
    op.getOut().replaceAllUsesWith(kimi::gpu::tensorOfFlatBuffer(
        b, loc, out, op.getOut().getType(), outSizes));
    op.erase();
  }
};

} // namespace

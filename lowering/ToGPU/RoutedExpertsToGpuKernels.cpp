//===- RoutedExpertsToGpuKernels.cpp - kimi.routed_experts -> two kernels -===//
//
// kimi-gpu-routed-experts-kernels: see lowering/Passes.td.
//
// A decode step's routed experts read each selected expert's three
// matrices once: the step's cost is those bytes. Both kernels are built on
// the GEMV core (emitWarpDotPartials: 16-byte loads, a group of chunks in
// flight per lane):
//   gate_up  block row y = a (token, slot) pair s; each warp takes R rows i
//            of the slot's expert and dots both gate[e, i] and up[e, i]
//            with z[t], then stores h[s, i] = act(g, u);
//   down     block row y = a token t; each warp takes R output columns d
//            and, for the slots in steps of U, dots down[e_j, d] with
//            h[t, j], adding each with its routing weight into a per-lane
//            sum that one butterfly totals at the end.
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
/// Rows a warp takes of each of gate and up (gate_up), and output columns
/// a warp takes (down): the largest grids that keep every SM busy at K3's
/// and k3-mini's sizes.
constexpr int64_t kGateUpRows = 2;
constexpr int64_t kDownRows = 1;
/// 16-byte pieces a lane keeps in flight per group of chunks.
constexpr int64_t kPiecesInFlight = 24;
/// The most slots the down kernel reads together.
constexpr int64_t kMaxSlotsPerStep = 4;
/// The grid's y dimension (one row per (token, slot) pair) is at most this.
constexpr int64_t kMaxGridY = 65535;

struct RoutedExpertsSpec {
  int64_t tokens = 0, topK = 0, experts = 0, inner = 0, width = 0;
  bool situ = false;
  double beta = 0, linearBeta = 0;
  unsigned idBits = 32;

  /// Slots the down kernel reads per step: the largest divisor of k up to
  /// kMaxSlotsPerStep.
  int64_t slotsPerStep() const {
    for (int64_t u = std::min(topK, kMaxSlotsPerStep); u > 1; --u)
      if (topK % u == 0)
        return u;
    return 1;
  }
  std::string key() const {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << tokens << "x" << topK << "_" << experts << "x" << inner << "x" << width
       << "_" << (situ ? "situ" : "silu") << "_" << beta << "_" << linearBeta
       << "_i" << idBits;
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
                            kimi::gpu::flatMemRef(f32, E * I * W),
                            kimi::gpu::flatMemRef(f32, E * I * W),
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
/// out [T W]): grid (ceil(W / (4 R)), T), 128 threads.
mlir::gpu::GPUFuncOp emitDownKernel(OpBuilder &b, Location loc,
                                    mlir::gpu::GPUModuleOp module,
                                    StringRef name, const RoutedExpertsSpec &s) {
  const int64_t T = s.tokens, K = s.topK, E = s.experts, I = s.inner,
                W = s.width, R = kDownRows, U = s.slotsPerStep();
  Type f32 = b.getF32Type();
  SmallVector<Type> args = {kimi::gpu::flatMemRef(f32, T * K * I),
                            kimi::gpu::flatMemRef(b.getIntegerType(s.idBits), T * K),
                            kimi::gpu::flatMemRef(f32, T * K),
                            kimi::gpu::flatMemRef(f32, E * W * I),
                            kimi::gpu::flatMemRef(f32, T * W)};
  kimi::gpu::GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value h = body.getArgument(0), ids = body.getArgument(1);
  Value weights = body.getArgument(2), down = body.getArgument(3);
  Value out = body.getArgument(4);

  Value lane = e.laneId(), warp = e.divu(e.threadId(), e.idx(32));
  Value token = e.blockId(mlir::gpu::Dimension::y);
  Value firstCol = e.mul(
      e.add(e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(kWarps)), warp),
      e.idx(R));
  SmallVector<Value> col(R), valid(R), colBase(R);
  for (int64_t r = 0; r < R; ++r) {
    col[r] = e.add(firstCol, e.idx(r));
    valid[r] = e.ult(col[r], e.idx(W));
    colBase[r] = e.mul(e.minu(col[r], e.idx(W - 1)), e.idx(I));
  }

  // Per lane: sum over the slots of weight_j * (this lane's share of
  // down[e_j, d] . h[t, j]); the butterfly after the loop totals it.
  SmallVector<Value> init(R, e.f32(0.0));
  auto steps = scf::ForOp::create(b, loc, e.idx(0), e.idx(K / U), e.idx(1), init);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(steps.getBody());
    SmallVector<Value> acc(steps.getRegionIterArgs().begin(),
                           steps.getRegionIterArgs().end());
    Value firstSlot = e.add(e.mul(token, e.idx(K)),
                            e.mul(steps.getInductionVar(), e.idx(U)));
    SmallVector<WarpDotVector> vectors;
    SmallVector<WarpDotRow> dots;
    SmallVector<Value> weight;
    for (int64_t u = 0; u < U; ++u) {
      Value slot = e.add(firstSlot, e.idx(u));
      Value expertBase = e.mul(expertOf(e, s, ids, slot), e.idx(W * I));
      weight.push_back(e.load(weights, slot));
      vectors.push_back({h, e.mul(slot, e.idx(I))});
      for (int64_t r = 0; r < R; ++r)
        dots.push_back({down, e.add(expertBase, colBase[r]),
                        static_cast<unsigned>(u)});
    }
    SmallVector<Value> partial = kimi::gpu::emitWarpDotPartials(
        e, vectors, dots, I, std::max<int64_t>(1, kPiecesInFlight / (U * (R + 1))));
    for (int64_t u = 0; u < U; ++u)
      for (int64_t r = 0; r < R; ++r) {
        Value lanePart = vector::ReductionOp::create(
            b, loc, vector::CombiningKind::ADD, partial[u * R + r]);
        acc[r] = e.fadd(acc[r], e.fmul(weight[u], lanePart));
      }
    scf::YieldOp::create(b, loc, acc);
  }
  for (int64_t r = 0; r < R; ++r) {
    Value total = kimi::gpu::emitWarpTotal(e, steps.getResult(r));
    auto mine = scf::IfOp::create(
        b, loc, e.andI(e.eq(lane, e.idx(r)), valid[r]), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&mine.getThenRegion().front());
    e.store(total, out, e.add(e.mul(token, e.idx(W)), col[r]));
  }
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
    auto isF32 = [](Value v) {
      return cast<ShapedType>(v.getType()).getElementType().isF32();
    };
    if (!op.getScales().empty())
      why = "MXFP4 experts (scale operands) are not read by the kernels";
    else if (!gType.hasStaticShape() || !dType.hasStaticShape())
      why = "the expert weights must have static shapes";
    else if (!isF32(op.getGateProj()) || !isF32(op.getUpProj()) ||
             !isF32(op.getDownProj()))
      why = "the expert weights must be f32 (the GPU model's weight type)";
    else if (!isF32(op.getX()) || !isF32(op.getOut()))
      why = "the tokens and the result must be f32";
    else if (s.width % 4 != 0 || s.inner % 4 != 0)
      why = "the hidden width " + std::to_string(s.width) + " and the inner "
            "size " + std::to_string(s.inner) +
            " must be multiples of 4 (16-byte loads)";
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
    const int64_t downColsPerBlock = kWarps * kDownRows;
    mlir::gpu::LaunchFuncOp::create(
        b, loc, gateUp,
        mlir::gpu::KernelDim3{
            c((s.inner + gateUpRowsPerBlock - 1) / gateUpRowsPerBlock),
            c(s.tokens * s.topK), c(1)},
        mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)}, Value(),
        ValueRange{z, ids, gate, up, h});
    mlir::gpu::LaunchFuncOp::create(
        b, loc, down,
        mlir::gpu::KernelDim3{
            c((s.width + downColsPerBlock - 1) / downColsPerBlock),
            c(s.tokens), c(1)},
        mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)}, Value(),
        ValueRange{h, ids, weights, downProj, out});
    op.getOut().replaceAllUsesWith(kimi::gpu::tensorOfFlatBuffer(
        b, loc, out, op.getOut().getType(), outSizes));
    op.erase();
  }
};

} // namespace

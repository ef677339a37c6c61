//===- RoutedExpertsKernel.cpp - a step's routed experts as two kernels --===//
//
// A decode step's routed experts read each selected expert's three
// matrices once: the step's cost is those bytes. Both kernels are built on
// the GEMV core (emitWarpDotPartials: 16-byte loads of f32 experts, 8-byte
// of bf16, 4-byte words of 8 MXFP4 codes with their block's scale byte; a
// group of chunks in flight per lane):
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

#include "lowering/ToGPU/Kernels/RoutedExpertsKernel.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "lowering/ToGPU/Kernels/GemvKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>

using namespace mlir;
using namespace kimi;

namespace kimi::gpu {

namespace {

constexpr int64_t kThreads = kRoutedExpertsThreads;
constexpr int64_t kWarps = kThreads / 32;
/// Rows a warp takes of each of gate and up in gate_up: one, so that a
/// decode step has thousands of warps (several dozen per SM) with their
/// loads in flight; fewer, longer warps left the H200's HBM half idle.
constexpr int64_t kGateUpRows = 1;
/// 16-byte pieces a lane keeps in flight per group of chunks.
constexpr int64_t kPiecesInFlight = 24;
/// The grid's y dimension (one row per (token, slot) pair) is at most this.
constexpr int64_t kMaxGridY = 65535;

} // namespace

Type RoutedExpertsSpec::weightType(OpBuilder &b) const {
  if (mxfp4)
    return b.getI8Type();
  return bf16Weights ? Type(b.getBF16Type()) : Type(b.getF32Type());
}

Type RoutedExpertsSpec::tokenType(OpBuilder &b) const {
  return bf16Tokens ? Type(b.getBF16Type()) : Type(b.getF32Type());
}

int64_t RoutedExpertsSpec::slotsPerWarp() const {
  return (topK + kWarps - 1) / kWarps;
}

std::string RoutedExpertsSpec::key() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << tokens << "x" << topK << "_" << experts << "x" << inner << "x" << width
     << "_" << (situ ? "situ" : "silu") << "_" << beta << "_" << linearBeta
     << "_i" << idBits << (mxfp4 ? "_mxfp4" : bf16Weights ? "_bf16" : "")
     << (bf16Tokens ? "_x16" : "");
  return s;
}

std::array<int64_t, 3> routedGateUpGrid(const RoutedExpertsSpec &s) {
  const int64_t rowsPerBlock = kWarps * kGateUpRows;
  return {(s.inner + rowsPerBlock - 1) / rowsPerBlock, s.tokens * s.topK, 1};
}

std::array<int64_t, 3> routedDownGrid(const RoutedExpertsSpec &s) {
  return {s.width, s.tokens, 1};
}

namespace {

/// A table's kernel arguments: the weights, and for MXFP4 its scales.
void addTable(OpBuilder &b, const RoutedExpertsSpec &s,
              SmallVectorImpl<Type> &args, int64_t values) {
  args.push_back(flatMemRef(s.weightType(b), s.weightElements(values)));
  if (s.mxfp4)
    args.push_back(flatMemRef(b.getI8Type(), values / 32));
}

/// The slot's expert: its index from the routing, clamped into [0, E) so
/// that a bad index reads a real expert rather than memory past the
/// weights (kimi.routed_experts leaves such an index undefined).
Value expertOf(KernelEmitter &e, const RoutedExpertsSpec &s, Value ids,
               Value slot) {
  Value id = e.toIndex(e.load(ids, slot));
  return e.minu(id, e.idx(s.experts - 1));
}

} // namespace

/// gpu.func @name(z [T W], ids [T k], gate [E I W], up [E I W], h [T k I]):
/// grid (ceil(I / (4 R)), T k), 128 threads. MXFP4 tables are two buffers
/// each, codes then scales (gate, gate scales, up, up scales).
mlir::gpu::GPUFuncOp emitRoutedGateUpKernel(OpBuilder &b, Location loc,
                                            mlir::gpu::GPUModuleOp module,
                                            StringRef name,
                                            const RoutedExpertsSpec &s) {
  const int64_t T = s.tokens, K = s.topK, E = s.experts, I = s.inner,
                W = s.width, R = kGateUpRows;
  Type f32 = b.getF32Type();
  SmallVector<Type> args = {flatMemRef(s.tokenType(b), T * W),
                            flatMemRef(b.getIntegerType(s.idBits), T * K)};
  addTable(b, s, args, E * I * W);
  addTable(b, s, args, E * I * W);
  args.push_back(flatMemRef(f32, T * K * I));
  GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value z = body.getArgument(0), ids = body.getArgument(1);
  const unsigned perTable = s.mxfp4 ? 2 : 1;
  Value gate = body.getArgument(2), up = body.getArgument(2 + perTable);
  Value gateScales = s.mxfp4 ? body.getArgument(3) : Value();
  Value upScales = s.mxfp4 ? body.getArgument(5) : Value();
  Value h = body.getArgument(2 + 2 * perTable);

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
    dots[r] = {gate, base, 0, gateScales};
    dots[R + r] = {up, base, 0, upScales};
  }
  SmallVector<WarpDotVector> x = {{z, e.mul(token, e.idx(W))}};
  SmallVector<Value> partial = emitWarpDotPartials(
      e, x, dots, W, kPiecesInFlight / (2 * R + 1));
  for (int64_t r = 0; r < R; ++r) {
    Value g = emitWarpTotal(e, partial[r]);
    Value u = emitWarpTotal(e, partial[R + r]);
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
/// An MXFP4 down table is its codes, then its scales.
mlir::gpu::GPUFuncOp emitRoutedDownKernel(OpBuilder &b, Location loc,
                                          mlir::gpu::GPUModuleOp module,
                                          StringRef name,
                                          const RoutedExpertsSpec &s) {
  const int64_t T = s.tokens, K = s.topK, E = s.experts, I = s.inner,
                W = s.width, Q = s.slotsPerWarp();
  Type f32 = b.getF32Type();
  SmallVector<Type> args = {flatMemRef(f32, T * K * I),
                            flatMemRef(b.getIntegerType(s.idBits), T * K),
                            flatMemRef(f32, T * K)};
  addTable(b, s, args, E * W * I);
  args.push_back(flatMemRef(s.tokenType(b), T * W));
  GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value h = body.getArgument(0), ids = body.getArgument(1);
  Value weights = body.getArgument(2), down = body.getArgument(3);
  Value downScales = s.mxfp4 ? body.getArgument(4) : Value();
  Value out = body.getArgument(s.mxfp4 ? 5 : 4);
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
                    static_cast<unsigned>(q), downScales});
  }
  SmallVector<Value> partial = emitWarpDotPartials(
      e, vectors, dots, I, std::max<int64_t>(1, kPiecesInFlight / (2 * Q)));
  // Per lane: sum over the slots of weight_j * (this lane's share of
  // down[e_j, d] . h[t, j]); a butterfly totals the warp's slots.
  Value acc = e.f32(0.0);
  for (int64_t q = 0; q < Q; ++q) {
    Value lanePart = vector::ReductionOp::create(
        b, loc, vector::CombiningKind::ADD, partial[q]);
    acc = e.fadd(acc, e.select(valid[q], e.fmul(weight[q], lanePart), e.f32(0.0)));
  }
  Value warpTotal = emitWarpTotal(e, acc);
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
  e.store(e.fromF32(total, s.tokenType(b)), out,
          e.add(e.mul(token, e.idx(W)), col));
  return k.func;
}


std::optional<RoutedExpertsSpec> routedExpertsSpec(RoutedExpertsOp op,
                                                   int64_t maxTokens,
                                                   std::string &why) {
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
  // f32 tokens, or bf16 (bf16 activations); the result's type is theirs.
  Type tokens = elementOf(op.getX());
  s.bf16Tokens = tokens.isBF16();
  Type stored = elementOf(op.getGateProj());
  s.bf16Weights = stored.isBF16();
  // The verifier: f4E2M1FN tables with scales, last dimensions multiples
  // of 32 (what the MXFP4 core needs).
  s.mxfp4 = !op.getScales().empty();
  if (!gType.hasStaticShape() || !dType.hasStaticShape())
    why = "the expert weights must have static shapes";
  else if (!(stored.isF32() || stored.isBF16() || s.mxfp4)) // one type for all
    why = "the expert weights must be f32, bf16 or MXFP4";
  else if (!(tokens.isF32() || tokens.isBF16()) ||
           elementOf(op.getOut()) != tokens)
    why = "the tokens must be f32 or bf16, and the result of their type";
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

FailureOr<GpuEntryPlan> planRoutedExpertsEntry(RoutedExpertsOp op,
                                               StringRef name) {
  std::string why;
  std::optional<RoutedExpertsSpec> spec =
      routedExpertsSpec(op, std::numeric_limits<int64_t>::max(), why);
  if (!spec)
    return op.emitOpError(why.empty() ? "the GPU target needs static shapes"
                                      : why),
           failure();
  if (spec->idBits != 32)
    return op.emitOpError("the routed-experts GPU entry takes i32 indices"),
           failure();
  const RoutedExpertsSpec &s = *spec;
  Location loc = op.getLoc();
  GpuEntryPlanBuilder pb(op.getContext(), loc, name,
                         ("routed_experts_" + name).str());
  OpBuilder b(op.getContext());
  emitRoutedGateUpKernel(b, loc, pb.module, "gate_up", s);
  emitRoutedDownKernel(b, loc, pb.module, "down", s);

  Type f32 = b.getF32Type(), i32 = b.getI32Type(), u8 = b.getI8Type();
  const int64_t T = s.tokens, K = s.topK, E = s.experts, I = s.inner,
                W = s.width;
  using rt::BufferKind;
  auto table = [&](const std::string &tableName, int64_t rows,
                   int64_t cols) -> std::vector<uint32_t> {
    if (!s.mxfp4)
      return {pb.add(tableName, BufferKind::kInput, s.weightType(b),
                     {E, rows, cols})};
    return {pb.add(tableName + "_codes", BufferKind::kInput, u8,
                   {E, rows, cols / 2}),
            pb.add(tableName + "_scales", BufferKind::kInput, u8,
                   {E, rows, cols / 32})};
  };
  uint32_t x = pb.add("x", BufferKind::kInput, s.tokenType(b), {T, W});
  uint32_t weights = pb.add("weights", BufferKind::kInput, f32, {T, K});
  uint32_t ids = pb.add("ids", BufferKind::kInput, i32, {T, K});
  std::vector<uint32_t> gate = table("gate", I, W), up = table("up", I, W),
                        down = table("down", W, I);
  uint32_t out = pb.add("out", BufferKind::kOutput, s.tokenType(b), {T, W});
  uint32_t h = pb.add("h", BufferKind::kTemporary, f32, {T, K, I});
  pb.launch("gate_up", routedGateUpGrid(s), kThreads,
            routedGateUpArgs<uint32_t>(x, ids, gate, up, h));
  pb.launch("down", routedDownGrid(s), kThreads,
            routedDownArgs<uint32_t>(h, ids, weights, down, out));
  GpuEntryPlan &plan = pb.plan;
  plan.summary = "routed_experts: " + std::to_string(T) + " tokens, top " +
                 std::to_string(K) + " of " + std::to_string(E) + " experts " +
                 std::to_string(I) + " x " + std::to_string(W) +
                 (s.mxfp4 ? ", MXFP4" : s.bf16Weights ? ", bf16" : ", f32");
  return std::move(plan);
}

} // namespace kimi::gpu

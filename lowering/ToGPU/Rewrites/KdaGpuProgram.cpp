//===- KdaGpuProgram.cpp - a kimi.kda op as a GPU entry --------------------===//

#include "lowering/ToGPU/Rewrites/KdaGpuProgram.h"
#include "lowering/ToGPU/Kernels/KdaKernels.h"

#include "dialects/Kimi/KimiAttrs.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>
#include <cstring>

using namespace mlir;

namespace kimi::gpu {
namespace {

rt::DType dtypeOf(Type t) {
  if (t.isF32())
    return rt::DType::kF32;
  if (t.isBF16())
    return rt::DType::kBF16;
  if (t.isF16())
    return rt::DType::kF16;
  if (t.isInteger(32))
    return rt::DType::kI32;
  if (t.isInteger(8)) // bytes: MXFP4 codes and E8M0 scales
    return rt::DType::kU8;
  return rt::DType::kInvalid;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

} // namespace

GpuEntryPlanBuilder::GpuEntryPlanBuilder(MLIRContext *ctx, Location loc,
                                         StringRef entryName, StringRef moduleName) {
  ctx->loadDialect<arith::ArithDialect, mlir::gpu::GPUDialect, LLVM::LLVMDialect,
                   math::MathDialect, memref::MemRefDialect, nvgpu::NVGPUDialect,
                   NVVM::NVVMDialect, scf::SCFDialect, vector::VectorDialect>();
  OpBuilder b(ctx);
  plan.name = entryName.str();
  plan.kernels = ModuleOp::create(loc);
  (*plan.kernels)->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(),
                           b.getUnitAttr());
  b.setInsertionPointToEnd(plan.kernels->getBody());
  module = mlir::gpu::GPUModuleOp::create(b, loc, moduleName);
}

uint32_t GpuEntryPlanBuilder::add(std::string name, rt::BufferKind kind, Type type,
                                  std::vector<int64_t> shape) {
  rt::BufferSpec b;
  b.name = std::move(name);
  b.kind = kind;
  b.dtype = dtypeOf(type);
  b.shape = std::move(shape);
  plan.buffers.push_back(std::move(b));
  return static_cast<uint32_t>(plan.buffers.size() - 1);
}

KernelSequenceSink::~KernelSequenceSink() = default;

uint32_t GpuEntryPlanBuilder::sequenceOffsets(int64_t sequences, int64_t length) {
  uint32_t at = add("cu_seqlens", rt::BufferKind::kConstant,
                    IntegerType::get(module.getContext(), 32), {sequences + 1});
  std::vector<int32_t> cu(sequences + 1);
  for (int64_t i = 0; i <= sequences; ++i)
    cu[i] = static_cast<int32_t>(i * length);
  auto &data = plan.buffers.back().data;
  data.resize(cu.size() * 4);
  std::memcpy(data.data(), cu.data(), data.size());
  return at;
}

void GpuEntryPlanBuilder::launch(StringRef function, std::array<int64_t, 3> grid,
                                 int64_t threads, std::vector<uint32_t> args) {
  rt::LaunchSpec l;
  l.function = function.str();
  for (int d = 0; d < 3; ++d)
    l.grid[d] = static_cast<uint32_t>(grid[d]);
  l.block = {static_cast<uint32_t>(threads), 1, 1};
  l.args = std::move(args);
  plan.launches.push_back(std::move(l));
}

int64_t chooseKdaValueSplit(int64_t sequences, int64_t heads, int64_t chunks,
                            int64_t dv, const GpuDeviceModel &device) {
  // Measured on the H200 (docs/perf/kda.md): when the recurrences (times
  // the segments the sequence split may add) reach about one per SM, the
  // whole-state block is fastest; with fewer, two blocks of half the
  // columns each beat both one block and four.
  const int64_t recurrences = sequences * heads * std::max<int64_t>(1, chunks / 512);
  if (10 * recurrences >= 7 * int64_t(device.smCount) || dv % 32 != 0)
    return 1;
  return 2;
}

int64_t chooseKdaSegments(int64_t sequences, int64_t heads, int64_t chunks,
                          const GpuDeviceModel &device) {
  // Measured on the H200: split until about two recurrence blocks per SM
  // run, keeping segments of at least 512 chunks (8K tokens) so that the
  // summaries and the fold stay amortised.
  const int64_t blocks = std::max<int64_t>(1, sequences * heads);
  int64_t p = (2 * int64_t(device.smCount) + blocks / 2) / blocks;
  p = std::min(p, chunks / 512);
  return std::max<int64_t>(1, std::min<int64_t>(p, 64));
}

FailureOr<KdaKernelSequence> buildKdaKernels(KdaOp op, KernelSequenceSink &sink,
                                             const KdaPlanOptions &options) {
  auto q = cast<RankedTensorType>(op.getQ().getType());
  auto v = cast<RankedTensorType>(op.getV().getType());
  auto g = cast<RankedTensorType>(op.getG().getType());
  if (!q.hasStaticShape() || !v.hasStaticShape())
    return op.emitOpError("the GPU target needs static shapes"), failure();
  DecayAttr decay = op.getDecayAttr();
  if (!decay)
    return op.emitOpError("has no #kimi.decay: run kimi-prove-decay-bounds and "
                          "kimi-chunk-kda before the GPU target"),
           failure();
  // The kernels' chunk may be shorter than the one the proof chose (a
  // shorter chunk decays less within it), never longer.
  if (decay.getChunk() < kKdaChunk)
    return op.emitOpError("#kimi.decay chunks of ")
               << decay.getChunk() << " tokens; the GPU kernels' chunk is "
               << kKdaChunk,
           failure();
  const int64_t B = q.getDimSize(0), T = q.getDimSize(1), H = q.getDimSize(2);
  const int64_t DK = q.getDimSize(3), DV = v.getDimSize(3);
  Location loc = op.getLoc();
  OpBuilder b(op.getContext());
  Type act = q.getElementType(), gate = g.getElementType();
  double scale = op.getScale().convertToDouble();
  // A kimi.kda_gate producing g is fused: the kernels read its input z.
  KdaGateFusion fusion;
  auto gateOp = op.getG().getDefiningOp<KdaGateOp>();
  RankedTensorType zType;
  if (gateOp) {
    zType = cast<RankedTensorType>(gateOp.getZ().getType());
    fusion.form = gateOp.getForm() == GateForm::lower_bound
                      ? KdaGateFusion::Form::LowerBound
                      : KdaGateFusion::Form::Softplus;
    if (gateOp.getLowerAttr())
      fusion.lower = gateOp.getLowerAttr().getValueAsDouble();
    gate = zType.getElementType();
    for (Value w : {gateOp.getALog(), gateOp.getDtBias()})
      if (!cast<RankedTensorType>(w.getType()).getElementType().isF32())
        return gateOp.emitOpError("fused into the GPU KDA kernels needs f32 "
                                  "'a_log' and 'dt_bias'"),
               failure();
  }
  auto addGateBuffers = [&]() -> std::vector<uint32_t> {
    if (!gateOp)
      return {};
    return {sink.input("a_log", gateOp.getALog(), b.getF32Type(), {H}),
            sink.input("dt_bias", gateOp.getDtBias(), b.getF32Type(), {H, DK})};
  };
  // The gate's input: z of a fused kimi.kda_gate, else g.
  const char *gName = gateOp ? "z" : "g";
  Value gOperand = gateOp ? gateOp.getZ() : op.getG();
  std::string why;
  auto asVec = [](ArrayRef<int64_t> s) { return std::vector<int64_t>(s.begin(), s.end()); };

  bool decode = T == 1 && !op.getCuSeqlens();
  if (decode) {
    Type stateElt = cast<RankedTensorType>(op.getFinalState().getType()).getElementType();
    KdaDecodeShape s{B, H, DK, DV, act, gate, scale, fusion, stateElt};
    s.columnGroups = chooseKdaDecodeColumnGroups(B, H, DV, options.device.smCount);
    if (failed(verifyKdaDecodeShape(s, why)))
      return op.emitOpError("cannot run on the GPU: ") << why, failure();
    if (!op.getInitialState())
      return op.emitOpError("a one-token (decode) kimi.kda needs "
                            "'initial_state' on the GPU"),
             failure();
    emitKdaDecodeKernel(b, loc, sink.kernelModule(), s);
    uint32_t iq = sink.input("q", op.getQ(), act, asVec(q.getShape()));
    uint32_t ik = sink.input("k", op.getK(), act, asVec(q.getShape()));
    uint32_t iv = sink.input("v", op.getV(), act, asVec(v.getShape()));
    uint32_t ig = sink.input(gName, gOperand, gate, asVec(g.getShape()));
    uint32_t ib = sink.input("beta", op.getBeta(), act, {B, T, H});
    uint32_t is = sink.input("initial_state", op.getInitialState(), stateElt,
                             {B, H, DK, DV});
    uint32_t io = sink.output("out", act, asVec(v.getShape()));
    uint32_t ifs = sink.output("final_state", stateElt, {B, H, DK, DV});
    std::vector<uint32_t> args = {iq, ik, iv, ig, ib, is, ifs, io};
    for (uint32_t extra : addGateBuffers())
      args.push_back(extra);
    sink.launch("kda_decode", {B * H, s.columnGroups, 1}, 128, args);
    return KdaKernelSequence{io, ifs,
                             "decode: " + std::to_string(B * H) + " x " +
                                 std::to_string(s.columnGroups) +
                                 " blocks of 128 threads"};
  }

  int64_t N = B, tokens = B * T;
  if (Value cu = op.getCuSeqlens())
    N = cast<RankedTensorType>(cu.getType()).getDimSize(0) - 1;
  KdaPrefillShape s;
  s.tokens = tokens;
  s.sequences = N;
  s.heads = H;
  s.dk = DK;
  s.dv = DV;
  s.actType = act;
  s.gateType = gate;
  s.scale = scale;
  s.denseDiagonal = decay.getDiag() == DiagStrategy::dense;
  s.hasInitialState = static_cast<bool>(op.getInitialState());
  s.gate = fusion;
  s.stateType = cast<RankedTensorType>(op.getFinalState().getType()).getElementType();
  int64_t maxChunks = ceilDiv(op.getCuSeqlens() ? tokens : T, kKdaChunk);
  // Value-column split first (it multiplies the blocks without extra
  // work), then the sequence split over what is still idle.
  s.valueSplit = options.valueSplit > 0 ? options.valueSplit
                                        : chooseKdaValueSplit(N, H, maxChunks, DV, options.device);
  s.segments = options.segments > 0
                   ? options.segments
                   : chooseKdaSegments(N, H * s.valueSplit, maxChunks, options.device);
  if (s.segments > 1 && DK != DV)
    s.segments = options.segments > 1 ? s.segments : 1;
  if (failed(verifyKdaPrefillShape(s, why)))
    return op.emitOpError("cannot run on the GPU: ") << why, failure();

  mlir::gpu::GPUModuleOp module = sink.kernelModule();
  emitKdaPrepKernel(b, loc, module, s);
  emitKdaRecurrenceKernel(b, loc, module, s);
  if (s.segments > 1) {
    emitKdaSummarizeKernel(b, loc, module, s);
    emitKdaFoldKernel(b, loc, module, s);
  }

  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i32 = b.getI32Type();
  uint32_t iq = sink.input("q", op.getQ(), act, asVec(q.getShape()));
  uint32_t ik = sink.input("k", op.getK(), act, asVec(q.getShape()));
  uint32_t iv = sink.input("v", op.getV(), act, asVec(v.getShape()));
  uint32_t ig = sink.input(gName, gOperand, gate, asVec(g.getShape()));
  uint32_t ib = sink.input("beta", op.getBeta(), act, {B, T, H});
  std::vector<uint32_t> gateArgs = addGateBuffers();
  uint32_t ih0 = 0;
  if (s.hasInitialState)
    ih0 = sink.input("initial_state", op.getInitialState(), s.stateType,
                     {N, H, DK, DV});
  // Equal-length sequences: the offsets are made, not read.
  uint32_t icu = op.getCuSeqlens()
                     ? sink.input("cu_seqlens", op.getCuSeqlens(), i32, {N + 1})
                     : sink.sequenceOffsets(N, T);
  uint32_t io = sink.output("out", act, asVec(v.getShape()));
  uint32_t iht = sink.output("final_state", s.stateType, {N, H, DK, DV});
  const int64_t slots = s.slots(), C = kKdaChunk, P = s.segments;
  uint32_t tqg = sink.temporary("kda.qg", bf16, {slots, H, C, DK});
  uint32_t tkg = sink.temporary("kda.kg", bf16, {slots, H, C, DK});
  uint32_t tkd = sink.temporary("kda.kd", bf16, {slots, H, C, DK});
  uint32_t taqk = sink.temporary("kda.aqk", bf16, {slots, H, C, C});
  uint32_t ttmb = sink.temporary("kda.tmb", bf16, {slots, H, C, C});
  uint32_t tgl = sink.temporary("kda.gl", f32, {slots, H, DK});
  // The sequence split's scratch (before any launch: every buffer of the
  // sequence is made before it runs).
  uint32_t tm = 0, te = 0, tsin = 0;
  if (P > 1) {
    tm = sink.temporary("kda.segment_m", f32, {N, H, P - 1, DK, DK});
    te = sink.temporary("kda.segment_e", f32, {N, H, P - 1, DK, DV});
    tsin = sink.temporary("kda.segment_in", f32, {N, H, P, DK, DV});
  }

  std::vector<uint32_t> prepArgs = {iq, ik, ig, ib, icu};
  prepArgs.insert(prepArgs.end(), gateArgs.begin(), gateArgs.end());
  for (uint32_t t : {tqg, tkg, tkd, taqk, ttmb, tgl})
    prepArgs.push_back(t);
  sink.launch("kda_prep", {slots, H, 1}, kdaPrepThreads(DK), prepArgs);
  uint32_t init = s.hasInitialState ? ih0 : iht; // unread without a state
  if (P > 1) {
    sink.launch("kda_summarize", {H * s.valueSplit, N, 2 * (P - 1)},
                2 * DV / s.valueSplit, {iv, icu, tkg, tkd, ttmb, tgl, tm, te});
    sink.launch("kda_fold", {H, N, DV / 16}, 256, {init, tm, te, tsin});
    init = tsin;
  }
  sink.launch("kda_recur", {H * s.valueSplit, N, P}, 2 * DV / s.valueSplit,
              {iv, icu, tqg, tkg, tkd, taqk, ttmb, tgl, init, io, iht});
  KdaKernelSequence sequence{io, iht, ""};
  sequence.summary =
      std::string("prefill: ") + (s.denseDiagonal ? "dense" : "pairwise") +
      (gateOp ? " (gate fused)" : "") +
      " diagonal tiles, " + std::to_string(N) + " sequence(s) x " +
      std::to_string(H) + " heads, " + std::to_string(P) + " segment(s), " +
      std::to_string(s.valueSplit) + " block(s) per state, " +
      std::to_string(slots) + " chunk slots";
  return sequence;
}

FailureOr<GpuEntryPlan> planKdaEntry(KdaOp op, StringRef name,
                                     const KdaPlanOptions &options) {
  GpuEntryPlanBuilder pb(op.getContext(), op.getLoc(), name,
                         ("kda_" + name).str());
  FailureOr<KdaKernelSequence> sequence = buildKdaKernels(op, pb, options);
  if (failed(sequence))
    return failure();
  pb.plan.summary = sequence->summary;
  return std::move(pb.plan);
}

} // namespace kimi::gpu

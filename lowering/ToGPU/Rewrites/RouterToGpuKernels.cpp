//===- RouterToGpuKernels.cpp - kimi.router -> product + one kernel -------===//
//
// kimi-gpu-router-kernels: see lowering/Passes.td.
//
// One warp per token. Lane l holds the biased scores of experts l, l + 32,
// ... in registers; each of the k (k + 1 with margins) rounds takes every
// lane's best untaken expert and a butterfly over the warp picks the
// largest, ties to the lower index: the total order of kimi.router's
// ranking, so every lane ends with the same winner. The winner's
// unbiased score is recomputed from its logit (the same formula, so the
// same value), and lane 0 keeps the slot's score and writes its index.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUROUTERKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

constexpr int64_t kThreads = 256;
constexpr int64_t kTokensPerBlock = kThreads / 32;
/// Experts a lane holds at most (K3 has 896: 28 a lane).
constexpr int64_t kMaxPerLane = 64;

struct RouterSpec {
  int64_t experts = 0, topK = 0;
  bool renormalize = false, margins = false;
  double scaling = 1.0;

  int64_t perLane() const { return (experts + 31) / 32; }
  std::string key() const {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << experts << "_" << topK << "_" << renormalize << margins << "_"
       << scaling;
    return s;
  }
};

/// gpu.func @name(logits [T E], bias [E], weights [T k], indices [T k] i32,
/// [margins [T E]], T): grid ceil(T / 8), 256 threads.
mlir::gpu::GPUFuncOp emitRouterKernel(OpBuilder &b, Location loc,
                                      mlir::gpu::GPUModuleOp module,
                                      StringRef name, const RouterSpec &s) {
  using kimi::gpu::KernelEmitter;
  const int64_t E = s.experts, K = s.topK, P = s.perLane();
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), index = b.getIndexType();
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(f32), kimi::gpu::flatMemRef(f32, E), dyn(f32),
                            dyn(i32)};
  if (s.margins)
    args.push_back(dyn(f32));
  args.push_back(index);
  kimi::gpu::GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  unsigned a = 0;
  Value logits = body.getArgument(a++), bias = body.getArgument(a++);
  Value weights = body.getArgument(a++), indices = body.getArgument(a++);
  Value margins = s.margins ? body.getArgument(a++) : Value();
  Value tokens = body.getArgument(a++);

  Value lane = e.laneId();
  Value token = e.add(e.mul(e.blockId(mlir::gpu::Dimension::x),
                            e.idx(kTokensPerBlock)),
                      e.divu(e.threadId(), e.idx(32)));
  auto inRange = scf::IfOp::create(b, loc, e.ult(token, tokens), false);
  b.setInsertionPointToStart(&inRange.getThenRegion().front());
  Value row = e.mul(token, e.idx(E));
  // kimi.router's sigmoid: 1 / (1 + exp(-x)).
  auto sigmoid = [&](Value x) {
    return e.fdiv(e.f32(1.0), e.fadd(e.f32(1.0), e.exp(e.fneg(x))));
  };
  Value negInf = e.f32(-std::numeric_limits<double>::infinity());

  // This lane's experts: biased scores, or -inf past E (never chosen
  // before a real expert: those have index E as well, see `better`).
  SmallVector<Value> expert(P), biased(P), valid(P);
  for (int64_t i = 0; i < P; ++i) {
    expert[i] = e.add(lane, e.idx(32 * i));
    valid[i] = E % 32 && i == P - 1 ? e.ult(expert[i], e.idx(E)) : Value();
    Value at = valid[i] ? e.select(valid[i], expert[i], e.idx(0)) : expert[i];
    Value v = e.fadd(sigmoid(e.load(logits, e.add(row, at))), e.load(bias, at));
    biased[i] = valid[i] ? e.select(valid[i], v, negInf) : v;
  }
  // (v, i) ranks before (w, j): larger score, or equal and lower index.
  auto better = [&](Value v, Value i, Value w, Value j) {
    Value gt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, w);
    Value eq = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, v, w);
    return arith::OrIOp::create(b, loc, gt, e.andI(eq, e.ult(i, j))).getResult();
  };
  Value noExpert = e.idx(E);
  SmallVector<Value> taken(P, arith::ConstantOp::create(b, loc, b.getBoolAttr(false)));
  SmallVector<Value> raw;
  Value alpha;
  const int64_t rounds = s.margins ? K + 1 : K;
  for (int64_t j = 0; j < rounds; ++j) {
    Value bestV = negInf, bestI = noExpert;
    for (int64_t i = 0; i < P; ++i) {
      Value take = e.andI(arith::XOrIOp::create(b, loc, taken[i],
                                                arith::ConstantOp::create(
                                                    b, loc, b.getBoolAttr(true))),
                          better(biased[i], expert[i], bestV, bestI));
      bestV = e.select(take, biased[i], bestV);
      bestI = e.select(take, expert[i], bestI);
    }
    Value bestI32 = e.toI32(bestI);
    for (int32_t off : {16, 8, 4, 2, 1}) {
      Value ov = e.shuffleXor(bestV, off);
      Value oi = e.toIndex(e.shuffleXor(bestI32, off));
      Value take = better(ov, oi, bestV, bestI);
      bestV = e.select(take, ov, bestV);
      bestI = e.select(take, oi, bestI);
      bestI32 = e.toI32(bestI);
    }
    if (j == K) { // the (k + 1)-th biased score
      alpha = bestV;
      break;
    }
    for (int64_t i = 0; i < P; ++i)
      taken[i] = arith::OrIOp::create(b, loc, taken[i], e.eq(expert[i], bestI));
    // Every lane has the winner; its unbiased score from its logit.
    Value at = e.select(e.ult(bestI, noExpert), bestI, e.idx(0));
    raw.push_back(sigmoid(e.load(logits, e.add(row, at))));
    auto first = scf::IfOp::create(b, loc, e.eq(lane, e.idx(0)), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&first.getThenRegion().front());
    e.store(bestI32, indices, e.add(e.mul(token, e.idx(K)), e.idx(j)));
  }
  // Weights: the slots' scores in slot order, renormalised, scaled.
  Value sum = e.f32(0.0);
  for (Value r : raw)
    sum = e.fadd(sum, r);
  Value denom = e.fadd(sum, e.f32(1e-20));
  {
    auto first = scf::IfOp::create(b, loc, e.eq(lane, e.idx(0)), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&first.getThenRegion().front());
    for (int64_t j = 0; j < K; ++j) {
      Value w = s.renormalize ? e.fdiv(raw[j], denom) : raw[j];
      e.store(e.fmul(w, e.f32(s.scaling)), weights,
              e.add(e.mul(token, e.idx(K)), e.idx(j)));
    }
  }
  if (s.margins)
    for (int64_t i = 0; i < P; ++i) {
      std::optional<OpBuilder::InsertionGuard> g;
      if (valid[i]) {
        auto owns = scf::IfOp::create(b, loc, valid[i], false);
        g.emplace(b);
        b.setInsertionPointToStart(&owns.getThenRegion().front());
      }
      e.store(e.fsub(biased[i], alpha), margins, e.add(row, expert[i]));
    }
  return k.func;
}

struct KimiGpuRouterKernels
    : kimi::impl::KimiGpuRouterKernelsBase<KimiGpuRouterKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<RouterOp> ops;
    module.walk([&](RouterOp op) { ops.push_back(op); });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_router");
    for (RouterOp op : ops)
      rewrite(kernels, op);
  }

  void rewrite(kimi::gpu::GeneratedKernels &kernels, RouterOp op) {
    Location loc = op.getLoc();
    auto xType = cast<RankedTensorType>(op.getX().getType());
    auto wType = cast<RankedTensorType>(op.getWeight().getType());
    RouterSpec spec;
    spec.experts = wType.getDimSize(0);
    spec.topK = op.getTopK();
    spec.renormalize = op.getRenormalize();
    spec.margins = bool(op.getMargins());
    spec.scaling = op.getScaling().convertToDouble();
    Type wElement = wType.getElementType();
    std::string why;
    if (ShapedType::isDynamic(spec.experts))
      why = "the expert count must be static";
    else if (spec.perLane() > kMaxPerLane)
      why = std::to_string(spec.experts) + " experts exceed the kernel's " +
            std::to_string(32 * kMaxPerLane);
    else if (!(wElement.isF32() || wElement.isBF16() || wElement.isF16()))
      why = "the router weight must be f32, bf16 or f16";
    else if (!op.getIndices().getType().getElementType().isInteger(32))
      why = "the kernel writes i32 indices";
    if (!why.empty()) {
      op.emitRemark() << "kept for kimi-lower-to-linalg (no GPU router kernel): "
                      << why;
      return;
    }
    std::string name = "router_" + std::to_string(kernels.size());
    auto fn = kernels.get(spec.key(), [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
      return emitRouterKernel(mb, loc, m, name, spec);
    });

    OpBuilder b(op);
    // The logits as their own product, so that the GEMV grouping can join
    // it to its layer's other products of the same input.
    SmallVector<int64_t> logitShape(xType.getShape());
    logitShape.back() = spec.experts;
    auto logitType = RankedTensorType::get(logitShape, b.getF32Type());
    Value logits = LinearOp::create(b, loc, logitType, op.getX(), op.getWeight(),
                                    Value());
    SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, logits);
    Value tokens = kimi::gpu::rowCount(b, loc, sizes);
    SmallVector<OpFoldResult> slotSizes(sizes);
    slotSizes.back() = b.getIndexAttr(spec.topK);
    Value weights = kimi::gpu::allocFlatBuffer(b, loc, slotSizes, b.getF32Type());
    Value indices = kimi::gpu::allocFlatBuffer(b, loc, slotSizes, b.getI32Type());
    SmallVector<Value> args = {
        kimi::gpu::asDynamicBuffer(b, loc, kimi::gpu::flatInputBuffer(b, loc, logits)),
        kimi::gpu::flatInputBuffer(b, loc, op.getBias()),
        kimi::gpu::asDynamicBuffer(b, loc, weights),
        kimi::gpu::asDynamicBuffer(b, loc, indices)};
    Value margins;
    if (spec.margins) {
      margins = kimi::gpu::allocFlatBuffer(b, loc, sizes, b.getF32Type());
      args.push_back(kimi::gpu::asDynamicBuffer(b, loc, margins));
    }
    args.push_back(tokens);
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    Value blocks = arith::CeilDivUIOp::create(b, loc, tokens, c(kTokensPerBlock));
    mlir::gpu::LaunchFuncOp::create(b, loc, fn,
                                    mlir::gpu::KernelDim3{blocks, c(1), c(1)},
                                    mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)},
                                    Value(), args);
    op.getWeights().replaceAllUsesWith(kimi::gpu::tensorOfFlatBuffer(
        b, loc, weights, op.getWeights().getType(), slotSizes));
    op.getIndices().replaceAllUsesWith(kimi::gpu::tensorOfFlatBuffer(
        b, loc, indices, op.getIndices().getType(), slotSizes));
    if (spec.margins)
      op.getMargins().replaceAllUsesWith(kimi::gpu::tensorOfFlatBuffer(
          b, loc, margins, op.getMargins().getType(), sizes));
    op.erase();
  }
};

} // namespace

//===- GemmToRuntimeCalls.cpp - contractions -> cuBLASLt through the runtime -===//
//
// kimi-gpu-gemm-calls: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUGEMMCALLS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kGemm = "kimi_gpu_gemm_f32";
constexpr unsigned kGemmArgs = 18;
// The last argument's bits.
constexpr int64_t kGemmStaticShape = 1, kGemmOverwrite = 2;

/// Whether memref dimension `d` of `type` has a static unit stride.
bool unitStride(MemRefType type, unsigned d) {
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    return false;
  return strides[d] == 1 || type.getDimSize(d) == 1;
}

/// Operand `v` with indexing `map` has a statically unit-stride dimension
/// among the loop dims `dims`.
bool hasUnitStrideAmong(Value v, AffineMap map, ArrayRef<unsigned> dims) {
  auto type = cast<MemRefType>(v.getType());
  for (unsigned r = 0; r < map.getNumResults(); ++r)
    if (llvm::is_contained(dims, map.getDimPosition(r)) && unitStride(type, r))
      return true;
  return false;
}

struct Contraction {
  unsigned m, n, k;
  std::optional<unsigned> batch;
};

std::optional<Contraction> asGemm(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumDpsInputs() != 2 ||
      op.getNumDpsInits() != 1 || !linalg::isaContractionOpInterface(op))
    return std::nullopt;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims))
    return std::nullopt;
  // Loop dims of static extent 1 (a batch of one sequence) carry no data.
  // Of m, n and k one dimension stays even when all are units: a decode
  // step's [1, 1, K] x [N, K] is a product with m = 1.
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  auto isUnit = [&](unsigned d) { return ranges[d] == 1; };
  auto drop = [&](SmallVector<unsigned, 2> &v) {
    llvm::erase_if(v, isUnit);
  };
  auto dropKeepingOne = [&](SmallVector<unsigned, 2> &v) {
    if (v.size() <= 1)
      return;
    unsigned last = v.back();
    drop(v);
    if (v.empty())
      v.push_back(last);
  };
  unsigned unitLoops = llvm::count(ranges, 1);
  drop(dims->batch);
  dropKeepingOne(dims->m);
  dropKeepingOne(dims->n);
  dropKeepingOne(dims->k);
  // Without a batch loop, a second m (n) loop is a batch that the other
  // input does not index: its batch stride is 0 (one matrix for all), as
  // for attention's scores over a latent cache that every head shares.
  // The shorter loop becomes the batch, so that each product is large.
  auto extent = [&](unsigned d) {
    return ShapedType::isDynamic(ranges[d]) ? INT64_MAX : ranges[d];
  };
  for (SmallVector<unsigned, 2> *mn : {&dims->m, &dims->n}) {
    if (!dims->batch.empty() || mn->size() != 2)
      continue;
    unsigned shorter = extent((*mn)[0]) <= extent((*mn)[1]) ? 0 : 1;
    dims->batch.push_back((*mn)[shorter]);
    mn->erase(mn->begin() + shorter);
  }
  if (dims->m.size() != 1 || dims->n.size() != 1 || dims->k.size() != 1 ||
      dims->batch.size() > 1)
    return std::nullopt;
  unsigned used = 3 + dims->batch.size();
  for (unsigned d : {dims->m[0], dims->n[0], dims->k[0]})
    if (ranges[d] == 1)
      --unitLoops; // a unit m/n/k loop is still the product's dimension
  if (op.getNumLoops() != used + unitLoops)
    return std::nullopt;
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<MemRefType>(operand.get().getType());
    if (!type || !type.getElementType().isF32() ||
        !op.getMatchingIndexingMap(&operand).isProjectedPermutation())
      return std::nullopt;
  }
  Contraction c{dims->m[0], dims->n[0], dims->k[0], std::nullopt};
  if (!dims->batch.empty())
    c.batch = dims->batch[0];
  Value a = op.getDpsInputs()[0], b = op.getDpsInputs()[1],
        out = op.getDpsInits()[0];
  AffineMap am = op.getIndexingMapsArray()[0], bm = op.getIndexingMapsArray()[1],
            cm = op.getIndexingMapsArray()[2];
  // cuBLASLt needs a unit stride along one dimension of every matrix.
  if (!hasUnitStrideAmong(a, am, {c.m, c.k}) ||
      !hasUnitStrideAmong(b, bm, {c.k, c.n}) ||
      !hasUnitStrideAmong(out, cm, {c.m, c.n}))
    return std::nullopt;
  return c;
}

/// The `linalg.fill` of 0.0 into `out` that the product `op` accumulates
/// onto, or null: the closest earlier op of the block that writes memory or
/// uses `out`, when that is such a fill. The product then overwrites C
/// (cuBLASLt's beta = 0) and the fill, a pass over all of C, goes.
linalg::FillOp zeroFillOf(Operation *op, Value out) {
  for (Operation *prev = op->getPrevNode(); prev; prev = prev->getPrevNode()) {
    if (auto fill = dyn_cast<linalg::FillOp>(prev)) {
      if (fill.hasPureBufferSemantics() && fill.getDpsInits()[0] == out) {
        Attribute value;
        if (matchPattern(fill.getDpsInputs()[0], m_Constant(&value)))
          if (auto f = dyn_cast<FloatAttr>(value);
              f && f.getValue().isZero() && !f.getValue().isNegative())
            return fill;
        return {};
      }
    }
    if (llvm::is_contained(prev->getOperands(), out))
      return {};
    if (isPure(prev))
      continue;
    auto effects = dyn_cast<MemoryEffectOpInterface>(prev);
    if (!effects || effects.hasEffect<MemoryEffects::Write>() ||
        effects.hasEffect<MemoryEffects::Free>())
      return {};
    // Reads of other buffers and allocations do not see C's contents.
  }
  return {};
}

struct KimiGpuGemmCalls : kimi::impl::KimiGpuGemmCallsBase<KimiGpuGemmCalls> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<std::pair<linalg::LinalgOp, Contraction>> gemms;
    module.walk([&](linalg::LinalgOp op) {
      if (op->getParentOfType<gpu::GPUModuleOp>())
        return;
      if (std::optional<Contraction> c = asGemm(op))
        gemms.push_back({op, *c});
    });
    if (gemms.empty())
      return;
    if (precision != "f32" && precision != "tf32") {
      module.emitError() << "kimi-gpu-gemm-calls: precision '" << precision
                         << "' is not f32 or tf32";
      return signalPassFailure();
    }
    OpBuilder b(&getContext());
    b.setInsertionPointToEnd(module.getBody());
    Type index = b.getIndexType();
    if (!module.lookupSymbol<func::FuncOp>(kGemm)) {
      auto decl = func::FuncOp::create(
          b, module.getLoc(), kGemm,
          b.getFunctionType(SmallVector<Type>(kGemmArgs, index), {}));
      decl.setPrivate();
    }
    for (auto [op, c] : gemms)
      rewrite(b, op, c);
  }

  void rewrite(OpBuilder &b, linalg::LinalgOp op, const Contraction &c) {
    Location loc = op.getLoc();
    // Before anything below reads C's metadata (which would count as a use).
    linalg::FillOp fill = zeroFillOf(op, op.getDpsInits()[0]);
    b.setInsertionPoint(op);
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value four = arith::ConstantIndexOp::create(b, loc, 4);
    // (address, stride per loop dim) of one operand.
    auto describe = [&](Value memref, AffineMap map,
                        SmallVector<Value> &strides) -> Value {
      auto meta = memref::ExtractStridedMetadataOp::create(b, loc, memref);
      Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
      Value offset = arith::MulIOp::create(b, loc, meta.getOffset(), four);
      strides.assign(op.getNumLoops(), zero);
      for (unsigned r = 0; r < map.getNumResults(); ++r)
        strides[map.getDimPosition(r)] = meta.getStrides()[r];
      return arith::AddIOp::create(b, loc, base, offset);
    };
    auto maps = op.getIndexingMapsArray();
    SmallVector<Value> sa, sb, sc;
    Value a = describe(op.getDpsInputs()[0], maps[0], sa);
    Value bAddr = describe(op.getDpsInputs()[1], maps[1], sb);
    Value out = describe(op.getDpsInits()[0], maps[2], sc);
    SmallVector<Range> ranges =
        cast<linalg::LinalgOp>(op.getOperation()).createLoopRanges(b, loc);
    auto size = [&](unsigned d) {
      return getValueOrCreateConstantIndexOp(b, loc, ranges[d].size);
    };
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value batch = c.batch ? size(*c.batch) : one;
    auto batchStride = [&](SmallVector<Value> &s) {
      return c.batch ? s[*c.batch] : zero;
    };
    Value prec = arith::ConstantIndexOp::create(b, loc, precision == "tf32");
    // Flags (docs/runtime-abi.md). Sizes known here recur on every call: the
    // runtime times cuBLASLt's candidates for them once; a size that depends
    // on the data or the cache length would be timed at every new value.
    bool staticShape = llvm::all_of(
        SmallVector<std::optional<unsigned>>{c.m, c.n, c.k, c.batch},
        [&](std::optional<unsigned> d) {
          return !d || getConstantIntValue(ranges[*d].size).has_value();
        });
    int64_t flags = (staticShape ? kGemmStaticShape : 0) |
                    (fill ? kGemmOverwrite : 0);
    if (fill)
      fill->erase();
    Value flagsValue = arith::ConstantIndexOp::create(b, loc, flags);
    SmallVector<Value> args = {a,         bAddr,     out,       size(c.m),
                               size(c.n), size(c.k), batch,     sa[c.m],
                               sa[c.k],   batchStride(sa),      sb[c.k],
                               sb[c.n],   batchStride(sb),      sc[c.m],
                               sc[c.n],   batchStride(sc),      prec,
                               flagsValue};
    func::CallOp::create(b, loc, kGemm, TypeRange{}, args);
    op->erase();
  }
};
} // namespace

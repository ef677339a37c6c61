//===- GemmContraction.cpp - linalg contractions as products --------------===//
//
// See GemmContraction.h.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Rewrites/GemmContraction.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

using namespace mlir;

namespace kimi::gpu {

/// Whether memref dimension `d` of `type` has a static unit stride.
static bool unitStride(MemRefType type, unsigned d) {
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    return false;
  return strides[d] == 1 || type.getDimSize(d) == 1;
}

bool hasUnitStrideAmong(Value v, AffineMap map, ArrayRef<unsigned> dims) {
  auto type = cast<MemRefType>(v.getType());
  for (unsigned r = 0; r < map.getNumResults(); ++r)
    if (llvm::is_contained(dims, map.getDimPosition(r)) && unitStride(type, r))
      return true;
  return false;
}

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
  // f32 products; an input may be bf16 (a weight at its stored type: the
  // GEMV kernel reads it as it is, cuBLASLt products widen it first).
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<MemRefType>(operand.get().getType());
    if (!type || !op.getMatchingIndexingMap(&operand).isProjectedPermutation())
      return std::nullopt;
    Type element = type.getElementType();
    if (!element.isF32() && !(element.isBF16() && op.isDpsInput(&operand)))
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

/// The buffer `buffer` is a view of (through view-like ops).
Value viewRoot(Value buffer) {
  while (auto view = buffer.getDefiningOp<ViewLikeOpInterface>())
    buffer = view.getViewSource();
  return buffer;
}

/// Whether a root buffer certainly is not (and does not alias) the fresh
/// allocation `alloc`: another allocation, a function argument, or a weight
/// (a descriptor the weight table built from a pointer).
bool distinctFrom(Value root, Value alloc) {
  if (root == alloc)
    return false;
  if (isa<BlockArgument>(root))
    return isa<func::FuncOp>(root.getParentRegion()->getParentOp());
  Operation *def = root.getDefiningOp();
  if (isa<memref::AllocOp, memref::GetGlobalOp>(def))
    return true;
  if (auto cast = dyn_cast<UnrealizedConversionCastOp>(def))
    return llvm::none_of(cast.getInputs(), [](Value v) {
      return isa<BaseMemRefType>(v.getType());
    });
  return false;
}

/// Whether `op` certainly leaves the allocation `alloc` alone: a linalg op
/// on buffers or a kernel launch (every buffer it touches is an operand)
/// none of whose buffers may be a view of `alloc`.
bool leavesAllocation(Operation *op, Value alloc) {
  if (!alloc || !(isa<mlir::gpu::LaunchFuncOp>(op) ||
                  (isa<linalg::LinalgOp>(op) &&
                   cast<linalg::LinalgOp>(op).hasPureBufferSemantics())))
    return false;
  return llvm::all_of(op->getOperands(), [&](Value v) {
    return !isa<BaseMemRefType>(v.getType()) || distinctFrom(viewRoot(v), alloc);
  });
}

/// The `linalg.fill` of 0.0 into `out` that the product `op` accumulates
/// onto, or null: the closest earlier op of the block that writes memory or
/// uses `out`, when that is such a fill. Products, fills and launches on
/// other allocations than `out`'s are looked past (the gate and up
/// projections of an MLP each have their fill, both before either product).
/// The product then overwrites C (cuBLASLt's beta = 0) and the fill, a pass
/// over all of C, goes.
linalg::FillOp zeroFillOf(Operation *op, Value out) {
  Value alloc = viewRoot(out);
  if (!alloc.getDefiningOp<memref::AllocOp>())
    alloc = {};
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
    if (isPure(prev) || leavesAllocation(prev, alloc))
      continue;
    auto effects = dyn_cast<MemoryEffectOpInterface>(prev);
    if (!effects || effects.hasEffect<MemoryEffects::Write>() ||
        effects.hasEffect<MemoryEffects::Free>())
      return {};
    // Reads of other buffers and allocations do not see C's contents.
  }
  return {};
}

bool allParallel(linalg::LinalgOp op) {
  return llvm::all_of(op.getIteratorTypesArray(), [](utils::IteratorType t) {
    return t == utils::IteratorType::parallel;
  });
}

} // namespace kimi::gpu

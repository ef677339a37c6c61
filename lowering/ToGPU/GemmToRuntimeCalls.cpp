//===- GemmToRuntimeCalls.cpp - contractions -> cuBLASLt through the runtime -===//
//
// kimi-gpu-gemm-calls: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/GemvKernel.h"
#include "lowering/ToGPU/KernelLaunchSupport.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/ADT/SetVector.h"


namespace kimi {
#define GEN_PASS_DEF_KIMIGPUGEMMCALLS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kGemm = "kimi_gpu_gemm_f32";
constexpr unsigned kGemmArgs = 18;
// The last argument's bits.
constexpr int64_t kGemmStaticShape = 1, kGemmOverwrite = 2, kGemmBf16C = 4;

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

struct KimiGpuGemmCalls : kimi::impl::KimiGpuGemmCallsBase<KimiGpuGemmCalls> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Each product's zero fill is found before any product is rewritten
    // (a rewritten one is a call, which the search cannot look past).
    SmallVector<std::tuple<linalg::LinalgOp, Contraction, linalg::FillOp>> gemms;
    module.walk([&](linalg::LinalgOp op) {
      if (op->getParentOfType<gpu::GPUModuleOp>())
        return;
      if (std::optional<Contraction> c = asGemm(op))
        gemms.push_back({op, *c, zeroFillOf(op, op.getDpsInits()[0])});
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
    if (gemvMaxGroup < 1 || gemvMaxGroup > 8) {
      module.emitError() << "kimi-gpu-gemm-calls: gemv-max-group "
                         << gemvMaxGroup << " is outside 1..8";
      return signalPassFailure();
    }
    kimi::gpu::GeneratedKernels gemvKernels(module, "kimi_gemv");
    std::vector<GemvCandidate> gemvs;
    for (auto [op, c, fill] : gemms) {
      if (std::optional<kimi::gpu::GemvKernelSpec> gemv = asGemv(op, c, fill)) {
        gemvs.push_back({op, *gemv, fill});
        gemvs.back().c = c;
      }
      else
        rewrite(b, op, c, fill);
    }
    if (gemvEpilogues)
      fuseEpilogues(gemvs);
    for (std::vector<GemvCandidate> &group : groupGemvs(gemvs))
      launchGemv(gemvKernels, group);
  }

  struct GemvCandidate {
    // Op handles are cheap values; their accessors are not const.
    mutable linalg::LinalgOp op;
    kimi::gpu::GemvKernelSpec spec;
    mutable linalg::FillOp fill;
    Contraction c;
    // With spec.weights == 2: the pair's later product and its fill.
    mutable linalg::LinalgOp second;
    mutable linalg::FillOp secondFill;
    // With spec.epilogue: the fused elementwise op, its output and the
    // extra buffers it reads.
    mutable linalg::GenericOp epilogue;
    Value out;
    SmallVector<Value> extras;

    /// What the fused parts read (the second weight, the extra buffers)
    /// and write (the second output, the epilogue's output): the views,
    /// and their roots.
    SmallVector<Value> fusedReads() const {
      SmallVector<Value> r(extras.begin(), extras.end());
      if (second)
        r.push_back(second.getDpsInputs()[1]);
      if (spec.k1 > 0)
        r.push_back(second.getDpsInputs()[0]);
      return r;
    }
    SmallVector<Value> fusedWrites() const {
      SmallVector<Value> w;
      if (second)
        w.push_back(second.getDpsInits()[0]);
      if (out)
        w.push_back(out);
      return w;
    }
    /// Everything the launch of this candidate reads and writes (roots).
    SmallVector<Value> allReadRoots() const {
      SmallVector<Value> r{viewRoot(op.getDpsInputs()[0]),
                           viewRoot(op.getDpsInputs()[1])};
      for (Value v : fusedReads())
        r.push_back(viewRoot(v));
      return r;
    }
    SmallVector<Value> allWriteRoots() const {
      SmallVector<Value> w{viewRoot(op.getDpsInits()[0])};
      for (Value v : fusedWrites())
        w.push_back(viewRoot(v));
      return w;
    }
    bool isFill(Operation *x) const {
      return (fill && fill.getOperation() == x) ||
             (secondFill && secondFill.getOperation() == x);
    }
  };

  /// Whether any root of `a` may alias any of `b` (weights, which no
  /// entry writes, alias nothing written).
  static bool anyAlias(ArrayRef<Value> a, ArrayRef<Value> b) {
    return llvm::any_of(a, [&](Value x) {
      return !isWeightView(x) && llvm::any_of(b, [&](Value y) {
               return !isWeightView(y) && mayAlias(x, y);
             });
    });
  }

  /// Whether `g` is an elementwise op the GEMV kernel can apply at the
  /// store: identity maps over buffers of `shape` (f32 or bf16), all loops
  /// parallel, one output, and a body of pure, region-free arith and math
  /// ops that yields one of its values and uses only constants from
  /// outside.
  static bool isEpilogueCandidate(linalg::GenericOp g, ArrayRef<int64_t> shape) {
    if (!g.hasPureBufferSemantics() || g.getNumDpsInits() != 1 ||
        !allParallel(g) ||
        !llvm::all_of(g.getIndexingMapsArray(),
                      [](AffineMap m) { return m.isIdentity(); }))
      return false;
    for (Value v : g->getOperands()) {
      auto t = dyn_cast<MemRefType>(v.getType());
      SmallVector<int64_t> strides;
      int64_t offset;
      if (!t || t.getShape() != shape ||
          !(t.getElementType().isF32() || t.getElementType().isBF16()) ||
          failed(t.getStridesAndOffset(strides, offset)) ||
          ShapedType::isDynamic(offset) ||
          llvm::any_of(strides, ShapedType::isDynamic))
        return false;
    }
    Block &body = g.getRegion().front();
    Operation *yield = body.getTerminator();
    if (yield->getNumOperands() != 1 ||
        yield->getOperand(0).getParentBlock() != &body)
      return false;
    for (Operation &op : body.without_terminator()) {
      if (op.getNumRegions() != 0 || op.getNumResults() != 1 || !isPure(&op) ||
          !isa<arith::ArithDialect, math::MathDialect>(op.getDialect()))
        return false;
      for (Value v : op.getOperands())
        if (v.getParentBlock() != &body && !v.getDefiningOp<arith::ConstantOp>())
          return false;
    }
    return true;
  }

  /// The canonical text of an epilogue: its bindings, strides and body
  /// (values numbered in order, outside constants by value).
  static std::string epilogueText(const kimi::gpu::GemvEpilogue &ep) {
    std::string text;
    llvm::raw_string_ostream os(text);
    DenseMap<Value, unsigned> id;
    os << "args";
    for (auto [arg, source] : llvm::zip(ep.body->getArguments(), ep.args)) {
      id[arg] = id.size();
      os << " " << source;
    }
    os << " ld " << ep.ldOut << "/" << ep.batchOut;
    for (auto [ld, batch] : llvm::zip(ep.ldExtra, ep.batchExtra))
      os << "," << ld << "/" << batch;
    os << " keep " << ep.keepSum[0] << ep.keepSum[1] << " types "
       << ep.outType;
    for (Type t : ep.extraTypes)
      os << "," << t;
    os << ";";
    for (Operation &op : *ep.body) {
      os << " " << op.getName() << "(";
      for (Value v : op.getOperands()) {
        if (auto it = id.find(v); it != id.end())
          os << "%" << it->second;
        else
          os << v.getDefiningOp<arith::ConstantOp>().getValue();
        os << ",";
      }
      os << ")";
      if (Attribute props = op.getPropertiesAsAttribute())
        os << props;
      os << op.getDiscardableAttrDictionary();
      for (Value r : op.getResults()) {
        id[r] = id.size();
        os << ":" << r.getType();
      }
    }
    return text;
  }

  /// The row stride (over m) and batch stride of `buffer`, a buffer of the
  /// shape of `cand`'s output read elementwise, when it has a unit stride
  /// along n.
  static std::optional<std::pair<int64_t, int64_t>>
  rowStride(GemvCandidate &cand, Value buffer) {
    int64_t offset;
    std::optional<SmallVector<int64_t>> perLoop = stridesPerLoop(
        cast<MemRefType>(buffer.getType()),
        cand.op.getMatchingIndexingMap(cand.op.getDpsInitOperand(0)),
        cand.op.getNumLoops(), offset);
    if (!perLoop || (cand.spec.n != 1 && (*perLoop)[cand.c.n] != 1))
      return std::nullopt;
    return std::make_pair(cand.spec.m == 1 ? 0 : (*perLoop)[cand.c.m],
                          cand.spec.batch > 1 ? (*perLoop)[*cand.c.batch] : 0);
  }

  /// The stride of `type` along each loop of a nest of `numLoops` that
  /// indexes it through `map` (0 for loops it does not use and for
  /// dimensions of extent 1), and its offset; none when either is dynamic.
  static std::optional<SmallVector<int64_t>>
  stridesPerLoop(MemRefType type, AffineMap map, unsigned numLoops,
                 int64_t &offset) {
    SmallVector<int64_t> s;
    if (failed(type.getStridesAndOffset(s, offset)) ||
        ShapedType::isDynamic(offset) || llvm::any_of(s, ShapedType::isDynamic))
      return std::nullopt;
    SmallVector<int64_t> perLoop(numLoops, 0);
    for (unsigned r = 0; r < map.getNumResults(); ++r)
      perLoop[map.getDimPosition(r)] = type.getDimSize(r) == 1 ? 0 : s[r];
    return perLoop;
  }

  /// Whether something after `after` in its block (other than deallocs)
  /// may use `root`, or `root` is not an allocation of that block.
  static bool usedAfter(Operation *after, Value root) {
    auto alloc = root.getDefiningOp<memref::AllocOp>();
    if (!alloc || alloc->getBlock() != after->getBlock())
      return true;
    for (Operation *x = after->getNextNode(); x; x = x->getNextNode())
      if (!isa<memref::DeallocOp>(x) && mayUse(x, root))
        return true;
    return false;
  }

  /// Binds the operands of `g` for candidate `i` (whose output is `c`):
  /// the candidate's sums, at most one other candidate's output (its pair:
  /// a later one, else an earlier one, which then runs at the candidate),
  /// or extra buffers read at the output's index (an init the body reads
  /// is one too). False when two other candidates' outputs are read.
  static bool bindEpilogue(linalg::GenericOp g, Value c,
                           ArrayRef<GemvCandidate> gemvs, size_t i,
                           ArrayRef<bool> dropped, kimi::gpu::GemvEpilogue &ep,
                           std::optional<size_t> &partner,
                           SmallVector<Value> &extras) {
    using kimi::gpu::GemvEpilogue;
    ep.body = &g.getRegion().front();
    for (OpOperand &operand : g->getOpOperands()) {
      Value v = operand.get();
      BlockArgument arg = ep.body->getArgument(operand.getOperandNumber());
      auto sameView = [&](Value view) {
        return view == v || (viewRoot(view) == viewRoot(v) &&
                             view.getType() == v.getType());
      };
      if (sameView(c)) {
        ep.args.push_back(GemvEpilogue::kSum0);
        continue;
      }
      if (g.isDpsInit(&operand) && arg.use_empty()) {
        ep.args.push_back(GemvEpilogue::kUnused);
        continue;
      }
      std::optional<size_t> other;
      for (size_t j = i + 1; j < gemvs.size() && !other; ++j)
        if (!dropped[j] && sameView(gemvs[j].op.getDpsInits()[0]))
          other = j;
      // An earlier one pairs only where it can run at the candidate; else
      // its output is an extra buffer like any other.
      for (size_t j = 0; j < i && !other; ++j)
        if (!dropped[j] && sameView(gemvs[j].op.getDpsInits()[0]) &&
            pairable(gemvs[i].spec, gemvs[j].spec) &&
            earlierPairRunsLater(gemvs[j], gemvs[i].op))
          other = j;
      if (other) {
        if (partner && *partner != *other)
          return false;
        partner = other;
        ep.args.push_back(GemvEpilogue::kSum1);
        continue;
      }
      auto at = llvm::find(extras, v);
      ep.args.push_back(at - extras.begin());
      if (at == extras.end())
        extras.push_back(v);
    }
    return true;
  }

  /// Whether `b` can be the second product of `a`'s launch (alone, of the
  /// same output shape and types; inputs are checked where they are).
  static bool pairable(const kimi::gpu::GemvKernelSpec &a,
                       const kimi::gpu::GemvKernelSpec &b) {
    return a.m == b.m && a.n == b.n && a.ldc == b.ldc &&
           a.rowsPerWarp == b.rowsPerWarp && a.accumulate == b.accumulate &&
           a.bf16Weights == b.bf16Weights &&
           a.bf16Activations == b.bf16Activations && a.weights == 1 &&
           b.weights == 1 && !b.epilogue && a.batch == 1 && b.batch == 1;
  }

  /// Whether `pair`, a product before `p`, may run at `p` instead: nothing
  /// between them writes what it reads or touches its output.
  static bool earlierPairRunsLater(const GemvCandidate &pair, Operation *p) {
    Value input = viewRoot(pair.op.getDpsInputs()[0]),
          weight = viewRoot(pair.op.getDpsInputs()[1]),
          out = viewRoot(pair.op.getDpsInits()[0]);
    for (Operation *x = pair.op->getNextNode(); x && x != p; x = x->getNextNode())
      if (mayWrite(x, input) || mayWrite(x, weight) || mayUse(x, out))
        return false;
    return true;
  }

  /// Fuses into GEMV candidates the elementwise ops that consume their
  /// outputs (see the pass description): sets each one's epilogue, pairs
  /// two products that one such op combines, and drops the pairs' second
  /// products from `gemvs`.
  void fuseEpilogues(std::vector<GemvCandidate> &gemvs) {
    using kimi::gpu::GemvEpilogue;
    SmallVector<bool> dropped(gemvs.size(), false);
    for (size_t i = 0; i < gemvs.size(); ++i) {
      if (dropped[i])
        continue;
      GemvCandidate &cand = gemvs[i];
      Operation *p = cand.op;
      Value c = cand.op.getDpsInits()[0], cRoot = viewRoot(c);
      if (!cRoot.getDefiningOp<memref::AllocOp>())
        continue;
      // The first op after the product to use its output.
      linalg::GenericOp g;
      for (Operation *x = p->getNextNode(); x; x = x->getNextNode()) {
        if (isa<ViewLikeOpInterface>(x) && isPure(x))
          continue; // a view's uses are found where they are
        if (mayUse(x, cRoot)) {
          g = dyn_cast<linalg::GenericOp>(x);
          break;
        }
      }
      auto cType = cast<MemRefType>(c.getType());
      if (!g || !isEpilogueCandidate(g, cType.getShape()))
        continue;
      GemvEpilogue ep;
      std::optional<size_t> partner;
      SmallVector<Value> extras;
      if (!bindEpilogue(g, c, gemvs, i, dropped, ep, partner, extras))
        continue;
      Value out = g.getDpsInits()[0], outRoot = viewRoot(out);
      GemvCandidate *pair = partner ? &gemvs[*partner] : nullptr;
      // The pair reads the candidate's vector A (a gate and up pair), or
      // its own (ownInput: two products whose sums the op adds).
      bool ownInput = false;
      if (pair) {
        const kimi::gpu::GemvKernelSpec &a = cand.spec, &b = pair->spec;
        Operation *q = pair->op;
        Value qRoot = viewRoot(pair->op.getDpsInits()[0]);
        const bool sameInput =
            viewRoot(pair->op.getDpsInputs()[0]) ==
                viewRoot(cand.op.getDpsInputs()[0]) &&
            staticOffset(pair->op.getDpsInputs()[0]) ==
                staticOffset(cand.op.getDpsInputs()[0]) &&
            a.k == b.k && a.lda == b.lda && a.ldb == b.ldb;
        ownInput = !sameInput;
        if (q->getBlock() != p->getBlock() || !q->isBeforeInBlock(g) ||
            (q->isBeforeInBlock(p) && !earlierPairRunsLater(*pair, p)) ||
            !qRoot.getDefiningOp<memref::AllocOp>() || !pairable(a, b))
          continue;
      }
      // Everything the fused op needs must exist where the product runs.
      SetVector<Operation *> chain;
      bool hoistable = hoistableChain(out, p, chain);
      for (Value x : extras)
        hoistable = hoistable && hoistableChain(x, p, chain);
      if (pair)
        hoistable = hoistable &&
                    hoistableChain(pair->op.getDpsInputs()[1], p, chain) &&
                    hoistableChain(pair->op.getDpsInits()[0], p, chain) &&
                    (!ownInput ||
                     hoistableChain(pair->op.getDpsInputs()[0], p, chain));
      if (!hoistable)
        continue;
      // Nothing between the product and the fused op may see the outputs
      // (the sums or the fused op's), or change an extra; nothing before
      // the pair's second product may change what it reads.
      Value aRoot = viewRoot(cand.op.getDpsInputs()[0]);
      Value qRoot = pair ? viewRoot(pair->op.getDpsInits()[0]) : Value();
      Value qWeight = pair ? viewRoot(pair->op.getDpsInputs()[1]) : Value();
      Value qInput = ownInput ? viewRoot(pair->op.getDpsInputs()[0]) : aRoot;
      bool clear = true;
      for (Operation *x = p->getNextNode(); x != g.getOperation() && clear;
           x = x->getNextNode()) {
        if (chain.contains(x) ||
            (pair && (x == pair->op.getOperation() ||
                      (pair->fill && x == pair->fill.getOperation()))))
          continue;
        clear = !mayUse(x, cRoot) && !mayUse(x, outRoot) &&
                llvm::none_of(extras, [&](Value e) {
                  return mayWrite(x, viewRoot(e));
                });
        if (pair && clear) {
          clear = !mayUse(x, qRoot);
          if (x->isBeforeInBlock(pair->op))
            clear = clear && !mayWrite(x, aRoot) && !mayWrite(x, qWeight) &&
                    !mayWrite(x, qInput);
        }
      }
      // The fused op reads no output of the launch but its own sums, and
      // writes nothing the launch's other warps read.
      clear = clear && !mayAlias(outRoot, aRoot) && !mayAlias(outRoot, qInput);
      for (Value e : extras)
        clear = clear && !mayAlias(viewRoot(e), cRoot) &&
                !(pair && mayAlias(viewRoot(e), qRoot));
      if (!clear)
        continue;
      auto ldOut = rowStride(cand, out);
      if (!ldOut)
        continue;
      std::tie(ep.ldOut, ep.batchOut) = *ldOut;
      bool strided = true;
      for (Value x : extras) {
        auto ld = rowStride(cand, x);
        if (!(strided = ld.has_value()))
          break;
        ep.ldExtra.push_back(ld->first);
        ep.batchExtra.push_back(ld->second);
      }
      if (!strided)
        continue;
      auto elementOf = [](Value v) {
        return cast<MemRefType>(v.getType()).getElementType();
      };
      ep.outType = elementOf(out);
      for (Value x : extras)
        ep.extraTypes.push_back(elementOf(x));
      ep.keepSum[0] = cRoot != outRoot && usedAfter(g, cRoot);
      ep.keepSum[1] = pair && qRoot != outRoot && usedAfter(g, qRoot);
      ep.text = epilogueText(ep);
      for (Operation *def : chain)
        def->moveBefore(p);
      if (pair) {
        cand.spec.weights = 2;
        if (ownInput) {
          cand.spec.k1 = pair->spec.k;
          cand.spec.lda1 = pair->spec.lda;
          cand.spec.ldb1 = pair->spec.ldb;
        }
        cand.second = pair->op;
        cand.secondFill = pair->fill;
        dropped[*partner] = true;
      }
      cand.spec.epilogue = std::move(ep);
      cand.epilogue = g;
      cand.out = out;
      cand.extras = std::move(extras);
    }
    std::vector<GemvCandidate> kept;
    for (size_t i = 0; i < gemvs.size(); ++i)
      if (!dropped[i])
        kept.push_back(std::move(gemvs[i]));
    gemvs = std::move(kept);
  }

  /// The static offset of a buffer the GEMV kernel takes (asGemv checked
  /// it is static): with the root, m, k and lda it fixes the rows read, so
  /// `[1, 2048]` and its `[1, 1, 2048]` expansion are one input.
  static int64_t staticOffset(Value buffer) {
    SmallVector<int64_t> strides;
    int64_t offset = ShapedType::kDynamic;
    (void)cast<MemRefType>(buffer.getType()).getStridesAndOffset(strides, offset);
    return offset;
  }

  /// Whether `op` may write memory that `root` (a view root) holds: a
  /// write effect on an operand that may alias it, or an operand that may
  /// alias it and no effects to say otherwise (calls, launches).
  static bool mayWrite(Operation *op, Value root) {
    if (isWeightView(root)) // the runtime's weights: no entry writes them
      return false;
    bool found = false;
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands()) {
        if (!isa<BaseMemRefType>(v.getType()) || !mayAlias(viewRoot(v), root))
          continue;
        auto effects = dyn_cast<MemoryEffectOpInterface>(inner);
        if (!effects || effects.getEffectOnValue<MemoryEffects::Write>(v) ||
            effects.getEffectOnValue<MemoryEffects::Free>(v))
          found = true;
      }
      return found ? WalkResult::interrupt() : WalkResult::advance();
    });
    return found;
  }
  /// Whether `op` (or an op inside it) has an operand that may alias `root`.
  static bool mayUse(Operation *op, Value root) {
    return op->walk([&](Operation *inner) {
             for (Value v : inner->getOperands())
               if (isa<BaseMemRefType>(v.getType()) && mayAlias(viewRoot(v), root))
                 return WalkResult::interrupt();
             return WalkResult::advance();
           }).wasInterrupted();
  }
  static bool mayAlias(Value a, Value b) {
    if (a == b)
      return true;
    if (b.getDefiningOp<memref::AllocOp>())
      return !distinctFrom(a, b);
    if (a.getDefiningOp<memref::AllocOp>())
      return !distinctFrom(b, a);
    return true;
  }
  /// A load of a pointer from the weight table, which entries never write.
  static bool loadsWeightTable(Operation *op) {
    auto load = dyn_cast<LLVM::LoadOp>(op);
    if (!load)
      return false;
    Value address = load.getAddr();
    while (auto gep = address.getDefiningOp<LLVM::GEPOp>())
      address = gep.getBase();
    auto table = address.getDefiningOp<LLVM::AddressOfOp>();
    return table && table.getGlobalName() == kimi::kGpuWeightTable;
  }
  /// A descriptor that kimi-gpu-weight-table built around a pointer of the
  /// weight table.
  static bool isWeightView(Value root) {
    auto cast = root.getDefiningOp<UnrealizedConversionCastOp>();
    if (!cast || cast.getInputs().size() != 1)
      return false;
    Value v = cast.getInputs()[0];
    while (auto insert = v.getDefiningOp<LLVM::InsertValueOp>()) {
      if (Operation *def = insert.getValue().getDefiningOp();
          def && loadsWeightTable(def))
        return true;
      v = insert.getContainer();
    }
    return false;
  }
  /// The ops of `block` that define `value` and do not dominate `point`
  /// (appended to `chain` in block order), when all of them can move up
  /// to `point`: no regions, and allocations, side-effect-free ops or
  /// weight-table loads. False when one cannot.
  static bool hoistableChain(Value value, Operation *point,
                             SetVector<Operation *> &chain) {
    Operation *def = value.getDefiningOp();
    if (!def) // a block argument: of point's block or an enclosing one
      return true;
    // The value is used in point's block: a definition in another block is
    // in an enclosing one, before point's ancestor there.
    if (def->getBlock() != point->getBlock() || def->isBeforeInBlock(point) ||
        chain.contains(def))
      return true;
    if (def->getNumRegions() != 0)
      return false;
    auto alloc = dyn_cast<memref::AllocOp>(def);
    if (!(alloc && alloc.getDynamicSizes().empty() &&
          alloc.getSymbolOperands().empty()) &&
        !isMemoryEffectFree(def) && !loadsWeightTable(def))
      return false;
    for (Value operand : def->getOperands())
      if (!hoistableChain(operand, point, chain))
        return false;
    chain.insert(def);
    return true;
  }

  /// Splits the GEMV products (in program order) into the groups that are
  /// launched together: a product joins the open group of its A when the
  /// group can be launched at its first product's place with it inside
  /// (see the pass description); the chains its weight and output need
  /// are moved up as the product joins.
  std::vector<std::vector<GemvCandidate>>
  groupGemvs(ArrayRef<GemvCandidate> gemvs) {
    std::vector<std::vector<GemvCandidate>> groups;
    SmallVector<bool> taken(gemvs.size(), false);
    for (size_t i = 0; i < gemvs.size(); ++i) {
      if (taken[i])
        continue;
      taken[i] = true;
      std::vector<GemvCandidate> group{gemvs[i]};
      Operation *first = gemvs[i].op;
      Value a = gemvs[i].op.getDpsInputs()[0], aRoot = viewRoot(a);
      const kimi::gpu::GemvKernelSpec &lead = gemvs[i].spec;
      for (size_t j = i + 1;
           j < gemvs.size() && int64_t(group.size()) < gemvMaxGroup; ++j) {
        const GemvCandidate &cand = gemvs[j];
        Operation *op = cand.op;
        Value aj = cand.op.getDpsInputs()[0];
        if (taken[j] || lead.batch > 1 || cand.spec.batch > 1 ||
            op->getBlock() != first->getBlock() ||
            viewRoot(aj) != aRoot || staticOffset(aj) != staticOffset(a) ||
            cand.spec.m != lead.m || cand.spec.k != lead.k ||
            cand.spec.lda != lead.lda ||
            cand.spec.rowsPerWarp != lead.rowsPerWarp)
          continue;
        Value w = cand.op.getDpsInputs()[1], out = cand.op.getDpsInits()[0];
        Value wRoot = viewRoot(w), outRoot = viewRoot(out);
        SetVector<Operation *> chain;
        if (!hoistableChain(w, first, chain) || !hoistableChain(out, first, chain))
          continue;
        SmallVector<Value> fusedReads = cand.fusedReads(),
                           fusedWrites = cand.fusedWrites();
        if (!llvm::all_of(llvm::concat<Value>(fusedReads, fusedWrites),
                          [&](Value v) { return hoistableChain(v, first, chain); }))
          continue;
        SmallVector<Value> fusedReadRoots, fusedWriteRoots;
        for (Value v : fusedReads)
          fusedReadRoots.push_back(viewRoot(v));
        for (Value v : fusedWrites)
          fusedWriteRoots.push_back(viewRoot(v));
        // The candidate and the group's first product run at once: neither
        // may touch what the other writes. Nothing between them (checked
        // below) may see the candidate's output or change what it reads.
        // The fused parts (pairs, epilogues) of the candidate and of the
        // group's products run at once too.
        bool clear = !mayUse(first, outRoot) && !mayWrite(op, aRoot) &&
                     llvm::none_of(group, [&](const GemvCandidate &g) {
                       return mayWrite(op, viewRoot(g.op.getDpsInputs()[1]));
                     });
        // Every buffer a product (with its fused parts) writes is one that
        // no other product of the launch reads or writes.
        SmallVector<Value> candWrites = cand.allWriteRoots(),
                           candReads = cand.allReadRoots();
        for (const GemvCandidate &g : group) {
          SmallVector<Value> gAll = g.allReadRoots();
          llvm::append_range(gAll, g.allWriteRoots());
          clear = clear && !anyAlias(candWrites, gAll) &&
                  !anyAlias(g.allWriteRoots(), candReads);
        }
        bool aChanged = false;
        for (Operation *x = first->getNextNode(); x != op && clear;
             x = x->getNextNode()) {
          // The zero fills go; the group's products are checked like any
          // other op: they run at once inside the kernel.
          if (chain.contains(x) || cand.isFill(x) ||
              llvm::any_of(group, [&](const GemvCandidate &g) {
                return g.isFill(x);
              }))
            continue;
          aChanged = mayWrite(x, aRoot);
          clear = !aChanged && !mayUse(x, outRoot) && !mayWrite(x, wRoot) &&
                  llvm::none_of(fusedWriteRoots,
                                [&](Value r) { return mayUse(x, r); }) &&
                  llvm::none_of(fusedReadRoots,
                                [&](Value r) { return mayWrite(x, r); });
        }
        if (aChanged) // written or freed: no later product joins either
          break;
        if (!clear)
          continue;
        for (Operation *def : chain)
          def->moveBefore(first);
        taken[j] = true;
        group.push_back(cand);
      }
      groups.push_back(std::move(group));
    }
    return groups;
  }

  /// The GEMV kernel's view of `op`, when it has at most gemv-max-m static
  /// rows, no batch, B as [N, K] and static, 16-byte-aligned strides.
  std::optional<kimi::gpu::GemvKernelSpec>
  asGemv(linalg::LinalgOp op, const Contraction &c, linalg::FillOp fill) {
    if (gemvMaxM <= 0)
      return std::nullopt;
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    kimi::gpu::GemvKernelSpec spec;
    if (c.batch && ShapedType::isDynamic(ranges[*c.batch]))
      return std::nullopt;
    spec.m = ranges[c.m];
    spec.n = ranges[c.n];
    spec.k = ranges[c.k];
    if (ShapedType::isDynamic(spec.m) || ShapedType::isDynamic(spec.n) ||
        ShapedType::isDynamic(spec.k) || spec.m > gemvMaxM)
      return std::nullopt;
    // Static strides per loop dim and offset of each operand.
    auto strides = [&](OpOperand &operand, SmallVector<int64_t> &perLoop,
                       int64_t &offset) {
      std::optional<SmallVector<int64_t>> s = stridesPerLoop(
          cast<MemRefType>(operand.get().getType()),
          op.getMatchingIndexingMap(&operand), op.getNumLoops(), offset);
      if (!s || offset % 4 != 0)
        return false;
      perLoop = std::move(*s);
      return true;
    };
    SmallVector<int64_t> sa, sb, sc;
    int64_t oa, ob, oc;
    if (!strides(*op.getDpsInputOperand(0), sa, oa) ||
        !strides(*op.getDpsInputOperand(1), sb, ob) ||
        !strides(*op.getDpsInitOperand(0), sc, oc))
      return std::nullopt;
    // Unit strides along k (A and B) and n (C); a unit extent has none.
    auto unit = [](int64_t stride, int64_t extent) {
      return stride == 1 || extent == 1;
    };
    if (!unit(sa[c.k], spec.k) || !unit(sb[c.k], spec.k) ||
        !unit(sc[c.n], spec.n))
      return std::nullopt;
    // A (the activation) is f32 or bf16 (bf16 activations); B may be a
    // bf16 weight. The kernel widens both in registers.
    auto elementOf = [&](Value v) {
      return cast<MemRefType>(v.getType()).getElementType();
    };
    Type aType = elementOf(op.getDpsInputs()[0]);
    if (!aType.isF32() && !aType.isBF16())
      return std::nullopt;
    spec.bf16Activations = aType.isBF16();
    spec.bf16Weights = elementOf(op.getDpsInputs()[1]).isBF16();
    spec.lda = spec.m == 1 ? 0 : sa[c.m];
    spec.ldb = spec.n == 1 ? 0 : sb[c.n];
    spec.ldc = spec.m == 1 ? 0 : sc[c.m];
    spec.rowsPerWarp = spec.m <= 2 ? 2 : 1;
    spec.accumulate = !fill;
    if (c.batch && ranges[*c.batch] > 1) {
      spec.batch = ranges[*c.batch];
      spec.batchA = sa[*c.batch];
      spec.batchB = sb[*c.batch];
      spec.batchC = sc[*c.batch];
    }
    std::string why;
    if (failed(kimi::gpu::verifyGemvKernelSpec(spec, why)))
      return std::nullopt;
    return spec;
  }

  void launchGemv(kimi::gpu::GeneratedKernels &kernels,
                  ArrayRef<GemvCandidate> group) {
    linalg::LinalgOp first = group.front().op;
    Location loc = first.getLoc();
    kimi::gpu::GemvGroupSpec spec;
    int64_t rows = 0;
    for (const GemvCandidate &g : group) {
      spec.products.push_back(g.spec);
      rows += g.spec.n * g.spec.batch;
      if (g.fill)
        g.fill->erase();
      if (g.secondFill)
        g.secondFill->erase();
    }
    // About 32 warps an SM: enough loads in flight to keep HBM busy.
    spec.kSplit = kimi::gpu::chooseGemvKSplit(
        rows, spec.products.front().k, spec.products.front().rowsPerWarp,
        32 * smCount);
    // A second vector's k1 must split into the same shares.
    for (const kimi::gpu::GemvKernelSpec &p : spec.products)
      while (spec.kSplit > 1 && p.k1 % (spec.kSplit * 4) != 0)
        spec.kSplit /= 2;
    std::string name = "gemv_" + spec.key();
    mlir::gpu::GPUFuncOp fn =
        kernels.get(spec.identity(), [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
          return kimi::gpu::emitGemvKernel(mb, loc, m, name, spec);
        });
    OpBuilder b(first);
    // Each buffer as a flat view from its first element (its static offset
    // kept), cast to the kernel's memref<?xT, strided<[1], offset: ?>>.
    auto flat = [&](Value buffer) -> Value {
      auto type = cast<MemRefType>(buffer.getType());
      SmallVector<int64_t> strides;
      int64_t offset;
      (void)type.getStridesAndOffset(strides, offset);
      int64_t extent = 1;
      for (auto [size, stride] : llvm::zip(type.getShape(), strides))
        extent += (size - 1) * stride;
      auto view = memref::ReinterpretCastOp::create(
          b, loc,
          MemRefType::get({extent}, type.getElementType(),
                          StridedLayoutAttr::get(&getContext(), offset, {1})),
          buffer, offset, ArrayRef<int64_t>{extent}, ArrayRef<int64_t>{1});
      return memref::CastOp::create(
          b, loc,
          kimi::gpu::gemvBufferType(&getContext(), type.getElementType()),
          view);
    };
    SmallVector<Value> args{flat(first.getDpsInputs()[0])};
    for (const GemvCandidate &g : group) {
      args.push_back(flat(g.op.getDpsInputs()[1]));
      args.push_back(flat(g.op.getDpsInits()[0]));
      if (g.second) {
        args.push_back(flat(g.second.getDpsInputs()[1]));
        args.push_back(flat(g.second.getDpsInits()[0]));
      }
      if (g.out) {
        args.push_back(flat(g.out));
        for (Value x : g.extras)
          args.push_back(flat(x));
      }
      if (g.spec.k1 > 0)
        args.push_back(flat(g.second.getDpsInputs()[0]));
    }
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    mlir::gpu::LaunchFuncOp::create(
        b, loc, fn, mlir::gpu::KernelDim3{c(kimi::gpu::gemvBlocks(spec)), c(1), c(1)},
        mlir::gpu::KernelDim3{c(kimi::gpu::kGemvThreads), c(1), c(1)}, Value(),
        ValueRange(args));
    for (const GemvCandidate &g : group) {
      if (g.epilogue)
        g.epilogue->erase();
      if (g.second)
        g.second->erase();
      g.op->erase();
    }
  }

  /// The only linalg.generic among `alloc`'s users other than `besides`
  /// and deallocations, or null (none, several, or any other user).
  static linalg::GenericOp onlyGenericUser(memref::AllocOp alloc,
                                           ArrayRef<Operation *> besides) {
    linalg::GenericOp only;
    for (Operation *user : alloc->getUsers()) {
      if (llvm::is_contained(besides, user) || isa<memref::DeallocOp>(user))
        continue;
      auto g = dyn_cast<linalg::GenericOp>(user);
      if (!g || only)
        return {};
      only = g;
    }
    return only;
  }

  static bool allParallel(linalg::LinalgOp op) {
    return llvm::all_of(op.getIteratorTypesArray(), [](utils::IteratorType t) {
      return t == utils::IteratorType::parallel;
    });
  }

  /// The elementwise op that writes all of `buffer` for `product` alone,
  /// when it can store its values rounded instead: an allocation whose
  /// only other users are that `linalg.generic` (its one output, identity
  /// map, all loops parallel, the output's old values unread, in `product`'s
  /// block before it) and deallocations.
  static linalg::GenericOp soleProducer(Value buffer, Operation *product) {
    auto alloc = buffer.getDefiningOp<memref::AllocOp>();
    if (!alloc)
      return {};
    linalg::GenericOp producer = onlyGenericUser(alloc, {product});
    if (!producer || producer->getBlock() != product->getBlock() ||
        !producer->isBeforeInBlock(product) ||
        !producer.hasPureBufferSemantics() || producer.getNumDpsInits() != 1 ||
        producer.getDpsInits()[0] != buffer ||
        llvm::is_contained(producer.getDpsInputs(), buffer) ||
        !producer.getMatchingIndexingMap(producer.getDpsInitOperand(0))
             .isIdentity() ||
        !allParallel(producer) ||
        !producer.getMatchingBlockArgument(producer.getDpsInitOperand(0))
             .use_empty())
      return {};
    return producer;
  }

  /// `buffer` at element type `to`, for `product` to read: itself, or a new
  /// buffer of its shape that a generic fills with its values converted (a
  /// bf16 weight widened before an f32 product, exact; f32 activations
  /// rounded to nearest even before a bf16 product), freed after the
  /// product. Where an elementwise op computes the f32 values for the
  /// product alone (SiTU of a routed expert's gate and up), that op stores
  /// them rounded instead, and the f32 buffer goes: the same values, one
  /// pass over memory fewer.
  static Value convertOperand(OpBuilder &b, Location loc, Value buffer,
                              Type to, Operation *product,
                              SmallVector<Value> &temporaries) {
    auto type = cast<MemRefType>(buffer.getType());
    if (type.getElementType() == to)
      return buffer;
    if (linalg::GenericOp producer =
            to.getIntOrFloatBitWidth() < type.getElementTypeBitWidth()
                ? soleProducer(buffer, product)
                : linalg::GenericOp()) {
      auto old = buffer.getDefiningOp<memref::AllocOp>();
      OpBuilder pb(producer);
      auto rounded = memref::AllocOp::create(
          pb, old.getLoc(), MemRefType::get(type.getShape(), to),
          old.getDynamicSizes(), old.getSymbolOperands(),
          old.getAlignmentAttr());
      producer.getDpsInitsMutable()[0].set(rounded.getResult());
      producer.getMatchingBlockArgument(producer.getDpsInitOperand(0))
          .setType(to);
      Operation *yield = producer.getRegion().front().getTerminator();
      pb.setInsertionPoint(yield);
      yield->setOperand(0, arith::TruncFOp::create(pb, loc, to,
                                                   yield->getOperand(0)));
      // The product is the f32 allocation's last user now; rewrite()
      // erases it with the product.
      for (Operation *user : llvm::make_early_inc_range(old->getUsers()))
        if (isa<memref::DeallocOp>(user))
          user->erase();
      temporaries.push_back(rounded);
      return rounded;
    }
    SmallVector<Value> dynamic;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        dynamic.push_back(memref::DimOp::create(b, loc, buffer, d));
    auto wide = memref::AllocOp::create(
        b, loc, MemRefType::get(type.getShape(), to), dynamic);
    AffineMap id = b.getMultiDimIdentityMap(type.getRank());
    linalg::GenericOp::create(
        b, loc, ValueRange{buffer}, ValueRange{wide.getResult()},
        ArrayRef<AffineMap>{id, id},
        SmallVector<utils::IteratorType>(type.getRank(),
                                         utils::IteratorType::parallel),
        [&](OpBuilder &nb, Location nl, ValueRange args) {
          Value v = to.getIntOrFloatBitWidth() >
                            args[0].getType().getIntOrFloatBitWidth()
                        ? Value(arith::ExtFOp::create(nb, nl, to, args[0]))
                        : Value(arith::TruncFOp::create(nb, nl, to, args[0]));
          linalg::YieldOp::create(nb, nl, v);
        });
    temporaries.push_back(wide);
    return wide;
  }

  /// The op that rounds the f32 result of the bf16 product `op` to bf16, if
  /// cuBLASLt can do it at the store instead (docs/runtime-abi.md, flag
  /// bit 2): a `linalg.generic` whose body is one `arith.truncf` of its one
  /// input, `op`'s C, into a bf16 buffer of C's shape, with identity maps
  /// and parallel loops. C must be an allocation that nothing else uses
  /// (its zero fill, `fill`, goes with the rewrite; deallocations may stay),
  /// and the product writing the bf16 buffer earlier than the generic did
  /// must be unobservable: the buffer's view exists at the product, and
  /// every op between the two is side-effect free, an allocation, or leaves
  /// the buffer's allocation alone. Null when any of that does not hold.
  /// The op of `op`'s block after `op` that defines `v`, or null.
  static Operation *definedAfter(Value v, Operation *op) {
    Operation *def = v.getDefiningOp();
    return def && def->getBlock() == op->getBlock() && op->isBeforeInBlock(def)
               ? def
               : nullptr;
  }

  static linalg::GenericOp roundingOf(linalg::LinalgOp op, linalg::FillOp fill,
                                      const Contraction &c) {
    Value out = op.getDpsInits()[0];
    auto alloc = out.getDefiningOp<memref::AllocOp>();
    if (!fill || !alloc)
      return {};
    linalg::GenericOp rounding =
        onlyGenericUser(alloc, {op.getOperation(), fill.getOperation()});
    if (!rounding || rounding->getBlock() != op->getBlock() ||
        !op->isBeforeInBlock(rounding) || !rounding.hasPureBufferSemantics() ||
        rounding.getNumDpsInputs() != 1 || rounding.getNumDpsInits() != 1 ||
        rounding.getDpsInputs()[0] != out || !allParallel(rounding) ||
        !llvm::all_of(rounding.getIndexingMapsArray(),
                      [](AffineMap m) { return m.isIdentity(); }))
      return {};
    Value result = rounding.getDpsInits()[0];
    auto outType = cast<MemRefType>(out.getType());
    auto resultType = dyn_cast<MemRefType>(result.getType());
    if (!resultType || !resultType.getElementType().isBF16() ||
        resultType.getShape() != outType.getShape())
      return {};
    Block &body = rounding.getRegion().front();
    auto trunc = dyn_cast<arith::TruncFOp>(&body.front());
    if (!trunc || trunc->getNextNode() != body.getTerminator() ||
        trunc.getIn() != body.getArgument(0) ||
        body.getTerminator()->getOperand(0) != trunc.getResult())
      return {};
    // cuBLASLt's unit-stride rule for the new C.
    if (!hasUnitStrideAmong(result, op.getIndexingMapsArray()[2], {c.m, c.n}))
      return {};
    // Bufferization allocates the rounding's output after the product: such
    // an allocation moves up to the product (its sizes permitting). Values
    // of enclosing blocks dominate the product already.
    if (Operation *def = definedAfter(result, op))
      if (!isa<memref::AllocOp>(def) ||
          llvm::any_of(def->getOperands(),
                       [&](Value v) { return definedAfter(v, op); }))
        return {};
    Value root = viewRoot(result);
    Value resultAlloc = root.getDefiningOp<memref::AllocOp>() ? root : Value();
    for (Operation *x = op->getNextNode(); x != rounding; x = x->getNextNode())
      if (!isPure(x) && !isa<memref::AllocOp>(x) &&
          !leavesAllocation(x, resultAlloc))
        return {};
    return rounding;
  }

  void rewrite(OpBuilder &b, linalg::LinalgOp op, const Contraction &c,
               linalg::FillOp fill) {
    Location loc = op.getLoc();
    b.setInsertionPoint(op);
    SmallVector<Value> temporaries;
    // The operands at the product's type, C f32. Two bf16 operands run as
    // they are on bf16 tensor cores (their products are exact in f32, the
    // sums f32), and so does a bf16 weight with f32 activations rounded to
    // bf16 under bf16-weight-products; otherwise a bf16 operand is widened
    // and the product is f32 or TF32.
    auto isBf16 = [](Value v) {
      return cast<MemRefType>(v.getType()).getElementType().isBF16();
    };
    const unsigned bf16Operands =
        isBf16(op.getDpsInputs()[0]) + isBf16(op.getDpsInputs()[1]);
    const bool bf16Product =
        bf16Operands == 2 || (bf16Operands == 1 && bf16WeightProducts);
    Type operandType =
        bf16Product ? Type(b.getBF16Type()) : Type(b.getF32Type());
    Value inA = convertOperand(b, loc, op.getDpsInputs()[0], operandType, op,
                               temporaries);
    Value inB = convertOperand(b, loc, op.getDpsInputs()[1], operandType, op,
                               temporaries);
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    // (address, stride per loop dim) of one operand.
    auto describe = [&](Value memref, AffineMap map,
                        SmallVector<Value> &strides) -> Value {
      auto meta = memref::ExtractStridedMetadataOp::create(b, loc, memref);
      Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
      Value elementBytes = arith::ConstantIndexOp::create(
          b, loc,
          cast<MemRefType>(memref.getType()).getElementTypeBitWidth() / 8);
      Value offset = arith::MulIOp::create(b, loc, meta.getOffset(), elementBytes);
      strides.assign(op.getNumLoops(), zero);
      for (unsigned r = 0; r < map.getNumResults(); ++r)
        strides[map.getDimPosition(r)] = meta.getStrides()[r];
      return arith::AddIOp::create(b, loc, base, offset);
    };
    auto maps = op.getIndexingMapsArray();
    SmallVector<Value> sa, sb, sc;
    Value a = describe(inA, maps[0], sa);
    Value bAddr = describe(inB, maps[1], sb);
    // A bf16 product whose f32 result is only rounded to bf16 stores the
    // bf16 values itself: C is the rounding's output, and the f32 buffer,
    // the rounding and their pass over C go.
    linalg::GenericOp rounding =
        bf16Product ? roundingOf(op, fill, c) : linalg::GenericOp();
    if (rounding)
      if (Operation *def = definedAfter(rounding.getDpsInits()[0], op)) {
        def->moveBefore(op);
        b.setInsertionPoint(op);
      }
    Value out = describe(rounding ? rounding.getDpsInits()[0]
                                  : op.getDpsInits()[0],
                         maps[2], sc);
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
    Value prec = arith::ConstantIndexOp::create(
        b, loc, bf16Product ? 2 : precision == "tf32" ? 1 : 0);
    // Flags (docs/runtime-abi.md). Sizes known here recur on every call: the
    // runtime times cuBLASLt's candidates for them once; a size that depends
    // on the data or the cache length would be timed at every new value.
    bool staticShape = llvm::all_of(
        SmallVector<std::optional<unsigned>>{c.m, c.n, c.k, c.batch},
        [&](std::optional<unsigned> d) {
          return !d || getConstantIntValue(ranges[*d].size).has_value();
        });
    int64_t flags = (staticShape ? kGemmStaticShape : 0) |
                    (fill ? kGemmOverwrite : 0) | (rounding ? kGemmBf16C : 0);
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
    for (Value t : temporaries)
      memref::DeallocOp::create(b, loc, t);
    Value f32C = op.getDpsInits()[0];
    SmallVector<Value> inputs(op.getDpsInputs());
    op->erase();
    // An input whose producer now stores rounded values (convertOperand).
    for (Value in : inputs)
      if (auto alloc = in.getDefiningOp<memref::AllocOp>(); alloc && alloc->use_empty())
        alloc->erase();
    if (rounding) {
      rounding->erase();
      Operation *alloc = f32C.getDefiningOp();
      for (Operation *user : llvm::make_early_inc_range(alloc->getUsers()))
        user->erase(); // its deallocations
      alloc->erase();
    }
  }
};
} // namespace

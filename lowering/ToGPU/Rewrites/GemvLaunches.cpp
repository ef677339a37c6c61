//===- GemvLaunches.cpp - products of a few rows as GEMV launches ---------===//
//
// See GemvLaunches.h and kimi-gpu-gemm-calls in lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Rewrites/GemvLaunches.h"
#include "lowering/Passes.h"
#include "lowering/ToGPU/Kernels/GemvKernel.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace kimi::gpu {

struct GemvLaunches::Impl {
  Impl(ModuleOp module, const GemvLaunchOptions &options)
      : gemvMaxM(options.maxM), gemvMaxGroup(options.maxGroup),
        gemvEpilogues(options.epilogues), smCount(options.smCount),
        prefetchWeights(options.prefetchWeights), ctx(module.getContext()),
        kernels(module, "kimi_gemv") {}

  int64_t gemvMaxM, gemvMaxGroup;
  bool gemvEpilogues;
  int64_t smCount;
  bool prefetchWeights;
  MLIRContext *ctx;
  GeneratedKernels kernels;

  MLIRContext &getContext() { return *ctx; }

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
        // (bindEpilogue took an earlier product only where it can run at
        // this one, and pairable with it.)
        if (q->getBlock() != p->getBlock() || !q->isBeforeInBlock(g) ||
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
    spec.prefetchWeights = prefetchWeights;
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


  std::vector<GemvCandidate> gemvs;
};

GemvLaunches::GemvLaunches(ModuleOp module, const GemvLaunchOptions &options)
    : impl(std::make_unique<Impl>(module, options)) {}

GemvLaunches::~GemvLaunches() = default;

bool GemvLaunches::take(linalg::LinalgOp op, const Contraction &c,
                        linalg::FillOp fill) {
  std::optional<GemvKernelSpec> gemv = impl->asGemv(op, c, fill);
  if (!gemv)
    return false;
  impl->gemvs.push_back({op, *gemv, fill});
  impl->gemvs.back().c = c;
  return true;
}

void GemvLaunches::launch() {
  if (impl->gemvEpilogues)
    impl->fuseEpilogues(impl->gemvs);
  for (std::vector<Impl::GemvCandidate> &group : impl->groupGemvs(impl->gemvs))
    impl->launchGemv(impl->kernels, group);
  impl->gemvs.clear();
}

} // namespace kimi::gpu

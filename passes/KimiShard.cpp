//===- KimiShard.cpp - kimi-shard, kimi-localize-weights ------------------===//
//
// kimi-shard places parameters, state, tokens and logits on the @supernode
// grid (see Passes.td and docs/passes/shard.md); sharding-propagation and
// shard-partition do the rest. kimi-localize-weights turns the partitioned
// weight references into per-rank declarations.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include <cstring>

namespace kimi {
#define GEN_PASS_DEF_KIMISHARD
#define GEN_PASS_DEF_KIMILOCALIZEWEIGHTS
#include "passes/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace mlir::shard;
using namespace kimi;

namespace {

constexpr llvm::StringLiteral kGridName = "supernode";

/// Which grid axes each strategy uses.
struct Layout {
  bool tp = false, ep = false, dp = false, sp = false;
  SmallVector<GridAxis> tpAxes, epAxes, dpAxes;
  SmallVector<int64_t> shape;

  int64_t size(ArrayRef<GridAxis> axes) const {
    int64_t n = 1;
    for (GridAxis a : axes)
      n *= shape[a];
    return n;
  }
};

/// A split of one tensor dimension over some grid axes, and why.
struct Split {
  int64_t dim = -1;
  SmallVector<GridAxis> axes;
  const char *strategy = "";
  bool any() const { return dim >= 0; }
};

bool endsWithAny(StringRef name, ArrayRef<StringRef> suffixes) {
  return llvm::any_of(suffixes, [&](StringRef s) { return name.ends_with(s); });
}

/// Where a parameter lives, from its Hugging Face name.
Split weightSplit(StringRef name, const Layout &l) {
  Split s;
  auto use = [&](int64_t dim, ArrayRef<GridAxis> axes, const char *why) {
    s.dim = dim;
    s.axes.assign(axes.begin(), axes.end());
    s.strategy = why;
    return s;
  };
  if (name.contains(".experts.{e}.") || name.contains(".experts.")) {
    bool down = name.contains("down_proj") || name.contains(".w2.");
    if (l.ep)
      return use(0, l.epAxes, "ep");
    if (l.tp)
      return use(down ? 2 : 1, l.tpAxes, "tp");
    return s;
  }
  if (!l.tp)
    return s;
  if (endsWithAny(name,
                  {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                   "self_attn.v_proj.weight", "self_attn.q_conv1d.weight",
                   "self_attn.k_conv1d.weight", "self_attn.v_conv1d.weight",
                   "self_attn.f_b_proj.weight", "self_attn.A_log",
                   "self_attn.dt_bias", "self_attn.b_proj.weight",
                   "self_attn.g_proj.weight", "self_attn.g_b_proj.weight",
                   "self_attn.q_b_proj.weight", "self_attn.kv_b_proj.weight",
                   "mlp.gate_proj.weight", "mlp.up_proj.weight",
                   "shared_experts.gate_proj.weight",
                   "shared_experts.up_proj.weight", "lm_head.weight"}))
    return use(0, l.tpAxes, "tp");
  if (endsWithAny(name, {"self_attn.o_proj.weight", "mlp.down_proj.weight",
                         "shared_experts.down_proj.weight"}))
    return use(1, l.tpAxes, "tp");
  return s;
}

/// Where a function's argument or result lives: activations (tokens, hidden
/// states, logits) by batch (dp) or sequence (sp); KDA state by heads, conv
/// state by channels (tp); other states by batch (dp).
Split valueSplit(StringRef stateName, bool isActivation, const Layout &l) {
  Split s;
  if (l.dp) {
    s.dim = 0;
    s.axes = l.dpAxes;
    s.strategy = "dp";
    return s;
  }
  if (isActivation) {
    if (l.sp) {
      s.dim = 1;
      s.axes = l.dpAxes;
      s.strategy = "sp";
    }
    return s;
  }
  if (l.tp && stateName.ends_with("kda_state")) {
    s.dim = 1;
    s.axes = l.tpAxes;
    s.strategy = "tp";
  } else if (l.tp && stateName.ends_with("_conv_state")) {
    s.dim = 2;
    s.axes = l.tpAxes;
    s.strategy = "tp";
  }
  return s;
}

Sharding shardingOf(MLIRContext *ctx, const Split &s) {
  // Replication is written [[]] (an empty list does not round-trip).
  SmallVector<GridAxesAttr> axes = {GridAxesAttr::get(ctx, ArrayRef<GridAxis>{})};
  if (s.any()) {
    axes.resize(s.dim + 1, GridAxesAttr::get(ctx, ArrayRef<GridAxis>{}));
    axes[s.dim] = GridAxesAttr::get(ctx, s.axes);
  }
  return Sharding::get(FlatSymbolRefAttr::get(ctx, kGridName), axes);
}

struct KimiShard : kimi::impl::KimiShardBase<KimiShard> {
  using KimiShardBase::KimiShardBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Layout layout;
    if (failed(parseOptions(module, layout)))
      return signalPassFailure();
    OpBuilder b(module.getBodyRegion());
    if (!module.lookupSymbol<GridOp>(kGridName))
      GridOp::create(b, module.getLoc(), kGridName, layout.shape);
    // The runtime gives each data-parallel group its own sequences.
    if (layout.dp)
      module->setAttr("kimi.data_parallel",
                      b.getI64IntegerAttr(layout.size(layout.dpAxes)));
    llvm::DenseMap<Operation *, Signature> sigs;
    SmallVector<func::FuncOp> fns;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      FailureOr<Signature> sig = signatureOf(fn, layout);
      if (failed(checkHeads(fn, layout)) || failed(sig))
        return signalPassFailure();
      sigs[fn] = std::move(*sig);
      fns.push_back(fn);
    }
    for (func::FuncOp fn : fns)
      if (failed(annotate(fn, layout, sigs)))
        return signalPassFailure();
  }

  LogicalResult parseOptions(ModuleOp module, Layout &l) {
    if (grid.empty() || grid.size() > 2 ||
        llvm::any_of(grid, [](int64_t n) { return n < 1; }))
      return module.emitError()
             << "kimi-shard: grid must be one or two positive sizes "
                "(grid=8 or grid=8,8)";
    l.shape.assign(grid.begin(), grid.end());
    for (const std::string &s : strategy) {
      if (s == "tp")
        l.tp = true;
      else if (s == "ep")
        l.ep = true;
      else if (s == "dp")
        l.dp = true;
      else if (s == "sp")
        l.sp = true;
      else
        return module.emitError() << "kimi-shard: unknown strategy '" << s
                                  << "' (expected tp, ep, dp or sp)";
    }
    if (l.dp && l.sp)
      return module.emitError()
             << "kimi-shard: strategies dp and sp both split the tokens; "
                "pick one";
    GridAxis inner = l.shape.size() - 1;
    l.tpAxes = {inner};
    l.dpAxes = {0};
    for (GridAxis a = 0; a < static_cast<GridAxis>(l.shape.size()); ++a)
      l.epAxes.push_back(a);
    return success();
  }

  /// Head counts must divide over the TP group: the error names the op.
  LogicalResult checkHeads(func::FuncOp fn, const Layout &l) {
    if (!l.tp)
      return success();
    int64_t group = l.size(l.tpAxes);
    auto check = [&](Operation *op, Value q) -> LogicalResult {
      int64_t heads = cast<RankedTensorType>(q.getType()).getDimSize(2);
      if (heads % group == 0)
        return success();
      return op->emitOpError()
             << "strategy tp splits " << heads << " heads (dim 2 of q) over "
             << group << " devices: not divisible";
    };
    WalkResult r = fn.walk([&](Operation *op) {
      LogicalResult ok = success();
      if (auto kda = dyn_cast<KdaOp>(op))
        ok = check(op, kda.getQ());
      else if (auto mla = dyn_cast<MlaOp>(op))
        ok = check(op, mla.getQ());
      else if (auto mla = dyn_cast<MlaDecodeOp>(op))
        ok = check(op, mla.getQ());
      return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
    });
    return failure(r.wasInterrupted());
  }

  LogicalResult checkDivides(Operation *op, Type type, const Split &s,
                             const Layout &l, const Twine &what) {
    if (!s.any())
      return success();
    auto t = cast<RankedTensorType>(type);
    int64_t size = t.getDimSize(s.dim), parts = l.size(s.axes);
    if (s.dim < t.getRank() && !ShapedType::isDynamic(size) &&
        size % parts == 0)
      return success();
    return op->emitOpError() << "strategy " << s.strategy << " splits dim "
                             << s.dim << " of " << what << " (" << t
                             << ") over " << parts
                             << " devices: not divisible";
  }

  /// Shardings of a function's arguments and results (null: not a tensor).
  struct Signature {
    SmallVector<Split> args, results;
  };

  /// Where each argument and result of `fn` lives: named states by the
  /// state rules, the entry's tokens and every other activation (hidden
  /// state, AttnRes sources, logits) by dp / sp.
  FailureOr<Signature> signatureOf(func::FuncOp fn, const Layout &l) {
    Signature sig;
    FunctionType type = fn.getFunctionType();
    auto place = [&](Type t, StringAttr name, const Twine &what,
                     SmallVector<Split> &out) -> LogicalResult {
      Split s = valueSplit(name ? name.getValue() : "", !name, l);
      // Sequence parallelism splits the prompt inside the model: the entry
      // takes all tokens and returns all logits (the runtime's contract),
      // and a single token (decode) is not split.
      auto tt = dyn_cast<RankedTensorType>(t);
      if (s.any() && !strcmp(s.strategy, "sp") &&
          (fn.isPublic() || !tt || tt.getRank() < 2 || tt.getDimSize(1) == 1))
        s = Split();
      if (isa<RankedTensorType>(t) && failed(checkDivides(fn, t, s, l, what)))
        return failure();
      out.push_back(s);
      return success();
    };
    for (unsigned i = 0; i < type.getNumInputs(); ++i)
      if (failed(place(type.getInput(i),
                       fn.getArgAttrOfType<StringAttr>(i, "kimi.state"),
                       "argument " + Twine(i), sig.args)))
        return failure();
    for (unsigned i = 0; i < type.getNumResults(); ++i)
      if (failed(place(type.getResult(i),
                       fn.getResultAttrOfType<StringAttr>(i, "kimi.state"),
                       "result " + Twine(i), sig.results)))
        return failure();
    return sig;
  }

  /// `shard.shard %v to <s>` (for users: the value as an operand needs it).
  Value annotateValue(OpBuilder &b, Location loc, Value v, const Split &s,
                      bool forUsers) {
    Value sharding =
        ShardingOp::create(b, loc, shardingOf(b.getContext(), s));
    return ShardOp::create(b, loc, v, sharding, forUsers).getResult();
  }

  LogicalResult annotate(func::FuncOp fn, const Layout &l,
                         const llvm::DenseMap<Operation *, Signature> &sigs) {
    MLIRContext *ctx = fn.getContext();
    OpBuilder b(ctx);

    // Parameters.
    SmallVector<WeightRefOp> refs(fn.getOps<WeightRefOp>());
    for (WeightRefOp ref : refs) {
      Split s = weightSplit(ref.getName(), l);
      if (failed(checkDivides(ref, ref.getType(), s, l,
                              "@\"" + ref.getName() + "\"")))
        return failure();
      b.setInsertionPointAfter(ref);
      maybeInsertTargetShardingAnnotation(shardingOf(ctx, s),
                                          cast<OpResult>(ref.getResult()), b);
    }

    // Calls (layer functions): operands and results as the callee has them.
    SmallVector<func::CallOp> calls(fn.getOps<func::CallOp>());
    for (func::CallOp call : calls) {
      auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
          call, call.getCalleeAttr());
      auto it = callee ? sigs.find(callee) : sigs.end();
      if (it == sigs.end())
        return call.emitOpError()
               << "kimi-shard: callee @" << call.getCallee()
               << " is not a function with a body in this module";
      b.setInsertionPoint(call);
      for (OpOperand &operand : call->getOpOperands())
        if (isa<RankedTensorType>(operand.get().getType()))
          operand.set(annotateValue(b, call.getLoc(), operand.get(),
                                    it->second.args[operand.getOperandNumber()],
                                    /*forUsers=*/true));
      b.setInsertionPointAfter(call);
      for (OpResult r : call->getResults()) {
        if (!isa<RankedTensorType>(r.getType()))
          continue;
        Value shard = annotateValue(b, call.getLoc(), r,
                                    it->second.results[r.getResultNumber()],
                                    /*forUsers=*/false);
        r.replaceAllUsesExcept(shard, shard.getDefiningOp());
      }
    }

    const Signature &sig = sigs.at(fn);
    Block &body = fn.getBody().front();
    b.setInsertionPointToStart(&body);
    for (BlockArgument arg : body.getArguments()) {
      if (!isa<RankedTensorType>(arg.getType()))
        continue;
      Value shard = annotateValue(b, fn.getLoc(), arg,
                                  sig.args[arg.getArgNumber()],
                                  /*forUsers=*/false);
      arg.replaceAllUsesExcept(shard, shard.getDefiningOp());
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    b.setInsertionPoint(ret);
    for (OpOperand &operand : ret->getOpOperands()) {
      auto type = dyn_cast<RankedTensorType>(operand.get().getType());
      if (!type)
        continue;
      Value v = operand.get();
      // An entry's logits under sp and tp come out split two ways (tokens
      // over the outer axis, vocabulary over the inner one); upstream
      // resharding to replicated undoes one split only, so gather the
      // vocabulary first, then the tokens.
      if (l.sp && l.tp && fn.isPublic() && type.getRank() == 3 &&
          type.getDimSize(1) != 1 &&
          !fn.getResultAttr(operand.getOperandNumber(), "kimi.state")) {
        // [tokens: sp, vocab: tp] -> [tokens: sp] -> replicated.
        auto both = Sharding::get(
            FlatSymbolRefAttr::get(ctx, kGridName),
            {GridAxesAttr::get(ctx, ArrayRef<GridAxis>{}),
             GridAxesAttr::get(ctx, l.dpAxes), GridAxesAttr::get(ctx, l.tpAxes)});
        Split tokens;
        tokens.dim = 1;
        tokens.axes = l.dpAxes;
        tokens.strategy = "sp";
        Value sBoth = ShardingOp::create(b, fn.getLoc(), both);
        v = ShardOp::create(b, fn.getLoc(), v, sBoth, false).getResult();
        v = annotateValue(b, fn.getLoc(), v, tokens, /*forUsers=*/true);
        v = annotateValue(b, fn.getLoc(), v, tokens, /*forUsers=*/false);
      }
      operand.set(annotateValue(b, fn.getLoc(), v,
                                sig.results[operand.getOperandNumber()],
                                /*forUsers=*/true));
    }
    return success();
  }
};

struct KimiLocalizeWeights
    : kimi::impl::KimiLocalizeWeightsBase<KimiLocalizeWeights> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<WeightRefOp> first;
    bool ok = true;
    module.walk([&](WeightRefOp ref) {
      auto [it, inserted] = first.try_emplace(ref.getName(), ref);
      if (inserted)
        return;
      WeightRefOp other = it->second;
      if (other.getType() != ref.getType() ||
          other.getPartsAttr() != ref.getPartsAttr()) {
        ref.emitOpError() << "reads @\"" << ref.getName() << "\" as "
                          << ref.getType() << " but another reference reads "
                          << "it as " << other.getType()
                          << ": a weight must be split the same way everywhere";
        ok = false;
      }
    });
    if (!ok)
      return signalPassFailure();
    for (auto weight : module.getOps<WeightOp>()) {
      auto it = first.find(weight.getSymName());
      if (it == first.end() || !it->second.getParts())
        continue;
      weight.setType(it->second.getType());
      weight.setPartsAttr(it->second.getPartsAttr());
    }
    module.walk([&](WeightRefOp ref) { ref.removePartsAttr(); });
  }
};

} // namespace

void kimi::buildPartitionPipeline(OpPassManager &pm, ArrayRef<int64_t> grid,
                                  ArrayRef<std::string> strategies) {
  KimiShardOptions options;
  options.grid.assign(grid.begin(), grid.end());
  options.strategy.assign(strategies.begin(), strategies.end());
  pm.addPass(createKimiShard(options));
  OpPassManager &fn = pm.nest<func::FuncOp>();
  shard::ShardingPropagationOptions propagation;
  propagation.traversal = shard::TraversalOrder::Forward;
  fn.addPass(shard::createShardingPropagation(propagation));
  fn.addPass(shard::createPartition());
  pm.addPass(createKimiLocalizeWeights());
  pm.addPass(createCanonicalizerPass());
}

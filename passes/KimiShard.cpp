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
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

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

/// Where an entry's argument or result lives: tokens and logits by batch
/// (dp) or sequence (sp); KDA state by heads, conv state by channels (tp).
Split valueSplit(StringRef stateName, bool isTokensOrLogits, const Layout &l) {
  Split s;
  if (l.dp) {
    s.dim = 0;
    s.axes = l.dpAxes;
    s.strategy = "dp";
    return s;
  }
  if (isTokensOrLogits) {
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
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      if (failed(checkHeads(fn, layout)) || failed(annotate(fn, layout)))
        return signalPassFailure();
    }
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

  LogicalResult annotate(func::FuncOp fn, const Layout &l) {
    MLIRContext *ctx = fn.getContext();
    OpBuilder b(ctx);
    bool entry = fn.isPublic();
    WalkResult calls = fn.walk([&](func::CallOp call) {
      call.emitOpError() << "kimi-shard needs a call-free function; run "
                            "'inline' first (call to @"
                         << call.getCallee() << ")";
      return WalkResult::interrupt();
    });
    if (calls.wasInterrupted())
      return failure();

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

    // Arguments: tokens first, then the named states.
    Block &body = fn.getBody().front();
    b.setInsertionPointToStart(&body);
    for (BlockArgument arg : body.getArguments()) {
      auto t = dyn_cast<RankedTensorType>(arg.getType());
      if (!t)
        continue;
      auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  "kimi.state");
      Split s = valueSplit(name ? name.getValue() : "",
                           entry && arg.getArgNumber() == 0, l);
      if (failed(checkDivides(fn, t, s, l,
                              "argument " + Twine(arg.getArgNumber()))))
        return failure();
      Value sharding = ShardingOp::create(b, fn.getLoc(), shardingOf(ctx, s));
      auto shard = ShardOp::create(b, fn.getLoc(), arg, sharding);
      arg.replaceAllUsesExcept(shard.getResult(), shard);
    }

    // Results: logits first, then the named states.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    b.setInsertionPoint(ret);
    for (OpOperand &operand : ret->getOpOperands()) {
      auto t = dyn_cast<RankedTensorType>(operand.get().getType());
      if (!t)
        continue;
      unsigned i = operand.getOperandNumber();
      auto name = fn.getResultAttrOfType<StringAttr>(i, "kimi.state");
      Split s = valueSplit(name ? name.getValue() : "", entry && i == 0, l);
      if (failed(checkDivides(fn, t, s, l, "result " + Twine(i))))
        return failure();
      Value sharding = ShardingOp::create(b, fn.getLoc(), shardingOf(ctx, s));
      auto shard = ShardOp::create(b, fn.getLoc(), operand.get(), sharding,
                                   /*annotate_for_users=*/true);
      operand.set(shard.getResult());
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
  pm.addPass(createInlinerPass());
  pm.addPass(createSymbolDCEPass());
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

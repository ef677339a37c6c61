//===- Passes.td - kimi analyses and transforms ------------*- tablegen -*-===//
//
// One entry per pass. The rationale of each pass is in docs/passes/.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_PASSES_TD
#define KIMI_PASSES_TD

include "mlir/Pass/PassBase.td"

def KimiProveDecayBounds : Pass<"kimi-prove-decay-bounds", "::mlir::ModuleOp"> {
  let summary = "Prove an interval for the log decay of every kimi.kda";
  let description = [{
    Runs the decay-bound analysis, a sparse forward dataflow analysis over
    intervals of reals with open or closed, possibly infinite, ends, on the
    whole module (calls into private functions are followed), and attaches to
    every `kimi.kda` the interval proven for its `g` operand:

    ```mlir
    %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125)
        {kimi.decay_interval = #kimi.interval<lower = -5.0, upper = 0.0>} : ...
    ```

    The interval encloses every element of `g`. Values the analysis knows
    nothing about (function arguments of public functions, weights, results
    of `kimi.linear` and other ops without a rule) are `(-inf, +inf)`; the
    proof comes from the structure of the gate: `kimi.kda_gate lower_bound`
    gives `(L, 0)`, `L * sigmoid(x)` written in arith/math gives `(L, 0)`
    whatever `x` is, a clamp `arith.maximumf %g, -5.0` gives `[-5, ...]`.
    Rules for arith, math, tensor and kimi ops are listed in
    docs/passes/decay-bound.md.

    By default the proof holds for IEEE round-to-nearest evaluation in each
    op's element type (`rounding=ieee`): ends are rounded outward and closed
    after every rounding op, so `L * sigmoid(x)` in f32 gives `[L, 0]`.
    `rounding=exact` evaluates the ops' exact real semantics instead (open
    ends stay open: `(L, 0)`); it documents the math of a gate and is not
    what `kimi-chunk-kda` decides with.

    A `kimi.kda` in code the analysis never reaches (a private function
    without callers) gets no attribute. With `remarks`, every `kimi.kda`
    also gets a remark stating the interval. With `annotate-all`, every
    single-result op with a float result gets its interval as
    `kimi.interval`, to inspect the analysis op by op.
  }];
  let dependentDialects = ["::kimi::KimiDialect"];
  let options = [
    Option<"rounding", "rounding", "::kimi::RoundingModel",
           "::kimi::RoundingModel::ieee",
           "Floating-point model of the proof: 'ieee' (sound for "
           "round-to-nearest evaluation in each op's type) or 'exact' "
           "(exact real arithmetic)",
           [{::llvm::cl::values(
               clEnumValN(::kimi::RoundingModel::ieee, "ieee",
                          "IEEE evaluation in each op's element type"),
               clEnumValN(::kimi::RoundingModel::exact, "exact",
                          "exact real arithmetic"))}]>,
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the proven interval of 'g' on every kimi.kda">,
    Option<"annotateAll", "annotate-all", "bool", "false",
           "Attach 'kimi.interval' to every single-result op with a float "
           "result">,
  ];
}

def KimiChunkKda : Pass<"kimi-chunk-kda", "::mlir::ModuleOp"> {
  let summary = "Choose the chunk length and diagonal strategy of kimi.kda";
  let description = [{
    Sets the `decay` attribute of every `kimi.kda` from a proven lower bound
    `L` of its log decay `g` (the pass runs the decay-bound analysis itself,
    with `rounding=ieee`, rather than reading attributes of an earlier pass):

    * with `L` finite, the largest power-of-two chunk `C` in `[16, 64]` with
      `C * |L| * log2(e) < headroom(T) - 1` gives
      `#kimi.decay<lower = L, chunk = C, diag = dense>`: inside a chunk the
      rescaled operands `k * exp(-G)` of the dense diagonal tile stay below
      `2^(headroom - 1)`. `T` is the element type of `q` and `k` (the
      narrower headroom of the two); headroom is 127 for bf16 and f32, 15
      for f16 (table in docs/passes/decay-bound.md);
    * otherwise (no finite `L`, even `C = 16` too large, `g` possibly
      positive, or `T` not in the table) it keeps the log-space pairwise
      diagonal path, `#kimi.decay<[lower = L,] chunk = 64, diag = pairwise>`,
      and emits a remark on the `kimi.kda` naming the value that defeated
      the proof, e.g. `lower bound of 'g' is unbounded: defeated by
      'kimi.kda_gate softplus' %0 at model.mlir:12:8`.

    Check numbers: K3's gate (`L = -5`) with bf16 operands gives `C = 16`
    (16 * 5 * log2(e) = 115.4 < 126; 32 would need 230.8); `L = -2.5` gives
    `C = 32`; f16 operands with `L = -5` stay pairwise (115.4 >= 14).

    `force=dense|pairwise` overrides the decision for experiments.
    `force=pairwise` always applies silently (it is always safe).
    `force=dense` on an op with a proven bound uses the proven chunk; on an
    op without one it uses `C = 16` and emits a warning that names the
    reason, since dense tiles may then overflow. An existing `decay`
    attribute is replaced.
  }];
  let dependentDialects = ["::kimi::KimiDialect"];
  let options = [
    Option<"force", "force", "::kimi::DiagForce", "::kimi::DiagForce::none",
           "Force a diagonal strategy: 'auto' (decide from the proof), "
           "'dense' or 'pairwise'",
           [{::llvm::cl::values(
               clEnumValN(::kimi::DiagForce::none, "auto",
                          "decide from the proof"),
               clEnumValN(::kimi::DiagForce::dense, "dense",
                          "dense diagonal tiles, warn when unproven"),
               clEnumValN(::kimi::DiagForce::pairwise, "pairwise",
                          "log-space pairwise diagonal tiles"))}]>,
  ];
}

def KimiShard : Pass<"kimi-shard", "::mlir::ModuleOp"> {
  let summary = "Lay a model out over the @supernode device grid";
  let description = [{
    Declares the device grid `shard.grid @supernode` and annotates every
    function of the module with where the model's parameters and state live,
    as `shard.shard` ops of the upstream `shard` dialect. What lies between
    (activations, partial sums) is left to `sharding-propagation`, which
    derives it from the sharding rules of the kimi ops
    (`passes/ShardingModels.cpp`); `shard-partition` then rewrites each
    function into the code of one rank with explicit collectives.

    ```
    kimi-opt model.mlir --pass-pipeline='builtin.module(kimi-shard{grid=8 strategy=tp,ep},
      func.func(sharding-propagation{traversal=forward},shard-partition),
      kimi-localize-weights,canonicalize)'
    ```

    `grid` is the grid shape: one size (`8`, a 1-D grid) or two (`8,8`:
    groups x devices per group). Strategies (`strategy`, any combination):

    * `tp` (tensor parallel, by heads): KDA and MLA projections into heads
      (q/k/v, their convolutions, the forget-gate up projection, `A_log`,
      `dt_bias`, beta, the output gate, MLA `q_b`/`kv_b`) split by rows,
      `o_proj` by columns (its partial sums are all-reduced); KDA recurrent
      and conv states split by heads / channels; the dense MLP and shared
      experts split by intermediate columns/rows; routed experts (without
      `ep`) split by their intermediate dimension; `lm_head` split by
      vocabulary (the logits are all-gathered). On a 2-D grid it uses the
      inner axis.
    * `ep` (expert parallel): each routed-expert stack split by experts over
      all devices (K3: 896 / 64 = 14 per device); each rank runs its
      experts on the tokens routed to them and the contributions are summed.
    * `dp` (data parallel): the batch dimension of tokens, states and logits
      split (outer axis of a 2-D grid). The module gets `kimi.data_parallel`
      (the number of groups), which the artifact passes to the runtime so
      that each group serves its own sequences.
    * `sp` (sequence parallel): the token dimension of the prompt split
      inside the layers; token-wise work (projections, norms, MLPs, experts)
      runs on each rank's segment, the KDA short convolutions take a
      3-token halo from the previous rank, and `kimi.kda` runs per segment
      with the (M, S_ext) composition (one all-gather of the segment
      summaries and a local fold); MLA attention gathers the tokens.

    Everything not listed (embedding, norms, AttnRes weights, router, MLA
    down projections and latent cache) is replicated.

    The pass checks that every split divides: a head count, a weight
    dimension or a batch that the grid does not divide is an error naming
    the op, the dimension and the sizes, e.g.
    `'kimi.kda' op strategy tp splits 6 heads (dim 2 of q) over 4 devices`.

    Every function with a body is annotated: its arguments and results by
    the rules above (named `kimi.state` values by the state rules, other
    tensors as activations), and each `func.call` of a layer function with
    its callee's argument and result shardings, so that the layers stay
    functions and are partitioned one by one. An entry (public function)
    keeps its tokens and logits whole under `sp`, and a single token
    (decode) is never split by sequence.
  }];
  // What the partitioning rules create later in the pipeline (shard-partition
  // itself loads only shard and tensor).
  let dependentDialects = ["::kimi::KimiDialect", "::mlir::shard::ShardDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    ListOption<"grid", "grid", "int64_t",
               "Grid shape: N devices, or G,T for G groups of T devices">,
    ListOption<"strategy", "strategy", "std::string",
               "Any of tp, ep, dp, sp (comma-separated)">,
  ];
}

def KimiLocalizeWeights : Pass<"kimi-localize-weights", "::mlir::ModuleOp"> {
  let summary = "Declare each partitioned weight as the block one rank holds";
  let description = [{
    After `shard-partition`, a `kimi.weight_ref` of a split parameter yields
    one block of it (`parts`). This pass makes the `kimi.weight` declaration
    that block: its type becomes the block's type and it records `parts`,
    so the artifact's weight manifest and the runtime load only the block of
    their rank. All references of one weight must agree on the block shape;
    a weight read whole in one place and split in another is an error naming
    both.
  }];
  let dependentDialects = ["::kimi::KimiDialect"];
}

#endif // KIMI_PASSES_TD

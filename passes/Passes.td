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

#endif // KIMI_PASSES_TD

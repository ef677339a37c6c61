//===- Passes.td - lowering passes out of the kimi dialect -*- tablegen -*-===//
//
// One pass per file; each pass's rationale lives in docs/lowering/.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_PASSES_TD
#define KIMI_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def KimiLowerToLinalg : Pass<"kimi-lower-to-linalg"> {
  let summary = "Lower kimi graph ops (all but kda) to linalg/tensor/scf";
  let description = [{
    The reference decomposition of the kimi graph ops on tensors, computing
    in f32 with conversions at the edges:

    * `embed`, `linear` (`out[..., n] = sum_k x[..., k] W[n, k]`), `rms_norm`,
      `gated_rms_norm`, `l2_norm`, `sigmoid`, `situ_glu`, `kda_gate` (both
      forms; softplus in its overflow-free form) as `linalg.generic` ops;
    * `short_conv` as a contraction over the taps of `state ++ x` (a
      `tensor.concat`), with the final state sliced off its end;
    * `mla` and `mla_decode` through one absorbed latent-attention code path:
      `q_nope` folded through `W_uk`, scores against `[ckv | k_pe]`, causal
      mask with query `t` at key position `S - T + t`, softmax, mix of the
      latent, then `W_uv` and the optional sigmoid gate;
    * `attn_res` as per-source statistics and one generic that mixes the
      sources with the softmax of their scores;
    * `router` as a contraction and sigmoid, then per token an `scf.for` of
      `k` arg-max rounds (ties to the lower index) and renormalisation;
      with margins, one more round gives the `(k+1)`-th score;
    * `routed_experts` as an `scf.for` over tokens and their `k` experts, each
      a pair of mat-vecs, the activation and the down mat-vec accumulated
      into the token's row;
    * `latent_moe` by decomposition into `linear`, `routed_experts`,
      `rms_norm` and `linear`.

    `kimi.kda` is lowered by `kimi-lower-kda`; `weight_ref` stays (the target
    pipeline decides where weights live). Microscaled weights are rejected:
    on CPU the runtime dequantises MXFP4 at load time and the model is
    compiled with dense weights. Any op left unlowered is an error naming it.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

#endif // KIMI_LOWERING_PASSES_TD

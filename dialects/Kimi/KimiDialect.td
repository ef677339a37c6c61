//===- KimiDialect.td - the kimi graph dialect -------------*- tablegen -*-===//
//
// The graph-level dialect of kimi: ops that mirror the mechanisms of a
// Kimi-K3-class model (KDA, gated MLA, Attention Residuals, LatentMoE).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_DIALECT_TD
#define KIMI_DIALECT_TD

include "mlir/IR/OpBase.td"

def Kimi_Dialect : Dialect {
  let name = "kimi";
  let cppNamespace = "::kimi";
  let summary = "Graph-level ops of hybrid KDA/MLA mixture-of-experts models";
  let description = [{
    The `kimi` dialect describes a Kimi-K3-class language model at the level of
    its mechanisms: Kimi Delta Attention (`kimi.kda` and its gate, short
    convolution and norms), gated Multi-head Latent Attention without
    positional encoding (`kimi.mla`, `kimi.mla_decode`), Attention Residuals
    (`kimi.attn_res`), and the Stable LatentMoE (`kimi.router`,
    `kimi.routed_experts`, `kimi.latent_moe`, `kimi.situ_glu`,
    `kimi.quantile_balance`).

    Ops have value semantics on ranked tensors. Conventions used by every op:

    * Sequence activations are `[B, T, ...]` (batch, tokens); per-head values
      are `[B, T, H, Dh]`. Token-wise ops accept any leading dimensions
      `[..., D]`.
    * Activations are `bf16`, `f16` or `f32`; recurrent state and gate values
      are `f32`. Dimensions may be dynamic (`?`); verifiers compare every pair
      of dimensions that are both static.
    * Microscaled weights (MXFP4, MXFP8) are tensors of the builtin
      `f4E2M1FN` / `f8E4M3FN` with a separate `f8E8M0FNU` scale tensor holding
      one power-of-two scale per 32 values along the last dimension.
    * Weights are declared once per module with `kimi.weight`, named by their
      Hugging Face parameter name, and read with `kimi.weight_ref`; they are
      never inlined as constants.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Kimi_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kimi_Dialect, mnemonic, traits>;

#endif // KIMI_DIALECT_TD

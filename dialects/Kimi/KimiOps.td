//===- KimiOps.td - ops of the kimi dialect ----------------*- tablegen -*-===//
//
// Every op documents its reference semantics; the formulas follow
// shared/reference/kimi-k3.md (section numbers in brackets).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_OPS_TD
#define KIMI_OPS_TD

include "dialects/Kimi/KimiDialect.td"
include "dialects/Kimi/KimiAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Kimi_ActTensor : RankedTensorOf<[BF16, F16, F32]>;
def Kimi_F32Tensor : RankedTensorOf<[F32]>;
def Kimi_IdTensor : RankedTensorOf<[I32, I64]>;
def Kimi_WeightTensor
    : RankedTensorOf<[BF16, F16, F32, F8E4M3FN, F4E2M1FN]>;
def Kimi_PlainWeightTensor : RankedTensorOf<[BF16, F16, F32]>;
def Kimi_ScaleTensor : RankedTensorOf<[F8E8M0FNU]>;
def Kimi_AnyWeightTensor : RankedTensorOf<[BF16, F16, F32, F8E4M3FN, F4E2M1FN,
                                           F8E8M0FNU, I32, I64]>;

def Kimi_PositiveF64 : ConfinedAttr<F64Attr, [AttrConstraint<
    CPred<"::llvm::cast<::mlir::FloatAttr>($_self).getValueAsDouble() > 0.0">,
    "whose value is positive">]>;
def Kimi_PositiveI64 : ConfinedAttr<I64Attr, [IntPositive]>;

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

def Kimi_WeightOp : Kimi_Op<"weight", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "declares a model parameter by its Hugging Face name";
  let description = [{
    Declares one parameter of the model. The symbol name is the parameter's
    name in the Hugging Face checkpoint (for example
    `model.layers.0.self_attn.q_proj.weight`) and the type is its shape and
    storage type. A name containing `{e}` declares the stack of the tensors
    obtained by substituting `0 .. N-1` for `{e}`, stacked along a new leading
    dimension of size `N` (routed experts). Values are never inlined into IR;
    functions read them with `kimi.weight_ref`.

    ```mlir
    kimi.weight @"model.embed_tokens.weight" : tensor<163840x7168xbf16>
    ```

    After partitioning over a device grid (`kimi-shard`, `shard-partition`)
    a declaration may hold one block of the parameter: `parts` gives, per
    dimension, into how many equal blocks the Hugging Face tensor is cut, and
    `type` is the shape of one block. The logical shape is
    `type.shape[i] * parts[i]`; the runtime loads the block of its rank.

    ```mlir
    kimi.weight @"model.layers.1.self_attn.o_proj.weight" {parts = array<i64: 1, 8>} : tensor<7168x1536xbf16>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyRankedTensor>:$type,
                       OptionalAttr<DenseI64ArrayAttr>:$parts);
  let assemblyFormat = "$sym_name attr-dict `:` $type";
  let builders = [
    OpBuilder<(ins "::llvm::StringRef":$symName, "::mlir::Type":$type), [{
      build($_builder, $_state, $_builder.getStringAttr(symName),
            ::mlir::TypeAttr::get(type), ::mlir::DenseI64ArrayAttr());
    }]>];
  let hasVerifier = 1;
}

def Kimi_WeightRefOp : Kimi_Op<"weight_ref", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads a declared model parameter";
  let description = [{
    Yields the value of the parameter declared by the `kimi.weight` with the
    given name. The result type must equal the declared type, or, with
    `parts` (set by `shard-partition` on a sharded weight), be one of
    `parts[i]` equal blocks along each dimension `i` of the logical shape
    (declared shape times the declaration's own `parts`).

    ```mlir
    %w = kimi.weight_ref @"model.norm.weight" : tensor<7168xbf16>
    %o = kimi.weight_ref @"model.layers.1.self_attn.o_proj.weight" {parts = array<i64: 1, 8>} : tensor<7168x1536xbf16>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name,
                       OptionalAttr<DenseI64ArrayAttr>:$parts);
  let builders = [
    OpBuilder<(ins "::mlir::Type":$result, "::llvm::StringRef":$name), [{
      build($_builder, $_state, result,
            ::mlir::FlatSymbolRefAttr::get($_builder.getContext(), name),
            ::mlir::DenseI64ArrayAttr());
    }]>];
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Token-wise ops
//===----------------------------------------------------------------------===//

def Kimi_EmbedOp : Kimi_Op<"embed", [Pure]> {
  let summary = "embedding lookup";
  let description = [{
    `out[..., :] = table[ids[...], :]` for a table `[V, D]` and integer ids of
    any shape; the result has shape `ids.shape ++ [D]`. An id outside `[0, V)`
    is undefined behaviour here; the runtime rejects such tokens before
    execution.
  }];
  let arguments = (ins Kimi_WeightTensor:$table, Kimi_IdTensor:$ids);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $table `[` $ids `]` attr-dict `:` type($table) `,` type($ids) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kimi_LinearOp : Kimi_Op<"linear", [Pure]> {
  let summary = "matrix product with a weight in Hugging Face layout";
  let description = [{
    `out[..., n] = sum_k x[..., k] * W[n, k]` with `W : [N, K]` (the layout of
    `nn.Linear.weight`). Microscaled weights (`f4E2M1FN` for MXFP4,
    `f8E4M3FN` for MXFP8) need `scale : [N, K/32]` of `f8E8M0FNU`; the
    weight's value is then `W[n, k] * scale[n, k / 32]`. Plain float weights
    take no scale. Accumulation is in f32.

    ```mlir
    %y = kimi.linear %x, %w : tensor<1x8x256xf32>, tensor<512x256xbf16> -> tensor<1x8x512xf32>
    ```
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_WeightTensor:$weight,
                       Optional<Kimi_ScaleTensor>:$scale);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $x `,` $weight (`scale` $scale^)? attr-dict `:` type($x) `,` type($weight)
    (`,` type($scale)^)? `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kimi_RmsNormOp : Kimi_Op<"rms_norm", [Pure]> {
  let summary = "RMS normalisation over the last dimension";
  let description = [{
    `out = x * rsqrt(mean_d(x^2) + eps) * w` over the last dimension `D`, with
    `w : [D]`; computed in f32.
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_ActTensor:$weight,
                       Kimi_PositiveF64:$eps);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $x `,` $weight `eps` `(` $eps `)` attr-dict `:` type($x) `,` type($weight)
    `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kimi_GatedRmsNormOp : Kimi_Op<"gated_rms_norm", [Pure]> {
  let summary = "per-head RMS normalisation with a sigmoid output gate";
  let description = [{
    KDA's output norm [2]: for `o, gate : [..., H, D]` and `w : [D]`,
    `out = w * o * rsqrt(mean_d(o^2) + eps) * sigmoid(gate)`, the mean taken
    over each head's `D` values; computed in f32.
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_ActTensor:$gate,
                       Kimi_ActTensor:$weight, Kimi_PositiveF64:$eps);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $x `,` $gate `,` $weight `eps` `(` $eps `)` attr-dict `:` type($x) `,`
    type($gate) `,` type($weight) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kimi_L2NormOp : Kimi_Op<"l2_norm", [Pure]> {
  let summary = "L2 normalisation over the last dimension";
  let description = [{
    `out = x * rsqrt(sum_d x^2 + eps)` over the last dimension (KDA's q and k
    normalisation [2], `eps = 1e-6`); computed in f32.
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_PositiveF64:$eps);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $x `eps` `(` $eps `)` attr-dict `:` type($x) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kimi_SigmoidOp : Kimi_Op<"sigmoid", [Pure]> {
  let summary = "elementwise logistic sigmoid";
  let description = [{
    `out = 1 / (1 + exp(-x))` elementwise, computed in f32; the result has the
    shape of `x` and lies in `(0, 1)`. Used for KDA's `beta` and for SiLU
    (`x * sigmoid(x)`).
  }];
  let arguments = (ins Kimi_ActTensor:$x);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($out)";
  let hasVerifier = 1;
}

def Kimi_SituGluOp : Kimi_Op<"situ_glu", [Pure]> {
  let summary = "SiTU gated linear unit";
  let description = [{
    The bounded activation of K3's experts [5], elementwise on `gate` and
    `up` of equal shape:
    `out = [beta * tanh(gate / beta) * sigmoid(gate)] * [linear_beta * tanh(up / linear_beta)]`
    (K3: `beta = 4`, `linear_beta = 25`, so `|out| <= 100`); computed in f32.
  }];
  let arguments = (ins Kimi_ActTensor:$gate, Kimi_ActTensor:$up,
                       Kimi_PositiveF64:$beta, Kimi_PositiveF64:$linear_beta);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $gate `,` $up `beta` `(` $beta `)` `linear_beta` `(` $linear_beta `)`
    attr-dict `:` type($gate) `,` type($up) `->` type($out)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kimi Delta Attention
//===----------------------------------------------------------------------===//

def Kimi_ShortConvOp : Kimi_Op<"short_conv", [Pure]> {
  let summary = "depthwise causal short convolution, optionally followed by SiLU";
  let description = [{
    For `x : [B, T, C]` and the Hugging Face weight `w : [C, 1, K]`, with the
    `K - 1` previous inputs taken from `state : [B, K-1, C]` (zeros when
    absent):
    `y[b, t, c] = sum_{j<K} w[c, 0, j] * x[b, t - (K-1) + j, c]`
    (tap `K-1` multiplies the current token), then `SiLU(y)` when `silu` is
    set. The second result is the final state: the last `K - 1` inputs of the
    extended sequence `state ++ x`. Computed in f32.
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_ActTensor:$weight,
                       Optional<Kimi_ActTensor>:$state, UnitAttr:$silu);
  let results = (outs Kimi_ActTensor:$out, Kimi_F32Tensor:$final_state);
  let assemblyFormat = [{
    (`silu` $silu^)? $x `,` $weight (`state` $state^)? attr-dict `:`
    type($x) `,` type($weight) (`,` type($state)^)? `->` type($out) `,`
    type($final_state)
  }];
  let hasVerifier = 1;
}

def Kimi_KdaGateOp : Kimi_Op<"kda_gate", [Pure]> {
  let summary = "per-channel log decay of KDA";
  let description = [{
    Computes the per-step, per-key-channel log decay `g : [B, T, H, D]` (f32)
    from the gate input `z : [B, T, H, D]`, `a_log : [H]` and
    `dt_bias : [H, D]` [2]:

    * `lower_bound` (K3): `g = L * sigmoid(exp(a_log[h]) * (z + dt_bias[h]))`
      with `L = lower < 0`, so `g` lies in `(L, 0)` whatever the weights;
    * `softplus` (Kimi Linear): `g = -exp(a_log[h]) * softplus(z + dt_bias[h])`,
      range `(-inf, 0)`.

    ```mlir
    %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : ...
    ```
  }];
  let arguments = (ins Kimi_GateForm:$form, OptionalAttr<F64Attr>:$lower,
                       Kimi_ActTensor:$z, Kimi_F32Tensor:$a_log,
                       Kimi_F32Tensor:$dt_bias);
  let results = (outs Kimi_F32Tensor:$g);
  let assemblyFormat = [{
    $form (`lower` `=` $lower^)? $z `,` $a_log `,` $dt_bias attr-dict `:`
    type($z) `,` type($a_log) `,` type($dt_bias) `->` type($g)
  }];
  let hasVerifier = 1;
}

def Kimi_KdaOp : Kimi_Op<"kda", [Pure, AttrSizedOperandSegments]> {
  let summary = "Kimi Delta Attention (gated delta rule with per-channel decay)";
  let description = [{
    For `q, k : [B, T, H, dk]`, `v : [B, T, H, dv]`, `g : [B, T, H, dk]` (f32
    log decay, `g <= 0`), `beta : [B, T, H]` and an optional
    `initial_state : [B, H, dk, dv]` (f32, zeros when absent), runs per
    batch and head the recurrence [2]

    ```
    S'  = Diag(exp(g_t)) S
    u_t = beta_t (v_t - S'^T k_t)
    S   = S' + k_t u_t^T
    o_t = scale * S^T q_t
    ```

    and returns `o : [B, T, H, dv]` and the final state `[B, H, dk, dv]`
    (f32). `decay`, set by `kimi-chunk-kda`, records the proven bound and the
    chunked strategy; it does not change the semantics. `g` may be f32 or
    the activation type (bf16 log decay read from memory). The state is
    computed in f32 whatever its storage type: `initial_state` and
    `final_state` share one element type, f32 or (to halve the state's
    memory) bf16/f16, rounded once per call.

    Variable-length batches: with `cu_seqlens : [N + 1]` (i32, starts of N
    sequences packed along T, `cu_seqlens[0] = 0`, `cu_seqlens[N] = T`) the
    batch dimension must be 1, each sequence runs its own recurrence, and
    the states are `[N, H, dk, dv]`. The GPU target implements this form;
    the CPU lowering rejects it.
  }];
  let arguments = (ins Kimi_ActTensor:$q, Kimi_ActTensor:$k, Kimi_ActTensor:$v,
                       Kimi_ActTensor:$g, Kimi_ActTensor:$beta,
                       Optional<Kimi_ActTensor>:$initial_state,
                       Optional<TensorOf<[I32]>>:$cu_seqlens,
                       Kimi_PositiveF64:$scale,
                       OptionalAttr<Kimi_DecayAttr>:$decay);
  let results = (outs Kimi_ActTensor:$out, Kimi_ActTensor:$final_state);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $g `,` $beta (`initial_state` $initial_state^)?
    (`cu_seqlens` $cu_seqlens^)? `scale` `(` $scale `)` attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Kimi_KdaTransitionOp : Kimi_Op<"kda_transition", [Pure]> {
  let summary = "state transition of a KDA segment (sequence parallelism)";
  let description = [{
    For `k : [B, T, H, dk]`, `g : [B, T, H, dk]` (f32 log decay) and
    `beta : [B, T, H]`, returns `M = A_T ... A_1 : [B, H, dk, dk]` (f32) with
    `A_t = Diag(a_t) - beta_t k_t (a_t * k_t)^T`, `a_t = exp(g_t)` [2]: the
    final state of `kimi.kda` over the segment from an initial state `S` is
    `M S + S_ext`, `S_ext` being its final state from zero. Segments compose:
    `(M2, S2) o (M1, S1) = (M2 M1, M2 S1 + S2)`. `kimi-shard`'s sequence
    split of `kimi.kda` computes it per rank (f32, as the reference asks).
  }];
  let arguments = (ins Kimi_ActTensor:$k, Kimi_F32Tensor:$g,
                       Kimi_ActTensor:$beta);
  let results = (outs Kimi_F32Tensor:$transition);
  let assemblyFormat = [{
    $k `,` $g `,` $beta attr-dict `:` type($k) `,` type($g) `,` type($beta)
    `->` type($transition)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gated MLA without positional encoding
//===----------------------------------------------------------------------===//

def Kimi_MlaOp : Kimi_Op<"mla", [Pure]> {
  let summary = "causal gated multi-head latent attention (prefill form)";
  let description = [{
    Operands: queries `q : [B, T, H, dn + dr]`, the normalised latent
    `ckv : [B, S, R]`, the shared key part `k_pe : [B, S, dr]`,
    `kv_b_proj : [H * (dn + dv), R]` (per head `dn` rows of `W_uk` then `dv`
    rows of `W_uv`) and an optional output gate `gate : [B, T, H, dv]`.
    `dr` is `k_pe`'s last dimension, `R` is `kv_b_proj`'s, `dn` and `dv`
    follow. Per head [3]:

    ```
    k = [W_uk ckv | k_pe],  v = W_uv ckv
    o = softmax(q k^T * scale, causal) v       (queries are positions S-T .. S-1)
    out = o * sigmoid(gate)                     (when a gate is given)
    ```

    No rotary embedding is applied (NoPE). `S >= T`: the first `S - T` keys
    are a cached prefix.
  }];
  let arguments = (ins Kimi_ActTensor:$q, Kimi_ActTensor:$ckv,
                       Kimi_ActTensor:$k_pe, Kimi_PlainWeightTensor:$kv_b_proj,
                       Optional<Kimi_ActTensor>:$gate, Kimi_PositiveF64:$scale);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $q `,` $ckv `,` $k_pe `,` $kv_b_proj (`gate` $gate^)? `scale` `(` $scale `)`
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Kimi_MlaDecodeOp : Kimi_Op<"mla_decode", [Pure, AttrSizedOperandSegments]> {
  let summary = "gated MLA over the latent cache (absorbed decode form)";
  let description = [{
    The same function as `kimi.mla` with the latent and shared key
    concatenated in one cache `cache : [B, S, R + dr]` (576 wide for K3),
    computed in absorbed form [3]: `q_nope` is folded through `W_uk` into the
    `R`-wide latent space, attention runs with one KV head over the cache
    rows, and `W_uv` is applied to the mixed latent. Operands:
    `q : [B, T, H, dn + dr]`, `cache`, `kv_b_proj : [H * (dn + dv), R]`,
    optional `gate : [B, T, H, dv]`; queries are the last `T` positions.

    With `lengths : [B]` (i32), only the first `lengths[b]` rows of sequence
    `b`'s cache are keys, and the queries are the last `T` of those: query
    `t` sees rows `s <= lengths[b] - T + t`. The rows past `lengths[b]` are
    padding (they must be finite: they are multiplied by zero weights). This
    lets one compiled shape serve every cache length up to `S`, which is
    what a replayed CUDA graph needs.
  }];
  let arguments = (ins Kimi_ActTensor:$q, Kimi_ActTensor:$cache,
                       Kimi_PlainWeightTensor:$kv_b_proj,
                       Optional<Kimi_ActTensor>:$gate,
                       Optional<RankedTensorOf<[I32]>>:$lengths,
                       Kimi_PositiveF64:$scale);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $q `,` $cache `,` $kv_b_proj (`gate` $gate^)? (`lengths` $lengths^)?
    `scale` `(` $scale `)` attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Kimi_CacheInsertOp : Kimi_Op<"cache_insert", [Pure]> {
  let summary = "write new cache rows after each sequence's valid length";
  let description = [{
    For a cache `cache : [B, S, W]` whose first `lengths[b]` rows of sequence
    `b` are valid (the rest padding), and `rows : [B, T, W]`, the result
    `[B, S + T, W]` holds

    ```
    out[b, p] = rows[b, p - lengths[b]]   if lengths[b] <= p < lengths[b] + T
              = cache[b, p]               else if p < S
              = 0                         otherwise
    ```

    so its first `lengths[b] + T` rows are valid. With `lengths[b] = S` this
    is the concatenation of `cache` and `rows`. The lengths stay device data
    (no host read): the decode step of a padded cache feeds the result to
    `kimi.mla_decode ... lengths(lengths + T)`. Requires
    `0 <= lengths[b] <= S`; a length outside that range gives unspecified
    (but in-bounds) rows.
  }];
  let arguments = (ins Kimi_ActTensor:$cache, Kimi_ActTensor:$rows,
                       RankedTensorOf<[I32]>:$lengths);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $rows `into` $cache `lengths` $lengths attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention Residuals
//===----------------------------------------------------------------------===//

def Kimi_AttnResOp : Kimi_Op<"attn_res", [Pure]> {
  let summary = "attention over residual sources (AttnRes mixing)";
  let description = [{
    Mixes `n >= 1` sources `v_i : [..., D]` of one token with a learned
    pseudo-query `query` (`[D]` or `[1, D]`) and a norm weight `norm : [D]`
    [4]:

    ```
    score_i = sum_d v_i,d * rsqrt(mean_d(v_i^2) + eps) * norm_d * query_d
    out     = sum_i softmax_i(score) * v_i
    ```

    Values are mixed unnormalised; computed in f32.
  }];
  let arguments = (ins Variadic<Kimi_ActTensor>:$sources, Kimi_ActTensor:$query,
                       Kimi_ActTensor:$norm, Kimi_PositiveF64:$eps);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    ` ` `[` $sources `]` `query` $query `norm` $norm `eps` `(` $eps `)` attr-dict
    `:` `[` type($sources) `]` `,` type($query) `,` type($norm) `->` type($out)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

def Kimi_RouterOp : Kimi_Op<"router", [Pure]> {
  let summary = "sigmoid router with bias top-k selection";
  let description = [{
    For `x : [..., D]`, `w : [E, D]` and the selection bias `bias : [E]` [5]:

    ```
    s   = sigmoid(x w^T)                          (f32)
    idx = top_k(s + bias)                         (bias affects selection only)
    wts = s[idx] / (sum s[idx] + 1e-20) * scaling (when renormalize)
          s[idx] * scaling                        (otherwise)
    ```

    Results: `weights : [..., k]` (f32) and `indices : [..., k]` (ordered by
    descending biased score, ties to the lower index). With a third result
    `margins : [..., E]` it also returns `s + bias - alpha`, where `alpha` is
    the `(k+1)`-th largest biased score of the token (Quantile Balancing).
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_WeightTensor:$weight,
                       Kimi_F32Tensor:$bias, Kimi_PositiveI64:$top_k,
                       DefaultValuedAttr<F64Attr, "1.0">:$scaling,
                       UnitAttr:$renormalize);
  let results = (outs Kimi_F32Tensor:$weights, Kimi_IdTensor:$indices,
                      Optional<Kimi_F32Tensor>:$margins);
  let assemblyFormat = [{
    $x `,` $weight `,` $bias `top_k` `(` $top_k `)` (`renormalize` $renormalize^)?
    attr-dict `:` type($x) `,` type($weight) `,` type($bias) `->`
    type($weights) `,` type($indices) (`,` type($margins)^)?
  }];
  let hasVerifier = 1;
}

def Kimi_RoutedExpertsOp : Kimi_Op<"routed_experts", [Pure]> {
  let summary = "weighted sum of the selected experts' gated MLPs";
  let description = [{
    For tokens `x : [..., W]`, routing `weights, indices : [..., k]` and
    stacked expert weights `gate_proj, up_proj : [E, I, W]`,
    `down_proj : [E, W, I]` [5]:

    ```
    out = sum_j weights_j * down_e (act(gate_e x, up_e x)),  e = indices_j
    ```

    `act` is `situ` (`kimi.situ_glu` with `beta`, `linear_beta`) or `silu`
    (`SiLU(gate) * up`). MXFP4 experts pass three scale tensors after the
    weights, `[E, I, W/32]`, `[E, I, W/32]`, `[E, W, I/32]`. After expert
    parallel partitioning the op holds one rank's block of the experts, so
    `k` may exceed `E` (indices are local; other ranks' experts carry
    weight 0).
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_F32Tensor:$weights,
                       Kimi_IdTensor:$indices, Kimi_WeightTensor:$gate_proj,
                       Kimi_WeightTensor:$up_proj, Kimi_WeightTensor:$down_proj,
                       Variadic<Kimi_ScaleTensor>:$scales,
                       Kimi_GluActivation:$activation,
                       OptionalAttr<Kimi_PositiveF64>:$beta,
                       OptionalAttr<Kimi_PositiveF64>:$linear_beta);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $activation $x `,` $weights `,` $indices `experts` `(` $gate_proj `,`
    $up_proj `,` $down_proj `)` (`scales` `(` $scales^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Kimi_LatentMoeOp : Kimi_Op<"latent_moe", [Pure, AttrSizedOperandSegments]> {
  let summary = "routed experts on a latent projection of the tokens";
  let description = [{
    Stable LatentMoE's routed path [5]: for `x : [..., D]` and routing
    `weights, indices : [..., k]`,

    ```
    z   = x down_latent^T                  (down_latent : [W, D])
    r   = kimi.routed_experts(z, weights, indices, experts)   (width W)
    out = RMSNorm_W(r; norm, eps) up_latent^T   (up_latent : [D, W])
    ```

    The norm is skipped when no `norm` operand is given. Shared experts are
    not part of this op; the model adds them to its result.
  }];
  let arguments = (ins Kimi_ActTensor:$x, Kimi_F32Tensor:$weights,
                       Kimi_IdTensor:$indices, Kimi_WeightTensor:$down_latent,
                       Kimi_WeightTensor:$gate_proj, Kimi_WeightTensor:$up_proj,
                       Kimi_WeightTensor:$down_proj,
                       Variadic<Kimi_ScaleTensor>:$scales,
                       Optional<Kimi_ActTensor>:$norm,
                       Kimi_WeightTensor:$up_latent,
                       Kimi_GluActivation:$activation,
                       OptionalAttr<Kimi_PositiveF64>:$beta,
                       OptionalAttr<Kimi_PositiveF64>:$linear_beta,
                       DefaultValuedAttr<Kimi_PositiveF64, "1.0e-5">:$eps);
  let results = (outs Kimi_ActTensor:$out);
  let assemblyFormat = [{
    $activation $x `,` $weights `,` $indices `down` $down_latent `experts` `(`
    $gate_proj `,` $up_proj `,` $down_proj `)` (`scales` `(` $scales^ `)`)?
    (`norm` $norm^)? `up` $up_latent attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Kimi_QuantileBalanceOp : Kimi_Op<"quantile_balance", [Pure]> {
  let summary = "Quantile Balancing update of the router bias";
  let description = [{
    From router margins `margins : [N, E]` (`kimi.router`'s third result) and
    the current `bias : [E]`, computes the new bias [5]: with target load
    `q = N * k / E` (rounded down), `new_bias_j = bias_j - m_j` where `m_j` is
    the `(q+1)`-th largest margin of column `j`. Without `bins`, exactly.
    With `bins`, from a histogram, the form that shards over tokens:
    `kimi.quantile_counts` then `kimi.quantile_update` (per-rank counts are
    summed by one integer all-reduce in between); `m_j` is then the upper
    edge of the bin holding the `(q+1)`-th largest margin, so at most `q`
    margins of column `j` exceed it and at least `q + 1` exceed it minus one
    bin width.
  }];
  let arguments = (ins Kimi_F32Tensor:$margins, Kimi_F32Tensor:$bias,
                       Kimi_PositiveI64:$top_k, OptionalAttr<I64Attr>:$bins);
  let results = (outs Kimi_F32Tensor:$new_bias);
  let assemblyFormat = [{
    $margins `,` $bias `top_k` `(` $top_k `)` (`bins` `(` $bins^ `)`)? attr-dict
    `:` type($margins) `,` type($bias) `->` type($new_bias)
  }];
  let hasVerifier = 1;
}

def Kimi_QuantileCountsOp : Kimi_Op<"quantile_counts", [Pure]> {
  let summary = "per-expert histogram of router margins (Quantile Balancing)";
  let description = [{
    Counts the margins `margins : [N, E]` of each expert column `j` in
    `bins` equal bins over `[lo_j, hi_j] = [bias_j - max(bias) - 1,
    bias_j - min(bias) + 1]` (`bias : [E]`, the router bias the margins were
    computed with). Every margin `s + bias_j - alpha` lies inside, because
    sigmoid scores are in `(0, 1)` and `alpha` is a biased score of the same
    token; values outside are counted in the first or last bin. Bin
    `floor((m - lo_j) / (hi_j - lo_j) * bins)`. The result is
    `counts : [E, bins]` (i32). The range depends only on the bias, so every
    rank of a token-sharded batch bins alike and the counts add up.
  }];
  let arguments = (ins Kimi_F32Tensor:$margins, Kimi_F32Tensor:$bias,
                       Kimi_PositiveI64:$bins);
  let results = (outs RankedTensorOf<[I32]>:$counts);
  let assemblyFormat = [{
    $margins `,` $bias `bins` `(` $bins `)` attr-dict `:` type($margins) `,`
    type($bias) `->` type($counts)
  }];
  let hasVerifier = 1;
}

def Kimi_QuantileUpdateOp : Kimi_Op<"quantile_update", [Pure]> {
  let summary = "router bias from summed margin histograms (Quantile Balancing)";
  let description = [{
    From `counts : [E, B]` (`kimi.quantile_counts` over all `rows` tokens,
    summed over ranks) and `bias : [E]`: with `q = rows * k / E` (rounded
    down), finds per column `j` the bin `c` holding the `(q+1)`-th largest
    margin (counting from the top bin) and returns
    `new_bias_j = bias_j - (lo_j + (c + 1) * w_j)` with the range of
    `kimi.quantile_counts` and `w_j = (hi_j - lo_j) / B`.
  }];
  let arguments = (ins RankedTensorOf<[I32]>:$counts, Kimi_F32Tensor:$bias,
                       Kimi_PositiveI64:$rows, Kimi_PositiveI64:$top_k);
  let results = (outs Kimi_F32Tensor:$new_bias);
  let assemblyFormat = [{
    $counts `,` $bias `rows` `(` $rows `)` `top_k` `(` $top_k `)` attr-dict
    `:` type($counts) `,` type($bias) `->` type($new_bias)
  }];
  let hasVerifier = 1;
}

#endif // KIMI_OPS_TD

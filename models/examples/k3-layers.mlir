// Two decoder layers of Kimi K3 at the published sizes (hidden 7168, 96 KDA
// heads and 96 MLA heads of 128, 896 MXFP4 experts top-16 on a 3584-wide
// latent, 2 shared experts, Attention Residuals), prefill of 8192 tokens of
// one sequence. Layer 1 is a KDA layer, layer 3 an MLA layer (1-based layer
// 4). Both are inside the first AttnRes block, whose only sealed source is
// the embedding %emb; %h is the running partial sum of the block.
//
//   kimi-opt models/examples/k3-layers.mlir
//
// verifies and prints it. Weights are symbols named by their Hugging Face
// parameter names; stacked routed experts use `{e}` for the expert index.

// Layer 1 (KDA + LatentMoE)
kimi.weight @model.layers.1.self_attention_res_norm.weight : tensor<7168xbf16>
kimi.weight @model.layers.1.self_attention_res_proj.weight : tensor<1x7168xbf16>
kimi.weight @model.layers.1.input_layernorm.weight : tensor<7168xbf16>
kimi.weight @model.layers.1.self_attn.q_proj.weight : tensor<12288x7168xbf16>
kimi.weight @model.layers.1.self_attn.k_proj.weight : tensor<12288x7168xbf16>
kimi.weight @model.layers.1.self_attn.v_proj.weight : tensor<12288x7168xbf16>
kimi.weight @model.layers.1.self_attn.q_conv1d.weight : tensor<12288x1x4xf32>
kimi.weight @model.layers.1.self_attn.k_conv1d.weight : tensor<12288x1x4xf32>
kimi.weight @model.layers.1.self_attn.v_conv1d.weight : tensor<12288x1x4xf32>
kimi.weight @model.layers.1.self_attn.f_a_proj.weight : tensor<128x7168xbf16>
kimi.weight @model.layers.1.self_attn.f_b_proj.weight : tensor<12288x128xbf16>
kimi.weight @model.layers.1.self_attn.A_log : tensor<96xf32>
kimi.weight @model.layers.1.self_attn.dt_bias : tensor<96x128xf32>
kimi.weight @model.layers.1.self_attn.b_proj.weight : tensor<96x7168xbf16>
kimi.weight @model.layers.1.self_attn.g_proj.weight : tensor<12288x7168xbf16>
kimi.weight @model.layers.1.self_attn.o_norm.weight : tensor<128xf32>
kimi.weight @model.layers.1.self_attn.o_proj.weight : tensor<7168x12288xbf16>
kimi.weight @model.layers.1.mlp_res_norm.weight : tensor<7168xbf16>
kimi.weight @model.layers.1.mlp_res_proj.weight : tensor<1x7168xbf16>
kimi.weight @model.layers.1.post_attention_layernorm.weight : tensor<7168xbf16>
kimi.weight @model.layers.1.mlp.gate.weight : tensor<896x7168xbf16>
kimi.weight @model.layers.1.mlp.gate.e_score_correction_bias : tensor<896xf32>
kimi.weight @model.layers.1.mlp.routed_expert_down_proj.weight : tensor<3584x7168xbf16>
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<896x3072x3584xf4E2M1FN>
kimi.weight @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<896x3072x3584xf4E2M1FN>
kimi.weight @"model.layers.1.mlp.experts.{e}.down_proj.weight" : tensor<896x3584x3072xf4E2M1FN>
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight_scale" : tensor<896x3072x112xf8E8M0FNU>
kimi.weight @"model.layers.1.mlp.experts.{e}.up_proj.weight_scale" : tensor<896x3072x112xf8E8M0FNU>
kimi.weight @"model.layers.1.mlp.experts.{e}.down_proj.weight_scale" : tensor<896x3584x96xf8E8M0FNU>
kimi.weight @model.layers.1.mlp.routed_expert_norm.weight : tensor<3584xbf16>
kimi.weight @model.layers.1.mlp.routed_expert_up_proj.weight : tensor<7168x3584xbf16>
kimi.weight @model.layers.1.mlp.shared_experts.gate_proj.weight : tensor<6144x7168xbf16>
kimi.weight @model.layers.1.mlp.shared_experts.up_proj.weight : tensor<6144x7168xbf16>
kimi.weight @model.layers.1.mlp.shared_experts.down_proj.weight : tensor<7168x6144xbf16>

func.func @layer_1_kda(%emb: tensor<1x8192x7168xbf16>, %h: tensor<1x8192x7168xbf16>,
                       %state: tensor<1x96x128x128xf32>)
    -> (tensor<1x8192x7168xbf16>, tensor<1x96x128x128xf32>) {
  // Attention input: AttnRes over [embedding, partial block sum].
  %rn = kimi.weight_ref @model.layers.1.self_attention_res_norm.weight : tensor<7168xbf16>
  %rp = kimi.weight_ref @model.layers.1.self_attention_res_proj.weight : tensor<1x7168xbf16>
  %mix = kimi.attn_res [%emb, %h] query %rp norm %rn eps(1.0e-5) : [tensor<1x8192x7168xbf16>, tensor<1x8192x7168xbf16>], tensor<1x7168xbf16>, tensor<7168xbf16> -> tensor<1x8192x7168xbf16>
  %ln = kimi.weight_ref @model.layers.1.input_layernorm.weight : tensor<7168xbf16>
  %x = kimi.rms_norm %mix, %ln eps(1.0e-5) : tensor<1x8192x7168xbf16>, tensor<7168xbf16> -> tensor<1x8192x7168xbf16>

  // q, k, v: projection, causal short conv + SiLU, heads, L2 norm of q and k.
  %wq = kimi.weight_ref @model.layers.1.self_attn.q_proj.weight : tensor<12288x7168xbf16>
  %wk = kimi.weight_ref @model.layers.1.self_attn.k_proj.weight : tensor<12288x7168xbf16>
  %wv = kimi.weight_ref @model.layers.1.self_attn.v_proj.weight : tensor<12288x7168xbf16>
  %cq = kimi.weight_ref @model.layers.1.self_attn.q_conv1d.weight : tensor<12288x1x4xf32>
  %ck = kimi.weight_ref @model.layers.1.self_attn.k_conv1d.weight : tensor<12288x1x4xf32>
  %cv = kimi.weight_ref @model.layers.1.self_attn.v_conv1d.weight : tensor<12288x1x4xf32>
  %q0 = kimi.linear %x, %wq : tensor<1x8192x7168xbf16>, tensor<12288x7168xbf16> -> tensor<1x8192x12288xbf16>
  %k0 = kimi.linear %x, %wk : tensor<1x8192x7168xbf16>, tensor<12288x7168xbf16> -> tensor<1x8192x12288xbf16>
  %v0 = kimi.linear %x, %wv : tensor<1x8192x7168xbf16>, tensor<12288x7168xbf16> -> tensor<1x8192x12288xbf16>
  %q1, %qs = kimi.short_conv silu %q0, %cq : tensor<1x8192x12288xbf16>, tensor<12288x1x4xf32> -> tensor<1x8192x12288xbf16>, tensor<1x3x12288xf32>
  %k1, %ks = kimi.short_conv silu %k0, %ck : tensor<1x8192x12288xbf16>, tensor<12288x1x4xf32> -> tensor<1x8192x12288xbf16>, tensor<1x3x12288xf32>
  %v1, %vs = kimi.short_conv silu %v0, %cv : tensor<1x8192x12288xbf16>, tensor<12288x1x4xf32> -> tensor<1x8192x12288xbf16>, tensor<1x3x12288xf32>
  %q2 = tensor.expand_shape %q1 [[0], [1], [2, 3]] output_shape [1, 8192, 96, 128] : tensor<1x8192x12288xbf16> into tensor<1x8192x96x128xbf16>
  %k2 = tensor.expand_shape %k1 [[0], [1], [2, 3]] output_shape [1, 8192, 96, 128] : tensor<1x8192x12288xbf16> into tensor<1x8192x96x128xbf16>
  %v  = tensor.expand_shape %v1 [[0], [1], [2, 3]] output_shape [1, 8192, 96, 128] : tensor<1x8192x12288xbf16> into tensor<1x8192x96x128xbf16>
  %q = kimi.l2_norm %q2 eps(1.0e-6) : tensor<1x8192x96x128xbf16> -> tensor<1x8192x96x128xbf16>
  %k = kimi.l2_norm %k2 eps(1.0e-6) : tensor<1x8192x96x128xbf16> -> tensor<1x8192x96x128xbf16>

  // Forget gate: low-rank input, lower-bounded form (g in (-5, 0)).
  %fa = kimi.weight_ref @model.layers.1.self_attn.f_a_proj.weight : tensor<128x7168xbf16>
  %fb = kimi.weight_ref @model.layers.1.self_attn.f_b_proj.weight : tensor<12288x128xbf16>
  %alog = kimi.weight_ref @model.layers.1.self_attn.A_log : tensor<96xf32>
  %dtb = kimi.weight_ref @model.layers.1.self_attn.dt_bias : tensor<96x128xf32>
  %z0 = kimi.linear %x, %fa : tensor<1x8192x7168xbf16>, tensor<128x7168xbf16> -> tensor<1x8192x128xbf16>
  %z1 = kimi.linear %z0, %fb : tensor<1x8192x128xbf16>, tensor<12288x128xbf16> -> tensor<1x8192x12288xbf16>
  %z = tensor.expand_shape %z1 [[0], [1], [2, 3]] output_shape [1, 8192, 96, 128] : tensor<1x8192x12288xbf16> into tensor<1x8192x96x128xbf16>
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %alog, %dtb : tensor<1x8192x96x128xbf16>, tensor<96xf32>, tensor<96x128xf32> -> tensor<1x8192x96x128xf32>

  // beta = sigmoid(b_proj x)
  %wb = kimi.weight_ref @model.layers.1.self_attn.b_proj.weight : tensor<96x7168xbf16>
  %bl = kimi.linear %x, %wb : tensor<1x8192x7168xbf16>, tensor<96x7168xbf16> -> tensor<1x8192x96xf32>
  %beta = kimi.sigmoid %bl : tensor<1x8192x96xf32> -> tensor<1x8192x96xf32>

  // The delta rule, then the gated per-head output norm and o_proj.
  %o, %s = kimi.kda %q, %k, %v, %g, %beta initial_state %state scale(0.08838834764831845) : (tensor<1x8192x96x128xbf16>, tensor<1x8192x96x128xbf16>, tensor<1x8192x96x128xbf16>, tensor<1x8192x96x128xf32>, tensor<1x8192x96xf32>, tensor<1x96x128x128xf32>) -> (tensor<1x8192x96x128xbf16>, tensor<1x96x128x128xf32>)
  %wg = kimi.weight_ref @model.layers.1.self_attn.g_proj.weight : tensor<12288x7168xbf16>
  %gl = kimi.linear %x, %wg : tensor<1x8192x7168xbf16>, tensor<12288x7168xbf16> -> tensor<1x8192x12288xbf16>
  %gh = tensor.expand_shape %gl [[0], [1], [2, 3]] output_shape [1, 8192, 96, 128] : tensor<1x8192x12288xbf16> into tensor<1x8192x96x128xbf16>
  %on = kimi.weight_ref @model.layers.1.self_attn.o_norm.weight : tensor<128xf32>
  %y = kimi.gated_rms_norm %o, %gh, %on eps(1.0e-5) : tensor<1x8192x96x128xbf16>, tensor<1x8192x96x128xbf16>, tensor<128xf32> -> tensor<1x8192x96x128xbf16>
  %yf = tensor.collapse_shape %y [[0], [1], [2, 3]] : tensor<1x8192x96x128xbf16> into tensor<1x8192x12288xbf16>
  %wo = kimi.weight_ref @model.layers.1.self_attn.o_proj.weight : tensor<7168x12288xbf16>
  %a = kimi.linear %yf, %wo : tensor<1x8192x12288xbf16>, tensor<7168x12288xbf16> -> tensor<1x8192x7168xbf16>
  %prefix = arith.addf %h, %a : tensor<1x8192x7168xbf16>

  // MLP input: AttnRes again, then the LatentMoE and the shared experts.
  %mn = kimi.weight_ref @model.layers.1.mlp_res_norm.weight : tensor<7168xbf16>
  %mp = kimi.weight_ref @model.layers.1.mlp_res_proj.weight : tensor<1x7168xbf16>
  %m = kimi.attn_res [%emb, %prefix] query %mp norm %mn eps(1.0e-5) : [tensor<1x8192x7168xbf16>, tensor<1x8192x7168xbf16>], tensor<1x7168xbf16>, tensor<7168xbf16> -> tensor<1x8192x7168xbf16>
  %pln = kimi.weight_ref @model.layers.1.post_attention_layernorm.weight : tensor<7168xbf16>
  %xm = kimi.rms_norm %m, %pln eps(1.0e-5) : tensor<1x8192x7168xbf16>, tensor<7168xbf16> -> tensor<1x8192x7168xbf16>
  %rw = kimi.weight_ref @model.layers.1.mlp.gate.weight : tensor<896x7168xbf16>
  %rb = kimi.weight_ref @model.layers.1.mlp.gate.e_score_correction_bias : tensor<896xf32>
  %wts, %idx = kimi.router %xm, %rw, %rb top_k(16) renormalize : tensor<1x8192x7168xbf16>, tensor<896x7168xbf16>, tensor<896xf32> -> tensor<1x8192x16xf32>, tensor<1x8192x16xi32>
  %dl = kimi.weight_ref @model.layers.1.mlp.routed_expert_down_proj.weight : tensor<3584x7168xbf16>
  %eg = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<896x3072x3584xf4E2M1FN>
  %eu = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<896x3072x3584xf4E2M1FN>
  %ed = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.down_proj.weight" : tensor<896x3584x3072xf4E2M1FN>
  %sg = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.gate_proj.weight_scale" : tensor<896x3072x112xf8E8M0FNU>
  %su = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.up_proj.weight_scale" : tensor<896x3072x112xf8E8M0FNU>
  %sd = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.down_proj.weight_scale" : tensor<896x3584x96xf8E8M0FNU>
  %ln3 = kimi.weight_ref @model.layers.1.mlp.routed_expert_norm.weight : tensor<3584xbf16>
  %ul = kimi.weight_ref @model.layers.1.mlp.routed_expert_up_proj.weight : tensor<7168x3584xbf16>
  %routed = kimi.latent_moe situ %xm, %wts, %idx down %dl experts(%eg, %eu, %ed) scales(%sg, %su, %sd) norm %ln3 up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<1x8192x7168xbf16>, tensor<1x8192x16xf32>, tensor<1x8192x16xi32>, tensor<3584x7168xbf16>, tensor<896x3072x3584xf4E2M1FN>, tensor<896x3072x3584xf4E2M1FN>, tensor<896x3584x3072xf4E2M1FN>, tensor<896x3072x112xf8E8M0FNU>, tensor<896x3072x112xf8E8M0FNU>, tensor<896x3584x96xf8E8M0FNU>, tensor<3584xbf16>, tensor<7168x3584xbf16>) -> tensor<1x8192x7168xbf16>
  %shg = kimi.weight_ref @model.layers.1.mlp.shared_experts.gate_proj.weight : tensor<6144x7168xbf16>
  %shu = kimi.weight_ref @model.layers.1.mlp.shared_experts.up_proj.weight : tensor<6144x7168xbf16>
  %shd = kimi.weight_ref @model.layers.1.mlp.shared_experts.down_proj.weight : tensor<7168x6144xbf16>
  %sg0 = kimi.linear %xm, %shg : tensor<1x8192x7168xbf16>, tensor<6144x7168xbf16> -> tensor<1x8192x6144xf32>
  %su0 = kimi.linear %xm, %shu : tensor<1x8192x7168xbf16>, tensor<6144x7168xbf16> -> tensor<1x8192x6144xf32>
  %act = kimi.situ_glu %sg0, %su0 beta(4.0) linear_beta(25.0) : tensor<1x8192x6144xf32>, tensor<1x8192x6144xf32> -> tensor<1x8192x6144xbf16>
  %shared = kimi.linear %act, %shd : tensor<1x8192x6144xbf16>, tensor<7168x6144xbf16> -> tensor<1x8192x7168xbf16>
  %mlp = arith.addf %routed, %shared : tensor<1x8192x7168xbf16>
  %next = arith.addf %prefix, %mlp : tensor<1x8192x7168xbf16>
  return %next, %s : tensor<1x8192x7168xbf16>, tensor<1x96x128x128xf32>
}

// Layer 3 (gated MLA without positional encoding); its MLP is the same
// LatentMoE as layer 1's and is left out here.
kimi.weight @model.layers.3.self_attention_res_norm.weight : tensor<7168xbf16>
kimi.weight @model.layers.3.self_attention_res_proj.weight : tensor<1x7168xbf16>
kimi.weight @model.layers.3.input_layernorm.weight : tensor<7168xbf16>
kimi.weight @model.layers.3.self_attn.q_a_proj.weight : tensor<1536x7168xbf16>
kimi.weight @model.layers.3.self_attn.q_a_layernorm.weight : tensor<1536xbf16>
kimi.weight @model.layers.3.self_attn.q_b_proj.weight : tensor<18432x1536xbf16>
kimi.weight @model.layers.3.self_attn.kv_a_proj_with_mqa.weight : tensor<576x7168xbf16>
kimi.weight @model.layers.3.self_attn.kv_a_layernorm.weight : tensor<512xbf16>
kimi.weight @model.layers.3.self_attn.kv_b_proj.weight : tensor<24576x512xbf16>
kimi.weight @model.layers.3.self_attn.g_proj.weight : tensor<12288x7168xbf16>
kimi.weight @model.layers.3.self_attn.o_proj.weight : tensor<7168x12288xbf16>

func.func @layer_3_mla_attention(%emb: tensor<1x8192x7168xbf16>, %h: tensor<1x8192x7168xbf16>)
    -> (tensor<1x8192x7168xbf16>, tensor<1x8192x576xbf16>) {
  %rn = kimi.weight_ref @model.layers.3.self_attention_res_norm.weight : tensor<7168xbf16>
  %rp = kimi.weight_ref @model.layers.3.self_attention_res_proj.weight : tensor<1x7168xbf16>
  %mix = kimi.attn_res [%emb, %h] query %rp norm %rn eps(1.0e-5) : [tensor<1x8192x7168xbf16>, tensor<1x8192x7168xbf16>], tensor<1x7168xbf16>, tensor<7168xbf16> -> tensor<1x8192x7168xbf16>
  %ln = kimi.weight_ref @model.layers.3.input_layernorm.weight : tensor<7168xbf16>
  %x = kimi.rms_norm %mix, %ln eps(1.0e-5) : tensor<1x8192x7168xbf16>, tensor<7168xbf16> -> tensor<1x8192x7168xbf16>

  // q = W_qb RMSNorm(W_qa x), 96 heads of [q_nope 128 | q_pe 64].
  %wqa = kimi.weight_ref @model.layers.3.self_attn.q_a_proj.weight : tensor<1536x7168xbf16>
  %nqa = kimi.weight_ref @model.layers.3.self_attn.q_a_layernorm.weight : tensor<1536xbf16>
  %wqb = kimi.weight_ref @model.layers.3.self_attn.q_b_proj.weight : tensor<18432x1536xbf16>
  %qa = kimi.linear %x, %wqa : tensor<1x8192x7168xbf16>, tensor<1536x7168xbf16> -> tensor<1x8192x1536xbf16>
  %qn = kimi.rms_norm %qa, %nqa eps(1.0e-6) : tensor<1x8192x1536xbf16>, tensor<1536xbf16> -> tensor<1x8192x1536xbf16>
  %qf = kimi.linear %qn, %wqb : tensor<1x8192x1536xbf16>, tensor<18432x1536xbf16> -> tensor<1x8192x18432xbf16>
  %q = tensor.expand_shape %qf [[0], [1], [2, 3]] output_shape [1, 8192, 96, 192] : tensor<1x8192x18432xbf16> into tensor<1x8192x96x192xbf16>

  // Latent cache row [RMSNorm(ckv) 512 | k_pe 64]: the 576 values cached per token.
  %wkva = kimi.weight_ref @model.layers.3.self_attn.kv_a_proj_with_mqa.weight : tensor<576x7168xbf16>
  %nkv = kimi.weight_ref @model.layers.3.self_attn.kv_a_layernorm.weight : tensor<512xbf16>
  %kva = kimi.linear %x, %wkva : tensor<1x8192x7168xbf16>, tensor<576x7168xbf16> -> tensor<1x8192x576xbf16>
  %ckv0 = tensor.extract_slice %kva[0, 0, 0] [1, 8192, 512] [1, 1, 1] : tensor<1x8192x576xbf16> to tensor<1x8192x512xbf16>
  %kpe = tensor.extract_slice %kva[0, 0, 512] [1, 8192, 64] [1, 1, 1] : tensor<1x8192x576xbf16> to tensor<1x8192x64xbf16>
  %ckv = kimi.rms_norm %ckv0, %nkv eps(1.0e-6) : tensor<1x8192x512xbf16>, tensor<512xbf16> -> tensor<1x8192x512xbf16>
  %cache = tensor.concat dim(2) %ckv, %kpe : (tensor<1x8192x512xbf16>, tensor<1x8192x64xbf16>) -> tensor<1x8192x576xbf16>

  // Causal attention with the output gate, scale 192^-0.5.
  %wkvb = kimi.weight_ref @model.layers.3.self_attn.kv_b_proj.weight : tensor<24576x512xbf16>
  %wg = kimi.weight_ref @model.layers.3.self_attn.g_proj.weight : tensor<12288x7168xbf16>
  %gl = kimi.linear %x, %wg : tensor<1x8192x7168xbf16>, tensor<12288x7168xbf16> -> tensor<1x8192x12288xbf16>
  %gate = tensor.expand_shape %gl [[0], [1], [2, 3]] output_shape [1, 8192, 96, 128] : tensor<1x8192x12288xbf16> into tensor<1x8192x96x128xbf16>
  %o = kimi.mla %q, %ckv, %kpe, %wkvb gate %gate scale(0.07216878364870323) : (tensor<1x8192x96x192xbf16>, tensor<1x8192x512xbf16>, tensor<1x8192x64xbf16>, tensor<24576x512xbf16>, tensor<1x8192x96x128xbf16>) -> tensor<1x8192x96x128xbf16>
  %of = tensor.collapse_shape %o [[0], [1], [2, 3]] : tensor<1x8192x96x128xbf16> into tensor<1x8192x12288xbf16>
  %wo = kimi.weight_ref @model.layers.3.self_attn.o_proj.weight : tensor<7168x12288xbf16>
  %a = kimi.linear %of, %wo : tensor<1x8192x12288xbf16>, tensor<7168x12288xbf16> -> tensor<1x8192x7168xbf16>
  %prefix = arith.addf %h, %a : tensor<1x8192x7168xbf16>
  return %prefix, %cache : tensor<1x8192x7168xbf16>, tensor<1x8192x576xbf16>
}

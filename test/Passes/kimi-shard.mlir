// Sharding rules of the kimi ops (passes/ShardingModels.cpp) through the
// upstream pipeline: kimi-shard places parameters and state, forward
// sharding-propagation derives the activations, shard-partition writes the
// per-rank code, kimi-localize-weights declares each rank's weight block.
// RUN: kimi-opt %s -split-input-file --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=tp,ep},func.func(sharding-propagation{traversal=forward},shard-partition),kimi-localize-weights,canonicalize)" | FileCheck %s

// TP, column then row parallel (dense MLP): the row-parallel product's
// partial sums are all-reduced; the vocabulary-split lm_head is all-gathered.
kimi.weight @model.layers.0.mlp.gate_proj.weight : tensor<64x16xf32>
kimi.weight @model.layers.0.mlp.up_proj.weight : tensor<64x16xf32>
kimi.weight @model.layers.0.mlp.down_proj.weight : tensor<16x64xf32>
kimi.weight @lm_head.weight : tensor<32x16xf32>
func.func @prefill(%x: tensor<1x4x16xf32>) -> tensor<1x4x32xf32> {
  %g = kimi.weight_ref @model.layers.0.mlp.gate_proj.weight : tensor<64x16xf32>
  %u = kimi.weight_ref @model.layers.0.mlp.up_proj.weight : tensor<64x16xf32>
  %d = kimi.weight_ref @model.layers.0.mlp.down_proj.weight : tensor<16x64xf32>
  %h = kimi.weight_ref @lm_head.weight : tensor<32x16xf32>
  %a = kimi.linear %x, %g : tensor<1x4x16xf32>, tensor<64x16xf32> -> tensor<1x4x64xf32>
  %b = kimi.linear %x, %u : tensor<1x4x16xf32>, tensor<64x16xf32> -> tensor<1x4x64xf32>
  %c = kimi.situ_glu %a, %b beta(4.0) linear_beta(25.0) : tensor<1x4x64xf32>, tensor<1x4x64xf32> -> tensor<1x4x64xf32>
  %y = kimi.linear %c, %d : tensor<1x4x64xf32>, tensor<16x64xf32> -> tensor<1x4x16xf32>
  %r = arith.addf %x, %y : tensor<1x4x16xf32>
  %l = kimi.linear %r, %h : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
  return %l : tensor<1x4x32xf32>
}
// CHECK-LABEL: shard.grid @supernode(shape = 4)
// CHECK: kimi.weight @model.layers.0.mlp.gate_proj.weight {parts = array<i64: 4, 1>} : tensor<16x16xf32>
// CHECK: kimi.weight @model.layers.0.mlp.down_proj.weight {parts = array<i64: 1, 4>} : tensor<16x16xf32>
// CHECK: kimi.weight @lm_head.weight {parts = array<i64: 4, 1>} : tensor<8x16xf32>
// CHECK: func.func @prefill(%[[X:.*]]: tensor<1x4x16xf32>) -> tensor<1x4x32xf32>
// CHECK: %[[A:.*]] = kimi.linear %[[X]], %{{.*}} -> tensor<1x4x16xf32>
// CHECK: %[[C:.*]] = kimi.situ_glu
// CHECK: %[[Y:.*]] = kimi.linear %[[C]], %{{.*}} : tensor<1x4x16xf32>, tensor<16x16xf32> -> tensor<1x4x16xf32>
// CHECK: %[[R:.*]] = shard.all_reduce %[[Y]] on @supernode grid_axes = [0] : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
// CHECK: arith.addf %[[X]], %[[R]]
// CHECK: %[[L:.*]] = kimi.linear {{.*}} -> tensor<1x4x8xf32>
// CHECK: %[[G:.*]] = shard.all_gather %[[L]] on @supernode grid_axes = [0] gather_axis = 2 : tensor<1x4x8xf32> -> tensor<1x4x32xf32>
// CHECK: return %[[G]]

// -----

// TP, KDA by heads: projections, short conv (weights and state by channel),
// heads, L2 norm, gate, the recurrence and its state by heads, gated norm.
kimi.weight @model.layers.1.self_attn.q_proj.weight : tensor<32x16xf32>
kimi.weight @model.layers.1.self_attn.q_conv1d.weight : tensor<32x1x4xf32>
kimi.weight @model.layers.1.self_attn.f_a_proj.weight : tensor<8x16xf32>
kimi.weight @model.layers.1.self_attn.f_b_proj.weight : tensor<32x8xf32>
kimi.weight @model.layers.1.self_attn.A_log : tensor<4xf32>
kimi.weight @model.layers.1.self_attn.dt_bias : tensor<4x8xf32>
kimi.weight @model.layers.1.self_attn.b_proj.weight : tensor<4x16xf32>
kimi.weight @model.layers.1.self_attn.o_norm.weight : tensor<8xf32>
kimi.weight @model.layers.1.self_attn.o_proj.weight : tensor<16x32xf32>
func.func @decode(%x: tensor<1x4x16xf32>, %s: tensor<1x4x8x8xf32> {kimi.state = "layers.1.kda_state"}, %c: tensor<1x3x32xf32> {kimi.state = "layers.1.q_conv_state"}) -> (tensor<1x4x16xf32>, tensor<1x4x8x8xf32> {kimi.state = "layers.1.kda_state"}, tensor<1x3x32xf32> {kimi.state = "layers.1.q_conv_state"}) {
  %wq = kimi.weight_ref @model.layers.1.self_attn.q_proj.weight : tensor<32x16xf32>
  %cq = kimi.weight_ref @model.layers.1.self_attn.q_conv1d.weight : tensor<32x1x4xf32>
  %q0 = kimi.linear %x, %wq : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
  %q1, %qs = kimi.short_conv silu %q0, %cq state %c : tensor<1x4x32xf32>, tensor<32x1x4xf32>, tensor<1x3x32xf32> -> tensor<1x4x32xf32>, tensor<1x3x32xf32>
  %q2 = tensor.expand_shape %q1 [[0], [1], [2, 3]] output_shape [1, 4, 4, 8] : tensor<1x4x32xf32> into tensor<1x4x4x8xf32>
  %q = kimi.l2_norm %q2 eps(1.0e-6) : tensor<1x4x4x8xf32> -> tensor<1x4x4x8xf32>
  %fa = kimi.weight_ref @model.layers.1.self_attn.f_a_proj.weight : tensor<8x16xf32>
  %fb = kimi.weight_ref @model.layers.1.self_attn.f_b_proj.weight : tensor<32x8xf32>
  %al = kimi.weight_ref @model.layers.1.self_attn.A_log : tensor<4xf32>
  %dt = kimi.weight_ref @model.layers.1.self_attn.dt_bias : tensor<4x8xf32>
  %z0 = kimi.linear %x, %fa : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
  %z1 = kimi.linear %z0, %fb : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
  %z = tensor.expand_shape %z1 [[0], [1], [2, 3]] output_shape [1, 4, 4, 8] : tensor<1x4x32xf32> into tensor<1x4x4x8xf32>
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %al, %dt : tensor<1x4x4x8xf32>, tensor<4xf32>, tensor<4x8xf32> -> tensor<1x4x4x8xf32>
  %wb = kimi.weight_ref @model.layers.1.self_attn.b_proj.weight : tensor<4x16xf32>
  %bl = kimi.linear %x, %wb : tensor<1x4x16xf32>, tensor<4x16xf32> -> tensor<1x4x4xf32>
  %beta = kimi.sigmoid %bl : tensor<1x4x4xf32> -> tensor<1x4x4xf32>
  %o, %sn = kimi.kda %q, %q, %q, %g, %beta initial_state %s scale(0.35355339059327373) : (tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4xf32>, tensor<1x4x8x8xf32>) -> (tensor<1x4x4x8xf32>, tensor<1x4x8x8xf32>)
  %on = kimi.weight_ref @model.layers.1.self_attn.o_norm.weight : tensor<8xf32>
  %y = kimi.gated_rms_norm %o, %q, %on eps(1.0e-5) : tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<8xf32> -> tensor<1x4x4x8xf32>
  %yf = tensor.collapse_shape %y [[0], [1], [2, 3]] : tensor<1x4x4x8xf32> into tensor<1x4x32xf32>
  %wo = kimi.weight_ref @model.layers.1.self_attn.o_proj.weight : tensor<16x32xf32>
  %a = kimi.linear %yf, %wo : tensor<1x4x32xf32>, tensor<16x32xf32> -> tensor<1x4x16xf32>
  return %a, %sn, %qs : tensor<1x4x16xf32>, tensor<1x4x8x8xf32>, tensor<1x3x32xf32>
}
// CHECK-LABEL: shard.grid @supernode(shape = 4)
// CHECK: kimi.weight @model.layers.1.self_attn.q_conv1d.weight {parts = array<i64: 4, 1, 1>} : tensor<8x1x4xf32>
// CHECK: kimi.weight @model.layers.1.self_attn.f_a_proj.weight : tensor<8x16xf32>
// CHECK: kimi.weight @model.layers.1.self_attn.A_log {parts = array<i64: 4>} : tensor<1xf32>
// CHECK: kimi.weight @model.layers.1.self_attn.dt_bias {parts = array<i64: 4, 1>} : tensor<1x8xf32>
// CHECK: kimi.weight @model.layers.1.self_attn.o_norm.weight : tensor<8xf32>
// CHECK: func.func @decode(%{{.*}}: tensor<1x4x16xf32>, %{{.*}}: tensor<1x1x8x8xf32> {kimi.state = "layers.1.kda_state"}, %{{.*}}: tensor<1x3x8xf32> {kimi.state = "layers.1.q_conv_state"})
// CHECK-SAME: -> (tensor<1x4x16xf32>, tensor<1x1x8x8xf32> {kimi.state = "layers.1.kda_state"}, tensor<1x3x8xf32> {kimi.state = "layers.1.q_conv_state"})
// CHECK: kimi.short_conv silu {{.*}} : tensor<1x4x8xf32>, tensor<8x1x4xf32>, tensor<1x3x8xf32> -> tensor<1x4x8xf32>, tensor<1x3x8xf32>
// CHECK: tensor.expand_shape {{.*}} output_shape [1, 4, 1, 8] : tensor<1x4x8xf32> into tensor<1x4x1x8xf32>
// CHECK: kimi.kda_gate lower_bound {{.*}} : tensor<1x4x1x8xf32>, tensor<1xf32>, tensor<1x8xf32> -> tensor<1x4x1x8xf32>
// CHECK: kimi.kda {{.*}} -> (tensor<1x4x1x8xf32>, tensor<1x1x8x8xf32>)
// CHECK: kimi.gated_rms_norm {{.*}} -> tensor<1x4x1x8xf32>
// CHECK: tensor.collapse_shape {{.*}} into tensor<1x4x8xf32>
// CHECK: kimi.linear {{.*}} : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
// CHECK-NEXT: shard.all_reduce
// CHECK-NOT: shard.
// CHECK: return

// -----

// TP, MLA decode by heads: the latent cache and the down projections stay
// replicated, kv_b_proj is cut in whole heads.
kimi.weight @model.layers.3.self_attn.q_b_proj.weight : tensor<48x8xf32>
kimi.weight @model.layers.3.self_attn.kv_b_proj.weight : tensor<64x8xf32>
kimi.weight @model.layers.3.self_attn.o_proj.weight : tensor<16x32xf32>
func.func @decode(%qa: tensor<1x1x8xf32>, %cache: tensor<1x5x12xf32> {kimi.state = "layers.3.mla_cache"}) -> tensor<1x1x16xf32> {
  %wqb = kimi.weight_ref @model.layers.3.self_attn.q_b_proj.weight : tensor<48x8xf32>
  %kvb = kimi.weight_ref @model.layers.3.self_attn.kv_b_proj.weight : tensor<64x8xf32>
  %wo = kimi.weight_ref @model.layers.3.self_attn.o_proj.weight : tensor<16x32xf32>
  %qf = kimi.linear %qa, %wqb : tensor<1x1x8xf32>, tensor<48x8xf32> -> tensor<1x1x48xf32>
  %q = tensor.expand_shape %qf [[0], [1], [2, 3]] output_shape [1, 1, 4, 12] : tensor<1x1x48xf32> into tensor<1x1x4x12xf32>
  %o = kimi.mla_decode %q, %cache, %kvb scale(0.2886751345948129) : (tensor<1x1x4x12xf32>, tensor<1x5x12xf32>, tensor<64x8xf32>) -> tensor<1x1x4x8xf32>
  %of = tensor.collapse_shape %o [[0], [1], [2, 3]] : tensor<1x1x4x8xf32> into tensor<1x1x32xf32>
  %y = kimi.linear %of, %wo : tensor<1x1x32xf32>, tensor<16x32xf32> -> tensor<1x1x16xf32>
  return %y : tensor<1x1x16xf32>
}
// CHECK-LABEL: shard.grid @supernode(shape = 4)
// CHECK: kimi.weight @model.layers.3.self_attn.kv_b_proj.weight {parts = array<i64: 4, 1>} : tensor<16x8xf32>
// CHECK: func.func @decode(%{{.*}}: tensor<1x1x8xf32>, %{{.*}}: tensor<1x5x12xf32> {kimi.state = "layers.3.mla_cache"})
// CHECK: kimi.mla_decode {{.*}} : (tensor<1x1x1x12xf32>, tensor<1x5x12xf32>, tensor<16x8xf32>) -> tensor<1x1x1x8xf32>
// CHECK: shard.all_reduce {{.*}} : tensor<1x1x16xf32> -> tensor<1x1x16xf32>

// -----

// EP: each rank holds 4 of the 16 experts; routing is made local (weight 0
// for experts elsewhere) and the contributions are all-reduced. k = 4 equals
// the local expert count here; it may exceed it.
kimi.weight @model.layers.1.mlp.gate.weight : tensor<16x8xf32>
kimi.weight @model.layers.1.mlp.gate.e_score_correction_bias : tensor<16xf32>
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<16x6x8xf32>
kimi.weight @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<16x6x8xf32>
kimi.weight @"model.layers.1.mlp.experts.{e}.down_proj.weight" : tensor<16x8x6xf32>
func.func @prefill(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
  %rw = kimi.weight_ref @model.layers.1.mlp.gate.weight : tensor<16x8xf32>
  %rb = kimi.weight_ref @model.layers.1.mlp.gate.e_score_correction_bias : tensor<16xf32>
  %w, %i = kimi.router %x, %rw, %rb top_k(4) renormalize : tensor<1x4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<1x4x4xf32>, tensor<1x4x4xi32>
  %eg = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<16x6x8xf32>
  %eu = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<16x6x8xf32>
  %ed = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.down_proj.weight" : tensor<16x8x6xf32>
  %y = kimi.routed_experts silu %x, %w, %i experts(%eg, %eu, %ed) : (tensor<1x4x8xf32>, tensor<1x4x4xf32>, tensor<1x4x4xi32>, tensor<16x6x8xf32>, tensor<16x6x8xf32>, tensor<16x8x6xf32>) -> tensor<1x4x8xf32>
  return %y : tensor<1x4x8xf32>
}
// CHECK-LABEL: shard.grid @supernode(shape = 4)
// CHECK: kimi.weight @model.layers.1.mlp.gate.weight : tensor<16x8xf32>
// CHECK: kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" {parts = array<i64: 4, 1, 1>} : tensor<4x6x8xf32>
// CHECK: kimi.weight @"model.layers.1.mlp.experts.{e}.down_proj.weight" {parts = array<i64: 4, 1, 1>} : tensor<4x8x6xf32>
// CHECK-DAG: %[[ZW:.*]] = arith.constant dense<0.000000e+00> : tensor<1x4x4xf32>
// CHECK-DAG: %[[NE:.*]] = arith.constant dense<4> : tensor<1x4x4xi32>
// CHECK-DAG: %[[ZI:.*]] = arith.constant dense<0> : tensor<1x4x4xi32>
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[W:.*]], %[[I:.*]] = kimi.router
// CHECK: %[[P:.*]] = shard.process_multi_index on @supernode axes = [0] : index
// CHECK: %[[F:.*]] = arith.muli %[[P]], %[[C4]] : index
// CHECK: %[[FI:.*]] = arith.index_cast %[[F]] : index to i32
// CHECK: %[[S:.*]] = tensor.splat %[[FI]] : tensor<1x4x4xi32>
// CHECK: %[[L:.*]] = arith.subi %[[I]], %[[S]]
// CHECK: %[[GE:.*]] = arith.cmpi sge, %[[L]], %[[ZI]]
// CHECK: %[[LT:.*]] = arith.cmpi slt, %[[L]], %[[NE]]
// CHECK: %[[M:.*]] = arith.andi %[[GE]], %[[LT]]
// CHECK: %[[LW:.*]] = arith.select %[[M]], %[[W]], %[[ZW]]
// CHECK: %[[LI:.*]] = arith.select %[[M]], %[[L]], %[[ZI]]
// CHECK: %[[E:.*]] = kimi.routed_experts silu %{{.*}}, %[[LW]], %[[LI]] experts({{.*}}) : (tensor<1x4x8xf32>, tensor<1x4x4xf32>, tensor<1x4x4xi32>, tensor<4x6x8xf32>, tensor<4x6x8xf32>, tensor<4x8x6xf32>) -> tensor<1x4x8xf32>
// CHECK: %[[R:.*]] = shard.all_reduce %[[E]] on @supernode grid_axes = [0]
// CHECK: return %[[R]]

// -----

// quantile_balance: experts' columns are independent and follow the bias.
// quantile_balance needs all rows and all experts (target load N k / E):
// margins split by rows are gathered first.
shard.grid @supernode(shape = 4)
func.func @balance(%m: tensor<64x16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %s = shard.sharding @supernode split_axes = [[0]] : !shard.sharding
  %ms = shard.shard %m to %s : tensor<64x16xf32>
  %nb = kimi.quantile_balance %ms, %b top_k(4) : tensor<64x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return %nb : tensor<16xf32>
}
// CHECK-LABEL: func.func @balance(%{{.*}}: tensor<64x16xf32>, %{{.*}}: tensor<16xf32>) -> tensor<16xf32>
// CHECK: shard.all_slice
// CHECK: %[[G:.*]] = shard.all_gather %{{.*}} on @supernode grid_axes = [0] gather_axis = 0 : tensor<16x16xf32> -> tensor<64x16xf32>
// CHECK: kimi.quantile_balance %[[G]], %{{.*}} top_k(4) : tensor<64x16xf32>, tensor<16xf32> -> tensor<16xf32>

// -----

// Layer functions stay functions: the call takes its callee's per-rank
// signature (named states split by the state rules), and each function is
// partitioned on its own.
kimi.weight @model.layers.1.self_attn.q_conv1d.weight : tensor<32x1x4xf32>
func.func private @prefill_layer_1(%x: tensor<1x4x32xf32>, %c: tensor<1x3x32xf32> {kimi.state = "layers.1.q_conv_state"}) -> (tensor<1x4x32xf32>, tensor<1x3x32xf32> {kimi.state = "layers.1.q_conv_state"}) {
  %w = kimi.weight_ref @model.layers.1.self_attn.q_conv1d.weight : tensor<32x1x4xf32>
  %y, %s = kimi.short_conv silu %x, %w state %c : tensor<1x4x32xf32>, tensor<32x1x4xf32>, tensor<1x3x32xf32> -> tensor<1x4x32xf32>, tensor<1x3x32xf32>
  return %y, %s : tensor<1x4x32xf32>, tensor<1x3x32xf32>
}
func.func @prefill(%x: tensor<1x4x32xf32>, %c: tensor<1x3x32xf32> {kimi.state = "layers.1.q_conv_state"}) -> (tensor<1x4x32xf32>, tensor<1x3x32xf32> {kimi.state = "layers.1.q_conv_state"}) {
  %y, %s = func.call @prefill_layer_1(%x, %c) : (tensor<1x4x32xf32>, tensor<1x3x32xf32>) -> (tensor<1x4x32xf32>, tensor<1x3x32xf32>)
  return %y, %s : tensor<1x4x32xf32>, tensor<1x3x32xf32>
}
// CHECK-LABEL: shard.grid @supernode(shape = 4)
// CHECK: func.func private @prefill_layer_1(%[[X:.*]]: tensor<1x4x32xf32>, %[[C:.*]]: tensor<1x3x8xf32> {kimi.state = "layers.1.q_conv_state"}) -> (tensor<1x4x32xf32>, tensor<1x3x8xf32> {kimi.state = "layers.1.q_conv_state"})
// CHECK: %[[XS:.*]] = shard.all_slice %[[X]] on @supernode grid_axes = [0] slice_axis = 2 : tensor<1x4x32xf32> -> tensor<1x4x8xf32>
// CHECK: %[[Y:.*]], %[[S:.*]] = kimi.short_conv silu %[[XS]], %{{.*}} state %[[C]] : tensor<1x4x8xf32>, tensor<8x1x4xf32>, tensor<1x3x8xf32> -> tensor<1x4x8xf32>, tensor<1x3x8xf32>
// CHECK: %[[G:.*]] = shard.all_gather %[[Y]] on @supernode grid_axes = [0] gather_axis = 2 : tensor<1x4x8xf32> -> tensor<1x4x32xf32>
// CHECK: return %[[G]], %[[S]]
// CHECK: func.func @prefill(%{{.*}}: tensor<1x4x32xf32>, %{{.*}}: tensor<1x3x8xf32> {kimi.state = "layers.1.q_conv_state"})
// CHECK: call @prefill_layer_1(%{{.*}}, %{{.*}}) : (tensor<1x4x32xf32>, tensor<1x3x8xf32>) -> (tensor<1x4x32xf32>, tensor<1x3x8xf32>)

// -----

// quantile_balance in histogram form shards by rows: each rank counts its
// margins, one integer all-reduce sums the counts, the bias comes from the
// sums with q from all 64 rows.
shard.grid @supernode(shape = 4)
func.func @balance(%m: tensor<64x16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %s = shard.sharding @supernode split_axes = [[0]] : !shard.sharding
  %ms = shard.shard %m to %s : tensor<64x16xf32>
  %nb = kimi.quantile_balance %ms, %b top_k(4) bins(256) : tensor<64x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return %nb : tensor<16xf32>
}
// CHECK-LABEL: func.func @balance
// CHECK: %[[MS:.*]] = shard.all_slice %{{.*}} on @supernode grid_axes = [0] slice_axis = 0 : tensor<64x16xf32> -> tensor<16x16xf32>
// CHECK: %[[C:.*]] = kimi.quantile_counts %[[MS]], %{{.*}} bins(256) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x256xi32>
// CHECK: %[[S:.*]] = shard.all_reduce %[[C]] on @supernode grid_axes = [0] : tensor<16x256xi32> -> tensor<16x256xi32>
// CHECK: kimi.quantile_update %[[S]], %{{.*}} rows(64) top_k(4) : tensor<16x256xi32>, tensor<16xf32> -> tensor<16xf32>
// CHECK-NOT: shard.all_gather

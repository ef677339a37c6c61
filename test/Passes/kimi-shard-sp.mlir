// Sequence parallel: inside the model the prompt is split by sequence, so a
// layer's token-wise ops (AttnRes, norms, projections) run on each rank's
// segment; the entry keeps all tokens and all logits (the runtime's
// contract), slices the tokens (canonicalization moves the slice ahead of
// the embedding) and gathers the layer's result. The short conv needs
// the previous tokens: its input is gathered first.
// RUN: kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=sp},func.func(sharding-propagation{traversal=forward},shard-partition),canonicalize)" | FileCheck %s

kimi.weight @model.embed_tokens.weight : tensor<32x8xf32>
kimi.weight @model.layers.1.self_attention_res_norm.weight : tensor<8xf32>
kimi.weight @model.layers.1.self_attention_res_proj.weight : tensor<1x8xf32>
kimi.weight @model.layers.1.self_attn.q_conv1d.weight : tensor<8x1x4xf32>
func.func private @prefill_layer_1(%e: tensor<1x8x8xf32>, %h: tensor<1x8x8xf32>) -> tensor<1x8x8xf32> {
  %rn = kimi.weight_ref @model.layers.1.self_attention_res_norm.weight : tensor<8xf32>
  %rp = kimi.weight_ref @model.layers.1.self_attention_res_proj.weight : tensor<1x8xf32>
  %cw = kimi.weight_ref @model.layers.1.self_attn.q_conv1d.weight : tensor<8x1x4xf32>
  %m = kimi.attn_res [%e, %h] query %rp norm %rn eps(1.0e-5) : [tensor<1x8x8xf32>, tensor<1x8x8xf32>], tensor<1x8xf32>, tensor<8xf32> -> tensor<1x8x8xf32>
  %c, %s = kimi.short_conv silu %m, %cw : tensor<1x8x8xf32>, tensor<8x1x4xf32> -> tensor<1x8x8xf32>, tensor<1x3x8xf32>
  return %c : tensor<1x8x8xf32>
}
func.func @prefill(%t: tensor<1x8xi32>) -> tensor<1x8x8xf32> {
  %e = kimi.weight_ref @model.embed_tokens.weight : tensor<32x8xf32>
  %h = kimi.embed %e[%t] : tensor<32x8xf32>, tensor<1x8xi32> -> tensor<1x8x8xf32>
  %y = func.call @prefill_layer_1(%h, %h) : (tensor<1x8x8xf32>, tensor<1x8x8xf32>) -> tensor<1x8x8xf32>
  return %y : tensor<1x8x8xf32>
}

// CHECK-LABEL: func.func private @prefill_layer_1
// CHECK-SAME: (%[[E:.*]]: tensor<1x2x8xf32>, %[[H:.*]]: tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
// CHECK: %[[M:.*]] = kimi.attn_res [%[[E]], %[[H]]] {{.*}} -> tensor<1x2x8xf32>
// CHECK: %[[G:.*]] = shard.all_gather %[[M]] on @supernode grid_axes = [0] gather_axis = 1 : tensor<1x2x8xf32> -> tensor<1x8x8xf32>
// CHECK: %[[C:.*]], %{{.*}} = kimi.short_conv silu %[[G]], {{.*}} -> tensor<1x8x8xf32>, tensor<1x3x8xf32>
// CHECK: %[[S:.*]] = shard.all_slice %[[C]] on @supernode grid_axes = [0] slice_axis = 1 : tensor<1x8x8xf32> -> tensor<1x2x8xf32>
// CHECK: return %[[S]]
// CHECK-LABEL: func.func @prefill(%{{.*}}: tensor<1x8xi32>) -> tensor<1x8x8xf32>
// CHECK: %[[TS:.*]] = shard.all_slice %{{.*}} on @supernode grid_axes = [0] slice_axis = 1 : tensor<1x8xi32> -> tensor<1x2xi32>
// CHECK: %[[XS:.*]] = kimi.embed %{{.*}}[%[[TS]]] : tensor<32x8xf32>, tensor<1x2xi32> -> tensor<1x2x8xf32>
// CHECK: %[[Y:.*]] = call @prefill_layer_1(%[[XS]], %[[XS]]) : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
// CHECK: %[[YG:.*]] = shard.all_gather %[[Y]] on @supernode grid_axes = [0] gather_axis = 1 : tensor<1x2x8xf32> -> tensor<1x8x8xf32>
// CHECK: return %[[YG]]

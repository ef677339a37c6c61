// Sequence parallel: the prompt split by sequence; token-wise ops
// (embedding, AttnRes, norms) run on each rank's segment, and the logits
// stay split by sequence.
// RUN: kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=sp},func.func(sharding-propagation{traversal=forward},shard-partition),canonicalize)" | FileCheck %s

// SP: the prompt split by sequence; token-wise ops (embedding, AttnRes,
// norms) run on each rank's segment, the logits are all-gathered.
kimi.weight @model.embed_tokens.weight : tensor<32x8xf32>
kimi.weight @model.layers.1.self_attention_res_norm.weight : tensor<8xf32>
kimi.weight @model.layers.1.self_attention_res_proj.weight : tensor<1x8xf32>
func.func @prefill(%t: tensor<1x8xi32>) -> tensor<1x8x8xf32> {
  %e = kimi.weight_ref @model.embed_tokens.weight : tensor<32x8xf32>
  %rn = kimi.weight_ref @model.layers.1.self_attention_res_norm.weight : tensor<8xf32>
  %rp = kimi.weight_ref @model.layers.1.self_attention_res_proj.weight : tensor<1x8xf32>
  %h = kimi.embed %e[%t] : tensor<32x8xf32>, tensor<1x8xi32> -> tensor<1x8x8xf32>
  %m = kimi.attn_res [%h, %h] query %rp norm %rn eps(1.0e-5) : [tensor<1x8x8xf32>, tensor<1x8x8xf32>], tensor<1x8xf32>, tensor<8xf32> -> tensor<1x8x8xf32>
  return %m : tensor<1x8x8xf32>
}
// CHECK-LABEL: func.func @prefill(%{{.*}}: tensor<1x2xi32>) -> tensor<1x2x8xf32>
// CHECK: %[[H:.*]] = kimi.embed {{.*}} : tensor<32x8xf32>, tensor<1x2xi32> -> tensor<1x2x8xf32>
// CHECK: %[[M:.*]] = kimi.attn_res [%[[H]], %[[H]]] {{.*}} -> tensor<1x2x8xf32>
// CHECK-NOT: shard.
// CHECK: return %[[M]] : tensor<1x2x8xf32>

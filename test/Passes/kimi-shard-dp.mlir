// Data parallel: tokens, states and logits split by batch; no exchange.
// RUN: kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=dp},func.func(sharding-propagation{traversal=forward},shard-partition),canonicalize)" | FileCheck %s

// DP: tokens, states and logits split by batch; nothing is exchanged.
kimi.weight @model.embed_tokens.weight : tensor<32x8xf32>
kimi.weight @model.norm.weight : tensor<8xf32>
func.func @decode(%t: tensor<4x1xi32>) -> tensor<4x1x8xf32> {
  %e = kimi.weight_ref @model.embed_tokens.weight : tensor<32x8xf32>
  %n = kimi.weight_ref @model.norm.weight : tensor<8xf32>
  %h = kimi.embed %e[%t] : tensor<32x8xf32>, tensor<4x1xi32> -> tensor<4x1x8xf32>
  %y = kimi.rms_norm %h, %n eps(1.0e-5) : tensor<4x1x8xf32>, tensor<8xf32> -> tensor<4x1x8xf32>
  return %y : tensor<4x1x8xf32>
}
// The runtime serves one sequence per data-parallel group.
// CHECK: module attributes {kimi.data_parallel = 4 : i64}
// CHECK-LABEL: func.func @decode(%{{.*}}: tensor<1x1xi32>) -> tensor<1x1x8xf32>
// CHECK: kimi.embed {{.*}} : tensor<32x8xf32>, tensor<1x1xi32> -> tensor<1x1x8xf32>
// CHECK: kimi.rms_norm {{.*}} -> tensor<1x1x8xf32>
// CHECK-NOT: shard.
// CHECK: return

// A 2 x 2 grid with sequence parallelism on the outer axis and tensor
// parallelism on the inner one: the entry's logits come out split two ways
// (tokens over axis 0, vocabulary over axis 1). The entry returns all
// logits: the vocabulary is gathered over the tensor-parallel group first,
// then the tokens over the sequence-parallel group (upstream resharding
// from both splits to replicated would undo only one), and lm_head's weight
// is never gathered.
// RUN: kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=2,2 strategy=sp,tp},func.func(sharding-propagation{traversal=forward},shard-partition),canonicalize)" | FileCheck %s

kimi.weight @model.embed_tokens.weight : tensor<32x8xf32>
kimi.weight @model.norm.weight : tensor<8xf32>
kimi.weight @lm_head.weight : tensor<32x8xf32>
func.func @prefill(%t: tensor<1x8xi32>) -> tensor<1x8x32xf32> {
  %e = kimi.weight_ref @model.embed_tokens.weight : tensor<32x8xf32>
  %n = kimi.weight_ref @model.norm.weight : tensor<8xf32>
  %w = kimi.weight_ref @lm_head.weight : tensor<32x8xf32>
  %h = kimi.embed %e[%t] : tensor<32x8xf32>, tensor<1x8xi32> -> tensor<1x8x8xf32>
  %y = kimi.rms_norm %h, %n eps(1.0e-5) : tensor<1x8x8xf32>, tensor<8xf32> -> tensor<1x8x8xf32>
  %l = kimi.linear %y, %w : tensor<1x8x8xf32>, tensor<32x8xf32> -> tensor<1x8x32xf32>
  return %l : tensor<1x8x32xf32>
}
// CHECK-LABEL: func.func @prefill(%{{.*}}: tensor<1x8xi32>) -> tensor<1x8x32xf32>
// CHECK: %[[W:.*]] = kimi.weight_ref @lm_head.weight {parts = array<i64: 2, 1>} : tensor<16x8xf32>
// CHECK: shard.all_slice %{{.*}} on @supernode grid_axes = [0] slice_axis = 1 : tensor<1x8x8xf32> -> tensor<1x4x8xf32>
// CHECK-NOT: shard.all_gather %[[W]]
// CHECK: %[[L:.*]] = kimi.linear %{{.*}}, %[[W]] : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
// CHECK: %[[V:.*]] = shard.all_gather %[[L]] on @supernode grid_axes = [1] gather_axis = 2 : tensor<1x4x16xf32> -> tensor<1x4x32xf32>
// CHECK: %[[T:.*]] = shard.all_gather %[[V]] on @supernode grid_axes = [0] gather_axis = 1 : tensor<1x4x32xf32> -> tensor<1x8x32xf32>
// CHECK: return %[[T]]

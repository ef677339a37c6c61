// Expert parallelism with split tokens (here dp: a decode batch of 4 over 4
// ranks; sp splits the sequence the same way): upstream propagation would
// not put one grid axis on two loops, so the routed experts take tokens and
// experts split on the same axis themselves. Dispatch: the group's latent
// tokens (projected down on their own rank) and their routing are
// all-gathered; each rank runs its 4 of the 16 experts; combine: a
// reduce-scatter gives each rank the complete sums of its own tokens. Every
// buffer is static: nothing is dropped, nothing depends on the routing.
// RUN: kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=dp,ep},func.func(sharding-propagation{traversal=forward},shard-partition),kimi-localize-weights,canonicalize)" | FileCheck %s

kimi.weight @model.layers.1.mlp.gate.weight : tensor<16x8xf32>
kimi.weight @model.layers.1.mlp.gate.e_score_correction_bias : tensor<16xf32>
kimi.weight @model.layers.1.mlp.routed_expert_down_proj.weight : tensor<4x8xf32>
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<16x6x4xf32>
kimi.weight @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<16x6x4xf32>
kimi.weight @"model.layers.1.mlp.experts.{e}.down_proj.weight" : tensor<16x4x6xf32>
kimi.weight @model.layers.1.mlp.routed_expert_up_proj.weight : tensor<8x4xf32>
func.func @decode(%x: tensor<4x1x8xf32>) -> tensor<4x1x8xf32> {
  %rw = kimi.weight_ref @model.layers.1.mlp.gate.weight : tensor<16x8xf32>
  %rb = kimi.weight_ref @model.layers.1.mlp.gate.e_score_correction_bias : tensor<16xf32>
  %w, %i = kimi.router %x, %rw, %rb top_k(4) renormalize : tensor<4x1x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x1x4xf32>, tensor<4x1x4xi32>
  %dl = kimi.weight_ref @model.layers.1.mlp.routed_expert_down_proj.weight : tensor<4x8xf32>
  %eg = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<16x6x4xf32>
  %eu = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<16x6x4xf32>
  %ed = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.down_proj.weight" : tensor<16x4x6xf32>
  %ul = kimi.weight_ref @model.layers.1.mlp.routed_expert_up_proj.weight : tensor<8x4xf32>
  %y = kimi.latent_moe silu %x, %w, %i down %dl experts(%eg, %eu, %ed) up %ul : (tensor<4x1x8xf32>, tensor<4x1x4xf32>, tensor<4x1x4xi32>, tensor<4x8xf32>, tensor<16x6x4xf32>, tensor<16x6x4xf32>, tensor<16x4x6xf32>, tensor<8x4xf32>) -> tensor<4x1x8xf32>
  return %y : tensor<4x1x8xf32>
}

// CHECK-LABEL: func.func @decode(%{{.*}}: tensor<1x1x8xf32>) -> tensor<1x1x8xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = kimi.router {{.*}} -> tensor<1x1x4xf32>, tensor<1x1x4xi32>
// CHECK: %[[Z:.*]] = kimi.linear {{.*}} : tensor<1x1x8xf32>, tensor<4x8xf32> -> tensor<1x1x4xf32>
// CHECK: %[[ZG:.*]] = shard.all_gather %[[Z]] on @supernode grid_axes = [0] gather_axis = 0 : tensor<1x1x4xf32> -> tensor<4x1x4xf32>
// CHECK: %[[WG:.*]] = shard.all_gather %[[W]] on @supernode grid_axes = [0] gather_axis = 0 : tensor<1x1x4xf32> -> tensor<4x1x4xf32>
// CHECK: %[[IG:.*]] = shard.all_gather %[[I]] on @supernode grid_axes = [0] gather_axis = 0 : tensor<1x1x4xi32> -> tensor<4x1x4xi32>
// CHECK: %[[R:.*]] = kimi.routed_experts silu %[[ZG]], {{.*}} : (tensor<4x1x4xf32>, tensor<4x1x4xf32>, tensor<4x1x4xi32>, tensor<4x6x4xf32>, tensor<4x6x4xf32>, tensor<4x4x6xf32>) -> tensor<4x1x4xf32>
// CHECK: %[[RS:.*]] = shard.reduce_scatter %[[R]] on @supernode grid_axes = [0] scatter_axis = 0 : tensor<4x1x4xf32> -> tensor<1x1x4xf32>
// CHECK: kimi.linear %[[RS]], %{{.*}} : tensor<1x1x4xf32>, tensor<8x4xf32> -> tensor<1x1x8xf32>
// CHECK-NOT: shard.all_reduce

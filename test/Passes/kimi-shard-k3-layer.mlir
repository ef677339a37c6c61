// One K3 KDA + LatentMoE layer (models/examples/k3-layers.mlir, real sizes)
// partitioned over an 8x8 supernode: heads tensor-parallel over the inner
// axis of 8 (96 / 8 = 12 heads), routed experts expert-parallel over all 64
// devices (896 / 64 = 14 per device).
// RUN: kimi-opt %S/../../models/examples/k3-layers.mlir --pass-pipeline="builtin.module(kimi-shard{grid=8,8 strategy=tp,ep},func.func(sharding-propagation{traversal=forward},shard-partition),kimi-localize-weights,canonicalize)" | FileCheck %s

// CHECK: shard.grid @supernode(shape = 8x8)
// CHECK: kimi.weight @model.layers.1.self_attn.q_proj.weight {parts = array<i64: 8, 1>} : tensor<1536x7168xbf16>
// CHECK: kimi.weight @model.layers.1.self_attn.f_a_proj.weight : tensor<128x7168xbf16>
// CHECK: kimi.weight @model.layers.1.self_attn.A_log {parts = array<i64: 8>} : tensor<12xf32>
// CHECK: kimi.weight @model.layers.1.self_attn.o_proj.weight {parts = array<i64: 1, 8>} : tensor<7168x1536xbf16>
// CHECK: kimi.weight @model.layers.1.mlp.gate.weight : tensor<896x7168xbf16>
// CHECK: kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" {parts = array<i64: 64, 1, 1>} : tensor<14x3072x3584xf4E2M1FN>
// CHECK: kimi.weight @"model.layers.1.mlp.experts.{e}.down_proj.weight_scale" {parts = array<i64: 64, 1, 1>} : tensor<14x3584x96xf8E8M0FNU>
// CHECK: kimi.weight @model.layers.1.mlp.shared_experts.gate_proj.weight {parts = array<i64: 8, 1>} : tensor<768x7168xbf16>
// CHECK: kimi.weight @model.layers.1.mlp.shared_experts.down_proj.weight {parts = array<i64: 1, 8>} : tensor<7168x768xbf16>

// CHECK-LABEL: func.func @layer_1_kda
// CHECK: kimi.short_conv silu {{.*}} -> tensor<1x8192x1536xbf16>, tensor<1x3x1536xf32>
// The unnamed state argument is replicated: each rank slices its 12 heads
// and the final state is gathered back.
// CHECK: %[[S:.*]] = shard.all_slice %arg2 on @supernode grid_axes = [1] slice_axis = 1 : tensor<1x96x128x128xf32> -> tensor<1x12x128x128xf32>
// CHECK: kimi.kda {{.*}} initial_state %[[S]] {{.*}} -> (tensor<1x8192x12x128xbf16>, tensor<1x12x128x128xf32>)
// CHECK: shard.all_gather {{.*}} grid_axes = [1] gather_axis = 1 : tensor<1x12x128x128xf32> -> tensor<1x96x128x128xf32>
// CHECK: kimi.linear {{.*}} : tensor<1x8192x1536xbf16>, tensor<7168x1536xbf16> -> tensor<1x8192x7168xbf16>
// CHECK-NEXT: shard.all_reduce {{.*}} grid_axes = [1] : tensor<1x8192x7168xbf16>
// LatentMoE decomposed around the expert-parallel routed experts.
// CHECK: kimi.router {{.*}} -> tensor<1x8192x16xf32>, tensor<1x8192x16xi32>
// CHECK: kimi.linear {{.*}} : tensor<1x8192x7168xbf16>, tensor<3584x7168xbf16> -> tensor<1x8192x3584xbf16>
// CHECK: shard.process_multi_index on @supernode axes = {{\[}}0, 1] : index, index
// CHECK: kimi.routed_experts situ {{.*}} : (tensor<1x8192x3584xbf16>, tensor<1x8192x16xf32>, tensor<1x8192x16xi32>, tensor<14x3072x3584xf4E2M1FN>, tensor<14x3072x3584xf4E2M1FN>, tensor<14x3584x3072xf4E2M1FN>, tensor<14x3072x112xf8E8M0FNU>, tensor<14x3072x112xf8E8M0FNU>, tensor<14x3584x96xf8E8M0FNU>) -> tensor<1x8192x3584xbf16>
// CHECK-NEXT: shard.all_reduce {{.*}} grid_axes = [0, 1] : tensor<1x8192x3584xbf16>
// CHECK-NEXT: kimi.rms_norm
// CHECK-NEXT: kimi.linear {{.*}} : tensor<1x8192x3584xbf16>, tensor<7168x3584xbf16> -> tensor<1x8192x7168xbf16>
// Shared experts: column then row parallel.
// CHECK: kimi.linear {{.*}} : tensor<1x8192x768xbf16>, tensor<7168x768xbf16> -> tensor<1x8192x7168xbf16>
// CHECK-NEXT: shard.all_reduce {{.*}} grid_axes = [1]

// CHECK-LABEL: func.func @layer_3_mla_attention
// CHECK: kimi.mla {{.*}} -> tensor<1x8192x12x128xbf16>
// CHECK: shard.all_reduce {{.*}} grid_axes = [1] : tensor<1x8192x7168xbf16>

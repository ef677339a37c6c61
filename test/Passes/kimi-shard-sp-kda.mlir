// Sequence parallel KDA (reference §2): the short conv takes a 3-token halo
// from the previous rank (one all-gather of every rank's tail), and the
// recurrence runs per segment: each rank summarises its segment as
// (M, S_ext) (kimi.kda from S = I with no values, and from zero), one all-gather of
// each, folds the earlier ranks' summaries into its initial state, reruns
// its segment from there, and folds all of them for the final state.
// RUN: kimi-opt %s --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=sp},func.func(sharding-propagation{traversal=forward},shard-partition),canonicalize)" | FileCheck %s

kimi.weight @model.layers.1.self_attn.q_conv1d.weight : tensor<16x1x4xf32>
func.func private @prefill_layer_1(%x: tensor<1x32x16xf32>, %g: tensor<1x32x2x8xf32>, %beta: tensor<1x32x2xf32>, %c: tensor<1x3x16xf32> {kimi.state = "layers.1.q_conv_state"}, %s: tensor<1x2x8x8xf32> {kimi.state = "layers.1.kda_state"}) -> (tensor<1x32x16xf32>, tensor<1x3x16xf32> {kimi.state = "layers.1.q_conv_state"}, tensor<1x2x8x8xf32> {kimi.state = "layers.1.kda_state"}) {
  %w = kimi.weight_ref @model.layers.1.self_attn.q_conv1d.weight : tensor<16x1x4xf32>
  %y, %cs = kimi.short_conv silu %x, %w state %c : tensor<1x32x16xf32>, tensor<16x1x4xf32>, tensor<1x3x16xf32> -> tensor<1x32x16xf32>, tensor<1x3x16xf32>
  %q = tensor.expand_shape %y [[0], [1], [2, 3]] output_shape [1, 32, 2, 8] : tensor<1x32x16xf32> into tensor<1x32x2x8xf32>
  %o, %fs = kimi.kda %q, %q, %q, %g, %beta initial_state %s scale(0.35355339059327373) : (tensor<1x32x2x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x32x2x8xf32>, tensor<1x2x8x8xf32>)
  %of = tensor.collapse_shape %o [[0], [1], [2, 3]] : tensor<1x32x2x8xf32> into tensor<1x32x16xf32>
  return %of, %cs, %fs : tensor<1x32x16xf32>, tensor<1x3x16xf32>, tensor<1x2x8x8xf32>
}

// CHECK-LABEL: func.func private @prefill_layer_1
// CHECK-SAME: (%[[X:.*]]: tensor<1x8x16xf32>, %[[G:.*]]: tensor<1x8x2x8xf32>, %[[B:.*]]: tensor<1x8x2xf32>, %[[C:.*]]: tensor<1x3x16xf32> {kimi.state = "layers.1.q_conv_state"}, %[[S:.*]]: tensor<1x2x8x8xf32> {kimi.state = "layers.1.kda_state"})
// CHECK-SAME: -> (tensor<1x8x16xf32>, tensor<1x3x16xf32> {kimi.state = "layers.1.q_conv_state"}, tensor<1x2x8x8xf32> {kimi.state = "layers.1.kda_state"})
// CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<1x8x2x8xf32>
// Halo: every rank's last 3 inputs, the previous rank's as the conv state.
// CHECK: %[[TAIL:.*]] = tensor.extract_slice %[[X]][0, 5, 0] [1, 3, 16] [1, 1, 1] : tensor<1x8x16xf32> to tensor<1x3x16xf32>
// CHECK: %[[TAILS:.*]] = shard.all_gather %[[TAIL]] on @supernode grid_axes = [0] gather_axis = 0 : tensor<1x3x16xf32> -> tensor<4x3x16xf32>
// CHECK: %[[ST:.*]] = arith.select %{{.*}}, %[[C]], %{{.*}} : tensor<1x3x16xf32>
// CHECK: %[[Y:.*]], %{{.*}} = kimi.short_conv silu %[[X]], %{{.*}} state %[[ST]] : tensor<1x8x16xf32>, tensor<16x1x4xf32>, tensor<1x3x16xf32> -> tensor<1x8x16xf32>, tensor<1x3x16xf32>
// CHECK: %[[LAST:.*]] = tensor.extract_slice %[[TAILS]][3, 0, 0] [1, 3, 16] [1, 1, 1]
// Segment summaries: S_ext from zero and M, gathered.
// CHECK: %{{.*}}, %[[EXT:.*]] = kimi.kda {{.*}} : (tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2xf32>) -> (tensor<1x8x2x8xf32>, tensor<1x2x8x8xf32>)
// M: the segment's final state from the identity with no values (v = 0).
// CHECK: %[[EYE:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x8x8xf32>)
// CHECK: linalg.index 2
// CHECK: linalg.index 3
// CHECK: arith.cmpi eq
// CHECK: %{{.*}}, %[[M:.*]] = kimi.kda %{{.*}}, %{{.*}}, %[[ZERO]], %[[G]], %[[B]] initial_state %[[EYE]]
// CHECK-SAME: -> (tensor<1x8x2x8xf32>, tensor<1x2x8x8xf32>)
// CHECK: %[[MS:.*]] = shard.all_gather %[[M]] on @supernode grid_axes = [0] gather_axis = 0 : tensor<1x2x8x8xf32> -> tensor<4x2x8x8xf32>
// CHECK: %[[SS:.*]] = shard.all_gather %[[EXT]] on @supernode grid_axes = [0] gather_axis = 0 : tensor<1x2x8x8xf32> -> tensor<4x2x8x8xf32>
// The fold to this rank's start, and over all ranks for the final state.
// CHECK: %[[START:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[S]]) -> (tensor<1x2x8x8xf32>)
// CHECK: linalg.batch_matmul
// CHECK: %[[FINAL:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[S]]) -> (tensor<1x2x8x8xf32>)
// CHECK: %[[O:.*]], %{{.*}} = kimi.kda {{.*}} initial_state %[[START]]
// CHECK: return %{{.*}}, %[[LAST]], %[[FINAL]] : tensor<1x8x16xf32>, tensor<1x3x16xf32>, tensor<1x2x8x8xf32>

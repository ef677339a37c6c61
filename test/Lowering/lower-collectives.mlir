// RUN: kimi-opt %s -split-input-file --kimi-lower-collectives | FileCheck %s

// Collectives on a 2 x 4 grid name their group as a bit set of grid axes:
// axis 1 (the tensor-parallel group of 4) is 2, both axes 3, axis 0 1.

shard.grid @grid(shape = 2x4)
// CHECK-LABEL: func.func @tp_all_reduce
// CHECK-NOT: shard.
// CHECK: %[[SEND:.*]] = memref.alloc() : memref<4x8xf32>
// CHECK: linalg.copy
// CHECK: %[[RECV:.*]] = memref.alloc() : memref<4x8xf32>
// CHECK-DAG: %[[SUM:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[AXIS1:.*]] = arith.constant 2 : i32
// CHECK: call @kimi_rt_all_reduce_f32(%{{.*}}, %{{.*}}, %[[SUM]], %[[AXIS1]])
// CHECK: bufferization.to_tensor %[[RECV]]
func.func @tp_all_reduce(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = shard.all_reduce %a on @grid grid_axes = [1] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Gathering over the whole grid stacks 8 blocks, then merges them into the
// gather axis.
shard.grid @grid(shape = 2x4)
// CHECK-LABEL: func.func @gather_all
// CHECK: %[[RECV:.*]] = memref.alloc() : memref<8x4x8xf32>
// CHECK: %[[BOTH:.*]] = arith.constant 3 : i32
// CHECK: call @kimi_rt_all_gather_f32(%{{.*}}, %{{.*}}, %[[BOTH]])
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<8x4x8xf32> into tensor<32x8xf32>
func.func @gather_all(%a: tensor<4x8xf32>) -> tensor<32x8xf32> {
  %0 = shard.all_gather %a on @grid grid_axes = [0, 1] gather_axis = 0 : tensor<4x8xf32> -> tensor<32x8xf32>
  return %0 : tensor<32x8xf32>
}

// -----

// A reduce-scatter over the outer axis (2 ranks) along dim 1: the two
// blocks of dim 1 become leading before the call.
shard.grid @grid(shape = 2x4)
// CHECK-LABEL: func.func @scatter_outer
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2]] output_shape [4, 2, 4]
// CHECK: linalg.transpose {{.*}} permutation = [1, 0, 2]
// CHECK-DAG: %[[MAX:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[AXIS0:.*]] = arith.constant 1 : i32
// CHECK: call @kimi_rt_reduce_scatter_i32(%{{.*}}, %{{.*}}, %[[MAX]], %[[AXIS0]])
func.func @scatter_outer(%a: tensor<4x8xi32>) -> tensor<4x4xi32> {
  %0 = shard.reduce_scatter %a on @grid grid_axes = [0] reduction = max scatter_axis = 1 : tensor<4x8xi32> -> tensor<4x4xi32>
  return %0 : tensor<4x4xi32>
}

// -----

// An all-to-all over the inner axis: split dim 0 into 4 blocks, send block p
// to the group's rank p, concatenate the received blocks along dim 1.
shard.grid @grid(shape = 2x4)
// CHECK-LABEL: func.func @all_to_all_inner
// CHECK: %[[AXIS1:.*]] = arith.constant 2 : i32
// CHECK: call @kimi_rt_all_to_all_i64(%{{.*}}, %{{.*}}, %[[AXIS1]])
// CHECK: tensor.collapse_shape {{.*}} into tensor<2x16xi64>
func.func @all_to_all_inner(%a: tensor<8x4xi64>) -> tensor<2x16xi64> {
  %0 = shard.all_to_all %a on @grid grid_axes = [1] split_axis = 0 concat_axis = 1 : tensor<8x4xi64> -> tensor<2x16xi64>
  return %0 : tensor<2x16xi64>
}

// -----

// Grid coordinates come from the world rank: rank = i0 * 4 + i1.
shard.grid @grid(shape = 2x4)
// CHECK-LABEL: func.func @coordinates
// CHECK: %[[R0:.*]] = call @kimi_rt_rank() : () -> i64
// CHECK: %[[I0:.*]] = arith.index_cast %[[R0]]
// CHECK: arith.divui %[[I0]], %c4
// CHECK: arith.remui %{{.*}}, %c2
// CHECK: %[[R1:.*]] = call @kimi_rt_rank() : () -> i64
// CHECK: %[[I1:.*]] = arith.index_cast %[[R1]]
// CHECK: arith.divui %[[I1]], %c1
// CHECK: arith.remui %{{.*}}, %c4
func.func @coordinates() -> (index, index) {
  %0:2 = shard.process_multi_index on @grid axes = [0, 1] : index, index
  return %0#0, %0#1 : index, index
}

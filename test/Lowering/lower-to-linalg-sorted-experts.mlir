// RUN: kimi-opt %s -split-input-file --kimi-lower-to-linalg=sorted-experts-min-tokens=32 | FileCheck %s
// RUN: kimi-opt %s -split-input-file --kimi-lower-to-linalg=sorted-experts-min-tokens=32 | kimi-opt -split-input-file -o /dev/null
// RUN: kimi-opt %s -split-input-file --kimi-lower-to-linalg=sorted-experts-min-tokens=33 | FileCheck %s --check-prefix=GATHER

// Token-sorted experts (32 tokens >= the option's 32), top-4 of 16. Counts
// and ranks by blocks of B = 2 tokens (B*B*k <= T): per-(expert, block)
// counts, the counts of the blocks ahead, per-expert totals, each slot's
// rank inside its block, and its rank = blocks ahead + inside. The host
// reads the largest count (the one dynamic size), the tokens are scattered
// into [E, cap, W] rows, the three projections are contractions batched
// over experts on those rows, and each token gathers its k rows (one
// parallel nest over the output, the slots summed in order inside). Below the
// threshold the gathers stay (no host read).
// CHECK-LABEL: func.func @routed
// CHECK: %[[IDS:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0, 1], [2]] output_shape [16, 2, 4] : tensor<32x4xi32> into tensor<16x2x4xi32>
// CHECK: %[[HIST:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%[[IDS]], %{{.*}} : tensor<16x2x4xi32>, tensor<16x2x4xf32>) outs(%{{.*}} : tensor<16x16xi32>)
// CHECK: %[[AHEAD:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[HIST]] : tensor<16x16xi32>) outs(%{{.*}} : tensor<16x16xi32>)
// CHECK: arith.cmpi ult
// CHECK: %[[COUNTS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]} ins(%[[HIST]] : tensor<16x16xi32>) outs(%{{.*}} : tensor<16xi32>)
// CHECK: %[[INSIDE:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%[[IDS]], %[[IDS]], %{{.*}} : tensor<16x2x4xi32>, tensor<16x2x4xi32>, tensor<16x2x4xf32>) outs(%{{.*}} : tensor<16x2x4xi32>)
// CHECK: %[[RANK3:.*]] = linalg.generic {{.*}}ins(%[[IDS]], %{{.*}}, %[[INSIDE]] : tensor<16x2x4xi32>, tensor<16x2x4xf32>, tensor<16x2x4xi32>)
// CHECK: tensor.extract %[[AHEAD]][%{{.*}}, %{{.*}}] : tensor<16x16xi32>
// CHECK: %[[RANK:.*]] = tensor.collapse_shape %[[RANK3]] {{.*}} : tensor<16x2x4xi32> into tensor<32x4xi32>
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}}ins(%[[COUNTS]] : tensor<16xi32>) outs(%{{.*}} : tensor<i32>)
// CHECK: arith.maxsi
// CHECK: %[[MAXBUF:.*]] = bufferization.to_buffer %[[MAX]] read_only : tensor<i32> to memref<i32>
// CHECK: call @kimi_host_read_i32(%[[MAXBUF]]) : (memref<i32>) -> i32
// CHECK: %[[ROWS:.*]] = memref.alloc(%{{.*}}) : memref<16x?x8xf32>
// CHECK: scf.parallel
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %[[ROWS]][%{{.*}}, %{{.*}}, %{{.*}}] : memref<16x?x8xf32>
// CHECK: %[[SORTED:.*]] = bufferization.to_tensor %[[ROWS]] restrict writable
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[SORTED]], %{{.*}} : tensor<16x?x8xf32>, tensor<16x12x8xf32>) outs(%{{.*}} : tensor<16x?x12xf32>)
// CHECK: linalg.generic {{.*}}ins(%[[SORTED]], %{{.*}} : tensor<16x?x8xf32>, tensor<16x12x8xf32>) outs(%{{.*}} : tensor<16x?x12xf32>)
// CHECK: math.tanh
// CHECK: %[[Y:.*]] = linalg.generic {{.*}}ins(%{{.*}}, %{{.*}} : tensor<16x?x12xf32>, tensor<16x8x12xf32>) outs(%{{.*}} : tensor<16x?x8xf32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs(%{{.*}} : tensor<32x8xf32>)
// CHECK: scf.for {{.*}} -> (f32)
// CHECK: scf.if
// CHECK: tensor.extract %[[RANK]][%{{.*}}, %{{.*}}] : tensor<32x4xi32>
// CHECK: tensor.extract %[[Y]][%{{.*}}, %{{.*}}, %{{.*}}] : tensor<16x?x8xf32>
// CHECK-NOT: kimi.
// CHECK-LABEL: func.func private @kimi_host_read_i32(%{{.*}}: memref<i32>) -> i32
// CHECK-NEXT: memref.load %{{.*}}[] : memref<i32>
// GATHER-LABEL: func.func @routed
// GATHER-NOT: kimi_host_read_i32
// GATHER: tensor.extract %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : tensor<16x12x8xf32>
func.func @routed(%z: tensor<32x8xf32>, %w: tensor<32x4xf32>, %i: tensor<32x4xi32>, %g: tensor<16x12x8xf32>, %u: tensor<16x12x8xf32>, %d: tensor<16x8x12xf32>) -> tensor<32x8xf32> {
  %r = kimi.routed_experts situ %z, %w, %i experts(%g, %u, %d) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<32x8xf32>, tensor<32x4xf32>, tensor<32x4xi32>, tensor<16x12x8xf32>, tensor<16x12x8xf32>, tensor<16x8x12xf32>) -> tensor<32x8xf32>
  return %r : tensor<32x8xf32>
}

// RUN: kimi-opt %s -split-input-file -kimi-gpu-norm-kernels -verify-diagnostics | FileCheck %s

// KDA's q normalisation over 128-wide heads: one warp per row (four values
// a lane in one 16-byte load), eight rows a block, no shared memory:
// 16 heads of one token are 2 blocks.
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @l2_heads
// CHECK-NOT: kimi.l2_norm
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<2048xf32>
// CHECK: %[[B:.*]] = arith.ceildivui %c16{{.*}}, %c8
// CHECK: gpu.launch_func  @kimi_norm::@norm_0 blocks in (%[[B]], %c1{{.*}}, %c1{{.*}}) threads in (%c256{{.*}}, %c1{{.*}}, %c1{{.*}})  args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<?xf32>, %c16{{.*}} : index)
// CHECK: gpu.module @kimi_norm
// CHECK: gpu.func @norm_0
// CHECK-NOT: memref.get_global
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CHECK: gpu.shuffle  xor
// CHECK-NOT: gpu.barrier
// CHECK: math.rsqrt
// CHECK: vector.store
func.func @l2_heads(%x: tensor<1x1x16x128xf32>) -> tensor<1x1x16x128xf32> {
  %n = kimi.l2_norm %x eps(1.0e-06) : tensor<1x1x16x128xf32> -> tensor<1x1x16x128xf32>
  return %n : tensor<1x1x16x128xf32>
}

// -----

// A 2,048-wide RMS norm: 64 threads per row (eight vectors of four a
// thread), the two warps' sums through shared memory; a gated norm reads
// its gate and applies the sigmoid. Rows at run time.
// CHECK-LABEL: func.func @rms_and_gated
// CHECK: %[[T:.*]] = tensor.dim %arg0, %c1
// CHECK: gpu.launch_func  @kimi_norm::@norm_0 {{.*}} args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<2048xf32>, %{{.*}} : memref<?xf32>, %[[T]] : index)
// CHECK: gpu.launch_func  @kimi_norm::@norm_1 {{.*}} args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<?xf32>, %{{.*}} : memref<128xf32>, %{{.*}} : memref<?xf32>, %c32{{.*}} : index)
// CHECK: gpu.func @norm_0
// CHECK: memref.get_global @norm_0_scratch : memref<8xf32, #gpu.address_space<workgroup>>
// CHECK: gpu.barrier
// CHECK: gpu.func @norm_1
// CHECK: math.exp
func.func @rms_and_gated(%x: tensor<1x?x2048xf32>, %w: tensor<2048xf32>, %o: tensor<2x1x16x128xf32>,
                         %g: tensor<2x1x16x128xf32>, %w2: tensor<128xf32>) -> (tensor<1x?x2048xf32>, tensor<2x1x16x128xf32>) {
  %n = kimi.rms_norm %x, %w eps(1.0e-05) : tensor<1x?x2048xf32>, tensor<2048xf32> -> tensor<1x?x2048xf32>
  %m = kimi.gated_rms_norm %o, %g, %w2 eps(1.0e-05) : tensor<2x1x16x128xf32>, tensor<2x1x16x128xf32>, tensor<128xf32> -> tensor<2x1x16x128xf32>
  return %n, %m : tensor<1x?x2048xf32>, tensor<2x1x16x128xf32>
}

// -----

func.func @too_wide(%x: tensor<1x16384xf32>, %w: tensor<16384xf32>) -> tensor<1x16384xf32> {
  // expected-remark @below {{kept for kimi-lower-to-linalg (no GPU norm kernel): width 16384 exceeds the kernel's 8192}}
  %n = kimi.rms_norm %x, %w eps(1.0e-05) : tensor<1x16384xf32>, tensor<16384xf32> -> tensor<1x16384xf32>
  return %n : tensor<1x16384xf32>
}

// RUN: kimi-opt %s -split-input-file -kimi-gpu-router-kernels -verify-diagnostics | FileCheck %s

// A decode step's router (40 experts: the last lane slot is partly past E):
// the logits become their own product (f32) and the selection one launch of
// the generated kernel, a warp per token (grid ceil(T / 8), 256 threads).
// The kernel computes the sigmoid scores plus bias, picks k = 4 experts in
// four rounds of a warp butterfly (five shuffles each of the score and the
// index),
// recomputes each winner's score from its logit and renormalises them.
// CHECK-LABEL: func.func @decode_router
// CHECK-NOT: kimi.router
// CHECK: %[[LOGITS:.*]] = kimi.linear %arg0, %arg1 : tensor<1x1x64xf32>, tensor<40x64xbf16> -> tensor<1x1x40xf32>
// CHECK: %[[W:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[I:.*]] = memref.alloc() : memref<4xi32>
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<40xf32> to memref<40xf32>
// CHECK: bufferization.to_buffer %arg2 read_only : tensor<40xf32> to memref<40xf32>
// CHECK: gpu.launch_func  @kimi_router::@router_0 blocks in (%{{.*}}, %c1{{.*}}, %c1{{.*}}) threads in (%c256{{.*}}, %c1{{.*}}, %c1{{.*}})  args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<40xf32>, %{{.*}} : memref<?xf32>, %{{.*}} : memref<?xi32>, %c1{{.*}} : index)
// CHECK: bufferization.to_tensor %[[W]] restrict writable
// CHECK: bufferization.to_tensor %[[I]] restrict writable
// CHECK: gpu.module @kimi_router
// CHECK: gpu.func @router_0
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: math.exp
// CHECK-COUNT-40: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// CHECK: arith.divf
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.return
func.func @decode_router(%x: tensor<1x1x64xf32>, %w: tensor<40x64xbf16>, %b: tensor<40xf32>) -> (tensor<1x1x4xf32>, tensor<1x1x4xi32>) {
  %wt, %id = kimi.router %x, %w, %b top_k(4) renormalize : tensor<1x1x64xf32>, tensor<40x64xbf16>, tensor<40xf32> -> tensor<1x1x4xf32>, tensor<1x1x4xi32>
  return %wt, %id : tensor<1x1x4xf32>, tensor<1x1x4xi32>
}

// -----

// Margins (Quantile Balancing) take a sixth round for alpha, the (k+1)-th
// biased score, and a margins buffer; a dynamic token count is the
// kernel's last argument.
// CHECK-LABEL: func.func @margins
// CHECK: kimi.linear %arg0, %arg1 : tensor<?x64xf32>, tensor<16x64xbf16> -> tensor<?x16xf32>
// CHECK: %[[T:.*]] = tensor.dim
// CHECK: gpu.launch_func  @kimi_router::@router_0 {{.*}} args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<16xf32>, %{{.*}} : memref<?xf32>, %{{.*}} : memref<?xi32>, %{{.*}} : memref<?xf32>, %[[T]] : index)
// CHECK: gpu.func @router_0
// CHECK-COUNT-60: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// CHECK: arith.subf
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.return
func.func @margins(%x: tensor<?x64xf32>, %w: tensor<16x64xbf16>, %b: tensor<16xf32>) -> (tensor<?x5xf32>, tensor<?x5xi32>, tensor<?x16xf32>) {
  %wt, %id, %m = kimi.router %x, %w, %b top_k(5) {scaling = 2.5 : f64} : tensor<?x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<?x5xf32>, tensor<?x5xi32>, tensor<?x16xf32>
  return %wt, %id, %m : tensor<?x5xf32>, tensor<?x5xi32>, tensor<?x16xf32>
}

// -----

// i64 indices are not written by the kernel: the op stays, and says why.
func.func @i64_indices(%x: tensor<4x64xf32>, %w: tensor<16x64xbf16>, %b: tensor<16xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>) {
  // expected-remark @+1 {{kept for kimi-lower-to-linalg (no GPU router kernel): the kernel writes i32 indices}}
  %wt, %id = kimi.router %x, %w, %b top_k(2) renormalize : tensor<4x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<4x2xf32>, tensor<4x2xi64>
  return %wt, %id : tensor<4x2xf32>, tensor<4x2xi64>
}

// -----

// K3's router: 896 experts (28 a lane), top 16 of them.
// CHECK-LABEL: func.func @k3_router
// CHECK: kimi.linear %arg0, %arg1 : tensor<1x1x7168xf32>, tensor<896x7168xbf16> -> tensor<1x1x896xf32>
// CHECK: gpu.launch_func  @kimi_router::@router_0 {{.*}} args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<896xf32>, %{{.*}} : memref<?xf32>, %{{.*}} : memref<?xi32>, %c1{{.*}} : index)
// CHECK: gpu.func @router_0
// CHECK-COUNT-160: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.return
func.func @k3_router(%x: tensor<1x1x7168xf32>, %w: tensor<896x7168xbf16>, %b: tensor<896xf32>) -> (tensor<1x1x16xf32>, tensor<1x1x16xi32>) {
  %wt, %id = kimi.router %x, %w, %b top_k(16) renormalize : tensor<1x1x7168xf32>, tensor<896x7168xbf16>, tensor<896xf32> -> tensor<1x1x16xf32>, tensor<1x1x16xi32>
  return %wt, %id : tensor<1x1x16xf32>, tensor<1x1x16xi32>
}

// RUN: kimi-opt %s -split-input-file -kimi-prove-decay-bounds -kimi-chunk-kda -kimi-gpu-kda-kernels -verify-diagnostics | FileCheck %s

// A model's f32 prefill KDA (gate fused) runs the generated kernels: q, k,
// v, beta rounded to bf16, kernels in their own gpu.module, buffers as
// flat views of the operands, the output widened back to f32.
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @prefill
// CHECK-NOT: kimi.kda
// CHECK: arith.truncf %{{.*}} : tensor<1x64x2x128xf32> to tensor<1x64x2x128xbf16>
// CHECK: tensor.collapse_shape
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<16384xbf16> to memref<16384xbf16>
// CHECK: linalg.index
// CHECK: memref.alloc() : memref<16384xbf16>
// CHECK: gpu.launch_func @kimi_kda_0::@kda_prep
// CHECK: gpu.launch_func @kimi_kda_0::@kda_recur
// CHECK: bufferization.to_tensor %{{.*}} restrict writable : memref<16384xbf16>
// CHECK: arith.extf %{{.*}} : tensor<1x64x2x128xbf16> to tensor<1x64x2x128xf32>
// CHECK: gpu.module @kimi_kda_0
// CHECK: gpu.func @kda_prep
func.func @prefill(%q: tensor<1x64x2x128xf32>, %k: tensor<1x64x2x128xf32>, %v: tensor<1x64x2x128xf32>,
                   %z: tensor<1x64x2x128xf32>, %b: tensor<1x64x2xf32>, %a: tensor<2xf32>, %dt: tensor<2x128xf32>,
                   %s0: tensor<1x2x128x128xf32>) -> (tensor<1x64x2x128xf32>, tensor<1x2x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x128xf32>, tensor<2xf32>, tensor<2x128xf32> -> tensor<1x64x2x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x64x2x128xf32>, tensor<1x64x2x128xf32>, tensor<1x64x2x128xf32>, tensor<1x64x2x128xf32>, tensor<1x64x2xf32>, tensor<1x2x128x128xf32>) -> (tensor<1x64x2x128xf32>, tensor<1x2x128x128xf32>)
  return %o, %s : tensor<1x64x2x128xf32>, tensor<1x2x128x128xf32>
}

// -----

// Decode: the kernel reads the caller's f32 state where it is and writes
// the next one to a new buffer (no copy of the state first). Two heads of
// 128 value columns take four blocks each, 32 columns a block, so that a
// batch-1 step reads its states on more SMs.
// CHECK-LABEL: func.func @decode
// CHECK-NOT: arith.truncf
// CHECK: %[[FLAT:.*]] = tensor.collapse_shape %arg5
// CHECK: %[[IN:.*]] = bufferization.to_buffer %[[FLAT]] read_only
// CHECK-NOT: memref.copy
// CHECK: %[[S:.*]] = memref.alloc() : memref<32768xf32>
// CHECK-NOT: memref.copy
// CHECK: gpu.launch_func @kimi_kda_{{[0-9]+}}::@kda_decode blocks in (%c2{{.*}}, %c4{{.*}}, %c1{{.*}}) {{.*}}args({{.*}}, %[[IN]]{{.*}} : memref<32768xf32>, %[[S]] : memref<32768xf32>, %{{.*}} : memref<256xf32>)
// CHECK: bufferization.to_tensor %[[S]]
func.func @decode(%q: tensor<1x1x2x128xf32>, %k: tensor<1x1x2x128xf32>, %v: tensor<1x1x2x128xf32>,
                  %g: tensor<1x1x2x128xf32>, %b: tensor<1x1x2xf32>,
                  %s0: tensor<1x2x128x128xf32>) -> (tensor<1x1x2x128xf32>, tensor<1x2x128x128xf32>) {
  // expected-remark @+1 {{keeps pairwise diagonal tiles}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x1x2x128xf32>, tensor<1x1x2x128xf32>, tensor<1x1x2x128xf32>, tensor<1x1x2x128xf32>, tensor<1x1x2xf32>, tensor<1x2x128x128xf32>) -> (tensor<1x1x2x128xf32>, tensor<1x2x128x128xf32>)
  return %o, %s : tensor<1x1x2x128xf32>, tensor<1x2x128x128xf32>
}

// -----

// Head dims the generators do not cover stay for kimi-lower-kda.
// CHECK-LABEL: func.func @small_heads
// CHECK: kimi.kda
func.func @small_heads(%q: tensor<1x32x2x8xf32>, %g: tensor<1x32x2x8xf32>, %b: tensor<1x32x2xf32>) -> tensor<1x32x2x8xf32> {
  // expected-remark @+2 {{keeps pairwise diagonal tiles}}
  // expected-remark @+1 {{kept for kimi-lower-kda (no GPU kernel)}}
  %o, %s = kimi.kda %q, %q, %q, %g, %b scale(0.35) : (tensor<1x32x2x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2x8xf32>, tensor<1x32x2xf32>) -> (tensor<1x32x2x8xf32>, tensor<1x2x8x8xf32>)
  return %o : tensor<1x32x2x8xf32>
}

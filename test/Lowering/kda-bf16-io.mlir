// RUN: kimi-opt %s -split-input-file --kimi-kda-bf16-io | FileCheck %s

// An f32 prefill: q, k, v and beta are rounded to bf16, the op writes a
// bf16 output that is widened back; g, the states and the attributes are
// untouched.
// CHECK-LABEL: func.func @prefill_f32
// CHECK-DAG: %[[Q:.*]] = arith.truncf %arg0 : tensor<1x20x2x8xf32> to tensor<1x20x2x8xbf16>
// CHECK-DAG: %[[K:.*]] = arith.truncf %arg1 : tensor<1x20x2x8xf32> to tensor<1x20x2x8xbf16>
// CHECK-DAG: %[[V:.*]] = arith.truncf %arg2 : tensor<1x20x2x4xf32> to tensor<1x20x2x4xbf16>
// CHECK-DAG: %[[B:.*]] = arith.truncf %arg4 : tensor<1x20x2xf32> to tensor<1x20x2xbf16>
// CHECK: %[[O:.*]], %[[S:.*]] = kimi.kda %[[Q]], %[[K]], %[[V]], %arg3, %[[B]] initial_state %arg5 scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.000000e+00, chunk = 16, diag = dense>} : ({{.*}}) -> (tensor<1x20x2x4xbf16>, tensor<1x2x8x4xf32>)
// CHECK: %[[W:.*]] = arith.extf %[[O]] : tensor<1x20x2x4xbf16> to tensor<1x20x2x4xf32>
// CHECK: return %[[W]], %[[S]]
func.func @prefill_f32(%q: tensor<1x20x2x8xf32>, %k: tensor<1x20x2x8xf32>, %v: tensor<1x20x2x4xf32>, %g: tensor<1x20x2x8xf32>, %beta: tensor<1x20x2xf32>, %s: tensor<1x2x8x4xf32>) -> (tensor<1x20x2x4xf32>, tensor<1x2x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta initial_state %s scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x20x2x8xf32>, tensor<1x20x2x8xf32>, tensor<1x20x2x4xf32>, tensor<1x20x2x8xf32>, tensor<1x20x2xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x20x2x4xf32>, tensor<1x2x8x4xf32>)
  return %o, %f : tensor<1x20x2x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// A decode step (one token) keeps f32, as the decode kernel reads f32.
// CHECK-LABEL: func.func @decode_f32
// CHECK-NOT: arith.truncf
// CHECK: kimi.kda %arg0, %arg1, %arg2, %arg3, %arg4 initial_state %arg5
// CHECK-NOT: arith.extf
func.func @decode_f32(%q: tensor<2x1x2x8xf32>, %k: tensor<2x1x2x8xf32>, %v: tensor<2x1x2x4xf32>, %g: tensor<2x1x2x8xf32>, %beta: tensor<2x1x2xf32>, %s: tensor<2x2x8x4xf32>) -> (tensor<2x1x2x4xf32>, tensor<2x2x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta initial_state %s scale(0.35355339059327373) : (tensor<2x1x2x8xf32>, tensor<2x1x2x8xf32>, tensor<2x1x2x4xf32>, tensor<2x1x2x8xf32>, tensor<2x1x2xf32>, tensor<2x2x8x4xf32>) -> (tensor<2x1x2x4xf32>, tensor<2x2x8x4xf32>)
  return %o, %f : tensor<2x1x2x4xf32>, tensor<2x2x8x4xf32>
}

// -----

// Already bf16: nothing to round.
// CHECK-LABEL: func.func @prefill_bf16
// CHECK-NOT: arith.
// CHECK: kimi.kda %arg0, %arg1, %arg2, %arg3, %arg4 scale
func.func @prefill_bf16(%q: tensor<1x32x1x8xbf16>, %k: tensor<1x32x1x8xbf16>, %v: tensor<1x32x1x4xbf16>, %g: tensor<1x32x1x8xf32>, %beta: tensor<1x32x1xbf16>) -> tensor<1x32x1x4xbf16> {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta scale(0.35355339059327373) : (tensor<1x32x1x8xbf16>, tensor<1x32x1x8xbf16>, tensor<1x32x1x4xbf16>, tensor<1x32x1x8xf32>, tensor<1x32x1xbf16>) -> (tensor<1x32x1x4xbf16>, tensor<1x1x8x4xf32>)
  return %o : tensor<1x32x1x4xbf16>
}

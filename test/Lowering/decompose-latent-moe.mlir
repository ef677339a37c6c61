// RUN: kimi-opt %s -split-input-file -kimi-decompose-latent-moe | FileCheck %s

// The latent MoE as its kimi parts: down to the latent width, the routed
// experts there, the latent norm, up again; weights, scales and attributes
// carried over.
// CHECK-LABEL: func.func @with_norm
// CHECK-NOT: kimi.latent_moe
// CHECK: %[[Z:.*]] = kimi.linear %arg0, %arg3 : tensor<8x64xf32>, tensor<32x64xbf16> -> tensor<8x32xf32>
// CHECK: %[[R:.*]] = kimi.routed_experts situ %[[Z]], %arg1, %arg2 experts(%arg4, %arg5, %arg6) scales(%arg7, %arg8, %arg9) {beta = 4.000000e+00 : f64, linear_beta = 2.500000e+01 : f64}
// CHECK: %[[N:.*]] = kimi.rms_norm %[[R]], %arg10 eps(1.000000e-05) : tensor<8x32xf32>, tensor<32xf32> -> tensor<8x32xf32>
// CHECK: %[[O:.*]] = kimi.linear %[[N]], %arg11 : tensor<8x32xf32>, tensor<64x32xbf16> -> tensor<8x64xf32>
// CHECK: return %[[O]]
func.func @with_norm(%x: tensor<8x64xf32>, %w: tensor<8x4xf32>, %i: tensor<8x4xi32>, %dl: tensor<32x64xbf16>,
                     %g: tensor<16x64x32xf4E2M1FN>, %u: tensor<16x64x32xf4E2M1FN>, %d: tensor<16x32x64xf4E2M1FN>,
                     %gs: tensor<16x64x1xf8E8M0FNU>, %us: tensor<16x64x1xf8E8M0FNU>, %ds: tensor<16x32x2xf8E8M0FNU>,
                     %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) -> tensor<8x64xf32> {
  %l = kimi.latent_moe situ %x, %w, %i down %dl experts(%g, %u, %d) scales(%gs, %us, %ds) norm %n up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<8x64xf32>, tensor<8x4xf32>, tensor<8x4xi32>, tensor<32x64xbf16>, tensor<16x64x32xf4E2M1FN>, tensor<16x64x32xf4E2M1FN>, tensor<16x32x64xf4E2M1FN>, tensor<16x64x1xf8E8M0FNU>, tensor<16x64x1xf8E8M0FNU>, tensor<16x32x2xf8E8M0FNU>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<8x64xf32>
  return %l : tensor<8x64xf32>
}

// -----

// Without a latent norm there is none in between.
// CHECK-LABEL: func.func @without_norm
// CHECK: kimi.linear
// CHECK-NEXT: kimi.routed_experts
// CHECK-NOT: kimi.rms_norm
// CHECK-NEXT: kimi.linear
func.func @without_norm(%x: tensor<8x64xf32>, %w: tensor<8x4xf32>, %i: tensor<8x4xi32>, %dl: tensor<32x64xf32>,
                        %g: tensor<16x64x32xf32>, %u: tensor<16x64x32xf32>, %d: tensor<16x32x64xf32>,
                        %ul: tensor<64x32xf32>) -> tensor<8x64xf32> {
  %l = kimi.latent_moe situ %x, %w, %i down %dl experts(%g, %u, %d) up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<8x64xf32>, tensor<8x4xf32>, tensor<8x4xi32>, tensor<32x64xf32>, tensor<16x64x32xf32>, tensor<16x64x32xf32>, tensor<16x32x64xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  return %l : tensor<8x64xf32>
}

// RUN: kimi-opt %s -split-input-file --kimi-check-lowered -verify-diagnostics

// A kimi op left after the lowering to linalg is named at its location.
func.func @norm(%x: tensor<2x64xf32>, %w: tensor<64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'kimi.rms_norm' was not lowered (is the decay proof in the front pipeline?)}}
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x64xf32>, tensor<64xf32> -> tensor<2x64xf32>
  return %0 : tensor<2x64xf32>
}

// RUN: kimi-opt %s -split-input-file --kimi-lower-to-linalg -verify-diagnostics

// MXFP4 is read by the routed-expert loops only: a linear layer with MXFP4
// weights is refused, naming the op.
func.func @mxfp4_linear(%x: tensor<4x64xf32>, %w: tensor<128x64xf4E2M1FN>, %s: tensor<128x2xf8E8M0FNU>) -> tensor<4x128xf32> {
  // expected-error @+1 {{kimi-lower-to-linalg cannot lower this op}}
  %y = kimi.linear %x, %w scale %s : tensor<4x64xf32>, tensor<128x64xf4E2M1FN>, tensor<128x2xf8E8M0FNU> -> tensor<4x128xf32>
  return %y : tensor<4x128xf32>
}

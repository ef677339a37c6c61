// RUN: kimi-opt %s -kimi-lower-kda -verify-diagnostics -split-input-file

func.func @dynamic_tokens(%q: tensor<1x?x1x8xf32>, %k: tensor<1x?x1x8xf32>, %v: tensor<1x?x1x4xf32>, %g: tensor<1x?x1x8xf32>, %beta: tensor<1x?x1xf32>) -> (tensor<1x?x1x4xf32>, tensor<1x1x8x4xf32>) {
  // expected-error @+1 {{kimi-lower-kda needs static shapes}}
  %o, %f = kimi.kda %q, %k, %v, %g, %beta scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x?x1x8xf32>, tensor<1x?x1x8xf32>, tensor<1x?x1x4xf32>, tensor<1x?x1x8xf32>, tensor<1x?x1xf32>) -> (tensor<1x?x1x4xf32>, tensor<1x1x8x4xf32>)
  return %o, %f : tensor<1x?x1x4xf32>, tensor<1x1x8x4xf32>
}

// -----

func.func @varlen(%q: tensor<1x8x1x8xf32>, %k: tensor<1x8x1x8xf32>, %v: tensor<1x8x1x4xf32>, %g: tensor<1x8x1x8xf32>, %beta: tensor<1x8x1xf32>, %cu: tensor<3xi32>) -> (tensor<1x8x1x4xf32>, tensor<2x1x8x4xf32>) {
  // expected-error @+1 {{with 'cu_seqlens' (variable-length sequences) has no CPU lowering}}
  %o, %f = kimi.kda %q, %k, %v, %g, %beta cu_seqlens %cu scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x8x1x8xf32>, tensor<1x8x1x8xf32>, tensor<1x8x1x4xf32>, tensor<1x8x1x8xf32>, tensor<1x8x1xf32>, tensor<3xi32>) -> (tensor<1x8x1x4xf32>, tensor<2x1x8x4xf32>)
  return %o, %f : tensor<1x8x1x4xf32>, tensor<2x1x8x4xf32>
}

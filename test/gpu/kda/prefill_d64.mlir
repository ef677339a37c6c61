// k3-tiny's KDA inside the model: 64-wide heads, an f32 gate input (the
// model computes z in f32), lower-bounded gate, initial state, 300 tokens
// (18 chunks of 16 and a partial one).
func.func @prefill_d64(%q: tensor<1x300x4x64xbf16>, %k: tensor<1x300x4x64xbf16>, %v: tensor<1x300x4x64xbf16>,
                       %z: tensor<1x300x4x64xf32>, %b: tensor<1x300x4xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>,
                       %s0: tensor<1x4x64x64xf32>) -> (tensor<1x300x4x64xbf16>, tensor<1x4x64x64xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x300x4x64xf32>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x300x4x64xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.125) : (tensor<1x300x4x64xbf16>, tensor<1x300x4x64xbf16>, tensor<1x300x4x64xbf16>, tensor<1x300x4x64xf32>, tensor<1x300x4xbf16>, tensor<1x4x64x64xf32>) -> (tensor<1x300x4x64xbf16>, tensor<1x4x64x64xf32>)
  return %o, %s : tensor<1x300x4x64xbf16>, tensor<1x4x64x64xf32>
}

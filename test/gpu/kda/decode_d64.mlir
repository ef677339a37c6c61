// k3-tiny's KDA decode inside the model: 64-wide heads, f32 gate input and
// beta (the model's decode step runs KDA in f32), two sequences.
func.func @decode_d64(%q: tensor<2x1x4x64xf32>, %k: tensor<2x1x4x64xf32>, %v: tensor<2x1x4x64xf32>,
                      %z: tensor<2x1x4x64xf32>, %b: tensor<2x1x4xf32>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>,
                      %s0: tensor<2x4x64x64xf32>) -> (tensor<2x1x4x64xf32>, tensor<2x4x64x64xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<2x1x4x64xf32>, tensor<4xf32>, tensor<4x64xf32> -> tensor<2x1x4x64xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.125) : (tensor<2x1x4x64xf32>, tensor<2x1x4x64xf32>, tensor<2x1x4x64xf32>, tensor<2x1x4x64xf32>, tensor<2x1x4xf32>, tensor<2x4x64x64xf32>) -> (tensor<2x1x4x64xf32>, tensor<2x4x64x64xf32>)
  return %o, %s : tensor<2x1x4x64xf32>, tensor<2x4x64x64xf32>
}

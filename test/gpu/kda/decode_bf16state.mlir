// One token for each of 5 sequences, bf16 state updated in place.
func.func @decode_bf16state(%q: tensor<5x1x3x128xbf16>, %k: tensor<5x1x3x128xbf16>, %v: tensor<5x1x3x128xbf16>,
                  %z: tensor<5x1x3x128xbf16>, %b: tensor<5x1x3xbf16>, %a: tensor<3xf32>, %dt: tensor<3x128xf32>,
                  %s0: tensor<5x3x128x128xbf16>) -> (tensor<5x1x3x128xbf16>, tensor<5x3x128x128xbf16>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<5x1x3x128xbf16>, tensor<3xf32>, tensor<3x128xf32> -> tensor<5x1x3x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<5x1x3x128xbf16>, tensor<5x1x3x128xbf16>, tensor<5x1x3x128xbf16>, tensor<5x1x3x128xf32>, tensor<5x1x3xbf16>, tensor<5x3x128x128xbf16>) -> (tensor<5x1x3x128xbf16>, tensor<5x3x128x128xbf16>)
  return %o, %s : tensor<5x1x3x128xbf16>, tensor<5x3x128x128xbf16>
}

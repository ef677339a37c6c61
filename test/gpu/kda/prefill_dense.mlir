// K3 form: lower-bounded gate (fused), dense diagonal tiles, partial last
// chunk (200 = 12 * 16 + 8), initial state.
func.func @prefill_dense(%q: tensor<1x200x3x128xbf16>, %k: tensor<1x200x3x128xbf16>, %v: tensor<1x200x3x128xbf16>,
                         %z: tensor<1x200x3x128xbf16>, %b: tensor<1x200x3xbf16>, %a: tensor<3xf32>, %dt: tensor<3x128xf32>,
                         %s0: tensor<1x3x128x128xf32>) -> (tensor<1x200x3x128xbf16>, tensor<1x3x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x200x3x128xbf16>, tensor<3xf32>, tensor<3x128xf32> -> tensor<1x200x3x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x200x3x128xbf16>, tensor<1x200x3x128xbf16>, tensor<1x200x3x128xbf16>, tensor<1x200x3x128xf32>, tensor<1x200x3xbf16>, tensor<1x3x128x128xf32>) -> (tensor<1x200x3x128xbf16>, tensor<1x3x128x128xf32>)
  return %o, %s : tensor<1x200x3x128xbf16>, tensor<1x3x128x128xf32>
}

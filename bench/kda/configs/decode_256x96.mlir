// bench/kda: decode, one token for each of 256 sequences x 96 heads (f32
// state read and written in place, K3 gate fused).
func.func @decode_256x96(%q: tensor<256x1x96x128xbf16>, %k: tensor<256x1x96x128xbf16>, %v: tensor<256x1x96x128xbf16>, %z: tensor<256x1x96x128xbf16>,
    %b: tensor<256x1x96xbf16>, %a: tensor<96xf32>, %dt: tensor<96x128xf32>, %s0: tensor<256x96x128x128xf32>)
    -> (tensor<256x1x96x128xbf16>, tensor<256x96x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<256x1x96x128xbf16>, tensor<96xf32>, tensor<96x128xf32> -> tensor<256x1x96x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<256x1x96x128xbf16>, tensor<256x1x96x128xbf16>, tensor<256x1x96x128xbf16>, tensor<256x1x96x128xf32>, tensor<256x1x96xbf16>, tensor<256x96x128x128xf32>) -> (tensor<256x1x96x128xbf16>, tensor<256x96x128x128xf32>)
  return %o, %s : tensor<256x1x96x128xbf16>, tensor<256x96x128x128xf32>
}

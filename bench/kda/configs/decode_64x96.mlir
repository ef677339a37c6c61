// bench/kda: decode, one token for each of 64 sequences x 96 heads (f32
// state read and written in place, K3 gate fused).
func.func @decode_64x96(%q: tensor<64x1x96x128xbf16>, %k: tensor<64x1x96x128xbf16>, %v: tensor<64x1x96x128xbf16>, %z: tensor<64x1x96x128xbf16>,
    %b: tensor<64x1x96xbf16>, %a: tensor<96xf32>, %dt: tensor<96x128xf32>, %s0: tensor<64x96x128x128xf32>)
    -> (tensor<64x1x96x128xbf16>, tensor<64x96x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<64x1x96x128xbf16>, tensor<96xf32>, tensor<96x128xf32> -> tensor<64x1x96x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<64x1x96x128xbf16>, tensor<64x1x96x128xbf16>, tensor<64x1x96x128xbf16>, tensor<64x1x96x128xf32>, tensor<64x1x96xbf16>, tensor<64x96x128x128xf32>) -> (tensor<64x1x96x128xbf16>, tensor<64x96x128x128xf32>)
  return %o, %s : tensor<64x1x96x128xbf16>, tensor<64x96x128x128xf32>
}

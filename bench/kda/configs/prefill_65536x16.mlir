// bench/kda: prefill of 65536 tokens x 16 heads (B = 1, dk = dv = 128, bf16,
// K3 lower-bounded gate fused, initial state).
func.func @prefill_65536x16(%q: tensor<1x65536x16x128xbf16>, %k: tensor<1x65536x16x128xbf16>, %v: tensor<1x65536x16x128xbf16>, %z: tensor<1x65536x16x128xbf16>,
    %b: tensor<1x65536x16xbf16>, %a: tensor<16xf32>, %dt: tensor<16x128xf32>, %s0: tensor<1x16x128x128xf32>)
    -> (tensor<1x65536x16x128xbf16>, tensor<1x16x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x65536x16x128xbf16>, tensor<16xf32>, tensor<16x128xf32> -> tensor<1x65536x16x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x65536x16x128xbf16>, tensor<1x65536x16x128xbf16>, tensor<1x65536x16x128xbf16>, tensor<1x65536x16x128xf32>, tensor<1x65536x16xbf16>, tensor<1x16x128x128xf32>) -> (tensor<1x65536x16x128xbf16>, tensor<1x16x128x128xf32>)
  return %o, %s : tensor<1x65536x16x128xbf16>, tensor<1x16x128x128xf32>
}

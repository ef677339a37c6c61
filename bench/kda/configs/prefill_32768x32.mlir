// bench/kda: prefill of 32768 tokens x 32 heads (B = 1, dk = dv = 128, bf16,
// K3 lower-bounded gate fused, initial state).
func.func @prefill_32768x32(%q: tensor<1x32768x32x128xbf16>, %k: tensor<1x32768x32x128xbf16>, %v: tensor<1x32768x32x128xbf16>, %z: tensor<1x32768x32x128xbf16>,
    %b: tensor<1x32768x32xbf16>, %a: tensor<32xf32>, %dt: tensor<32x128xf32>, %s0: tensor<1x32x128x128xf32>)
    -> (tensor<1x32768x32x128xbf16>, tensor<1x32x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x32768x32x128xbf16>, tensor<32xf32>, tensor<32x128xf32> -> tensor<1x32768x32x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x32768x32x128xbf16>, tensor<1x32768x32x128xbf16>, tensor<1x32768x32x128xbf16>, tensor<1x32768x32x128xf32>, tensor<1x32768x32xbf16>, tensor<1x32x128x128xf32>) -> (tensor<1x32768x32x128xbf16>, tensor<1x32x128x128xf32>)
  return %o, %s : tensor<1x32768x32x128xbf16>, tensor<1x32x128x128xf32>
}

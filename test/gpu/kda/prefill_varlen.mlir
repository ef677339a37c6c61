// Kimi Linear form: softplus gate (unbounded: pairwise diagonal tiles),
// three packed sequences of 37, 64 and 90 tokens (cu_seqlens), initial
// states per sequence; compiled with 3 segments and 2 blocks per state.
func.func @prefill_varlen(%q: tensor<1x191x2x128xbf16>, %k: tensor<1x191x2x128xbf16>, %v: tensor<1x191x2x128xbf16>,
                          %z: tensor<1x191x2x128xbf16>, %b: tensor<1x191x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x128xf32>,
                          %s0: tensor<3x2x128x128xf32>, %cu: tensor<4xi32>) -> (tensor<1x191x2x128xbf16>, tensor<3x2x128x128xf32>) {
  %g = kimi.kda_gate softplus %z, %a, %dt : tensor<1x191x2x128xbf16>, tensor<2xf32>, tensor<2x128xf32> -> tensor<1x191x2x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 cu_seqlens %cu scale(0.088388347648318) : (tensor<1x191x2x128xbf16>, tensor<1x191x2x128xbf16>, tensor<1x191x2x128xbf16>, tensor<1x191x2x128xf32>, tensor<1x191x2xbf16>, tensor<3x2x128x128xf32>, tensor<4xi32>) -> (tensor<1x191x2x128xbf16>, tensor<3x2x128x128xf32>)
  return %o, %s : tensor<1x191x2x128xbf16>, tensor<3x2x128x128xf32>
}

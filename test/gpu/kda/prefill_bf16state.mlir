// bf16 state storage (computed in f32): 600 tokens, 2 heads, compiled with
// 2 segments so the fold reads the bf16 initial state too.
func.func @prefill_bf16state(%q: tensor<1x600x2x128xbf16>, %k: tensor<1x600x2x128xbf16>, %v: tensor<1x600x2x128xbf16>,
                             %z: tensor<1x600x2x128xbf16>, %b: tensor<1x600x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x128xf32>,
                             %s0: tensor<1x2x128x128xbf16>) -> (tensor<1x600x2x128xbf16>, tensor<1x2x128x128xbf16>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x600x2x128xbf16>, tensor<2xf32>, tensor<2x128xf32> -> tensor<1x600x2x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x600x2x128xbf16>, tensor<1x600x2x128xbf16>, tensor<1x600x2x128xbf16>, tensor<1x600x2x128xf32>, tensor<1x600x2xbf16>, tensor<1x2x128x128xbf16>) -> (tensor<1x600x2x128xbf16>, tensor<1x2x128x128xbf16>)
  return %o, %s : tensor<1x600x2x128xbf16>, tensor<1x2x128x128xbf16>
}

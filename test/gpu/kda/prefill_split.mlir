// The sequence split: 1000 tokens of 2 heads in 4 segments (compiled with
// --kda-segments 4): summaries (M, E), fold, then the outputs.
func.func @prefill_split(%q: tensor<1x1000x2x128xbf16>, %k: tensor<1x1000x2x128xbf16>, %v: tensor<1x1000x2x128xbf16>,
                         %z: tensor<1x1000x2x128xbf16>, %b: tensor<1x1000x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x128xf32>,
                         %s0: tensor<1x2x128x128xf32>) -> (tensor<1x1000x2x128xbf16>, tensor<1x2x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x1000x2x128xbf16>, tensor<2xf32>, tensor<2x128xf32> -> tensor<1x1000x2x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x1000x2x128xbf16>, tensor<1x1000x2x128xbf16>, tensor<1x1000x2x128xbf16>, tensor<1x1000x2x128xf32>, tensor<1x1000x2xbf16>, tensor<1x2x128x128xf32>) -> (tensor<1x1000x2x128xbf16>, tensor<1x2x128x128xf32>)
  return %o, %s : tensor<1x1000x2x128xbf16>, tensor<1x2x128x128xf32>
}

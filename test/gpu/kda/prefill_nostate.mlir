// g given directly (bf16 log decay, nothing proven: pairwise), two equal
// sequences (batch 2), no initial state.
func.func @prefill_nostate(%q: tensor<2x70x2x128xbf16>, %k: tensor<2x70x2x128xbf16>, %v: tensor<2x70x2x128xbf16>,
                           %g: tensor<2x70x2x128xbf16>, %b: tensor<2x70x2xbf16>) -> (tensor<2x70x2x128xbf16>, tensor<2x2x128x128xf32>) {
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.088388347648318) : (tensor<2x70x2x128xbf16>, tensor<2x70x2x128xbf16>, tensor<2x70x2x128xbf16>, tensor<2x70x2x128xbf16>, tensor<2x70x2xbf16>) -> (tensor<2x70x2x128xbf16>, tensor<2x2x128x128xf32>)
  return %o, %s : tensor<2x70x2x128xbf16>, tensor<2x2x128x128xf32>
}

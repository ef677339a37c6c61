// AttnRes alone: 3 sources, 2 x 40 tokens of 512.
func.func @attn_res(%s0: tensor<2x40x512xbf16>, %s1: tensor<2x40x512xbf16>, %s2: tensor<2x40x512xbf16>,
                    %q: tensor<512xbf16>, %n: tensor<512xbf16>) -> tensor<2x40x512xbf16> {
  %h = kimi.attn_res [%s0, %s1, %s2] query %q norm %n eps(1.0e-6) : [tensor<2x40x512xbf16>, tensor<2x40x512xbf16>, tensor<2x40x512xbf16>], tensor<512xbf16>, tensor<512xbf16> -> tensor<2x40x512xbf16>
  return %h : tensor<2x40x512xbf16>
}

// AttnRes over 5 sources of 96 tokens x 1000 (a hidden size that is not a
// multiple of the block: guarded columns), the following RMSNorm fused.
func.func @attn_res_norm(%s0: tensor<1x96x1000xbf16>, %s1: tensor<1x96x1000xbf16>, %s2: tensor<1x96x1000xbf16>,
                         %s3: tensor<1x96x1000xbf16>, %s4: tensor<1x96x1000xbf16>, %q: tensor<1000xf32>,
                         %n: tensor<1000xf32>, %w: tensor<1000xf32>) -> (tensor<1x96x1000xbf16>, tensor<1x96x1000xbf16>) {
  %h = kimi.attn_res [%s0, %s1, %s2, %s3, %s4] query %q norm %n eps(1.0e-6) : [tensor<1x96x1000xbf16>, tensor<1x96x1000xbf16>, tensor<1x96x1000xbf16>, tensor<1x96x1000xbf16>, tensor<1x96x1000xbf16>], tensor<1000xf32>, tensor<1000xf32> -> tensor<1x96x1000xbf16>
  %y = kimi.rms_norm %h, %w eps(1.0e-5) : tensor<1x96x1000xbf16>, tensor<1000xf32> -> tensor<1x96x1000xbf16>
  return %h, %y : tensor<1x96x1000xbf16>, tensor<1x96x1000xbf16>
}

// bench: AttnRes at K3 width (D = 7168) over 8 sources for 4096 tokens, the
// following RMSNorm fused (one kernel).
func.func @attn_res_4096x7168(%s0: tensor<1x4096x7168xbf16>, %s1: tensor<1x4096x7168xbf16>, %s2: tensor<1x4096x7168xbf16>, %s3: tensor<1x4096x7168xbf16>, %s4: tensor<1x4096x7168xbf16>, %s5: tensor<1x4096x7168xbf16>, %s6: tensor<1x4096x7168xbf16>, %s7: tensor<1x4096x7168xbf16>, %q: tensor<7168xf32>, %n: tensor<7168xf32>, %w: tensor<7168xf32>)
    -> (tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>) {
  %h = kimi.attn_res [%s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7] query %q norm %n eps(1.0e-6) : [tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>], tensor<7168xf32>, tensor<7168xf32> -> tensor<1x4096x7168xbf16>
  %y = kimi.rms_norm %h, %w eps(1.0e-5) : tensor<1x4096x7168xbf16>, tensor<7168xf32> -> tensor<1x4096x7168xbf16>
  return %h, %y : tensor<1x4096x7168xbf16>, tensor<1x4096x7168xbf16>
}

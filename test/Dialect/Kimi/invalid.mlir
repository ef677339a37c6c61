// Diagnostics of the kimi verifiers: every case below has exactly one fault.
// RUN: kimi-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// kimi.weight
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'kimi.weight' op weight @"model.norm.weight" must have a static shape, got 'tensor<?xbf16>'}}
kimi.weight @model.norm.weight : tensor<?xbf16>

// -----

// expected-error @+1 {{'kimi.weight' op weight @"model.lm_head.weight" has unsupported element type 'i8'}}
kimi.weight @model.lm_head.weight : tensor<512x64xi8>

// -----

// expected-error @+1 {{'kimi.weight' op weight @"model.norm.weight" has unsupported element type 'f64'}}
kimi.weight @model.norm.weight : tensor<64xf64>

// -----

// expected-error @+1 {{'kimi.weight' op expert stack @"model.layers.1.mlp.experts.{e}.bias" needs a leading expert dimension, got 'tensor<16xf32>'}}
kimi.weight @"model.layers.1.mlp.experts.{e}.bias" : tensor<16xf32>

// -----

// expected-error @+1 {{'kimi.weight' op weight name must not be empty}}
kimi.weight @"" : tensor<64xbf16>

// -----

func.func @weight_in_func() {
  // expected-error @+1 {{'kimi.weight' op expects parent op 'builtin.module'}}
  kimi.weight @model.norm.weight : tensor<64xbf16>
  return
}

// -----

// ODS: the declared type must be a ranked tensor.
// expected-error @+1 {{'kimi.weight' op attribute 'type' failed to satisfy constraint: type attribute of ranked tensor of any type values}}
kimi.weight @model.norm.weight : tensor<*xbf16>

//===----------------------------------------------------------------------===//
// kimi.weight_ref
//===----------------------------------------------------------------------===//

// -----

kimi.weight @model.norm.weight : tensor<64xbf16>
func.func @weight_ref_missing() -> tensor<64xbf16> {
  // expected-error @+1 {{'kimi.weight_ref' op 'model.final_norm.weight' does not name a kimi.weight}}
  %w = kimi.weight_ref @model.final_norm.weight : tensor<64xbf16>
  return %w : tensor<64xbf16>
}

// -----

kimi.weight @model.norm.weight : tensor<64xbf16>
func.func @weight_ref_element_type() -> tensor<64xf32> {
  // expected-error @+1 {{'kimi.weight_ref' op result type 'tensor<64xf32>' does not match the declared type 'tensor<64xbf16>' of @"model.norm.weight"}}
  %w = kimi.weight_ref @model.norm.weight : tensor<64xf32>
  return %w : tensor<64xf32>
}

// -----

kimi.weight @model.embed_tokens.weight : tensor<512x64xbf16>
func.func @weight_ref_shape() -> tensor<64x512xbf16> {
  // expected-error @+1 {{'kimi.weight_ref' op result type 'tensor<64x512xbf16>' does not match the declared type 'tensor<512x64xbf16>' of @"model.embed_tokens.weight"}}
  %w = kimi.weight_ref @model.embed_tokens.weight : tensor<64x512xbf16>
  return %w : tensor<64x512xbf16>
}

// -----

func.func private @model.norm.weight()
func.func @weight_ref_not_a_weight() -> tensor<64xbf16> {
  // expected-error @+1 {{'kimi.weight_ref' op 'model.norm.weight' does not name a kimi.weight}}
  %w = kimi.weight_ref @model.norm.weight : tensor<64xbf16>
  return %w : tensor<64xbf16>
}

// -----

// ODS: the result must be a ranked tensor (the custom form cannot even spell
// an unranked one, so use the generic form).
kimi.weight @model.norm.weight : tensor<64xbf16>
func.func @weight_ref_unranked() -> tensor<*xbf16> {
  // expected-error @+1 {{'kimi.weight_ref' op result #0 must be ranked tensor of any type values, but got 'tensor<*xbf16>'}}
  %w = "kimi.weight_ref"() <{name = @model.norm.weight}> : () -> tensor<*xbf16>
  return %w : tensor<*xbf16>
}

//===----------------------------------------------------------------------===//
// kimi.embed
//===----------------------------------------------------------------------===//

// -----

func.func @embed_table_rank(%t: tensor<512xbf16>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{'kimi.embed' op 'table' must have rank 2 ([V, D]), got 'tensor<512xbf16>'}}
  %e = kimi.embed %t[%ids] : tensor<512xbf16>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @embed_microscaled(%t: tensor<512x64xf4E2M1FN>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{'kimi.embed' op embedding 'table' must be bf16, f16 or f32}}
  %e = kimi.embed %t[%ids] : tensor<512x64xf4E2M1FN>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @embed_out_rank(%t: tensor<512x64xbf16>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{'kimi.embed' op 'out' must have rank 3 (ids.shape ++ [D]), got 'tensor<16x64xf32>'}}
  %e = kimi.embed %t[%ids] : tensor<512x64xbf16>, tensor<2x8xi32> -> tensor<16x64xf32>
  return
}

// -----

func.func @embed_token_dim(%t: tensor<512x64xbf16>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{'kimi.embed' op token mismatch: dimension 1 of 'out' is 4 but dimension 1 of 'ids' is 8}}
  %e = kimi.embed %t[%ids] : tensor<512x64xbf16>, tensor<2x8xi32> -> tensor<2x4x64xf32>
  return
}

// -----

func.func @embed_width(%t: tensor<512x64xbf16>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{'kimi.embed' op embedding width mismatch: dimension 2 of 'out' is 32 but dimension 1 of 'table' is 64}}
  %e = kimi.embed %t[%ids] : tensor<512x64xbf16>, tensor<2x8xi32> -> tensor<2x8x32xf32>
  return
}

// -----

// ODS: token ids are integers.
func.func @embed_float_ids(%t: tensor<512x64xbf16>, %ids: tensor<2x8xf32>) {
  // expected-error @+1 {{'kimi.embed' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2x8xf32>'}}
  %e = kimi.embed %t[%ids] : tensor<512x64xbf16>, tensor<2x8xf32> -> tensor<2x8x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.linear
//===----------------------------------------------------------------------===//

// -----

func.func @linear_x_rank(%x: tensor<f32>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'kimi.linear' op 'x' must have rank >= 1 ([..., K]), got 'tensor<f32>'}}
  %y = kimi.linear %x, %w : tensor<f32>, tensor<128x64xbf16> -> tensor<128xf32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<2x8x64xf32>, %w: tensor<4x128x64xbf16>) {
  // expected-error @+1 {{'kimi.linear' op 'weight' must have rank 2 ([N, K]), got 'tensor<4x128x64xbf16>'}}
  %y = kimi.linear %x, %w : tensor<2x8x64xf32>, tensor<4x128x64xbf16> -> tensor<2x8x128xf32>
  return
}

// -----

func.func @linear_token_dim(%x: tensor<2x8x64xf32>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'kimi.linear' op token dimension mismatch: dimension 1 of 'out' is 4 but dimension 1 of 'x' is 8}}
  %y = kimi.linear %x, %w : tensor<2x8x64xf32>, tensor<128x64xbf16> -> tensor<2x4x128xf32>
  return
}

// -----

func.func @linear_out_rank(%x: tensor<2x8x64xf32>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'kimi.linear' op 'out' and 'x' must have the same rank, got 'tensor<16x128xf32>' and 'tensor<2x8x64xf32>'}}
  %y = kimi.linear %x, %w : tensor<2x8x64xf32>, tensor<128x64xbf16> -> tensor<16x128xf32>
  return
}

// -----

func.func @linear_input_width(%x: tensor<2x8x64xf32>, %w: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.linear' op input width K mismatch: dimension 2 of 'x' is 64 but dimension 1 of 'weight' is 32}}
  %y = kimi.linear %x, %w : tensor<2x8x64xf32>, tensor<128x32xbf16> -> tensor<2x8x128xf32>
  return
}

// -----

func.func @linear_output_width(%x: tensor<2x8x64xf32>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'kimi.linear' op output width N mismatch: dimension 2 of 'out' is 64 but dimension 0 of 'weight' is 128}}
  %y = kimi.linear %x, %w : tensor<2x8x64xf32>, tensor<128x64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @linear_mxfp4_no_scale(%x: tensor<?x64xf32>, %w: tensor<128x64xf4E2M1FN>) {
  // expected-error @+1 {{'kimi.linear' op microscaled 'weight' ('f4E2M1FN') needs a 'scale' operand}}
  %y = kimi.linear %x, %w : tensor<?x64xf32>, tensor<128x64xf4E2M1FN> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_mxfp8_no_scale(%x: tensor<?x64xf32>, %w: tensor<128x64xf8E4M3FN>) {
  // expected-error @+1 {{'kimi.linear' op microscaled 'weight' ('f8E4M3FN') needs a 'scale' operand}}
  %y = kimi.linear %x, %w : tensor<?x64xf32>, tensor<128x64xf8E4M3FN> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_bf16_with_scale(%x: tensor<?x64xf32>, %w: tensor<128x64xbf16>, %s: tensor<128x2xf8E8M0FNU>) {
  // expected-error @+1 {{'kimi.linear' op 'weight' of element type 'bf16' takes no 'scale'}}
  %y = kimi.linear %x, %w scale %s : tensor<?x64xf32>, tensor<128x64xbf16>, tensor<128x2xf8E8M0FNU> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_scale_blocks(%x: tensor<?x64xf32>, %w: tensor<128x64xf4E2M1FN>, %s: tensor<128x4xf8E8M0FNU>) {
  // expected-error @+1 {{'kimi.linear' op dimension 1 of 'scale' (one scale per 32 values) must be 2, got 4}}
  %y = kimi.linear %x, %w scale %s : tensor<?x64xf32>, tensor<128x64xf4E2M1FN>, tensor<128x4xf8E8M0FNU> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_scale_rows(%x: tensor<?x64xf32>, %w: tensor<128x64xf4E2M1FN>, %s: tensor<64x2xf8E8M0FNU>) {
  // expected-error @+1 {{'kimi.linear' op scale block mismatch: dimension 0 of 'scale' is 64 but dimension 0 of 'weight' is 128}}
  %y = kimi.linear %x, %w scale %s : tensor<?x64xf32>, tensor<128x64xf4E2M1FN>, tensor<64x2xf8E8M0FNU> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_scale_rank(%x: tensor<?x64xf32>, %w: tensor<128x64xf4E2M1FN>, %s: tensor<256xf8E8M0FNU>) {
  // expected-error @+1 {{'kimi.linear' op 'scale' must have the rank of 'weight' (2), got 'tensor<256xf8E8M0FNU>'}}
  %y = kimi.linear %x, %w scale %s : tensor<?x64xf32>, tensor<128x64xf4E2M1FN>, tensor<256xf8E8M0FNU> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_partial_block(%x: tensor<?x48xf32>, %w: tensor<128x48xf4E2M1FN>, %s: tensor<128x1xf8E8M0FNU>) {
  // expected-error @+1 {{'kimi.linear' op microscaled 'weight' needs its last dimension to be a multiple of the 32-value block, got 48}}
  %y = kimi.linear %x, %w scale %s : tensor<?x48xf32>, tensor<128x48xf4E2M1FN>, tensor<128x1xf8E8M0FNU> -> tensor<?x128xf32>
  return
}

// -----

// ODS: scales are f8E8M0FNU.
func.func @linear_scale_type(%x: tensor<?x64xf32>, %w: tensor<128x64xf4E2M1FN>, %s: tensor<128x2xbf16>) {
  // expected-error @+1 {{'kimi.linear' op operand #2 must be ranked tensor of f8E8M0FNU type values, but got 'tensor<128x2xbf16>'}}
  %y = kimi.linear %x, %w scale %s : tensor<?x64xf32>, tensor<128x64xf4E2M1FN>, tensor<128x2xbf16> -> tensor<?x128xf32>
  return
}

// -----

// ODS: activations are floating point.
func.func @linear_int_x(%x: tensor<2x64xi32>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'kimi.linear' op operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<2x64xi32>'}}
  %y = kimi.linear %x, %w : tensor<2x64xi32>, tensor<128x64xbf16> -> tensor<2x128xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.rms_norm
//===----------------------------------------------------------------------===//

// -----

func.func @rms_norm_x_rank(%x: tensor<f32>, %w: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.rms_norm' op 'x' must have rank >= 1 ([..., D]), got 'tensor<f32>'}}
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<f32>, tensor<64xbf16> -> tensor<f32>
  return
}

// -----

func.func @rms_norm_weight_rank(%x: tensor<2x8x64xf32>, %w: tensor<1x64xbf16>) {
  // expected-error @+1 {{'kimi.rms_norm' op 'weight' must have rank 1 ([D]), got 'tensor<1x64xbf16>'}}
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x8x64xf32>, tensor<1x64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @rms_norm_width(%x: tensor<2x8x64xf32>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{'kimi.rms_norm' op normalised width D mismatch: dimension 0 of 'weight' is 32 but dimension 2 of 'x' is 64}}
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x8x64xf32>, tensor<32xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @rms_norm_out_shape(%x: tensor<2x8x64xf32>, %w: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.rms_norm' op shape mismatch: dimension 1 of 'out' is 4 but dimension 1 of 'x' is 8}}
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x8x64xf32>, tensor<64xbf16> -> tensor<2x4x64xf32>
  return
}

// -----

func.func @rms_norm_out_rank(%x: tensor<2x8x64xf32>, %w: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.rms_norm' op 'out' and 'x' must have the same shape, got 'tensor<16x64xf32>' and 'tensor<2x8x64xf32>'}}
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x8x64xf32>, tensor<64xbf16> -> tensor<16x64xf32>
  return
}

// -----

// ODS: eps is positive.
func.func @rms_norm_zero_eps(%x: tensor<2x8x64xf32>, %w: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.rms_norm' op attribute 'eps' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %0 = kimi.rms_norm %x, %w eps(0.0) : tensor<2x8x64xf32>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

// ODS: the norm weight is floating point.
func.func @rms_norm_int_weight(%x: tensor<2x8x64xf32>, %w: tensor<64xi32>) {
  // expected-error @+1 {{'kimi.rms_norm' op operand #1 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<64xi32>'}}
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x8x64xf32>, tensor<64xi32> -> tensor<2x8x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.gated_rms_norm
//===----------------------------------------------------------------------===//

// -----

func.func @gated_rms_norm_x_rank(%x: tensor<16xf32>, %g: tensor<16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.gated_rms_norm' op 'x' must have rank >= 2 ([..., H, D]), got 'tensor<16xf32>'}}
  %0 = kimi.gated_rms_norm %x, %g, %w eps(1.0e-5) : tensor<16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<16xbf16>
  return
}

// -----

func.func @gated_rms_norm_gate_shape(%x: tensor<2x8x4x16xf32>, %g: tensor<2x8x2x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.gated_rms_norm' op shape mismatch: dimension 2 of 'gate' is 2 but dimension 2 of 'x' is 4}}
  %0 = kimi.gated_rms_norm %x, %g, %w eps(1.0e-5) : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<16xf32> -> tensor<2x8x4x16xbf16>
  return
}

// -----

func.func @gated_rms_norm_gate_rank(%x: tensor<2x8x4x16xf32>, %g: tensor<2x8x64xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.gated_rms_norm' op 'gate' and 'x' must have the same shape, got 'tensor<2x8x64xf32>' and 'tensor<2x8x4x16xf32>'}}
  %0 = kimi.gated_rms_norm %x, %g, %w eps(1.0e-5) : tensor<2x8x4x16xf32>, tensor<2x8x64xf32>, tensor<16xf32> -> tensor<2x8x4x16xbf16>
  return
}

// -----

func.func @gated_rms_norm_weight_rank(%x: tensor<2x8x4x16xf32>, %g: tensor<2x8x4x16xf32>, %w: tensor<4x16xf32>) {
  // expected-error @+1 {{'kimi.gated_rms_norm' op 'weight' must have rank 1 ([D]), got 'tensor<4x16xf32>'}}
  %0 = kimi.gated_rms_norm %x, %g, %w eps(1.0e-5) : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<4x16xf32> -> tensor<2x8x4x16xbf16>
  return
}

// -----

func.func @gated_rms_norm_head_dim(%x: tensor<2x8x4x16xf32>, %g: tensor<2x8x4x16xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'kimi.gated_rms_norm' op head dim D mismatch: dimension 0 of 'weight' is 64 but dimension 3 of 'x' is 16}}
  %0 = kimi.gated_rms_norm %x, %g, %w eps(1.0e-5) : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<64xf32> -> tensor<2x8x4x16xbf16>
  return
}

// -----

func.func @gated_rms_norm_out_shape(%x: tensor<2x8x4x16xf32>, %g: tensor<2x8x4x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.gated_rms_norm' op 'out' and 'x' must have the same shape, got 'tensor<2x8x64xbf16>' and 'tensor<2x8x4x16xf32>'}}
  %0 = kimi.gated_rms_norm %x, %g, %w eps(1.0e-5) : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<16xf32> -> tensor<2x8x64xbf16>
  return
}

// -----

// ODS: eps is positive.
func.func @gated_rms_norm_negative_eps(%x: tensor<2x8x4x16xf32>, %g: tensor<2x8x4x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.gated_rms_norm' op attribute 'eps' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %0 = kimi.gated_rms_norm %x, %g, %w eps(-1.0e-5) : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<16xf32> -> tensor<2x8x4x16xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kimi.l2_norm
//===----------------------------------------------------------------------===//

// -----

func.func @l2_norm_x_rank(%x: tensor<f32>) {
  // expected-error @+1 {{'kimi.l2_norm' op 'x' must have rank >= 1 ([..., D]), got 'tensor<f32>'}}
  %0 = kimi.l2_norm %x eps(1.0e-6) : tensor<f32> -> tensor<f32>
  return
}

// -----

func.func @l2_norm_out_shape(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'kimi.l2_norm' op shape mismatch: dimension 3 of 'out' is 32 but dimension 3 of 'x' is 16}}
  %0 = kimi.l2_norm %x eps(1.0e-6) : tensor<2x8x4x16xf32> -> tensor<2x8x4x32xf32>
  return
}

// -----

func.func @l2_norm_out_rank(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'kimi.l2_norm' op 'out' and 'x' must have the same shape, got 'tensor<2x8x64xf32>' and 'tensor<2x8x4x16xf32>'}}
  %0 = kimi.l2_norm %x eps(1.0e-6) : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
  return
}

// -----

// ODS: eps is positive.
func.func @l2_norm_zero_eps(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'kimi.l2_norm' op attribute 'eps' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %0 = kimi.l2_norm %x eps(0.0) : tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

// ODS: the result is floating point.
func.func @l2_norm_int_out(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'kimi.l2_norm' op result #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<2x8x4x16xi64>'}}
  %0 = kimi.l2_norm %x eps(1.0e-6) : tensor<2x8x4x16xf32> -> tensor<2x8x4x16xi64>
  return
}

//===----------------------------------------------------------------------===//
// kimi.situ_glu
//===----------------------------------------------------------------------===//

// -----

func.func @situ_glu_up_shape(%g: tensor<8x96xf32>, %u: tensor<8x48xf32>) {
  // expected-error @+1 {{'kimi.situ_glu' op shape mismatch: dimension 1 of 'up' is 48 but dimension 1 of 'gate' is 96}}
  %0 = kimi.situ_glu %g, %u beta(4.0) linear_beta(25.0) : tensor<8x96xf32>, tensor<8x48xf32> -> tensor<8x96xbf16>
  return
}

// -----

func.func @situ_glu_up_rank(%g: tensor<8x96xf32>, %u: tensor<2x4x96xf32>) {
  // expected-error @+1 {{'kimi.situ_glu' op 'up' and 'gate' must have the same shape, got 'tensor<2x4x96xf32>' and 'tensor<8x96xf32>'}}
  %0 = kimi.situ_glu %g, %u beta(4.0) linear_beta(25.0) : tensor<8x96xf32>, tensor<2x4x96xf32> -> tensor<8x96xbf16>
  return
}

// -----

func.func @situ_glu_out_shape(%g: tensor<8x96xf32>, %u: tensor<8x96xf32>) {
  // expected-error @+1 {{'kimi.situ_glu' op shape mismatch: dimension 0 of 'out' is 4 but dimension 0 of 'gate' is 8}}
  %0 = kimi.situ_glu %g, %u beta(4.0) linear_beta(25.0) : tensor<8x96xf32>, tensor<8x96xf32> -> tensor<4x96xbf16>
  return
}

// -----

// ODS: beta is positive.
func.func @situ_glu_zero_beta(%g: tensor<8x96xf32>, %u: tensor<8x96xf32>) {
  // expected-error @+1 {{'kimi.situ_glu' op attribute 'beta' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %0 = kimi.situ_glu %g, %u beta(0.0) linear_beta(25.0) : tensor<8x96xf32>, tensor<8x96xf32> -> tensor<8x96xbf16>
  return
}

// -----

// ODS: linear_beta is positive.
func.func @situ_glu_negative_linear_beta(%g: tensor<8x96xf32>, %u: tensor<8x96xf32>) {
  // expected-error @+1 {{'kimi.situ_glu' op attribute 'linear_beta' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %0 = kimi.situ_glu %g, %u beta(4.0) linear_beta(-25.0) : tensor<8x96xf32>, tensor<8x96xf32> -> tensor<8x96xbf16>
  return
}

// -----

// ODS: inputs are floating point.
func.func @situ_glu_int_gate(%g: tensor<8x96xi32>, %u: tensor<8x96xf32>) {
  // expected-error @+1 {{'kimi.situ_glu' op operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<8x96xi32>'}}
  %0 = kimi.situ_glu %g, %u beta(4.0) linear_beta(25.0) : tensor<8x96xi32>, tensor<8x96xf32> -> tensor<8x96xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kimi.short_conv
//===----------------------------------------------------------------------===//

// -----

func.func @short_conv_x_rank(%x: tensor<8x64xbf16>, %w: tensor<64x1x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op 'x' must have rank 3 ([B, T, C]), got 'tensor<8x64xbf16>'}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<8x64xbf16>, tensor<64x1x4xf32> -> tensor<8x64xf32>, tensor<3x64xf32>
  return
}

// -----

func.func @short_conv_weight_rank(%x: tensor<2x8x64xbf16>, %w: tensor<64x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op 'weight' must have rank 3 ([C, 1, K]), got 'tensor<64x4xf32>'}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x4xf32> -> tensor<2x8x64xf32>, tensor<2x3x64xf32>
  return
}

// -----

func.func @short_conv_channels(%x: tensor<2x8x64xbf16>, %w: tensor<32x1x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op channel count C mismatch: dimension 0 of 'weight' is 32 but dimension 2 of 'x' is 64}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<32x1x4xf32> -> tensor<2x8x64xf32>, tensor<2x3x64xf32>
  return
}

// -----

func.func @short_conv_not_depthwise(%x: tensor<2x8x64xbf16>, %w: tensor<64x2x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op dimension 1 of 'weight' (depthwise) must be 1, got 2}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x2x4xf32> -> tensor<2x8x64xf32>, tensor<2x3x64xf32>
  return
}

// -----

func.func @short_conv_out_shape(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op shape mismatch: dimension 1 of 'out' is 1 but dimension 1 of 'x' is 8}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x4xf32> -> tensor<2x1x64xf32>, tensor<2x3x64xf32>
  return
}

// -----

func.func @short_conv_dynamic_kernel(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x?xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op 'weight' kernel size (dimension 2) must be static}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x?xf32> -> tensor<2x8x64xf32>, tensor<2x?x64xf32>
  return
}

// -----

func.func @short_conv_kernel_one(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x1xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op kernel size must be at least 2, got 1}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x1xf32> -> tensor<2x8x64xf32>, tensor<2x0x64xf32>
  return
}

// -----

func.func @short_conv_state_length(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op dimension 1 of 'final_state' (K-1 previous inputs) must be 3, got 4}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x4xf32> -> tensor<2x8x64xf32>, tensor<2x4x64xf32>
  return
}

// -----

func.func @short_conv_state_batch(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op batch mismatch: dimension 0 of 'final_state' is 1 but dimension 0 of 'x' is 2}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x4xf32> -> tensor<2x8x64xf32>, tensor<1x3x64xf32>
  return
}

// -----

func.func @short_conv_state_rank(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op 'final_state' must have rank 3 ([B, K-1, C]), got 'tensor<2x192xf32>'}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x4xf32> -> tensor<2x8x64xf32>, tensor<2x192xf32>
  return
}

// -----

func.func @short_conv_input_state(%x: tensor<2x1x64xbf16>, %w: tensor<64x1x4xf32>, %st: tensor<2x2x64xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op shape mismatch: dimension 1 of 'state' is 2 but dimension 1 of 'final_state' is 3}}
  %y, %s = kimi.short_conv %x, %w state %st : tensor<2x1x64xbf16>, tensor<64x1x4xf32>, tensor<2x2x64xf32> -> tensor<2x1x64xf32>, tensor<2x3x64xf32>
  return
}

// -----

// ODS: the final state is f32.
func.func @short_conv_bf16_state(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x4xf32>) {
  // expected-error @+1 {{'kimi.short_conv' op result #1 must be ranked tensor of 32-bit float values, but got 'tensor<2x3x64xbf16>'}}
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x4xf32> -> tensor<2x8x64xf32>, tensor<2x3x64xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kimi.kda_gate
//===----------------------------------------------------------------------===//

// -----

func.func @kda_gate_no_lower(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op lower_bound gate needs a 'lower' bound}}
  %g = kimi.kda_gate lower_bound %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_zero_lower(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op lower_bound gate needs 'lower' < 0, got 0}}
  %g = kimi.kda_gate lower_bound lower = 0.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_positive_lower(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op lower_bound gate needs 'lower' < 0, got 5}}
  %g = kimi.kda_gate lower_bound lower = 5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_softplus_lower(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op softplus gate is unbounded and takes no 'lower'}}
  %g = kimi.kda_gate softplus lower = -5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_z_rank(%z: tensor<8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op 'z' must have rank 4 ([B, T, H, D]), got 'tensor<8x4x64xbf16>'}}
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<8x4x64xf32>
  return
}

// -----

func.func @kda_gate_a_log_heads(%z: tensor<1x8x4x64xbf16>, %a: tensor<8xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op head count H mismatch: dimension 0 of 'a_log' is 8 but dimension 2 of 'z' is 4}}
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<8xf32>, tensor<4x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_dt_bias_heads(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<2x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op head count H mismatch: dimension 0 of 'dt_bias' is 2 but dimension 2 of 'z' is 4}}
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<2x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_dt_bias_dim(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x32xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op head dim D mismatch: dimension 1 of 'dt_bias' is 32 but dimension 3 of 'z' is 64}}
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x32xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_g_shape(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op shape mismatch: dimension 1 of 'g' is 16 but dimension 1 of 'z' is 8}}
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x16x4x64xf32>
  return
}

// -----

// ODS: the log decay is f32.
func.func @kda_gate_bf16_g(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op result #0 must be ranked tensor of 32-bit float values, but got 'tensor<1x8x4x64xbf16>'}}
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x8x4x64xbf16>
  return
}

// -----

// ODS: a_log is f32.
func.func @kda_gate_bf16_a_log(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xbf16>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{'kimi.kda_gate' op operand #1 must be ranked tensor of 32-bit float values, but got 'tensor<4xbf16>'}}
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xbf16>, tensor<4x64xf32> -> tensor<1x8x4x64xf32>
  return
}

// -----

func.func @kda_gate_unknown_form(%z: tensor<1x8x4x64xbf16>, %a: tensor<4xf32>, %dt: tensor<4x64xf32>) {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'form' [lower_bound, softplus]}}
  %g = kimi.kda_gate sigmoid %z, %a, %dt : tensor<1x8x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x8x4x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.kda
//===----------------------------------------------------------------------===//

// -----

func.func @kda_q_rank(%q: tensor<8x4x64xbf16>, %k: tensor<8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op 'q' must have rank 4 ([B, T, H, dk]), got 'tensor<8x4x64xbf16>'}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<8x4x64xbf16>, tensor<8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_k_shape(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x32xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op shape mismatch: dimension 3 of 'k' is 32 but dimension 3 of 'q' is 64}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_g_shape(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x32xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op shape mismatch: dimension 3 of 'g' is 32 but dimension 3 of 'q' is 64}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x32xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_v_heads(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x2x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op [B, T, H] mismatch: dimension 2 of 'v' is 2 but dimension 2 of 'q' is 4}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x2x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x2x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_beta_rank(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4x1xbf16>) {
  // expected-error @+1 {{'kimi.kda' op 'beta' must have rank 3 ([B, T, H]), got 'tensor<1x8x4x1xbf16>'}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4x1xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_varlen_batch(%q: tensor<2x8x4x64xbf16>, %k: tensor<2x8x4x64xbf16>, %v: tensor<2x8x4x32xbf16>, %g: tensor<2x8x4x64xf32>, %b: tensor<2x8x4xbf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'kimi.kda' op with 'cu_seqlens' the batch dimension of 'q' must be 1 (sequences are packed along T), got 2}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b cu_seqlens %cu scale(0.125) : (tensor<2x8x4x64xbf16>, tensor<2x8x4x64xbf16>, tensor<2x8x4x32xbf16>, tensor<2x8x4x64xf32>, tensor<2x8x4xbf16>, tensor<3xi32>) -> (tensor<2x8x4x32xbf16>, tensor<2x4x64x32xf32>)
  return
}

// -----

func.func @kda_varlen_states(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'kimi.kda' op 'final_state' dimension 0 (1) must equal the sequence count N = 2 of 'cu_seqlens'}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b cu_seqlens %cu scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>, tensor<3xi32>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_varlen_offsets(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>, %cu: tensor<1xi32>) {
  // expected-error @+1 {{'kimi.kda' op 'cu_seqlens' must hold at least 2 offsets, got 1}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b cu_seqlens %cu scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>, tensor<1xi32>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_state_types(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>, %s0: tensor<1x4x64x32xbf16>) {
  // expected-error @+1 {{'kimi.kda' op 'initial_state' ('bf16') and 'final_state' ('f32') must share one element type}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>, tensor<1x4x64x32xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_beta_tokens(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x4x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op [B, T, H] mismatch: dimension 1 of 'beta' is 4 but dimension 1 of 'q' is 8}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x4x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_out_shape(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op shape mismatch: dimension 3 of 'out' is 64 but dimension 3 of 'v' is 32}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x64xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @kda_state_key_dim(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op key dim dk mismatch: dimension 2 of 'final_state' is 32 but dimension 3 of 'q' is 64}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x32x32xf32>)
  return
}

// -----

func.func @kda_state_value_dim(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op value dim dv mismatch: dimension 3 of 'final_state' is 64 but dimension 3 of 'v' is 32}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x64xf32>)
  return
}

// -----

func.func @kda_state_heads(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op head count H mismatch: dimension 1 of 'final_state' is 8 but dimension 2 of 'q' is 4}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x8x64x32xf32>)
  return
}

// -----

func.func @kda_initial_state(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>, %s0: tensor<1x4x32x64xf32>) {
  // expected-error @+1 {{'kimi.kda' op shape mismatch: dimension 2 of 'initial_state' is 32 but dimension 2 of 'final_state' is 64}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>, tensor<1x4x32x64xf32>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

// ODS: the log decay is a float tensor.
func.func @kda_int_g(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xi32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op operand #3 must be ranked tensor of}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xi32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

// ODS: decay must be a #kimi.decay.
func.func @kda_decay_not_decay(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op attribute 'decay' failed to satisfy constraint}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) {decay = 16 : i64} : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

// ODS: scale is positive.
func.func @kda_zero_scale(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{'kimi.kda' op attribute 'scale' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.0) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

//===----------------------------------------------------------------------===//
// #kimi.decay
//===----------------------------------------------------------------------===//

// -----

func.func @decay_chunk_not_power_of_two(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{decay chunk must be a power of two in [16, 64], got 24}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) {decay = #kimi.decay<lower = -5.0, chunk = 24, diag = dense>} : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @decay_chunk_too_small(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{decay chunk must be a power of two in [16, 64], got 8}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) {decay = #kimi.decay<lower = -5.0, chunk = 8, diag = dense>} : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @decay_chunk_too_large(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{decay chunk must be a power of two in [16, 64], got 128}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) {decay = #kimi.decay<chunk = 128, diag = pairwise>} : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @decay_positive_lower(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{decay lower bound must not be positive, got 2.500000e+00}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) {decay = #kimi.decay<lower = 2.5, chunk = 32, diag = dense>} : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

func.func @decay_bad_diag(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>, %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>) {
  // expected-error @+1 {{expected 'dense' or 'pairwise' for diag, got 'sparse'}}
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = sparse>} : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xf32>)
  return
}

// -----

// expected-error @+1 {{expected 'chunk'}}
#missing_chunk = #kimi.decay<lower = -5.0, diag = dense>

//===----------------------------------------------------------------------===//
// kimi.mla
//===----------------------------------------------------------------------===//

// -----

func.func @mla_fewer_keys(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x4x32xbf16>, %kpe: tensor<1x4x16xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op 'ckv' holds 4 positions, fewer than the 8 queries}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x4x32xbf16>, tensor<1x4x16xbf16>, tensor<128x32xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

func.func @mla_rows_per_head(%q: tensor<1x8x3x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op 'kv_b_proj' has 128 rows, not a multiple of the 3 heads}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x3x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xbf16>) -> tensor<1x8x3x32xbf16>
  return
}

// -----

func.func @mla_no_nope(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op query head dim 48 leaves no non-positional part after the 48-wide shared key}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x48xbf16>, tensor<128x32xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

func.func @mla_no_value_dims(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op 'kv_b_proj' rows per head (32) leave no value dims after dn = 32}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<64x32xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

func.func @mla_out_value_dim(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op dimension 3 of 'out' (dv = rows per head - dn) must be 32, got 16}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xbf16>) -> tensor<1x8x2x16xbf16>
  return
}

// -----

func.func @mla_latent_rank(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x64xbf16>) {
  // expected-error @+1 {{'kimi.mla' op dimension 1 of 'kv_b_proj' (latent rank R) must be 32, got 64}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x64xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

func.func @mla_k_pe_positions(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x16x16xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op key positions S mismatch: dimension 1 of 'k_pe' is 16 but dimension 1 of 'ckv' is 8}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x16x16xbf16>, tensor<128x32xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

func.func @mla_batch(%q: tensor<2x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op batch mismatch: dimension 0 of 'ckv' is 1 but dimension 0 of 'q' is 2}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<2x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xbf16>) -> tensor<2x8x2x32xbf16>
  return
}

// -----

func.func @mla_gate_shape(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x32xbf16>, %gate: tensor<1x8x2x48xbf16>) {
  // expected-error @+1 {{'kimi.mla' op shape mismatch: dimension 3 of 'gate' is 48 but dimension 3 of 'out' is 32}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb gate %gate scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xbf16>, tensor<1x8x2x48xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

func.func @mla_ckv_rank(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op 'ckv' must have rank 3 ([B, S, R]), got 'tensor<8x32xbf16>'}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

// ODS: the latent is floating point.
func.func @mla_int_ckv(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xi32>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla' op operand #1 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<1x8x32xi32>'}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xi32>, tensor<1x8x16xbf16>, tensor<128x32xbf16>) -> tensor<1x8x2x32xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kimi.mla_decode
//===----------------------------------------------------------------------===//

// -----

func.func @mla_decode_cache_rank(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x16x1x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op 'cache' must have rank 3 ([B, S, R + dr]), got 'tensor<4x16x1x48xbf16>'}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x16x1x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x32xf32>
  return
}

// -----

func.func @mla_decode_cache_width(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x16x32xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op 'cache' rows (32) must be wider than the latent rank R = 32 of 'kv_b_proj'}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x16x32xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x32xf32>
  return
}

// -----

func.func @mla_decode_fewer_keys(%q: tensor<4x8x2x48xbf16>, %cache: tensor<4x4x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op 'cache' holds 4 positions, fewer than the 8 queries}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x8x2x48xbf16>, tensor<4x4x48xbf16>, tensor<128x32xbf16>) -> tensor<4x8x2x32xf32>
  return
}

// -----

func.func @mla_decode_lengths_batch(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xbf16>, %len: tensor<2xi32>) {
  // expected-error @+1 {{'kimi.mla_decode' op batch mismatch: dimension 0 of 'lengths' is 2 but dimension 0 of 'cache' is 4}}
  %d = kimi.mla_decode %q, %cache, %kvb lengths %len scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>, tensor<2xi32>) -> tensor<4x1x2x32xf32>
  return
}

// -----

func.func @mla_decode_lengths_rank(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xbf16>, %len: tensor<4x1xi32>) {
  // expected-error @+1 {{'kimi.mla_decode' op 'lengths' must have rank 1 ([B]), got 'tensor<4x1xi32>'}}
  %d = kimi.mla_decode %q, %cache, %kvb lengths %len scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>, tensor<4x1xi32>) -> tensor<4x1x2x32xf32>
  return
}

// -----

// kimi.cache_insert

func.func @cache_insert_rows(%cache: tensor<1x16x48xf32>, %rows: tensor<1x2x48xf32>, %len: tensor<1xi32>) {
  // expected-error @+1 {{'kimi.cache_insert' op dimension 1 of 'out' (cache rows S + new rows T) must be 18, got 17}}
  %c = kimi.cache_insert %rows into %cache lengths %len : (tensor<1x16x48xf32>, tensor<1x2x48xf32>, tensor<1xi32>) -> tensor<1x17x48xf32>
  return
}

// -----

func.func @cache_insert_width(%cache: tensor<1x16x48xf32>, %rows: tensor<1x1x32xf32>, %len: tensor<1xi32>) {
  // expected-error @+1 {{'kimi.cache_insert' op row width mismatch: dimension 2 of 'rows' is 32 but dimension 2 of 'cache' is 48}}
  %c = kimi.cache_insert %rows into %cache lengths %len : (tensor<1x16x48xf32>, tensor<1x1x32xf32>, tensor<1xi32>) -> tensor<1x17x48xf32>
  return
}

// -----

func.func @cache_insert_batch(%cache: tensor<2x16x48xf32>, %rows: tensor<2x1x48xf32>, %len: tensor<1xi32>) {
  // expected-error @+1 {{'kimi.cache_insert' op batch mismatch: dimension 0 of 'lengths' is 1 but dimension 0 of 'cache' is 2}}
  %c = kimi.cache_insert %rows into %cache lengths %len : (tensor<2x16x48xf32>, tensor<2x1x48xf32>, tensor<1xi32>) -> tensor<2x17x48xf32>
  return
}

// -----

func.func @cache_insert_types(%cache: tensor<1x16x48xbf16>, %rows: tensor<1x1x48xf32>, %len: tensor<1xi32>) {
  // expected-error @+1 {{'kimi.cache_insert' op 'cache', 'rows' and 'out' must share one element type, got 'bf16', 'f32' and 'bf16'}}
  %c = kimi.cache_insert %rows into %cache lengths %len : (tensor<1x16x48xbf16>, tensor<1x1x48xf32>, tensor<1xi32>) -> tensor<1x17x48xbf16>
  return
}

// -----

func.func @mla_decode_rows_per_head(%q: tensor<4x1x3x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op 'kv_b_proj' has 128 rows, not a multiple of the 3 heads}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x3x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x3x32xf32>
  return
}

// -----

func.func @mla_decode_no_nope(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x80xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op query head dim 48 leaves no non-positional part after the 48-wide shared key}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x80xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x32xf32>
  return
}

// -----

func.func @mla_decode_batch(%q: tensor<4x1x2x48xbf16>, %cache: tensor<2x?x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op batch mismatch: dimension 0 of 'cache' is 2 but dimension 0 of 'q' is 4}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<2x?x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x32xf32>
  return
}

// -----

func.func @mla_decode_out_value_dim(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op dimension 3 of 'out' (dv = rows per head - dn) must be 32, got 64}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x64xf32>
  return
}

// -----

func.func @mla_decode_out_heads(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op [B, T, H] mismatch: dimension 2 of 'out' is 4 but dimension 2 of 'q' is 2}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x4x32xf32>
  return
}

// -----

func.func @mla_decode_kv_b_proj_rank(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<2x64x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op 'kv_b_proj' must have rank 2 ([H * (dn + dv), R]), got 'tensor<2x64x32xbf16>'}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<2x64x32xbf16>) -> tensor<4x1x2x32xf32>
  return
}

// -----

func.func @mla_decode_gate_shape(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xbf16>, %gate: tensor<4x1x2x16xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op shape mismatch: dimension 3 of 'gate' is 16 but dimension 3 of 'out' is 32}}
  %d = kimi.mla_decode %q, %cache, %kvb gate %gate scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>, tensor<4x1x2x16xbf16>) -> tensor<4x1x2x32xf32>
  return
}

// -----

// ODS: scale is positive.
func.func @mla_decode_negative_scale(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xbf16>) {
  // expected-error @+1 {{'kimi.mla_decode' op attribute 'scale' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %d = kimi.mla_decode %q, %cache, %kvb scale(-0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.attn_res
//===----------------------------------------------------------------------===//

// -----

// The custom form cannot spell an empty source list; the generic form can.
func.func @attn_res_no_sources(%w: tensor<1x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op needs at least one source}}
  %0 = "kimi.attn_res"(%w, %n) <{eps = 1.0e-5 : f64}> : (tensor<1x64xbf16>, tensor<64xbf16>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_source_shape(%a: tensor<2x8x64xf32>, %b: tensor<2x8x32xf32>, %w: tensor<1x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op shape mismatch: dimension 2 of 'sources[1]' is 32 but dimension 2 of 'sources[0]' is 64}}
  %0 = kimi.attn_res [%a, %b] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>, tensor<2x8x32xf32>], tensor<1x64xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_source_rank(%a: tensor<2x8x64xf32>, %b: tensor<2x8x64xf32>, %c: tensor<16x64xf32>, %w: tensor<1x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op 'sources[2]' and 'sources[0]' must have the same shape, got 'tensor<16x64xf32>' and 'tensor<2x8x64xf32>'}}
  %0 = kimi.attn_res [%a, %b, %c] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<16x64xf32>], tensor<1x64xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_first_source_rank(%a: tensor<f32>, %w: tensor<1x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op 'sources[0]' must have rank >= 1 ([..., D]), got 'tensor<f32>'}}
  %0 = kimi.attn_res [%a] query %w norm %n eps(1.0e-5) : [tensor<f32>], tensor<1x64xbf16>, tensor<64xbf16> -> tensor<f32>
  return
}

// -----

func.func @attn_res_query_rows(%a: tensor<2x8x64xf32>, %w: tensor<2x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op dimension 0 of 'query' ([1, D] form) must be 1, got 2}}
  %0 = kimi.attn_res [%a] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>], tensor<2x64xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_query_rank(%a: tensor<2x8x64xf32>, %w: tensor<1x1x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op 'query' must have rank 1 ([D] or [1, D]), got 'tensor<1x1x64xbf16>'}}
  %0 = kimi.attn_res [%a] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>], tensor<1x1x64xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_query_width(%a: tensor<2x8x64xf32>, %w: tensor<1x32xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op hidden width D mismatch: dimension 1 of 'query' is 32 but dimension 2 of 'sources[0]' is 64}}
  %0 = kimi.attn_res [%a] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>], tensor<1x32xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_norm_rank(%a: tensor<2x8x64xf32>, %w: tensor<64xbf16>, %n: tensor<1x64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op 'norm' must have rank 1 ([D]), got 'tensor<1x64xbf16>'}}
  %0 = kimi.attn_res [%a] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>], tensor<64xbf16>, tensor<1x64xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_norm_width(%a: tensor<2x8x64xf32>, %w: tensor<64xbf16>, %n: tensor<128xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op hidden width D mismatch: dimension 0 of 'norm' is 128 but dimension 2 of 'sources[0]' is 64}}
  %0 = kimi.attn_res [%a] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>], tensor<64xbf16>, tensor<128xbf16> -> tensor<2x8x64xf32>
  return
}

// -----

func.func @attn_res_out_shape(%a: tensor<2x8x64xf32>, %b: tensor<2x8x64xf32>, %w: tensor<1x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op shape mismatch: dimension 1 of 'out' is 1 but dimension 1 of 'sources[0]' is 8}}
  %0 = kimi.attn_res [%a, %b] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>, tensor<2x8x64xf32>], tensor<1x64xbf16>, tensor<64xbf16> -> tensor<2x1x64xf32>
  return
}

// -----

// ODS: sources are floating point.
func.func @attn_res_int_source(%a: tensor<2x8x64xi32>, %w: tensor<1x64xbf16>, %n: tensor<64xbf16>) {
  // expected-error @+1 {{'kimi.attn_res' op operand #0 must be variadic of ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<2x8x64xi32>'}}
  %0 = kimi.attn_res [%a] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xi32>], tensor<1x64xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.router
//===----------------------------------------------------------------------===//

// -----

func.func @router_weight_rank(%x: tensor<16x64xf32>, %wr: tensor<1024xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op 'weight' must have rank 2 ([E, D]), got 'tensor<1024xbf16>'}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<1024xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>
  return
}

// -----

func.func @router_hidden_width(%x: tensor<16x64xf32>, %wr: tensor<16x32xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op hidden width D mismatch: dimension 1 of 'weight' is 32 but dimension 1 of 'x' is 64}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x32xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>
  return
}

// -----

func.func @router_bias_experts(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'kimi.router' op expert count E mismatch: dimension 0 of 'bias' is 8 but dimension 0 of 'weight' is 16}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<8xf32> -> tensor<16x4xf32>, tensor<16x4xi32>
  return
}

// -----

func.func @router_microscaled(%x: tensor<16x64xf32>, %wr: tensor<16x64xf4E2M1FN>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op router 'weight' must be bf16, f16 or f32}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x64xf4E2M1FN>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>
  return
}

// -----

func.func @router_top_k_exceeds(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op top_k = 17 exceeds the 16 experts}}
  %w, %i = kimi.router %x, %wr, %b top_k(17) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x17xf32>, tensor<16x17xi32>
  return
}

// -----

func.func @router_weights_width(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op dimension 1 of 'weights' (top_k) must be 4, got 2}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x2xf32>, tensor<16x2xi32>
  return
}

// -----

func.func @router_weights_tokens(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op token dimension mismatch: dimension 0 of 'weights' is 8 but dimension 0 of 'x' is 16}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<8x4xf32>, tensor<8x4xi32>
  return
}

// -----

func.func @router_indices_shape(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op shape mismatch: dimension 1 of 'indices' is 8 but dimension 1 of 'weights' is 4}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x8xi32>
  return
}

// -----

func.func @router_margins_need_k_below_e(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op margins need the (k+1)-th score: top_k = 16 must be below the 16 experts}}
  %w, %i, %m = kimi.router %x, %wr, %b top_k(16) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x16xf32>, tensor<16x16xi32>, tensor<16x16xf32>
  return
}

// -----

func.func @router_margins_experts(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op expert count E mismatch: dimension 1 of 'margins' is 8 but dimension 0 of 'weight' is 16}}
  %w, %i, %m = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x8xf32>
  return
}

// -----

// ODS: top_k is positive.
func.func @router_zero_top_k(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op attribute 'top_k' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %w, %i = kimi.router %x, %wr, %b top_k(0) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x0xf32>, tensor<16x0xi32>
  return
}

// -----

// ODS: indices are integers.
func.func @router_float_indices(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.router' op result #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<16x4xf32>'}}
  %w, %i = kimi.router %x, %wr, %b top_k(4) : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.routed_experts
//===----------------------------------------------------------------------===//

// -----

func.func @routed_experts_situ_no_betas(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op situ activation needs both 'beta' and 'linear_beta'}}
  %r = kimi.routed_experts situ %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_situ_one_beta(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op situ activation needs both 'beta' and 'linear_beta'}}
  %r = kimi.routed_experts situ %z, %w, %i experts(%gb, %ub, %db) {beta = 4.0 : f64} : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_silu_with_beta(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op silu activation takes no 'beta' or 'linear_beta'}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) {linear_beta = 25.0 : f64} : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_mxfp4_no_scales(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %g: tensor<16x64x32xf4E2M1FN>, %u: tensor<16x64x32xf4E2M1FN>, %d: tensor<16x32x64xf4E2M1FN>) {
  // expected-error @+1 {{'kimi.routed_experts' op microscaled experts ('f4E2M1FN') need 3 scale tensors, got 0}}
  %r = kimi.routed_experts situ %z, %w, %i experts(%g, %u, %d) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x64x32xf4E2M1FN>, tensor<16x64x32xf4E2M1FN>, tensor<16x32x64xf4E2M1FN>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_bf16_with_scales(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x64x32xbf16>, %ub: tensor<16x64x32xbf16>, %db: tensor<16x32x64xbf16>, %gs: tensor<16x64x1xf8E8M0FNU>, %us: tensor<16x64x1xf8E8M0FNU>, %ds: tensor<16x32x2xf8E8M0FNU>) {
  // expected-error @+1 {{'kimi.routed_experts' op experts of element type 'bf16' take no scales, got 3}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) scales(%gs, %us, %ds) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x64x32xbf16>, tensor<16x64x32xbf16>, tensor<16x32x64xbf16>, tensor<16x64x1xf8E8M0FNU>, tensor<16x64x1xf8E8M0FNU>, tensor<16x32x2xf8E8M0FNU>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_down_scale_blocks(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %g: tensor<16x64x32xf4E2M1FN>, %u: tensor<16x64x32xf4E2M1FN>, %d: tensor<16x32x64xf4E2M1FN>, %gs: tensor<16x64x1xf8E8M0FNU>, %us: tensor<16x64x1xf8E8M0FNU>, %ds: tensor<16x32x1xf8E8M0FNU>) {
  // expected-error @+1 {{'kimi.routed_experts' op dimension 2 of 'scales[2]' (one scale per 32 values) must be 2, got 1}}
  %r = kimi.routed_experts situ %z, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x64x32xf4E2M1FN>, tensor<16x64x32xf4E2M1FN>, tensor<16x32x64xf4E2M1FN>, tensor<16x64x1xf8E8M0FNU>, tensor<16x64x1xf8E8M0FNU>, tensor<16x32x1xf8E8M0FNU>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_mixed_element_types(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %uh: tensor<16x48x32xf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op 'gate_proj', 'up_proj' and 'down_proj' must share one element type, got 'bf16', 'f16' and 'bf16'}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %uh, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_input_width(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x64xbf16>, %ub: tensor<16x48x64xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op dimension 2 of 'gate_proj' (expert input width) must be 32, got 64}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x64xbf16>, tensor<16x48x64xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_intermediate(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x24xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op expert intermediate size mismatch: dimension 2 of 'down_proj' is 24 but dimension 1 of 'gate_proj' is 48}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x24xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_expert_count(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<8x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op expert count mismatch: dimension 0 of 'down_proj' is 8 but dimension 0 of 'gate_proj' is 16}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<8x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_up_shape(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x96x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op shape mismatch: dimension 1 of 'up_proj' is 96 but dimension 1 of 'gate_proj' is 48}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x96x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_indices_shape(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x2xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op shape mismatch: dimension 1 of 'indices' is 2 but dimension 1 of 'weights' is 4}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x2xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @routed_experts_out_shape(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op shape mismatch: dimension 1 of 'out' is 64 but dimension 1 of 'x' is 32}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @routed_experts_gate_rank(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<768x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op 'gate_proj' must have rank 3 ([E, I, W]), got 'tensor<768x32xbf16>'}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<768x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

// ODS: routing weights are f32.
func.func @routed_experts_bf16_weights(%z: tensor<16x32xf32>, %w: tensor<16x4xbf16>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op operand #1 must be ranked tensor of 32-bit float values, but got 'tensor<16x4xbf16>'}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xbf16>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

// -----

// ODS: beta is positive.
func.func @routed_experts_zero_beta(%z: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>) {
  // expected-error @+1 {{'kimi.routed_experts' op attribute 'beta' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %r = kimi.routed_experts situ %z, %w, %i experts(%gb, %ub, %db) {beta = 0.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.latent_moe
//===----------------------------------------------------------------------===//

// -----

func.func @latent_moe_down_width(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x48xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op hidden width D mismatch: dimension 1 of 'down_latent' is 48 but dimension 1 of 'x' is 64}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x48xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_up_width(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<48x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op hidden width D mismatch: dimension 0 of 'up_latent' is 48 but dimension 1 of 'x' is 64}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<48x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_up_latent_width(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x16xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op latent width W mismatch: dimension 1 of 'up_latent' is 16 but dimension 0 of 'down_latent' is 32}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x16xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_norm_width(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<64xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op latent width W mismatch: dimension 0 of 'norm' is 64 but dimension 0 of 'down_latent' is 32}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<64xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_norm_rank(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<1x32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op 'norm' must have rank 1 ([W]), got 'tensor<1x32xf32>'}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<1x32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_microscaled_latent(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xf4E2M1FN>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op latent projections must be bf16, f16 or f32}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xf4E2M1FN>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_expert_width(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x64xbf16>, %ub: tensor<16x48x64xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op dimension 2 of 'gate_proj' (expert input width) must be 32, got 64}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x64xbf16>, tensor<16x48x64xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_expert_output_width(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x64x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op dimension 1 of 'down_proj' (expert output width) must be 32, got 64}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x64x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_situ_no_betas(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op situ activation needs both 'beta' and 'linear_beta'}}
  %l = kimi.latent_moe situ %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_silu_with_betas(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op silu activation takes no 'beta' or 'linear_beta'}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_mxfp4_no_scales(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %g: tensor<16x64x32xf4E2M1FN>, %u: tensor<16x64x32xf4E2M1FN>, %d: tensor<16x32x64xf4E2M1FN>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op microscaled experts ('f4E2M1FN') need 3 scale tensors, got 0}}
  %l = kimi.latent_moe situ %x, %w, %i down %dl experts(%g, %u, %d) norm %n up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x64x32xf4E2M1FN>, tensor<16x64x32xf4E2M1FN>, tensor<16x32x64xf4E2M1FN>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_gate_scale_rows(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %g: tensor<16x64x32xf4E2M1FN>, %u: tensor<16x64x32xf4E2M1FN>, %d: tensor<16x32x64xf4E2M1FN>, %gs: tensor<16x32x1xf8E8M0FNU>, %us: tensor<16x64x1xf8E8M0FNU>, %ds: tensor<16x32x2xf8E8M0FNU>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op scale block mismatch: dimension 1 of 'scales[0]' is 32 but dimension 1 of 'gate_proj' is 64}}
  %l = kimi.latent_moe situ %x, %w, %i down %dl experts(%g, %u, %d) scales(%gs, %us, %ds) norm %n up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x64x32xf4E2M1FN>, tensor<16x64x32xf4E2M1FN>, tensor<16x32x64xf4E2M1FN>, tensor<16x32x1xf8E8M0FNU>, tensor<16x64x1xf8E8M0FNU>, tensor<16x32x2xf8E8M0FNU>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_out_shape(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op shape mismatch: dimension 1 of 'out' is 32 but dimension 1 of 'x' is 64}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @latent_moe_weights_tokens(%x: tensor<16x64xf32>, %w: tensor<8x4xf32>, %i: tensor<8x4xi32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op token dimension mismatch: dimension 0 of 'weights' is 8 but dimension 0 of 'x' is 16}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<8x4xf32>, tensor<8x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

// ODS: indices are integers.
func.func @latent_moe_float_indices(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xf32>, %dl: tensor<32x64xbf16>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{'kimi.latent_moe' op operand #2 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<16x4xf32>'}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xf32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// kimi.quantile_balance
//===----------------------------------------------------------------------===//

// -----

func.func @quantile_balance_margins_rank(%m: tensor<256xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op 'margins' must have rank 2 ([N, E]), got 'tensor<256xf32>'}}
  %nb = kimi.quantile_balance %m, %b top_k(4) : tensor<256xf32>, tensor<16xf32> -> tensor<16xf32>
  return
}

// -----

func.func @quantile_balance_bias_rank(%m: tensor<16x16xf32>, %b: tensor<1x16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op 'bias' must have rank 1 ([E]), got 'tensor<1x16xf32>'}}
  %nb = kimi.quantile_balance %m, %b top_k(4) : tensor<16x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
  return
}

// -----

func.func @quantile_balance_bias_experts(%m: tensor<16x16xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op expert count E mismatch: dimension 0 of 'bias' is 32 but dimension 1 of 'margins' is 16}}
  %nb = kimi.quantile_balance %m, %b top_k(4) : tensor<16x16xf32>, tensor<32xf32> -> tensor<32xf32>
  return
}

// -----

func.func @quantile_balance_new_bias_shape(%m: tensor<16x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op shape mismatch: dimension 0 of 'new_bias' is 8 but dimension 0 of 'bias' is 16}}
  %nb = kimi.quantile_balance %m, %b top_k(4) : tensor<16x16xf32>, tensor<16xf32> -> tensor<8xf32>
  return
}

// -----

func.func @quantile_balance_top_k_not_below_e(%m: tensor<16x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op top_k = 16 must be below the expert count 16}}
  %nb = kimi.quantile_balance %m, %b top_k(16) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return
}

// -----

func.func @quantile_balance_one_bin(%m: tensor<16x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op histogram needs at least 2 bins, got 1}}
  %nb = kimi.quantile_balance %m, %b top_k(4) bins(1) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return
}

// -----

func.func @quantile_balance_negative_bins(%m: tensor<16x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op histogram needs at least 2 bins, got -8}}
  %nb = kimi.quantile_balance %m, %b top_k(4) bins(-8) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return
}

// -----

// ODS: top_k is positive.
func.func @quantile_balance_zero_top_k(%m: tensor<16x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op attribute 'top_k' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %nb = kimi.quantile_balance %m, %b top_k(0) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return
}

// -----

// ODS: margins are f32.
func.func @quantile_balance_bf16_margins(%m: tensor<16x16xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'kimi.quantile_balance' op operand #0 must be ranked tensor of 32-bit float values, but got 'tensor<16x16xbf16>'}}
  %nb = kimi.quantile_balance %m, %b top_k(4) : tensor<16x16xbf16>, tensor<16xf32> -> tensor<16xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// kimi.sigmoid
//===----------------------------------------------------------------------===//

func.func @sigmoid_shape(%x: tensor<8x96xf32>) {
  // expected-error @+1 {{shape mismatch: dimension 1 of 'out' is 64 but dimension 1 of 'x' is 96}}
  %0 = kimi.sigmoid %x : tensor<8x96xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @sigmoid_rank(%x: tensor<8x96xf32>) {
  // expected-error @+1 {{'out' and 'x' must have the same shape}}
  %0 = kimi.sigmoid %x : tensor<8x96xf32> -> tensor<768xf32>
  return
}

// -----

func.func @sigmoid_int(%x: tensor<8x96xi32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values}}
  %0 = kimi.sigmoid %x : tensor<8x96xi32> -> tensor<8x96xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Regressions found by reviewing the verifiers
//===----------------------------------------------------------------------===//

// A rank-0 expert weight used to crash the top-k check of routed_experts.
func.func @experts_rank0(%x: tensor<16x32xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %g: tensor<bf16>, %u: tensor<bf16>, %d: tensor<bf16>) {
  // expected-error @+1 {{'gate_proj' must have rank 3 ([E, I, W]), got 'tensor<bf16>'}}
  %r = kimi.routed_experts silu %x, %w, %i experts(%g, %u, %d) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<bf16>, tensor<bf16>, tensor<bf16>) -> tensor<16x32xf32>
  return
}

// -----

func.func @latent_moe_topk(%x: tensor<16x64xf32>, %w: tensor<16x32xf32>, %i: tensor<16x32xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %dl: tensor<32x64xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{routes each token to 32 experts but only 16 exist}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul : (tensor<16x64xf32>, tensor<16x32xf32>, tensor<16x32xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

func.func @latent_moe_eps(%x: tensor<16x64xf32>, %w: tensor<16x4xf32>, %i: tensor<16x4xi32>, %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>, %dl: tensor<32x64xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  // expected-error @+1 {{attribute 'eps' failed to satisfy constraint: 64-bit float attribute whose value is positive}}
  %l = kimi.latent_moe silu %x, %w, %i down %dl experts(%gb, %ub, %db) norm %n up %ul {eps = 0.0 : f64} : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  return
}

// -----

// kv_b_proj has no scale operand, so it cannot be microscaled.
func.func @mla_microscaled_kvb(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>, %kvb: tensor<128x32xf4E2M1FN>) {
  // expected-error @+1 {{operand #3 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values}}
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.07) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xf4E2M1FN>) -> tensor<1x8x2x32xbf16>
  return
}

// -----

func.func @mla_decode_microscaled_kvb(%qd: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>, %kvb: tensor<128x32xf8E4M3FN>) {
  // expected-error @+1 {{operand #2 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values}}
  %d = kimi.mla_decode %qd, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xf8E4M3FN>) -> tensor<4x1x2x32xf32>
  return
}

// -----

func.func @quantile_counts_bins(%m: tensor<16x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{dimension 1 of 'counts' (bins) must be 64, got 32}}
  %c = kimi.quantile_counts %m, %b bins(64) : tensor<16x8xf32>, tensor<8xf32> -> tensor<8x32xi32>
  return
}

// -----

func.func @quantile_update_top_k(%c: tensor<8x64xi32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{top_k = 8 must be below the expert count 8}}
  %nb = kimi.quantile_update %c, %b rows(64) top_k(8) : tensor<8x64xi32>, tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @kda_transition_shape(%k: tensor<1x8x2x4xf32>, %g: tensor<1x8x2x4xf32>, %beta: tensor<1x8x2xf32>) {
  // expected-error @+1 {{key dim dk}}
  %t = kimi.kda_transition %k, %g, %beta : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2xf32> -> tensor<1x2x4x8xf32>
  return
}

// -----

kimi.weight @w : tensor<8x3xf32>
func.func @weight_ref_parts() {
  // expected-error @+1 {{result type 'tensor<3x3xf32>' in parts does not cover the declared type 'tensor<8x3xf32>'}}
  %w = kimi.weight_ref @w {parts = array<i64: 4, 1>} : tensor<3x3xf32>
  return
}

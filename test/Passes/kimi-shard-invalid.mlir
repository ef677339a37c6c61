// kimi-shard refuses layouts the grid does not divide, naming the op or
// weight and the dimension.
// RUN: kimi-opt %s -split-input-file -verify-diagnostics --pass-pipeline="builtin.module(kimi-shard{grid=4 strategy=tp})"

func.func @kda_heads(%q: tensor<1x8x6x16xf32>, %g: tensor<1x8x6x16xf32>, %b: tensor<1x8x6xf32>) -> tensor<1x8x6x16xf32> {
  // expected-error @+1 {{'kimi.kda' op strategy tp splits 6 heads (dim 2 of q) over 4 devices: not divisible}}
  %o, %s = kimi.kda %q, %q, %q, %g, %b scale(0.25) : (tensor<1x8x6x16xf32>, tensor<1x8x6x16xf32>, tensor<1x8x6x16xf32>, tensor<1x8x6x16xf32>, tensor<1x8x6xf32>) -> (tensor<1x8x6x16xf32>, tensor<1x6x16x16xf32>)
  return %o : tensor<1x8x6x16xf32>
}

// -----

kimi.weight @model.layers.0.mlp.gate_proj.weight : tensor<10x16xf32>
func.func @prefill(%x: tensor<1x4x16xf32>) -> tensor<1x4x10xf32> {
  // expected-error @+1 {{'kimi.weight_ref' op strategy tp splits dim 0 of @"model.layers.0.mlp.gate_proj.weight" ('tensor<10x16xf32>') over 4 devices: not divisible}}
  %g = kimi.weight_ref @model.layers.0.mlp.gate_proj.weight : tensor<10x16xf32>
  %a = kimi.linear %x, %g : tensor<1x4x16xf32>, tensor<10x16xf32> -> tensor<1x4x10xf32>
  return %a : tensor<1x4x10xf32>
}


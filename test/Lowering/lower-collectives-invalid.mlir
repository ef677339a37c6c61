// RUN: kimi-opt %s -split-input-file --kimi-lower-collectives -verify-diagnostics

shard.grid @grid(shape = 2x4)
func.func @descending_axes(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'shard.all_reduce' op lists grid axes out of ascending order}}
  %0 = shard.all_reduce %a on @grid grid_axes = [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

shard.grid @grid(shape = 2x2x2x2x2)
func.func @five_axes(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'shard.all_reduce' op on a grid of 5 axes; the runtime supports at most 4}}
  %0 = shard.all_reduce %a on @grid grid_axes = [4] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

shard.grid @grid(shape = 4)
func.func @bf16(%a: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  // expected-error @+1 {{'shard.all_reduce' op on 'bf16' elements: the runtime communicates f32, i32 and i64}}
  %0 = shard.all_reduce %a on @grid grid_axes = [0] : tensor<4x8xbf16> -> tensor<4x8xbf16>
  return %0 : tensor<4x8xbf16>
}

// -----

shard.grid @grid(shape = 4)
func.func @min(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'shard.all_reduce' op reduction 'min': the runtime reduces by sum or max}}
  %0 = shard.all_reduce %a on @grid grid_axes = [0] reduction = min : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

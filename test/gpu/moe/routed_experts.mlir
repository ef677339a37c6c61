// Routed experts alone (kimi-gpu-routed-experts-kernels' two kernels), as
// GPU entries of a kernel library: GpuKernelTest.cpp runs each on fresh
// random inputs against float64.
//
// mxfp4_decode: one token, top 4 of 8 MXFP4 experts of 64 x 2048, SiTU as
// K3 has it; 64 scale blocks a gate/up row, so the test's scales reach from
// the smallest E8M0 to the largest.
func.func @mxfp4_decode(%x: tensor<1x2048xf32>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                        %g: tensor<8x64x2048xf4E2M1FN>, %u: tensor<8x64x2048xf4E2M1FN>, %d: tensor<8x2048x64xf4E2M1FN>,
                        %gs: tensor<8x64x64xf8E8M0FNU>, %us: tensor<8x64x64xf8E8M0FNU>, %ds: tensor<8x2048x2xf8E8M0FNU>) -> tensor<1x2048xf32> {
  %r = kimi.routed_experts situ %x, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<1x2048xf32>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<8x64x2048xf4E2M1FN>, tensor<8x64x2048xf4E2M1FN>, tensor<8x2048x64xf4E2M1FN>, tensor<8x64x64xf8E8M0FNU>, tensor<8x64x64xf8E8M0FNU>, tensor<8x2048x2xf8E8M0FNU>) -> tensor<1x2048xf32>
  return %r : tensor<1x2048xf32>
}

// mxfp4_tokens: three tokens, top 6 (two slots a warp in down), SiLU, an
// inner size of 96 (a masked chunk of 256).
func.func @mxfp4_tokens(%x: tensor<3x2048xf32>, %w: tensor<3x6xf32>, %i: tensor<3x6xi32>,
                        %g: tensor<8x96x2048xf4E2M1FN>, %u: tensor<8x96x2048xf4E2M1FN>, %d: tensor<8x2048x96xf4E2M1FN>,
                        %gs: tensor<8x96x64xf8E8M0FNU>, %us: tensor<8x96x64xf8E8M0FNU>, %ds: tensor<8x2048x3xf8E8M0FNU>) -> tensor<3x2048xf32> {
  %r = kimi.routed_experts silu %x, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) : (tensor<3x2048xf32>, tensor<3x6xf32>, tensor<3x6xi32>, tensor<8x96x2048xf4E2M1FN>, tensor<8x96x2048xf4E2M1FN>, tensor<8x2048x96xf4E2M1FN>, tensor<8x96x64xf8E8M0FNU>, tensor<8x96x64xf8E8M0FNU>, tensor<8x2048x3xf8E8M0FNU>) -> tensor<3x2048xf32>
  return %r : tensor<3x2048xf32>
}

// bf16_decode: the dense release type, same sizes as mxfp4_decode.
func.func @bf16_decode(%x: tensor<1x2048xf32>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                       %g: tensor<8x64x2048xbf16>, %u: tensor<8x64x2048xbf16>, %d: tensor<8x2048x64xbf16>) -> tensor<1x2048xf32> {
  %r = kimi.routed_experts situ %x, %w, %i experts(%g, %u, %d) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<1x2048xf32>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<8x64x2048xbf16>, tensor<8x64x2048xbf16>, tensor<8x2048x64xbf16>) -> tensor<1x2048xf32>
  return %r : tensor<1x2048xf32>
}

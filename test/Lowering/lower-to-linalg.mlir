// RUN: kimi-opt %s -split-input-file --kimi-lower-to-linalg | FileCheck %s
// RUN: kimi-opt %s -split-input-file --kimi-lower-to-linalg | kimi-opt -split-input-file -o /dev/null

// linear: one contraction over the leading dims, n and k, weight in [N, K]
// layout, bf16 extended to f32 inside the body.
// CHECK-DAG: #[[X:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[W:.*]] = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK-LABEL: func.func @linear
// CHECK: linalg.fill
// CHECK: linalg.generic {indexing_maps = [#[[X]], #[[W]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK-NOT: kimi.
func.func @linear(%x: tensor<2x8x64xf32>, %w: tensor<128x64xbf16>) -> tensor<2x8x128xf32> {
  %y = kimi.linear %x, %w : tensor<2x8x64xf32>, tensor<128x64xbf16> -> tensor<2x8x128xf32>
  return %y : tensor<2x8x128xf32>
}

// -----

// rms_norm: a sum-of-squares reduction, rsqrt(mean + eps), then the scaled
// product; l2_norm uses the sum, not the mean.
// CHECK-LABEL: func.func @norms
// CHECK-DAG: arith.constant 6.400000e+01 : f32
// CHECK-DAG: arith.constant 9.99999974E-6 : f32
// CHECK: iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: math.rsqrt
// CHECK: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK-NOT: arith.constant 1.600000e+01
// CHECK: math.rsqrt
// CHECK-NOT: kimi.
func.func @norms(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %h: tensor<2x8x4x16xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x4x16xf32>) {
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x8x64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
  %1 = kimi.l2_norm %h eps(1.0e-6) : tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return %0, %1 : tensor<2x8x64xf32>, tensor<2x8x4x16xf32>
}

// -----

// short_conv: state ++ x, a reduction over the taps at t + j, SiLU, and the
// last K-1 inputs as the final state.
// CHECK-DAG: #[[EXT:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 + d3, d2)>
// CHECK-DAG: #[[TAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d2, 0, d3)>
// CHECK-LABEL: func.func @conv
// CHECK: %[[EXTV:.*]] = tensor.concat dim(1) %{{.*}}, %{{.*}} : (tensor<1x3x32xf32>, tensor<1x8x32xf32>) -> tensor<1x11x32xf32>
// CHECK: linalg.generic {indexing_maps = [#[[EXT]], #[[TAP]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK: tensor.extract_slice %[[EXTV]][0, 8, 0] [1, 3, 32] [1, 1, 1]
func.func @conv(%x: tensor<1x8x32xf32>, %w: tensor<32x1x4xf32>, %s: tensor<1x3x32xf32>) -> (tensor<1x8x32xf32>, tensor<1x3x32xf32>) {
  %y, %f = kimi.short_conv silu %x, %w state %s : tensor<1x8x32xf32>, tensor<32x1x4xf32>, tensor<1x3x32xf32> -> tensor<1x8x32xf32>, tensor<1x3x32xf32>
  return %y, %f : tensor<1x8x32xf32>, tensor<1x3x32xf32>
}

// -----

// The softplus gate is lowered in its overflow-free form.
// CHECK-LABEL: func.func @softplus_gate
// CHECK: math.absf
// CHECK: math.log1p
// CHECK-LABEL: func.func @bounded_gate
// CHECK: arith.constant -5.000000e+00 : f32
// CHECK-NOT: math.log1p
func.func @softplus_gate(%z: tensor<1x4x2x8xf32>, %a: tensor<2xf32>, %dt: tensor<2x8xf32>) -> tensor<1x4x2x8xf32> {
  %g = kimi.kda_gate softplus %z, %a, %dt : tensor<1x4x2x8xf32>, tensor<2xf32>, tensor<2x8xf32> -> tensor<1x4x2x8xf32>
  return %g : tensor<1x4x2x8xf32>
}
func.func @bounded_gate(%z: tensor<1x4x2x8xf32>, %a: tensor<2xf32>, %dt: tensor<2x8xf32>) -> tensor<1x4x2x8xf32> {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x4x2x8xf32>, tensor<2xf32>, tensor<2x8xf32> -> tensor<1x4x2x8xf32>
  return %g : tensor<1x4x2x8xf32>
}

// -----

// mla_decode: the cache splits into latent and shared key; the causal
// limit is t + S - T with a dynamic S. The mask is applied where the scores
// are read (the row max, then the exponentials), and the exponentials are
// mixed unnormalised: the last generic divides by their row sum.
// CHECK-LABEL: func.func @mla_decode
// CHECK-DAG: tensor.extract_slice %{{.*}}[0, 0, 0] [4, %{{.*}}, 32] [1, 1, 1] : tensor<4x?x48xf32> to tensor<4x?x32xf32>
// CHECK-DAG: tensor.extract_slice %{{.*}}[0, 0, 32] [4, %{{.*}}, 16] [1, 1, 1] : tensor<4x?x48xf32> to tensor<4x?x16xf32>
// CHECK: arith.subi
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK: arith.cmpi ule
// CHECK: arith.select
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel"]
// CHECK: arith.cmpi ule
// CHECK: arith.select
// CHECK: math.exp
// CHECK-NOT: arith.divf
// CHECK: linalg.generic {{.*}}ins(%{{.*}}, %{{.*}} : tensor<4x1x2x32xf32>, tensor<4x2x1xf32>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.divf
// CHECK-NOT: kimi.
func.func @mla_decode(%q: tensor<4x1x2x48xf32>, %cache: tensor<4x?x48xf32>, %kvb: tensor<128x32xf32>) -> tensor<4x1x2x32xf32> {
  %d = kimi.mla_decode %q, %cache, %kvb scale(0.07) : (tensor<4x1x2x48xf32>, tensor<4x?x48xf32>, tensor<128x32xf32>) -> tensor<4x1x2x32xf32>
  return %d : tensor<4x1x2x32xf32>
}

// -----

// mla_decode with lengths: the limit is t + lengths[b] - T, read in the loop
// (the lengths are an input of the row max and of the exponentials, indexed
// by the batch), compared signed; no host read of the lengths.
// CHECK-LABEL: func.func @mla_decode_lengths
// CHECK-NOT: tensor.extract %
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[B:.*]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<4x2x1x?xf32>, tensor<4xi32>)
// CHECK: arith.index_cast
// CHECK: arith.cmpi sle
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}}ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<4x2x1x?xf32>, tensor<4x2x1xf32>, tensor<4xi32>)
// CHECK: arith.cmpi sle
// CHECK: math.exp
// CHECK-NOT: kimi.
func.func @mla_decode_lengths(%q: tensor<4x1x2x48xf32>, %cache: tensor<4x?x48xf32>, %kvb: tensor<128x32xf32>, %len: tensor<4xi32>) -> tensor<4x1x2x32xf32> {
  %d = kimi.mla_decode %q, %cache, %kvb lengths %len scale(0.07) : (tensor<4x1x2x48xf32>, tensor<4x?x48xf32>, tensor<128x32xf32>, tensor<4xi32>) -> tensor<4x1x2x32xf32>
  return %d : tensor<4x1x2x32xf32>
}

// -----

// cache_insert: one pass over [B, S + T, W]; the new rows are read where
// lengths[b] <= p < lengths[b] + T, the cache where p < S, guarded (an empty
// cache is never read), zero elsewhere.
// CHECK-LABEL: func.func @cache_insert
// CHECK: %[[E:.*]] = tensor.empty(%{{.*}}) : tensor<1x?x48xbf16>
// CHECK: linalg.generic {{.*}}ins(%{{.*}} : tensor<1xi32>) outs(%[[E]] : tensor<1x?x48xbf16>)
// CHECK: arith.cmpi sge
// CHECK: arith.cmpi slt
// CHECK: scf.if
// CHECK: tensor.extract %{{.*}} : tensor<1x2x48xbf16>
// CHECK: scf.if
// CHECK: tensor.extract %{{.*}} : tensor<1x?x48xbf16>
// CHECK-NOT: kimi.
func.func @cache_insert(%cache: tensor<1x?x48xbf16>, %rows: tensor<1x2x48xbf16>, %len: tensor<1xi32>) -> tensor<1x?x48xbf16> {
  %c = kimi.cache_insert %rows into %cache lengths %len : (tensor<1x?x48xbf16>, tensor<1x2x48xbf16>, tensor<1xi32>) -> tensor<1x?x48xbf16>
  return %c : tensor<1x?x48xbf16>
}

// -----

// router: contraction + sigmoid, then top-k by rank: every expert counts
// the experts ahead of it (greater score, or equal and lower index) and the
// rank-j expert fills slot j. No host loop reads tensor elements.
// CHECK-LABEL: func.func @router
// CHECK-NOT: scf.for
// CHECK-NOT: tensor.extract %
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]{{.*}} outs(%{{.*}} : tensor<8x16xi32>)
// CHECK: arith.cmpf ogt
// CHECK: arith.cmpf oeq
// CHECK: arith.cmpi ult
// CHECK: linalg.generic {{.*}} outs(%{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<8x4xi32>)
// CHECK: arith.cmpi eq
// CHECK: arith.select
// CHECK-NOT: kimi.
func.func @router(%x: tensor<1x8x64xf32>, %w: tensor<16x64xf32>, %b: tensor<16xf32>) -> (tensor<1x8x4xf32>, tensor<1x8x4xi32>) {
  %w0, %i0 = kimi.router %x, %w, %b top_k(4) renormalize : tensor<1x8x64xf32>, tensor<16x64xf32>, tensor<16xf32> -> tensor<1x8x4xf32>, tensor<1x8x4xi32>
  return %w0, %i0 : tensor<1x8x4xf32>, tensor<1x8x4xi32>
}

// -----

// latent_moe decomposes into linear, routed experts (each (token, slot)
// gathers its expert's rows inside the contraction), rms_norm and linear.
// CHECK-LABEL: func.func @latent_moe
// CHECK-NOT: scf.for
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}} outs(%{{.*}}, %{{.*}} : tensor<8x4x64xf32>, tensor<8x4x64xf32>)
// CHECK: tensor.extract %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : tensor<16x64x32xf32>
// CHECK: math.tanh
// CHECK: tensor.extract %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : tensor<16x32x64xf32>
// CHECK: math.rsqrt
// CHECK-NOT: kimi.
func.func @latent_moe(%x: tensor<8x64xf32>, %w: tensor<8x4xf32>, %i: tensor<8x4xi32>, %g: tensor<16x64x32xf32>, %u: tensor<16x64x32xf32>, %d: tensor<16x32x64xf32>, %dl: tensor<32x64xf32>, %n: tensor<32xf32>, %ul: tensor<64x32xf32>) -> tensor<8x64xf32> {
  %l = kimi.latent_moe situ %x, %w, %i down %dl experts(%g, %u, %d) norm %n up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<8x64xf32>, tensor<8x4xf32>, tensor<8x4xi32>, tensor<32x64xf32>, tensor<16x64x32xf32>, tensor<16x64x32xf32>, tensor<16x32x64xf32>, tensor<32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  return %l : tensor<8x64xf32>
}

// Round trip of every kimi op, through the custom and the generic form.
// RUN: kimi-opt %s -split-input-file | kimi-opt -split-input-file | FileCheck %s
// RUN: kimi-opt %s -split-input-file --mlir-print-op-generic | kimi-opt -split-input-file | FileCheck %s

// CHECK: kimi.weight @model.embed_tokens.weight : tensor<512x64xbf16>
// CHECK: kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<16x32x64xf4E2M1FN>
// CHECK-LABEL: func.func @weights
// CHECK: kimi.weight_ref @model.embed_tokens.weight : tensor<512x64xbf16>
// CHECK: kimi.embed %{{.*}}[%{{.*}}] : tensor<512x64xbf16>, tensor<2x8xi32> -> tensor<2x8x64xf32>
kimi.weight @model.embed_tokens.weight : tensor<512x64xbf16>
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<16x32x64xf4E2M1FN>
func.func @weights(%ids: tensor<2x8xi32>) -> tensor<2x8x64xf32> {
  %t = kimi.weight_ref @model.embed_tokens.weight : tensor<512x64xbf16>
  %e = kimi.embed %t[%ids] : tensor<512x64xbf16>, tensor<2x8xi32> -> tensor<2x8x64xf32>
  return %e : tensor<2x8x64xf32>
}

// -----

// CHECK-LABEL: func.func @linear
// CHECK: kimi.linear %{{.*}}, %{{.*}} : tensor<2x8x64xf32>, tensor<128x64xbf16> -> tensor<2x8x128xf32>
// CHECK: kimi.linear %{{.*}}, %{{.*}} scale %{{.*}} : tensor<?x64xf32>, tensor<128x64xf4E2M1FN>, tensor<128x2xf8E8M0FNU> -> tensor<?x128xf32>
func.func @linear(%x: tensor<2x8x64xf32>, %w: tensor<128x64xbf16>,
                  %xq: tensor<?x64xf32>, %wq: tensor<128x64xf4E2M1FN>,
                  %s: tensor<128x2xf8E8M0FNU>) -> (tensor<2x8x128xf32>, tensor<?x128xf32>) {
  %y = kimi.linear %x, %w : tensor<2x8x64xf32>, tensor<128x64xbf16> -> tensor<2x8x128xf32>
  %yq = kimi.linear %xq, %wq scale %s : tensor<?x64xf32>, tensor<128x64xf4E2M1FN>, tensor<128x2xf8E8M0FNU> -> tensor<?x128xf32>
  return %y, %yq : tensor<2x8x128xf32>, tensor<?x128xf32>
}

// -----

// CHECK-LABEL: func.func @norms
// CHECK: kimi.rms_norm %{{.*}}, %{{.*}} eps(1.000000e-05) : tensor<2x8x64xf32>, tensor<64xbf16> -> tensor<2x8x64xf32>
// CHECK: kimi.l2_norm %{{.*}} eps(9.9999999999999995E-7) : tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
// CHECK: kimi.gated_rms_norm %{{.*}}, %{{.*}}, %{{.*}} eps(1.000000e-05) : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<16xf32> -> tensor<2x8x4x16xbf16>
func.func @norms(%x: tensor<2x8x64xf32>, %w: tensor<64xbf16>, %h: tensor<2x8x4x16xf32>,
                 %g: tensor<2x8x4x16xf32>, %ow: tensor<16xf32>) {
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x8x64xf32>, tensor<64xbf16> -> tensor<2x8x64xf32>
  %1 = kimi.l2_norm %h eps(1.0e-6) : tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  %2 = kimi.gated_rms_norm %1, %g, %ow eps(1.0e-5) : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<16xf32> -> tensor<2x8x4x16xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @situ
// CHECK: kimi.sigmoid %{{.*}} : tensor<8x96xf32> -> tensor<8x96xf32>
// CHECK: kimi.situ_glu %{{.*}}, %{{.*}} beta(4.000000e+00) linear_beta(2.500000e+01) : tensor<8x96xf32>, tensor<8x96xf32> -> tensor<8x96xbf16>
func.func @situ(%g: tensor<8x96xf32>, %u: tensor<8x96xf32>) -> tensor<8x96xbf16> {
  %s = kimi.sigmoid %g : tensor<8x96xf32> -> tensor<8x96xf32>
  %0 = kimi.situ_glu %g, %u beta(4.0) linear_beta(25.0) : tensor<8x96xf32>, tensor<8x96xf32> -> tensor<8x96xbf16>
  return %0 : tensor<8x96xbf16>
}

// -----

// CHECK-LABEL: func.func @conv
// CHECK: kimi.short_conv silu %{{.*}}, %{{.*}} : tensor<2x8x64xbf16>, tensor<64x1x4xf32> -> tensor<2x8x64xf32>, tensor<2x3x64xf32>
// CHECK: kimi.short_conv %{{.*}}, %{{.*}} state %{{.*}} : tensor<2x1x64xbf16>, tensor<64x1x4xf32>, tensor<2x3x64xf32> -> tensor<2x1x64xf32>, tensor<2x3x64xf32>
func.func @conv(%x: tensor<2x8x64xbf16>, %w: tensor<64x1x4xf32>, %x1: tensor<2x1x64xbf16>) {
  %y, %s = kimi.short_conv silu %x, %w : tensor<2x8x64xbf16>, tensor<64x1x4xf32> -> tensor<2x8x64xf32>, tensor<2x3x64xf32>
  %y1, %s1 = kimi.short_conv %x1, %w state %s : tensor<2x1x64xbf16>, tensor<64x1x4xf32>, tensor<2x3x64xf32> -> tensor<2x1x64xf32>, tensor<2x3x64xf32>
  return
}

// -----

// CHECK-LABEL: func.func @kda
// CHECK: kimi.kda_gate lower_bound lower = -5.000000e+00 %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x?x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x?x4x64xf32>
// CHECK: kimi.kda_gate softplus %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x?x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x?x4x64xf32>
// CHECK: kimi.kda %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale(1.250000e-01) : (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x32xbf16>, tensor<1x?x4x64xf32>, tensor<1x?x4xbf16>) -> (tensor<1x?x4x32xbf16>, tensor<1x4x64x32xf32>)
// CHECK: kimi.kda {{.*}} initial_state %{{.*}} scale(1.250000e-01) {decay = #kimi.decay<lower = -5.000000e+00, chunk = 16, diag = dense>}
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<chunk = 64, diag = pairwise>}
func.func @kda(%q: tensor<1x?x4x64xbf16>, %k: tensor<1x?x4x64xbf16>, %v: tensor<1x?x4x32xbf16>,
               %z: tensor<1x?x4x64xbf16>, %b: tensor<1x?x4xbf16>, %a: tensor<4xf32>,
               %dt: tensor<4x64xf32>, %s0: tensor<1x4x64x32xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x?x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x?x4x64xf32>
  %g2 = kimi.kda_gate softplus %z, %a, %dt : tensor<1x?x4x64xbf16>, tensor<4xf32>, tensor<4x64xf32> -> tensor<1x?x4x64xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b scale(0.125) : (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x32xbf16>, tensor<1x?x4x64xf32>, tensor<1x?x4xbf16>) -> (tensor<1x?x4x32xbf16>, tensor<1x4x64x32xf32>)
  %o2, %s2 = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.125) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x32xbf16>, tensor<1x?x4x64xf32>, tensor<1x?x4xbf16>, tensor<1x4x64x32xf32>) -> (tensor<1x?x4x32xbf16>, tensor<1x4x64x32xf32>)
  %o3, %s3 = kimi.kda %q, %k, %v, %g2, %b scale(0.125) {decay = #kimi.decay<chunk = 64, diag = pairwise>} : (tensor<1x?x4x64xbf16>, tensor<1x?x4x64xbf16>, tensor<1x?x4x32xbf16>, tensor<1x?x4x64xf32>, tensor<1x?x4xbf16>) -> (tensor<1x?x4x32xf32>, tensor<1x4x64x32xf32>)
  return
}

// -----

// CHECK-LABEL: func.func @mla
// CHECK: kimi.mla %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} scale(0.072168783648703216) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xbf16>, tensor<1x8x2x32xbf16>) -> tensor<1x8x2x32xbf16>
// CHECK: kimi.mla_decode %{{.*}}, %{{.*}}, %{{.*}} scale(0.072168783648703216) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x32xf32>
func.func @mla(%q: tensor<1x8x2x48xbf16>, %ckv: tensor<1x8x32xbf16>, %kpe: tensor<1x8x16xbf16>,
               %kvb: tensor<128x32xbf16>, %gate: tensor<1x8x2x32xbf16>,
               %qd: tensor<4x1x2x48xbf16>, %cache: tensor<4x?x48xbf16>) {
  %o = kimi.mla %q, %ckv, %kpe, %kvb gate %gate scale(0.072168783648703216) : (tensor<1x8x2x48xbf16>, tensor<1x8x32xbf16>, tensor<1x8x16xbf16>, tensor<128x32xbf16>, tensor<1x8x2x32xbf16>) -> tensor<1x8x2x32xbf16>
  %d = kimi.mla_decode %qd, %cache, %kvb scale(0.072168783648703216) : (tensor<4x1x2x48xbf16>, tensor<4x?x48xbf16>, tensor<128x32xbf16>) -> tensor<4x1x2x32xf32>
  return
}

// -----

// CHECK-LABEL: func.func @padded_cache
// CHECK: kimi.cache_insert %{{.*}} into %{{.*}} lengths %{{.*}} : (tensor<4x16x48xbf16>, tensor<4x1x48xbf16>, tensor<4xi32>) -> tensor<4x17x48xbf16>
// CHECK: kimi.mla_decode %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} lengths %{{.*}} scale(0.072168783648703216) : (tensor<4x1x2x48xbf16>, tensor<4x17x48xbf16>, tensor<128x32xbf16>, tensor<4x1x2x32xbf16>, tensor<4xi32>) -> tensor<4x1x2x32xbf16>
func.func @padded_cache(%q: tensor<4x1x2x48xbf16>, %cache: tensor<4x16x48xbf16>, %row: tensor<4x1x48xbf16>,
                        %len: tensor<4xi32>, %valid: tensor<4xi32>, %kvb: tensor<128x32xbf16>, %gate: tensor<4x1x2x32xbf16>) {
  %c = kimi.cache_insert %row into %cache lengths %len : (tensor<4x16x48xbf16>, tensor<4x1x48xbf16>, tensor<4xi32>) -> tensor<4x17x48xbf16>
  %d = kimi.mla_decode %q, %c, %kvb gate %gate lengths %valid scale(0.072168783648703216) : (tensor<4x1x2x48xbf16>, tensor<4x17x48xbf16>, tensor<128x32xbf16>, tensor<4x1x2x32xbf16>, tensor<4xi32>) -> tensor<4x1x2x32xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @attn_res
// CHECK: kimi.attn_res [%{{.*}}, %{{.*}}, %{{.*}}] query %{{.*}} norm %{{.*}} eps(1.000000e-05) : [tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>], tensor<1x64xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
func.func @attn_res(%a: tensor<2x8x64xf32>, %b: tensor<2x8x64xf32>, %c: tensor<2x8x64xf32>,
                    %w: tensor<1x64xbf16>, %n: tensor<64xbf16>) -> tensor<2x8x64xf32> {
  %0 = kimi.attn_res [%a, %b, %c] query %w norm %n eps(1.0e-5) : [tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>], tensor<1x64xbf16>, tensor<64xbf16> -> tensor<2x8x64xf32>
  return %0 : tensor<2x8x64xf32>
}

// -----

// CHECK-LABEL: func.func @moe
// CHECK: kimi.router %{{.*}}, %{{.*}}, %{{.*}} top_k(4) renormalize : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>
// CHECK: kimi.router %{{.*}}, %{{.*}}, %{{.*}} top_k(4) {scaling = 2.446000e+00 : f64} : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x16xf32>
// CHECK: kimi.routed_experts situ %{{.*}}, %{{.*}}, %{{.*}} experts(%{{.*}}, %{{.*}}, %{{.*}}) scales(%{{.*}}, %{{.*}}, %{{.*}}) {beta = 4.000000e+00 : f64, linear_beta = 2.500000e+01 : f64}
// CHECK: kimi.routed_experts silu %{{.*}}, %{{.*}}, %{{.*}} experts(%{{.*}}, %{{.*}}, %{{.*}}) :
// CHECK: kimi.latent_moe situ %{{.*}}, %{{.*}}, %{{.*}} down %{{.*}} experts(%{{.*}}, %{{.*}}, %{{.*}}) scales(%{{.*}}, %{{.*}}, %{{.*}}) norm %{{.*}} up %{{.*}} {beta = 4.000000e+00 : f64, linear_beta = 2.500000e+01 : f64}
// CHECK: kimi.quantile_balance %{{.*}}, %{{.*}} top_k(4) bins(1000) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
// CHECK: kimi.quantile_balance %{{.*}}, %{{.*}} top_k(4) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
func.func @moe(%x: tensor<16x64xf32>, %wr: tensor<16x64xbf16>, %b: tensor<16xf32>,
               %z: tensor<16x32xf32>,
               %g: tensor<16x64x32xf4E2M1FN>, %u: tensor<16x64x32xf4E2M1FN>, %d: tensor<16x32x64xf4E2M1FN>,
               %gs: tensor<16x64x1xf8E8M0FNU>, %us: tensor<16x64x1xf8E8M0FNU>, %ds: tensor<16x32x2xf8E8M0FNU>,
               %gb: tensor<16x48x32xbf16>, %ub: tensor<16x48x32xbf16>, %db: tensor<16x32x48xbf16>,
               %dl: tensor<32x64xbf16>, %n: tensor<32xf32>, %ul: tensor<64x32xbf16>) {
  %w, %i = kimi.router %x, %wr, %b top_k(4) renormalize : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>
  %w2, %i2, %m = kimi.router %x, %wr, %b top_k(4) {scaling = 2.446 : f64} : tensor<16x64xf32>, tensor<16x64xbf16>, tensor<16xf32> -> tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x16xf32>
  %r = kimi.routed_experts situ %z, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x64x32xf4E2M1FN>, tensor<16x64x32xf4E2M1FN>, tensor<16x32x64xf4E2M1FN>, tensor<16x64x1xf8E8M0FNU>, tensor<16x64x1xf8E8M0FNU>, tensor<16x32x2xf8E8M0FNU>) -> tensor<16x32xf32>
  %r2 = kimi.routed_experts silu %z, %w, %i experts(%gb, %ub, %db) : (tensor<16x32xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<16x48x32xbf16>, tensor<16x48x32xbf16>, tensor<16x32x48xbf16>) -> tensor<16x32xf32>
  %l = kimi.latent_moe situ %x, %w, %i down %dl experts(%g, %u, %d) scales(%gs, %us, %ds) norm %n up %ul {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<16x64xf32>, tensor<16x4xf32>, tensor<16x4xi32>, tensor<32x64xbf16>, tensor<16x64x32xf4E2M1FN>, tensor<16x64x32xf4E2M1FN>, tensor<16x32x64xf4E2M1FN>, tensor<16x64x1xf8E8M0FNU>, tensor<16x64x1xf8E8M0FNU>, tensor<16x32x2xf8E8M0FNU>, tensor<32xf32>, tensor<64x32xbf16>) -> tensor<16x64xf32>
  %nb = kimi.quantile_balance %m, %b top_k(4) bins(1000) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
  %nb2 = kimi.quantile_balance %m, %b top_k(4) : tensor<16x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return
}

// -----

// Variable-length sequences packed along T, bf16 log decay.
// CHECK-LABEL: func.func @kda_varlen
// CHECK: kimi.kda %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} initial_state %{{.*}} cu_seqlens %{{.*}} scale(1.250000e-01) : (tensor<1x40x4x64xbf16>, tensor<1x40x4x64xbf16>, tensor<1x40x4x32xbf16>, tensor<1x40x4x64xbf16>, tensor<1x40x4xbf16>, tensor<3x4x64x32xf32>, tensor<4xi32>) -> (tensor<1x40x4x32xbf16>, tensor<3x4x64x32xf32>)
func.func @kda_varlen(%q: tensor<1x40x4x64xbf16>, %k: tensor<1x40x4x64xbf16>, %v: tensor<1x40x4x32xbf16>,
                      %g: tensor<1x40x4x64xbf16>, %b: tensor<1x40x4xbf16>, %s0: tensor<3x4x64x32xf32>, %cu: tensor<4xi32>) {
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 cu_seqlens %cu scale(0.125) : (tensor<1x40x4x64xbf16>, tensor<1x40x4x64xbf16>, tensor<1x40x4x32xbf16>, tensor<1x40x4x64xbf16>, tensor<1x40x4xbf16>, tensor<3x4x64x32xf32>, tensor<4xi32>) -> (tensor<1x40x4x32xbf16>, tensor<3x4x64x32xf32>)
  return
}

// -----

// bf16 state storage.
// CHECK-LABEL: func.func @kda_bf16_state
// CHECK: kimi.kda {{.*}} initial_state %{{.*}} scale(1.250000e-01) : ({{.*}}, tensor<1x4x64x32xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xbf16>)
func.func @kda_bf16_state(%q: tensor<1x8x4x64xbf16>, %k: tensor<1x8x4x64xbf16>, %v: tensor<1x8x4x32xbf16>,
                          %g: tensor<1x8x4x64xf32>, %b: tensor<1x8x4xbf16>, %s0: tensor<1x4x64x32xbf16>) {
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.125) : (tensor<1x8x4x64xbf16>, tensor<1x8x4x64xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x64xf32>, tensor<1x8x4xbf16>, tensor<1x4x64x32xbf16>) -> (tensor<1x8x4x32xbf16>, tensor<1x4x64x32xbf16>)
  return
}

// -----

// The parts of a sharded Quantile Balancing and of a sequence-split KDA.
// CHECK-LABEL: func.func @sharding_parts
// CHECK: kimi.quantile_counts %{{.*}}, %{{.*}} bins(64) : tensor<16x8xf32>, tensor<8xf32> -> tensor<8x64xi32>
// CHECK: kimi.quantile_update %{{.*}}, %{{.*}} rows(64) top_k(2) : tensor<8x64xi32>, tensor<8xf32> -> tensor<8xf32>
// CHECK: kimi.kda_transition %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2xf32> -> tensor<1x2x4x4xf32>
// CHECK: kimi.weight_ref @w {parts = array<i64: 4, 1>} : tensor<2x3xf32>
kimi.weight @w : tensor<8x3xf32>
func.func @sharding_parts(%m: tensor<16x8xf32>, %b: tensor<8xf32>, %k: tensor<1x8x2x4xf32>, %g: tensor<1x8x2x4xf32>, %beta: tensor<1x8x2xf32>) {
  %c = kimi.quantile_counts %m, %b bins(64) : tensor<16x8xf32>, tensor<8xf32> -> tensor<8x64xi32>
  %nb = kimi.quantile_update %c, %b rows(64) top_k(2) : tensor<8x64xi32>, tensor<8xf32> -> tensor<8xf32>
  %t = kimi.kda_transition %k, %g, %beta : tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2xf32> -> tensor<1x2x4x4xf32>
  %w = kimi.weight_ref @w {parts = array<i64: 4, 1>} : tensor<2x3xf32>
  return
}

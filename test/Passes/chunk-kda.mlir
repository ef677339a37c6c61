// RUN: kimi-opt %s -split-input-file -kimi-chunk-kda -verify-diagnostics | kimi-opt -split-input-file | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-chunk-kda=force=dense 2>/dev/null | FileCheck %s --check-prefix=FORCE
// RUN: kimi-opt %s -split-input-file -kimi-chunk-kda=force=dense -o /dev/null 2>&1 | FileCheck %s --check-prefix=FORCE-DIAG --implicit-check-not=remark:
// RUN: kimi-opt %s -split-input-file -kimi-chunk-kda=force=pairwise 2>/dev/null | FileCheck %s --check-prefix=PAIR
// RUN: kimi-opt %s -split-input-file -kimi-chunk-kda=force=pairwise -o /dev/null 2>&1 | FileCheck %s --allow-empty --check-prefix=PAIR-DIAG

// kimi-chunk-kda sets #kimi.decay on every kimi.kda from the proven lower
// bound L of g: the largest power-of-two C in [16, 64] with
// C * |L| * log2(e) < headroom(q/k type) - 1 (bf16, f32: 127; f16: 15) gives
// dense diagonal tiles; otherwise the pairwise path with a remark that names
// the value that defeated the proof. force=dense|pairwise overrides it;
// force=pairwise is always safe and emits nothing.
// PAIR-DIAG-NOT: {{(remark|warning):}}

// K3: lower-bounded gate, L = -5, bf16 operands: 16 * 5 * log2(e) = 115.4 < 126
// while 32 would need 230.8, so C = 16 with dense diagonal tiles.
// CHECK-LABEL: func.func @k3_gate_bf16
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -5.000000e+00, chunk = 16, diag = dense>}
// FORCE-LABEL: func.func @k3_gate_bf16
// FORCE: {decay = #kimi.decay<lower = -5.000000e+00, chunk = 16, diag = dense>}
// PAIR-LABEL: func.func @k3_gate_bf16
// PAIR: {decay = #kimi.decay<lower = -5.000000e+00, chunk = 64, diag = pairwise>}
func.func @k3_gate_bf16(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xbf16> {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// L = -2.5: 32 * 2.5 * log2(e) = 115.4 < 126, 64 would need 230.8: C = 32.
// CHECK-LABEL: func.func @half_bound_bf16
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -2.500000e+00, chunk = 32, diag = dense>}
// FORCE-LABEL: func.func @half_bound_bf16
// FORCE: {decay = #kimi.decay<lower = -2.500000e+00, chunk = 32, diag = dense>}
func.func @half_bound_bf16(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xbf16> {
  %g = kimi.kda_gate lower_bound lower = -2.5 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// L = -1, f32 operands: 64 * 1 * log2(e) = 92.3 < 126: the largest chunk.
// CHECK-LABEL: func.func @mild_gate_f32
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -1.000000e+00, chunk = 64, diag = dense>}
func.func @mild_gate_f32(%q: tensor<1x64x2x16xf32>, %v: tensor<1x64x2x16xf32>, %z: tensor<1x64x2x16xf32>,
    %b: tensor<1x64x2xf32>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xf32> {
  %g = kimi.kda_gate lower_bound lower = -1.0 %z, %a, %dt : tensor<1x64x2x16xf32>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2x16xf32>, tensor<1x64x2xf32>) -> (tensor<1x64x2x16xf32>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xf32>
}

// -----

// f16 operands have headroom 15: 16 * 5 * log2(e) = 115.4 >= 14, so the K3
// bound keeps the pairwise path; the remark names the gate that set L.
// CHECK-LABEL: func.func @k3_gate_f16
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -5.000000e+00, chunk = 64, diag = pairwise>}
// FORCE-LABEL: func.func @k3_gate_f16
// FORCE: {decay = #kimi.decay<lower = -5.000000e+00, chunk = 16, diag = dense>}
// PAIR-LABEL: func.func @k3_gate_f16
// PAIR: {decay = #kimi.decay<lower = -5.000000e+00, chunk = 64, diag = pairwise>}
func.func @k3_gate_f16(%q: tensor<1x64x2x16xf16>, %v: tensor<1x64x2x16xf16>, %z: tensor<1x64x2x16xf16>,
    %b: tensor<1x64x2xf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xf16> {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x16xf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  // FORCE-DIAG: chunk-kda.mlir:[[@LINE+3]]:12: warning: force=dense on kimi.kda without a proven decay bound: the rescaled operands of its dense diagonal tiles (chunk = 16) may overflow; lower bound -5 of 'g' is too weak for f16 operands
  // FORCE-DIAG-SAME: bound from 'kimi.kda_gate lower_bound lower = -5' %0 (range [-5, 0]) at {{.*}}chunk-kda.mlir:[[@LINE-2]]:8
  // expected-remark @+1 {{kimi.kda keeps pairwise diagonal tiles (chunk = 64): lower bound -5 of 'g' is too weak for f16 operands: 16 * 5 * log2(e) = 115.4 is not below the exponent headroom 15 - 1 (needs L > -0.606); bound from 'kimi.kda_gate lower_bound lower = -5' %0 (range [-5, 0]) at}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xf16>, tensor<1x64x2x16xf16>, tensor<1x64x2x16xf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xf16>) -> (tensor<1x64x2x16xf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xf16>
}

// -----

// f16 with a mild bound, L = -0.5: 16 * 0.5 * log2(e) = 11.5 < 14 (32 would
// need 23.1): C = 16.
// CHECK-LABEL: func.func @mild_gate_f16
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -5.000000e-01, chunk = 16, diag = dense>}
func.func @mild_gate_f16(%q: tensor<1x64x2x16xf16>, %v: tensor<1x64x2x16xf16>, %z: tensor<1x64x2x16xf16>,
    %b: tensor<1x64x2xf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xf16> {
  %g = kimi.kda_gate lower_bound lower = -0.5 %z, %a, %dt : tensor<1x64x2x16xf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xf16>, tensor<1x64x2x16xf16>, tensor<1x64x2x16xf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xf16>) -> (tensor<1x64x2x16xf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xf16>
}

// -----

// A bound too weak even for C = 16 with bf16 (16 * 20 * log2(e) = 461.7).
// CHECK-LABEL: func.func @too_weak_bf16
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -2.000000e+01, chunk = 64, diag = pairwise>}
func.func @too_weak_bf16(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xbf16> {
  %g = kimi.kda_gate lower_bound lower = -20.0 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  // FORCE-DIAG: chunk-kda.mlir:[[@LINE+2]]:12: warning: force=dense on kimi.kda without a proven decay bound
  // expected-remark @+1 {{lower bound -20 of 'g' is too weak for bf16 operands: 16 * 20 * log2(e) = 461.7 is not below the exponent headroom 127 - 1 (needs L > -5.458); bound from 'kimi.kda_gate lower_bound lower = -20' %0 (range [-20, 0])}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// Kimi Linear: softplus gate, g in (-inf, 0]: pairwise, and the remark names
// the softplus gate and its location.
// CHECK-LABEL: func.func @kimi_linear_softplus
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<chunk = 64, diag = pairwise>}
// FORCE-LABEL: func.func @kimi_linear_softplus
// FORCE: {decay = #kimi.decay<chunk = 16, diag = dense>}
// PAIR-LABEL: func.func @kimi_linear_softplus
// PAIR: {decay = #kimi.decay<chunk = 64, diag = pairwise>}
func.func @kimi_linear_softplus(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xbf16> {
  %g = kimi.kda_gate softplus %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  // FORCE-DIAG: chunk-kda.mlir:[[@LINE+3]]:12: warning: force=dense on kimi.kda without a proven decay bound: the rescaled operands of its dense diagonal tiles (chunk = 16) may overflow;
  // FORCE-DIAG-SAME: lower bound of 'g' is unbounded: defeated by 'kimi.kda_gate softplus' %0 (range (-inf, 0]) at {{.*}}chunk-kda.mlir:[[@LINE-2]]:8
  // expected-remark @+1 {{kimi.kda keeps pairwise diagonal tiles (chunk = 64): lower bound of 'g' is unbounded: defeated by 'kimi.kda_gate softplus' %0 (range (-inf, 0]) at}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// A softplus gate clamped at -5 (arith.maximumf with a splat constant) is
// bounded again: dense, C = 16.
// CHECK-LABEL: func.func @softplus_clamped
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -5.000000e+00, chunk = 16, diag = dense>}
func.func @softplus_clamped(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xbf16> {
  %sp = kimi.kda_gate softplus %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %floor = arith.constant dense<-5.0> : tensor<1x64x2x16xf32>
  %g = arith.maximumf %sp, %floor : tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// Gates through arith.select and arith.minimumf: the select joins
// [-2.5, 0] and [-1, 0], the minimum with -0.5 gives [-2.5, -0.5]: C = 32.
// CHECK-LABEL: func.func @select_minimumf
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -2.500000e+00, chunk = 32, diag = dense>}
func.func @select_minimumf(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>, %c: i1) -> tensor<1x64x2x16xbf16> {
  %g1 = kimi.kda_gate lower_bound lower = -2.5 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %g2 = kimi.kda_gate lower_bound lower = -1.0 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %sel = arith.select %c, %g1, %g2 : tensor<1x64x2x16xf32>
  %cap = arith.constant dense<-0.5> : tensor<1x64x2x16xf32>
  %g = arith.minimumf %sel, %cap : tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// An unbounded branch of a select, hidden behind a minimumf: the remark
// follows the use-def chain to the softplus gate.
// CHECK-LABEL: func.func @select_reaches_softplus
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<chunk = 64, diag = pairwise>}
func.func @select_reaches_softplus(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>, %c: i1) -> tensor<1x64x2x16xbf16> {
  %g1 = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %g2 = kimi.kda_gate softplus %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %sel = arith.select %c, %g1, %g2 : tensor<1x64x2x16xf32>
  %g = arith.minimumf %g1, %sel : tensor<1x64x2x16xf32>
  // expected-remark @+1 {{lower bound of 'g' is unbounded: defeated by 'kimi.kda_gate softplus' %1 (range (-inf, 0])}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// g from an opaque function argument is (-inf, +inf): the remark names the
// argument.
// CHECK-LABEL: func.func @opaque_argument
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<chunk = 64, diag = pairwise>}
// FORCE-LABEL: func.func @opaque_argument
// FORCE: {decay = #kimi.decay<chunk = 16, diag = dense>}
func.func @opaque_argument(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %g: tensor<1x64x2x16xf32>,
                           %b: tensor<1x64x2xbf16>) -> tensor<1x64x2x16xbf16> {
  // FORCE-DIAG: chunk-kda.mlir:[[@LINE+2]]:12: warning: force=dense on kimi.kda without a proven decay bound{{.*}}defeated by function argument %arg2 of @opaque_argument (range (-inf, inf))
  // expected-remark @+1 {{lower bound of 'g' is unbounded: defeated by function argument %arg2 of @opaque_argument (range (-inf, inf)) at}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// g computed by kimi.linear (weights are unknown): the remark names it.
// CHECK-LABEL: func.func @linear_gate
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<chunk = 64, diag = pairwise>}
func.func @linear_gate(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %x: tensor<1x64x2x16xf32>,
                       %w: tensor<16x16xbf16>, %b: tensor<1x64x2xbf16>) -> tensor<1x64x2x16xbf16> {
  %g = kimi.linear %x, %w : tensor<1x64x2x16xf32>, tensor<16x16xbf16> -> tensor<1x64x2x16xf32>
  // FORCE-DIAG: warning: force=dense on kimi.kda without a proven decay bound{{.*}}defeated by 'kimi.linear' %0 (range (-inf, inf))
  // expected-remark @+1 {{lower bound of 'g' is unbounded: defeated by 'kimi.linear' %0 (range (-inf, inf))}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// K3's gate written out in arith/math: g = L * sigmoid(exp(a) * (x + dt))
// with x from a projection (unknown). The proof comes from the structure:
// exp >= 0, 1 + exp >= 1, 1 / (1 + exp) in [0, 1], so g in [-5, 0].
// CHECK-LABEL: func.func @arith_sigmoid_gate
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -5.000000e+00, chunk = 16, diag = dense>}
func.func @arith_sigmoid_gate(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %x: tensor<1x64x2x16xf32>,
                              %w: tensor<16x16xbf16>, %alog: tensor<1x64x2x16xf32>, %dt: tensor<1x64x2x16xf32>,
                              %b: tensor<1x64x2xbf16>) -> tensor<1x64x2x16xbf16> {
  %z = kimi.linear %x, %w : tensor<1x64x2x16xf32>, tensor<16x16xbf16> -> tensor<1x64x2x16xf32>
  %one = arith.constant dense<1.0> : tensor<1x64x2x16xf32>
  %lower = arith.constant dense<-5.0> : tensor<1x64x2x16xf32>
  %ea = math.exp %alog : tensor<1x64x2x16xf32>
  %zb = arith.addf %z, %dt : tensor<1x64x2x16xf32>
  %arg = arith.mulf %ea, %zb : tensor<1x64x2x16xf32>
  %ns = arith.negf %arg : tensor<1x64x2x16xf32>
  %e = math.exp %ns : tensor<1x64x2x16xf32>
  %den = arith.addf %one, %e : tensor<1x64x2x16xf32>
  %sig = arith.divf %one, %den : tensor<1x64x2x16xf32>
  %g = arith.mulf %lower, %sig : tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// A gate that may be positive is outside kimi.kda's contract g <= 0.
// CHECK-LABEL: func.func @positive_gate
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -4.000000e+00, chunk = 64, diag = pairwise>}
func.func @positive_gate(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xbf16> {
  %g0 = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %shift = arith.constant dense<1.0> : tensor<1x64x2x16xf32>
  %g = arith.addf %g0, %shift : tensor<1x64x2x16xf32>
  // expected-remark @+1 {{'g' may be positive (range [-4, 1]), outside kimi.kda's g <= 0: defeated by 'arith.constant' %cst (range [1, 1])}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// Calls are followed: the clamp lives in a private function.
// CHECK-LABEL: func.func @clamp_in_callee
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = -3.000000e+00, chunk = 16, diag = dense>}
func.func private @clamp(%x: tensor<1x64x2x16xf32>) -> tensor<1x64x2x16xf32> {
  %floor = arith.constant dense<-3.0> : tensor<1x64x2x16xf32>
  %y = arith.maximumf %x, %floor : tensor<1x64x2x16xf32>
  return %y : tensor<1x64x2x16xf32>
}
func.func @clamp_in_callee(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %z: tensor<1x64x2x16xbf16>,
    %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x64x2x16xbf16> {
  %sp = kimi.kda_gate softplus %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %g = func.call @clamp(%sp) : (tensor<1x64x2x16xf32>) -> tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// A kimi.kda the analysis never reaches (private function without callers).
// CHECK-LABEL: func.func private @unreachable
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<chunk = 64, diag = pairwise>}
func.func private @unreachable(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %g: tensor<1x64x2x16xf32>,
                               %b: tensor<1x64x2xbf16>) -> tensor<1x64x2x16xbf16> {
  // expected-remark @+1 {{'g' was not reached by the decay-bound analysis (dead code)}}
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// An existing decision is replaced; g = 0 (no decay) allows the largest chunk.
// CHECK-LABEL: func.func @replace_and_zero_decay
// CHECK: kimi.kda {{.*}} {decay = #kimi.decay<lower = 0.000000e+00, chunk = 64, diag = dense>}
func.func @replace_and_zero_decay(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>, %b: tensor<1x64x2xbf16>) -> tensor<1x64x2x16xbf16> {
  %g = arith.constant dense<0.0> : tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) {decay = #kimi.decay<chunk = 64, diag = pairwise>} : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

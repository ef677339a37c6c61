// RUN: kimi-opt %s -split-input-file -kimi-prove-decay-bounds=annotate-all | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-prove-decay-bounds="annotate-all rounding=exact" | FileCheck %s --check-prefix=EXACT
// RUN: kimi-opt %s -split-input-file -kimi-prove-decay-bounds=remarks -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK

// kimi-prove-decay-bounds attaches to every kimi.kda the interval proven for
// its g as kimi.decay_interval; annotate-all also shows the interval of
// every float op as kimi.interval. Default: sound for IEEE evaluation in
// each op's type (ends rounded outward and closed after rounding ops);
// rounding=exact: exact real arithmetic (open ends stay open).

// K3 gate: (L, 0) exactly, [L, 0] once f32 rounding is accounted for
// (sigmoid rounds to 0 and 1).
// CHECK-LABEL: func.func @k3_gate
// CHECK: kimi.kda_gate {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// CHECK: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// EXACT-LABEL: func.func @k3_gate
// EXACT: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<lower = -5.000000e+00 open, upper = 0.000000e+00 open>
// REMARK: prove-decay-bounds.mlir:[[@LINE+6]]:12: remark: 'g' of kimi.kda lies in [-5, 0] (from 'kimi.kda_gate lower_bound lower = -5' %0 at {{.*}}prove-decay-bounds.mlir:[[@LINE+5]]:8)
func.func @k3_gate(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>,
                   %z: tensor<1x64x2x16xbf16>, %b: tensor<1x64x2xbf16>,
                   %a: tensor<2xf32>, %dt: tensor<2x16xf32>)
    -> tensor<1x64x2x16xbf16> {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// Kimi Linear's softplus gate: only an upper bound. An absent end is
// unbounded: #kimi.interval<upper = 0> is (-inf, 0].
// CHECK-LABEL: func.func @softplus_gate
// CHECK: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<upper = 0.000000e+00>
// EXACT-LABEL: func.func @softplus_gate
// EXACT: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<upper = 0.000000e+00 open>
// REMARK: remark: 'g' of kimi.kda lies in (-inf, 0] (from 'kimi.kda_gate softplus' %0 at
func.func @softplus_gate(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>,
                         %z: tensor<1x64x2x16xbf16>, %b: tensor<1x64x2xbf16>,
                         %a: tensor<2xf32>, %dt: tensor<2x16xf32>)
    -> tensor<1x64x2x16xbf16> {
  %g = kimi.kda_gate softplus %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// A sigmoid written in arith/math: exp gives (0, inf), 1 + gives (1, inf),
// 1 / gives (0, 1), L * gives (L, 0) whatever x is. In f32 the ends are
// reached (exp underflows to 0, 1 + tiny rounds to 1), hence closed.
// CHECK-LABEL: func.func @arith_sigmoid
// CHECK: arith.negf {{.*}}kimi.interval = #kimi.interval<>
// CHECK: math.exp {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00>
// CHECK: arith.addf {{.*}}kimi.interval = #kimi.interval<lower = 1.000000e+00>
// CHECK: arith.divf {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00, upper = 1.000000e+00>
// CHECK: arith.mulf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// CHECK: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// EXACT-LABEL: func.func @arith_sigmoid
// EXACT: math.exp {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00 open>
// EXACT: arith.addf {{.*}}kimi.interval = #kimi.interval<lower = 1.000000e+00 open>
// EXACT: arith.divf {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00 open, upper = 1.000000e+00 open>
// EXACT: arith.mulf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00 open, upper = 0.000000e+00 open>
// REMARK: remark: 'g' of kimi.kda lies in [-5, 0] (from 'arith.mulf' %4 at
func.func @arith_sigmoid(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>,
                         %x: tensor<1x64x2x16xf32>, %b: tensor<1x64x2xbf16>)
    -> tensor<1x64x2x16xbf16> {
  %one = arith.constant dense<1.0> : tensor<1x64x2x16xf32>
  %lower = arith.constant dense<-5.0> : tensor<1x64x2x16xf32>
  %nx = arith.negf %x : tensor<1x64x2x16xf32>
  %e = math.exp %nx : tensor<1x64x2x16xf32>
  %den = arith.addf %one, %e : tensor<1x64x2x16xf32>
  %sig = arith.divf %one, %den : tensor<1x64x2x16xf32>
  %g = arith.mulf %lower, %sig : tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// Why rounding matters: (g + 1e8) - 1e8 is g in exact arithmetic, but in f32
// the sum rounds to a multiple of 8, so the result can be -8 < L.
// CHECK-LABEL: func.func @cancellation
// CHECK: arith.subf {{.*}}kimi.interval = #kimi.interval<lower = -8.000000e+00, upper = 0.000000e+00>
// EXACT-LABEL: func.func @cancellation
// EXACT: arith.subf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00 open, upper = 0.000000e+00 open>
func.func @cancellation(%z: tensor<1x4x1x4xf32>, %a: tensor<1xf32>, %dt: tensor<1x4xf32>) -> tensor<1x4x1x4xf32> {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x4x1x4xf32>, tensor<1xf32>, tensor<1x4xf32> -> tensor<1x4x1x4xf32>
  %big = arith.constant dense<1.0e8> : tensor<1x4x1x4xf32>
  %up = arith.addf %g, %big : tensor<1x4x1x4xf32>
  %back = arith.subf %up, %big : tensor<1x4x1x4xf32>
  return %back : tensor<1x4x1x4xf32>
}

// -----

// Multiplication handles signs: [-2, 3] * [-4, 5] = [-12, 15] (a dense
// constant is the hull of its elements); division by an interval containing
// 0 is unbounded; absf folds the sign.
// CHECK-LABEL: func.func @signs
// CHECK: arith.constant {{.*}}kimi.interval = #kimi.interval<lower = -2.000000e+00, upper = 3.000000e+00>
// CHECK: arith.constant {{.*}}kimi.interval = #kimi.interval<lower = -4.000000e+00, upper = 5.000000e+00>
// CHECK: arith.mulf {{.*}}kimi.interval = #kimi.interval<lower = -1.200000e+01, upper = 1.500000e+01>
// CHECK: arith.divf {{.*}}kimi.interval = #kimi.interval<>
// CHECK: arith.divf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e-01, upper = 7.500000e-01>
// CHECK: math.absf {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00, upper = 3.000000e+00>
// CHECK: arith.subf {{.*}}kimi.interval = #kimi.interval<lower = -7.000000e+00, upper = 7.000000e+00>
func.func @signs() -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %a = arith.constant dense<[-2.0, 3.0]> : tensor<2xf32>
  %b = arith.constant dense<[-4.0, 5.0]> : tensor<2xf32>
  %four = arith.constant dense<4.0> : tensor<2xf32>
  %m = arith.mulf %a, %b : tensor<2xf32>
  %d0 = arith.divf %a, %b : tensor<2xf32>
  %d = arith.divf %a, %four : tensor<2xf32>
  %abs = math.absf %a : tensor<2xf32>
  %diff = arith.subf %a, %b : tensor<2xf32>
  return %m, %d0, %d, %abs, %diff : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}

// -----

// Open ends decide whether a divisor contains 0: exactly, the softplus gate
// is (-inf, 0), exp of it is (0, 1) and 1 / exp is (1, inf); in f32 exp
// underflows to 0, and the quotient is unbounded.
// CHECK-LABEL: func.func @open_divisor
// CHECK: math.exp {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00, upper = 1.000000e+00>
// CHECK: arith.divf {{.*}}kimi.interval = #kimi.interval<>
// EXACT-LABEL: func.func @open_divisor
// EXACT: math.exp {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00 open, upper = 1.000000e+00 open>
// EXACT: arith.divf {{.*}}kimi.interval = #kimi.interval<lower = 1.000000e+00 open>
func.func @open_divisor(%z: tensor<1x4x1x4xf32>, %a: tensor<1xf32>, %dt: tensor<1x4xf32>) -> tensor<1x4x1x4xf32> {
  %g = kimi.kda_gate softplus %z, %a, %dt : tensor<1x4x1x4xf32>, tensor<1xf32>, tensor<1x4xf32> -> tensor<1x4x1x4xf32>
  %one = arith.constant dense<1.0> : tensor<1x4x1x4xf32>
  %e = math.exp %g : tensor<1x4x1x4xf32>
  %r = arith.divf %one, %e : tensor<1x4x1x4xf32>
  return %r : tensor<1x4x1x4xf32>
}

// -----

// Casts: extf keeps the interval; truncf rounds the ends outward, so a bound
// that bf16 cannot represent widens (-5.01 -> [-5.03125, -5]).
// CHECK-LABEL: func.func @casts
// CHECK: arith.truncf {{.*}}kimi.interval = #kimi.interval<lower = -5.031250e+00, upper = -5.000000e+00>
// CHECK: arith.extf {{.*}}kimi.interval = #kimi.interval<lower = -5.031250e+00, upper = -5.000000e+00>
// CHECK: arith.truncf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// EXACT-LABEL: func.func @casts
// EXACT: arith.truncf {{.*}}kimi.interval = #kimi.interval<lower = -5.031250e+00, upper = -5.000000e+00>
// EXACT: arith.extf {{.*}}kimi.interval = #kimi.interval<lower = -5.031250e+00, upper = -5.000000e+00>
// EXACT: arith.truncf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
func.func @casts(%z: tensor<1x4x1x4xf32>, %a: tensor<1xf32>, %dt: tensor<1x4xf32>) -> (tensor<4xf32>, tensor<1x4x1x4xbf16>) {
  %c = arith.constant dense<-5.01> : tensor<4xf32>
  %t = arith.truncf %c : tensor<4xf32> to tensor<4xbf16>
  %e = arith.extf %t : tensor<4xbf16> to tensor<4xf32>
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x4x1x4xf32>, tensor<1xf32>, tensor<1x4xf32> -> tensor<1x4x1x4xf32>
  %gt = arith.truncf %g : tensor<1x4x1x4xf32> to tensor<1x4x1x4xbf16>
  return %e, %gt : tensor<4xf32>, tensor<1x4x1x4xbf16>
}

// -----

// Library functions: tanh of anything is [-1, 1] ((-1, 1) exactly); log of
// [0, 1] is (-inf, 0]; log1p of [0, 1] is [0, log 2] (plus the allowed ulps).
// CHECK-LABEL: func.func @math_functions
// CHECK: math.tanh {{.*}}kimi.interval = #kimi.interval<lower = -1.000000e+00, upper = 1.000000e+00>
// CHECK: math.log {{.*}}kimi.interval = #kimi.interval<upper = 0.000000e+00>
// CHECK: math.log1p {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00, upper = 0.69314730167388916>
// EXACT-LABEL: func.func @math_functions
// EXACT: math.tanh {{.*}}kimi.interval = #kimi.interval<lower = -1.000000e+00 open, upper = 1.000000e+00 open>
// EXACT: math.log {{.*}}kimi.interval = #kimi.interval<upper = 0.000000e+00>
// EXACT: math.log1p {{.*}}kimi.interval = #kimi.interval<lower = 0.000000e+00, upper = 0.6931471805599454>
func.func @math_functions(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %unit = arith.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %t = math.tanh %x : tensor<4xf32>
  %u = tensor.concat dim(0) %unit, %unit : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  %l = math.log %u : tensor<4xf32>
  %l1 = math.log1p %u : tensor<4xf32>
  return %t, %l, %l1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// max/min (both NaN flavours) and select: a clamp of a softplus gate at -5
// bounds it again; select joins its two values.
// CHECK-LABEL: func.func @clamps_and_select
// CHECK: arith.maximumf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// CHECK: arith.maxnumf {{.*}}kimi.interval = #kimi.interval<lower = -3.000000e+00, upper = 0.000000e+00>
// CHECK: arith.minnumf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = -3.000000e+00>
// CHECK: arith.minimumf {{.*}}kimi.interval = #kimi.interval<upper = -3.000000e+00>
// CHECK: arith.select {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// CHECK: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>
// EXACT-LABEL: func.func @clamps_and_select
// EXACT: arith.maximumf {{.*}}kimi.interval = #kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00 open>
func.func @clamps_and_select(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>,
                             %z: tensor<1x64x2x16xbf16>, %b: tensor<1x64x2xbf16>,
                             %a: tensor<2xf32>, %dt: tensor<2x16xf32>, %c: i1)
    -> (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>) {
  %sp = kimi.kda_gate softplus %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %m5 = arith.constant dense<-5.0> : tensor<1x64x2x16xf32>
  %m3 = arith.constant dense<-3.0> : tensor<1x64x2x16xf32>
  %clamped = arith.maximumf %sp, %m5 : tensor<1x64x2x16xf32>
  %hi = arith.maxnumf %clamped, %m3 : tensor<1x64x2x16xf32>
  %lo = arith.minnumf %clamped, %m3 : tensor<1x64x2x16xf32>
  %unb = arith.minimumf %sp, %m3 : tensor<1x64x2x16xf32>
  %g = arith.select %c, %hi, %lo : tensor<1x64x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o, %unb : tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>
}

// -----

// Values keep their interval through reshapes and slices.
// CHECK-LABEL: func.func @reshapes
// CHECK: tensor.collapse_shape {{.*}}kimi.interval = #kimi.interval<lower = -2.500000e+00, upper = 0.000000e+00>
// CHECK: tensor.expand_shape {{.*}}kimi.interval = #kimi.interval<lower = -2.500000e+00, upper = 0.000000e+00>
// CHECK: tensor.extract_slice {{.*}}kimi.interval = #kimi.interval<lower = -2.500000e+00, upper = 0.000000e+00>
// CHECK: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<lower = -2.500000e+00, upper = 0.000000e+00>
func.func @reshapes(%q: tensor<1x32x2x16xbf16>, %v: tensor<1x32x2x16xbf16>,
                    %z: tensor<1x64x2x16xbf16>, %b: tensor<1x32x2xbf16>,
                    %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> tensor<1x32x2x16xbf16> {
  %g0 = kimi.kda_gate lower_bound lower = -2.5 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %flat = tensor.collapse_shape %g0 [[0, 1], [2, 3]] : tensor<1x64x2x16xf32> into tensor<64x32xf32>
  %back = tensor.expand_shape %flat [[0, 1], [2, 3]] output_shape [1, 64, 2, 16] : tensor<64x32xf32> into tensor<1x64x2x16xf32>
  %g = tensor.extract_slice %back[0, 0, 0, 0] [1, 32, 2, 16] [1, 1, 1, 1] : tensor<1x64x2x16xf32> to tensor<1x32x2x16xf32>
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x32x2x16xbf16>, tensor<1x32x2x16xbf16>, tensor<1x32x2x16xbf16>, tensor<1x32x2x16xf32>, tensor<1x32x2xbf16>) -> (tensor<1x32x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x32x2x16xbf16>
}

// -----

// Unknowns are (-inf, +inf): a function argument and a kimi.linear result.
// Calls into private functions carry the caller's intervals.
// CHECK-LABEL: func.func private @scale_gate
// CHECK: arith.mulf {{.*}}kimi.interval = #kimi.interval<lower = -2.500000e+00, upper = 0.000000e+00>
// CHECK-LABEL: func.func @unknowns_and_calls
// CHECK: kimi.linear {{.*}}kimi.interval = #kimi.interval<>
// CHECK: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<>
// CHECK: kimi.kda {{.*}}kimi.decay_interval = #kimi.interval<lower = -2.500000e+00, upper = 0.000000e+00>
// REMARK: remark: 'g' of kimi.kda lies in (-inf, inf) (from 'kimi.linear' %0 at
// REMARK: remark: 'g' of kimi.kda lies in [-2.5, 0] (from 'func.call' %2 at
func.func private @scale_gate(%g: tensor<1x64x2x16xf32>) -> tensor<1x64x2x16xf32> {
  %half = arith.constant dense<0.5> : tensor<1x64x2x16xf32>
  %r = arith.mulf %g, %half : tensor<1x64x2x16xf32>
  return %r : tensor<1x64x2x16xf32>
}
func.func @unknowns_and_calls(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>,
                              %x: tensor<1x64x2x16xf32>, %w: tensor<16x16xbf16>,
                              %z: tensor<1x64x2x16xbf16>, %b: tensor<1x64x2xbf16>,
                              %a: tensor<2xf32>, %dt: tensor<2x16xf32>) -> (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>) {
  %lin = kimi.linear %x, %w : tensor<1x64x2x16xf32>, tensor<16x16xbf16> -> tensor<1x64x2x16xf32>
  %o1, %s1 = kimi.kda %q, %q, %v, %lin, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  %g5 = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x16xbf16>, tensor<2xf32>, tensor<2x16xf32> -> tensor<1x64x2x16xf32>
  %g = func.call @scale_gate(%g5) : (tensor<1x64x2x16xf32>) -> tensor<1x64x2x16xf32>
  %o2, %s2 = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o1, %o2 : tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>
}

// -----

// A kimi.kda in code the analysis never reaches gets no interval.
// CHECK-LABEL: func.func private @unreachable
// CHECK: kimi.kda
// CHECK-NOT: kimi.decay_interval
// CHECK-SAME: -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
// REMARK: remark: 'g' of kimi.kda was not reached by the decay-bound analysis (dead code); no interval recorded
func.func private @unreachable(%q: tensor<1x64x2x16xbf16>, %v: tensor<1x64x2x16xbf16>,
                               %g: tensor<1x64x2x16xf32>, %b: tensor<1x64x2xbf16>) -> tensor<1x64x2x16xbf16> {
  %o, %s = kimi.kda %q, %q, %v, %g, %b scale(0.25) : (tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xbf16>, tensor<1x64x2x16xf32>, tensor<1x64x2xbf16>) -> (tensor<1x64x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x64x2x16xbf16>
}

// -----

// Termination: a recursion that subtracts 1 would grow the interval of %x
// forever; after a few growths the join widens the moving end to -inf.
// CHECK-LABEL: func.func private @countdown
// CHECK: arith.subf {{.*}}kimi.interval = #kimi.interval<upper = -1.000000e+00>
// CHECK-LABEL: func.func @start_countdown
// CHECK: call @countdown({{.*}}kimi.interval = #kimi.interval<upper = -1.000000e+00>
func.func private @countdown(%x: tensor<4xf32>) -> tensor<4xf32> {
  %one = arith.constant dense<1.0> : tensor<4xf32>
  %y = arith.subf %x, %one : tensor<4xf32>
  %r = func.call @countdown(%y) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @start_countdown() -> tensor<4xf32> {
  %zero = arith.constant dense<0.0> : tensor<4xf32>
  %r = func.call @countdown(%zero) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// RUN: kimi-opt %s -split-input-file -kimi-lower-kda | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-lower-kda | FileCheck %s --check-prefix=STRAT

// Dense diagonal tiles, T = 20 with C = 16: one full chunk in the chunk loop,
// then a partial last chunk of 4 tokens with its own static shapes.

// CHECK-LABEL: func.func @dense_partial_last_chunk
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<1x20x2x8xf32>
// CHECK: scf.for %[[B:[a-z0-9]+]] = %{{.*}} to %{{.*}} step
// CHECK: scf.for %[[H:[a-z0-9]+]] = %{{.*}} to %{{.*}} step
// CHECK: %[[S0:.*]] = tensor.extract_slice %{{.*}}[%[[B]], %[[H]], 0, 0] [1, 1, 8, 4] {{.*}} to tensor<8x4xf32>
// CHECK: scf.for %[[T0:[a-z0-9]+]] = %{{.*}} to %c16 step %c16 iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[S0]])
// CHECK: tensor.extract_slice %[[Q]][%[[B]], %[[T0]], %[[H]], 0] [1, 16, 1, 8] [1, 1, 1, 1] : tensor<1x20x2x8xf32> to tensor<16x8xf32>
//   G = tril(1) @ g: the cumsum anchored at the chunk start is a matmul.
// CHECK: arith.cmpi ule
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x16xf32>, tensor<16x8xf32>)
//   K ⊙ exp(-G), then Akk and Aqk as dense (transposed) matmuls.
// CHECK: arith.negf
// CHECK-NEXT: math.exp
// CHECK: linalg.matmul indexing_maps = [{{.*}}] ins(%{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<16x8xf32>) outs(%{{.*}} : tensor<16x16xf32>)
// CHECK: linalg.matmul indexing_maps = [{{.*}}] ins(%{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<16x8xf32>) outs(%{{.*}} : tensor<16x16xf32>)
//   Strict lower-triangular mask for Akk, inclusive for Aqk.
// CHECK: arith.cmpi ult
// CHECK: arith.cmpi ule
//   Neumann product: ceil(log2 16) = 4 factors, three (N^2k, X + X N^2k) steps.
// CHECK-COUNT-6: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x16xf32>, tensor<16x16xf32>)
//   W, U, W S, (exp(G) ⊙ Q) S, + Aqk V_new, state update.
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x16xf32>, tensor<16x8xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x16xf32>, tensor<16x4xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<8x4xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<8x4xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x16xf32>, tensor<16x4xf32>)
// CHECK: linalg.matmul indexing_maps = [{{.*}}] ins(%{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<16x4xf32>) outs(%{{.*}} : tensor<8x4xf32>)
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[B]], %[[T0]], %[[H]], 0] [1, 16, 1, 4]
// CHECK: scf.yield
//   The partial last chunk: tokens 16..19.
// CHECK: tensor.extract_slice %[[Q]][%[[B]], %c16, %[[H]], 0] [1, 4, 1, 8] [1, 1, 1, 1] : tensor<1x20x2x8xf32> to tensor<4x8xf32>
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x4xf32>, tensor<4x8xf32>)
//   ceil(log2 4) = 2 factors: one (N^2, X + X N^2) step.
// CHECK-COUNT-2: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x4xf32>, tensor<4x4xf32>)
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[B]], %c16, %[[H]], 0] [1, 4, 1, 4] [1, 1, 1, 1] : tensor<4x4xf32> into tensor<1x20x2x4xf32>
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[B]], %[[H]], 0, 0] [1, 1, 8, 4] [1, 1, 1, 1] : tensor<8x4xf32> into tensor<1x2x8x4xf32>
// CHECK-NOT: kimi.kda
// CHECK: return

// The dense lowering contains no pairwise construct: no reduction generic,
// no pairwise marker; everything with a reduction is a linalg.matmul.
// STRAT-LABEL: func.func @dense_partial_last_chunk
// STRAT-NOT: "reduction"
// STRAT-NOT: kimi.pairwise_diagonal
// STRAT: return
func.func @dense_partial_last_chunk(%q: tensor<1x20x2x8xf32>, %k: tensor<1x20x2x8xf32>, %v: tensor<1x20x2x4xf32>, %g: tensor<1x20x2x8xf32>, %beta: tensor<1x20x2xf32>, %s: tensor<1x2x8x4xf32>) -> (tensor<1x20x2x4xf32>, tensor<1x2x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta initial_state %s scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x20x2x8xf32>, tensor<1x20x2x8xf32>, tensor<1x20x2x4xf32>, tensor<1x20x2x8xf32>, tensor<1x20x2xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x20x2x4xf32>, tensor<1x2x8x4xf32>)
  return %o, %f : tensor<1x20x2x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Pairwise diagonal tiles: Akk and Aqk are (i, j, d) contractions that form
// the exponent as a difference, masked above the diagonal, before exp.

// CHECK-LABEL: func.func @pairwise
// CHECK: scf.for %{{.*}} = %{{.*}} to %c64 step %c32
//   Akk: strict (j < i).
// CHECK: linalg.generic {indexing_maps = [{{.*}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<32x8xf32>, tensor<32x8xf32>, tensor<32x8xf32>, tensor<32x8xf32>) outs(%{{.*}} : tensor<32x32xf32>) attrs = {kimi.pairwise_diagonal}
// CHECK: %[[IN:.*]] = arith.cmpi ult
// CHECK: %[[DIFF:.*]] = arith.subf
// CHECK: %[[MASKED:.*]] = arith.select %[[IN]], %[[DIFF]]
// CHECK: math.exp %[[MASKED]] : f32
//   Aqk: inclusive (j <= i).
// CHECK: linalg.generic {indexing_maps = [{{.*}}], iterator_types = ["parallel", "parallel", "reduction"]} {{.*}} attrs = {kimi.pairwise_diagonal}
// CHECK: %[[IN2:.*]] = arith.cmpi ule
// CHECK: %[[DIFF2:.*]] = arith.subf
// CHECK: %[[MASKED2:.*]] = arith.select %[[IN2]], %[[DIFF2]]
// CHECK: math.exp %[[MASKED2]] : f32
//   The rest is shared with dense: Neumann product (5 factors for C = 32).
// CHECK-COUNT-8: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<32x32xf32>, tensor<32x32xf32>)
//   Partial last chunk of 70 - 64 = 6 tokens, also pairwise.
// CHECK: tensor.extract_slice %{{.*}}[%{{.*}}, %c64, %{{.*}}, 0] [1, 6, 1, 8] [1, 1, 1, 1] : tensor<2x70x3x8xf32> to tensor<6x8xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} {{.*}} outs(%{{.*}} : tensor<6x6xf32>) attrs = {kimi.pairwise_diagonal}
// CHECK: return

// exp(-G) is never formed.
// STRAT-LABEL: func.func @pairwise
// STRAT-NOT: arith.negf
// STRAT: return
func.func @pairwise(%q: tensor<2x70x3x8xf32>, %k: tensor<2x70x3x8xf32>, %v: tensor<2x70x3x4xf32>, %g: tensor<2x70x3x8xf32>, %beta: tensor<2x70x3xf32>, %s: tensor<2x3x8x4xf32>) -> (tensor<2x70x3x4xf32>, tensor<2x3x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta initial_state %s scale(0.35355339059327373) {decay = #kimi.decay<chunk = 32, diag = pairwise>} : (tensor<2x70x3x8xf32>, tensor<2x70x3x8xf32>, tensor<2x70x3x4xf32>, tensor<2x70x3x8xf32>, tensor<2x70x3xf32>, tensor<2x3x8x4xf32>) -> (tensor<2x70x3x4xf32>, tensor<2x3x8x4xf32>)
  return %o, %f : tensor<2x70x3x4xf32>, tensor<2x3x8x4xf32>
}

// -----

// T a multiple of C and no initial state: the state starts as zeros and no
// partial chunk follows the chunk loop.

// CHECK-LABEL: func.func @whole_chunks_zero_state
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[S0:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<8x4xf32>)
// CHECK: %[[R:.*]]:2 = scf.for %{{.*}} = %{{.*}} to %c32 step %c16 iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[S0]])
// CHECK: scf.yield
// CHECK-NEXT: }
// CHECK-NEXT: tensor.insert_slice %[[R]]#1 into
// CHECK-NEXT: scf.yield %[[R]]#0
func.func @whole_chunks_zero_state(%q: tensor<1x32x1x8xf32>, %k: tensor<1x32x1x8xf32>, %v: tensor<1x32x1x4xf32>, %g: tensor<1x32x1x8xf32>, %beta: tensor<1x32x1xf32>) -> (tensor<1x32x1x4xf32>, tensor<1x1x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x32x1x8xf32>, tensor<1x32x1x8xf32>, tensor<1x32x1x4xf32>, tensor<1x32x1x8xf32>, tensor<1x32x1xf32>) -> (tensor<1x32x1x4xf32>, tensor<1x1x8x4xf32>)
  return %o, %f : tensor<1x32x1x4xf32>, tensor<1x1x8x4xf32>
}

// -----

// T < C: no chunk loop, only the partial chunk of 5 tokens;
// ceil(log2 5) = 3 Neumann factors.

// CHECK-LABEL: func.func @shorter_than_a_chunk
// CHECK-NOT: step %c16
// CHECK: tensor.extract_slice %{{.*}} [1, 5, 1, 8] [1, 1, 1, 1] : tensor<1x5x1x8xf32> to tensor<5x8xf32>
// CHECK-COUNT-4: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<5x5xf32>, tensor<5x5xf32>)
// CHECK-NOT: tensor<5x5xf32>, tensor<5x5xf32>)
// CHECK: return
func.func @shorter_than_a_chunk(%q: tensor<1x5x1x8xf32>, %k: tensor<1x5x1x8xf32>, %v: tensor<1x5x1x4xf32>, %g: tensor<1x5x1x8xf32>, %beta: tensor<1x5x1xf32>) -> (tensor<1x5x1x4xf32>, tensor<1x1x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x5x1x8xf32>, tensor<1x5x1x8xf32>, tensor<1x5x1x4xf32>, tensor<1x5x1x8xf32>, tensor<1x5x1xf32>) -> (tensor<1x5x1x4xf32>, tensor<1x1x8x4xf32>)
  return %o, %f : tensor<1x5x1x4xf32>, tensor<1x1x8x4xf32>
}

// -----

// bf16 activations are extended to f32 on load; the output is truncated back.

// CHECK-LABEL: func.func @bf16_activations
// CHECK: tensor.extract_slice %{{.*}} : tensor<1x16x1x8xbf16> to tensor<16x8xbf16>
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: tensor.insert_slice %{{.*}} : tensor<16x4xbf16> into tensor<1x16x1x4xbf16>
func.func @bf16_activations(%q: tensor<1x16x1x8xbf16>, %k: tensor<1x16x1x8xbf16>, %v: tensor<1x16x1x4xbf16>, %g: tensor<1x16x1x8xf32>, %beta: tensor<1x16x1xbf16>) -> (tensor<1x16x1x4xbf16>, tensor<1x1x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x16x1x8xbf16>, tensor<1x16x1x8xbf16>, tensor<1x16x1x4xbf16>, tensor<1x16x1x8xf32>, tensor<1x16x1xbf16>) -> (tensor<1x16x1x4xbf16>, tensor<1x1x8x4xf32>)
  return %o, %f : tensor<1x16x1x4xbf16>, tensor<1x1x8x4xf32>
}

// -----

// Without a decay attribute the op has not been chunked: it is left alone.

// CHECK-LABEL: func.func @not_chunked
// CHECK: kimi.kda
// CHECK-NOT: linalg
func.func @not_chunked(%q: tensor<1x4x1x8xf32>, %k: tensor<1x4x1x8xf32>, %v: tensor<1x4x1x4xf32>, %g: tensor<1x4x1x8xf32>, %beta: tensor<1x4x1xf32>) -> (tensor<1x4x1x4xf32>, tensor<1x1x8x4xf32>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta scale(0.35355339059327373) : (tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>, tensor<1x4x1x4xf32>, tensor<1x4x1x8xf32>, tensor<1x4x1xf32>) -> (tensor<1x4x1x4xf32>, tensor<1x1x8x4xf32>)
  return %o, %f : tensor<1x4x1x4xf32>, tensor<1x1x8x4xf32>
}

// -----

// A bf16 state is widened to f32 once before the loops and rounded once
// after them; the recurrence itself stays f32.
// CHECK-LABEL: func.func @bf16_state
// CHECK: %[[WIDE:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x1x8x4xbf16>) outs(%{{.*}} : tensor<1x1x8x4xf32>)
// CHECK: arith.extf
// CHECK: %[[LOOP:.*]]:2 = scf.for
// CHECK: tensor.extract_slice %[[WIDE]]
// CHECK: linalg.generic {{.*}} ins(%[[LOOP]]#1 : tensor<1x1x8x4xf32>) outs(%{{.*}} : tensor<1x1x8x4xbf16>)
// CHECK: arith.truncf
// CHECK: return %[[LOOP]]#0, %{{.*}} : tensor<1x20x1x4xf32>, tensor<1x1x8x4xbf16>
func.func @bf16_state(%q: tensor<1x20x1x8xf32>, %k: tensor<1x20x1x8xf32>, %v: tensor<1x20x1x4xf32>, %g: tensor<1x20x1x8xf32>, %beta: tensor<1x20x1xf32>, %s0: tensor<1x1x8x4xbf16>) -> (tensor<1x20x1x4xf32>, tensor<1x1x8x4xbf16>) {
  %o, %f = kimi.kda %q, %k, %v, %g, %beta initial_state %s0 scale(0.35355339059327373) {decay = #kimi.decay<lower = -5.0, chunk = 16, diag = dense>} : (tensor<1x20x1x8xf32>, tensor<1x20x1x8xf32>, tensor<1x20x1x4xf32>, tensor<1x20x1x8xf32>, tensor<1x20x1xf32>, tensor<1x1x8x4xbf16>) -> (tensor<1x20x1x4xf32>, tensor<1x1x8x4xbf16>)
  return %o, %f : tensor<1x20x1x4xf32>, tensor<1x1x8x4xbf16>
}

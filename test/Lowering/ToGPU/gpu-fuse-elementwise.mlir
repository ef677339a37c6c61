// RUN: kimi-opt %s -split-input-file -kimi-gpu-fuse-elementwise | FileCheck %s

// A softmax's scale, exp and row sum: the elementwise producers go into the
// reduction, one generic remains.
#id = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
// CHECK-LABEL: func.func @scale_exp_sum
// CHECK-COUNT-1: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: math.exp
// CHECK: arith.addf
func.func @scale_exp_sum(%x: tensor<4x128xf32>, %init: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4x128xf32>
  %c = arith.constant 0.125 : f32
  %scaled = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x128xf32>) outs(%e : tensor<4x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<4x128xf32>
  %exps = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%scaled : tensor<4x128xf32>) outs(%e : tensor<4x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = math.exp %a : f32
    linalg.yield %m : f32
  } -> tensor<4x128xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%exps : tensor<4x128xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %sum : tensor<4xf32>
}

// -----

// A norm's scaling before a linear layer stays its own op: fused into the
// product, the product would no longer be a plain multiply-accumulate for
// cuBLASLt.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, k) -> (t, k)>
#vec = affine_map<(t, k) -> (k)>
// CHECK-LABEL: func.func @norm_then_linear
// CHECK: %[[N:.*]] = linalg.generic
// CHECK: arith.mulf
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[N]], %arg2
func.func @norm_then_linear(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %w: tensor<32x64xf32>,
                            %acc: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %e = tensor.empty() : tensor<8x64xf32>
  %n = linalg.generic {indexing_maps = [#id, #vec, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %g : tensor<8x64xf32>, tensor<64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<8x64xf32>
  %y = linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%n, %w : tensor<8x64xf32>, tensor<32x64xf32>) outs(%acc : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}

// -----

// A producer that a product also reads is kept whole: fusing it into the
// other consumer alone would compute it twice and keep its buffer.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, k) -> (t, k)>
// CHECK-LABEL: func.func @shared_with_a_product
// CHECK-COUNT-3: linalg.generic
func.func @shared_with_a_product(%x: tensor<8x64xf32>, %w: tensor<32x64xf32>,
                                 %acc: tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<8x64xf32>) {
  %e = tensor.empty() : tensor<8x64xf32>
  %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.negf %a : f32
    linalg.yield %m : f32
  } -> tensor<8x64xf32>
  %y = linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%n, %w : tensor<8x64xf32>, tensor<32x64xf32>) outs(%acc : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %z = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%n : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = math.exp %a : f32
    linalg.yield %m : f32
  } -> tensor<8x64xf32>
  return %y, %z : tensor<8x32xf32>, tensor<8x64xf32>
}

// -----

// A consumer that reads each element of the producer 1,024 times (its j
// loop is not in the operand's map): the tanh is computed once into its
// own generic, not again for every j. Read 16 times, it is fused.
#ei = affine_map<(e, j, i) -> (e, i)>
#eji = affine_map<(e, j, i) -> (e, j, i)>
#ej = affine_map<(e, j, i) -> (e, j)>
#p = affine_map<(e, i) -> (e, i)>
// CHECK-LABEL: func.func @reread_not_fused
// CHECK: math.tanh
// CHECK-NEXT: linalg.yield
// CHECK: linalg.generic
// CHECK-NOT: math.tanh
// CHECK: arith.maximumf
// CHECK-LABEL: func.func @reread_16_fused
// CHECK-COUNT-1: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: math.tanh
// CHECK: arith.maximumf
func.func @reread_not_fused(%x: tensor<8x64xf32>, %w: tensor<8x1024x64xf32>, %init: tensor<8x1024xf32>) -> tensor<8x1024xf32> {
  %e = tensor.empty() : tensor<8x64xf32>
  %t = linalg.generic {indexing_maps = [#p, #p], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = math.tanh %a : f32
    linalg.yield %m : f32
  } -> tensor<8x64xf32>
  %r = linalg.generic {indexing_maps = [#ei, #eji, #ej], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%t, %w : tensor<8x64xf32>, tensor<8x1024x64xf32>) outs(%init : tensor<8x1024xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.maximumf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x1024xf32>
  return %r : tensor<8x1024xf32>
}
func.func @reread_16_fused(%x: tensor<8x64xf32>, %w: tensor<8x16x64xf32>, %init: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8x64xf32>
  %t = linalg.generic {indexing_maps = [#p, #p], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = math.tanh %a : f32
    linalg.yield %m : f32
  } -> tensor<8x64xf32>
  %r = linalg.generic {indexing_maps = [#ei, #eji, #ej], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%t, %w : tensor<8x64xf32>, tensor<8x16x64xf32>) outs(%init : tensor<8x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.maximumf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

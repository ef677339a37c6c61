// RUN: kimi-opt %s -split-input-file --kimi-prepare-bufferization | FileCheck %s
// RUN: kimi-opt %s -split-input-file --kimi-prepare-bufferization="splats-as-fills empty-per-writer" | FileCheck %s --check-prefix=GPU

// Entries get the C interface and read-only arguments; argument and result
// attributes go. Private functions keep their arguments writable.
// CHECK-LABEL: func.func @entry
// CHECK-SAME: (%{{.*}}: tensor<4xf32> {bufferization.writable = false}) -> tensor<4xf32>
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func private @helper
// CHECK-SAME: (%{{.*}}: tensor<4xf32>) -> tensor<4xf32> {
func.func @entry(%x: tensor<4xf32> {kimi.name = "state"}) -> (tensor<4xf32> {kimi.name = "out"}) {
  %0 = func.call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// A zero fill two products write into is cloned, one per writer (and its
// empty with it); a reader of the fill keeps the first.
// CHECK-LABEL: func.func @products
// CHECK-COUNT-2: linalg.fill
// CHECK-NOT: linalg.fill
func.func @products(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>, %c: tensor<8x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = linalg.matmul ins(%a, %c : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0, %1 : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// splats-as-fills: a splat constant becomes a fill of a fresh tensor (no
// global after bufferization); without the option it stays.
// CHECK-LABEL: func.func @splat
// CHECK: arith.constant dense<1.000000e+00> : tensor<16xf32>
// GPU-LABEL: func.func @splat
// GPU-NOT: dense<
// GPU: %[[E:.*]] = tensor.empty() : tensor<16xf32>
// GPU: linalg.fill ins(%{{.*}} : f32) outs(%[[E]] : tensor<16xf32>)
func.func @splat() -> tensor<16xf32> {
  %0 = arith.constant dense<1.0> : tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

// empty-per-writer: two elementwise ops that wrote into one tensor.empty
// get one each.
// CHECK-LABEL: func.func @empties
// CHECK-COUNT-1: tensor.empty
// GPU-LABEL: func.func @empties
// GPU-COUNT-2: tensor.empty
#map = affine_map<(d0) -> (d0)>
func.func @empties(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.mulf %x, %x : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

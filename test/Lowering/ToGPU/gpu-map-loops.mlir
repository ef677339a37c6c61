// RUN: kimi-opt %s -split-input-file -kimi-gpu-map-loops | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-gpu-map-loops=block-size=128 | FileCheck %s --check-prefix=B128

// A 3-D loop nest is collapsed to one linear dimension (innermost fastest)
// and tiled into blocks of 256 threads: a 1-D grid whatever the rank.
// CHECK-LABEL: func.func @nest
// CHECK: %[[N:.*]] = arith.muli %{{.*}}, %c7{{.*}} : index
// CHECK: %[[B:.*]] = arith.constant 256 : index
// CHECK: scf.parallel (%[[O:.*]]) = (%{{.*}}) to (%{{.*}}) step (%{{.*}}) {
// CHECK-NEXT: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%{{.*}}) step (%{{.*}}) {
// CHECK: arith.cmpi ult, %{{.*}}, %[[N]] : index
// CHECK: scf.if
// CHECK: arith.remsi
// CHECK: memref.store
// CHECK: mapping = [#gpu.loop_dim_map<processor = thread_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]
// CHECK: mapping = [#gpu.loop_dim_map<processor = block_x, map = (d0) -> (d0), bound = (d0) -> (d0)>]
// B128: arith.constant 128 : index
func.func @nest(%m: memref<3x5x7xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  %c7 = arith.constant 7 : index
  %f = arith.constant 1.0 : f32
  scf.parallel (%i, %j, %k) = (%c0, %c0, %c0) to (%c3, %c5, %c7) step (%c1, %c1, %c1) {
    memref.store %f, %m[%i, %j, %k] : memref<3x5x7xf32>
    scf.reduce
  }
  return
}

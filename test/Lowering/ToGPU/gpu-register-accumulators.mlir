// RUN: kimi-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(kimi-gpu-register-accumulators))' | FileCheck %s

// A count over a token's slots, as the sorted experts' counting kernels
// run it in one thread: the element is loaded once, carried, stored once.
// CHECK-LABEL: func.func @count
// CHECK: scf.parallel (%[[E:.*]], %[[B:.*]]) =
// CHECK: %[[INIT:.*]] = memref.load %arg1[%[[E]], %[[B]]]
// CHECK: %[[R:.*]] = scf.for {{.*}} iter_args(%[[OUTER:.*]] = %[[INIT]]) -> (i32)
// CHECK: scf.for {{.*}} iter_args(%[[ACC:.*]] = %[[OUTER]]) -> (i32)
// CHECK-NOT: memref.store
// CHECK: arith.addi %[[ACC]]
// CHECK: scf.yield
// CHECK: scf.yield
// CHECK: memref.store %[[R]], %arg1[%[[E]], %[[B]]]
func.func @count(%ids: memref<4x16x8xi32>, %counts: memref<64x4xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  scf.parallel (%e, %b) = (%c0, %c0) to (%c64, %c4) step (%c1, %c1) {
    scf.for %t = %c0 to %c16 step %c1 {
      scf.for %s = %c0 to %c8 step %c1 {
        %id = memref.load %ids[%b, %t, %s] : memref<4x16x8xi32>
        %old = memref.load %counts[%e, %b] : memref<64x4xi32>
        %ei = arith.index_cast %e : index to i32
        %hit = arith.cmpi eq, %id, %ei : i32
        %inc = arith.select %hit, %one, %zero : i32
        %new = arith.addi %old, %inc : i32
        memref.store %new, %counts[%e, %b] : memref<64x4xi32>
      }
    }
    scf.reduce
  }
  return
}

// -----

// Kept: the loop also writes another buffer (which could be the same
// memory), or reads the accumulator's buffer elsewhere, or stores to an
// element that moves with the loop.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: scf.for %{{[a-z0-9_]+}} = %c0 to %c8 step %c1 {
func.func @kept(%a: memref<8xf32>, %m: memref<8xf32>, %other: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %a[%i] : memref<8xf32>
    %old = memref.load %m[%c0] : memref<8xf32>
    %new = arith.addf %old, %x : f32
    memref.store %new, %m[%c0] : memref<8xf32>
    memref.store %x, %other[%i] : memref<8xf32>
  }
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %m[%i] : memref<8xf32>
    %old = memref.load %m[%c0] : memref<8xf32>
    %new = arith.addf %old, %x : f32
    memref.store %new, %m[%c0] : memref<8xf32>
  }
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %a[%i] : memref<8xf32>
    %old = memref.load %m[%i] : memref<8xf32>
    %new = arith.addf %old, %x : f32
    memref.store %new, %m[%i] : memref<8xf32>
  }
  return
}

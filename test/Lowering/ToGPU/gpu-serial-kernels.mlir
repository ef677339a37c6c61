// RUN: kimi-opt %s -split-input-file -kimi-gpu-serial-kernels -verify-diagnostics | FileCheck %s

// A whole-buffer reduction left in host code (no parallel dimension) runs
// as a one-thread kernel, its loop inside.
// CHECK-LABEL: func.func @reduce
// CHECK: gpu.launch blocks({{.*}}) in ({{.*}} = %[[ONE:.*]], {{.*}} = %[[ONE]], {{.*}} = %[[ONE]]) threads
// CHECK: scf.for
// CHECK: memref.load
// CHECK: memref.store
// CHECK: gpu.terminator
func.func @reduce(%in: memref<64xf32>, %out: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  scf.for %i = %c0 to %c64 step %c1 {
    %a = memref.load %in[%i] : memref<64xf32>
    %s = memref.load %out[] : memref<f32>
    %t = arith.addf %a, %s : f32
    memref.store %t, %out[] : memref<f32>
  }
  return
}

// -----

// Deallocation bookkeeping (index pointers, i1 ownership flags) stays on
// the host stack; its accesses are not kernels.
// CHECK-LABEL: func.func @bookkeeping
// CHECK: memref.alloca() : memref<2xi1>
// CHECK-NOT: gpu.launch
// CHECK: memref.store
// CHECK-NOT: memref.dealloc
func.func @bookkeeping(%flag: i1) -> i1 {
  %c0 = arith.constant 0 : index
  %m = memref.alloc() : memref<2xi1>
  memref.store %flag, %m[%c0] : memref<2xi1>
  %v = memref.load %m[%c0] : memref<2xi1>
  memref.dealloc %m : memref<2xi1>
  return %v : i1
}

// -----

// Host control flow that depends on device data cannot run: an error.
func.func @host_reads(%in: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'memref.load': host code of the GPU model needs this value after a one-thread kernel computed it from device memory}}
  %v = memref.load %in[%c0] : memref<4xf32>
  return %v : f32
}

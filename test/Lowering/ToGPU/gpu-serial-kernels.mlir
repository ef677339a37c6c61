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

// An i1 buffer that a kernel writes is model data (expert-parallel masks),
// not bookkeeping: it stays a device allocation, and a host access to it
// becomes a one-thread kernel.
// CHECK-LABEL: func.func @device_mask
// CHECK: %[[MASK:.*]] = memref.alloc() : memref<8xi1>
// CHECK-NOT: memref.alloca
// CHECK: gpu.launch
// CHECK: memref.store %{{.*}}, %[[MASK]]
// CHECK: gpu.launch
// CHECK: memref.load %[[MASK]]
// CHECK: memref.dealloc %[[MASK]]
func.func @device_mask(%in: memref<8xf32>, %out: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %mask = memref.alloc() : memref<8xi1>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c8, %sy = %c1, %sz = %c1) {
    %v = memref.load %in[%tx] : memref<8xf32>
    %p = arith.cmpf ogt, %v, %zero : f32
    memref.store %p, %mask[%tx] : memref<8xi1>
    gpu.terminator
  }
  %first = memref.load %mask[%c0] : memref<8xi1>
  %x = memref.load %in[%c0] : memref<8xf32>
  %y = arith.select %first, %x, %zero : f32
  memref.store %y, %out[] : memref<f32>
  memref.dealloc %mask : memref<8xi1>
  return
}

// -----

// Host control flow that depends on device data cannot run: an error.
func.func @host_reads(%in: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'memref.load': host code of the GPU model needs this value after a one-thread kernel computed it from device memory}}
  %v = memref.load %in[%c0] : memref<4xf32>
  return %v : f32
}

// -----

// kimi_host_read_i32 (a load, as kimi-lower-to-linalg defines it) becomes
// the runtime's synchronising read of the element's address; the host uses
// the value to size a buffer, which no one-thread kernel may compute.
// CHECK-LABEL: func.func @sized_by_device_count
// CHECK: %[[N:.*]] = call @kimi_host_read_i32(%{{.*}}) : (memref<i32>) -> i32
// CHECK: memref.alloc(%{{.*}}) : memref<?xf32>
// CHECK-LABEL: func.func private @kimi_host_read_i32
// CHECK-NOT: memref.load
// CHECK: %[[META:.*]], %[[OFF:.*]] = memref.extract_strided_metadata
// CHECK: %[[PTR:.*]] = memref.extract_aligned_pointer_as_index
// CHECK: %[[BYTES:.*]] = arith.muli %[[OFF]], %c4
// CHECK: %[[ADDR:.*]] = arith.addi %[[PTR]], %[[BYTES]]
// CHECK: %[[V:.*]] = call @kimi_gpu_read_i32(%[[ADDR]]) : (index) -> i32
// CHECK: return %[[V]]
// CHECK: func.func private @kimi_gpu_read_i32(index) -> i32
func.func @sized_by_device_count(%count: memref<i32>) -> memref<?xf32> {
  %n = call @kimi_host_read_i32(%count) : (memref<i32>) -> i32
  %i = arith.index_cast %n : i32 to index
  %buf = memref.alloc(%i) : memref<?xf32>
  return %buf : memref<?xf32>
}
func.func private @kimi_host_read_i32(%b: memref<i32>) -> i32 {
  %v = memref.load %b[] : memref<i32>
  return %v : i32
}

// -----

// expected-error @+1 {{'kimi_host_read_i32' must take a memref<i32> and return its value}}
func.func private @kimi_host_read_i32(%b: memref<2xi32>) -> i32 {
  %c0 = arith.constant 0 : index
  %v = memref.load %b[%c0] : memref<2xi32>
  return %v : i32
}

// -----

// expected-error @+1 {{'kimi_host_read_i32' must take a memref<i32> and return its value}}
func.func private @kimi_host_read_i32() -> i32 {
  %v = arith.constant 0 : i32
  return %v : i32
}

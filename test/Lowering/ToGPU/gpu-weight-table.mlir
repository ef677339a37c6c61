// RUN: kimi-opt %s -split-input-file -kimi-gpu-weight-table -verify-diagnostics | FileCheck %s

// Weight globals become entries of one runtime-filled table of device
// pointers; each use builds a descriptor around the loaded pointer.
// CHECK: llvm.mlir.global external @kimi_gpu_weights() {addr_space = 0 : i32, alignment = 64 : i64} : !llvm.array<2 x ptr>
// CHECK-NOT: memref.global "public" @kimi_w_
// CHECK-LABEL: func.func @f
// CHECK: %[[T:.*]] = llvm.mlir.addressof @kimi_gpu_weights : !llvm.ptr
// CHECK: %[[S:.*]] = llvm.getelementptr %[[T]][0, 1] : (!llvm.ptr) -> !llvm.ptr, !llvm.array<2 x ptr>
// CHECK: %[[P:.*]] = llvm.load %[[S]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.insertvalue %[[P]]
// CHECK: llvm.mlir.constant(3 : i64)
// CHECK: %[[M:.*]] = builtin.unrealized_conversion_cast %{{.*}} : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> to memref<4x3xf32>
// CHECK: memref.load %[[M]]
// CHECK-NOT: memref.get_global
memref.global "public" @kimi_w_0 : memref<8xf32> = uninitialized {alignment = 64 : i64}
memref.global "public" @kimi_w_1 : memref<4x3xf32> = uninitialized {alignment = 64 : i64}
func.func @f(%i: index) -> f32 {
  %w = memref.get_global @kimi_w_1 : memref<4x3xf32>
  %v = memref.load %w[%i, %i] : memref<4x3xf32>
  return %v : f32
}

// -----

// A bufferized constant is host memory: no kernel may read it.
memref.global "private" constant @offsets : memref<2xi32> = dense<[0, 64]>
func.func @constant() -> memref<2xi32> {
  // expected-error @+1 {{global @offsets would be host memory in the GPU model}}
  %c = memref.get_global @offsets : memref<2xi32>
  return %c : memref<2xi32>
}

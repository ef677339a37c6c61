// RUN: kimi-opt %s --kimi-copies-as-linalg | FileCheck %s

// CHECK-LABEL: func.func @copy
// CHECK: linalg.copy ins(%{{.*}} : memref<4x?xf32, strided<[?, 1], offset: ?>>) outs(%{{.*}} : memref<4x?xf32>)
// CHECK-NOT: memref.copy
func.func @copy(%a: memref<4x?xf32, strided<[?, 1], offset: ?>>, %b: memref<4x?xf32>) {
  memref.copy %a, %b : memref<4x?xf32, strided<[?, 1], offset: ?>> to memref<4x?xf32>
  return
}

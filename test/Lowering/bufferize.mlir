// RUN: kimi-opt %s --kimi-prepare-bufferization --kimi-bufferize | FileCheck %s

// Function boundaries bufferize with identity layouts; an update of a
// read-only entry argument copies it first, as linalg.copy (no memref.copy:
// the shared object must not need MLIR's runner library).
// CHECK-LABEL: func.func @update
// CHECK-SAME: (%[[X:.*]]: memref<8xf32>) -> memref<8xf32>
// CHECK: %[[A:.*]] = memref.alloc() {{.*}}: memref<8xf32>
// CHECK: linalg.copy ins(%[[X]] : memref<8xf32>) outs(%[[A]] : memref<8xf32>)
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[A]] : memref<8xf32>)
// CHECK-NOT: memref.copy
// CHECK: return %[[A]] : memref<8xf32>
func.func @update(%x: tensor<8xf32>) -> tensor<8xf32> {
  %c = arith.constant 2.0 : f32
  %i = arith.constant 0 : index
  %0 = tensor.insert %c into %x[%i] : tensor<8xf32>
  %1 = linalg.fill ins(%c : f32) outs(%0 : tensor<8xf32>) -> tensor<8xf32>
  return %1 : tensor<8xf32>
}

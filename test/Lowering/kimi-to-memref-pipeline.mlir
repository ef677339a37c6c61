// RUN: kimi-opt %s --kimi-to-linalg-pipeline | FileCheck %s --check-prefix=LINALG
// RUN: kimi-opt %s --kimi-to-memref-pipeline | FileCheck %s --check-prefix=MEMREF
// RUN: kimi-opt %s --kimi-to-memref-pipeline --kimi-cpu-to-llvm-pipeline | FileCheck %s --check-prefix=LLVM

// A norm over a weight through the stages both model targets share, then
// the CPU's: linalg on tensors with the weight as a runtime-filled global,
// bufferized memrefs (the entry's result allocated, nothing left to free),
// and the LLVM dialect with the entry's C interface.
// LINALG: memref.global "public" @kimi_w_0 : memref<64xf32> = uninitialized
// LINALG-LABEL: func.func @decode
// LINALG-NOT: kimi.
// LINALG: linalg.generic
// LINALG: return %{{.*}} : tensor<2x64xf32>

// MEMREF-LABEL: func.func @decode
// MEMREF-SAME: (%{{.*}}: memref<2x64xf32>) -> memref<2x64xf32>
// MEMREF-SAME: llvm.emit_c_interface
// MEMREF-NOT: tensor<
// MEMREF-NOT: bufferization.
// MEMREF: return %{{.*}} : memref<2x64xf32>

// LLVM: llvm.mlir.global external @kimi_w_0()
// LLVM: llvm.func @decode(
// LLVM: llvm.func @_mlir_ciface_decode(
kimi.weight @model.norm.weight : tensor<64xf32>
func.func @decode(%x: tensor<2x64xf32>) -> tensor<2x64xf32> {
  %w = kimi.weight_ref @model.norm.weight : tensor<64xf32>
  %0 = kimi.rms_norm %x, %w eps(1.0e-5) : tensor<2x64xf32>, tensor<64xf32> -> tensor<2x64xf32>
  return %0 : tensor<2x64xf32>
}

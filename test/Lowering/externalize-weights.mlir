// RUN: kimi-opt %s -split-input-file --kimi-externalize-weights -verify-diagnostics | FileCheck %s

// Weights become uninitialised public globals named by slot; references read
// them through a restrict, read-only to_tensor.
// CHECK: memref.global "public" @kimi_w_0 : memref<8x4xf32> = uninitialized {alignment = 64 : i64}
// CHECK: memref.global "public" @kimi_w_1 : memref<4xf32> = uninitialized {alignment = 64 : i64}
// CHECK-NOT: kimi.weight
// CHECK-LABEL: func.func @f
// CHECK: %[[G:.*]] = memref.get_global @kimi_w_1 : memref<4xf32>
// CHECK: bufferization.to_tensor %[[G]] restrict : memref<4xf32> to tensor<4xf32>
kimi.weight @model.layers.0.mlp.gate_proj.weight : tensor<8x4xf32>
kimi.weight @model.norm.weight : tensor<4xf32>
func.func @f() -> tensor<4xf32> {
  %w = kimi.weight_ref @model.norm.weight : tensor<4xf32>
  return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{cannot be a CPU global: compile with dense float weights}}
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<4x32x64xf4E2M1FN>

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

// MXFP4 weights are held as their bytes: f4E2M1FN values two a byte, E8M0
// scales one a byte; the casts to those bytes read the globals.
// CHECK: memref.global "public" @kimi_w_0 : memref<4x32x32xi8> = uninitialized
// CHECK: memref.global "public" @kimi_w_1 : memref<4x32x2xi8> = uninitialized
// CHECK-LABEL: func.func @mx
// CHECK-DAG: memref.get_global @kimi_w_0 : memref<4x32x32xi8>
// CHECK-DAG: memref.get_global @kimi_w_1 : memref<4x32x2xi8>
// CHECK-NOT: unrealized_conversion_cast
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<4x32x64xf4E2M1FN>
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight_scale" : tensor<4x32x2xf8E8M0FNU>
func.func @mx() -> (tensor<4x32x32xi8>, tensor<4x32x2xi8>) {
  %w = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<4x32x64xf4E2M1FN>
  %s = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.gate_proj.weight_scale" : tensor<4x32x2xf8E8M0FNU>
  %wb = builtin.unrealized_conversion_cast %w : tensor<4x32x64xf4E2M1FN> to tensor<4x32x32xi8>
  %sb = builtin.unrealized_conversion_cast %s : tensor<4x32x2xf8E8M0FNU> to tensor<4x32x2xi8>
  return %wb, %sb : tensor<4x32x32xi8>, tensor<4x32x2xi8>
}

// -----

// An MXFP4 weight read as values (not through the cast to its bytes).
kimi.weight @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<4x32x64xf4E2M1FN>
func.func @values() -> tensor<4x32x64xf4E2M1FN> {
  %w = kimi.weight_ref @"model.layers.1.mlp.experts.{e}.up_proj.weight" : tensor<4x32x64xf4E2M1FN>
  // expected-error @+1 {{reads the MXFP4 weight 'model.layers.1.mlp.experts.{e}.up_proj.weight' as 'tensor<4x32x64xf4E2M1FN>'; the CPU reads MXFP4 only as its bytes 'tensor<4x32x32xi8>'}}
  return %w : tensor<4x32x64xf4E2M1FN>
}

// -----

// expected-error @+1 {{cannot be a CPU global: compile with dense float or MXFP4 weights}}
kimi.weight @"model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<4x32x64xf8E4M3FN>

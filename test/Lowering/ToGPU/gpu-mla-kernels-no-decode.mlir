// RUN: kimi-opt %s -kimi-gpu-mla-kernels="decode-kernels=false" | FileCheck %s

// With decode-kernels=false one-token decode keeps the absorbed kimi op for
// kimi-lower-to-linalg, without a remark, and the grown cache stays.
// CHECK-LABEL: func.func @decode
// CHECK: kimi.cache_insert
// CHECK: kimi.mla_decode
// CHECK-NOT: gpu.launch_func
func.func @decode(%q: tensor<1x1x4x48xf32>, %cache: tensor<1x?x80xf32>, %row: tensor<1x1x80xf32>,
                  %kvb: tensor<256x64xf32>, %len: tensor<1xi32>) -> tensor<1x1x4x32xf32> {
  %grown = kimi.cache_insert %row into %cache lengths %len : (tensor<1x?x80xf32>, tensor<1x1x80xf32>, tensor<1xi32>) -> tensor<1x?x80xf32>
  %one = arith.constant dense<1> : tensor<1xi32>
  %valid = arith.addi %len, %one : tensor<1xi32>
  %o = kimi.mla_decode %q, %grown, %kvb lengths %valid scale(0.14433756729740643) : (tensor<1x1x4x48xf32>, tensor<1x?x80xf32>, tensor<256x64xf32>, tensor<1xi32>) -> tensor<1x1x4x32xf32>
  return %o : tensor<1x1x4x32xf32>
}

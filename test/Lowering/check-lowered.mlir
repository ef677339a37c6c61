// RUN: kimi-opt %s --kimi-check-lowered | FileCheck %s

// Without kimi ops the module passes unchanged.
// CHECK-LABEL: func.func @plain
// CHECK: arith.addf
func.func @plain(%a: f32) -> f32 {
  %0 = arith.addf %a, %a : f32
  return %0 : f32
}

// RUN: kimi-opt %s --kimi-lower-to-linalg=sorted-experts-min-tokens=32 | FileCheck %s --check-prefix=SORTED
// RUN: kimi-opt %s --kimi-lower-to-linalg=sorted-experts-min-tokens=33 | FileCheck %s --check-prefix=GATHER
// RUN: kimi-opt %s --kimi-lower-to-linalg=sorted-experts-min-tokens=32 | kimi-opt -o /dev/null

// MXFP4 experts are read as their bytes where the loops use them: each
// table is cast to its packed bytes (two e2m1 codes a byte) and its scales
// to theirs (one E8M0 a byte), and every weight is decoded in the loop body
// from the byte at column / 2 (nibble column % 2) and the scale at
// column / 32, built as f32 bits. No dense copy of a table is made.
// SORTED-LABEL: func.func @mx
// SORTED: call @kimi_host_read_i32
// SORTED-DAG: builtin.unrealized_conversion_cast %{{.*}} : tensor<4x32x32xf4E2M1FN> to tensor<4x32x16xi8>
// SORTED-DAG: builtin.unrealized_conversion_cast %{{.*}} : tensor<4x32x1xf8E8M0FNU> to tensor<4x32x1xi8>
// SORTED: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<4x?x32xf32>) outs(%{{.*}} : tensor<4x?x32xf32>)
// SORTED: tensor.extract %{{.*}} : tensor<4x32x16xi8>
// SORTED: arith.shrui
// SORTED: arith.bitcast %{{.*}} : i32 to f32
// SORTED: tensor.extract %{{.*}} : tensor<4x32x1xi8>
// SORTED-NOT: arith.extf %{{.*}} : f4E2M1FN
// GATHER-LABEL: func.func @mx
// GATHER-NOT: kimi_host_read_i32
// GATHER: tensor.extract %{{.*}} : tensor<4x32x16xi8>
// GATHER: arith.bitcast %{{.*}} : i32 to f32
// GATHER-NOT: f4E2M1FN to f32
func.func @mx(%z: tensor<32x32xf32>, %w: tensor<32x2xf32>, %i: tensor<32x2xi32>, %g: tensor<4x32x32xf4E2M1FN>, %u: tensor<4x32x32xf4E2M1FN>, %d: tensor<4x32x32xf4E2M1FN>, %gs: tensor<4x32x1xf8E8M0FNU>, %us: tensor<4x32x1xf8E8M0FNU>, %ds: tensor<4x32x1xf8E8M0FNU>) -> tensor<32x32xf32> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) : (tensor<32x32xf32>, tensor<32x2xf32>, tensor<32x2xi32>, tensor<4x32x32xf4E2M1FN>, tensor<4x32x32xf4E2M1FN>, tensor<4x32x32xf4E2M1FN>, tensor<4x32x1xf8E8M0FNU>, tensor<4x32x1xf8E8M0FNU>, tensor<4x32x1xf8E8M0FNU>) -> tensor<32x32xf32>
  return %r : tensor<32x32xf32>
}

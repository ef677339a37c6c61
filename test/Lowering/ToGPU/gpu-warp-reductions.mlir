// RUN: kimi-opt %s -split-input-file -kimi-gpu-warp-reductions=unroll=1 | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-gpu-warp-reductions | FileCheck %s --check-prefix=UNROLL

// A matrix-vector product (a decode step's routed expert): each output's
// 1024-long loop becomes 32 lanes of 32 iterations, a shuffle butterfly and
// one update of the output by lane 0.
// CHECK-LABEL: func.func @matvec
// CHECK: scf.parallel (%[[N:.*]], %[[LANE:.*]]) = (%{{.*}}, %{{.*}}) to (%{{.*}}, %[[C32:.*]]) step
// CHECK: %[[START:.*]] = arith.addi
// CHECK: %[[PART:.*]] = scf.for %[[K:.*]] = %[[START]] to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK: memref.load %arg1[%[[N]], %[[K]]]
// CHECK-NOT: memref.store
// CHECK: scf.yield
// CHECK: gpu.shuffle xor %[[PART]]
// CHECK-COUNT-4: gpu.shuffle xor
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[LANE]]
// CHECK: scf.if %[[FIRST]]
// CHECK: memref.load %arg2[%[[N]]]
// CHECK: arith.addf
// CHECK: memref.store {{.*}}, %arg2[%[[N]]]
// By default a lane takes 8 iterations per trip (k, k + 32, ..., k + 224),
// each into its own partial, while k + 224 < 1024; the partials are added
// in order, and the remaining iterations (none here) run one per trip.
// UNROLL-LABEL: func.func @matvec
// UNROLL: %[[STRIDE:.*]] = arith.muli %c1, %c32
// UNROLL: %[[SPAN:.*]] = arith.muli %[[STRIDE]], %c8
// UNROLL: %[[LAST:.*]] = arith.muli %[[STRIDE]], %c7
// UNROLL: %[[MAINUB:.*]] = arith.subi %c1024, %[[LAST]]
// UNROLL: %[[P:.*]]:8 = scf.for %[[K:.*]] = %{{.*}} to %[[MAINUB]] step %[[SPAN]] iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
// UNROLL: memref.load %arg1[%{{.*}}, %[[K]]]
// UNROLL-COUNT-7: memref.load %arg1
// UNROLL: scf.yield
// UNROLL: arith.ceildivsi
// UNROLL: %[[S1:.*]] = arith.addf %[[P]]#0, %[[P]]#1
// UNROLL: %[[S2:.*]] = arith.addf %[[S1]], %[[P]]#2
// UNROLL: %[[REST:.*]] = scf.for %{{.*}} = %{{.*}} to %c1024 step %[[STRIDE]] iter_args(%{{.*}} = %{{.*}}) -> (f32)
// UNROLL: gpu.shuffle xor %[[REST]]
func.func @matvec(%x: memref<1024xf32>, %w: memref<96x1024xf32>, %o: memref<96xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c96 = arith.constant 96 : index
  %c1024 = arith.constant 1024 : index
  scf.parallel (%n) = (%c0) to (%c96) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %x[%k] : memref<1024xf32>
      %b = memref.load %w[%n, %k] : memref<96x1024xf32>
      %acc = memref.load %o[%n] : memref<96xf32>
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      memref.store %s, %o[%n] : memref<96xf32>
    }
    scf.reduce
  }
  return
}

// -----

// Attention's row maximum over a cache of dynamic length: dynamic loops are
// sequence lengths and are spread over the lanes too.
// CHECK-LABEL: func.func @row_max_over_keys
// CHECK: scf.parallel (%{{.*}}, %[[LANE:.*]]) = (%{{.*}}, %{{.*}}) to (%{{.*}}, %{{.*}}) step
// CHECK: scf.for %{{.*}} = %{{.*}} to %arg2 step
// CHECK: arith.maximumf
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: arith.cmpi eq, %[[LANE]]
func.func @row_max_over_keys(%s: memref<64x?xf32>, %m: memref<64xf32>, %keys: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  scf.parallel (%r) = (%c0) to (%c64) step (%c1) {
    scf.for %k = %c0 to %keys step %c1 {
      %x = memref.load %s[%r, %k] : memref<64x?xf32>
      %acc = memref.load %m[%r] : memref<64xf32>
      %y = arith.maximumf %acc, %x : f32
      memref.store %y, %m[%r] : memref<64xf32>
    }
    scf.reduce
  }
  return
}

// -----

// Two accumulators in one loop (gate and up projections of an expert) and a
// maximum (a softmax's running max), each with its identity.
// CHECK-LABEL: func.func @two_and_max
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[ZERO]], %{{.*}} = %[[NEGINF]]) -> (f32, f32)
// CHECK: arith.maximumf
// CHECK: scf.if
// CHECK-COUNT-2: memref.store
// Unrolled, the partials of the two accumulators interleave per copy, each
// combined with its own operation.
// UNROLL-LABEL: func.func @two_and_max
// UNROLL: scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// UNROLL: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (f32, f32)
// UNROLL-COUNT-5: arith.maximumf
func.func @two_and_max(%x: memref<512xf32>, %w: memref<8x512xf32>, %o: memref<8xf32>, %m: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c512 = arith.constant 512 : index
  scf.parallel (%n) = (%c0) to (%c8) step (%c1) {
    scf.for %k = %c0 to %c512 step %c1 {
      %a = memref.load %x[%k] : memref<512xf32>
      %b = memref.load %w[%n, %k] : memref<8x512xf32>
      %p = arith.mulf %a, %b : f32
      %acc = memref.load %o[%n] : memref<8xf32>
      %s = arith.addf %acc, %p : f32
      memref.store %s, %o[%n] : memref<8xf32>
      %mx = memref.load %m[%n] : memref<8xf32>
      %t = arith.maximumf %mx, %b : f32
      memref.store %t, %m[%n] : memref<8xf32>
    }
    scf.reduce
  }
  return
}

// -----

// Left alone: a loop shorter than min-trip-count, a loop that reads the
// buffer it accumulates into elsewhere (a running value), a recurrence
// whose input depends on the running value, and a bf16 accumulator (the
// shuffles move 32-bit lanes).
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: gpu.shuffle
// CHECK: return
func.func @left_alone(%x: memref<1024xf32>, %o: memref<4xf32>, %xh: memref<1024xbf16>, %oh: memref<4xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %c1024 = arith.constant 1024 : index
  scf.parallel (%n) = (%c0) to (%c4) step (%c1) {
    scf.for %k = %c0 to %c64 step %c1 {
      %a = memref.load %x[%k] : memref<1024xf32>
      %acc = memref.load %o[%n] : memref<4xf32>
      %s = arith.addf %acc, %a : f32
      memref.store %s, %o[%n] : memref<4xf32>
    }
    scf.reduce
  }
  scf.parallel (%n) = (%c0) to (%c4) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %x[%k] : memref<1024xf32>
      %peek = memref.load %o[%c0] : memref<4xf32>
      %acc = memref.load %o[%n] : memref<4xf32>
      %p = arith.mulf %a, %peek : f32
      %s = arith.addf %acc, %p : f32
      memref.store %s, %o[%n] : memref<4xf32>
    }
    scf.reduce
  }
  scf.parallel (%n) = (%c0) to (%c4) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %x[%k] : memref<1024xf32>
      %acc = memref.load %o[%n] : memref<4xf32>
      %p = arith.mulf %a, %acc : f32
      %s = arith.addf %acc, %p : f32
      memref.store %s, %o[%n] : memref<4xf32>
    }
    scf.reduce
  }
  scf.parallel (%n) = (%c0) to (%c4) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %xh[%k] : memref<1024xbf16>
      %acc = memref.load %oh[%n] : memref<4xbf16>
      %s = arith.addf %acc, %a : bf16
      memref.store %s, %oh[%n] : memref<4xbf16>
    }
    scf.reduce
  }
  return
}

// -----

// Many outputs (2,048 > unroll-max-outputs) or a dynamic number of them:
// the other warps hide the latency, so a lane takes one iteration per trip.
// UNROLL-LABEL: func.func @many_outputs
// UNROLL: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32)
// UNROLL-NOT: scf.for
// UNROLL: gpu.shuffle xor
// UNROLL-LABEL: func.func @dynamic_outputs
// UNROLL: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32)
// UNROLL-NOT: scf.for
// UNROLL: gpu.shuffle xor
func.func @many_outputs(%x: memref<1024xf32>, %w: memref<2048x1024xf32>, %o: memref<2048xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2048 = arith.constant 2048 : index
  %c1024 = arith.constant 1024 : index
  scf.parallel (%n) = (%c0) to (%c2048) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %x[%k] : memref<1024xf32>
      %b = memref.load %w[%n, %k] : memref<2048x1024xf32>
      %acc = memref.load %o[%n] : memref<2048xf32>
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      memref.store %s, %o[%n] : memref<2048xf32>
    }
    scf.reduce
  }
  return
}
func.func @dynamic_outputs(%x: memref<1024xf32>, %w: memref<?x1024xf32>, %o: memref<?xf32>, %rows: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1024 = arith.constant 1024 : index
  scf.parallel (%n) = (%c0) to (%rows) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %x[%k] : memref<1024xf32>
      %b = memref.load %w[%n, %k] : memref<?x1024xf32>
      %acc = memref.load %o[%n] : memref<?xf32>
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      memref.store %s, %o[%n] : memref<?xf32>
    }
    scf.reduce
  }
  return
}

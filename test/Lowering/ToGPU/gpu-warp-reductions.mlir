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

// -----

// A decode step's routed-expert product into a buffer that a fill has just
// zeroed (linalg.fill before the reduction): lane 0 stores the warp's sum
// without reading the buffer, and the fill, a kernel launch of its own, is
// gone.
// CHECK-LABEL: func.func @product_after_zero_fill
// CHECK: memref.alloc
// CHECK-NOT: scf.parallel (%{{[^,]*}}, %{{[^)]*}}) = {{.*}} to (%c1, %c96)
// CHECK: scf.parallel (%{{.*}}, %{{.*}}, %[[LANE:.*]]) =
// CHECK: gpu.shuffle xor
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[LANE]]
// CHECK: scf.if %[[FIRST]]
// CHECK-NEXT: memref.store %{{.*}}, %[[O:.*]][%{{.*}}, %{{.*}}] : memref<1x96xf32>
// CHECK-NEXT: }
// CHECK: return %[[O]]
func.func @product_after_zero_fill(%x: memref<1x1024xf32>, %w: memref<96x1024xf32>) -> memref<1x96xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c96 = arith.constant 96 : index
  %c1024 = arith.constant 1024 : index
  %zero = arith.constant 0.0 : f32
  %o = memref.alloc() : memref<1x96xf32>
  scf.parallel (%t, %n) = (%c0, %c0) to (%c1, %c96) step (%c1, %c1) {
    memref.store %zero, %o[%t, %n] : memref<1x96xf32>
    scf.reduce
  }
  scf.parallel (%t, %n) = (%c0, %c0) to (%c1, %c96) step (%c1, %c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %x[%t, %k] : memref<1x1024xf32>
      %b = memref.load %w[%n, %k] : memref<96x1024xf32>
      %acc = memref.load %o[%t, %n] : memref<1x96xf32>
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      memref.store %s, %o[%t, %n] : memref<1x96xf32>
    }
    scf.reduce
  }
  return %o : memref<1x96xf32>
}

// -----

// The weighted sum of a token's 8 experts: too short for a warp, but its
// buffer was just zeroed, so each thread sums in registers, stores once, and
// the fill goes.
// CHECK-LABEL: func.func @short_sum_after_zero_fill
// CHECK: %[[O:.*]] = memref.alloc() : memref<1x1024xf32>
// CHECK-NEXT: scf.parallel (%[[T:.*]], %[[N:.*]]) =
// CHECK: %[[SUM:.*]] = scf.for %{{.*}} = %c0 to %c8 step %c1 iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK-NOT: memref.load %[[O]]
// CHECK: scf.yield
// CHECK: memref.store %[[SUM]], %[[O]][%[[T]], %[[N]]]
// CHECK-NOT: scf.parallel
// CHECK: return %[[O]]
func.func @short_sum_after_zero_fill(%g: memref<1x8xf32>, %y: memref<1x8x1024xf32>) -> memref<1x1024xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c1024 = arith.constant 1024 : index
  %zero = arith.constant 0.0 : f32
  %o = memref.alloc() : memref<1x1024xf32>
  scf.parallel (%t, %n) = (%c0, %c0) to (%c1, %c1024) step (%c1, %c1) {
    memref.store %zero, %o[%t, %n] : memref<1x1024xf32>
    scf.reduce
  }
  scf.parallel (%t, %n) = (%c0, %c0) to (%c1, %c1024) step (%c1, %c1) {
    scf.for %e = %c0 to %c8 step %c1 {
      %a = memref.load %g[%t, %e] : memref<1x8xf32>
      %b = memref.load %y[%t, %e, %n] : memref<1x8x1024xf32>
      %acc = memref.load %o[%t, %n] : memref<1x1024xf32>
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      memref.store %s, %o[%t, %n] : memref<1x1024xf32>
    }
    scf.reduce
  }
  return %o : memref<1x1024xf32>
}

// -----

// Fills that stay: a value that is not the sum's identity, a buffer read
// between the fill and the reduction, and a fill of half the buffer. Lane 0
// then adds to what the buffer holds.
// CHECK-LABEL: func.func @fills_that_stay
// CHECK-COUNT-3: memref.store %cst{{.*}} : memref<64xf32>
// CHECK: arith.cmpi eq
// CHECK-NEXT: scf.if
// CHECK-NEXT: memref.load
// CHECK-NEXT: arith.addf
// CHECK-NEXT: memref.store
// CHECK-NEXT: memref.load
// CHECK-NEXT: arith.addf
// CHECK-NEXT: memref.store
// CHECK-NEXT: memref.load
// CHECK-NEXT: arith.addf
// CHECK-NEXT: memref.store
// CHECK: return
func.func @fills_that_stay(%x: memref<1024xf32>, %w: memref<64x1024xf32>, %seen: memref<f32>) -> (memref<64xf32>, memref<64xf32>, memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c1024 = arith.constant 1024 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %o1 = memref.alloc() : memref<64xf32>
  %o2 = memref.alloc() : memref<64xf32>
  %o3 = memref.alloc() : memref<64xf32>
  scf.parallel (%n) = (%c0) to (%c64) step (%c1) {
    memref.store %one, %o1[%n] : memref<64xf32>
    scf.reduce
  }
  scf.parallel (%n) = (%c0) to (%c64) step (%c1) {
    memref.store %zero, %o2[%n] : memref<64xf32>
    scf.reduce
  }
  %peek = memref.load %o2[%c1] : memref<64xf32>
  memref.store %peek, %seen[] : memref<f32>
  scf.parallel (%n) = (%c0) to (%c32) step (%c1) {
    memref.store %zero, %o3[%n] : memref<64xf32>
    scf.reduce
  }
  scf.parallel (%n) = (%c0) to (%c64) step (%c1) {
    scf.for %k = %c0 to %c1024 step %c1 {
      %a = memref.load %x[%k] : memref<1024xf32>
      %b = memref.load %w[%n, %k] : memref<64x1024xf32>
      %m = arith.mulf %a, %b : f32
      %acc1 = memref.load %o1[%n] : memref<64xf32>
      %s1 = arith.addf %acc1, %m : f32
      memref.store %s1, %o1[%n] : memref<64xf32>
      %acc2 = memref.load %o2[%n] : memref<64xf32>
      %s2 = arith.addf %acc2, %m : f32
      memref.store %s2, %o2[%n] : memref<64xf32>
      %acc3 = memref.load %o3[%n] : memref<64xf32>
      %s3 = arith.addf %acc3, %m : f32
      memref.store %s3, %o3[%n] : memref<64xf32>
    }
    scf.reduce
  }
  return %o1, %o2, %o3 : memref<64xf32>, memref<64xf32>, memref<64xf32>
}

// RUN: kimi-opt %s -split-input-file -kimi-gpu-gemm-calls="gemv-max-m=4 sm-count=1" | FileCheck %s

// A decode step's o_proj and residual add: the add runs at the GEMV's
// store and is gone. The launch takes A, B, C, the add's output and the
// residual; C itself is never stored (nothing reads it after the add).
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, n) -> (b, t, n)>
// CHECK-LABEL: func.func @residual_add
// CHECK-NOT: linalg.
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2_e[[H:[0-9a-f]+]] blocks in (%c12,
// CHECK-SAME: args(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>)
// CHECK-NOT: linalg.
// CHECK: return
// CHECK: gpu.func @gemv_1x96x256_0_256_0_r2_e[[H]](%[[A:.*]]: memref<?xf32, strided<[1], offset: ?>>, %[[B:.*]]: memref<?xf32, strided<[1], offset: ?>>, %[[C:.*]]: memref<?xf32, strided<[1], offset: ?>>, %[[OUT:.*]]: memref<?xf32, strided<[1], offset: ?>>, %[[RES:.*]]: memref<?xf32, strided<[1], offset: ?>>)
// Two outputs a warp (rows r and r + 1), each: the residual, the add, the
// store to the add's output.
// CHECK-NOT: memref.store %{{.*}}, %[[C]]
// CHECK: scf.if
// CHECK: %[[R0:.*]] = memref.load %[[RES]]
// CHECK: %[[S0:.*]] = arith.addf %[[R0]], %{{.*}} : f32
// CHECK: memref.store %[[S0]], %[[OUT]]
// CHECK-NOT: memref.store %{{.*}}, %[[C]]
// CHECK: scf.if
// CHECK: %[[R1:.*]] = memref.load %[[RES]]
// CHECK: %[[S1:.*]] = arith.addf %[[R1]], %{{.*}} : f32
// CHECK: memref.store %[[S1]], %[[OUT]]
// CHECK-NOT: memref.store %{{.*}}, %[[C]]
// CHECK: gpu.return
func.func @residual_add(%x: memref<1x1x256xf32>, %wo: memref<96x256xf32>, %res: memref<1x1x96xf32>) -> memref<1x1x96xf32> {
  %zero = arith.constant 0.0 : f32
  %o = memref.alloc() : memref<1x1x96xf32>
  linalg.fill ins(%zero : f32) outs(%o : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wo : memref<1x1x256xf32>, memref<96x256xf32>) outs(%o : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %h = memref.alloc() : memref<1x1x96xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%res, %o : memref<1x1x96xf32>, memref<1x1x96xf32>) outs(%h : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  memref.dealloc %o : memref<1x1x96xf32>
  return %h : memref<1x1x96xf32>
}

// -----

// The beta projection's sigmoid, in place, inside a group of projections
// of one input: only the product that has it carries the epilogue. The
// constant the body uses from outside is cloned into the kernel. A
// product whose output is read after its epilogue stores its sums too.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
// CHECK-LABEL: func.func @sigmoid_in_group
// CHECK-NOT: linalg.
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2_e[[K:[0-9a-f]+]]__1x16x256_0_256_0_r2_e[[S:[0-9a-f]+]] blocks in (%c14,
// CHECK-NOT: linalg.
// CHECK: return
// CHECK: gpu.func @gemv_1x96x256_0_256_0_r2_e[[K]]__1x16x256_0_256_0_r2_e[[S]](%{{.*}}: memref<?xf32, strided<[1], offset: ?>>, %{{.*}}: memref<?xf32, strided<[1], offset: ?>>, %[[KC:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>, %[[KOUT:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>, %{{.*}}: memref<?xf32, strided<[1], offset: ?>>, %[[BC:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>, %[[BOUT:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>)
// k's sums go to C (returned) and, exp'd, to the epilogue's output.
// CHECK: memref.store %[[KS:.*]], %[[KC]]
// CHECK: %[[KE:.*]] = math.exp %[[KS]]
// CHECK: memref.store %[[KE]], %[[KOUT]]
// beta: 1 / (1 + exp(-x)) with the constant 1.0 cloned, stored in place.
// CHECK: arith.constant 1.000000e+00 : f32
// CHECK: %[[N:.*]] = arith.negf
// CHECK: %[[E:.*]] = math.exp %[[N]]
// CHECK: %[[D:.*]] = arith.addf %[[E]]
// CHECK: %[[Q:.*]] = arith.divf %{{.*}}, %[[D]]
// CHECK: memref.store %[[Q]], %[[BOUT]]
// CHECK-NOT: memref.store %{{.*}}, %[[BC]]
// CHECK: gpu.return
func.func @sigmoid_in_group(%x: memref<1x256xf32>, %wk: memref<96x256xf32>, %wb: memref<16x256xf32>)
    -> (memref<1x96xf32>, memref<1x96xf32>, memref<1x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %k = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%k : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wk : memref<1x256xf32>, memref<96x256xf32>) outs(%k : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %ek = memref.alloc() : memref<1x96xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%k : memref<1x96xf32>) outs(%ek : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  }
  %beta = memref.alloc() : memref<1x16xf32>
  linalg.fill ins(%zero : f32) outs(%beta : memref<1x16xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wb : memref<1x256xf32>, memref<16x256xf32>) outs(%beta : memref<1x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%beta : memref<1x16xf32>) outs(%beta : memref<1x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %r = arith.divf %one, %d : f32
    linalg.yield %r : f32
  }
  return %k, %ek, %beta : memref<1x96xf32>, memref<1x96xf32>, memref<1x16xf32>
}

// -----

// An MLP's gate and up projections combined by one elementwise op (here
// silu(gate) * up, in place into up): one product of two weights, each
// warp computing row n of both, the op at the store. Neither sum is
// stored on its own.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
// CHECK-LABEL: func.func @gate_up_pair
// CHECK-NOT: linalg.
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2_x2_e[[P:[0-9a-f]+]] blocks in (%c12,
// CHECK-SAME: args(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>)
// CHECK-NOT: linalg.
// CHECK: gpu.func @gemv_1x96x256_0_256_0_r2_x2_e[[P]](%{{.*}}: memref<?xf32, strided<[1], offset: ?>>, %[[BG:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>, %[[CG:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>, %[[BU:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>, %[[CU:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>, %[[OUT:[^:]*]]: memref<?xf32, strided<[1], offset: ?>>)
// Each lane loads 16 bytes of two rows of each weight and of x for each
// of the two 128-wide chunks.
// CHECK-COUNT-10: vector.load
// CHECK-NOT: vector.load
// CHECK: math.exp
// CHECK: arith.mulf
// CHECK: %[[R:.*]] = arith.mulf
// CHECK: memref.store %[[R]], %[[OUT]]
// CHECK-NOT: memref.store %{{.*}}, %[[CG]]
// CHECK-NOT: memref.store %{{.*}}, %[[CU]]
// CHECK: gpu.return
func.func @gate_up_pair(%x: memref<1x256xf32>, %wg: memref<96x256xf32>, %wu: memref<96x256xf32>) -> memref<1x96xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %u = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%u : memref<1x96xf32>)
  %g = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%g : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wg : memref<1x256xf32>, memref<96x256xf32>) outs(%g : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wu : memref<1x256xf32>, memref<96x256xf32>) outs(%u : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g, %u : memref<1x96xf32>, memref<1x96xf32>) outs(%u : memref<1x96xf32>) {
  ^bb0(%gate: f32, %up: f32, %out: f32):
    %n = arith.negf %gate : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %sig = arith.divf %one, %d : f32
    %silu = arith.mulf %gate, %sig : f32
    %r = arith.mulf %silu, %up : f32
    linalg.yield %r : f32
  }
  memref.dealloc %g : memref<1x96xf32>
  return %u : memref<1x96xf32>
}

// -----

// Not fused, each for one reason: an op between the product and the add
// writes the add's other input; an op writes the product's input A in
// place (other warps of the launch still read A); a body that uses a
// value from outside that is not a constant.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
// CHECK-LABEL: func.func @not_fused
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
// CHECK: linalg.copy
// CHECK: linalg.generic
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x256x256_0_256_0_r2 blocks
// CHECK: linalg.generic
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
// CHECK: linalg.generic
// CHECK: return
func.func @not_fused(%x: memref<1x256xf32>, %w: memref<96x256xf32>, %w2: memref<256x256xf32>,
                     %res: memref<1x96xf32>, %other: memref<1x96xf32>, %scale: f32)
    -> (memref<1x96xf32>, memref<1x256xf32>, memref<1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  %o = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%o : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x256xf32>, memref<96x256xf32>) outs(%o : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.copy ins(%other : memref<1x96xf32>) outs(%res : memref<1x96xf32>)
  %h = memref.alloc() : memref<1x96xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%res, %o : memref<1x96xf32>, memref<1x96xf32>) outs(%h : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  // A square product whose output is added into its own input.
  %xa = memref.alloc() : memref<1x256xf32>
  linalg.copy ins(%x : memref<1x256xf32>) outs(%xa : memref<1x256xf32>)
  %y = memref.alloc() : memref<1x256xf32>
  linalg.fill ins(%zero : f32) outs(%y : memref<1x256xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%xa, %w2 : memref<1x256xf32>, memref<256x256xf32>) outs(%y : memref<1x256xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<1x256xf32>) outs(%xa : memref<1x256xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  %z = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%z : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x256xf32>, memref<96x256xf32>) outs(%z : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%z : memref<1x96xf32>) outs(%z : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = arith.mulf %a, %scale : f32
    linalg.yield %s : f32
  }
  return %h, %xa, %z : memref<1x96xf32>, memref<1x256xf32>, memref<1x96xf32>
}

// -----

// MLA's per-head output expansion, a batch of 4 products [1, 64] x [32, 64]^T
// (one weight slice a head, k contiguous), with the output gate as its
// epilogue: one GEMV launch, the head's product picked from the block index
// and every buffer offset by its head's stride.
#a = affine_map<(b, t, h, n, k) -> (b, t, h, k)>
#w = affine_map<(b, t, h, n, k) -> (h, n, k)>
#c = affine_map<(b, t, h, n, k) -> (b, t, h, n)>
#id = affine_map<(b, t, h, n) -> (b, t, h, n)>
// CHECK-LABEL: func.func @per_head_gated
// CHECK-NOT: call @kimi_gpu_gemm_f32
// CHECK-NOT: linalg.
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x32x64_0_64_0_r2_b4x64x4096x32_e[[H:[0-9a-f]+]] blocks in (%c16,
// CHECK: gpu.func @gemv_1x32x64_0_64_0_r2_b4x64x4096x32_e[[H]](
// Four blocks a head: the head, then the block within it.
// CHECK: %[[HEAD:.*]] = arith.divui %{{.*}}, %c4
// CHECK: arith.remui %{{.*}}, %c4
// CHECK: arith.muli %[[HEAD]], %c64
// CHECK: arith.muli %[[HEAD]], %c4096
// CHECK: math.exp
// CHECK: gpu.return
func.func @per_head_gated(%mixed: memref<1x1x4x64xf32>, %kvb: memref<4x64x64xf32>, %gate: memref<1x1x4x32xf32>) -> memref<1x1x4x32xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %w = memref.subview %kvb[0, 32, 0] [4, 32, 64] [1, 1, 1] : memref<4x64x64xf32> to memref<4x32x64xf32, strided<[4096, 64, 1], offset: 2048>>
  %o = memref.alloc() : memref<1x1x4x32xf32>
  linalg.fill ins(%zero : f32) outs(%o : memref<1x1x4x32xf32>)
  linalg.generic {indexing_maps = [#a, #w, #c], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%mixed, %w : memref<1x1x4x64xf32>, memref<4x32x64xf32, strided<[4096, 64, 1], offset: 2048>>) outs(%o : memref<1x1x4x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%o, %gate : memref<1x1x4x32xf32>, memref<1x1x4x32xf32>) outs(%o : memref<1x1x4x32xf32>) {
  ^bb0(%v: f32, %g: f32, %out: f32):
    %n = arith.negf %g : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %sig = arith.divf %one, %d : f32
    %r = arith.mulf %v, %sig : f32
    linalg.yield %r : f32
  }
  return %o : memref<1x1x4x32xf32>
}

// -----

// k's epilogue reads q's output, another product of the same input whose
// weight rows are 512 apart (k's 256): q and k run as one launch, q's rows
// read at its own stride as a second vector's product (`_a1k256_0_256`),
// the sum at the store; q's sums are stored too (returned).
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
// CHECK-LABEL: func.func @reads_a_group_output
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_512_0_r2_x2_a1k256_0_256_e{{[0-9a-f]+}} blocks
// CHECK-NOT: gpu.launch_func
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @reads_a_group_output(%x: memref<1x256xf32>, %wqk: memref<96x512xf32>, %wk: memref<96x256xf32>) -> (memref<1x96xf32>, memref<1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  %wq = memref.subview %wqk[0, 0] [96, 256] [1, 1] : memref<96x512xf32> to memref<96x256xf32, strided<[512, 1]>>
  %q = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%q : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wq : memref<1x256xf32>, memref<96x256xf32, strided<[512, 1]>>) outs(%q : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %k = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%k : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wk : memref<1x256xf32>, memref<96x256xf32>) outs(%k : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %h = memref.alloc() : memref<1x96xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%k, %q : memref<1x96xf32>, memref<1x96xf32>) outs(%h : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  return %q, %h : memref<1x96xf32>, memref<1x96xf32>
}

// -----

// Two rows of A (a batch-2 decode step): output (m, n) and the residual are
// read and written at m * 96 + n.
// CHECK-LABEL: func.func @two_rows
// CHECK: gpu.func @gemv_2x96x256_256_256_96_r2_e
// CHECK: arith.cmpi eq, %{{.*}}, %c2
// CHECK: scf.if
// CHECK: arith.addi %{{.*}}, %c96
// CHECK: memref.load
// CHECK: arith.addi %{{.*}}, %c96
// CHECK: memref.store
// CHECK: gpu.return
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
func.func @two_rows(%x: memref<2x256xf32>, %w: memref<96x256xf32>, %res: memref<2x96xf32>) -> memref<2x96xf32> {
  %zero = arith.constant 0.0 : f32
  %o = memref.alloc() : memref<2x96xf32>
  linalg.fill ins(%zero : f32) outs(%o : memref<2x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<2x256xf32>, memref<96x256xf32>) outs(%o : memref<2x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %h = memref.alloc() : memref<2x96xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%res, %o : memref<2x96xf32>, memref<2x96xf32>) outs(%h : memref<2x96xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  return %h : memref<2x96xf32>
}

// -----

// bf16 activations: A and the weight are bf16 (widened in registers), the
// sums f32, and the epilogue adds a bf16 residual and rounds to the bf16
// output. The kernel takes each buffer at its type, loads the residual as
// bf16 for the body's own extf, and stores the body's bf16 value.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, n) -> (b, t, n)>
// CHECK-LABEL: func.func @bf16_activations
// CHECK-NOT: linalg.
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2_bf16_a16_e[[H:[0-9a-f]+]] blocks in (%c12,
// CHECK-SAME: args(%{{.*}} : memref<?xbf16, strided<[1], offset: ?>>, %{{.*}} : memref<?xbf16, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xbf16, strided<[1], offset: ?>>, %{{.*}} : memref<?xbf16, strided<[1], offset: ?>>)
// CHECK-NOT: linalg.
// CHECK: return
// CHECK: gpu.func @gemv_1x96x256_0_256_0_r2_bf16_a16_e[[H]](%[[A:.*]]: memref<?xbf16, strided<[1], offset: ?>>, %[[B:.*]]: memref<?xbf16, strided<[1], offset: ?>>, %[[C:.*]]: memref<?xf32, strided<[1], offset: ?>>, %[[OUT:.*]]: memref<?xbf16, strided<[1], offset: ?>>, %[[RES:.*]]: memref<?xbf16, strided<[1], offset: ?>>)
// CHECK: vector.load %[[B]]{{.*}} : memref<?xbf16, strided<[1], offset: ?>>, vector<4xbf16>
// CHECK: vector.load %[[A]]{{.*}} : memref<?xbf16, strided<[1], offset: ?>>, vector<4xbf16>
// CHECK: arith.extf %{{.*}} : vector<4xbf16> to vector<4xf32>
// CHECK-NOT: memref.store %{{.*}}, %[[C]]
// CHECK: scf.if
// CHECK: %[[R0:.*]] = memref.load %[[RES]]{{.*}} : memref<?xbf16, strided<[1], offset: ?>>
// CHECK: %[[W0:.*]] = arith.extf %[[R0]] : bf16 to f32
// CHECK: %[[S0:.*]] = arith.addf %[[W0]], %{{.*}} : f32
// CHECK: %[[T0:.*]] = arith.truncf %[[S0]] : f32 to bf16
// CHECK: memref.store %[[T0]], %[[OUT]]
// CHECK-NOT: memref.store %{{.*}}, %[[C]]
// CHECK: gpu.return
func.func @bf16_activations(%x: memref<1x1x256xbf16>, %wo: memref<96x256xbf16>, %res: memref<1x1x96xbf16>) -> memref<1x1x96xbf16> {
  %zero = arith.constant 0.0 : f32
  %o = memref.alloc() : memref<1x1x96xf32>
  linalg.fill ins(%zero : f32) outs(%o : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wo : memref<1x1x256xbf16>, memref<96x256xbf16>) outs(%o : memref<1x1x96xf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %a32 = arith.extf %a : bf16 to f32
    %b32 = arith.extf %b : bf16 to f32
    %m = arith.mulf %a32, %b32 : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %h = memref.alloc() : memref<1x1x96xbf16>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%res, %o : memref<1x1x96xbf16>, memref<1x1x96xf32>) outs(%h : memref<1x1x96xbf16>) {
  ^bb0(%a: bf16, %b: f32, %c: bf16):
    %a32 = arith.extf %a : bf16 to f32
    %s = arith.addf %a32, %b : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  }
  memref.dealloc %o : memref<1x1x96xf32>
  return %h : memref<1x1x96xbf16>
}

// -----

// A MoE layer's end: the routed output projected up (%u, from %z) and the
// shared experts' down product (%d, from %hs, which the op between them
// computes) meet in one sum with the residual. The up product runs at the
// down product, as the second weight of one launch against its own vector
// (`_a1k128_0_128`: k1, lda1, ldb1): one launch, neither sum stored, the
// up product's vector the launch's last argument.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, n) -> (b, t, n)>
// CHECK-LABEL: func.func @two_vectors_one_sum
// CHECK: linalg.generic
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2_x2_a1k128_0_128_e{{[0-9a-f]+}} blocks in (%c12,
// CHECK-SAME: args(%[[HS:[a-z0-9_]+]] : {{.*}}, %[[WD:[a-z0-9_]+]] : {{.*}}, %{{.*}}, %[[WU:[a-z0-9_]+]] : {{.*}}, %{{.*}}, %[[OUT:[a-z0-9_]+]] : {{.*}}, %[[RES:[a-z0-9_]+]] : {{.*}}, %[[Z:[a-z0-9_]+]] : memref<?xf32, strided<[1], offset: ?>>)
// CHECK-NOT: linalg.
// CHECK: return
// CHECK: gpu.func @gemv_1x96x256_0_256_0_r2_x2_a1k128_0_128_e
// CHECK-NOT: memref.store
// CHECK: %[[R:.*]] = memref.load
// CHECK: %[[S:.*]] = arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: %[[T:.*]] = arith.addf %[[R]], %[[S]] : f32
// CHECK: memref.store %[[T]]
func.func @two_vectors_one_sum(%z: memref<1x1x128xf32>, %wu: memref<96x128xf32>, %x: memref<1x1x256xf32>,
                               %wd: memref<96x256xf32>, %res: memref<1x1x96xf32>) -> memref<1x1x96xf32> {
  %zero = arith.constant 0.0 : f32
  %u = memref.alloc() : memref<1x1x96xf32>
  linalg.fill ins(%zero : f32) outs(%u : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%z, %wu : memref<1x1x128xf32>, memref<96x128xf32>) outs(%u : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %hs = memref.alloc() : memref<1x1x256xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<1x1x256xf32>) outs(%hs : memref<1x1x256xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  }
  %d = memref.alloc() : memref<1x1x96xf32>
  linalg.fill ins(%zero : f32) outs(%d : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%hs, %wd : memref<1x1x256xf32>, memref<96x256xf32>) outs(%d : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %h = memref.alloc() : memref<1x1x96xf32>
  linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%res, %u, %d : memref<1x1x96xf32>, memref<1x1x96xf32>, memref<1x1x96xf32>) outs(%h : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
    %s = arith.addf %b, %c : f32
    %t = arith.addf %a, %s : f32
    linalg.yield %t : f32
  }
  memref.dealloc %u : memref<1x1x96xf32>
  memref.dealloc %d : memref<1x1x96xf32>
  memref.dealloc %hs : memref<1x1x256xf32>
  return %h : memref<1x1x96xf32>
}

// -----

// The same, but the op between the products writes the up product's
// vector: it cannot run at the down product, so it stays a launch of its
// own and the sum, fused into the down product, reads its output.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, n) -> (b, t, n)>
// CHECK-LABEL: func.func @vector_rewritten_between
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x128_0_128_0_r2 blocks
// CHECK: linalg.generic
// CHECK: math.tanh
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2_e{{[0-9a-f]+}} blocks
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @vector_rewritten_between(%z: memref<1x1x128xf32>, %wu: memref<96x128xf32>, %x: memref<1x1x256xf32>,
                                    %wd: memref<96x256xf32>, %res: memref<1x1x96xf32>) -> memref<1x1x96xf32> {
  %zero = arith.constant 0.0 : f32
  %u = memref.alloc() : memref<1x1x96xf32>
  linalg.fill ins(%zero : f32) outs(%u : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%z, %wu : memref<1x1x128xf32>, memref<96x128xf32>) outs(%u : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z : memref<1x1x128xf32>) outs(%z : memref<1x1x128xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  }
  %d = memref.alloc() : memref<1x1x96xf32>
  linalg.fill ins(%zero : f32) outs(%d : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %wd : memref<1x1x256xf32>, memref<96x256xf32>) outs(%d : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %h = memref.alloc() : memref<1x1x96xf32>
  linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%res, %u, %d : memref<1x1x96xf32>, memref<1x1x96xf32>, memref<1x1x96xf32>) outs(%h : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
    %s = arith.addf %b, %c : f32
    %t = arith.addf %a, %s : f32
    linalg.yield %t : f32
  }
  memref.dealloc %u : memref<1x1x96xf32>
  memref.dealloc %d : memref<1x1x96xf32>
  return %h : memref<1x1x96xf32>
}

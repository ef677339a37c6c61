// With one SM's 32 warps as the target, these launches have warps enough
// and keep k whole; the default (132 SMs) splits it (SPLIT, below).
// RUN: kimi-opt %s -split-input-file -kimi-gpu-gemm-calls="gemv-max-m=4 sm-count=1 gemv-epilogues=false" | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-gpu-gemm-calls="gemv-max-m=4 gemv-max-group=1 sm-count=1 gemv-epilogues=false" | FileCheck %s --check-prefix=SINGLE
// RUN: kimi-opt %s -split-input-file -kimi-gpu-gemm-calls="gemv-max-m=4 gemv-epilogues=false" | FileCheck %s --check-prefix=SPLIT

// 96 rows of 2048 are 48 warps: far from 32 an SM on 132 SMs, so four warps
// share each row pair, a quarter of k (512: four chunks, all in flight)
// each; ceil(96 / (1 row group x 2 rows)) = 48 blocks. Their sums meet in
// shared memory and the first warp of the group adds the four.
// SPLIT-LABEL: func.func @decode_linear
// SPLIT: gpu.launch_func  @kimi_gemv::@gemv_1x96x2048_0_2048_0_r2_s4 blocks in (%c48,
// SPLIT: gpu.func @gemv_1x96x2048_0_2048_0_r2_s4
// SPLIT: memref.get_global @gemv_1x96x2048_0_2048_0_r2_s4_sums : memref<8xf32, #gpu.address_space<workgroup>>
// SPLIT: arith.remui
// SPLIT-NOT: scf.for
// SPLIT-COUNT-12: vector.load
// SPLIT-COUNT-10: gpu.shuffle  xor
// SPLIT: memref.store
// SPLIT: memref.store
// SPLIT: gpu.barrier
// SPLIT-COUNT-4: memref.load
// SPLIT-COUNT-4: memref.load
// SPLIT: memref.store

// A decode step's projection x W^T (one row, W as [N, K]) after its zero
// fill: the fill goes and the product is one launch of the generated GEMV
// kernel over flat views of the buffers: ceil(96 / (4 warps x 2 rows)) = 12
// blocks of 128 threads. The kernel stores (no accumulation).
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @decode_linear
// CHECK-NOT: linalg.fill
// CHECK-NOT: call @kimi_gpu_gemm_f32
// CHECK: memref.reinterpret_cast %arg0 to offset: [0], sizes: [2048], strides: [1] : memref<1x1x2048xf32> to memref<2048xf32, strided<[1]>>
// CHECK: memref.reinterpret_cast %arg1 to offset: [0], sizes: [196608], strides: [1]
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x2048_0_2048_0_r2 blocks in (%c12, %c1{{.*}}, %c1{{.*}}) threads in (%c128, %c1{{.*}}, %c1{{.*}})  args(%{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>)
// CHECK: gpu.module @kimi_gemv
// CHECK: gpu.func @gemv_1x96x2048_0_2048_0_r2
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// Two weight rows and the input, 16 bytes each, eight chunks a loop trip.
// CHECK: scf.for
// CHECK-COUNT-24: vector.load {{.*}} {alignment = 16 : i64} : memref<?xf32, strided<[1], offset: ?>>, vector<4xf32>
// CHECK: vector.reduction <add>
// CHECK: gpu.shuffle  xor
// CHECK-NOT: memref.load
// CHECK: memref.store
func.func @decode_linear(%x: memref<1x1x2048xf32>, %w: memref<96x2048xf32>, %o: memref<1x1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%o : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x1x2048xf32>, memref<96x2048xf32>) outs(%o : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Three rows that accumulate onto C (no zero fill), K not a multiple of a
// warp's 128: one row of B per warp, the ragged last chunk masked, C read
// before the store. Equal products share one kernel. Their outputs are
// arguments that may be one buffer, so they are not launched together.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
// CHECK-LABEL: func.func @accumulate_ragged
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_3x40x200_200_200_40_r1_acc blocks in (%c10{{.*}},
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_3x40x200_200_200_40_r1_acc blocks in (%c10{{.*}},
// CHECK: gpu.module @kimi_gemv
// CHECK-COUNT-1: gpu.func
// CHECK-NOT: gpu.func
// CHECK: arith.cmpi ult
// CHECK: arith.select
// CHECK: memref.load
// CHECK: memref.store
func.func @accumulate_ragged(%x: memref<3x200xf32>, %w: memref<40x200xf32>, %o: memref<3x40xf32>, %o2: memref<3x40xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<3x200xf32>, memref<40x200xf32>) outs(%o : memref<3x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<3x200xf32>, memref<40x200xf32>) outs(%o2 : memref<3x40xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// More rows than gemv-max-m, and B stored [K, N] (n contiguous): cuBLASLt.
// CHECK-LABEL: func.func @stays_cublas
// CHECK-NOT: gpu.launch_func
// CHECK: call @kimi_gpu_gemm_f32
// CHECK: call @kimi_gpu_gemm_f32
func.func @stays_cublas(%a: memref<8x64xf32>, %b: memref<64x32xf32>, %c: memref<8x32xf32>,
                        %x: memref<1x64xf32>, %d: memref<1x32xf32>) {
  linalg.matmul ins(%a, %b : memref<8x64xf32>, memref<64x32xf32>) outs(%c : memref<8x32xf32>)
  linalg.matmul ins(%x, %b : memref<1x64xf32>, memref<64x32xf32>) outs(%d : memref<1x32xf32>)
  return
}

// -----

// Three projections of one activation (a decode step's q, k and a 16-row
// beta) with other work between them: one launch of one kernel at the
// first product's place, 12 + 12 + 2 blocks, the later products' output
// allocations moved up to it. The kernel that reads q's output stays
// after the launch.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
// CHECK-LABEL: func.func @shared_input
// With gemv-max-group=1 each product keeps its launch and its place.
// SINGLE-LABEL: func.func @shared_input
// SINGLE: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
// SINGLE: linalg.generic
// SINGLE: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
// SINGLE: gpu.launch_func  @kimi_gemv::@gemv_1x16x256_0_256_0_r2_s2 blocks
// CHECK-NOT: linalg.fill
// CHECK-COUNT-2: memref.alloc() : memref<1x96xf32>
// CHECK: memref.alloc() : memref<1x16xf32>
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2__1x96x256_0_256_0_r2__1x16x256_0_256_0_r2 blocks in (%c26,
// CHECK-SAME: args(%{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>)
// CHECK-NOT: gpu.launch_func
// CHECK: linalg.generic
// CHECK-NOT: gpu.launch_func
// CHECK: return
// Product p's blocks: [0, 12), [12, 24), [24, 26).
// CHECK: gpu.func @gemv_1x96x256_0_256_0_r2__1x96x256_0_256_0_r2__1x16x256_0_256_0_r2
// CHECK: arith.cmpi ult, %{{.*}}, %c12
// CHECK: scf.if
// CHECK: arith.cmpi ult, %{{.*}}, %c24
// CHECK: scf.if
func.func @shared_input(%x: memref<1x256xf32>, %wq: memref<96x256xf32>, %wk: memref<96x256xf32>,
                        %wb: memref<16x256xf32>) -> memref<1x96xf32> {
  %zero = arith.constant 0.0 : f32
  %q = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%q : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wq : memref<1x256xf32>, memref<96x256xf32>) outs(%q : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %conv = memref.alloc() : memref<1x96xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%q : memref<1x96xf32>) outs(%conv : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
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
  %beta = memref.alloc() : memref<1x16xf32>
  linalg.fill ins(%zero : f32) outs(%beta : memref<1x16xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wb : memref<1x256xf32>, memref<16x256xf32>) outs(%beta : memref<1x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return %conv : memref<1x96xf32>
}

// -----

// An op between the two products writes their shared input: the second
// product must read the new values, so it keeps its own launch after it.
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
// CHECK-LABEL: func.func @input_rewritten
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
// CHECK: linalg.fill
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
func.func @input_rewritten(%w: memref<96x256xf32>) -> (memref<1x96xf32>, memref<1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %x = memref.alloc() : memref<1x256xf32>
  linalg.fill ins(%one : f32) outs(%x : memref<1x256xf32>)
  %a = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%a : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x256xf32>, memref<96x256xf32>) outs(%a : memref<1x96xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.fill ins(%zero : f32) outs(%x : memref<1x256xf32>)
  %b = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%b : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x256xf32>, memref<96x256xf32>) outs(%b : memref<1x96xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return %a, %b : memref<1x96xf32>, memref<1x96xf32>
}

// -----

// One input through two views (a router's [1, K] and an expert
// projection's expanded [1, 1, K]): the same rows, one launch.
#x2 = affine_map<(t, n, k) -> (t, k)>
#x3 = affine_map<(b, t, n, k) -> (b, t, k)>
#w2 = affine_map<(t, n, k) -> (n, k)>
#w3 = affine_map<(b, t, n, k) -> (n, k)>
#o2 = affine_map<(t, n, k) -> (t, n)>
#o3 = affine_map<(b, t, n, k) -> (b, t, n)>
// CHECK-LABEL: func.func @two_views
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x64x256_0_256_0_r2__1x96x256_0_256_0_r2 blocks in (%c20,
// CHECK-NOT: gpu.launch_func
// CHECK: return
func.func @two_views(%x: memref<1x256xf32>, %wr: memref<64x256xf32>, %we: memref<96x256xf32>)
    -> (memref<1x64xf32>, memref<1x1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  %r = memref.alloc() : memref<1x64xf32>
  linalg.fill ins(%zero : f32) outs(%r : memref<1x64xf32>)
  linalg.generic {indexing_maps = [#x2, #w2, #o2], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wr : memref<1x256xf32>, memref<64x256xf32>) outs(%r : memref<1x64xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %x3 = memref.expand_shape %x [[0, 1], [2]] output_shape [1, 1, 256] : memref<1x256xf32> into memref<1x1x256xf32>
  %e = memref.alloc() : memref<1x1x96xf32>
  linalg.fill ins(%zero : f32) outs(%e : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x3, #w3, #o3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x3, %we : memref<1x1x256xf32>, memref<96x256xf32>) outs(%e : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return %r, %e : memref<1x64xf32>, memref<1x1x96xf32>
}

// -----

// A bf16 weight (the release's type) is read at its size: the kernel takes it
// as memref<?xbf16>, loads four values (8 bytes) a piece and widens them in
// registers; the input and the sums stay f32, the output too.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
// CHECK-LABEL: func.func @decode_linear_bf16
// CHECK-NOT: call @kimi_gpu_gemm_f32
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x2048_0_2048_0_r2_bf16 blocks in (%c12, {{.*}} args(%{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xbf16, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>)
// CHECK: gpu.func @gemv_1x96x2048_0_2048_0_r2_bf16(%{{.*}}: memref<?xf32, strided<[1], offset: ?>>, %{{.*}}: memref<?xbf16, strided<[1], offset: ?>>, %{{.*}}: memref<?xf32, strided<[1], offset: ?>>)
// CHECK: scf.for
// CHECK: vector.load {{.*}} {alignment = 8 : i64} : memref<?xbf16, strided<[1], offset: ?>>, vector<4xbf16>
// CHECK: arith.extf {{.*}} : vector<4xbf16> to vector<4xf32>
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?xf32, strided<[1], offset: ?>>, vector<4xf32>
// CHECK: vector.fma
func.func @decode_linear_bf16(%x: memref<1x1x2048xf32>, %w: memref<96x2048xbf16>, %o: memref<1x1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%o : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x1x2048xf32>, memref<96x2048xbf16>) outs(%o : memref<1x1x96xf32>) {
  ^bb0(%a: f32, %b: bf16, %acc: f32):
    %bw = arith.extf %b : bf16 to f32
    %m = arith.mulf %a, %bw : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A bf16 activation (bf16 activations) is the kernel's input as it is:
// read at 8 bytes a piece and widened in registers, against an f32 weight.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
// CHECK-LABEL: func.func @decode_linear_bf16_input
// CHECK-NOT: call @kimi_gpu_gemm_f32
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x2048_0_2048_0_r2_a16
// CHECK-SAME: args(%{{.*}} : memref<?xbf16, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>, %{{.*}} : memref<?xf32, strided<[1], offset: ?>>)
// CHECK: gpu.func @gemv_1x96x2048_0_2048_0_r2_a16
// CHECK: vector.load {{.*}} : memref<?xbf16, strided<[1], offset: ?>>, vector<4xbf16>
func.func @decode_linear_bf16_input(%x: memref<1x1x2048xbf16>, %w: memref<96x2048xf32>, %o: memref<1x1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%o : memref<1x1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x1x2048xbf16>, memref<96x2048xf32>) outs(%o : memref<1x1x96xf32>) {
  ^bb0(%a: bf16, %b: f32, %acc: f32):
    %aw = arith.extf %a : bf16 to f32
    %m = arith.mulf %aw, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

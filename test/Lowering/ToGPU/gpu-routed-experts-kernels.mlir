// RUN: kimi-opt %s -split-input-file -kimi-gpu-routed-experts-kernels -verify-diagnostics | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-gpu-routed-experts-kernels=max-tokens=0 | FileCheck %s --check-prefix=NONE
// RUN: kimi-opt %s -split-input-file -kimi-gpu-routed-experts-kernels=bf16-products=false | FileCheck %s --check-prefix=EXACT

// A decode step's routed experts (k3-tiny's sizes: 16 experts of 64 x 128,
// 4 slots, SiTU) become two launches. gate_up: one block row per slot,
// 128 threads, 64 / 4 = 16 blocks along x; each warp dots a gate row and an
// up row with the token (one chunk of 128: three 16-byte loads a lane),
// five shuffles per sum, and stores act(g, u). down: a block per output
// column (128) and token; warp w reads slot w (k = 4: one slot a warp), its
// inner size 64 a single masked chunk, weighted; shared memory adds the
// four warps' totals.
// CHECK-LABEL: func.func @decode
// CHECK-NOT: kimi.routed_experts
// CHECK: %[[H:.*]] = memref.alloc() : memref<256xf32>
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<128xf32>
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_gate_up blocks in (%c16{{[_0-9]*}}, %c4{{[_0-9]*}}, %c1{{[_0-9]*}}) threads in (%c128{{[_0-9]*}}, %c1{{[_0-9]*}}, %c1{{[_0-9]*}})  args(%{{.*}} : memref<128xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<131072xf32>, %{{.*}} : memref<131072xf32>, %[[H]] : memref<256xf32>)
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_down blocks in (%c128{{[_0-9]*}}, %c1{{[_0-9]*}}, %c1{{[_0-9]*}}) threads in (%c128{{[_0-9]*}}, %c1{{[_0-9]*}}, %c1{{[_0-9]*}})  args(%[[H]] : memref<256xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4xf32>, %{{.*}} : memref<131072xf32>, %[[OUT]] : memref<128xf32>)
// CHECK: bufferization.to_tensor %[[OUT]] restrict writable
// CHECK: gpu.module @kimi_routed_experts
// CHECK: gpu.func @routed_experts_0_gate_up
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: arith.minui %{{.*}}, %c15
// CHECK-COUNT-3: vector.load {{.*}} vector<4xf32>
// CHECK-COUNT-2: vector.fma
// CHECK-COUNT-10: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// CHECK: math.exp
// CHECK: memref.store
// CHECK: gpu.return
// CHECK: gpu.func @routed_experts_0_down
// CHECK: memref.get_global @routed_experts_0_down_partials : memref<4xf32, #gpu.address_space<workgroup>>
// CHECK: memref.load %arg2
// CHECK: arith.cmpi ult
// CHECK-COUNT-2: vector.load
// CHECK: arith.select
// CHECK: vector.fma
// CHECK: vector.reduction <add>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// CHECK: memref.store
// CHECK: gpu.barrier
// CHECK-COUNT-4: memref.load %0
// CHECK: memref.store
// CHECK: gpu.return
// NONE-LABEL: func.func @decode
// NONE: kimi.routed_experts
// NONE-NOT: gpu.launch_func
func.func @decode(%z: tensor<1x1x128xf32>, %w: tensor<1x1x4xf32>, %i: tensor<1x1x4xi32>,
                  %g: tensor<16x64x128xf32>, %u: tensor<16x64x128xf32>, %d: tensor<16x128x64xf32>) -> tensor<1x1x128xf32> {
  %r = kimi.routed_experts situ %z, %w, %i experts(%g, %u, %d) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<1x1x128xf32>, tensor<1x1x4xf32>, tensor<1x1x4xi32>, tensor<16x64x128xf32>, tensor<16x64x128xf32>, tensor<16x128x64xf32>) -> tensor<1x1x128xf32>
  return %r : tensor<1x1x128xf32>
}

// -----

// Three tokens, six slots with i64 indices, SiLU: 18 block rows of
// gate_up; in down, warps 0 and 1 read two slots, warps 2 and 3 one (their
// second, past k, counts zero), over an inner size of 200: one full chunk,
// then a masked one.
// CHECK-LABEL: func.func @silu_i64
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_gate_up blocks in (%c50{{[_0-9]*}}, %c18{{[_0-9]*}}, %c1{{[_0-9]*}})
// CHECK-SAME: memref<18xi64>
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_down blocks in (%c256{{[_0-9]*}}, %c3{{[_0-9]*}}, %c1{{[_0-9]*}})
// CHECK: gpu.func @routed_experts_0_gate_up
// CHECK: arith.index_cast %{{.*}} : i64 to index
// CHECK: gpu.func @routed_experts_0_down
// CHECK: arith.cmpi ult, %{{.*}}, %c6
// CHECK: arith.minui %{{.*}}, %c5
// CHECK: arith.cmpi ult, %{{.*}}, %c6
// CHECK: arith.minui %{{.*}}, %c5
// CHECK-COUNT-4: vector.load
// CHECK-COUNT-2: vector.fma
// CHECK: arith.cmpi ult
// CHECK-COUNT-4: vector.load
// CHECK-COUNT-2: arith.select {{.*}} vector<4xf32>
// CHECK-COUNT-2: vector.fma
// CHECK-COUNT-2: vector.reduction <add>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// NONE-LABEL: func.func @silu_i64
func.func @silu_i64(%z: tensor<3x256xf32>, %w: tensor<3x6xf32>, %i: tensor<3x6xi64>,
                    %g: tensor<8x200x256xf32>, %u: tensor<8x200x256xf32>, %d: tensor<8x256x200xf32>) -> tensor<3x256xf32> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<3x256xf32>, tensor<3x6xf32>, tensor<3x6xi64>, tensor<8x200x256xf32>, tensor<8x200x256xf32>, tensor<8x256x200xf32>) -> tensor<3x256xf32>
  return %r : tensor<3x256xf32>
}

// -----

// Two ops of the same sizes share their kernels.
// CHECK-LABEL: func.func @shared
// CHECK: @kimi_routed_experts::@routed_experts_0_gate_up
// CHECK: @kimi_routed_experts::@routed_experts_0_down
// CHECK: @kimi_routed_experts::@routed_experts_0_gate_up
// CHECK: @kimi_routed_experts::@routed_experts_0_down
// CHECK: gpu.module @kimi_routed_experts
// CHECK-COUNT-2: gpu.func
// CHECK-NOT: gpu.func
func.func @shared(%z: tensor<1x128xf32>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                  %g: tensor<16x64x128xf32>, %u: tensor<16x64x128xf32>, %d: tensor<16x128x64xf32>) -> tensor<1x128xf32> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<1x128xf32>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<16x64x128xf32>, tensor<16x64x128xf32>, tensor<16x128x64xf32>) -> tensor<1x128xf32>
  %r2 = kimi.routed_experts silu %r, %w, %i experts(%g, %u, %d) : (tensor<1x128xf32>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<16x64x128xf32>, tensor<16x64x128xf32>, tensor<16x128x64xf32>) -> tensor<1x128xf32>
  return %r2 : tensor<1x128xf32>
}

// -----

// A prefill chunk (more tokens than max-tokens) is the sorted products'
// domain: left alone, without a remark; so is a dynamic token count.
// CHECK-LABEL: func.func @prefill
// CHECK: kimi.routed_experts
// CHECK: kimi.routed_experts
// CHECK-NOT: gpu.launch_func
func.func @prefill(%z: tensor<256x128xf32>, %w: tensor<256x4xf32>, %i: tensor<256x4xi32>,
                   %zd: tensor<?x128xf32>, %wd: tensor<?x4xf32>, %id: tensor<?x4xi32>,
                   %g: tensor<16x64x128xf32>, %u: tensor<16x64x128xf32>, %d: tensor<16x128x64xf32>) -> (tensor<256x128xf32>, tensor<?x128xf32>) {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<256x128xf32>, tensor<256x4xf32>, tensor<256x4xi32>, tensor<16x64x128xf32>, tensor<16x64x128xf32>, tensor<16x128x64xf32>) -> tensor<256x128xf32>
  %r2 = kimi.routed_experts silu %zd, %wd, %id experts(%g, %u, %d) : (tensor<?x128xf32>, tensor<?x4xf32>, tensor<?x4xi32>, tensor<16x64x128xf32>, tensor<16x64x128xf32>, tensor<16x128x64xf32>) -> tensor<?x128xf32>
  return %r, %r2 : tensor<256x128xf32>, tensor<?x128xf32>
}

// -----

// bf16 experts (the release's dense type) are read at their size: the
// kernels take them as bf16 buffers, load four values (8 bytes) a piece and
// widen them in registers; tokens, h and the output stay f32.
// CHECK-LABEL: func.func @bf16_experts
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_gate_up {{.*}} args(%{{.*}} : memref<128xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<131072xbf16>, %{{.*}} : memref<131072xbf16>, %{{.*}} : memref<256xf32>)
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_down {{.*}} args(%{{.*}} : memref<256xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4xf32>, %{{.*}} : memref<131072xbf16>, %{{.*}} : memref<128xf32>)
// CHECK: gpu.func @routed_experts_0_gate_up
// CHECK: vector.load {{.*}} : memref<131072xbf16>, vector<4xbf16>
// CHECK: arith.extf {{.*}} : vector<4xbf16> to vector<4xf32>
// CHECK: gpu.func @routed_experts_0_down
// CHECK: vector.load {{.*}} : memref<131072xbf16>, vector<4xbf16>
func.func @bf16_experts(%z: tensor<1x128xf32>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                        %g: tensor<16x64x128xbf16>, %u: tensor<16x64x128xbf16>, %d: tensor<16x128x64xbf16>) -> tensor<1x128xf32> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<1x128xf32>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<16x64x128xbf16>, tensor<16x64x128xbf16>, tensor<16x128x64xbf16>) -> tensor<1x128xf32>
  return %r : tensor<1x128xf32>
}

// -----

// MXFP4 experts (the K3 release's) are read as their bytes: each table is
// two i8 buffers, the packed codes (half the values) and one E8M0 scale per
// 32 values. A lane reads a 4-byte word of 8 codes and its block's scale,
// builds each code as f32 bits (magnitude to bits 24..22, sign to 31),
// multiplies by 2^126 and by the scale, and takes two 16-byte loads of the
// f32 vector. Hidden 256 and inner 64: gate/up rows are one chunk of 256
// values; down rows of 64 one masked chunk.
// CHECK-LABEL: func.func @mxfp4
// CHECK-COUNT-6: builtin.unrealized_conversion_cast
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_gate_up {{.*}} args(%{{.*}} : memref<256xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<131072xi8>, %{{.*}} : memref<8192xi8>, %{{.*}} : memref<131072xi8>, %{{.*}} : memref<8192xi8>, %{{.*}} : memref<256xf32>)
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_down {{.*}} args(%{{.*}} : memref<256xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4xf32>, %{{.*}} : memref<131072xi8>, %{{.*}} : memref<8192xi8>, %{{.*}} : memref<256xf32>)
// CHECK: gpu.func @routed_experts_0_gate_up
// CHECK: vector.load {{.*}} : memref<131072xi8{{.*}}>, vector<4xi8>
// CHECK: vector.bitcast {{.*}} : vector<4xi8> to vector<1xi32>
// CHECK: memref.load {{.*}} : memref<8192xi8
// CHECK: arith.constant 4194304 : i32
// CHECK: arith.constant 8.50705917E+37 : f32
// CHECK-COUNT-8: arith.bitcast {{.*}} : i32 to f32
// CHECK: vector.from_elements {{.*}} : vector<8xf32>
// CHECK: vector.load {{.*}} : memref<256xf32{{.*}}>, vector<8xf32>
// CHECK: vector.fma {{.*}} : vector<8xf32>
// CHECK: gpu.func @routed_experts_0_down
// CHECK: arith.cmpi ult
// CHECK: vector.load {{.*}}, vector<4xi8>
// CHECK: arith.select {{.*}} vector<8xf32>
func.func @mxfp4(%z: tensor<1x256xf32>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                 %g: tensor<16x64x256xf4E2M1FN>, %u: tensor<16x64x256xf4E2M1FN>, %d: tensor<16x256x64xf4E2M1FN>,
                 %gs: tensor<16x64x8xf8E8M0FNU>, %us: tensor<16x64x8xf8E8M0FNU>, %ds: tensor<16x256x2xf8E8M0FNU>) -> tensor<1x256xf32> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) : (tensor<1x256xf32>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<16x64x256xf4E2M1FN>, tensor<16x64x256xf4E2M1FN>, tensor<16x256x64xf4E2M1FN>, tensor<16x64x8xf8E8M0FNU>, tensor<16x64x8xf8E8M0FNU>, tensor<16x256x2xf8E8M0FNU>) -> tensor<1x256xf32>
  return %r : tensor<1x256xf32>
}

// -----

// A prefill step's MXFP4 experts are sorted by expert, their rows back to
// back by expert in [T k, W] (no padding) and cut into tiles of 128 rows
// of one expert: a tile table of at most (T k + 127 E) / 128 = (512 +
// 2032) / 128 = 19 entries (expert, first row, end row), and no host read.
// One block of 1024 threads builds the tables (each slot's row, each row's
// token, the tiles) in rounds of 1024 slots (one here): counts by each
// warp's groups of lanes of one expert (match.any) and shared atomics,
// warp 0's scan of the experts' rows and tiles (five shuffles each), then
// the rows: per round each expert's group sizes scanned over the 32 warps
// (five shuffles, one broadcast), two barriers; shared memory 4 x 5 x 16
// (counts, first rows, tiles, two bases) + 2 x 2 x 32 x 16 (two i16
// [warp, expert] tables) = 2368 bytes, whatever the step's slots. The
// products run as the tensor-core
// kernel, eight warps a block: grid (columns / 64, tiles), the codes and scales as i8 buffers, the tile
// table, and the [T k, N] result. Gate and up are one launch that reads
// the tokens where they are (row m is token token[m]: only the token
// indices are scattered) and stores
// their GLU (bf16: down rounds its rows to bf16 anyway); down is another.
// Per 32-deep step the kernel decodes 8 codes a word into a bf16 tile and
// runs four mma.sync per warp, 16-deep half, row tile and table (bf16
// rows; three terms each with bf16-products=false, and then the GLU is
// stored as f32).
// CHECK-LABEL: func.func @mxfp4_prefill
// CHECK-NOT: kimi.routed_experts
// CHECK-NOT: call @kimi_host_read_i32
// CHECK-NOT: linalg.generic
// CHECK: gpu.launch_func  @kimi_routed_experts::@sorted_tables_0 blocks in (%c1{{[_0-9]*}}, %c1{{[_0-9]*}}, %c1{{[_0-9]*}}) threads in (%c1024{{[_0-9]*}}, %c1{{[_0-9]*}}, %c1{{[_0-9]*}})  dynamic_shared_memory_size %c2368_i32 args(%{{.*}} : memref<512xi32>, %{{.*}} : memref<512xf32>, %{{.*}} : memref<512xi32>, %{{.*}} : memref<512xi32>, %{{.*}} : memref<19xi32>, %{{.*}} : memref<19xi32>, %{{.*}} : memref<19xi32>)
// CHECK-NOT: linalg.generic
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_0 blocks in (%c1{{[_0-9]*}}, %c19{{[_0-9]*}}, %c1{{[_0-9]*}}) threads in (%c256{{[_0-9]*}}, %c1{{[_0-9]*}}, %c1{{[_0-9]*}})  args(%{{[a-z0-9_]+}} : memref<?xf32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xbf16>)
// CHECK-NOT: linalg.generic
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_1 blocks in (%c4{{[_0-9]*}}, %c19{{[_0-9]*}}, %c1{{[_0-9]*}}) {{.*}} args(%{{[a-z0-9_]+}} : memref<?xbf16>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xf32>)
// CHECK: gpu.func @sorted_tables_0
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK: gpu.barrier
// CHECK: nvvm.match.sync  any
// CHECK: memref.atomic_rmw addi
// CHECK: gpu.barrier
// CHECK-COUNT-10: gpu.shuffle  up
// CHECK: gpu.barrier
// CHECK: nvvm.match.sync  any
// CHECK: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle  up
// CHECK: gpu.shuffle  idx
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return
// CHECK: gpu.func @expert_product_0
// CHECK: vector.load {{.*}} vector<4xf32>
// CHECK: vector.bitcast {{.*}} : vector<4xi8> to vector<1xi32>
// CHECK: arith.truncf {{.*}} : vector<8xf32> to vector<8xbf16>
// CHECK-COUNT-32: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: math.exp
// CHECK: vector.store {{.*}} : memref<?xbf16>, vector<2xbf16>
// CHECK: gpu.func @expert_product_1
// CHECK-COUNT-16: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: vector.store {{.*}} : memref<?xf32>, vector<2xf32>
// EXACT-LABEL: func.func @mxfp4_prefill
// EXACT: gpu.launch_func  @kimi_routed_experts::@expert_product_0 {{.*}} %{{.*}} : memref<?xi32>, %{{.*}} : memref<?xf32>)
// EXACT: gpu.func @expert_product_0
// EXACT-COUNT-96: nvvm.mma.sync
// EXACT-NOT: nvvm.mma.sync
// EXACT: gpu.func @expert_product_1
// EXACT-COUNT-48: nvvm.mma.sync
func.func @mxfp4_prefill(%z: tensor<128x256xf32>, %w: tensor<128x4xf32>, %i: tensor<128x4xi32>,
                 %g: tensor<16x64x256xf4E2M1FN>, %u: tensor<16x64x256xf4E2M1FN>, %d: tensor<16x256x64xf4E2M1FN>,
                 %gs: tensor<16x64x8xf8E8M0FNU>, %us: tensor<16x64x8xf8E8M0FNU>, %ds: tensor<16x256x2xf8E8M0FNU>) -> tensor<128x256xf32> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) : (tensor<128x256xf32>, tensor<128x4xf32>, tensor<128x4xi32>, tensor<16x64x256xf4E2M1FN>, tensor<16x64x256xf4E2M1FN>, tensor<16x256x64xf4E2M1FN>, tensor<16x64x8xf8E8M0FNU>, tensor<16x64x8xf8E8M0FNU>, tensor<16x256x2xf8E8M0FNU>) -> tensor<128x256xf32>
  return %r : tensor<128x256xf32>
}

// -----

func.func @odd_width(%z: tensor<1x130xf32>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                     %g: tensor<16x64x130xf32>, %u: tensor<16x64x130xf32>, %d: tensor<16x130x64xf32>) -> tensor<1x130xf32> {
  // expected-remark @+1 {{the hidden width 130 and the inner size 64 must be multiples of 4 (4-element loads)}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<1x130xf32>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<16x64x130xf32>, tensor<16x64x130xf32>, tensor<16x130x64xf32>) -> tensor<1x130xf32>
  return %r : tensor<1x130xf32>
}

// -----

// bf16 activations: the tokens and the result are bf16 (the tokens widened
// in registers, the sums rounded at the store); the routing weights and the
// SiTU products h stay f32.
// CHECK-LABEL: func.func @bf16_tokens
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_gate_up {{.*}} args(%{{.*}} : memref<128xbf16>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<131072xbf16>, %{{.*}} : memref<131072xbf16>, %{{.*}} : memref<256xf32>)
// CHECK: gpu.launch_func  @kimi_routed_experts::@routed_experts_0_down {{.*}} args(%{{.*}} : memref<256xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4xf32>, %{{.*}} : memref<131072xbf16>, %{{.*}} : memref<128xbf16>)
// CHECK: gpu.func @routed_experts_0_gate_up
// CHECK: vector.load {{.*}} : memref<128xbf16>, vector<4xbf16>
// CHECK: gpu.func @routed_experts_0_down
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: memref.store {{.*}} : memref<128xbf16>
func.func @bf16_tokens(%z: tensor<1x128xbf16>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                       %g: tensor<16x64x128xbf16>, %u: tensor<16x64x128xbf16>, %d: tensor<16x128x64xbf16>) -> tensor<1x128xbf16> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<1x128xbf16>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<16x64x128xbf16>, tensor<16x64x128xbf16>, tensor<16x128x64xbf16>) -> tensor<1x128xbf16>
  return %r : tensor<1x128xbf16>
}

// -----

// A bf16-activation prefill step's MXFP4 experts: the sorted rows are bf16
// (gathered at the tokens' type), one term whatever bf16-products says.
// Gate/up (k = 256, a multiple of 128) copies the rows, the codes (16-byte
// pieces) and the scales (4-byte pieces) by cp.async into four 128-deep
// stages and decodes the codes in registers (bf16 pair products): 256
// mma.sync a stage, two stages (fewer than four: no loop, the two steps one
// after the other). Down (k = 64) reads the GLU through registers: as bf16
// (f32, in three terms, with bf16-products=false).
// CHECK-LABEL: func.func @mxfp4_prefill_bf16
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_0 {{.*}} args(%{{[a-z0-9_]+}} : memref<?xbf16>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi8>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xbf16>)
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_1 {{.*}} args(%{{[a-z0-9_]+}} : memref<?xbf16>,
// CHECK: gpu.func @expert_product_0
// CHECK: nvgpu.device_async_copy {{.*}}, 8, {{.*}} : memref<?xbf16> to memref<65536xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_copy {{.*}}, 16, {{.*}} {bypassL1} : memref<?xi8> to memref<65536xi8, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_copy {{.*}}, 4, {{.*}} : memref<?xi8> to memref<8192xi8, #gpu.address_space<workgroup>>
// CHECK-NOT: scf.for
// CHECK: llvm.fmul {{.*}} : vector<2xbf16>
// CHECK-COUNT-512: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: gpu.func @expert_product_1
// CHECK: vector.load {{.*}} vector<4xbf16>
// EXACT-LABEL: func.func @mxfp4_prefill_bf16
// EXACT: gpu.func @expert_product_0
// EXACT-COUNT-512: nvvm.mma.sync
// EXACT-NOT: nvvm.mma.sync
// EXACT: gpu.func @expert_product_1
// EXACT-COUNT-48: nvvm.mma.sync
func.func @mxfp4_prefill_bf16(%z: tensor<128x256xbf16>, %w: tensor<128x4xf32>, %i: tensor<128x4xi32>,
                 %g: tensor<16x64x256xf4E2M1FN>, %u: tensor<16x64x256xf4E2M1FN>, %d: tensor<16x256x64xf4E2M1FN>,
                 %gs: tensor<16x64x8xf8E8M0FNU>, %us: tensor<16x64x8xf8E8M0FNU>, %ds: tensor<16x256x2xf8E8M0FNU>) -> tensor<128x256xbf16> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) scales(%gs, %us, %ds) : (tensor<128x256xbf16>, tensor<128x4xf32>, tensor<128x4xi32>, tensor<16x64x256xf4E2M1FN>, tensor<16x64x256xf4E2M1FN>, tensor<16x256x64xf4E2M1FN>, tensor<16x64x8xf8E8M0FNU>, tensor<16x64x8xf8E8M0FNU>, tensor<16x256x2xf8E8M0FNU>) -> tensor<128x256xbf16>
  return %r : tensor<128x256xbf16>
}

// -----

// A prefill step's bf16 experts (the dense release type) with bf16 tokens
// run as the same kernels, but nothing needs a register on its way to
// shared memory: each step's row and table pieces (eight bf16 values, 16
// bytes) are cp.async copies into one of four stages of dynamic shared
// memory (the launch passes 4 x 2 x (128 + 2 x 128) x 40 bytes for gate and
// up, 128 columns of each in warps of 64 rows x 32 columns of each, and
// 4 x 2 x (128 + 256) x 40 for down's 256 columns in warps of 64 x 64). Steps 0..2 go out before the loop;
// step s waits until at most two groups are pending (its own has landed),
// one barrier, then step s + 3's copies into the stage step s - 1 read;
// rows past the tile's end and steps past the last copy 0 bytes (zero
// fill). The loop runs rounds of four steps (gate/up: 8 steps, two
// rounds), unrolled so that each step's stage is a constant; down (k = 64,
// two steps, fewer than the stages) runs its two steps without a loop. The
// GLU is SiTU as K3 has it, stored as bf16: tanh and the sigmoid through
// ex2.approx and rcp.approx, no libdevice tanhf.
// CHECK-LABEL: func.func @bf16_prefill
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_0 {{.*}} dynamic_shared_memory_size %c122880_i32 args(%{{[a-z0-9_]+}} : memref<?xbf16>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xbf16>, %{{[a-z0-9_]+}} : memref<?xbf16>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xbf16>)
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_1 {{.*}} dynamic_shared_memory_size %c122880_i32{{[_0-9]*}} args(%{{[a-z0-9_]+}} : memref<?xbf16>, %{{[a-z0-9_]+}} : memref<?xbf16>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xi32>, %{{[a-z0-9_]+}} : memref<?xf32>)
// CHECK: gpu.func @expert_product_0
// CHECK-NOT: vector.bitcast
// CHECK: memref.view %{{.*}}[%c0{{[_0-9]*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<20480xbf16, #gpu.address_space<workgroup>>
// CHECK: memref.view %{{.*}}[%c40960{{[_0-9]*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<20480xbf16, #gpu.address_space<workgroup>>
// CHECK: memref.view %{{.*}}[%c81920{{[_0-9]*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<20480xbf16, #gpu.address_space<workgroup>>
// CHECK-COUNT-6: nvgpu.device_async_copy {{.*}}, 8, %{{.*}} {bypassL1} : memref<?xbf16> to memref<{{[0-9]+}}xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-6: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-6: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK: scf.for %{{.*}} = %c0{{[_0-9]*}} to %c8{{[_0-9]*}} step %c4
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 2 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK-COUNT-6: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-64: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 2 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK-COUNT-6: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-64: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 2 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK-COUNT-6: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-64: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 2 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK-COUNT-6: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-64: nvvm.mma.sync
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// CHECK-NOT: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 0 : i32}
// CHECK-NOT: math.tanh
// CHECK: math.exp2
// CHECK: nvvm.rcp.approx.ftz.f
// CHECK: gpu.func @expert_product_1
// CHECK-NOT: scf.for
// CHECK-COUNT-128: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: gpu.return
// EXACT-LABEL: func.func @bf16_prefill
// EXACT: gpu.func @expert_product_0
// EXACT-COUNT-64: nvvm.mma.sync
func.func @bf16_prefill(%z: tensor<128x256xbf16>, %w: tensor<128x4xf32>, %i: tensor<128x4xi32>,
                        %g: tensor<16x64x256xbf16>, %u: tensor<16x64x256xbf16>, %d: tensor<16x256x64xbf16>) -> tensor<128x256xbf16> {
  %r = kimi.routed_experts situ %z, %w, %i experts(%g, %u, %d) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<128x256xbf16>, tensor<128x4xf32>, tensor<128x4xi32>, tensor<16x64x256xbf16>, tensor<16x64x256xbf16>, tensor<16x256x64xbf16>) -> tensor<128x256xbf16>
  return %r : tensor<128x256xbf16>
}

// -----

// f32 tables (the reference configuration) keep the linalg form's products
// (over blocks of the largest count, which the host reads).
// CHECK-LABEL: func.func @f32_prefill
// CHECK-NOT: expert_product
// CHECK: kimi.routed_experts
func.func @f32_prefill(%z: tensor<128x256xf32>, %w: tensor<128x4xf32>, %i: tensor<128x4xi32>,
                       %g: tensor<16x64x256xf32>, %u: tensor<16x64x256xf32>, %d: tensor<16x256x64xf32>) -> tensor<128x256xf32> {
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<128x256xf32>, tensor<128x4xf32>, tensor<128x4xi32>, tensor<16x64x256xf32>, tensor<16x64x256xf32>, tensor<16x256x64xf32>) -> tensor<128x256xf32>
  return %r : tensor<128x256xf32>
}

// -----

func.func @f16_tokens(%z: tensor<1x128xf16>, %w: tensor<1x4xf32>, %i: tensor<1x4xi32>,
                      %g: tensor<16x64x128xf32>, %u: tensor<16x64x128xf32>, %d: tensor<16x128x64xf32>) -> tensor<1x128xf16> {
  // expected-remark @+1 {{the tokens must be f32 or bf16, and the result of their type}}
  %r = kimi.routed_experts silu %z, %w, %i experts(%g, %u, %d) : (tensor<1x128xf16>, tensor<1x4xf32>, tensor<1x4xi32>, tensor<16x64x128xf32>, tensor<16x64x128xf32>, tensor<16x128x64xf32>) -> tensor<1x128xf16>
  return %r : tensor<1x128xf16>
}

// -----

// A batch of decode tokens past max-tokens: 64 tokens, top 4 of 16 experts,
// 16 rows an expert on average. The tiles are 32 rows by 128 columns
// (`_m32`: grid ceil(64 / 128) by the bound on tiles, (256 + 31 x 16) / 32
// = 23), three stages of dynamic shared memory (3 x 2 x (32 + 2 x 128) x
// 40 bytes for gate and up); each step copies a row piece of 8 bytes a
// thread (through L1) and two 16-byte table pieces a table, and each warp
// (32 x 16 of the tile) runs 2 x 2 x 2 mma a table.
// CHECK-LABEL: func.func @bf16_batch_decode
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_0 blocks in (%c1{{[_0-9]*}}, %c23{{[_0-9]*}}, %c1{{[_0-9]*}}) {{.*}} dynamic_shared_memory_size %c69120_i32
// CHECK: gpu.launch_func  @kimi_routed_experts::@expert_product_1 blocks in (%c2{{[_0-9]*}}, %c23{{[_0-9]*}}, %c1{{[_0-9]*}}) {{.*}} dynamic_shared_memory_size %c38400_i32
// CHECK: gpu.func @expert_product_0
// CHECK: memref.view %{{.*}} to memref<3840xbf16, #gpu.address_space<workgroup>>
// CHECK: memref.view %{{.*}} to memref<15360xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_copy {{.*}}, 4, %{{.*}} : memref<?xbf16> to memref<3840xbf16, #gpu.address_space<workgroup>>
// CHECK-COUNT-4: nvgpu.device_async_copy {{.*}}, 8, %{{.*}} {bypassL1} : memref<?xbf16> to memref<15360xbf16, #gpu.address_space<workgroup>>
// Eight steps over three stages: two rounds of three in the loop, then two
// steps after it, each with its stage a constant.
// CHECK: scf.for %{{.*}} = %c0{{[_0-9]*}} to %c6{{[_0-9]*}} step %c3
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK-COUNT-16: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK-COUNT-16: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK-COUNT-16: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: scf.yield
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK-COUNT-16: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK-COUNT-16: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 0 : i32}
// CHECK: gpu.func @expert_product_1
func.func @bf16_batch_decode(%z: tensor<64x256xbf16>, %w: tensor<64x4xf32>, %i: tensor<64x4xi32>,
                             %g: tensor<16x64x256xbf16>, %u: tensor<16x64x256xbf16>, %d: tensor<16x256x64xbf16>) -> tensor<64x256xbf16> {
  %r = kimi.routed_experts situ %z, %w, %i experts(%g, %u, %d) {beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<64x256xbf16>, tensor<64x4xf32>, tensor<64x4xi32>, tensor<16x64x256xbf16>, tensor<16x64x256xbf16>, tensor<16x256x64xbf16>) -> tensor<64x256xbf16>
  return %r : tensor<64x256xbf16>
}

// RUN: kimi-opt %s -split-input-file -kimi-gpu-mla-kernels -verify-diagnostics | FileCheck %s

// A chunked prefill step over a padded cache (k3-tiny's widths: 4 heads,
// qk 32 + 16, v 32, latent 64): the latent columns of the cache are
// expanded into k_nope and v by one product; q, the expansion and the k_pe
// columns are rounded to f16 copies, and the attention is one launch of the
// generated kernel over flat views of them, the gate and the lengths. B, T
// and S are run-time arguments; the grid is (ceil(T / 64), H, B).
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @prefill_chunk
// CHECK-NOT: kimi.mla_decode
// CHECK: %[[LAT:.*]] = tensor.extract_slice %{{.*}}[0, 0, 0] [1, %{{.*}}, 64] [1, 1, 1] : tensor<1x?x80xf32> to tensor<1x?x64xf32>
// CHECK: %[[PE:.*]] = tensor.extract_slice %{{.*}}[0, 0, 64] [1, %{{.*}}, 16] [1, 1, 1] : tensor<1x?x80xf32> to tensor<1x?x16xf32>
// CHECK: %[[KV:.*]] = kimi.linear %[[LAT]], %{{.*}} : tensor<1x?x64xf32>, tensor<256x64xf32> -> tensor<1x?x256xf32>
// CHECK: arith.truncf %{{.*}} : tensor<1x128x4x48xf32> to tensor<1x128x4x48xf16>
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<24576xf16> to memref<24576xf16>
// CHECK: arith.truncf %[[KV]] : tensor<1x?x256xf32> to tensor<1x?x256xf16>
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<?xf16> to memref<?xf16>
// CHECK: arith.truncf %[[PE]] : tensor<1x?x16xf32> to tensor<1x?x16xf16>
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<?xf16> to memref<?xf16>
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<16384xf32> to memref<16384xf32>
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<1xi32> to memref<1xi32>
// CHECK: memref.cast %{{.*}} : memref<1xi32> to memref<?xi32>
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<16384xf32>
// CHECK: %[[GX:.*]] = arith.ceildivui %{{.*}}, %c64
// CHECK: gpu.launch_func  @kimi_mla::@mla_prefill_0 blocks in (%[[GX]], %c4, %{{.*}}) threads in (%c128{{.*}}, %c1{{.*}}, %c1{{.*}})  dynamic_shared_memory_size %c24576_i32 args({{.*}} : memref<?xf16>, {{.*}} : memref<?xf16>, {{.*}} : memref<?xf16>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xi32>, {{.*}} : memref<?xf32>, %{{.*}} : index, %c128 : index, %dim : index)
// CHECK: bufferization.to_tensor %[[OUT]] restrict writable : memref<16384xf32>
// CHECK: tensor.expand_shape
// CHECK: gpu.module @kimi_mla
// CHECK: gpu.func @mla_prefill_0
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// Two stages of [k_nope | k_pe] (2 x 64 x (48 + 8) f16) and of v
// (2 x 64 x (32 + 8)) in dynamic shared memory: 24,576 bytes.
// CHECK: gpu.dynamic_shared_memory
// CHECK: memref.view %{{.*}}[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<7168xf16, #gpu.address_space<workgroup>>
// CHECK: memref.view %{{.*}}[%c14336][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<5120xf16, #gpu.address_space<workgroup>>
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?xf16>, vector<8xf16>
// CHECK: nvvm.ldmatrix
// Key tile 0's copies before the loop; each trip issues the next tile's,
// then waits for its own (one group may stay in flight).
// CHECK: nvgpu.device_async_copy %arg1[%{{.*}}], %{{.*}}[%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK: %[[G0:.*]] = nvgpu.device_async_create_group
// CHECK: scf.for
// CHECK: gpu.barrier
// CHECK: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK: nvgpu.device_async_wait %[[G0]] {numGroups = 1 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK: nvvm.mma.sync {{.*}} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK: math.exp2
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
func.func @prefill_chunk(%q: tensor<1x128x4x48xf32>, %cache: tensor<1x?x80xf32>, %kvb: tensor<256x64xf32>,
                         %gate: tensor<1x128x4x32xf32>, %len: tensor<1xi32>) -> tensor<1x128x4x32xf32> {
  %o = kimi.mla_decode %q, %cache, %kvb gate %gate lengths %len scale(0.14433756729740643) : (tensor<1x128x4x48xf32>, tensor<1x?x80xf32>, tensor<256x64xf32>, tensor<1x128x4x32xf32>, tensor<1xi32>) -> tensor<1x128x4x32xf32>
  return %o : tensor<1x128x4x32xf32>
}

// -----

// The whole-sequence form: k_pe is its own tensor (stride 16, offset 0)
// and every key row is valid; a dynamic sequence length is fine.
// CHECK-LABEL: func.func @whole_sequence
// CHECK-NOT: kimi.mla
// CHECK: kimi.linear %{{.*}}, %{{.*}} : tensor<2x?x64xf32>, tensor<256x64xf32> -> tensor<2x?x256xf32>
// CHECK: gpu.launch_func @kimi_mla::@mla_prefill_0
func.func @whole_sequence(%q: tensor<2x?x4x48xf32>, %ckv: tensor<2x?x64xf32>, %kpe: tensor<2x?x16xf32>,
                   %kvb: tensor<256x64xf32>) -> tensor<2x?x4x32xf32> {
  %o = kimi.mla %q, %ckv, %kpe, %kvb scale(0.14433756729740643) : (tensor<2x?x4x48xf32>, tensor<2x?x64xf32>, tensor<2x?x16xf32>, tensor<256x64xf32>) -> tensor<2x?x4x32xf32>
  return %o : tensor<2x?x4x32xf32>
}

// -----

// One-token decode keeps the absorbed form: the queries are folded through
// W_uk by linalg, the attention over the latent cache is the split-key
// kernel (grid: splits, ceil(T H / 16), B) and the combine kernel, and W_uv
// is linalg again. Without lengths every cache row is a key. Splits: as
// many as fill the 132 SMs once with the B * ceil(T H / 16) blocks of a
// split (at least 64 keys each). The combine takes 16 latent columns a
// block (four blocks for the 64-wide latent).
// CHECK-LABEL: func.func @decode
// CHECK-NOT: kimi.mla_decode
// CHECK: linalg.generic
// CHECK: arith.divui %c132, %{{.*}} : index
// CHECK: arith.ceildivui %{{.*}}, %{{.*}} : index
// CHECK: %[[KPS:.*]] = arith.maxui %{{.*}}, %c64 : index
// CHECK: %[[N:.*]] = arith.ceildivui %{{.*}}, %[[KPS]] : index
// CHECK: %[[SPLITS:.*]] = arith.maxui %[[N]], %c1
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_split_0 blocks in (%[[SPLITS]], %{{.*}}, %c1{{.*}}) threads in (%c256{{.*}}, %c1{{.*}}, %c1{{.*}})  args({{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, %c1{{.*}} : index, %{{.*}} : index, %{{.*}} : index, %[[SPLITS]] : index)
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_combine_0 blocks in (%c4{{.*}}, %{{.*}}, %c1{{.*}}) threads in (%c256{{.*}}, %c1{{.*}}, %c1{{.*}})  args({{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, %{{.*}} : index, %[[SPLITS]] : index)
// CHECK: linalg.generic
// CHECK: gpu.func @mla_decode_split_0
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// The split's cache rows are asked for in L2 at once, the queries and the
// first key tile in L1, and each trip names the next tile's lines in L1.
// CHECK: nvvm.cp.async.bulk.prefetch
// CHECK: nvvm.prefetch level = L1, {{.*}} : !llvm.ptr<1>
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CHECK: nvvm.ldmatrix
// CHECK: scf.for
// CHECK: nvvm.prefetch level = L1, {{.*}} : !llvm.ptr<1>
// CHECK: nvvm.mma.sync {{.*}} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK: math.exp2
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
// CHECK: gpu.func @mla_decode_combine_0
// CHECK: math.exp2
// CHECK: gpu.shuffle  xor
func.func @decode(%q: tensor<1x1x4x48xf32>, %cache: tensor<1x?x80xf32>, %kvb: tensor<256x64xf32>) -> tensor<1x1x4x32xf32> {
  %o = kimi.mla_decode %q, %cache, %kvb scale(0.14433756729740643) : (tensor<1x1x4x48xf32>, tensor<1x?x80xf32>, tensor<256x64xf32>) -> tensor<1x1x4x32xf32>
  return %o : tensor<1x1x4x32xf32>
}

// -----

// A batch of 64 one-token sequences: 64 blocks a split (4 heads: one row
// tile each), so at most 132 / 64 = 2 splits. The combine then takes 256
// columns a block, a thread a column with all splits in one trip (the
// 16-column form's groups would mostly idle): grid (ceil(64 / 256) = 1,
// T H, B).
// CHECK-LABEL: func.func @decode_batch
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_split_0
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_combine_0 blocks in (%c1{{.*}}, %{{.*}}, %c64{{.*}}) threads in (%c256{{.*}}, %c1{{.*}}, %c1{{.*}})
// CHECK: gpu.func @mla_decode_combine_0
// CHECK-NOT: arith.divui %{{.*}}, %c16 : index
// CHECK: math.exp2
// CHECK: gpu.return
func.func @decode_batch(%q: tensor<64x1x4x48xf32>, %cache: tensor<64x?x80xf32>, %kvb: tensor<256x64xf32>) -> tensor<64x1x4x32xf32> {
  %o = kimi.mla_decode %q, %cache, %kvb scale(0.14433756729740643) : (tensor<64x1x4x48xf32>, tensor<64x?x80xf32>, tensor<256x64xf32>) -> tensor<64x1x4x32xf32>
  return %o : tensor<64x1x4x32xf32>
}

// -----

// The model's decode step over a padded cache: the new row is inserted
// after the valid ones and the op reads lengths + 1 rows. The split kernel
// reads the old cache and the row where they are (and the lengths), so the
// grown cache, a copy of the whole cache, is never made.
// CHECK-LABEL: func.func @decode_inserted_row
// CHECK-NOT: kimi.cache_insert
// CHECK-NOT: kimi.mla_decode
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_split_0 {{.*}} args({{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xi32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, %c1{{.*}} : index, %{{.*}} : index, %c1{{.*}} : index, %{{.*}} : index, %{{.*}} : index)
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_combine_0
// CHECK-NOT: kimi.cache_insert
// CHECK: gpu.func @mla_decode_split_0(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi32>,
func.func @decode_inserted_row(%q: tensor<1x1x4x48xf32>, %cache: tensor<1x?x80xf32>, %row: tensor<1x1x80xf32>,
                               %kvb: tensor<256x64xf32>, %gate: tensor<1x1x4x32xf32>, %len: tensor<1xi32>) -> tensor<1x1x4x32xf32> {
  %grown = kimi.cache_insert %row into %cache lengths %len : (tensor<1x?x80xf32>, tensor<1x1x80xf32>, tensor<1xi32>) -> tensor<1x?x80xf32>
  %one = arith.constant dense<1> : tensor<1xi32>
  %valid = arith.addi %len, %one : tensor<1xi32>
  %o = kimi.mla_decode %q, %grown, %kvb gate %gate lengths %valid scale(0.14433756729740643) : (tensor<1x1x4x48xf32>, tensor<1x?x80xf32>, tensor<256x64xf32>, tensor<1x1x4x32xf32>, tensor<1xi32>) -> tensor<1x1x4x32xf32>
  return %o : tensor<1x1x4x32xf32>
}

// -----

// Lengths that are not the insert's plus the step's rows: the kernel reads
// the grown cache with the op's own lengths.
// CHECK-LABEL: func.func @decode_other_lengths
// CHECK: kimi.cache_insert
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_split_0 {{.*}} args({{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xi32>, {{.*}} : memref<?xf32>,
func.func @decode_other_lengths(%q: tensor<1x1x4x48xf32>, %cache: tensor<1x?x80xf32>, %row: tensor<1x1x80xf32>,
                                %kvb: tensor<256x64xf32>, %len: tensor<1xi32>, %valid: tensor<1xi32>) -> tensor<1x1x4x32xf32> {
  %grown = kimi.cache_insert %row into %cache lengths %len : (tensor<1x?x80xf32>, tensor<1x1x80xf32>, tensor<1xi32>) -> tensor<1x?x80xf32>
  %o = kimi.mla_decode %q, %grown, %kvb lengths %valid scale(0.14433756729740643) : (tensor<1x1x4x48xf32>, tensor<1x?x80xf32>, tensor<256x64xf32>, tensor<1xi32>) -> tensor<1x1x4x32xf32>
  return %o : tensor<1x1x4x32xf32>
}

// -----

// The unpadded form concatenates the cache and the row: read both in place.
// CHECK-LABEL: func.func @decode_concat
// CHECK-NOT: tensor.concat
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_split_0 {{.*}} args({{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, {{.*}} : memref<?xf32>, %c1{{.*}} : index,
func.func @decode_concat(%q: tensor<1x1x4x48xf32>, %cache: tensor<1x?x80xf32>, %row: tensor<1x1x80xf32>,
                         %kvb: tensor<256x64xf32>) -> tensor<1x1x4x32xf32> {
  %grown = tensor.concat dim(1) %cache, %row : (tensor<1x?x80xf32>, tensor<1x1x80xf32>) -> tensor<1x?x80xf32>
  %o = kimi.mla_decode %q, %grown, %kvb scale(0.14433756729740643) : (tensor<1x1x4x48xf32>, tensor<1x?x80xf32>, tensor<256x64xf32>) -> tensor<1x1x4x32xf32>
  return %o : tensor<1x1x4x32xf32>
}

// -----

// A latent width the decode kernel does not tile stays, and says why.
func.func @decode_odd_latent(%q: tensor<1x1x4x48xf32>, %cache: tensor<1x?x40xf32>, %kvb: tensor<256x24xf32>) -> tensor<1x1x4x32xf32> {
  // expected-remark @+1 {{kept for kimi-lower-to-linalg (no GPU MLA decode kernel): latent width 24: the decode kernel needs a multiple of 16}}
  %o = kimi.mla_decode %q, %cache, %kvb scale(0.14433756729740643) : (tensor<1x1x4x48xf32>, tensor<1x?x40xf32>, tensor<256x24xf32>) -> tensor<1x1x4x32xf32>
  return %o : tensor<1x1x4x32xf32>
}

// -----

// Shapes the kernel does not cover stay, and say why: a v head width that
// is not a multiple of 16, and f16 queries.
func.func @odd_width(%q: tensor<1x64x4x48xf32>, %cache: tensor<1x?x80xf32>, %kvb: tensor<160x64xf32>) -> tensor<1x64x4x8xf32> {
  // expected-remark @+1 {{kept for kimi-lower-to-linalg (no GPU MLA kernel): v head width 8: the kernel needs a multiple of 16}}
  %o = kimi.mla_decode %q, %cache, %kvb scale(0.14433756729740643) : (tensor<1x64x4x48xf32>, tensor<1x?x80xf32>, tensor<160x64xf32>) -> tensor<1x64x4x8xf32>
  return %o : tensor<1x64x4x8xf32>
}

// -----

func.func @f16(%q: tensor<1x64x4x48xf16>, %cache: tensor<1x?x80xf16>, %kvb: tensor<256x64xf16>) -> tensor<1x64x4x32xf16> {
  // expected-remark @+1 {{kept for kimi-lower-to-linalg (no GPU MLA kernel): the kernel reads queries, keys and gate of its result's type, f32 or bf16}}
  %o = kimi.mla_decode %q, %cache, %kvb scale(0.14433756729740643) : (tensor<1x64x4x48xf16>, tensor<1x?x80xf16>, tensor<256x64xf16>) -> tensor<1x64x4x32xf16>
  return %o : tensor<1x64x4x32xf16>
}

// -----

// bf16 activations (a bf16 cache): prefill rounds bf16 queries and keys to
// its f16 copies through f32, reads the gate and writes the result as bf16.
// CHECK-LABEL: func.func @bf16_prefill
// CHECK: kimi.linear %{{.*}}, %{{.*}} : tensor<1x?x64xbf16>, tensor<256x64xbf16> -> tensor<1x?x256xf32>
// CHECK: arith.extf %{{.*}} : tensor<1x128x4x48xbf16> to tensor<1x128x4x48xf32>
// CHECK: arith.truncf %{{.*}} : tensor<1x128x4x48xf32> to tensor<1x128x4x48xf16>
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<16384xbf16>
// CHECK: gpu.launch_func  @kimi_mla::@mla_prefill_0 {{.*}} args({{.*}} : memref<?xf16>, {{.*}} : memref<?xf16>, {{.*}} : memref<?xf16>, {{.*}} : memref<?xbf16>, {{.*}} : memref<?xi32>, {{.*}} : memref<?xbf16>,
// CHECK: gpu.func @mla_prefill_0
// CHECK: arith.extf {{.*}} : bf16 to f32
// CHECK: arith.truncf {{.*}} : f32 to bf16
func.func @bf16_prefill(%q: tensor<1x128x4x48xbf16>, %cache: tensor<1x?x80xbf16>, %kvb: tensor<256x64xbf16>,
                        %gate: tensor<1x128x4x32xbf16>, %len: tensor<1xi32>) -> tensor<1x128x4x32xbf16> {
  %o = kimi.mla_decode %q, %cache, %kvb gate %gate lengths %len scale(0.14433756729740643) : (tensor<1x128x4x48xbf16>, tensor<1x?x80xbf16>, tensor<256x64xbf16>, tensor<1x128x4x32xbf16>, tensor<1xi32>) -> tensor<1x128x4x32xbf16>
  return %o : tensor<1x128x4x32xbf16>
}

// -----

// A bf16 decode step: the split kernel takes q, the cache and the new row as
// bf16 (8-byte loads widened as they are staged), the absorbed queries and
// partial mixes as f32; q_pe and the absorbed queries, of two types, are one
// guarded load each.
// CHECK-LABEL: func.func @bf16_decode
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_split_0 {{.*}} args({{.*}} : memref<?xf32>, {{.*}} : memref<?xbf16>, {{.*}} : memref<?xbf16>, {{.*}} : memref<?xbf16>, {{.*}} : memref<?xi32>, {{.*}} : memref<?xf32>,
// CHECK: gpu.func @mla_decode_split_0(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xi32>,
// CHECK: vector.load {{.*}} : memref<?xbf16>, vector<4xbf16>
// CHECK: arith.extf {{.*}} : vector<4xbf16> to vector<4xf32>
func.func @bf16_decode(%q: tensor<1x1x4x48xbf16>, %cache: tensor<1x?x80xbf16>, %row: tensor<1x1x80xbf16>,
                       %kvb: tensor<256x64xbf16>, %gate: tensor<1x1x4x32xbf16>, %len: tensor<1xi32>) -> tensor<1x1x4x32xbf16> {
  %grown = kimi.cache_insert %row into %cache lengths %len : (tensor<1x?x80xbf16>, tensor<1x1x80xbf16>, tensor<1xi32>) -> tensor<1x?x80xbf16>
  %one = arith.constant dense<1> : tensor<1xi32>
  %valid = arith.addi %len, %one : tensor<1xi32>
  %o = kimi.mla_decode %q, %grown, %kvb gate %gate lengths %valid scale(0.14433756729740643) : (tensor<1x1x4x48xbf16>, tensor<1x?x80xbf16>, tensor<256x64xbf16>, tensor<1x1x4x32xbf16>, tensor<1xi32>) -> tensor<1x1x4x32xbf16>
  return %o : tensor<1x1x4x32xbf16>
}

// -----

// K3's decode step: 96 heads are six 16-row tiles of the split kernel's
// grid, so 132 / 6 = 22 splits fill the SMs; the latent is 512 wide (32
// combine blocks of 16 columns).
// CHECK-LABEL: func.func @k3_decode
// CHECK-NOT: kimi.cache_insert
// CHECK: %[[ROWTILES:.*]] = arith.ceildivui %{{.*}}, %c16{{.*}} : index
// CHECK: %[[BLOCKS:.*]] = arith.muli %c1{{.*}}, %[[ROWTILES]] : index
// CHECK: arith.divui %c132, %[[BLOCKS]] : index
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_split_0 blocks in (%{{.*}}, %{{.*}}, %c1{{.*}})
// CHECK: gpu.launch_func  @kimi_mla::@mla_decode_combine_0 blocks in (%c32{{.*}}, %{{.*}}, %c1{{.*}})
func.func @k3_decode(%q: tensor<1x1x96x192xf32>, %cache: tensor<1x?x576xf32>, %row: tensor<1x1x576xf32>,
                     %kvb: tensor<24576x512xf32>, %gate: tensor<1x1x96x128xf32>, %len: tensor<1xi32>) -> tensor<1x1x96x128xf32> {
  %grown = kimi.cache_insert %row into %cache lengths %len : (tensor<1x?x576xf32>, tensor<1x1x576xf32>, tensor<1xi32>) -> tensor<1x?x576xf32>
  %one = arith.constant dense<1> : tensor<1xi32>
  %valid = arith.addi %len, %one : tensor<1xi32>
  %o = kimi.mla_decode %q, %grown, %kvb gate %gate lengths %valid scale(0.07216878364870323) : (tensor<1x1x96x192xf32>, tensor<1x?x576xf32>, tensor<24576x512xf32>, tensor<1x1x96x128xf32>, tensor<1xi32>) -> tensor<1x1x96x128xf32>
  return %o : tensor<1x1x96x128xf32>
}

// The sm_90a target turns a chunked kimi.kda (its kimi.kda_gate fused) into
// generated kernels: the token-parallel kda_prep with tensor-core Akk/Aqk
// when the decay proof allows dense diagonal tiles, and the kda_recur chunk
// loop with the state in mma registers and cp.async double buffering.
// RUN: kimi-compile %s --target sm_90a --emit=gpu -o - | FileCheck %s
// RUN: kimi-compile %s --target sm_90a --emit=ptx -o - | FileCheck %s --check-prefix=PTX
// RUN: kimi-compile %s --target sm_90a --kda-segments 3 --emit=gpu -o - | FileCheck %s --check-prefix=SPLIT
// RUN: kimi-compile %s --target sm_90a --kda-value-split 1 --emit=gpu -o - | FileCheck %s --check-prefix=WHOLE

// Two heads fill few SMs: each state is split over 2 blocks of 64 value
// columns (4 warps, 128 threads).
// CHECK: // entry @prefill: prefill: dense (gate fused) diagonal tiles, 1 sequence(s) x 2 heads, 1 segment(s), 2 block(s) per state
// CHECK: gpu.module @kda_prefill
// CHECK: gpu.func @kda_prep(%{{.*}}: memref<16384xbf16>, %{{.*}}: memref<16384xbf16>, %{{.*}}: memref<16384xbf16>, %{{.*}}: memref<128xbf16>, %{{.*}}: memref<2xi32>, %{{.*}}: memref<2xf32>, %{{.*}}: memref<256xf32>,
// CHECK-SAME: kernel
// CHECK-SAME: known_block_size = array<i32: 64, 1, 1>
// The gate is formed in the kernel: exp(a_log), sigmoid, times L = -5.
// CHECK: arith.constant -5.000000e+00 : f32
// CHECK: nvvm.ldmatrix
// CHECK: nvvm.mma.sync {{.*}}multiplicandAPtxType = #nvvm.mma_type<bf16>
// CHECK: gpu.func @kda_recur
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group
// CHECK: scf.for
// CHECK: nvgpu.device_async_wait
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
// CHECK-NOT: gpu.func @kda_summarize

// PTX: .target sm_90a
// PTX: .visible .entry kda_prep(
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: .visible .entry kda_recur(
// PTX: cp.async.cg.shared.global
// PTX: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

// WHOLE: 1 segment(s), 1 block(s) per state
// WHOLE: gpu.func @kda_recur
// WHOLE-SAME: known_block_size = array<i32: 256, 1, 1>

// SPLIT: 3 segment(s)
// SPLIT-DAG: gpu.func @kda_summarize
// SPLIT-DAG: gpu.func @kda_fold
// SPLIT-DAG: gpu.func @kda_recur

func.func @prefill(%q: tensor<1x64x2x128xbf16>, %k: tensor<1x64x2x128xbf16>, %v: tensor<1x64x2x128xbf16>,
                   %z: tensor<1x64x2x128xbf16>, %b: tensor<1x64x2xbf16>, %a: tensor<2xf32>, %dt: tensor<2x128xf32>,
                   %s0: tensor<1x2x128x128xf32>) -> (tensor<1x64x2x128xbf16>, tensor<1x2x128x128xf32>) {
  %g = kimi.kda_gate lower_bound lower = -5.0 %z, %a, %dt : tensor<1x64x2x128xbf16>, tensor<2xf32>, tensor<2x128xf32> -> tensor<1x64x2x128xf32>
  %o, %s = kimi.kda %q, %k, %v, %g, %b initial_state %s0 scale(0.088388347648318) : (tensor<1x64x2x128xbf16>, tensor<1x64x2x128xbf16>, tensor<1x64x2x128xbf16>, tensor<1x64x2x128xf32>, tensor<1x64x2xbf16>, tensor<1x2x128x128xf32>) -> (tensor<1x64x2x128xbf16>, tensor<1x2x128x128xf32>)
  return %o, %s : tensor<1x64x2x128xbf16>, tensor<1x2x128x128xf32>
}

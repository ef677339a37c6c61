// RUN: kimi-opt %s -split-input-file -kimi-gpu-short-conv-kernels -verify-diagnostics | FileCheck %s

// A decode step's convolution with SiLU and a carried state: one launch
// writes the output and the final state. A step of fewer than eight tokens
// takes one row a thread: B (T + K - 1) C / 4 = 1 * 4 * 16 = 64 threads,
// one block of 256. B and T are run-time arguments.
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @decode_step
// CHECK-NOT: kimi.short_conv
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<64xf32>
// CHECK: %[[FIN:.*]] = memref.alloc() : memref<192xf32>
// CHECK: gpu.launch_func  @kimi_short_conv::@short_conv_0 blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%c256{{.*}}, %{{.*}}, %{{.*}})  args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<256xf32>, %{{.*}} : memref<?xf32>, %{{.*}} : memref<?xf32>, %{{.*}} : memref<?xf32>, %c1{{.*}} : index, %c1{{.*}} : index)
// CHECK-DAG: bufferization.to_tensor %[[OUT]] restrict writable
// CHECK-DAG: bufferization.to_tensor %[[FIN]] restrict writable
// CHECK: gpu.module @kimi_short_conv
// CHECK: gpu.func @short_conv_0
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// Four channels a thread, the state and x rows each read 16 bytes at once,
// all four x rows before any result; then the output (r < T) or a
// final-state row (T <= r < T + 3).
// CHECK-NOT: arith.divui %{{.*}}, %c8
// CHECK-COUNT-4: vector.load %arg0{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CHECK-NOT: vector.load %arg0
// CHECK: memref.load %arg1
// CHECK: scf.if
// CHECK: math.exp
// CHECK: vector.store {{.*}}, %arg3
// CHECK: scf.if
// CHECK: vector.store {{.*}}, %arg4
func.func @decode_step(%x: tensor<1x1x64xf32>, %w: tensor<64x1x4xf32>, %s: tensor<1x3x64xf32>) -> (tensor<1x1x64xf32>, tensor<1x3x64xf32>) {
  %o, %f = kimi.short_conv silu %x, %w state %s : tensor<1x1x64xf32>, tensor<64x1x4xf32>, tensor<1x3x64xf32> -> tensor<1x1x64xf32>, tensor<1x3x64xf32>
  return %o, %f : tensor<1x1x64xf32>, tensor<1x3x64xf32>
}

// -----

// A whole prompt of run-time length without a state (zeros) and without
// SiLU; an odd channel count goes one channel a thread. The two ops differ
// in their specialisation: two kernels. A thread takes a tile of eight rows
// of the extended sequence: threads B ceil((T + 3) / 8) C. It reads the
// tile's rows and the three after them, each x row once, before any
// result, then per row of the tile an output (r < T) and a final-state row
// (T <= r < T + 3).
// CHECK-LABEL: func.func @prompt
// CHECK: %[[T:.*]] = tensor.dim %arg0, %c1
// CHECK: arith.ceildivui %{{.*}}, %c8
// CHECK: gpu.launch_func  @kimi_short_conv::@short_conv_0 {{.*}} args(%{{.*}} : memref<?xf32>, %{{.*}} : memref<12xf32>, %{{.*}} : memref<?xf32>, %{{.*}} : memref<?xf32>, %c2{{.*}} : index, %[[T]] : index)
// CHECK: gpu.launch_func  @kimi_short_conv::@short_conv_1
// CHECK: gpu.module @kimi_short_conv
// CHECK: gpu.func @short_conv_0
// CHECK: %[[TILES:.*]] = arith.divui %{{.*}}, %c8
// CHECK: arith.remui %{{.*}}, %[[TILES]]
// CHECK-COUNT-11: vector.load %arg0{{.*}} : memref<?xf32>, vector<1xf32>
// CHECK-NOT: vector.load %arg0
// CHECK-NOT: math.exp
// CHECK: scf.if
// CHECK: vector.store {{.*}}, %arg2
// CHECK: scf.if
// CHECK: vector.store {{.*}}, %arg3
// CHECK: gpu.func @short_conv_1
func.func @prompt(%x: tensor<2x?x3xf32>, %w: tensor<3x1x4xf32>, %y: tensor<2x?x4xf32>, %w2: tensor<4x1x4xf32>) -> (tensor<2x?x3xf32>, tensor<2x3x3xf32>, tensor<2x?x4xf32>) {
  %o, %f = kimi.short_conv %x, %w : tensor<2x?x3xf32>, tensor<3x1x4xf32> -> tensor<2x?x3xf32>, tensor<2x3x3xf32>
  %o2, %f2 = kimi.short_conv silu %y, %w2 : tensor<2x?x4xf32>, tensor<4x1x4xf32> -> tensor<2x?x4xf32>, tensor<2x3x4xf32>
  return %o, %f, %o2 : tensor<2x?x3xf32>, tensor<2x3x3xf32>, tensor<2x?x4xf32>
}

// -----

// A KDA layer's q convolution, bf16, whose 128-wide heads are L2-normalised
// next: the norm runs in the convolution's kernel (the warp of a head
// rounds its values to bf16, sums their squares by a butterfly and scales
// by rsqrt(sum + eps)), and kimi.l2_norm is gone.
// CHECK-LABEL: func.func @conv_then_head_norm
// CHECK-NOT: kimi.l2_norm
// CHECK: gpu.launch_func  @kimi_short_conv::@short_conv_0
// CHECK-NOT: kimi.l2_norm
// CHECK: %[[HEADS:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0], [1], [2, 3]] output_shape [1, 1, 2, 128]
// CHECK: return %[[HEADS]]
// CHECK: gpu.func @short_conv_0
// CHECK: math.exp
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: arith.extf
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: math.rsqrt
// CHECK: vector.store
func.func @conv_then_head_norm(%x: tensor<1x1x256xbf16>, %w: tensor<256x1x4xf32>, %s: tensor<1x3x256xf32>) -> (tensor<1x1x2x128xbf16>, tensor<1x3x256xf32>) {
  %o, %f = kimi.short_conv silu %x, %w state %s : tensor<1x1x256xbf16>, tensor<256x1x4xf32>, tensor<1x3x256xf32> -> tensor<1x1x256xbf16>, tensor<1x3x256xf32>
  %h = tensor.expand_shape %o [[0], [1], [2, 3]] output_shape [1, 1, 2, 128] : tensor<1x1x256xbf16> into tensor<1x1x2x128xbf16>
  %n = kimi.l2_norm %h eps(1.0e-6) : tensor<1x1x2x128xbf16> -> tensor<1x1x2x128xbf16>
  return %n, %f : tensor<1x1x2x128xbf16>, tensor<1x3x256xf32>
}

// -----

// Norms that stay for kimi-gpu-norm-kernels: heads of 64 (half a warp), and
// an output with another use besides the norm.
// CHECK-LABEL: func.func @norms_that_stay
// CHECK-COUNT-2: kimi.l2_norm
// CHECK: gpu.module @kimi_short_conv
// CHECK-NOT: math.rsqrt
// CHECK: return
func.func @norms_that_stay(%x: tensor<1x1x256xf32>, %w: tensor<256x1x4xf32>) -> (tensor<1x1x4x64xf32>, tensor<1x1x2x128xf32>, tensor<1x1x256xf32>) {
  %o, %f = kimi.short_conv %x, %w : tensor<1x1x256xf32>, tensor<256x1x4xf32> -> tensor<1x1x256xf32>, tensor<1x3x256xf32>
  %h = tensor.expand_shape %o [[0], [1], [2, 3]] output_shape [1, 1, 4, 64] : tensor<1x1x256xf32> into tensor<1x1x4x64xf32>
  %n = kimi.l2_norm %h eps(1.0e-6) : tensor<1x1x4x64xf32> -> tensor<1x1x4x64xf32>
  %o2, %f2 = kimi.short_conv %x, %w : tensor<1x1x256xf32>, tensor<256x1x4xf32> -> tensor<1x1x256xf32>, tensor<1x3x256xf32>
  %h2 = tensor.expand_shape %o2 [[0], [1], [2, 3]] output_shape [1, 1, 2, 128] : tensor<1x1x256xf32> into tensor<1x1x2x128xf32>
  %n2 = kimi.l2_norm %h2 eps(1.0e-6) : tensor<1x1x2x128xf32> -> tensor<1x1x2x128xf32>
  return %n, %n2, %o2 : tensor<1x1x4x64xf32>, tensor<1x1x2x128xf32>, tensor<1x1x256xf32>
}

// -----

// A KDA layer's q, k and v: each projection, then its convolution, the q
// and k heads normalised. The k and v projections move before the q
// convolution, and the three convolutions are one launch of three block
// rows (member y runs the convolution y; q and k with their norms).
// CHECK-LABEL: func.func @kda_layer_convolutions
// CHECK: kimi.linear
// CHECK: kimi.linear
// CHECK: kimi.linear
// CHECK: gpu.launch_func  @kimi_short_conv::@short_conv_0 blocks in (%{{.*}}, %c3{{.*}}, %{{.*}})
// CHECK-NOT: gpu.launch_func
// CHECK-NOT: kimi.l2_norm
// CHECK: return
// CHECK: gpu.func @short_conv_0
// CHECK: gpu.block_id  y
// Two normalised members (one row a thread: a decode step).
// CHECK-COUNT-2: math.rsqrt
// CHECK-NOT: math.rsqrt
// CHECK: gpu.return
func.func @kda_layer_convolutions(%h: tensor<1x1x64xf32>, %wq: tensor<256x64xf32>, %wk: tensor<256x64xf32>, %wv: tensor<256x64xf32>, %c: tensor<256x1x4xf32>, %sq: tensor<1x3x256xf32>, %sk: tensor<1x3x256xf32>, %sv: tensor<1x3x256xf32>) -> (tensor<1x1x2x128xf32>, tensor<1x1x2x128xf32>, tensor<1x1x256xf32>, tensor<1x3x256xf32>, tensor<1x3x256xf32>, tensor<1x3x256xf32>) {
  %q = kimi.linear %h, %wq : tensor<1x1x64xf32>, tensor<256x64xf32> -> tensor<1x1x256xf32>
  %qo, %qf = kimi.short_conv silu %q, %c state %sq : tensor<1x1x256xf32>, tensor<256x1x4xf32>, tensor<1x3x256xf32> -> tensor<1x1x256xf32>, tensor<1x3x256xf32>
  %qh = tensor.expand_shape %qo [[0], [1], [2, 3]] output_shape [1, 1, 2, 128] : tensor<1x1x256xf32> into tensor<1x1x2x128xf32>
  %k = kimi.linear %h, %wk : tensor<1x1x64xf32>, tensor<256x64xf32> -> tensor<1x1x256xf32>
  %ko, %kf = kimi.short_conv silu %k, %c state %sk : tensor<1x1x256xf32>, tensor<256x1x4xf32>, tensor<1x3x256xf32> -> tensor<1x1x256xf32>, tensor<1x3x256xf32>
  %kh = tensor.expand_shape %ko [[0], [1], [2, 3]] output_shape [1, 1, 2, 128] : tensor<1x1x256xf32> into tensor<1x1x2x128xf32>
  %v = kimi.linear %h, %wv : tensor<1x1x64xf32>, tensor<256x64xf32> -> tensor<1x1x256xf32>
  %vo, %vf = kimi.short_conv silu %v, %c state %sv : tensor<1x1x256xf32>, tensor<256x1x4xf32>, tensor<1x3x256xf32> -> tensor<1x1x256xf32>, tensor<1x3x256xf32>
  %qn = kimi.l2_norm %qh eps(1.0e-6) : tensor<1x1x2x128xf32> -> tensor<1x1x2x128xf32>
  %kn = kimi.l2_norm %kh eps(1.0e-6) : tensor<1x1x2x128xf32> -> tensor<1x1x2x128xf32>
  return %qn, %kn, %vo, %qf, %kf, %vf : tensor<1x1x2x128xf32>, tensor<1x1x2x128xf32>, tensor<1x1x256xf32>, tensor<1x3x256xf32>, tensor<1x3x256xf32>, tensor<1x3x256xf32>
}

// -----

// Convolutions that stay apart: the second reads the first's output, and
// the third has other shapes.
// CHECK-LABEL: func.func @chained_convolutions
// CHECK-COUNT-3: gpu.launch_func  @kimi_short_conv::@short_conv_{{[0-9]}} blocks in (%{{.*}}, %c1{{.*}}, %{{.*}})
func.func @chained_convolutions(%x: tensor<1x1x256xf32>, %c: tensor<256x1x4xf32>, %y: tensor<1x2x256xf32>) -> (tensor<1x1x256xf32>, tensor<1x2x256xf32>) {
  %a, %af = kimi.short_conv %x, %c : tensor<1x1x256xf32>, tensor<256x1x4xf32> -> tensor<1x1x256xf32>, tensor<1x3x256xf32>
  %b, %bf = kimi.short_conv %a, %c : tensor<1x1x256xf32>, tensor<256x1x4xf32> -> tensor<1x1x256xf32>, tensor<1x3x256xf32>
  %d, %df = kimi.short_conv %y, %c : tensor<1x2x256xf32>, tensor<256x1x4xf32> -> tensor<1x2x256xf32>, tensor<1x3x256xf32>
  return %b, %d : tensor<1x1x256xf32>, tensor<1x2x256xf32>
}

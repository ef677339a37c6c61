// RUN: kimi-opt %s -split-input-file -kimi-gpu-gemm-calls | FileCheck %s
// RUN: kimi-opt %s -split-input-file -kimi-gpu-gemm-calls=precision=tf32 | FileCheck %s --check-prefix=TF32
// RUN: kimi-opt %s -split-input-file -kimi-gpu-gemm-calls=bf16-weight-products=true | FileCheck %s --check-prefix=BF16

// A row-major matmul: strides from the buffers' metadata, batch 1.
// CHECK-LABEL: func.func @matmul
// CHECK-NOT: linalg.matmul
// CHECK: %[[A:.*]] = memref.extract_aligned_pointer_as_index %arg0
// The last two arguments: exact f32 (0, not TF32), and static sizes (1: the
// runtime chooses cuBLASLt's algorithm by timing).
// CHECK: call @kimi_gpu_gemm_f32(%{{.*}}, %{{.*}}, %{{.*}}, %c8, %c32, %c16, %c1, {{.*}}, %c0{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) : (index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index) -> ()
// CHECK: func.func private @kimi_gpu_gemm_f32(index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index, index)
// The next-to-last argument selects TF32 tensor cores (1) over exact f32 (0).
// TF32-LABEL: func.func @matmul
// TF32: call @kimi_gpu_gemm_f32({{.*}}, %c1{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
// bf16-weight-products leaves a product of two f32 operands as it is.
// BF16-LABEL: func.func @matmul
// BF16-NOT: memref.alloc
// BF16: call @kimi_gpu_gemm_f32({{.*}}, %c0{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
func.func @matmul(%a: memref<8x16xf32>, %b: memref<16x32xf32>, %c: memref<8x32xf32>) {
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%c : memref<8x32xf32>)
  return
}

// -----

// A linear layer x W^T as a generic contraction, with a unit batch loop
// (one sequence) that carries no data.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
// CHECK-LABEL: func.func @linear
// CHECK-NOT: linalg.generic
// CHECK: call @kimi_gpu_gemm_f32
func.func @linear(%x: memref<1x8x64xf32>, %w: memref<32x64xf32>, %o: memref<1x8x32xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x8x64xf32>, memref<32x64xf32>) outs(%o : memref<1x8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A decode step's linear layer: one sequence of one token, so every m loop
// is a unit; the product keeps m = 1 (a GEMV through cuBLASLt rather than a
// kernel that loops over k in every thread).
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
// CHECK-LABEL: func.func @decode_linear
// CHECK-NOT: linalg.generic
// CHECK: call @kimi_gpu_gemm_f32(%{{.*}}, %{{.*}}, %{{.*}}, %c1{{(_[0-9]+)?}}, %c32, %c64, %c1
func.func @decode_linear(%x: memref<1x1x64xf32>, %w: memref<32x64xf32>, %o: memref<1x1x32xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x1x64xf32>, memref<32x64xf32>) outs(%o : memref<1x1x32xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Batched over a real dimension (experts): one call with batch strides.
#h = affine_map<(t, e, d, i) -> (t, e, i)>
#dw = affine_map<(t, e, d, i) -> (e, d, i)>
#y = affine_map<(t, e, d, i) -> (t, e, d)>
// CHECK-LABEL: func.func @batched
// CHECK: call @kimi_gpu_gemm_f32(%{{.*}}, %{{.*}}, %{{.*}}, %c4{{.*}}, %c16, %c8, %c3, %strides#0, %strides#2, %strides#1, %strides_3#2, %strides_3#1, %strides_3#0, %strides_{{[0-9]+}}#0, %strides_{{[0-9]+}}#2, %strides_{{[0-9]+}}#1,
func.func @batched(%h: memref<4x3x8xf32>, %w: memref<3x16x8xf32>, %y: memref<4x3x16xf32>) {
  linalg.generic {indexing_maps = [#h, #dw, #y], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%h, %w : memref<4x3x8xf32>, memref<3x16x8xf32>) outs(%y : memref<4x3x16xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Not matrix products for cuBLASLt: no static unit stride in A, a body that
// is not a multiply-accumulate.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: call @kimi_gpu_gemm_f32
// CHECK: linalg.matmul
// CHECK: linalg.generic
func.func @kept(%a: memref<8x16xf32, strided<[?, ?]>>, %b: memref<16x32xf32>, %c: memref<8x32xf32>,
                %a2: memref<8x16xf32>) {
  linalg.matmul ins(%a, %b : memref<8x16xf32, strided<[?, ?]>>, memref<16x32xf32>) outs(%c : memref<8x32xf32>)
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a2, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%c : memref<8x32xf32>) {
  ^bb0(%x: f32, %w: f32, %acc: f32):
    %m = arith.maximumf %x, %w : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Latent attention's scores: every head reads the same cache, so the head
// loop (in q and the scores, not in the cache) is the batch with the
// cache's batch stride 0; the cache's column slice has row stride 576.
#q = affine_map<(b, h, t, s, r) -> (b, t, h, r)>
#kv = affine_map<(b, h, t, s, r) -> (b, s, r)>
#sc = affine_map<(b, h, t, s, r) -> (b, h, t, s)>
// CHECK-LABEL: func.func @shared_cache_scores
// CHECK-NOT: linalg.generic
// CHECK: %[[Q:strides[_0-9]*]]:4 = memref.extract_strided_metadata %arg0
// CHECK: %[[KV:strides[_0-9]*]]:3 = memref.extract_strided_metadata %arg1
// CHECK: %[[S:strides[_0-9]*]]:4 = memref.extract_strided_metadata %arg2
// m = t (256), n = s, k = r (512), batch = h (16): q's strides (t, r, h),
// the cache's (r, s) and batch stride 0, the scores' (t, s, h).
// n is the cache length, known only at run time: static sizes 0 (last).
// CHECK: call @kimi_gpu_gemm_f32(%{{.*}}, %{{.*}}, %{{.*}}, %c256, %{{.*}}, %c512, %c16, %[[Q]]#1, %[[Q]]#3, %[[Q]]#2, %[[KV]]#2, %[[KV]]#1, %c0, %[[S]]#2, %[[S]]#3, %[[S]]#1, %c0{{(_[0-9]+)?}}, %c0{{(_[0-9]+)?}})
func.func @shared_cache_scores(%q: memref<1x256x16x512xf32>, %kv: memref<1x?x512xf32, strided<[?, 576, 1]>>, %s: memref<1x16x256x?xf32>) {
  linalg.generic {indexing_maps = [#q, #kv, #sc], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%q, %kv : memref<1x256x16x512xf32>, memref<1x?x512xf32, strided<[?, 576, 1]>>) outs(%s : memref<1x16x256x?xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A zero fill right before the product (what bufferization leaves for a
// contraction's init) is dropped and the product overwrites C: flags 3
// (static sizes, overwrite). A second product accumulating onto the same C
// keeps beta = 1: flags 1.
// CHECK-LABEL: func.func @zero_fill_dropped
// CHECK-NOT: linalg.fill
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c0{{(_[0-9]+)?}}, %c3{{(_[0-9]+)?}}) :
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c0{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
func.func @zero_fill_dropped(%a: memref<8x16xf32>, %b: memref<16x32xf32>, %a2: memref<8x4xf32>, %b2: memref<4x32xf32>) -> memref<8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() : memref<8x32xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<8x32xf32>)
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%c : memref<8x32xf32>)
  linalg.matmul ins(%a2, %b2 : memref<8x4xf32>, memref<4x32xf32>) outs(%c : memref<8x32xf32>)
  return %c : memref<8x32xf32>
}

// -----

// An MLP's gate and up projections each start from a fill of their own,
// and both fills come before either product: the first product looks past
// the second fill (another allocation) and both overwrite (flags 3). A
// product on a view of C's allocation between fill and product keeps the
// fill.
// CHECK-LABEL: func.func @fills_of_other_allocations
// CHECK-NOT: linalg.fill
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c0{{(_[0-9]+)?}}, %c3{{(_[0-9]+)?}}) :
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c0{{(_[0-9]+)?}}, %c3{{(_[0-9]+)?}}) :
// CHECK: linalg.fill
// CHECK: linalg.fill
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c0{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
func.func @fills_of_other_allocations(%a: memref<8x16xf32>, %b: memref<16x32xf32>) -> (memref<8x32xf32>, memref<8x32xf32>, memref<8x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %g = memref.alloc() : memref<8x32xf32>
  %u = memref.alloc() : memref<8x32xf32>
  linalg.fill ins(%zero : f32) outs(%g : memref<8x32xf32>)
  linalg.fill ins(%zero : f32) outs(%u : memref<8x32xf32>)
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%g : memref<8x32xf32>)
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%u : memref<8x32xf32>)
  %h = memref.alloc() : memref<8x32xf32>
  linalg.fill ins(%zero : f32) outs(%h : memref<8x32xf32>)
  %row = memref.subview %h[0, 0] [1, 32] [1, 1] : memref<8x32xf32> to memref<1x32xf32, strided<[32, 1]>>
  linalg.fill ins(%one : f32) outs(%row : memref<1x32xf32, strided<[32, 1]>>)
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%h : memref<8x32xf32>)
  return %g, %u, %h : memref<8x32xf32>, memref<8x32xf32>, memref<8x32xf32>
}

// -----

// Fills that stay: a nonzero value, -0.0 (only the +0.0 that the lowering
// emits is matched), and a zero fill that something reads before the
// product.
// CHECK-LABEL: func.func @fills_kept
// CHECK: linalg.fill
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c1{{(_[0-9]+)?}}) :
// CHECK: linalg.fill
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c1{{(_[0-9]+)?}}) :
// CHECK: linalg.fill
// CHECK: memref.copy
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c1{{(_[0-9]+)?}}) :
func.func @fills_kept(%a: memref<8x16xf32>, %b: memref<16x32xf32>, %c: memref<8x32xf32>,
                      %d: memref<8x32xf32>, %e: memref<8x32xf32>, %seen: memref<8x32xf32>) {
  %one = arith.constant 1.0 : f32
  %negzero = arith.constant -0.0 : f32
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%one : f32) outs(%c : memref<8x32xf32>)
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%c : memref<8x32xf32>)
  linalg.fill ins(%negzero : f32) outs(%d : memref<8x32xf32>)
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%d : memref<8x32xf32>)
  linalg.fill ins(%zero : f32) outs(%e : memref<8x32xf32>)
  memref.copy %e, %seen : memref<8x32xf32> to memref<8x32xf32>
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%e : memref<8x32xf32>)
  return
}

// -----

// A bf16 weight in a product cuBLASLt runs (f32 activations): it is widened
// into a new f32 buffer of its shape first (exact), the product reads that
// buffer, and the buffer is freed after the call. The f32 operand is used
// as it is.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
// CHECK-LABEL: func.func @linear_bf16_weight
// CHECK: %[[WIDE:.*]] = memref.alloc() : memref<32x64xf32>
// CHECK: linalg.generic {{.*}} ins(%arg1 : memref<32x64xbf16>) outs(%[[WIDE]] : memref<32x64xf32>)
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: memref.extract_aligned_pointer_as_index %arg0
// CHECK: memref.extract_aligned_pointer_as_index %[[WIDE]]
// CHECK: call @kimi_gpu_gemm_f32
// CHECK-NEXT: memref.dealloc %[[WIDE]] : memref<32x64xf32>
// With bf16-weight-products the weight is read as it is and the activations
// are rounded to bf16 (to nearest even, a new buffer freed after the call):
// precision 2, byte offsets at 2 bytes an element.
// BF16-LABEL: func.func @linear_bf16_weight
// BF16: %[[RX:.*]] = memref.alloc() : memref<1x8x64xbf16>
// BF16: arith.truncf %{{.*}} : f32 to bf16
// BF16-NOT: memref.alloc
// BF16: memref.extract_strided_metadata %[[RX]]
// BF16: memref.extract_aligned_pointer_as_index %[[RX]]
// BF16: arith.muli %{{.*}}, %c2{{(_[0-9]+)?}} : index
// BF16: memref.extract_aligned_pointer_as_index %arg1
// BF16: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
// BF16-NEXT: memref.dealloc %[[RX]] : memref<1x8x64xbf16>
// BF16-NOT: memref.dealloc
func.func @linear_bf16_weight(%x: memref<1x8x64xf32>, %w: memref<32x64xbf16>, %o: memref<1x8x32xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x8x64xf32>, memref<32x64xbf16>) outs(%o : memref<1x8x32xf32>) {
  ^bb0(%a: f32, %b: bf16, %acc: f32):
    %bw = arith.extf %b : bf16 to f32
    %m = arith.mulf %a, %bw : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A product into a bf16 output is not a cuBLASLt call (the runtime's products
// write f32): it stays for the loop lowering.
// CHECK-LABEL: func.func @matmul_bf16_out
// CHECK-NOT: call @kimi_gpu_gemm_f32
// CHECK: linalg.matmul
func.func @matmul_bf16_out(%a: memref<8x16xf32>, %b: memref<16x32xf32>, %c: memref<8x32xbf16>) {
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x32xf32>) outs(%c : memref<8x32xbf16>)
  return
}

// -----

// Both inputs bf16: read as they are on bf16 tensor cores (precision 2;
// their products are exact in f32), nothing converted, whatever the options.
// CHECK-LABEL: func.func @matmul_bf16_inputs
// CHECK-NOT: memref.alloc
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
// CHECK-NOT: memref.dealloc
// CHECK: return
// BF16-LABEL: func.func @matmul_bf16_inputs
// BF16-NOT: memref.alloc
// BF16: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
// BF16-NOT: memref.dealloc
// BF16: return
func.func @matmul_bf16_inputs(%a: memref<8x16xbf16>, %b: memref<16x32xbf16>, %c: memref<8x32xf32>) {
  linalg.matmul ins(%a, %b : memref<8x16xbf16>, memref<16x32xbf16>) outs(%c : memref<8x32xf32>)
  return
}

// -----

// A bf16 product whose zero-filled f32 result is only rounded to bf16:
// cuBLASLt stores the rounded values itself (flags 7 = static shape,
// overwrite, bf16 C) into the rounding's output, at 2 bytes an element;
// the f32 buffer, its fill, the rounding and the deallocation go.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, n) -> (b, t, n)>
// CHECK-LABEL: func.func @linear_bf16_result
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg.fill
// CHECK: memref.extract_strided_metadata %arg2
// CHECK: memref.extract_aligned_pointer_as_index %arg2
// CHECK: arith.muli %{{.*}}, %c2{{(_[0-9]+)?}} : index
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c7{{(_[0-9]+)?}}) :
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.dealloc
// CHECK: return
func.func @linear_bf16_result(%x: memref<1x8x64xbf16>, %w: memref<32x64xbf16>, %o: memref<1x8x32xbf16>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<1x8x32xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<1x8x32xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x8x64xbf16>, memref<32x64xbf16>) outs(%acc : memref<1x8x32xf32>) {
  ^bb0(%a: bf16, %b: bf16, %c: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %m = arith.mulf %af, %bf : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%acc : memref<1x8x32xf32>) outs(%o : memref<1x8x32xbf16>) {
  ^bb0(%v: f32, %out: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }
  memref.dealloc %acc : memref<1x8x32xf32>
  return
}

// -----

// Not folded: the f32 result is read again after the rounding (a residual
// kept at f32), or the op between the product and the rounding may read
// the rounding's output before the product would now write it.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, n) -> (b, t, n)>
// CHECK-LABEL: func.func @linear_bf16_result_kept
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c3{{(_[0-9]+)?}}) :
// CHECK: arith.truncf
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c3{{(_[0-9]+)?}}) :
// CHECK: memref.copy %arg3, %arg4
// CHECK: arith.truncf
func.func @linear_bf16_result_kept(%x: memref<1x8x64xbf16>, %w: memref<32x64xbf16>, %o: memref<1x8x32xbf16>,
                                   %o2: memref<1x8x32xbf16>, %seen: memref<1x8x32xbf16>, %keep: memref<1x8x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<1x8x32xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<1x8x32xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x8x64xbf16>, memref<32x64xbf16>) outs(%acc : memref<1x8x32xf32>) {
  ^bb0(%a: bf16, %b: bf16, %c: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %m = arith.mulf %af, %bf : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%acc : memref<1x8x32xf32>) outs(%o : memref<1x8x32xbf16>) {
  ^bb0(%v: f32, %out: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }
  memref.copy %acc, %keep : memref<1x8x32xf32> to memref<1x8x32xf32>
  %acc2 = memref.alloc() : memref<1x8x32xf32>
  linalg.fill ins(%zero : f32) outs(%acc2 : memref<1x8x32xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x8x64xbf16>, memref<32x64xbf16>) outs(%acc2 : memref<1x8x32xf32>) {
  ^bb0(%a: bf16, %b: bf16, %c: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %m = arith.mulf %af, %bf : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  }
  memref.copy %o2, %seen : memref<1x8x32xbf16> to memref<1x8x32xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%acc2 : memref<1x8x32xf32>) outs(%o2 : memref<1x8x32xbf16>) {
  ^bb0(%v: f32, %out: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }
  return
}

// -----

// Bufferization allocates the rounding's output after the product: the
// allocation moves up to the product, which stores into it.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, n) -> (b, t, n)>
// CHECK-LABEL: func.func @linear_bf16_result_later_alloc
// CHECK: %[[R:.*]] = memref.alloc() : memref<1x8x32xbf16>
// CHECK-NOT: memref.alloc
// CHECK: memref.extract_aligned_pointer_as_index %[[R]]
// CHECK: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c7{{(_[0-9]+)?}}) :
// CHECK-NOT: linalg.generic
// CHECK: memref.copy %[[R]], %arg2
func.func @linear_bf16_result_later_alloc(%x: memref<1x8x64xbf16>, %w: memref<32x64xbf16>, %o: memref<1x8x32xbf16>) {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() : memref<1x8x32xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<1x8x32xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<1x8x64xbf16>, memref<32x64xbf16>) outs(%acc : memref<1x8x32xf32>) {
  ^bb0(%a: bf16, %b: bf16, %c: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %m = arith.mulf %af, %bf : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  }
  %r = memref.alloc() : memref<1x8x32xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%acc : memref<1x8x32xf32>) outs(%r : memref<1x8x32xbf16>) {
  ^bb0(%v: f32, %out: bf16):
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  }
  memref.copy %r, %o : memref<1x8x32xbf16> to memref<1x8x32xbf16>
  return
}

// -----

// Under bf16-weight-products, f32 activations that an elementwise op
// computes for a bf16 product alone (SiTU of a routed expert's gate and
// up, with bf16 activations too): the op stores them rounded into
// a bf16 buffer, which the product reads and frees; the f32 buffer and the
// separate rounding go.
#x = affine_map<(b, t, n, k) -> (b, t, k)>
#w = affine_map<(b, t, n, k) -> (n, k)>
#o = affine_map<(b, t, n, k) -> (b, t, n)>
#id = affine_map<(b, t, k) -> (b, t, k)>
// BF16-LABEL: func.func @rounded_by_producer
// BF16: %[[H:.*]] = memref.alloc() : memref<1x8x64xbf16>
// BF16-NOT: memref.alloc
// BF16: linalg.generic {{.*}} outs(%[[H]] : memref<1x8x64xbf16>)
// BF16: math.tanh
// BF16: arith.truncf %{{.*}} : f32 to bf16
// BF16-NOT: linalg.generic
// BF16: memref.extract_aligned_pointer_as_index %[[H]]
// BF16: call @kimi_gpu_gemm_f32({{.*}}, %c2{{(_[0-9]+)?}}, %c1{{(_[0-9]+)?}}) :
// BF16-NEXT: memref.dealloc %[[H]] : memref<1x8x64xbf16>
// BF16-NOT: memref.dealloc
// BF16: return
func.func @rounded_by_producer(%g: memref<1x8x64xf32>, %w: memref<32x64xbf16>, %o: memref<1x8x32xf32>) {
  %h = memref.alloc() : memref<1x8x64xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%g : memref<1x8x64xf32>) outs(%h : memref<1x8x64xf32>) {
  ^bb0(%v: f32, %out: f32):
    %t = math.tanh %v : f32
    linalg.yield %t : f32
  }
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%h, %w : memref<1x8x64xf32>, memref<32x64xbf16>) outs(%o : memref<1x8x32xf32>) {
  ^bb0(%a: f32, %b: bf16, %acc: f32):
    %bw = arith.extf %b : bf16 to f32
    %m = arith.mulf %a, %bw : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  memref.dealloc %h : memref<1x8x64xf32>
  return
}

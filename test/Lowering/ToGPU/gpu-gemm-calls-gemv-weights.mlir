// RUN: kimi-opt %s -kimi-gpu-weight-table -kimi-gpu-gemm-calls="gemv-max-m=4 sm-count=1 gemv-epilogues=false" -split-input-file | FileCheck %s

// As the GPU model target runs them: the weights are descriptors around
// pointers loaded from the weight table, which no entry writes, so a kernel
// between two projections of one input that writes a state argument (the
// short convolution of q) does not keep them apart, and the loads of the
// second weight's pointer move up to the group's launch. With the input
// an argument as well, the state could be the input: no group.
// RUN: kimi-opt %s -kimi-gpu-weight-table -kimi-gpu-gemm-calls="gemv-max-m=4 sm-count=1 gemv-epilogues=false" -split-input-file | FileCheck %s --check-prefix=ARG
// With gemv-weight-prefetch, thread 0 of each block asks for the block's
// rows (8: 4 warps of 2; fewer in the last block) of its product's
// weight, 1024 bytes a row, into L2, before the kernel's own
// grid-dependency wait.
// RUN: kimi-opt %s -kimi-gpu-weight-table -kimi-gpu-gemm-calls="gemv-max-m=4 sm-count=1 gemv-epilogues=false gemv-weight-prefetch=true" -split-input-file | FileCheck %s --check-prefix=PF
#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
// PF-LABEL: func.func @projections
// PF: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2__1x96x256_0_256_0_r2_pf blocks in (%c24,
// PF: gpu.func @gemv_1x96x256_0_256_0_r2__1x96x256_0_256_0_r2_pf
// PF: scf.if
// PF: arith.constant 8 : index
// PF: arith.constant 96 : index
// PF: arith.constant 1024 : index
// PF: nvvm.cp.async.bulk.prefetch %{{.*}}, %{{.*}} : <1>
// PF: nvvm.cp.async.bulk.prefetch %{{.*}}, %{{.*}} : <1>
// PF-NOT: memref.load
// PF: nvvm.griddepcontrol wait
// PF-NEXT: nvvm.griddepcontrol launch_dependents
// CHECK-LABEL: func.func @projections
// CHECK: llvm.load
// CHECK: llvm.load
// CHECK: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2__1x96x256_0_256_0_r2 blocks in (%c24,
// CHECK-NOT: gpu.launch_func
// CHECK: linalg.generic
// CHECK-NOT: gpu.launch_func
// CHECK: return
memref.global "public" @kimi_w_0 : memref<96x256xf32> = uninitialized {alignment = 64 : i64}
memref.global "public" @kimi_w_1 : memref<96x256xf32> = uninitialized {alignment = 64 : i64}
func.func @projections(%h: memref<1x256xf32>, %state: memref<1x96xf32>) -> (memref<1x96xf32>, memref<1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  // The input is a buffer of the entry's own (a norm's output in a model),
  // so the write of the state argument cannot change it.
  %x = memref.alloc() : memref<1x256xf32>
  memref.copy %h, %x : memref<1x256xf32> to memref<1x256xf32>
  %wq = memref.get_global @kimi_w_0 : memref<96x256xf32>
  %q = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%q : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wq : memref<1x256xf32>, memref<96x256xf32>) outs(%q : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%q : memref<1x96xf32>) outs(%state : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32):
    %e = arith.addf %a, %b : f32
    linalg.yield %e : f32
  }
  %wk = memref.get_global @kimi_w_1 : memref<96x256xf32>
  %k = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%k : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wk : memref<1x256xf32>, memref<96x256xf32>) outs(%k : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return %q, %k : memref<1x96xf32>, memref<1x96xf32>
}

// -----

#x = affine_map<(t, n, k) -> (t, k)>
#w = affine_map<(t, n, k) -> (n, k)>
#o = affine_map<(t, n, k) -> (t, n)>
#id = affine_map<(t, n) -> (t, n)>
// ARG-LABEL: func.func @input_argument
// ARG: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
// ARG: linalg.generic
// ARG: gpu.launch_func  @kimi_gemv::@gemv_1x96x256_0_256_0_r2 blocks
memref.global "public" @kimi_w_0 : memref<96x256xf32> = uninitialized {alignment = 64 : i64}
memref.global "public" @kimi_w_1 : memref<96x256xf32> = uninitialized {alignment = 64 : i64}
func.func @input_argument(%x: memref<1x256xf32>, %state: memref<1x96xf32>) -> (memref<1x96xf32>, memref<1x96xf32>) {
  %zero = arith.constant 0.0 : f32
  %wq = memref.get_global @kimi_w_0 : memref<96x256xf32>
  %q = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%q : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wq : memref<1x256xf32>, memref<96x256xf32>) outs(%q : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%q : memref<1x96xf32>) outs(%state : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32):
    %e = arith.addf %a, %b : f32
    linalg.yield %e : f32
  }
  %wk = memref.get_global @kimi_w_1 : memref<96x256xf32>
  %k = memref.alloc() : memref<1x96xf32>
  linalg.fill ins(%zero : f32) outs(%k : memref<1x96xf32>)
  linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wk : memref<1x256xf32>, memref<96x256xf32>) outs(%k : memref<1x96xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  return %q, %k : memref<1x96xf32>, memref<1x96xf32>
}

// kimi-gpu-kernels-pipeline on a bufferized entry: the weight read through
// the runtime's table, the product as a cuBLASLt call, the elementwise nest
// as a kernel of the one module @kimi_kernels, which waits for the grid
// before it.
// RUN: kimi-opt %s --kimi-gpu-kernels-pipeline | FileCheck %s
// Without grid dependencies or runtime products: no waits, the product a
// kernel too.
// RUN: kimi-opt %s '--kimi-gpu-kernels-pipeline=grid-dependencies=false gemm-calls=false' | FileCheck %s --check-prefix=PLAIN
// Then kimi-gpu-to-nvvm-pipeline (PTX): the kernels as a gpu.binary, the host in the LLVM dialect
// with its allocations through the runtime.
// RUN: kimi-opt %s --kimi-gpu-kernels-pipeline '--kimi-gpu-to-nvvm-pipeline=format=isa' | FileCheck %s --check-prefix=NVVM --implicit-check-not=@malloc

// CHECK-LABEL: func.func @entry
// CHECK:         call @kimi_gpu_gemm_f32
// CHECK:         gpu.launch_func @kimi_kernels::@entry_kernel
// CHECK:       gpu.module @kimi_kernels attributes {kimi.waits_grid_dependencies}
// CHECK:         nvvm.griddepcontrol wait
// CHECK-NOT:   gpu.module

// PLAIN-LABEL: func.func @entry
// PLAIN-NOT:     call @kimi_gpu_gemm_f32
// PLAIN:         gpu.launch_func @kimi_kernels::
// PLAIN:       gpu.module @kimi_kernels {
// PLAIN-NOT:     nvvm.griddepcontrol

// NVVM-DAG:    llvm.call @_mlir_memref_to_llvm_alloc
// NVVM-DAG:    gpu.binary @kimi_kernels

memref.global "public" @kimi_w_0 : memref<64x64xf32> = uninitialized {alignment = 64 : i64}

func.func @entry(%x: memref<8x64xf32>) -> memref<8x64xf32> attributes {llvm.emit_c_interface} {
  %w = memref.get_global @kimi_w_0 : memref<64x64xf32>
  %y = memref.alloc() {alignment = 64 : i64} : memref<8x64xf32>
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%y : memref<8x64xf32>)
  linalg.matmul ins(%x, %w : memref<8x64xf32>, memref<64x64xf32>) outs(%y : memref<8x64xf32>)
  %z = memref.alloc() {alignment = 64 : i64} : memref<8x64xf32>
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<8x64xf32>) outs(%z : memref<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.mulf %a, %a : f32
    linalg.yield %s : f32
  }
  memref.dealloc %y : memref<8x64xf32>
  return %z : memref<8x64xf32>
}

// RUN: kimi-opt %s -kimi-gpu-merge-kernel-modules -split-input-file | FileCheck %s

// Outlined kernels (one a module, the kernel named after its module) and a
// generated module of several kernels with a shared-memory global become
// one module; every launch follows its kernel.
// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK-NOT:   gpu.module @f_kernel
// CHECK:       gpu.module @kimi_kernels {
// CHECK:         gpu.func @f_kernel(
// CHECK:         gpu.func @f_kernel_0(
// CHECK:         memref.global "private" @kimi_kda_0_tile
// CHECK:         gpu.func @kimi_kda_0_prep(
// CHECK:           memref.get_global @kimi_kda_0_tile
// CHECK:         gpu.func @kimi_kda_0_step(
// CHECK:       }
// CHECK-NOT:   gpu.module
// CHECK-LABEL: func.func @host
// CHECK:         gpu.launch_func @kimi_kernels::@f_kernel blocks
// CHECK:         gpu.launch_func @kimi_kernels::@f_kernel_0 blocks
// CHECK:         gpu.launch_func @kimi_kernels::@kimi_kda_0_prep blocks
// CHECK:         gpu.launch_func @kimi_kernels::@kimi_kda_0_step blocks
module attributes {gpu.container_module} {
  gpu.module @f_kernel {
    gpu.func @f_kernel(%a: memref<4xf32>) kernel {
      gpu.return
    }
  }
  gpu.module @f_kernel_0 {
    gpu.func @f_kernel(%a: memref<4xf32>) kernel {
      gpu.return
    }
  }
  gpu.module @kimi_kda_0 {
    memref.global "private" @tile : memref<4xf32, 3>
    gpu.func @prep(%a: memref<4xf32>) kernel {
      %t = memref.get_global @tile : memref<4xf32, 3>
      gpu.return
    }
    gpu.func @step(%a: memref<4xf32>) kernel {
      gpu.return
    }
  }
  func.func @host(%a: memref<4xf32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @f_kernel::@f_kernel blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<4xf32>)
    gpu.launch_func @f_kernel_0::@f_kernel blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<4xf32>)
    gpu.launch_func @kimi_kda_0::@prep blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<4xf32>)
    gpu.launch_func @kimi_kda_0::@step blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : memref<4xf32>)
    return
  }
}

// -----

// No kernels: nothing changes, and no empty module appears.
// CHECK-LABEL: func.func @no_kernels
// CHECK-NOT:   gpu.module
func.func @no_kernels() {
  return
}

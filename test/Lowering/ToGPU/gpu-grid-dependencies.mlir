// RUN: kimi-opt %s -kimi-gpu-grid-dependencies -split-input-file | FileCheck %s

// Every kernel waits for its predecessor's grid before its first memory
// access, then lets its own dependents launch; the module says so.
// CHECK-LABEL: gpu.module @kernels attributes {kimi.waits_grid_dependencies}
// CHECK-LABEL: gpu.func @scale
// CHECK-NEXT:    nvvm.griddepcontrol wait
// CHECK-NEXT:    nvvm.griddepcontrol launch_dependents
// CHECK-NEXT:    gpu.thread_id x
// CHECK-NEXT:    memref.load
// CHECK-LABEL: gpu.func @zero
// CHECK-NEXT:    nvvm.griddepcontrol wait
// CHECK-NEXT:    nvvm.griddepcontrol launch_dependents
// CHECK-NEXT:    arith.constant
// A device function that is not a kernel is reached only from kernels,
// after their wait: it is left alone.
// CHECK-LABEL: gpu.func @helper
// CHECK-NOT:     nvvm.griddepcontrol
// CHECK:         gpu.return
gpu.module @kernels {
  gpu.func @scale(%a: memref<256xf32>, %b: memref<256xf32>) kernel {
    %t = gpu.thread_id x
    %v = memref.load %a[%t] : memref<256xf32>
    %w = arith.mulf %v, %v : f32
    memref.store %w, %b[%t] : memref<256xf32>
    gpu.return
  }
  gpu.func @zero(%b: memref<256xf32>) kernel {
    %z = arith.constant 0.0 : f32
    %t = gpu.thread_id x
    memref.store %z, %b[%t] : memref<256xf32>
    gpu.return
  }
  gpu.func @helper(%b: memref<256xf32>) {
    gpu.return
  }
}

// -----

// Idempotent: a kernel that already begins with the wait is not given a
// second one; every gpu.module of the program is handled.
// CHECK-LABEL: gpu.module @first attributes {kimi.waits_grid_dependencies}
// CHECK:         gpu.func @k
// CHECK-NEXT:    nvvm.griddepcontrol wait
// CHECK-NEXT:    gpu.return
// CHECK-LABEL: gpu.module @second attributes {kimi.waits_grid_dependencies}
// CHECK:         gpu.func @k
// CHECK-NEXT:    nvvm.griddepcontrol wait
// CHECK-NEXT:    nvvm.griddepcontrol launch_dependents
// CHECK-NEXT:    gpu.return
gpu.module @first {
  gpu.func @k() kernel {
    nvvm.griddepcontrol wait
    gpu.return
  }
}
gpu.module @second {
  gpu.func @k() kernel {
    gpu.return
  }
}

// -----

// A kernel whose generator waits after a prologue of its own (the GEMV
// kernel's L2 prefetches of its weights) keeps its wait where it is.
// CHECK-LABEL: gpu.func @prologue
// CHECK-NEXT:    gpu.thread_id x
// CHECK-NEXT:    nvvm.griddepcontrol wait
// CHECK-NEXT:    nvvm.griddepcontrol launch_dependents
// CHECK-NEXT:    memref.load
// CHECK-NOT:     nvvm.griddepcontrol
gpu.module @kernels {
  gpu.func @prologue(%a: memref<256xf32>) kernel {
    %t = gpu.thread_id x
    nvvm.griddepcontrol wait
    nvvm.griddepcontrol launch_dependents
    %v = memref.load %a[%t] : memref<256xf32>
    memref.store %v, %a[%t] : memref<256xf32>
    gpu.return
  }
}

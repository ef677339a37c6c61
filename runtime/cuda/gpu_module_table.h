//===- gpu_module_table.h - Filling a GPU model's shim table ----*- C++ -*-===//
//
// A compiled GPU model's host object carries the shim of
// runtime/abi/gpu_module_shim.c: its kernel launches, allocations, matrix
// products and device reads call through the table `kimi_rt_gpu`
// (runtime/abi/kimi_module_abi.h), which the runtime fills once after
// loading the object. Kept apart from GpuModelExecutable so that the ABI is
// tested without a GPU (test/runtime/ModuleAbiTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_GPU_MODULE_TABLE_H
#define KIMI_RUNTIME_CUDA_GPU_MODULE_TABLE_H

#include "runtime/abi/kimi_module_abi.h"
#include "runtime/support/status.h"

#include <cstdint>

namespace kimi::rt {

class CpuModule;

/// Checks that `module` was compiled against this runtime's GPU ABI
/// (KIMI_GPU_ABI_VERSION), then sets its table to `callbacks` (every
/// callback must be set). Returns the module's status word: the first failing
/// call's code, read (and cleared) by the caller after each entry call.
StatusOr<int32_t *> installGpuModuleTable(CpuModule &module,
                                          const kimi_rt_gpu_table &callbacks);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_GPU_MODULE_TABLE_H

//===- gpu_module_table.cpp - Filling a GPU model's shim table ------------===//

#include "runtime/cuda/gpu_module_table.h"
#include "runtime/cpu/cpu_module.h"

#include <string>

namespace kimi::rt {

StatusOr<int32_t *> installGpuModuleTable(CpuModule &module,
                                          const kimi_rt_gpu_table &callbacks) {
  if (!callbacks.load_module || !callbacks.get_function || !callbacks.launch ||
      !callbacks.alloc || !callbacks.release || !callbacks.gemm ||
      !callbacks.read_i32)
    return invalidArgument("GPU model: a shim table with unset callbacks");
  KIMI_ASSIGN_OR_RETURN(void *version,
                        module.symbol(KIMI_GPU_ABI_VERSION_SYMBOL));
  int32_t found = *static_cast<const int32_t *>(version);
  if (found != KIMI_GPU_ABI_VERSION)
    return moduleError("GPU model " + module.name() + ": shim ABI version " +
                           std::to_string(found) + ", this runtime speaks " +
                           std::to_string(KIMI_GPU_ABI_VERSION) +
                           " (recompile the model)");
  KIMI_ASSIGN_OR_RETURN(void *table, module.symbol(KIMI_GPU_TABLE_SYMBOL));
  KIMI_ASSIGN_OR_RETURN(void *status, module.symbol(KIMI_GPU_STATUS_SYMBOL));
  *static_cast<kimi_rt_gpu_table *>(table) = callbacks;
  // Not cleared: the load constructors may have failed already (too many
  // kernel images), which the first entry call reports.
  return static_cast<int32_t *>(status);
}

} // namespace kimi::rt

//===- ModuleShims.h - The runtime's module ABI, embedded -------*- C++ -*-===//
//
// The C shims kimi-compile compiles into a model's host object, and the header
// they share with the runtime (runtime/abi/kimi_module_abi.h), as embedded at
// build time from runtime/abi/ (EmbedModuleShims.cmake). linkSharedObject
// writes the header next to the shims it compiles.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOCPU_MODULESHIMS_H
#define KIMI_LOWERING_TOCPU_MODULESHIMS_H

namespace kimi {

/// runtime/abi/kimi_module_abi.h, included by the shims as
/// "kimi_module_abi.h".
extern const char *const kModuleAbiHeader;
/// The name the shims include the header by.
inline constexpr const char *kModuleAbiHeaderName = "kimi_module_abi.h";
/// runtime/abi/gpu_module_shim.c: every GPU model.
extern const char *const kGpuModuleShim;
/// runtime/abi/comm_module_shim.c: models that call collectives.
extern const char *const kCommModuleShim;

} // namespace kimi

#endif // KIMI_LOWERING_TOCPU_MODULESHIMS_H

//===- CpuArtifact.h - the CPU artifact of a compiled model -----*- C++ -*-===//
//
// Describes an imported module's entry points and weights in the terms of
// docs/runtime-abi.md and writes the artifact with the runtime's
// ArtifactWriter (FlatBuffers; the runtime reads it without LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOPROGRAM_CPUARTIFACT_H
#define KIMI_LOWERING_TOPROGRAM_CPUARTIFACT_H

#include "models/import/ModelConfig.h"
#include "runtime/artifact/types.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace kimi {

/// Everything of the artifact but the code, read off the imported module
/// before it is lowered (entry signatures from the `kimi.state` names,
/// weights in slot order with their alternative spellings).
llvm::Expected<rt::ArtifactSpec>
describeCpuArtifact(mlir::ModuleOp module, const ModelConfig &config,
                    llvm::StringRef configJson);

/// Adds the shared object, validates and writes the artifact to `path`.
/// `waitsGridDependencies`: the GPU kernels the shared object launches all
/// begin with griddepcontrol.wait (kimi-gpu-grid-dependencies).
llvm::Error writeCpuArtifact(rt::ArtifactSpec spec,
                             llvm::StringRef sharedObject,
                             llvm::StringRef path,
                             bool waitsGridDependencies = false);

} // namespace kimi

#endif

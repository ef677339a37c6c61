//===- GpuArtifact.h - GPU kernel-library artifacts --------------*- C++ -*-===//
//
// The sm_90a target for modules of single-op functions: each `func.func`
// holding one chunked `kimi.kda` becomes a GPU entry of the same name (its
// generated kernels serialised to PTX and, when ptxas exists, a cubin; its
// buffers and launches). Whole models on the GPU are docs/architecture.md's
// next step.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOPROGRAM_GPUARTIFACT_H
#define KIMI_LOWERING_TOPROGRAM_GPUARTIFACT_H

#include "lowering/ToGPU/GpuSerialize.h"
#include "lowering/ToGPU/Rewrites/KdaGpuProgram.h"
#include "runtime/artifact/types.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <functional>

namespace kimi {

struct GpuLibraryOptions {
  gpu::KdaPlanOptions plan;
  gpu::GpuTargetOptions target;
  /// Called with each entry's generated kernels before serialisation
  /// (for --emit=gpu).
  std::function<void(const gpu::GpuEntryPlan &)> onPlan;
};

/// Plans and serialises every function of `module` (after the front
/// pipeline) into a kernel-library artifact spec.
llvm::Expected<rt::ArtifactSpec> compileGpuKernelLibrary(mlir::ModuleOp module,
                                                         const GpuLibraryOptions &options);

} // namespace kimi

#endif

//===- GpuSerialize.h - gpu.module -> PTX and cubin --------------*- C++ -*-===//
//
// Runs upstream's NVVM lowering (`buildLowerToNVVMPassPipeline`: nvgpu/gpu
// to nvvm, bare-pointer kernel arguments, `nvvm-attach-target`) and
// `gpu-module-to-binary` on a module holding one `gpu.module`, once for PTX
// (LLVM's NVPTX backend alone) and, when ptxas is available, once for a
// cubin (ptxas from the CUDA toolkit: PATH, or CUDA_HOME/CUDA_ROOT/
// CUDA_PATH, or /usr/local/cuda).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_GPUSERIALIZE_H
#define KIMI_LOWERING_TOGPU_GPUSERIALIZE_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir {
class DialectRegistry;
}

namespace kimi::gpu {

struct GpuTargetOptions {
  std::string chip = "sm_90a";
  std::string features = "+ptx80";
  int optLevel = 3;
  /// Also produce a cubin (needs ptxas); PTX alone otherwise.
  bool cubin = true;
};

struct GpuBinary {
  std::string ptx;
  std::string cubin; // empty when not requested or no ptxas was found
  std::string cubinSkipped; // why there is no cubin, if there is none
};

/// Registers the dialects and translations the serialisation needs.
void registerGpuCodegenDialects(mlir::DialectRegistry &registry);

/// True when a ptxas the serialiser can use exists.
bool ptxasAvailable();

/// The CUDA toolkit the serialiser uses (ptxas, libdevice): the first of the
/// ptxas on PATH (symlinks resolved), CUDA_ROOT / CUDA_HOME / CUDA_PATH and
/// /usr/local/cuda that holds bin/ptxas and nvvm/libdevice, else the first
/// with bin/ptxas; empty when none does.
std::string cudaToolkitPath();

/// Serialises the single `gpu.module` of `module` (left unchanged).
llvm::Expected<GpuBinary> serializeGpuModule(mlir::ModuleOp module,
                                             const GpuTargetOptions &options);

} // namespace kimi::gpu

#endif

//===- GpuKernelLibrary.h - kimi-compile on .mlir input for sm_90a -*- C++ -*-===//
#ifndef KIMI_TOOLS_KIMI_COMPILE_GPUKERNELLIBRARY_H
#define KIMI_TOOLS_KIMI_COMPILE_GPUKERNELLIBRARY_H

#include "llvm/Support/CommandLine.h"
#include <string>

namespace kimi {
extern llvm::cl::OptionCategory gpuLibraryCategory;
/// kimi-compile's path for a .mlir module of kimi ops (today: functions of
/// one kimi.kda). Returns the process exit code. emitKernels: the kernels'
/// registers, frames and shared memory (JSON) instead of an artifact.
int compileGpuLibraryFile(const std::string &input, const std::string &output,
                          const std::string &frontPipeline, bool emitGpuIR,
                          bool emitPtx, bool emitKernels);
/// --no-cubin: store PTX only (GPU models and kernel libraries).
bool gpuNoCubin();
} // namespace kimi

#endif

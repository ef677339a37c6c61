//===- CpuCodegen.h - kimi module -> native shared object -------*- C++ -*-===//
//
// The CPU target: lowers a kimi module (dense f32 weights) through linalg,
// bufferization and the LLVM dialect to a native shared object with the ABI
// of docs/runtime-abi.md.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOCPU_CPUCODEGEN_H
#define KIMI_LOWERING_TOCPU_CPUCODEGEN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"
#include <functional>
#include <string>

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
class DialectRegistry;
class OpPassManager;
}

namespace kimi {

struct KimiToMemRefOptions;


/// "code generation failed in <step>[:\n<detail>]", the error of every
/// failing step of the CPU and GPU model pipelines.
llvm::Error codegenError(const llvm::Twine &step, const std::string &detail);

/// Collects the diagnostics emitted while it lives, so that a failing step's
/// error carries them.
class CodegenDiagnostics {
public:
  explicit CodegenDiagnostics(mlir::MLIRContext *ctx)
      : os_(text_), handler_(ctx, [this](mlir::Diagnostic &d) {
          os_ << d.getLocation() << ": " << d << "\n";
          return mlir::success();
        }) {}
  llvm::Error fail(const llvm::Twine &step) const {
    return codegenError(step, text_);
  }

private:
  std::string text_;
  llvm::raw_string_ostream os_;
  mlir::ScopedDiagnosticHandler handler_;
};

struct CpuCodegenOptions {
  /// Textual pass pipeline (nested under builtin.module) run first, on kimi
  /// IR; the decay proof and chunking go here.
  std::string frontPipeline = "kimi-prove-decay-bounds,kimi-chunk-kda";
  /// kimi-lower-to-linalg's sorted-experts-min-tokens (0: gathers).
  int64_t sortedExpertsMinTokens = 0;
  /// LLVM optimisation level of the generated code.
  unsigned optLevel = 2;
  /// Keep the LLVM IR text here when non-null (for --emit=llvm).
  std::string *llvmIR = nullptr;
  /// Passes added after the front pipeline (kimi-compile --kda-bf16-io adds
  /// kimi-kda-bf16-io, a pass of the GPU library this one cannot link).
  std::function<void(mlir::OpPassManager &)> frontPasses;
};

/// Registers what the CPU pipeline parses and translates.
void registerCpuCodegenDialects(mlir::DialectRegistry &registry);

/// Adds passes after the textual front pipeline (the GPU target's kernel
/// passes, with their typed options).
using FrontPassAdder = llvm::function_ref<void(mlir::OpPassManager &)>;

/// The steps the CPU and GPU model targets share: the front pipeline (a
/// textual pipeline on kimi IR, the user's: the decay proof and chunking)
/// and `addFrontPasses`, then kimi-to-memref-pipeline (lowering/Pipelines.h).
/// A failure names the step and carries its diagnostics.
/// `last`: the stage to stop after (kimi-compile --emit=linalg|memref).
enum class LoweringStage { Linalg, MemRef };
llvm::Error lowerToBufferizedMemRefs(mlir::ModuleOp module,
                                     llvm::StringRef frontPipeline,
                                     const KimiToMemRefOptions &options,
                                     FrontPassAdder addFrontPasses = {},
                                     LoweringStage last = LoweringStage::MemRef);

/// Translates an LLVM-dialect `module` to LLVM IR, adds the packed
/// `kimi_entry_<name>` wrappers, optimises for the host, and links the
/// object with `cSources` (C shims; the comm shim is added when the model
/// calls it) into a shared object, returned as bytes.
llvm::Expected<std::string> emitSharedObject(mlir::ModuleOp module,
                                             unsigned optLevel,
                                             std::string *llvmIR,
                                             llvm::ArrayRef<std::string> cSources);

/// Lowers `module` in place and returns the bytes of the linked shared
/// object. Errors carry the diagnostics of the failing step.
llvm::Expected<std::string> compileToSharedObject(mlir::ModuleOp module,
                                                  const CpuCodegenOptions &options);

} // namespace kimi

#endif

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
#include "llvm/Support/Error.h"
#include <string>

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
class DialectRegistry;
}

namespace kimi {

/// Name of the exported global holding the weight at `slot` (the position of
/// its `kimi.weight` in the module).
std::string weightGlobalName(size_t slot);

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
};

/// Registers what the CPU pipeline parses and translates.
void registerCpuCodegenDialects(mlir::DialectRegistry &registry);

/// The steps the CPU and GPU model targets share: the front pipeline on kimi
/// IR, kimi -> linalg, weights as `kimi_w_<slot>` globals, One-Shot
/// Bufferize over the call graph (entries get the C interface and read-only
/// arguments), ownership-based deallocation, buffer copies as linalg.copy.
/// `sortedExpertsMinTokens`: kimi-lower-to-linalg's option of that name.
/// `splatsAsFills`: splat tensor constants become `linalg.fill` of a fresh
/// buffer instead of globals (the GPU target, whose globals are host memory).
/// `tensorPipeline`: passes run on linalg over tensors just before
/// bufferization (the GPU target's elementwise fusion).
/// `emptyPerWriter`: every op that writes into a `tensor.empty` gets one of
/// its own, so each result has a buffer of its own (the GPU target: a buffer
/// reused by a later, independent op is a false dependency that keeps
/// kimi-gpu-gemm-calls from launching the two together).
llvm::Error lowerToBufferizedMemRefs(mlir::ModuleOp module,
                                     llvm::StringRef frontPipeline,
                                     int64_t sortedExpertsMinTokens = 0,
                                     bool splatsAsFills = false,
                                     llvm::StringRef tensorPipeline = "",
                                     bool emptyPerWriter = false);

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

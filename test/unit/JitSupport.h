//===- JitSupport.h - lower a test module to LLVM and JIT it ----*- C++ -*-===//
//
// The unit tests that execute lowered kimi IR (KdaJit, Mxfp4DecodeTest)
// share this: One-Shot Bufferize (buffer copies as linalg.copy, so nothing
// calls into libmlir_c_runner_utils), the buffer deallocation pipeline,
// linalg to loops and upstream conversions to the LLVM dialect, then
// mlir::ExecutionEngine at -O2. Functions marked llvm.emit_c_interface are
// looked up as `_mlir_ciface_<name>`.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_UNIT_JITSUPPORT_H
#define KIMI_TEST_UNIT_JITSUPPORT_H

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"

#include <memory>
#include <string>

namespace kimi::test {

/// The dialects, bufferization and deallocation models and LLVM
/// translations that jitModule needs (the caller adds its own dialects).
void registerJitDialects(mlir::DialectRegistry &registry);

/// Bufferizes `module` (tensor functions over memrefs through
/// bufferization.to_tensor / materialize_in_destination), lowers it to the
/// LLVM dialect and JIT-compiles it. On failure returns null and sets
/// `error` (with `diagnostics`, what the context's handler collected).
std::unique_ptr<mlir::ExecutionEngine> jitModule(mlir::ModuleOp module,
                                                 const std::string &diagnostics,
                                                 std::string &error);

} // namespace kimi::test

#endif // KIMI_TEST_UNIT_JITSUPPORT_H

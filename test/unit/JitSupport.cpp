//===- JitSupport.cpp - lower a test module to LLVM and JIT it ------------===//

#include "JitSupport.h"

#include "mlir/Dialect/Arith/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "lowering/Pipelines.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include "llvm/Support/TargetSelect.h"

using namespace mlir;

namespace kimi::test {

void registerJitDialects(DialectRegistry &registry) {
  registry.insert<func::FuncDialect, bufferization::BufferizationDialect,
                  memref::MemRefDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferDeallocationOpInterfaceExternalModels(registry);
  cf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  scf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

std::unique_ptr<ExecutionEngine> jitModule(ModuleOp module,
                                           const std::string &diagnostics,
                                           std::string &error) {
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;
  MLIRContext &ctx = *module.getContext();
  // One-Shot Bufferize through its C++ entry point, so that buffer copies
  // become linalg.copy (lowered to loops below) rather than memref.copy,
  // whose strided form calls `memrefCopy` from libmlir_c_runner_utils.so
  // (a library that would load a second, shared copy of MLIR).
  bufferization::OneShotBufferizationOptions bufferize;
  bufferize.allowReturnAllocsFromLoops = true;
  bufferize.memCpyFn = [](OpBuilder &b, Location loc, Value from,
                          Value to) -> LogicalResult {
    linalg::CopyOp::create(b, loc, from, to);
    return success();
  };
  bufferization::BufferizationState bufferizationState;
  if (failed(bufferization::runOneShotBufferize(module, bufferize,
                                                bufferizationState))) {
    error = "one-shot-bufferize failed: " + diagnostics;
    return nullptr;
  }

  PassManager pm(&ctx);
  bufferization::buildBufferDeallocationPipeline(pm);
  // The CPU target's own lowering to LLVM (lowering/Pipelines.h).
  kimi::buildCpuToLLVMPipeline(pm);
  if (failed(pm.run(module))) {
    error = "lowering to LLVM failed: " + diagnostics;
    return nullptr;
  }

  auto transformer = makeOptimizingTransformer(/*optLevel=*/2,
                                               /*sizeLevel=*/0, nullptr);
  ExecutionEngineOptions options;
  options.transformer = transformer;
  auto engine = ExecutionEngine::create(module, options);
  if (!engine) {
    error = "JIT failed: " + llvm::toString(engine.takeError());
    return nullptr;
  }
  return std::move(*engine);
}

} // namespace kimi::test

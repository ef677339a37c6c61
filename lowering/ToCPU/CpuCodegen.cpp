//===- CpuCodegen.cpp - kimi module -> native shared object ---------------===//

#include "lowering/ToCPU/CpuCodegen.h"
#include "lowering/ToCPU/ModuleShims.h"
#include "lowering/Pipelines.h"
#include "dialects/Kimi/KimiDialect.h"
#include "lowering/Passes.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/BufferizationToMemRef/BufferizationToMemRef.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotModuleBufferize.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

using namespace mlir;

void kimi::registerCpuCodegenDialects(DialectRegistry &registry) {
  registry.insert<LLVM::LLVMDialect, cf::ControlFlowDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferDeallocationOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(
      registry);
  cf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

namespace {


/// For every `_mlir_ciface_<name>(p0, ..., pn)` adds
/// `void kimi_entry_<name>(void **args)` calling it with `args[0..n]`: one
/// signature for every entry, so the runtime needs no per-model glue.
llvm::Error addPackedEntryPoints(llvm::Module &module) {
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptrType = llvm::PointerType::get(ctx, 0);
  auto *wrapperType = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx),
                                              {ptrType}, /*isVarArg=*/false);
  llvm::SmallVector<llvm::Function *> entries;
  for (llvm::Function &fn : module)
    if (!fn.isDeclaration() && fn.getName().starts_with("_mlir_ciface_"))
      entries.push_back(&fn);
  for (llvm::Function *fn : entries) {
    std::string name =
        "kimi_entry_" + fn->getName().drop_front(strlen("_mlir_ciface_")).str();
    auto *wrapper = llvm::Function::Create(
        wrapperType, llvm::GlobalValue::ExternalLinkage, name, module);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", wrapper));
    llvm::SmallVector<llvm::Value *> args;
    for (auto [i, param] : llvm::enumerate(fn->args())) {
      if (!param.getType()->isPointerTy())
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "%s: argument %zu is not a pointer",
                                       fn->getName().str().c_str(), i);
      llvm::Value *slot = b.CreateConstGEP1_64(ptrType, wrapper->getArg(0), i);
      args.push_back(b.CreateLoad(ptrType, slot));
    }
    b.CreateCall(fn, args);
    b.CreateRetVoid();
  }
  return llvm::Error::success();
}


/// Runs `cc -shared` on the object and the C sources (the runtime's shims,
/// runtime/abi/, compiled against its module ABI header written next to
/// them); the result is the .so bytes.
llvm::Expected<std::string> linkSharedObject(llvm::StringRef object,
                                             llvm::ArrayRef<std::string> cSources) {
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("kimi-cpu", dir))
    return llvm::createStringError(ec, "cannot create a temporary directory");
  std::string objPath = (dir + "/model.o").str();
  std::string soPath = (dir + "/model.so").str();
  std::string headerPath = (dir + "/" + kimi::kModuleAbiHeaderName).str();
  std::vector<std::string> sourcePaths;
  for (size_t i = 0; i < cSources.size(); ++i)
    sourcePaths.push_back((dir + "/shim" + llvm::Twine(i) + ".c").str());
  llvm::scope_exit cleanup([&] {
    for (const std::string &p : sourcePaths)
      llvm::sys::fs::remove(p);
    llvm::sys::fs::remove(headerPath);
    llvm::sys::fs::remove(objPath);
    llvm::sys::fs::remove(soPath);
    llvm::sys::fs::remove(dir);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(objPath, ec);
    if (ec)
      return llvm::createStringError(ec, "cannot write %s", objPath.c_str());
    os << object;
  }
  std::vector<std::pair<std::string, llvm::StringRef>> files = {
      {headerPath, kimi::kModuleAbiHeader}};
  for (size_t i = 0; i < cSources.size(); ++i)
    files.push_back({sourcePaths[i], cSources[i]});
  for (const auto &[path, text] : files) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return llvm::createStringError(ec, "cannot write %s", path.c_str());
    os << text;
  }
  llvm::ErrorOr<std::string> cc = llvm::sys::findProgramByName("cc");
  if (!cc)
    return llvm::createStringError(cc.getError(),
                                   "no C compiler driver 'cc' on PATH to link "
                                   "the shared object (install gcc)");
  std::string message;
  llvm::SmallVector<llvm::StringRef> args = {*cc, "-shared", "-o", soPath,
                                             objPath};
  std::string include = ("-I" + dir).str();
  if (!sourcePaths.empty())
    args.append({"-O2", "-fPIC", include});
  for (const std::string &p : sourcePaths)
    args.push_back(p);
  args.push_back("-lm");
  int rc = llvm::sys::ExecuteAndWait(*cc, args, std::nullopt, {}, 0, 0,
                                     &message);
  if (rc != 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "linking the shared object failed (%s %s)",
                                   cc->c_str(), message.c_str());
  auto buffer = llvm::MemoryBuffer::getFile(soPath, /*IsText=*/false);
  if (!buffer)
    return llvm::createStringError(buffer.getError(), "cannot read %s",
                                   soPath.c_str());
  return (*buffer)->getBuffer().str();
}

} // namespace

llvm::Error kimi::codegenError(const llvm::Twine &step,
                               const std::string &detail) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "code generation failed in %s%s%s",
                                 step.str().c_str(), detail.empty() ? "" : ":\n",
                                 detail.c_str());
}

llvm::Error kimi::lowerToBufferizedMemRefs(ModuleOp module,
                                          llvm::StringRef frontPipeline,
                                          const KimiToMemRefOptions &options,
                                          FrontPassAdder addFrontPasses,
                                          LoweringStage last) {
  MLIRContext *ctx = module.getContext();
  CodegenDiagnostics diagnostics(ctx);
  PassManager pm(ctx);
  if (!frontPipeline.empty() && failed(parsePassPipeline(frontPipeline, pm)))
    return diagnostics.fail("parsing the front pipeline '" + frontPipeline +
                            "'");
  if (addFrontPasses)
    addFrontPasses(pm);
  if (failed(pm.run(module)))
    return diagnostics.fail("the front pipeline");
  PassManager lower(ctx);
  buildKimiToLinalgPipeline(lower, options);
  if (failed(lower.run(module)))
    return diagnostics.fail("lowering kimi ops");
  if (last == LoweringStage::Linalg)
    return llvm::Error::success();
  PassManager bufferize(ctx);
  buildLinalgToMemRefPipeline(bufferize, options);
  if (failed(bufferize.run(module)))
    return diagnostics.fail("bufferization");
  return llvm::Error::success();
}

llvm::Expected<std::string>
kimi::compileToSharedObject(ModuleOp module, const CpuCodegenOptions &options) {
  KimiToMemRefOptions memref;
  memref.sortedExpertsMinTokens = options.sortedExpertsMinTokens;
  if (llvm::Error e = lowerToBufferizedMemRefs(
          module, options.frontPipeline, memref,
          options.frontPasses ? FrontPassAdder(options.frontPasses)
                              : FrontPassAdder()))
    return std::move(e);
  MLIRContext *ctx = module.getContext();
  CodegenDiagnostics diagnostics(ctx);
  PassManager pm(ctx);
  buildCpuToLLVMPipeline(pm);
  if (failed(pm.run(module)))
    return diagnostics.fail("lowering to the LLVM dialect");

  return emitSharedObject(module, options.optLevel, options.llvmIR, {});
}

llvm::Expected<std::string>
kimi::emitSharedObject(ModuleOp module, unsigned optLevel, std::string *llvmIR,
                       llvm::ArrayRef<std::string> cSources) {
  MLIRContext *ctx = module.getContext();
  CodegenDiagnostics diagnostics(ctx);
  // 5. LLVM IR, optimised for the host, as a PIC object.
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "kimi_model");
  if (!llvmModule)
    return diagnostics.fail("translation to LLVM IR");
  if (llvm::Error e = addPackedEntryPoints(*llvmModule))
    return codegenError("entry point wrappers", llvm::toString(std::move(e)));
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return codegenError("looking up the host target", error);
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, llvm::sys::getHostCPUName(), "", llvm::TargetOptions(),
      llvm::Reloc::PIC_));
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(machine->createDataLayout());
  auto optimize = makeOptimizingTransformer(optLevel, 0, machine.get());
  if (llvm::Error e = optimize(llvmModule.get()))
    return codegenError("LLVM optimisation", llvm::toString(std::move(e)));
  if (llvmIR) {
    llvm::raw_string_ostream os(*llvmIR);
    llvmModule->print(os, nullptr);
  }
  llvm::SmallString<0> object;
  {
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager codegen;
    if (machine->addPassesToEmitFile(codegen, os, nullptr,
                                     llvm::CodeGenFileType::ObjectFile))
      return codegenError("object emission", "the target cannot emit objects");
    codegen.run(*llvmModule);
  }
  bool usesComm = llvm::any_of(*llvmModule, [](const llvm::Function &fn) {
    return fn.isDeclaration() && fn.getName().starts_with("kimi_rt_");
  });
  std::vector<std::string> sources(cSources.begin(), cSources.end());
  if (usesComm)
    sources.push_back(kimi::kCommModuleShim);
  return linkSharedObject(object, sources);
}

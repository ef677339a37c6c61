//===- CpuCodegen.cpp - kimi module -> native shared object ---------------===//

#include "lowering/ToCPU/CpuCodegen.h"
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

/// The comm shim linked into partitioned models (docs/runtime-abi.md,
/// "Collectives"): the runtime fills `kimi_rt_comm` after dlopen; the
/// `kimi_rt_*` functions that kimi-lower-collectives calls forward to it and
/// record the first failure in `kimi_rt_comm_status`, which the runtime
/// checks after every entry call. Buffers arrive as expanded rank-1 memref
/// descriptors (allocated, aligned, offset, size, stride).
const char *kCommShim = R"c(
#include <stdint.h>
typedef struct {
  void *ctx;
  int32_t (*rank)(void *ctx);
  int32_t (*all_reduce)(void *ctx, const void *send, void *recv, int64_t count,
                        int32_t dtype, int32_t op, int32_t group);
  int32_t (*all_gather)(void *ctx, const void *send, void *recv,
                        int64_t send_count, int32_t dtype, int32_t group);
  int32_t (*reduce_scatter)(void *ctx, const void *send, void *recv,
                            int64_t recv_count, int32_t dtype, int32_t op,
                            int32_t group);
  int32_t (*all_to_all)(void *ctx, const void *send, void *recv, int64_t count,
                        int32_t dtype, int32_t group);
} kimi_rt_comm_table;
const int32_t kimi_rt_comm_abi_version = 2;
kimi_rt_comm_table kimi_rt_comm;
int32_t kimi_rt_comm_status;
int64_t kimi_rt_rank(void) {
  if (!kimi_rt_comm.rank) {
    kimi_rt_comm_status = -1;
    return 0;
  }
  return kimi_rt_comm.rank(kimi_rt_comm.ctx);
}
#define MR(T, p) T *p##_a, T *p, int64_t p##_o, int64_t p##_n, int64_t p##_s
#define CALL(fn, ...)                                                            do {                                                                             if (kimi_rt_comm_status)                                                         return;                                                                      kimi_rt_comm_status =                                                              kimi_rt_comm.fn ? kimi_rt_comm.fn(kimi_rt_comm.ctx, __VA_ARGS__) : -1;   } while (0)
#define SHIM(N, T, C)                                                            void kimi_rt_all_reduce_##N(MR(T, s), MR(T, r), int32_t op, int32_t g) {                   CALL(all_reduce, s + s_o, r + r_o, r_n, C, op, g);                              }                                                                              void kimi_rt_all_gather_##N(MR(T, s), MR(T, r), int32_t g) {                               CALL(all_gather, s + s_o, r + r_o, s_n, C, g);                                  }                                                                              void kimi_rt_reduce_scatter_##N(MR(T, s), MR(T, r), int32_t op, int32_t g) {               CALL(reduce_scatter, s + s_o, r + r_o, r_n, C, op, g);                          }                                                                              void kimi_rt_all_to_all_##N(MR(T, s), MR(T, r), int32_t g) {                               CALL(all_to_all, s + s_o, r + r_o, s_n, C, g);                                  }
SHIM(f32, float, 0)
SHIM(i32, int32_t, 1)
SHIM(i64, int64_t, 2)
)c";

/// Runs `cc -shared` on the object and the C sources (the runtime shims the
/// model calls); the result is the .so bytes.
llvm::Expected<std::string> linkSharedObject(llvm::StringRef object,
                                             llvm::ArrayRef<std::string> cSources) {
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("kimi-cpu", dir))
    return llvm::createStringError(ec, "cannot create a temporary directory");
  std::string objPath = (dir + "/model.o").str();
  std::string soPath = (dir + "/model.so").str();
  std::vector<std::string> sourcePaths;
  for (size_t i = 0; i < cSources.size(); ++i)
    sourcePaths.push_back((dir + "/shim" + llvm::Twine(i) + ".c").str());
  llvm::scope_exit cleanup([&] {
    for (const std::string &p : sourcePaths)
      llvm::sys::fs::remove(p);
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
  for (size_t i = 0; i < cSources.size(); ++i) {
    std::error_code ec;
    llvm::raw_fd_ostream os(sourcePaths[i], ec);
    if (ec)
      return llvm::createStringError(ec, "cannot write %s",
                                     sourcePaths[i].c_str());
    os << cSources[i];
  }
  llvm::ErrorOr<std::string> cc = llvm::sys::findProgramByName("cc");
  if (!cc)
    return llvm::createStringError(cc.getError(),
                                   "no C compiler driver 'cc' on PATH to link "
                                   "the shared object (install gcc)");
  std::string message;
  llvm::SmallVector<llvm::StringRef> args = {*cc, "-shared", "-o", soPath,
                                             objPath};
  if (!sourcePaths.empty())
    args.append({"-O2", "-fPIC"});
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
                                          int64_t sortedExpertsMinTokens,
                                          bool splatsAsFills,
                                          llvm::StringRef tensorPipeline,
                                          bool emptyPerWriter) {
  MLIRContext *ctx = module.getContext();
  CodegenDiagnostics diagnostics(ctx);

  // 1. kimi level: proof and chunking, lowering to linalg, weights.
  {
    PassManager pm(ctx);
    if (!frontPipeline.empty() &&
        failed(parsePassPipeline(frontPipeline, pm)))
      return diagnostics.fail("parsing the front pipeline '" + frontPipeline +
                         "'");
    pm.addPass(kimi::createKimiLowerKda());
    kimi::KimiLowerToLinalgOptions linalgOptions;
    linalgOptions.sortedExpertsMinTokens = sortedExpertsMinTokens;
    pm.addPass(kimi::createKimiLowerToLinalg(linalgOptions));
    // Partitioned modules: collectives become calls into the comm shim.
    pm.addPass(kimi::createKimiLowerCollectives());
    // Elementwise arith/math on tensors (residual adds) become linalg too.
    pm.addPass(createConvertElementwiseToLinalgPass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    pm.addPass(kimi::createKimiExternalizeWeights());
    if (failed(pm.run(module)))
      return diagnostics.fail("lowering kimi ops");
  }
  // Anything kimi left (e.g. kda without a proof attribute) cannot run.
  Operation *leftover = nullptr;
  module.walk([&](Operation *op) {
    if (isa<kimi::KimiDialect>(op->getDialect()) && !leftover)
      leftover = op;
  });
  if (leftover) {
    std::string name = leftover->getName().getStringRef().str();
    return codegenError("lowering kimi ops", "'" + name +
                                            "' was not lowered (is the decay "
                                            "proof in the front pipeline?)");
  }

  if (!tensorPipeline.empty()) {
    PassManager pm(ctx);
    if (failed(parsePassPipeline(tensorPipeline, pm)))
      return diagnostics.fail("parsing the tensor pipeline '" + tensorPipeline +
                              "'");
    if (failed(pm.run(module)))
      return diagnostics.fail("passes on linalg over tensors");
  }

  // 2. Entry points get MLIR's C interface. The state names on arguments
  // and results live on in the artifact's signature, not in the code.
  for (auto fn : module.getOps<func::FuncOp>()) {
    fn.setArgAttrsAttr(nullptr);
    fn.setResAttrsAttr(nullptr);
  }
  // Inputs belong to the runtime (it shares state buffers between sessions
  // and snapshots): entry arguments are read-only to bufferization, which
  // copies before any in-place update.
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn.isPublic()) {
      fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                  UnitAttr::get(ctx));
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        fn.setArgAttr(i, bufferization::BufferizationDialect::kWritableAttrName,
                      BoolAttr::get(ctx, false));
    }

  // Splat constants (zeros that partitioning introduces, say) as fills, so
  // that bufferization makes no global of them.
  if (splatsAsFills) {
    SmallVector<arith::ConstantOp> splats;
    module.walk([&](arith::ConstantOp c) {
      auto type = dyn_cast<RankedTensorType>(c.getType());
      if (type && type.getRank() > 0 && isa<SplatElementsAttr>(c.getValue()))
        splats.push_back(c);
    });
    for (arith::ConstantOp c : splats) {
      OpBuilder b(c);
      auto type = cast<RankedTensorType>(c.getType());
      auto value = cast<SplatElementsAttr>(c.getValue()).getSplatValue<TypedAttr>();
      Value empty = tensor::EmptyOp::create(b, c.getLoc(), type.getShape(),
                                            type.getElementType());
      Value scalar = arith::ConstantOp::create(b, c.getLoc(), value);
      Value fill =
          linalg::FillOp::create(b, c.getLoc(), scalar, empty).getResult(0);
      c.replaceAllUsesWith(fill);
      c.erase();
    }
  }

  // One fill per writer. CSE merges the zero inits of products (every
  // kimi.linear of a layer starts from the same fill); bufferized, one
  // shared fill is a fill plus a copy of it for each further user, and the
  // GPU's kimi-gpu-gemm-calls no longer sees the zero init that lets a
  // product overwrite its output (beta = 0). A fill of its own per writer
  // bufferizes in place into that writer's buffer.
  {
    SmallVector<linalg::FillOp> shared;
    module.walk([&](linalg::FillOp fill) {
      if (fill.hasPureTensorSemantics() && !fill->getResult(0).hasOneUse() &&
          !fill->getResult(0).use_empty())
        shared.push_back(fill);
    });
    for (linalg::FillOp fill : shared) {
      // Only the uses that write into it (the products' outputs); readers
      // may share one fill.
      SmallVector<OpOperand *> uses;
      for (OpOperand &use : fill->getResult(0).getUses())
        if (auto dps = dyn_cast<DestinationStyleOpInterface>(use.getOwner());
            dps && dps.isDpsInit(&use))
          uses.push_back(&use);
      if (uses.size() < 2)
        continue;
      Value init = fill.getDpsInits()[0];
      auto empty = init.getDefiningOp<tensor::EmptyOp>();
      for (OpOperand *use : llvm::drop_begin(uses)) {
        OpBuilder b(use->getOwner());
        IRMapping map;
        if (empty)
          map.map(init, b.clone(*empty)->getResult(0));
        use->set(b.clone(*fill, map)->getResult(0));
      }
    }
  }

  // One empty tensor per writer: CSE merges the empty inits of elementwise
  // ops of one shape, and bufferization then writes a later op's result
  // into the buffer of an earlier one that is dead by then.
  if (emptyPerWriter) {
    SmallVector<tensor::EmptyOp> shared;
    module.walk([&](tensor::EmptyOp empty) {
      if (!empty->getResult(0).hasOneUse() && !empty->getResult(0).use_empty())
        shared.push_back(empty);
    });
    for (tensor::EmptyOp empty : shared) {
      SmallVector<OpOperand *> uses;
      for (OpOperand &use : empty->getResult(0).getUses())
        if (auto dps = dyn_cast<DestinationStyleOpInterface>(use.getOwner());
            dps && dps.isDpsInit(&use))
          uses.push_back(&use);
      for (OpOperand *use : llvm::drop_begin(uses)) {
        OpBuilder b(use->getOwner());
        use->set(b.clone(*empty)->getResult(0));
      }
    }
  }

  // 3. Bufferize the whole call graph; function results get identity layouts
  // so the runtime sees plain row-major buffers.
  bufferization::OneShotBufferizationOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.allowReturnAllocsFromLoops = true;
  bufferize.setFunctionBoundaryTypeConversion(
      bufferization::LayoutMapOption::IdentityLayoutMap);
  bufferize.memCpyFn = [](OpBuilder &b, Location loc, Value from,
                          Value to) -> LogicalResult {
    linalg::CopyOp::create(b, loc, from, to);
    return success();
  };
  bufferization::BufferizationState state;
  if (failed(bufferization::runOneShotModuleBufferize(module, bufferize,
                                                      state)))
    return diagnostics.fail("bufferization");

  // 4. Deallocation, then to the LLVM dialect. Buffer copies become
  // linalg.copy loops: memref.copy of strided buffers would call memrefCopy
  // from MLIR's runner library, which the shared object must not need.
  {
    PassManager pm(ctx);
    bufferization::buildBufferDeallocationPipeline(pm);
    pm.addPass(createConvertBufferizationToMemRefPass());
    if (failed(pm.run(module)))
      return diagnostics.fail("buffer deallocation");
  }
  module.walk([](memref::CopyOp copy) {
    OpBuilder b(copy);
    linalg::CopyOp::create(b, copy.getLoc(), copy.getSource(),
                           copy.getTarget());
    copy.erase();
  });
  return llvm::Error::success();
}

llvm::Expected<std::string>
kimi::compileToSharedObject(ModuleOp module, const CpuCodegenOptions &options) {
  if (llvm::Error e = lowerToBufferizedMemRefs(module, options.frontPipeline,
                                               options.sortedExpertsMinTokens))
    return std::move(e);
  MLIRContext *ctx = module.getContext();
  CodegenDiagnostics diagnostics(ctx);
  {
    PassManager pm(ctx);
    pm.addPass(createConvertLinalgToLoopsPass());
    pm.addPass(memref::createExpandStridedMetadataPass());
    pm.addPass(createLowerAffinePass());
    pm.addPass(createSCFToControlFlowPass());
    pm.addPass(createConvertMathToLLVMPass());
    pm.addPass(createConvertMathToLibmPass());
    pm.addPass(createArithToLLVMConversionPass());
    pm.addPass(createFinalizeMemRefToLLVMConversionPass());
    pm.addPass(createConvertFuncToLLVMPass());
    pm.addPass(createConvertControlFlowToLLVMPass());
    pm.addPass(createReconcileUnrealizedCastsPass());
    if (failed(pm.run(module)))
      return diagnostics.fail("lowering to the LLVM dialect");
  }

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
    sources.push_back(kCommShim);
  return linkSharedObject(object, sources);
}

//===- ModelGpuCodegen.cpp - kimi model -> GPU host program + kernels -----===//

#include "lowering/ToGPU/ModelGpuCodegen.h"
#include "lowering/Passes.h"
#include "lowering/Pipelines.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "lowering/ToCPU/ModuleShims.h"
#include "lowering/ToGPU/GpuSerialize.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUCommon/GPUCommonPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/FileSystem.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <limits>

using namespace mlir;

namespace kimi::gpu {

namespace {


/// Outlining gives every kernel its own gpu.module, i.e. its own binary,
/// ptxas run and module load; one module holds them all instead. Kernel
/// names repeat across outlined modules (@f_kernel in @f_kernel and in
/// @f_kernel_0), so each kernel takes its module's unique name.
void mergeGpuModules(ModuleOp module) {
  SmallVector<mlir::gpu::GPUModuleOp> modules(
      module.getOps<mlir::gpu::GPUModuleOp>());
  if (modules.empty())
    return;
  llvm::DenseMap<std::pair<StringAttr, StringAttr>, StringAttr> renamed;
  OpBuilder b(modules.front());
  auto merged =
      mlir::gpu::GPUModuleOp::create(b, module.getLoc(), "kimi_kernels");
  Block &body = merged.getBodyRegion().front();
  for (mlir::gpu::GPUModuleOp m : modules) {
    SmallVector<Operation *> ops;
    for (Operation &op : m.getBodyRegion().front().getOperations())
      ops.push_back(&op);
    size_t kernels = llvm::count_if(
        ops, [](Operation *op) { return isa<mlir::gpu::GPUFuncOp>(op); });
    // Other symbols (shared-memory globals of the generated kernels) get
    // the module's name as a prefix, their uses inside the module too.
    for (Operation *op : ops) {
      if (isa<mlir::gpu::GPUFuncOp>(op))
        continue;
      auto name = op->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName());
      if (!name)
        continue;
      StringAttr renamedSymbol =
          b.getStringAttr(m.getSymName() + "_" + name.getValue());
      if (failed(SymbolTable::replaceAllSymbolUses(op, renamedSymbol, m)))
        continue;
      SymbolTable::setSymbolName(op, renamedSymbol);
    }
    for (Operation *op : ops) {
      if (auto fn = dyn_cast<mlir::gpu::GPUFuncOp>(op)) {
        // Outlined kernels (@f_kernel in @f_kernel_3) take the module's
        // name; generated ones keep theirs after it (@kimi_kda_0_kda_prep).
        std::string name = m.getSymName().str();
        if (kernels > 1 || !m.getSymName().starts_with(fn.getName()))
          name += "_" + fn.getName().str();
        StringAttr newName = b.getStringAttr(name);
        renamed[{m.getSymNameAttr(), fn.getNameAttr()}] = newName;
        SymbolTable::setSymbolName(fn, newName);
      }
      op->moveBefore(&body, body.end());
    }
    m.erase();
  }
  module.walk([&](mlir::gpu::LaunchFuncOp launch) {
    SymbolRefAttr kernel = launch.getKernel();
    auto it = renamed.find({kernel.getRootReference(),
                            kernel.getLeafReference()});
    if (it == renamed.end())
      return;
    launch.setKernelAttr(SymbolRefAttr::get(
        merged.getSymNameAttr(), {FlatSymbolRefAttr::get(it->second)}));
  });
}



/// gpu.launch_func reads and writes its buffer operands: what ownership-based
/// deallocation needs to know about the KDA launches that
/// kimi-gpu-kda-kernels inserts before bufferization. Buffers are memrefs
/// before the LLVM lowering and descriptors or pointers after it; every
/// non-scalar operand is written, so a launch is never dead code (a model
/// with only reads would let the canonicalizer erase it).
struct LaunchFuncMemoryEffects
    : MemoryEffectOpInterface::ExternalModel<LaunchFuncMemoryEffects,
                                             mlir::gpu::LaunchFuncOp> {
  void getEffects(Operation *op,
                  SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
                      &effects) const {
    for (OpOperand &operand : op->getOpOperands()) {
      Type t = operand.get().getType();
      if (t.isIntOrIndexOrFloat() || isa<mlir::gpu::AsyncTokenType>(t))
        continue;
      effects.emplace_back(MemoryEffects::Read::get(), &operand);
      effects.emplace_back(MemoryEffects::Write::get(), &operand);
    }
  }
};

} // namespace

void registerModelGpuExtensions(DialectRegistry &registry) {
  registerGpuCodegenDialects(registry);
  registry.addExtension(+[](MLIRContext *ctx, mlir::gpu::GPUDialect *) {
    mlir::gpu::LaunchFuncOp::attachInterface<LaunchFuncMemoryEffects>(*ctx);
  });
}

void addGpuKernelPasses(OpPassManager &pm, const ModelGpuCodegenOptions &options) {
  // KDA before kimi-lower-kda sees it; AttnRes and the short convolutions
  // before the norm pass, since they fuse the norm of each mix and the L2
  // norms of the convolved heads.
  if (options.kdaKernels) {
    kimi::KimiGpuKdaKernelsOptions kda;
    kda.smCount = options.smCount;
    pm.addPass(kimi::createKimiGpuKdaKernels(kda));
  }
  if (options.mlaKernels) {
    kimi::KimiGpuMlaKernelsOptions mla;
    mla.decodeKernels = options.mlaDecodeKernels;
    mla.smCount = options.smCount;
    pm.addPass(kimi::createKimiGpuMlaKernels(mla));
  }
  if (options.tokenwiseKernels) {
    pm.addPass(kimi::createKimiGpuAttnResKernels());
    pm.addPass(kimi::createKimiDecomposeLatentMoe());
    pm.addPass(kimi::createKimiGpuShortConvKernels());
    pm.addPass(kimi::createKimiGpuNormKernels());
    pm.addPass(kimi::createKimiGpuRouterKernels());
    kimi::KimiGpuRoutedExpertsKernelsOptions experts;
    experts.maxTokens = options.sortedExpertsMinTokens > 0
                            ? options.sortedExpertsMinTokens - 1
                            : std::numeric_limits<int64_t>::max();
    experts.bf16Products = options.bf16WeightProducts;
    pm.addPass(kimi::createKimiGpuRoutedExpertsKernels(experts));
  }
}

void setGpuMemRefOptions(const ModelGpuCodegenOptions &options,
                         KimiToMemRefOptions &memref) {
  memref.sortedExpertsMinTokens = options.sortedExpertsMinTokens;
  memref.splatsAsFills = true;
  memref.fuseElementwise = options.fuseElementwise;
  memref.emptyPerWriter = true;
}

llvm::Expected<std::string>
compileModelForGpu(ModuleOp module, const ModelGpuCodegenOptions &options) {
  std::string toolkit = cudaToolkitPath();
  if (toolkit.empty())
    return kimi::codegenError("finding the CUDA toolkit",
                   "the GPU model target links CUDA's libdevice and runs "
                   "ptxas: put ptxas on PATH or set CUDA_HOME");
  if (!llvm::sys::fs::exists(toolkit + "/nvvm/libdevice/libdevice.10.bc"))
    return kimi::codegenError(
        "finding CUDA's libdevice",
        "the toolkit at '" + toolkit +
            "' has ptxas but no nvvm/libdevice/libdevice.10.bc, which the GPU "
            "model target links: install the full toolkit or set CUDA_HOME");
  KimiToMemRefOptions memref;
  setGpuMemRefOptions(options, memref);
  if (llvm::Error e = lowerToBufferizedMemRefs(
          module, options.frontPipeline, memref,
          [&](OpPassManager &pm) { addGpuKernelPasses(pm, options); }))
    return std::move(e);

  MLIRContext *ctx = module.getContext();
  CodegenDiagnostics diagnostics(ctx);

  // 1. Weights from the table; loop nests to kernels.
  {
    PassManager pm(ctx);
    pm.addPass(kimi::createKimiGpuWeightTable());
    if (options.gemmCalls) {
      kimi::KimiGpuGemmCallsOptions gemm;
      gemm.precision = options.matmulPrecision;
      gemm.bf16WeightProducts = options.bf16WeightProducts;
      gemm.gemvMaxM = options.gemvMaxM;
      gemm.gemvMaxGroup = options.gemvMaxGroup;
      gemm.gemvEpilogues = options.gemvEpilogues;
      gemm.gemvWeightPrefetch =
          options.gemvWeightPrefetch && options.gridDependencies;
      gemm.smCount = options.smCount;
      pm.addPass(kimi::createKimiGpuGemmCalls(gemm));
    }
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
    kimi::KimiGpuWarpReductionsOptions reductions;
    reductions.unroll = options.reductionUnroll;
    pm.addNestedPass<func::FuncOp>(kimi::createKimiGpuWarpReductions(reductions));
    pm.addNestedPass<func::FuncOp>(kimi::createKimiGpuRegisterAccumulators());
    kimi::KimiGpuMapLoopsOptions map;
    map.blockSize = options.blockSize;
    pm.addNestedPass<func::FuncOp>(kimi::createKimiGpuMapLoops(map));
    pm.addPass(createConvertParallelLoopToGpuPass());
    pm.addPass(kimi::createKimiGpuSerialKernels());
    // Constants and dims used by a launch body (loop bounds, the divisors
    // that delinearise a collapsed index) move into it before outlining:
    // as kernel arguments they were opaque, and every thread of every
    // generic kernel ran 64-bit divisions by run-time values.
    pm.addPass(createGpuLaunchSinkIndexComputationsPass());
    pm.addPass(createGpuKernelOutliningPass());
    if (failed(pm.run(module)))
      return diagnostics.fail("mapping loops to kernels (GPU)");
  }
  mergeGpuModules(module);
  if (options.gridDependencies) {
    PassManager pm(ctx);
    pm.addPass(kimi::createKimiGpuGridDependencies());
    if (failed(pm.run(module)))
      return diagnostics.fail("adding grid dependency waits (GPU)");
  }
  if (options.waitsGridDependencies) {
    auto modules = module.getOps<mlir::gpu::GPUModuleOp>();
    *options.waitsGridDependencies =
        !modules.empty() && llvm::all_of(modules, [](mlir::gpu::GPUModuleOp m) {
          return m->hasAttr(kimi::kWaitsGridDependenciesAttr);
        });
  }
  if (options.gpuIR) {
    llvm::raw_string_ostream os(*options.gpuIR);
    module.print(os);
    return std::string();
  }

  // 2. Kernels to NVVM, host to LLVM, kernels to a binary.
  {
    PassManager pm(ctx);
    // As upstream's buildLowerToNVVMPassPipeline (the generated KDA kernels
    // use nvgpu and vector ops), with the host's allocations on the device.
    pm.addPass(createConvertNVGPUToNVVMPass());
    pm.addPass(createConvertVectorToSCFPass());
    pm.addPass(createSCFToControlFlowPass());
    pm.addPass(createConvertNVVMToLLVMPass());
    pm.addPass(memref::createExpandStridedMetadataPass());
    GpuNVVMAttachTargetOptions target;
    target.chip = options.chip;
    target.features = options.features;
    target.optLevel = options.kernelOptLevel;
    pm.addPass(createGpuNVVMAttachTarget(target));
    pm.addPass(createLowerAffinePass());
    pm.addPass(createArithToLLVMConversionPass());
    pm.addPass(createConvertIndexToLLVMPass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    OpPassManager &kernels = pm.nest<mlir::gpu::GPUModuleOp>();
    kernels.addPass(createStripDebugInfoPass());
    kernels.addPass(createConvertGpuOpsToNVVMOps());
    kernels.addPass(LLVM::createNVVMOptimizeForTargetPass());
    kernels.addPass(createCanonicalizerPass());
    kernels.addPass(createCSEPass());
    kernels.addPass(createReconcileUnrealizedCastsPass());
    // Host: memref.alloc goes through _mlir_memref_to_llvm_alloc, which the
    // GPU shim serves with device memory.
    FinalizeMemRefToLLVMConversionPassOptions memref;
    memref.useGenericFunctions = true;
    pm.addPass(createFinalizeMemRefToLLVMConversionPass(memref));
    pm.addPass(createConvertMathToLLVMPass());
    pm.addPass(createConvertMathToLibmPass());
    pm.addPass(createConvertFuncToLLVMPass());
    pm.addPass(createConvertControlFlowToLLVMPass());
    pm.addPass(createGpuToLLVMConversionPass());
    GpuModuleToBinaryPassOptions binary;
    binary.toolkitPath = toolkit;
    binary.compilationTarget = options.cubin ? "bin" : "isa";
    pm.addPass(createGpuModuleToBinaryPass(binary));
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createReconcileUnrealizedCastsPass());
    if (failed(pm.run(module)))
      return diagnostics.fail("lowering to NVVM and the LLVM dialect (GPU)");
  }
  if (options.kernelImages) {
    options.kernelImages->clear();
    module.walk([&](mlir::gpu::BinaryOp binary) {
      for (Attribute object : binary.getObjects())
        options.kernelImages->push_back(
            cast<mlir::gpu::ObjectAttr>(object).getObject().getValue().str());
    });
    return std::string();
  }
  return emitSharedObject(module, options.hostOptLevel, options.llvmIR,
                          {kGpuModuleShim});
}

} // namespace kimi::gpu

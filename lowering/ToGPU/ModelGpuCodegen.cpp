//===- ModelGpuCodegen.cpp - kimi model -> GPU host program + kernels -----===//

#include "lowering/ToGPU/ModelGpuCodegen.h"
#include "lowering/Passes.h"
#include "lowering/Pipelines.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "lowering/ToCPU/ModuleShims.h"
#include "lowering/ToGPU/GpuSerialize.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"

#include <limits>

using namespace mlir;

namespace kimi::gpu {

namespace {


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
  if (options.frontPasses)
    options.frontPasses(pm);
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

void ModelGpuCodegenOptions::setKernelsPipelineOptions(
    GpuKernelsPipelineOptions &o) const {
  o.gemmCalls = gemmCalls;
  o.matmulPrecision = matmulPrecision;
  o.bf16WeightProducts = bf16WeightProducts;
  o.gemvMaxM = gemvMaxM;
  o.gemvMaxGroup = gemvMaxGroup;
  o.gemvEpilogues = gemvEpilogues;
  o.gemvWeightPrefetch = gemvWeightPrefetch;
  o.smCount = smCount;
  o.reductionUnroll = reductionUnroll;
  o.blockSize = blockSize;
  o.gridDependencies = gridDependencies;
}

void ModelGpuCodegenOptions::setNVVMPipelineOptions(
    const std::string &toolkit, GpuToNVVMPipelineOptions &o) const {
  o.chip = chip;
  o.features = features;
  o.optLevel = kernelOptLevel;
  o.toolkit = toolkit;
  o.format = cubin ? "bin" : "isa";
}

llvm::Expected<ModelGpuCodegenResult>
compileModelForGpu(ModuleOp module, const ModelGpuCodegenOptions &options) {
  std::string toolkit = cudaToolkitPath();
  if (toolkit.empty())
    return kimi::codegenError("finding the CUDA toolkit",
                              "the GPU model target links CUDA's libdevice and "
                              "runs ptxas: put ptxas on PATH or set CUDA_HOME");
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
  ModelGpuCodegenResult result;
  {
    PassManager pm(ctx);
    GpuKernelsPipelineOptions kernels;
    options.setKernelsPipelineOptions(kernels);
    buildGpuKernelsPipeline(pm, kernels);
    if (failed(pm.run(module)))
      return diagnostics.fail("mapping loops to kernels (kimi-gpu-kernels-pipeline)");
  }
  auto modules = module.getOps<mlir::gpu::GPUModuleOp>();
  result.waitsGridDependencies =
      !modules.empty() && llvm::all_of(modules, [](mlir::gpu::GPUModuleOp m) {
        return m->hasAttr(kimi::kWaitsGridDependenciesAttr);
      });
  if (options.stopAfter == ModelGpuCodegenOptions::Stop::GpuIR) {
    llvm::raw_string_ostream os(result.gpuIR);
    module.print(os);
    return result;
  }
  {
    PassManager pm(ctx);
    GpuToNVVMPipelineOptions nvvm;
    options.setNVVMPipelineOptions(toolkit, nvvm);
    buildGpuToNVVMPipeline(pm, nvvm);
    if (failed(pm.run(module)))
      return diagnostics.fail(
          "lowering to NVVM and the LLVM dialect (kimi-gpu-to-nvvm-pipeline)");
  }
  if (options.stopAfter == ModelGpuCodegenOptions::Stop::KernelImages) {
    module.walk([&](mlir::gpu::BinaryOp binary) {
      for (Attribute object : binary.getObjects())
        result.kernelImages.push_back(
            cast<mlir::gpu::ObjectAttr>(object).getObject().getValue().str());
    });
    return result;
  }
  llvm::Expected<std::string> object = emitSharedObject(
      module, options.hostOptLevel,
      options.keepLLVMIR ? &result.llvmIR : nullptr, {kGpuModuleShim});
  if (!object)
    return object.takeError();
  result.object = std::move(*object);
  return result;
}

} // namespace kimi::gpu

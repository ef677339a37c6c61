//===- GpuPipelines.cpp - the GPU model target's later stages -------------===//

#include "lowering/ToGPU/GpuPipelines.h"
#include "lowering/Passes.h"
#include "lowering/ToGPU/GpuSerialize.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUCommon/GPUCommonPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void kimi::gpu::buildGpuKernelsPipeline(
    OpPassManager &pm, const GpuKernelsPipelineOptions &options) {
  // Weights from the table; products to the runtime; loop nests to kernels.
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
  // that delinearise a collapsed index) move into it before outlining: as
  // kernel arguments they were opaque, and every thread of every generic
  // kernel ran 64-bit divisions by run-time values.
  pm.addPass(createGpuLaunchSinkIndexComputationsPass());
  pm.addPass(createGpuKernelOutliningPass());
  pm.addPass(kimi::createKimiGpuMergeKernelModules());
  if (options.gridDependencies)
    pm.addPass(kimi::createKimiGpuGridDependencies());
}

void kimi::gpu::buildGpuToNVVMPipeline(
    OpPassManager &pm, const GpuToNVVMPipelineOptions &options) {
  // As upstream's gpu-lower-to-nvvm-pipeline (the generated kernels use
  // nvgpu and vector ops), except for the host: its memref.allocs call
  // _mlir_memref_to_llvm_alloc, which the runtime serves with device memory
  // (docs/lowering/pipelines.md says why upstream's cannot be used).
  pm.addPass(createConvertNVGPUToNVVMPass());
  pm.addPass(createConvertVectorToSCFPass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertNVVMToLLVMPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  target.optLevel = options.optLevel;
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
  FinalizeMemRefToLLVMConversionPassOptions memref;
  memref.useGenericFunctions = true;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memref));
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createGpuToLLVMConversionPass());
  GpuModuleToBinaryPassOptions binary;
  binary.toolkitPath = options.toolkit.empty() ? std::string(cudaToolkitPath())
                                               : std::string(options.toolkit);
  binary.compilationTarget = options.format;
  pm.addPass(createGpuModuleToBinaryPass(binary));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void kimi::gpu::registerGpuModelPipelines() {
  PassPipelineRegistration<GpuKernelsPipelineOptions>(
      "kimi-gpu-kernels-pipeline",
      "Bufferized memrefs of a GPU model to host code launching the kernels "
      "of one gpu.module (weights through the runtime's table, products as "
      "cuBLASLt calls or GEMV kernels)",
      buildGpuKernelsPipeline);
  PassPipelineRegistration<GpuToNVVMPipelineOptions>(
      "kimi-gpu-to-nvvm-pipeline",
      "A GPU model's kernels to NVVM and a cubin or PTX, its host code to the "
      "LLVM dialect with allocations through the runtime",
      buildGpuToNVVMPipeline);
}

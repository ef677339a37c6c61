//===- Pipelines.cpp - the model lowering pipelines -----------------------===//

#include "lowering/Pipelines.h"
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
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void kimi::buildKimiToLinalgPipeline(OpPassManager &pm,
                                     const KimiToMemRefOptions &options) {
  pm.addPass(createKimiLowerKda());
  KimiLowerToLinalgOptions linalg;
  linalg.sortedExpertsMinTokens = options.sortedExpertsMinTokens;
  pm.addPass(createKimiLowerToLinalg(linalg));
  // Partitioned modules: collectives become calls into the comm shim.
  pm.addPass(createKimiLowerCollectives());
  // Elementwise arith/math on tensors (residual adds) become linalg too.
  pm.addPass(createConvertElementwiseToLinalgPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createKimiExternalizeWeights());
  pm.addPass(createKimiCheckLowered());
}

void kimi::buildKimiToMemRefPipeline(OpPassManager &pm,
                                     const KimiToMemRefOptions &options) {
  buildKimiToLinalgPipeline(pm, options);
  buildLinalgToMemRefPipeline(pm, options);
}

void kimi::buildLinalgToMemRefPipeline(OpPassManager &pm,
                                       const KimiToMemRefOptions &options) {
  if (options.fuseElementwise)
    pm.addPass(createKimiGpuFuseElementwise());
  KimiPrepareBufferizationOptions prepare;
  prepare.splatsAsFills = options.splatsAsFills;
  prepare.emptyPerWriter = options.emptyPerWriter;
  pm.addPass(createKimiPrepareBufferization(prepare));
  pm.addPass(createKimiBufferize());
  bufferization::buildBufferDeallocationPipeline(pm);
  pm.addPass(createConvertBufferizationToMemRefPass());
  pm.addPass(createKimiCopiesAsLinalg());
}

void kimi::buildCpuToLLVMPipeline(OpPassManager &pm) {
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
}

void kimi::registerKimiPipelines() {
  PassPipelineRegistration<KimiToMemRefOptions>(
      "kimi-to-linalg-pipeline",
      "kimi IR after its front pipeline to linalg on tensors, weights as "
      "runtime-filled globals (fails on a kimi op left)",
      buildKimiToLinalgPipeline);
  PassPipelineRegistration<KimiToMemRefOptions>(
      "kimi-to-memref-pipeline",
      "kimi IR after its front pipeline to bufferized memrefs with "
      "ownership-based deallocation, as both model targets lower it",
      buildKimiToMemRefPipeline);
  PassPipelineRegistration<>(
      "kimi-cpu-to-llvm-pipeline",
      "Bufferized memrefs to the LLVM dialect for the host (the CPU target)",
      buildCpuToLLVMPipeline);
}

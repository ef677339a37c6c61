//===- kimi-opt.cpp - the kimi optimizer driver ---------------------------===//
//
// Parses, verifies, transforms and prints IR of the kimi dialect together
// with the upstream dialects a model uses (func, arith, math, tensor) and
// those the lowering produces (linalg, scf, and the gpu, nvvm and vector ops
// of the generated kernels).
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiDialect.h"
#include "lowering/Passes.h"
#include "lowering/Pipelines.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "lowering/ToGPU/GpuPipelines.h"
#include "lowering/ToGPU/ModelGpuCodegen.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "passes/Passes.h"
#include "passes/ShardingModels.h"
#include "tools/common/IrNesting.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#ifndef KIMI_VERSION
#define KIMI_VERSION "unknown"
#endif

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<kimi::KimiDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::tensor::TensorDialect, mlir::linalg::LinalgDialect,
                  mlir::scf::SCFDialect, mlir::memref::MemRefDialect,
                  mlir::gpu::GPUDialect, mlir::LLVM::LLVMDialect,
                  mlir::affine::AffineDialect,
                  mlir::bufferization::BufferizationDialect,
                  mlir::vector::VectorDialect, mlir::NVVM::NVVMDialect>();

  // Generic upstream passes that are useful on kimi IR.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerInlinerPass();
  kimi::registerKimiLoweringPasses();
  // The model pipelines (lowering/Pipelines.h) and what they need to run:
  // the bufferization and deallocation models of the upstream ops.
  kimi::registerKimiPipelines();
  kimi::registerCpuCodegenDialects(registry);
  // The upstream steps around kimi's GPU model passes, for their lit tests.
  mlir::registerConvertLinalgToParallelLoopsPass();
  mlir::registerConvertParallelLoopToGpuPass();
  mlir::registerGpuKernelOutliningPass();
  // The GPU model target's later stages (lowering/ToGPU/GpuPipelines.h),
  // with the NVVM target and serialisation they need.
  kimi::gpu::registerGpuModelPipelines();
  kimi::gpu::registerModelGpuExtensions(registry);

  // kimi's own analyses and transforms (passes/Passes.td).
  kimi::registerKimiPasses();

  // Partitioning over a device grid: the upstream shard dialect and passes,
  // with the sharding rules of the kimi ops.
  kimi::registerKimiShardingModels(registry);
  mlir::shard::registerShardingPropagation();
  mlir::shard::registerPartition();

  llvm::cl::AddExtraVersionPrinter([](llvm::raw_ostream &os) {
    os << "kimi " << KIMI_VERSION
       << " (compiler for Kimi-K3-class models, built on MLIR)\n";
  });
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "kimi optimizer: verifies and transforms kimi IR\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, input, output, registry));
  // The input is read here (stdin too) and measured before the parser
  // sees it: IR nested past kMaxIrNesting would overflow its stack.
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "kimi-opt: " << error << "\n";
    return 1;
  }
  if (std::optional<kimi::IrNestingExcess> deep =
          kimi::findIrNestingExcess(file->getBuffer()))
    return (llvm::errs() << (input == "-" ? "<stdin>" : input) << ":"
                         << deep->line << ":" << deep->column
                         << ": error: " << deep->message() << "\n"),
           1;
  std::unique_ptr<llvm::ToolOutputFile> out = mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "kimi-opt: " << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(out->os(), std::move(file), registry, config)))
    return 1;
  out->keep();
  return 0;
}

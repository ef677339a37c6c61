//===- GpuPipelines.h - the GPU model target's later stages -----*- C++ -*-===//
//
// After kimi-to-memref-pipeline (lowering/Pipelines.h), a GPU model goes
// through two registered pipelines (docs/lowering/pipelines.md):
//
//   kimi-gpu-kernels-pipeline  bufferized memrefs -> a host program that
//                              launches kernels of one gpu.module, weights
//                              read through the runtime's table, matrix
//                              products as cuBLASLt calls or GEMV kernels
//   kimi-gpu-to-nvvm-pipeline  kernels -> NVVM -> a cubin or PTX in a
//                              gpu.binary; the host -> the LLVM dialect with
//                              its allocations through the runtime
//
// compileModelForGpu (ModelGpuCodegen.h) builds both from its options.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_GPUPIPELINES_H
#define KIMI_LOWERING_TOGPU_GPUPIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace kimi::gpu {

struct GpuKernelsPipelineOptions
    : mlir::PassPipelineOptions<GpuKernelsPipelineOptions> {
  Option<bool> gemmCalls{
      *this, "gemm-calls",
      llvm::cl::desc("Matrix products through the runtime's cuBLASLt or the "
                     "GEMV kernel (kimi-gpu-gemm-calls); false: generic "
                     "kernels like every loop nest"),
      llvm::cl::init(true)};
  Option<std::string> matmulPrecision{
      *this, "matmul-precision",
      llvm::cl::desc("kimi-gpu-gemm-calls{precision}: f32 or tf32"),
      llvm::cl::init("f32")};
  Option<bool> bf16WeightProducts{
      *this, "bf16-weight-products",
      llvm::cl::desc("kimi-gpu-gemm-calls{bf16-weight-products}"),
      llvm::cl::init(true)};
  Option<int64_t> gemvMaxM{*this, "gemv-max-m",
                           llvm::cl::desc("kimi-gpu-gemm-calls{gemv-max-m}"),
                           llvm::cl::init(4)};
  Option<int64_t> gemvMaxGroup{
      *this, "gemv-max-group",
      llvm::cl::desc("kimi-gpu-gemm-calls{gemv-max-group}"), llvm::cl::init(8)};
  Option<bool> gemvEpilogues{
      *this, "gemv-epilogues",
      llvm::cl::desc("kimi-gpu-gemm-calls{gemv-epilogues}"),
      llvm::cl::init(true)};
  Option<bool> gemvWeightPrefetch{
      *this, "gemv-weight-prefetch",
      llvm::cl::desc("kimi-gpu-gemm-calls{gemv-weight-prefetch}; only with "
                     "grid-dependencies"),
      llvm::cl::init(true)};
  Option<int64_t> smCount{*this, "sm-count",
                          llvm::cl::desc("Multiprocessors of the target GPU"),
                          llvm::cl::init(132)};
  Option<int64_t> reductionUnroll{
      *this, "reduction-unroll",
      llvm::cl::desc("kimi-gpu-warp-reductions{unroll}"), llvm::cl::init(8)};
  Option<int64_t> blockSize{
      *this, "block-size",
      llvm::cl::desc("kimi-gpu-map-loops{block-size}: threads per block"),
      llvm::cl::init(256)};
  Option<bool> gridDependencies{
      *this, "grid-dependencies",
      llvm::cl::desc("kimi-gpu-grid-dependencies: every kernel waits for its "
                     "predecessor's grid (programmatic dependent launch)"),
      llvm::cl::init(true)};
};

struct GpuToNVVMPipelineOptions
    : mlir::PassPipelineOptions<GpuToNVVMPipelineOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("The GPU"),
                           llvm::cl::init("sm_90a")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features"),
                               llvm::cl::init("+ptx80")};
  Option<int> optLevel{*this, "opt-level",
                       llvm::cl::desc("NVPTX optimisation level"),
                       llvm::cl::init(3)};
  Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("The CUDA toolkit (libdevice, ptxas); empty: found from "
                     "CUDA_HOME or ptxas on PATH"),
      llvm::cl::init("")};
  Option<std::string> format{
      *this, "format",
      llvm::cl::desc("The kernels' image: bin (a cubin, ptxas) or isa (PTX "
                     "the driver compiles)"),
      llvm::cl::init("bin")};
};

/// Bufferized memrefs -> host code launching the kernels of one gpu.module
/// @kimi_kernels.
void buildGpuKernelsPipeline(mlir::OpPassManager &pm,
                             const GpuKernelsPipelineOptions &options);
/// The kernels to NVVM and a binary, the host to the LLVM dialect.
void buildGpuToNVVMPipeline(mlir::OpPassManager &pm,
                            const GpuToNVVMPipelineOptions &options);
/// Registers both pipelines (kimi-opt).
void registerGpuModelPipelines();

} // namespace kimi::gpu

#endif // KIMI_LOWERING_TOGPU_GPUPIPELINES_H

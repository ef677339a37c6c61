//===- ModelGpuCodegen.h - kimi model -> GPU host program + kernels -*- C++ -*-===//
//
// The GPU model target (docs/lowering/gpu-model.md): the same kimi -> linalg
// -> bufferized memref program as the CPU target, with every data-parallel
// loop nest turned into a CUDA kernel and the host side compiled into a
// shared object that launches them through the runtime (docs/runtime-abi.md,
// "GPU models"). Buffers are device memory; weights are read through the
// runtime-filled `kimi_gpu_weights` table.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_MODELGPUCODEGEN_H
#define KIMI_LOWERING_TOGPU_MODELGPUCODEGEN_H

#include "lowering/ToGPU/GpuPipelines.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <string>
#include <vector>

namespace mlir {
class OpPassManager;
}
namespace kimi {
struct KimiToMemRefOptions;
}

namespace kimi::gpu {

struct ModelGpuCodegenOptions {
  /// Passes run on kimi IR first (the decay proof and KDA chunking).
  std::string frontPipeline = "kimi-prove-decay-bounds,kimi-chunk-kda";
  /// Passes added after the front pipeline, before the kernel passes
  /// (kimi-compile --kda-bf16-io adds kimi-kda-bf16-io).
  std::function<void(mlir::OpPassManager &)> frontPasses;
  std::string chip = "sm_90a";
  std::string features = "+ptx80";
  /// NVPTX optimisation level of the kernels; LLVM level of the host code.
  int kernelOptLevel = 3;
  unsigned hostOptLevel = 2;
  /// Threads per block of the data-parallel kernels.
  int64_t blockSize = 256;
  /// Iterations each lane of a few-output warp reduction keeps in flight
  /// (kimi-gpu-warp-reductions{unroll}). A batch-1 decode step of k3-mini
  /// has about 180 one-warp reductions (norms, AttnRes scores over 2,048
  /// values); on the H200 its device time was 5.04 / 4.55 / 4.88 ms with
  /// 8 / 16 / 32, but k3-mini built with 16 failed its comparison with the
  /// CPU target for one seed (and passed for another; docs/perf/model.md),
  /// so 8 stays until more seeds say which.
  int64_t reductionUnroll = 8;
  /// kimi.kda through the generated KDA kernels (kimi-gpu-kda-kernels)
  /// rather than the linalg decomposition. Off by default: the model's
  /// logits with it do not match the CPU target yet (docs/lowering/gpu-model.md).
  bool kdaKernels = false;
  /// kimi.mla and prefill-sized kimi.mla_decode through the generated
  /// flash-style kernel (kimi-gpu-mla-kernels; f16 tensor-core products
  /// inside) rather than the absorbed linalg decomposition.
  bool mlaKernels = false;
  /// With mlaKernels: decode steps' attention through the split-key decode
  /// kernels too (kimi-gpu-mla-kernels{decode-kernels}).
  bool mlaDecodeKernels = true;
  /// The token-wise ops as generated kernels, one launch each
  /// (kimi-gpu-attn-res-kernels, kimi-gpu-norm-kernels,
  /// kimi-gpu-short-conv-kernels, kimi-gpu-router-kernels; f32 like the
  /// linalg decompositions they replace).
  bool tokenwiseKernels = true;
  /// Multiprocessors the KDA launch planning assumes.
  int smCount = 132;
  /// Routed experts over at least this many tokens (prefill steps, batched
  /// decode) are sorted by expert into products batched over experts; fewer
  /// (one-token decode) gather their experts' rows.
  int64_t sortedExpertsMinTokens = 64;
  /// Matrix products through the runtime's cuBLASLt (kimi-gpu-gemm-calls);
  /// false: they become kernels like every other loop nest.
  bool gemmCalls = true;
  /// Elementwise chains fused into their consumers before bufferization
  /// (kimi-gpu-fuse-elementwise): fewer kernels and buffers.
  bool fuseElementwise = true;
  /// Products of at most this many static rows (decode steps) through the
  /// generated GEMV kernel rather than cuBLASLt (kimi-gpu-gemm-calls
  /// {gemv-max-m}); 0: none.
  int64_t gemvMaxM = 4;
  /// GEMV products of one input launched together, at most (kimi-gpu-gemm-
  /// calls{gemv-max-group}); 1: one launch each.
  int64_t gemvMaxGroup = 8;
  /// The elementwise op after a GEMV product (a residual add, a gate's
  /// activation) runs at the GEMV kernel's store (kimi-gpu-gemm-calls
  /// {gemv-epilogues}).
  bool gemvEpilogues = true;
  /// GEMV kernels prefetch their weight rows into L2 before their grid
  /// dependency wait (kimi-gpu-gemm-calls{gemv-weight-prefetch}); only
  /// with gridDependencies.
  bool gemvWeightPrefetch = true;
  /// Matrix products (cuBLASLt): "f32" exact, "tf32" tensor cores.
  std::string matmulPrecision = "f32";
  /// A bf16 weight's cuBLASLt product rounds the f32 activations to bf16
  /// (bf16 tensor cores) instead of widening the weight, and the MXFP4
  /// sorted expert products round their rows to bf16 (else three terms).
  bool bf16WeightProducts = true;
  /// Every kernel begins by waiting for its predecessor's grid
  /// (kimi-gpu-grid-dependencies), so that the runtime may launch it with
  /// programmatic dependent launch and overlap its launch with the tail of
  /// the kernel before it. sm_90 and later.
  bool gridDependencies = true;
  /// Embed a cubin (ptxas) rather than PTX that the driver JIT-compiles.
  bool cubin = true;
  /// Where the compilation stops (kimi-compile --emit).
  enum class Stop {
    Object,       // the host shared object with the kernels embedded
    GpuIR,        // the module after kimi-gpu-kernels-pipeline
    KernelImages, // the kernel modules' images (cubin with `cubin`, else PTX)
  };
  Stop stopAfter = Stop::Object;
  /// Keep the host program's optimised LLVM IR (Stop::Object).
  bool keepLLVMIR = false;

  /// Sets the typed options of the two registered pipelines these options
  /// build (GpuPipelines.h).
  void setKernelsPipelineOptions(GpuKernelsPipelineOptions &o) const;
  void setNVVMPipelineOptions(const std::string &toolkit,
                              GpuToNVVMPipelineOptions &o) const;
};

/// What compileModelForGpu produced, up to options.stopAfter.
struct ModelGpuCodegenResult {
  /// The host shared object with the kernels embedded (Stop::Object).
  std::string object;
  /// The module after kimi-gpu-kernels-pipeline (Stop::GpuIR).
  std::string gpuIR;
  /// Each kernel module's image (Stop::KernelImages).
  std::vector<std::string> kernelImages;
  /// The host program's optimised LLVM IR (keepLLVMIR).
  std::string llvmIR;
  /// Every kernel waits for its predecessor's grid (every gpu.module
  /// carries kimi.waits_grid_dependencies): the artifact records it, and
  /// the runtime launches with programmatic dependent launch.
  bool waitsGridDependencies = false;
};

/// Lowers `module` in place through kimi-to-memref-pipeline and the two GPU
/// pipelines, and returns what options.stopAfter asks for. Needs a CUDA
/// toolkit for libdevice (and ptxas for a cubin); errors name the failing
/// step and carry its diagnostics.
llvm::Expected<ModelGpuCodegenResult>
compileModelForGpu(mlir::ModuleOp module, const ModelGpuCodegenOptions &options);

/// options.frontPasses, then the generated kernels' passes that run after
/// the front pipeline (KDA,
/// MLA, AttnRes, short convolutions, norms, router, routed experts, as
/// `options` enables them), with their typed options.
void addGpuKernelPasses(mlir::OpPassManager &pm,
                        const ModelGpuCodegenOptions &options);

/// The GPU target's kimi-to-memref-pipeline options.
void setGpuMemRefOptions(const ModelGpuCodegenOptions &options,
                         KimiToMemRefOptions &memref);

/// Registers what compileModelForGpu needs beyond the CPU pipeline: the GPU
/// serialisation dialects and translations, and the memory effects of
/// gpu.launch_func (for deallocation around the KDA kernels).
void registerModelGpuExtensions(mlir::DialectRegistry &registry);

} // namespace kimi::gpu

#endif

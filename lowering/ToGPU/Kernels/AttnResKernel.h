//===- AttnResKernel.h - fused AttnRes (+ RMSNorm) as a GPU entry -*- C++ -*-===//
#ifndef KIMI_LOWERING_TOGPU_ATTNRESKERNEL_H
#define KIMI_LOWERING_TOGPU_ATTNRESKERNEL_H

#include "lowering/ToGPU/Rewrites/KdaGpuProgram.h"

namespace kimi::gpu {

/// What one generated AttnRes kernel is specialised on.
struct AttnResKernelSpec {
  int64_t sources = 0;
  /// D, the hidden width.
  int64_t width = 0;
  /// Element types of the sources (and outputs), the pseudo-query and the
  /// key norm's weight.
  mlir::Type act, query, norm;
  double eps = 1e-5;
  /// The following kimi.rms_norm, fused when `normWeight` is set.
  mlir::Type normWeight;
  double normEps = 1e-5;
  /// Whether the mix itself is stored (false only with the fused norm).
  bool writeMix = true;
  /// Tokens, when static: the buffers' sizes (else memref<?x...>). The
  /// kernel's indexing does not depend on it; the grid does.
  int64_t tokens = mlir::ShapedType::kDynamic;
};

inline constexpr int64_t kAttnResThreads = 256;

/// Checks what the generator supports; `why` names the limit at fault.
llvm::LogicalResult verifyAttnResKernelSpec(const AttnResKernelSpec &spec,
                                            std::string &why);

/// Emits `gpu.func @name` into `module`: grid (tokens, 1, 1), block 256,
/// one block per token. Arguments (flat memrefs): source0..N-1, query,
/// norm, [mix when writeMix], [norm_weight, norm_out when fused].
mlir::gpu::GPUFuncOp emitAttnResKernel(mlir::OpBuilder &b, mlir::Location loc,
                                       mlir::gpu::GPUModuleOp module,
                                       llvm::StringRef name,
                                       const AttnResKernelSpec &spec);

/// Plans `op` (and `norm`, the kimi.rms_norm of its result, fused when
/// non-null) as GPU entry `name`: one kernel, one block per token.
/// Buffers: source0..N-1, query, norm (inputs), out (the mix), and with the
/// norm: norm_weight (input), norm_out.
llvm::FailureOr<GpuEntryPlan> planAttnResEntry(AttnResOp op, RmsNormOp norm,
                                               llvm::StringRef name);

} // namespace kimi::gpu

#endif

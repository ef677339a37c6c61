//===- AttnResKernel.h - fused AttnRes (+ RMSNorm) as a GPU entry -*- C++ -*-===//
#ifndef KIMI_LOWERING_TOGPU_ATTNRESKERNEL_H
#define KIMI_LOWERING_TOGPU_ATTNRESKERNEL_H

#include "lowering/ToGPU/KdaGpuProgram.h"

namespace kimi::gpu {

/// Plans `op` (and `norm`, the kimi.rms_norm of its result, fused when
/// non-null) as GPU entry `name`: one kernel, one block per token.
/// Buffers: source0..N-1, query, norm (inputs), out (the mix), and with the
/// norm: norm_weight (input), norm_out.
llvm::FailureOr<GpuEntryPlan> planAttnResEntry(AttnResOp op, RmsNormOp norm,
                                               llvm::StringRef name);

} // namespace kimi::gpu

#endif

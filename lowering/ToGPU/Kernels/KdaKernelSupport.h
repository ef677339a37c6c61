//===- KdaKernelSupport.h - pieces shared by the KDA generators -*- C++ -*-===//
//
// What the KDA kernels (KdaPrepKernel, KdaRecurrenceKernel, KdaDecodeKernel)
// share beyond KernelEmitter.h: sequence bounds and the fused gate.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_KDAKERNELSUPPORT_H
#define KIMI_LOWERING_TOGPU_KDAKERNELSUPPORT_H

#include "lowering/ToGPU/Kernels/KdaKernels.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

namespace kimi::gpu {

/// Where sequence `seq` lies (index values): first token, length, number of
/// 16-token chunks, and the chunk slot of its first chunk.
struct SequenceChunks {
  mlir::Value start, length, chunks, chunkBase;
};
SequenceChunks locateSequence(KernelEmitter &e, mlir::Value cuSeqlens,
                              int64_t sequences, mlir::Value seq);

/// g (f32) of a fused kimi.kda_gate from z (f32) and the head's
/// exp(a_log) and dt_bias element, exactly the formulas of kimi.kda_gate.
mlir::Value emitGate(KernelEmitter &e, const KdaGateFusion &gate, mlir::Value z,
                     mlir::Value rate, mlir::Value dtBias);

} // namespace kimi::gpu

#endif

//===- KdaKernelSupport.h - pieces shared by the KDA generators -*- C++ -*-===//

#ifndef KIMI_LOWERING_TOGPU_KDAKERNELSUPPORT_H
#define KIMI_LOWERING_TOGPU_KDAKERNELSUPPORT_H

#include "lowering/ToGPU/KdaKernels.h"
#include "lowering/ToGPU/KernelEmitter.h"

namespace kimi::gpu {

/// A new kernel and an emitter positioned before its `gpu.return`.
struct GPUFuncOpAndEmitter {
  GPUFuncOpAndEmitter(mlir::OpBuilder &b, mlir::Location loc,
                      mlir::gpu::GPUModuleOp module, llvm::StringRef name,
                      llvm::ArrayRef<mlir::Type> args,
                      std::array<int32_t, 3> block);
  mlir::gpu::GPUFuncOp func;
  KernelEmitter e;
};

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

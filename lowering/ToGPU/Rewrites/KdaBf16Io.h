//===- KdaBf16Io.h - kimi.kda with the Hopper kernels' I/O types -*- C++ -*-===//
//
// The generated prefill kernels read q, k, v and beta in bf16 and write a
// bf16 output (f32 math inside). Models compute in f32, so the kernels'
// rounding of those tensors is part of their numerics: kimi-gpu-kda-kernels
// converts around each kernel call, and kimi-kda-bf16-io applies the same
// rounding to a model on any target (the CPU reference of a GPU model).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_KDABF16IO_H
#define KIMI_LOWERING_TOGPU_KDABF16IO_H

#include "dialects/Kimi/KimiOps.h"
#include "mlir/IR/Builders.h"

namespace kimi::gpu {

/// The element type of q/k/v/beta/output in the kernels for `op`: bf16 for
/// a prefill (more than one token, or cu_seqlens) with f32 activations,
/// otherwise the op's own (decode reads f32).
mlir::Type kdaKernelActivationType(KdaOp op);

/// `t` converted to element type `element` (arith.truncf / extf).
mlir::Value convertElementType(mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Value t, mlir::Type element);

/// A copy of `op`, built at `b`'s insertion point, whose q, k, v and beta
/// are converted to `act` and whose output has element type `act`. The new
/// ops (conversions, then the copy) are appended to `created`.
KdaOp cloneKdaWithActivations(mlir::OpBuilder &b, KdaOp op, mlir::Type act,
                              llvm::SmallVectorImpl<mlir::Operation *> &created);

} // namespace kimi::gpu

#endif // KIMI_LOWERING_TOGPU_KDABF16IO_H

//===- KernelLaunchSupport.h - tensors in and out of generated kernels -*- C++ -*-===//
//
// The generated kernels take flat (1-D) buffers. The passes that launch
// them on the model's tensors (kimi-gpu-kda-kernels, kimi-gpu-mla-kernels)
// run before bufferization: an operand is collapsed to 1-D and viewed as a
// buffer, an output is a fresh 1-D allocation viewed back as a tensor of
// the result's shape.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_KERNELLAUNCHSUPPORT_H
#define KIMI_LOWERING_TOGPU_KERNELLAUNCHSUPPORT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace kimi::gpu {

/// `tensor` collapsed to 1-D (sizes static or dynamic), as a read-only
/// `bufferization.to_buffer`.
mlir::Value flatInputBuffer(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Value tensor);

/// A `memref.alloc` of the product of `sizes` elements of `type`.
mlir::Value allocFlatBuffer(mlir::OpBuilder &b, mlir::Location loc,
                            llvm::ArrayRef<mlir::OpFoldResult> sizes,
                            mlir::Type type);

/// The 1-D `buffer` as a tensor of `type` with sizes `sizes`
/// (`bufferization.to_tensor`, restrict and writable, then expanded).
mlir::Value tensorOfFlatBuffer(mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Value buffer, mlir::RankedTensorType type,
                               llvm::ArrayRef<mlir::OpFoldResult> sizes);

} // namespace kimi::gpu

#endif

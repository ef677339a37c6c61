//===- KernelLaunchSupport.h - tensors in and out of generated kernels -*- C++ -*-===//
//
// The generated kernels take flat (1-D) buffers. The passes that launch
// them on the model's tensors (kimi-gpu-kda-kernels, kimi-gpu-mla-kernels)
// run before bufferization: an operand is collapsed to 1-D and viewed as a
// buffer, an output is a fresh 1-D allocation viewed back as a tensor of
// the result's shape. The kernels themselves live in one gpu.module per
// pass, shared by the ops of equal specialisation (GeneratedKernels).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_KERNELLAUNCHSUPPORT_H
#define KIMI_LOWERING_TOGPU_KERNELLAUNCHSUPPORT_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringMap.h"

#include <string>

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

/// The number of rows of a tensor of sizes `sizes`: the product of all
/// sizes but the last, folded to a constant when they are static.
mlir::Value rowCount(mlir::OpBuilder &b, mlir::Location loc,
                     llvm::ArrayRef<mlir::OpFoldResult> sizes);

/// `buffer` (1-D) as memref<?xT>: the type of the generated kernels'
/// per-token arguments, so that one kernel serves every length.
mlir::Value asDynamicBuffer(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Value buffer);

/// The generated kernels of one pass, in one `gpu.module` of `moduleName`
/// created on first use (and the container-module attribute with it), one
/// kernel per specialisation key.
class GeneratedKernels {
public:
  GeneratedKernels(mlir::ModuleOp module, llvm::StringRef moduleName)
      : module(module), moduleName(moduleName.str()) {}

  /// The kernel of `key`, emitted by `emit` into the module the first time.
  mlir::gpu::GPUFuncOp
  get(llvm::StringRef key,
      llvm::function_ref<mlir::gpu::GPUFuncOp(mlir::OpBuilder &,
                                              mlir::gpu::GPUModuleOp)>
          emit);

  size_t size() const { return kernels.size(); }

private:
  mlir::ModuleOp module;
  std::string moduleName;
  mlir::gpu::GPUModuleOp kernelModule;
  llvm::StringMap<mlir::gpu::GPUFuncOp> kernels;
};

} // namespace kimi::gpu

#endif

//===- Passes.h - lowering passes out of the kimi dialect -------*- C++ -*-===//

#ifndef KIMI_LOWERING_PASSES_H
#define KIMI_LOWERING_PASSES_H

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace kimi {

/// The function through which host code reads one i32 of a buffer that it
/// needs to size what comes next (the largest expert count of token-sorted
/// experts): `func.func private @kimi_host_read_i32(memref<i32>) -> i32`,
/// defined by kimi-lower-to-linalg as a plain load (a call, so that no
/// canonicalisation turns it into a tensor read). The CPU target runs it as
/// it is; on the GPU target, whose buffers are device memory,
/// kimi-gpu-serial-kernels makes its body a synchronising read through the
/// runtime (`kimi_gpu_read_i32`).
constexpr llvm::StringLiteral kHostReadFn = "kimi_host_read_i32";

/// The runtime-filled table of weight pointers of a GPU model
/// (kimi-gpu-weight-table): `llvm.mlir.global @kimi_gpu_weights`, never
/// written by an entry.
constexpr llvm::StringLiteral kGpuWeightTable = "kimi_gpu_weights";

/// Unit attribute that kimi-gpu-grid-dependencies puts on a `gpu.module`
/// whose kernels all begin with `griddepcontrol.wait`: the runtime may
/// launch them with programmatic dependent launch.
constexpr llvm::StringLiteral kWaitsGridDependenciesAttr =
    "kimi.waits_grid_dependencies";

/// Name of the exported global holding the weight at `slot` (the position of
/// its `kimi.weight` in the module): kimi-externalize-weights names them so,
/// and the artifact's weight manifest names the same symbols.
std::string weightGlobalName(size_t slot);

#define GEN_PASS_DECL
#include "lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lowering/Passes.h.inc"

} // namespace kimi

#endif // KIMI_LOWERING_PASSES_H

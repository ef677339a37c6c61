//===- GemmContraction.h - linalg contractions as products -----*- C++ -*-===//
//
// What kimi-gpu-gemm-calls reads off a linalg op on buffers before it
// decides how the product runs (cuBLASLt or the GEMV kernel): its m, n, k
// and batch loops, the zero fill it accumulates onto, and the buffers it
// may alias.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_GEMMCONTRACTION_H
#define KIMI_LOWERING_TOGPU_GEMMCONTRACTION_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <optional>

namespace kimi::gpu {

/// The loops of a product C[m, n] (+)= A[m, k] B[k, n], with an optional
/// batch loop.
struct Contraction {
  unsigned m, n, k;
  std::optional<unsigned> batch;
};

/// `op` as a product cuBLASLt or the GEMV kernel can run: a contraction on
/// buffers with one m, n and k loop (and at most one batch loop; unit loops
/// dropped), f32 products of f32 or bf16 inputs, and a unit stride along
/// one dimension of every matrix.
std::optional<Contraction> asGemm(mlir::linalg::LinalgOp op);

/// Whether operand `v` with indexing `map` has a statically unit-stride
/// dimension among the loop dims `dims` (cuBLASLt needs one per matrix).
bool hasUnitStrideAmong(mlir::Value v, mlir::AffineMap map,
                        llvm::ArrayRef<unsigned> dims);

/// The buffer `buffer` is a view of (through view-like ops).
mlir::Value viewRoot(mlir::Value buffer);

/// Whether a root buffer certainly is not (and does not alias) the fresh
/// allocation `alloc`: another allocation, a function argument, or a weight
/// (a descriptor the weight table built from a pointer).
bool distinctFrom(mlir::Value root, mlir::Value alloc);

/// Whether `op` certainly leaves the allocation `alloc` alone: a linalg op
/// on buffers or a kernel launch (every buffer it touches is an operand)
/// none of whose buffers may be a view of `alloc`.
bool leavesAllocation(mlir::Operation *op, mlir::Value alloc);

/// The `linalg.fill` of 0.0 into `out` that the product `op` accumulates
/// onto, or null (see GemmContraction.cpp).
mlir::linalg::FillOp zeroFillOf(mlir::Operation *op, mlir::Value out);

/// Whether every loop of `op` is parallel.
bool allParallel(mlir::linalg::LinalgOp op);

} // namespace kimi::gpu

#endif

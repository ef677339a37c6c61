//===- GemvKernel.h - products of a few rows, read at HBM speed -*- C++ -*-===//
//
// The generated kernel behind kimi-gpu-gemm-calls{gemv-max-m}: C = A B^T
// (or C += A B^T) for a few rows of A, as in a decode step's projections,
// where the whole cost is reading B once. cuBLASLt's kernels for m = 1 read
// a 2048 x 2048 f32 weight at about 1.3 TB/s on the H200; this one keeps
// 16-byte loads of several weight rows in flight per lane.
//
// Buffers (f32, unit stride along k and n, rows 16-byte aligned):
//   a [M, K] row stride lda;  b [N, K] row stride ldb;  c [M, N] row stride ldc
// Grid: ceil(N / (4 * rowsPerWarp)) blocks of 128 threads; each warp owns
// `rowsPerWarp` rows of B and all M rows of A, lanes split k in 16-byte
// pieces, and a butterfly gives each sum.
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_GEMVKERNEL_H
#define KIMI_LOWERING_TOGPU_GEMVKERNEL_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kimi::gpu {

struct GemvKernelSpec {
  int64_t m = 1, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t rowsPerWarp = 2;
  /// C += A B^T (the product accumulates onto C); else C = A B^T.
  bool accumulate = false;

  /// A key naming the specialisation (kernels are shared by equal specs).
  std::string key() const;
};

/// Several products that read the same A (a decode step's projections of
/// one activation: q, k, v, gates) as one launch: product p owns a range of
/// blocks, so the group reads A once per block as before and costs one
/// launch instead of one per product. All share m, k, lda and rowsPerWarp.
struct GemvGroupSpec {
  std::vector<GemvKernelSpec> products;

  /// A single product's key, or the products' keys joined.
  std::string key() const;
};

inline constexpr int64_t kGemvThreads = 128;
inline constexpr int64_t kGemvWarps = kGemvThreads / 32;

/// Blocks of the launch grid (of one product; of a group, the sum).
int64_t gemvBlocks(const GemvKernelSpec &spec);
int64_t gemvBlocks(const GemvGroupSpec &group);

/// Checks what the generator supports; `why` names the field at fault.
llvm::LogicalResult verifyGemvKernelSpec(const GemvKernelSpec &spec,
                                         std::string &why);
/// Each product, and that they share m, k, lda and rowsPerWarp (1..8
/// products).
llvm::LogicalResult verifyGemvGroupSpec(const GemvGroupSpec &group,
                                        std::string &why);

/// The argument type of each buffer: memref<?xf32, strided<[1], offset: ?>>.
mlir::MemRefType gemvBufferType(mlir::MLIRContext *ctx);

/// Emits `gpu.func @name(a, b0, c0, b1, c1, ...)` into `module`.
mlir::gpu::GPUFuncOp emitGemvKernel(mlir::OpBuilder &b, mlir::Location loc,
                                    mlir::gpu::GPUModuleOp module,
                                    llvm::StringRef name,
                                    const GemvGroupSpec &group);

} // namespace kimi::gpu

#endif

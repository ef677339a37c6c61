//===- GemvKernel.h - products of a few rows, read at HBM speed -*- C++ -*-===//
//
// The generated kernel behind kimi-gpu-gemm-calls{gemv-max-m}: C = A B^T
// (or C += A B^T) for a few rows of A, as in a decode step's projections,
// where the whole cost is reading B once. cuBLASLt's kernels for m = 1 read
// a 2048 x 2048 f32 weight at about 1.3 TB/s on the H200; this one keeps
// 16-byte loads of several weight rows in flight per lane.
//
// Buffers (f32 or bf16 A and B, f32 C; unit stride along k and n, rows
// aligned to four elements):
//   a [M, K] row stride lda;  b [N, K] row stride ldb;  c [M, N] row stride ldc
// Grid: ceil(N / (4 * rowsPerWarp)) blocks of 128 threads; each warp owns
// `rowsPerWarp` rows of B and all M rows of A, lanes split k in 16-byte
// pieces, and a butterfly gives each sum.
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_GEMVKERNEL_H
#define KIMI_LOWERING_TOGPU_GEMVKERNEL_H

#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kimi::gpu {

/// An elementwise function of a product's sums, applied before the store:
/// the body of the linalg.generic that consumed the product's output (a
/// residual add, a gate's sigmoid, SiTU of a gate and up pair), fused by
/// kimi-gpu-gemm-calls. Its value at output (m, n) is stored to the `out`
/// buffer at (m, n); each block argument of `body` reads one of the
/// product's sums or an extra buffer at the same (m, n).
struct GemvEpilogue {
  /// Values of `args`: the sum of weight 0 or 1 (after accumulation onto
  /// C), a block argument the body does not use; i >= 0: extra buffer i.
  static constexpr int64_t kSum0 = -1, kSum1 = -2, kUnused = -3;
  /// The generic's body (valid while the pass runs). Values it uses from
  /// outside are arith.constant ops, cloned into the kernel.
  mlir::Block *body = nullptr;
  /// What each block argument of `body` reads.
  llvm::SmallVector<int64_t> args;
  /// Row stride (over m) and batch stride of the output and of each extra
  /// buffer.
  int64_t ldOut = 0, batchOut = 0;
  llvm::SmallVector<int64_t> ldExtra, batchExtra;
  /// Element types of the output and of each extra buffer (f32 or bf16:
  /// with bf16 activations the op rounds the sums to bf16 and may add a
  /// bf16 residual); the body converts, the kernel loads and stores them
  /// as they are.
  mlir::Type outType;
  llvm::SmallVector<mlir::Type> extraTypes;
  /// Weight j's sums are stored to its C as well (something reads C later).
  bool keepSum[2] = {false, false};
  /// The body and bindings as canonical text: equal texts, equal kernels.
  std::string text;
};

struct GemvKernelSpec {
  int64_t m = 1, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t rowsPerWarp = 2;
  /// B's element type: f32, or bf16 (read at 2 bytes, widened in
  /// registers; C stays f32).
  bool bf16Weights = false;
  /// A's element type: f32, or bf16 (bf16 activations, widened in
  /// registers like a bf16 weight). Shared by a group's products.
  bool bf16Activations = false;
  /// C += A B^T (the product accumulates onto C); else C = A B^T.
  bool accumulate = false;
  /// Weights read against A (1, or 2: a pair such as an MLP's gate and up,
  /// whose row n each warp computes together for the epilogue to combine).
  /// Both have ldb, both outputs ldc.
  int64_t weights = 1;
  /// With weights == 2 and k1 > 0, weight 1 reads its own vector A1 [M,
  /// k1] (row stride lda1; B1 [N, k1] row stride ldb1) instead of A: two
  /// products of one output shape whose sums one epilogue adds (a layer's
  /// routed output projected up, plus the shared experts' down product),
  /// computed by the same warps in one launch. A1 has A's element type.
  int64_t k1 = 0, lda1 = 0, ldb1 = 0;
  /// Independent products of these sizes (attention's per-head products
  /// against one weight slice each): product i reads A, B and C at
  /// i * batchA, i * batchB and i * batchC (elements); its blocks follow
  /// product i - 1's.
  int64_t batch = 1, batchA = 0, batchB = 0, batchC = 0;
  std::optional<GemvEpilogue> epilogue;

  /// A key naming the specialisation (kernels are shared by equal specs;
  /// an epilogue adds a hash of its text).
  std::string key() const;
  /// The kernel's buffer arguments for this product: b0, c0, [b1, c1],
  /// then with an epilogue out and the extra buffers, then with k1 > 0 A1.
  int64_t bufferArgs() const;
};

/// Several products that read the same A (a decode step's projections of
/// one activation: q, k, v, gates) as one launch: product p owns a range of
/// blocks, so the group reads A once per block as before and costs one
/// launch instead of one per product. All share m, k, lda and rowsPerWarp.
struct GemvGroupSpec {
  std::vector<GemvKernelSpec> products;
  /// Warps that share each group of rows, each reading a 1 / kSplit share
  /// of k (1, 2 or 4); shared memory adds their sums. Splitting gives a
  /// product of few rows the warps it needs to keep HBM busy.
  int64_t kSplit = 1;
  /// Before its grid-dependency wait, each block asks for its weight rows
  /// (contiguous bf16 or f32 rows of a product without a batch) to be
  /// brought into L2: the weights do not change during a step, so they
  /// stream while the kernels before this one finish, which with
  /// programmatic dependent launch run beside its waiting blocks. The
  /// kernel then holds its own `griddepcontrol.wait`.
  bool prefetchWeights = false;

  /// A single product's key, or the products' keys joined.
  std::string key() const;
  /// The key with each epilogue's whole text: what GeneratedKernels shares
  /// kernels by (a hash in the name cannot make two epilogues one kernel).
  std::string identity() const;
};

inline constexpr int64_t kGemvThreads = 128;

inline constexpr int64_t kGemvWarps = kGemvThreads / 32;

/// Blocks of the launch grid (of one product with `kSplit`; of a group,
/// the sum).
int64_t gemvBlocks(const GemvKernelSpec &spec, int64_t kSplit = 1);
int64_t gemvBlocks(const GemvGroupSpec &group);

/// The k split for products of `rows` rows in all, of length k, with
/// `rowsPerWarp`: the largest of 4 and 2 that keeps the launch within
/// `targetWarps` warps and each warp's share of k whole 128-wide chunks,
/// else 1.
int64_t chooseGemvKSplit(int64_t rows, int64_t k, int64_t rowsPerWarp,
                         int64_t targetWarps);

/// Checks what the generator supports; `why` names the field at fault.
llvm::LogicalResult verifyGemvKernelSpec(const GemvKernelSpec &spec,
                                         std::string &why);
/// Each product, that they share m, k, lda and rowsPerWarp (1..8
/// products), and the k split.
llvm::LogicalResult verifyGemvGroupSpec(const GemvGroupSpec &group,
                                        std::string &why);

/// The argument type of a buffer: memref<?xT, strided<[1], offset: ?>>,
/// T = `element` (f32 when null; weights may be bf16).
mlir::MemRefType gemvBufferType(mlir::MLIRContext *ctx,
                                mlir::Type element = {});

/// One dot product of a warp's share: `buffer[base + k]` times vector
/// `vector` of the list, for k in [0, K). With `scales`, the row is MXFP4:
/// `buffer` holds the packed e2m1 codes (i8, two a byte, the low nibble the
/// even element) and `scales` the E8M0 byte of each 32 values; element k of
/// the row is nibble (base + k) of `buffer` times 2^(scales[(base + k) / 32]
/// - 127) (byte 0: 2^-127). `base` still counts values.
struct WarpDotRow {
  mlir::Value buffer, base;
  unsigned vector = 0;
  mlir::Value scales = {};
};
/// A vector the rows multiply: `buffer[base + k]`.
struct WarpDotVector {
  mlir::Value buffer, base;
};

/// The core of the GEMV-like kernels (f32 buffers of type gemvBufferType,
/// bases multiples of 4): lane l reads the 16-byte pieces k = 128 c + 4 l of
/// every row and vector, `group` chunks c unrolled so that all their loads
/// are in flight before the FMAs that use them; the last chunk of a ragged
/// K is masked. A row that repeats another's buffer and base is loaded once.
/// Returns each row's per-lane partial sums (vector<4xf32>).
///
/// Eight MXFP4 values as f32 (vector<8xf32>): `word` (i32) holds their
/// codes, value i in bits 4i..4i+3, and `scale` (i32) their block's E8M0
/// byte. Exact, as the CPU's decode (Mxfp4Decode.h), except past the f32
/// range.
mlir::Value decodeMxfp4Word(KernelEmitter &e, mlir::Value word,
                            mlir::Value scale);

/// MXFP4 rows (all rows or none; K and the bases multiples of 32): lane l
/// reads the 8 values k = 256 c + 8 l, one 4-byte word of codes and the
/// block's scale byte, decodes them in registers (exactly: the code as f32
/// bits, times 2^126, times the scale) and returns vector<8xf32> partials.
llvm::SmallVector<mlir::Value>
emitWarpDotPartials(KernelEmitter &e, llvm::ArrayRef<WarpDotVector> vectors,
                    llvm::ArrayRef<WarpDotRow> rows, int64_t K, int64_t group);

/// The sum over the warp of a lane's value (a vector is reduced first):
/// a butterfly, so every lane gets the total.
mlir::Value emitWarpTotal(KernelEmitter &e, mlir::Value partial);

/// Emits `gpu.func @name(a, <product 0's buffers>, <product 1's>, ...)`
/// into `module` (GemvKernelSpec::bufferArgs).
mlir::gpu::GPUFuncOp emitGemvKernel(mlir::OpBuilder &b, mlir::Location loc,
                                    mlir::gpu::GPUModuleOp module,
                                    llvm::StringRef name,
                                    const GemvGroupSpec &group);

} // namespace kimi::gpu

#endif

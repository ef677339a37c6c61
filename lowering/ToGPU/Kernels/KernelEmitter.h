//===- KernelEmitter.h - building gpu.func bodies from C++ -------*- C++ -*-===//
//
// A thin layer over OpBuilder for the kernel generators: index arithmetic,
// thread coordinates, shared-memory buffers, and the warp-level tensor-core
// primitives of sm_80+ (`ldmatrix`, `mma.sync m16n8k16` on bf16) expressed
// with the upstream `nvvm` ops. Everything the generators emit is upstream
// MLIR (gpu, memref, vector, scf, arith, math, nvgpu, nvvm); the emitter only
// saves them from spelling out the same few op sequences many times.
//
// Why nvvm and not nvgpu for the tensor-core ops: in MLIR 22
// `nvgpu.mma.sync` rejects bf16 operands ("failed to deduce operand PTX
// types"), and 2-D vector bitcasts of `nvgpu.ldmatrix` results do not lower.
// `nvvm.ldmatrix` and `nvvm.mma.sync` take the fragments as packed i32 and
// lower directly to `ldmatrix.sync.aligned` / `mma.sync.aligned ... bf16`.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_KERNELEMITTER_H
#define KIMI_LOWERING_TOGPU_KERNELEMITTER_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <array>
#include <string>

namespace kimi::gpu {

/// The four f32 accumulators a lane holds of an m16n8 tile: [0], [1] are
/// row `lane/4`, columns `2*(lane%4)` and `+1`; [2], [3] the same columns of
/// row `lane/4 + 8`.
using Acc = std::array<mlir::Value, 4>;
/// An A operand (m16 x k16, bf16) as four packed i32 registers.
using FragA = std::array<mlir::Value, 4>;
/// A B operand (k16 x n8, bf16) as two packed i32 registers.
using FragB = std::array<mlir::Value, 2>;

class KernelEmitter {
public:
  KernelEmitter(mlir::OpBuilder &b, mlir::Location loc) : b(b), loc(loc) {}

  mlir::OpBuilder &b;
  mlir::Location loc;

  // Constants.
  mlir::Value idx(int64_t v);
  mlir::Value i32(int64_t v);
  mlir::Value f32(double v);

  // Index / integer arithmetic (operands of the same type).
  mlir::Value add(mlir::Value a, mlir::Value c);
  mlir::Value sub(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, mlir::Value c);
  mlir::Value divu(mlir::Value a, mlir::Value c);
  mlir::Value remu(mlir::Value a, mlir::Value c);
  mlir::Value minu(mlir::Value a, mlir::Value c);
  mlir::Value maxs(mlir::Value a, mlir::Value c);
  mlir::Value add(mlir::Value a, int64_t c) { return add(a, constLike(a, c)); }
  mlir::Value mul(mlir::Value a, int64_t c) { return mul(a, constLike(a, c)); }
  mlir::Value ult(mlir::Value a, mlir::Value c);
  mlir::Value ule(mlir::Value a, mlir::Value c);
  mlir::Value eq(mlir::Value a, mlir::Value c);
  mlir::Value andI(mlir::Value a, mlir::Value c);
  mlir::Value select(mlir::Value cond, mlir::Value t, mlir::Value f);
  mlir::Value toI32(mlir::Value index);
  mlir::Value toIndex(mlir::Value integer);

  // Float arithmetic (f32).
  mlir::Value fadd(mlir::Value a, mlir::Value c);
  mlir::Value fsub(mlir::Value a, mlir::Value c);
  mlir::Value fmul(mlir::Value a, mlir::Value c);
  mlir::Value fneg(mlir::Value a);
  /// a * c + d rounded once (math.fma: PTX fma.rn.f32). Separate fmul and
  /// fadd stay separate: without contraction flags LLVM emits mul.rn and
  /// add.rn, which ptxas does not fuse.
  mlir::Value fma(mlir::Value a, mlir::Value c, mlir::Value d);
  mlir::Value exp(mlir::Value a);
  /// exp through the SFU's ex2.approx (relative error ~2^-22): for values
  /// headed for bf16 where a libdevice expf's extra accuracy is invisible.
  mlir::Value fastExp(mlir::Value a);
  /// rcp.approx.ftz.f32 (about 1 ulp).
  mlir::Value fastRcp(mlir::Value a);
  /// 1 / (1 + e^-a) through fastExp and fastRcp: relative error below
  /// 2^-17 (2^-18 at worst in an f32 emulation over |a| < 80; past -88 the
  /// result flushes to 0).
  mlir::Value fastSigmoid(mlir::Value a);
  /// tanh through fastExp and fastRcp: 1 - 2 / (e^2a + 1), or for |a| <
  /// 1/16, where that form cancels, a (1 - a^2/3 + 2a^4/15); relative
  /// error below 2^-17 everywhere (2^-19.2 at worst in an f32 emulation,
  /// at |a| = 1/16; libdevice's tanhf is some 25 instructions, this 2 SFU
  /// operations and a few FMAs).
  mlir::Value fastTanh(mlir::Value a);
  mlir::Value log1p(mlir::Value a);
  mlir::Value fmax(mlir::Value a, mlir::Value c);
  mlir::Value fabs(mlir::Value a);
  mlir::Value fdiv(mlir::Value a, mlir::Value c);
  /// Extends bf16/f16 to f32 (identity on f32).
  mlir::Value toF32(mlir::Value v);
  /// Truncates f32 to `type` (identity when it is f32).
  mlir::Value fromF32(mlir::Value v, mlir::Type type);

  // Thread coordinates (index typed).
  mlir::Value threadId();
  mlir::Value blockId(mlir::gpu::Dimension dim);
  mlir::Value laneId();
  /// `gpu.shuffle xor` over the 32 lanes: the value of lane (lane ^ offset).
  mlir::Value shuffleXor(mlir::Value v, int32_t offset);

  /// A statically sized shared-memory (address space 3) buffer of
  /// `elements` values of `type`, declared as a `memref.global` in
  /// `module` and fetched with `memref.get_global`.
  mlir::Value sharedBuffer(mlir::gpu::GPUModuleOp module, llvm::StringRef name,
                           int64_t elements, mlir::Type type);
  /// `elements` values of `type` at byte `byteOffset` of the block's
  /// dynamic shared memory (`gpu.dynamic_shared_memory` viewed by
  /// `memref.view`): the launch passes the bytes, which may exceed the 48
  /// KiB that static shared memory is limited to.
  mlir::Value dynamicSharedBuffer(int64_t byteOffset, int64_t elements,
                                  mlir::Type type);
  /// The `!llvm.ptr<3>` to element `elementOffset` (i32) of a shared
  /// memref of element type `type`.
  mlir::Value sharedPtr(mlir::Value memref, mlir::Value elementOffset,
                        mlir::Type type);

  /// `prefetch.global.L1` of the line holding element `elementOffset` of
  /// the global `memref`: a hint with no result register, so a kernel whose
  /// loads the compiler serialises (too few registers to keep them in
  /// flight) can still have the lines on their way, or already in L1.
  void prefetchL1(mlir::Value memref, mlir::Value elementOffset);
  /// `cp.async.bulk.prefetch.L2.global` of `bytes` (i32, a multiple of 16)
  /// from element `elementOffset` of `memref` (16-byte aligned there): one
  /// thread asks the copy engine to bring a whole range into L2.
  void prefetchL2(mlir::Value memref, mlir::Value elementOffset, mlir::Value bytes);

  mlir::Value load(mlir::Value memref, mlir::Value index);
  void store(mlir::Value value, mlir::Value memref, mlir::Value index);

  /// `ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16` from `ptr`
  /// (this lane's row address); `num` i32 results.
  llvm::SmallVector<mlir::Value, 4> ldmatrix(mlir::Value ptr, int num,
                                             bool transpose);
  /// `mma.sync.aligned.m16n8k16.row.col.f32.<t>.<t>.f32`: c += a * b, with
  /// operands of `operand` type: bf16 (null, the default) or f16.
  Acc mma(const FragA &a, const FragB &bFrag, const Acc &c,
          mlir::Type operand = {});
  /// Two f32 rounded to bf16 and packed into one i32 (`lo` in the low half).
  mlir::Value packBf16(mlir::Value lo, mlir::Value hi);
  /// The same in a 16-bit float `type` (bf16 or f16).
  mlir::Value packHalves(mlir::Value lo, mlir::Value hi, mlir::Type type);
  /// The A fragment of a 16 x 16 block whose two 16 x 8 halves are the
  /// accumulators `left` (columns 0-7) and `right` (columns 8-15): the
  /// register-level reuse of an mma result as the next mma's A operand,
  /// rounded to `operand` (bf16 when null, or f16).
  FragA accToFragA(const Acc &left, const Acc &right, mlir::Type operand = {});
  Acc zeroAcc();

  /// The A operand of the 16 x 16 block at (rowBase, colBase) of a bf16
  /// shared tile with row stride `ld` (ldmatrix.x4).
  FragA fragA(mlir::Value tile, mlir::Value rowBase, int64_t ld,
              mlir::Value colBase);
  /// The B operands of two n8 tiles of a bf16 shared tile whose rows are n
  /// (k contiguous): n rows rowBase .. +16, k columns colBase .. +16.
  std::array<FragB, 2> fragBRows(mlir::Value tile, mlir::Value rowBase,
                                 int64_t ld, mlir::Value colBase);
  /// The same of a tile whose rows are k (ldmatrix.trans): k rows
  /// rowBase .. +16, n columns colBase .. +16.
  std::array<FragB, 2> fragBCols(mlir::Value tile, mlir::Value rowBase,
                                 int64_t ld, mlir::Value colBase);

  /// `gpu.barrier`.
  void barrier();

private:
  mlir::Value constLike(mlir::Value like, int64_t v);
  std::array<FragB, 2> fragB(mlir::Value tile, mlir::Value rowBase, int64_t ld,
                             mlir::Value colBase, bool kRows);
};

/// One thread's share of a row of `width` values, split in vectors of
/// `vw` contiguous values dealt round-robin over `group` threads: vector j
/// of thread `t` covers columns col[j] .. col[j] + vw - 1 (coalesced over
/// the group). Vectors past the row read as zeros and are not stored.
/// Rows and columns are multiples of vw and buffers 256-byte aligned, so
/// each access is aligned to its size (one 16-byte load of f32 x 4).
class RowVectors {
public:
  RowVectors(KernelEmitter &e, mlir::Value t, int64_t group, int64_t width,
             int64_t vw);
  int64_t perThread() const { return static_cast<int64_t>(col.size()); }
  int64_t vectorWidth() const { return vw; }
  /// Vector j of the row at `rowBase` of `buf`, as f32.
  llvm::SmallVector<mlir::Value> load(mlir::Value buf, mlir::Value rowBase,
                                      int64_t j);
  /// All of this thread's values of the row (perThread * vw).
  llvm::SmallVector<mlir::Value> loadAll(mlir::Value buf, mlir::Value rowBase);
  /// Stores `values` (perThread * vw f32) in `buf`'s element type.
  void storeAll(llvm::ArrayRef<mlir::Value> values, mlir::Value buf,
                mlir::Value rowBase);

private:
  KernelEmitter &e;
  int64_t vw;
  llvm::SmallVector<mlir::Value> col, valid;
};

/// A vector loaded for a shared-memory tile: where it goes, and whether it
/// has a place there (null when every piece of the staging fits).
struct StagedPiece {
  mlir::Value value, index, inTile;
};
/// Stores staged pieces into `tile` once all their loads were issued (so
/// they are in flight together), skipping pieces past the tile.
void storeStaged(KernelEmitter &e, llvm::ArrayRef<StagedPiece> pieces,
                 mlir::Value tile, unsigned alignment);

/// One key tile of a flash-style online softmax, base 2, over the two rows
/// (g and g + 8) a thread holds in m16 accumulator tiles. `carried` is the
/// key loop's state [m0, m1, l0, l1, o tiles...] (m: running row maxima
/// over the quad; l: this thread's share of the row sums); `scores` are the
/// tile's scaled and masked scores, replaced by their exponentials (the P
/// to multiply by V). Returns the state's new [m0, m1, l0, l1] and the
/// output accumulators rescaled to the new maxima, P V still to add.
struct OnlineSoftmaxTile {
  llvm::SmallVector<mlir::Value, 4> next;
  llvm::SmallVector<Acc> o;
};
OnlineSoftmaxTile onlineSoftmaxTile(KernelEmitter &e,
                                    llvm::MutableArrayRef<Acc> scores,
                                    mlir::ValueRange carried);

/// Creates `gpu.func @name` (a kernel, with `known_block_size`) at the end
/// of `module` and leaves `b` at the start of its body.
mlir::gpu::GPUFuncOp createKernel(mlir::OpBuilder &b, mlir::Location loc,
                                  mlir::gpu::GPUModuleOp module,
                                  llvm::StringRef name,
                                  llvm::ArrayRef<mlir::Type> argTypes,
                                  std::array<int32_t, 3> blockSize);

/// A new kernel and an emitter positioned before its `gpu.return`.
struct GPUFuncOpAndEmitter {
  GPUFuncOpAndEmitter(mlir::OpBuilder &b, mlir::Location loc,
                      mlir::gpu::GPUModuleOp module, llvm::StringRef name,
                      llvm::ArrayRef<mlir::Type> args,
                      std::array<int32_t, 3> block);
  mlir::gpu::GPUFuncOp func;
  KernelEmitter e;
};

/// A flat memref<n x type> kernel argument type.
mlir::MemRefType flatMemRef(mlir::Type type, int64_t elements);

} // namespace kimi::gpu

#endif

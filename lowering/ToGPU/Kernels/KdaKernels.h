//===- KdaKernels.h - generated sm_80+/sm_90a kernels for kimi.kda -*- C++ -*-===//
//
// Kernel generators for Kimi Delta Attention (shared/reference/kimi-k3.md §2),
// specialised on shapes, dtypes and the decay facts `kimi-chunk-kda` proved.
// docs/lowering/gpu-kda.md describes the algorithm, the buffers and the
// launch sequence; this header is the contract between the generators and
// the program builder (KdaGpuProgram.cpp) that launches them.
//
// Layouts (row-major, tokens of all sequences packed, `cu_seqlens` i32
// [N + 1] gives sequence starts):
//   q, k, g : [T, H, dk]   v, o : [T, H, dv]   beta : [T, H]
//   h0, ht  : [N, H, dk, dv] f32
// Per chunk slot c (a 16-token chunk of one sequence, `slots() = T/16 + N`
// bounds the chunks of any split of T into N sequences) and head h, the
// token-parallel kernel writes
//   Qg, Kg, Kd : [slots, H, 16, dk] bf16    Aqk, TmB : [slots, H, 16, 16] bf16
//   gl         : [slots, H, dk] f32
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_KDAKERNELS_H
#define KIMI_LOWERING_TOGPU_KDAKERNELS_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <cstdint>

namespace kimi::gpu {

inline constexpr int64_t kKdaChunk = 16;

/// A `kimi.kda_gate` fused into the kernels that read g: the kernels then
/// take the gate input z (in g's place, same layout) plus a_log [H] and
/// dt_bias [H, dk] (f32) and form g per element.
struct KdaGateFusion {
  enum class Form { None, LowerBound, Softplus } form = Form::None;
  double lower = 0.0; // LowerBound: L < 0
};

/// What the generated prefill kernels are specialised on.
struct KdaPrefillShape {
  int64_t tokens = 0;    // T, all sequences packed
  int64_t sequences = 1; // N
  int64_t heads = 0;     // H
  int64_t dk = 128, dv = 128;
  mlir::Type actType;  // q, k, v, beta, o (bf16, f16 or f32)
  mlir::Type gateType; // g (bf16 or f32)
  double scale = 1.0;
  /// Dense diagonal tiles (the decay bound proved exp(-G) finite) or the
  /// pairwise log-space form.
  bool denseDiagonal = true;
  /// Segments P each sequence's recurrence is split into (>= 1).
  int64_t segments = 1;
  /// Blocks each (sequence, head, segment) recurrence is split into along
  /// the value columns (independent in the delta rule); more blocks hide
  /// the per-chunk latency chain better when B·H is small.
  int64_t valueSplit = 1;
  bool hasInitialState = true;
  KdaGateFusion gate;
  /// Storage type of h0/ht (f32, or bf16/f16 to halve the state's bytes);
  /// the state is always computed in f32.
  mlir::Type stateType;

  int64_t slots() const { return tokens / kKdaChunk + sequences; }
};

/// Checks what the generators support; the message names the field at fault.
llvm::LogicalResult verifyKdaPrefillShape(const KdaPrefillShape &shape,
                                          std::string &why);

/// Threads of a kda_prep block: dk, or dk / 2 (two channels each) from
/// dk = 128 on.
int64_t kdaPrepThreads(int64_t dk);

/// `kda_prep`: grid (slots, H), block kdaPrepThreads(dk) threads. Gate cumsum, rescaled
/// operands, Akk/Aqk (tensor cores when dense), the unit-lower-triangular
/// inverse, per chunk.
/// Args: q, k, g, beta, cu_seqlens, [a_log, dt_bias when the gate is
/// fused; g is then z], Qg, Kg, Kd, Aqk, TmB, gl.
mlir::gpu::GPUFuncOp emitKdaPrepKernel(mlir::OpBuilder &b, mlir::Location loc,
                                       mlir::gpu::GPUModuleOp module,
                                       const KdaPrefillShape &shape);

/// `kda_recur`: grid (H * valueSplit, N, P), block 2 * dv / valueSplit
/// threads (one warp per 16 value columns). The recurrence over chunks on tensor cores, state in registers.
/// Args: v, cu_seqlens, Qg, Kg, Kd, Aqk, TmB, gl, init, o, ht.
/// `init` is h0 [N, H, dk, dv] when P == 1, else the folded segment inputs
/// [N, H, P, dk, dv]; ht gets the final state of the last segment.
mlir::gpu::GPUFuncOp emitKdaRecurrenceKernel(mlir::OpBuilder &b,
                                             mlir::Location loc,
                                             mlir::gpu::GPUModuleOp module,
                                             const KdaPrefillShape &shape);

/// `kda_summarize` (P > 1): grid (H * valueSplit, N, 2 (P - 1)). For segment p < P - 1,
/// z = p computes the segment's transition M_p [dk, dk] (state I, no values)
/// and z = P - 1 + p its zero-state contribution E_p [dk, dv].
/// Args: v, cu_seqlens, Kg, Kd, TmB, gl, M [N, H, P-1, dk, dk],
/// E [N, H, P-1, dk, dv].
mlir::gpu::GPUFuncOp emitKdaSummarizeKernel(mlir::OpBuilder &b,
                                            mlir::Location loc,
                                            mlir::gpu::GPUModuleOp module,
                                            const KdaPrefillShape &shape);

/// `kda_fold` (P > 1): grid (H, N, dv / 16), block 256; each block folds
/// 16 columns of the state. S_0 = h0 (or 0),
/// S_{p+1} = M_p S_p + E_p in f32. Args: h0, M, E, Sin [N, H, P, dk, dv].
mlir::gpu::GPUFuncOp emitKdaFoldKernel(mlir::OpBuilder &b, mlir::Location loc,
                                       mlir::gpu::GPUModuleOp module,
                                       const KdaPrefillShape &shape);

/// What the decode kernel is specialised on.
struct KdaDecodeShape {
  int64_t batch = 1, heads = 0, dk = 128, dv = 128;
  mlir::Type actType, gateType;
  double scale = 1.0;
  KdaGateFusion gate;
  mlir::Type stateType; // f32, bf16 or f16 storage of the state
  /// Blocks per (sequence, head), each over dv / columnGroups value columns
  /// (a multiple of 32): the columns of the state are independent, and a
  /// batch-1 step has too few heads to occupy the SMs otherwise.
  int64_t columnGroups = 1;
};
llvm::LogicalResult verifyKdaDecodeShape(const KdaDecodeShape &shape,
                                         std::string &why);

/// Column groups for `sequences * heads` decode states of `dv` columns:
/// doubled while there are fewer blocks than SMs and each group keeps at
/// least 32 columns.
int64_t chooseKdaDecodeColumnGroups(int64_t sequences, int64_t heads,
                                    int64_t dv, int64_t smCount);

/// `kda_decode`: grid (B * H, columnGroups), block 128. One token per sequence: the state
/// [B, H, dk, dv] read from `state` and the next one written to
/// `final_state` (which may be the same buffer). Args: q, k, v, g, beta,
/// state, final_state, o [, a_log, dt_bias when the gate is fused; g is
/// then z].
mlir::gpu::GPUFuncOp emitKdaDecodeKernel(mlir::OpBuilder &b, mlir::Location loc,
                                         mlir::gpu::GPUModuleOp module,
                                         const KdaDecodeShape &shape);

} // namespace kimi::gpu

#endif

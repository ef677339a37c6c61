//===- MlaPrefillKernel.h - flash-style causal MLA for many queries -*- C++ -*-===//
//
// The generated kernel behind kimi-gpu-mla-kernels (docs/lowering/gpu-model.md,
// "MLA prefill kernel"): causal softmax attention of T queries against the
// expanded keys and values of S cached rows, one pass over the keys with an
// online softmax (flash-attention style), f16 tensor-core products
// (mma.sync m16n8k16, f32 accumulation) and the output gate fused.
//
// Buffers (flat, row-major; the inputs f16, 16-byte aligned rows):
//   q    [B, T, H, dn + dr]      queries
//   kv   [B, S, H, dn + dv]      per row and head: k_nope (dn) then v (dv),
//                                the product ckv W_kv_b^T
//   pe   [B, S, dr]              the shared key part k_pe
//   gate [B, T, H, dv] f32       (optional) out *= sigmoid(gate)
//   lengths [B] i32              (optional) valid key rows L_b; else L_b = S
//   out  [B, T, H, dv] f32
// Query t of sequence b sits at key position L_b - T + t and sees keys
// s <= L_b - T + t. B, T and S are run-time arguments; the rest is
// specialised. f16 rather than bf16: the products keep 11 significant bits
// (the model's activations are far inside f16's range), and k3-mini's
// logits differ from the f32 path by bf16's rounding otherwise (2e-2).
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_MLAPREFILLKERNEL_H
#define KIMI_LOWERING_TOGPU_MLAPREFILLKERNEL_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <cstdint>
#include <string>

namespace kimi::gpu {

struct MlaPrefillShape {
  int64_t heads = 0;
  int64_t nope = 0, rope = 0, dv = 0;
  bool hasGate = false, hasLengths = false;
  double scale = 1.0;
  /// The gate and the result are bf16 (bf16 activations), else f32.
  bool bf16Io = false;

  int64_t dq() const { return nope + rope; }
};

/// Query rows per block (four warps of 16) and keys per tile.
inline constexpr int64_t kMlaBlockQueries = 64;
inline constexpr int64_t kMlaTileKeys = 64;
inline constexpr int64_t kMlaThreads = 128;

/// The dynamic shared memory the kernel is launched with (bytes): two
/// stages of a key tile's [k_nope | k_pe] and v.
int64_t mlaPrefillSharedBytes(const MlaPrefillShape &shape);

/// Checks what the generator supports; `why` names the field at fault.
llvm::LogicalResult verifyMlaPrefillShape(const MlaPrefillShape &shape,
                                          std::string &why);

/// Emits `gpu.func @name` into `module`: grid (ceil(T / 64), H, B), block
/// 128, mlaPrefillSharedBytes(shape) of dynamic shared memory. Arguments: q, kv, pe, [gate], [lengths], out (memref<?x...>), then
/// B, T, S (index).
mlir::gpu::GPUFuncOp emitMlaPrefillKernel(mlir::OpBuilder &b, mlir::Location loc,
                                          mlir::gpu::GPUModuleOp module,
                                          llvm::StringRef name,
                                          const MlaPrefillShape &shape);

} // namespace kimi::gpu

#endif

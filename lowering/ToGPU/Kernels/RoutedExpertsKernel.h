//===- RoutedExpertsKernel.h - a step's routed experts, two kernels -*- C++ -*-===//
//
// The generator behind kimi-gpu-routed-experts-kernels (a model's decode
// steps) and the routed-experts GPU entry of a kernel library (kimi-compile
// of a .mlir function holding one kimi.routed_experts; its kernel test and
// benchmark): gate_up, then down, for steps of few tokens.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_ROUTEDEXPERTSKERNEL_H
#define KIMI_LOWERING_TOGPU_ROUTEDEXPERTSKERNEL_H

#include "dialects/Kimi/KimiOps.h"
#include "lowering/ToGPU/Rewrites/KdaGpuProgram.h"

#include "mlir/IR/Builders.h"

#include <optional>
#include <vector>
#include <string>

namespace kimi::gpu {

/// What the two kernels are specialised on.
struct RoutedExpertsSpec {
  int64_t tokens = 0, topK = 0, experts = 0, inner = 0, width = 0;
  bool situ = false;
  double beta = 0, linearBeta = 0;
  unsigned idBits = 32;
  /// The experts' stored type: f32 or bf16 (read at its size, widened in
  /// registers), or MXFP4 (packed codes and E8M0 scales, both i8 buffers,
  /// decoded in registers).
  bool bf16Weights = false;
  bool mxfp4 = false;
  /// The tokens x and the result out are bf16 (bf16 activations: x is
  /// widened in registers, out rounded at the store), else f32. The routing
  /// weights (f32 by the op's definition) and the SiTU products h are f32.
  bool bf16Tokens = false;
  mlir::Type tokenType(mlir::OpBuilder &b) const;

  /// The element type of a table's (first) buffer: f32, bf16, or i8 codes.
  mlir::Type weightType(mlir::OpBuilder &b) const;
  /// Elements of a table's (first) buffer for `values` values: the packed
  /// codes for MXFP4, two a byte.
  int64_t weightElements(int64_t values) const {
    return mxfp4 ? values / 2 : values;
  }
  /// Slots each warp of the down kernel reads.
  int64_t slotsPerWarp() const;
  /// A key naming the specialisation (equal keys, equal kernels).
  std::string key() const;
};

/// The spec of `op`, or nothing: with an empty `why` when the op is not the
/// kernels' domain (more than `maxTokens` tokens, or a dynamic count: the
/// sorted products'), else `why` says what they do not support.
std::optional<RoutedExpertsSpec> routedExpertsSpec(RoutedExpertsOp op,
                                                   int64_t maxTokens,
                                                   std::string &why);

/// `gpu.func @name(z [T W], ids [T k], gate [E I W], up [E I W],
/// h [T k I])`: grid (gateUpGrid), 128 threads. An MXFP4 table is two
/// buffers, its codes then its scales.
mlir::gpu::GPUFuncOp emitRoutedGateUpKernel(mlir::OpBuilder &b,
                                            mlir::Location loc,
                                            mlir::gpu::GPUModuleOp module,
                                            llvm::StringRef name,
                                            const RoutedExpertsSpec &s);
/// `gpu.func @name(h [T k I], ids [T k], weights [T k], down [E W I],
/// out [T W])`: grid (downGrid), 128 threads.
mlir::gpu::GPUFuncOp emitRoutedDownKernel(mlir::OpBuilder &b, mlir::Location loc,
                                          mlir::gpu::GPUModuleOp module,
                                          llvm::StringRef name,
                                          const RoutedExpertsSpec &s);
inline constexpr int64_t kRoutedExpertsThreads = 128;
/// The kernels' arguments in order, from the operands (IR values or buffer
/// indices); a table is one operand, or an MXFP4 table's codes and scales.
template <typename T>
std::vector<T> routedGateUpArgs(T x, T ids, llvm::ArrayRef<T> gate,
                                llvm::ArrayRef<T> up, T h) {
  std::vector<T> args = {x, ids};
  args.insert(args.end(), gate.begin(), gate.end());
  args.insert(args.end(), up.begin(), up.end());
  args.push_back(h);
  return args;
}
template <typename T>
std::vector<T> routedDownArgs(T h, T ids, T weights, llvm::ArrayRef<T> down,
                              T out) {
  std::vector<T> args = {h, ids, weights};
  args.insert(args.end(), down.begin(), down.end());
  args.push_back(out);
  return args;
}
std::array<int64_t, 3> routedGateUpGrid(const RoutedExpertsSpec &s);
std::array<int64_t, 3> routedDownGrid(const RoutedExpertsSpec &s);

/// Plans `op` as GPU entry `name` (the two kernels). Buffers: x [T W],
/// weights [T k] (f32), ids [T k] (i32), then per table gate, up, down:
/// its values (f32 or bf16), or for MXFP4 `<table>_codes` (u8, [.., K/2])
/// and `<table>_scales` (u8, [.., K/32]); out [T W]; h is a temporary.
llvm::FailureOr<GpuEntryPlan> planRoutedExpertsEntry(RoutedExpertsOp op,
                                                     llvm::StringRef name);

} // namespace kimi::gpu

#endif

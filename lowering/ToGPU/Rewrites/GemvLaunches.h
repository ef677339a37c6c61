//===- GemvLaunches.h - products of a few rows as GEMV launches -*- C++ -*-===//
//
// The GEMV half of kimi-gpu-gemm-calls (lowering/Passes.td): the products
// of at most gemv-max-m rows run on the generated GEMV kernel
// (GemvKernel.h) instead of cuBLASLt. The elementwise op that consumes a
// product's output runs at its store (an epilogue), two products that one
// such op combines run as a pair in one launch, and products of one input
// share a launch (a group).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_TOGPU_GEMVLAUNCHES_H
#define KIMI_LOWERING_TOGPU_GEMVLAUNCHES_H

#include "lowering/ToGPU/Rewrites/GemmContraction.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>

namespace kimi::gpu {

struct GemvLaunchOptions {
  /// Products of at most this many rows (0: none).
  int64_t maxM = 4;
  /// Products in one launch, at most (1..8).
  int64_t maxGroup = 8;
  /// Fuse epilogues and pairs.
  bool epilogues = true;
  /// SMs of the target: a group's k split keeps about 32 warps an SM.
  int64_t smCount = 132;
  /// Kernels prefetch their blocks' weight rows into L2 before their grid
  /// dependency wait (GemvGroupSpec::prefetchWeights).
  bool prefetchWeights = false;
};

/// Takes the products the GEMV kernel computes, then launches them all at
/// once: `take` each product in order (the others are the caller's to
/// rewrite, before `launch`), then `launch`.
class GemvLaunches {
public:
  GemvLaunches(mlir::ModuleOp module, const GemvLaunchOptions &options);
  ~GemvLaunches();
  /// Takes `op` when the GEMV kernel computes it: at most maxM static rows,
  /// no batch or a static one, B as [N, K] and static, 16-byte-aligned
  /// strides. False leaves it to the caller.
  bool take(mlir::linalg::LinalgOp op, const Contraction &c,
            mlir::linalg::FillOp fill);
  /// Fuses the epilogues and pairs, groups the products of one input and
  /// replaces each group by one launch.
  void launch();

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace kimi::gpu

#endif

//===- KdaJit.h - compile and run the lowered kimi.kda ----------*- C++ -*-===//
//
// Test harness that executes the IR produced by `kimi-lower-kda`: it wraps
// one `kimi.kda` in a function on memrefs, lowers it with `kimi-lower-kda`,
// then bufferizes and lowers to the LLVM dialect with upstream passes
// (one-shot-bufferize, buffer-deallocation-pipeline, convert-linalg-to-loops,
// expand-strided-metadata, lower-affine, convert-scf-to-cf,
// convert-{math,arith}-to-llvm, finalize-memref-to-llvm, convert-func-to-llvm,
// convert-cf-to-llvm, reconcile-unrealized-casts), JIT-compiles it with
// mlir::ExecutionEngine and calls it through its C interface.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_UNIT_KDAJIT_H
#define KIMI_TEST_UNIT_KDAJIT_H

#include "KdaReference.h"

#include <memory>
#include <string>

namespace kimi::test {

enum class Diag { dense, pairwise };

struct KdaConfig {
  KdaShape shape;
  int64_t chunk = 16;
  Diag diag = Diag::dense;
  bool initialState = true;
  double scale = 0.125;
};

/// A compiled `kimi.kda` for one static configuration.
class KdaKernel {
public:
  /// Lowers and JIT-compiles; returns null and sets `error` on failure.
  static std::unique_ptr<KdaKernel> compile(const KdaConfig &config,
                                            std::string &error);
  ~KdaKernel();

  /// Runs the compiled code. All arrays f32, row-major, sized by the shape;
  /// `initialState` is ignored when the config has none.
  void run(const float *q, const float *k, const float *v, const float *g,
           const float *beta, const float *initialState, float *out,
           float *finalState) const;

  /// The function after `kimi-lower-kda` (before bufferization).
  const std::string &loweredIR() const { return lowered; }

  struct Impl;

private:
  KdaKernel() = default;
  KdaConfig config;
  std::string lowered;
  std::unique_ptr<Impl> impl;
};

/// The textual input: a func on memrefs around one kimi.kda.
std::string kdaFunctionSource(const KdaConfig &config);

} // namespace kimi::test

#endif // KIMI_TEST_UNIT_KDAJIT_H

//===- cublaslt.h - cuBLASLt matrix products, loaded at run time -*- C++ -*-===//
//
// The runtime's GEMM for GPU models (the `gemm` entry of the model's GPU shim
// table; docs/runtime-abi.md, "GPU models"). libcublasLt is dlopen()ed
// (KIMI_CUBLASLT_LIBRARY, libcublasLt.so.13, libcublasLt.so, then
// /usr/local/cuda/lib64), so the runtime builds and loads without CUDA.
//
// A product is described by element strides, whatever the memory order:
// C[b, m, n] += sum_k A[b, m, k] B[b, k, n]. Each matrix must have unit
// stride along one of its two dimensions (dimensions of size 1 may have
// any stride); the descriptor is mapped onto cuBLASLt's column-major
// layouts with transposes, computing C^T = B^T A^T when C is row-major.
// Layouts and the algorithm are cached per shape. A product whose shape is
// fixed at compile time (`tune`) recurs on every call of its entry, so its
// algorithm is chosen by timing: cuBLASLt's heuristic ranks candidates, and
// for some shapes its first pick is several times slower than the best
// (k3-mini's 2048x2048x2048 TF32 product: 295 us against 53 us for
// 2048x1536x2048). Each candidate runs once to warm up (the first launch
// loads its kernel) and then kTuneRuns times between two events, into a
// scratch C, so the caller's C is written once. Timing stops once the
// budget is spent (KIMI_GEMM_TUNING_MS, default 2000 ms of device time per
// CublasLt; 0 turns it off); later shapes take the heuristic's pick.
// KIMI_GEMM_TUNING_CANDIDATES (1..64, default 8) sets how many of the
// heuristic's algorithms are timed.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_CUBLASLT_H
#define KIMI_RUNTIME_CUDA_CUBLASLT_H

#include "runtime/cuda/cuda_device.h"
#include "runtime/support/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace kimi::rt {

/// One (batched) product, strides in elements; A and B are f32, or bf16
/// with precision 2; C is f32, or bf16 with `cBf16`.
struct GemmF32 {
  cuda::CUdeviceptr a = 0, b = 0, c = 0;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t aM = 0, aK = 0, aBatch = 0;
  int64_t bK = 0, bN = 0, bBatch = 0;
  int64_t cM = 0, cN = 0, cBatch = 0;
  /// 0: exact f32 products; 1: TF32 tensor cores (f32 accumulation);
  /// 2: A and B are bf16 (tensor cores, f32 accumulation, C f32).
  int32_t precision = 0;
  /// The sizes are compile-time constants: the algorithm is chosen by timing.
  bool tune = false;
  /// C = A B: C's old contents are neither read nor kept (beta = 0).
  bool overwrite = false;
  /// C is bf16: the f32 sums are rounded to nearest even as they are
  /// stored (precision 2 and overwrite only: a bf16 C is never summed into).
  bool cBf16 = false;
};

class CublasLt {
public:
  /// Loads the library and creates a handle; a kModule error without it.
  static StatusOr<std::unique_ptr<CublasLt>> load(const CudaDevice &device);
  ~CublasLt();
  CublasLt(const CublasLt &) = delete;
  CublasLt &operator=(const CublasLt &) = delete;

  /// C += A B (C = A B with `overwrite`) on `stream` (asynchronous). Errors
  /// name the shape.
  Status gemm(const GemmF32 &g, cuda::CUstream stream);
  /// Builds (and for `g.tune`, times) the plan of g's shape; gemm() does it
  /// on first use. Timing synchronises `stream`. Separate so that a caller
  /// timing the product itself can leave the tuning out.
  Status prepare(const GemmF32 &g, cuda::CUstream stream);
  /// One line per timed shape: the heuristic's pick against the chosen one.
  std::string tuningReport() const;
  const std::string &library() const { return library_; }

  struct Api;

private:
  CublasLt() = default;
  struct Plan;
  StatusOr<Plan *> plan(const GemmF32 &g, cuda::CUstream stream);
  Status time(Plan &p, const GemmF32 &g, const void *a, const void *b,
              cuda::CUstream stream);

  const CudaDevice *device_ = nullptr;
  void *handle_ = nullptr; // dlopen handle
  std::unique_ptr<Api> api_;
  void *lt_ = nullptr; // cublasLtHandle_t
  cuda::CUdeviceptr workspace_ = 0;
  size_t workspaceBytes_ = 0;
  std::string library_;
  double tuningMsLeft_ = 0;
  int tuneCandidates_ = 8; // the heuristic's algorithms timed per shape
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                      int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                      int64_t, int64_t, int32_t>,
           std::unique_ptr<Plan>>
      plans_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_CUBLASLT_H

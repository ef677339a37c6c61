//===- cublaslt.cpp - cuBLASLt matrix products, loaded at run time --------===//

#include "runtime/cuda/cublaslt.h"

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>

namespace kimi::rt {

namespace {
// Values from cublasLt.h / cublas_api.h / library_types.h (CUDA 12 and 13).
constexpr int kComputeF32 = 68, kComputeF32FastTf32 = 77;
constexpr int kDataF32 = 0, kDataBf16 = 14; // cudaDataType_t
constexpr int kDescTransA = 3, kDescTransB = 4;
constexpr int kLayoutBatchCount = 5, kLayoutBatchStride = 6;
constexpr int kPrefMaxWorkspace = 1;
constexpr int32_t kOpN = 0, kOpT = 1;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Timing: the heuristic's first kTuneCandidates algorithms (or
// KIMI_GEMM_TUNING_CANDIDATES, at most kMaxTuneCandidates), kTuneRuns timed
// runs each after one warm-up run.
constexpr int kTuneCandidates = 8, kMaxTuneCandidates = 64, kTuneRuns = 4;
constexpr double kDefaultTuningMs = 2000;

struct HeuristicResult {
  uint64_t algo[8];
  size_t workspaceSize;
  int state;
  float wavesCount;
  int reserved[4];
};
using Status_t = int;
} // namespace

struct CublasLt::Api {
  Status_t (*create)(void **);
  Status_t (*destroy)(void *);
  Status_t (*descCreate)(void **, int, int);
  Status_t (*descDestroy)(void *);
  Status_t (*descSet)(void *, int, const void *, size_t);
  Status_t (*layoutCreate)(void **, int, uint64_t, uint64_t, int64_t);
  Status_t (*layoutDestroy)(void *);
  Status_t (*layoutSet)(void *, int, const void *, size_t);
  Status_t (*prefCreate)(void **);
  Status_t (*prefDestroy)(void *);
  Status_t (*prefSet)(void *, int, const void *, size_t);
  Status_t (*heuristic)(void *, void *, void *, void *, void *, void *, void *,
                        int, HeuristicResult *, int *);
  Status_t (*matmul)(void *, void *, const void *, const void *, void *,
                     const void *, void *, const void *, const void *, void *,
                     void *, void *, const void *, void *, size_t, void *);
};

struct CublasLt::Plan {
  void *desc = nullptr;
  void *layouts[3] = {nullptr, nullptr, nullptr};
  HeuristicResult algo{};
  bool swap = false; // computes C^T = B^T A^T
  std::vector<HeuristicResult> candidates; // the heuristic's, best first
  // Timing (tune): microseconds per run of candidate 0 and of the chosen one.
  bool timed = false;
  int chosen = 0, count = 0;
  double heuristicUs = 0, chosenUs = 0;
  std::string shape;
};

namespace {
std::string shapeOf(const GemmF32 &g) {
  return "[" + std::to_string(g.batch) + "x" + std::to_string(g.m) + "x" +
         std::to_string(g.k) + "] x [" + std::to_string(g.k) + "x" +
         std::to_string(g.n) + "] (strides A " + std::to_string(g.aM) + "," +
         std::to_string(g.aK) + " B " + std::to_string(g.bK) + "," +
         std::to_string(g.bN) + " C " + std::to_string(g.cM) + "," +
         std::to_string(g.cN) + ")";
}

/// Elements from C's first to its last (m, n, batch > 0).
int64_t cExtent(const GemmF32 &g) {
  return 1 + (g.batch - 1) * std::abs(g.cBatch) + (g.m - 1) * std::abs(g.cM) +
         (g.n - 1) * std::abs(g.cN);
}

/// A rows x cols operand with strides (sr, sc) as a column-major matrix:
/// (stored rows, stored cols, ld, transposed). False when neither stride is
/// unit.
bool columnMajor(int64_t rows, int64_t cols, int64_t sr, int64_t sc,
                 int64_t &storedRows, int64_t &storedCols, int64_t &ld,
                 bool &transposed) {
  if (rows == 1)
    sr = 1;
  if (cols == 1)
    sc = std::max<int64_t>(rows, 1);
  if (sr == 1 && sc >= std::max<int64_t>(rows, 1)) {
    storedRows = rows, storedCols = cols, ld = sc, transposed = false;
    return true;
  }
  if (rows > 1 && cols == 1) {
    // a column with a non-unit row stride: the transpose of a 1 x rows row.
    storedRows = 1, storedCols = rows, ld = sr, transposed = true;
    return true;
  }
  if (sc == 1 && sr >= std::max<int64_t>(cols, 1)) {
    storedRows = cols, storedCols = rows, ld = sr, transposed = true;
    return true;
  }
  return false;
}
} // namespace

StatusOr<std::unique_ptr<CublasLt>> CublasLt::load(const CudaDevice &device) {
  std::vector<std::string> candidates;
  if (const char *env = std::getenv("KIMI_CUBLASLT_LIBRARY"))
    candidates.push_back(env);
  for (const char *name : {"libcublasLt.so.13", "libcublasLt.so",
                           "/usr/local/cuda/lib64/libcublasLt.so.13",
                           "/usr/local/cuda/lib64/libcublasLt.so"})
    candidates.push_back(name);
  std::unique_ptr<CublasLt> lt(new CublasLt());
  lt->device_ = &device;
  std::string errors;
  for (const std::string &c : candidates) {
    lt->handle_ = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lt->handle_) {
      lt->library_ = c;
      break;
    }
    errors += "\n  " + c + ": " + dlerror();
  }
  if (!lt->handle_)
    return moduleError("cuBLASLt not found (GPU models run their matrix "
                       "products through it; set KIMI_CUBLASLT_LIBRARY):" +
                       errors);
  lt->api_ = std::make_unique<Api>();
  Api &a = *lt->api_;
  struct {
    const char *name;
    void **slot;
  } symbols[] = {
      {"cublasLtCreate", reinterpret_cast<void **>(&a.create)},
      {"cublasLtDestroy", reinterpret_cast<void **>(&a.destroy)},
      {"cublasLtMatmulDescCreate", reinterpret_cast<void **>(&a.descCreate)},
      {"cublasLtMatmulDescDestroy", reinterpret_cast<void **>(&a.descDestroy)},
      {"cublasLtMatmulDescSetAttribute", reinterpret_cast<void **>(&a.descSet)},
      {"cublasLtMatrixLayoutCreate", reinterpret_cast<void **>(&a.layoutCreate)},
      {"cublasLtMatrixLayoutDestroy", reinterpret_cast<void **>(&a.layoutDestroy)},
      {"cublasLtMatrixLayoutSetAttribute", reinterpret_cast<void **>(&a.layoutSet)},
      {"cublasLtMatmulPreferenceCreate", reinterpret_cast<void **>(&a.prefCreate)},
      {"cublasLtMatmulPreferenceDestroy", reinterpret_cast<void **>(&a.prefDestroy)},
      {"cublasLtMatmulPreferenceSetAttribute", reinterpret_cast<void **>(&a.prefSet)},
      {"cublasLtMatmulAlgoGetHeuristic", reinterpret_cast<void **>(&a.heuristic)},
      {"cublasLtMatmul", reinterpret_cast<void **>(&a.matmul)},
  };
  for (auto &s : symbols) {
    *s.slot = dlsym(lt->handle_, s.name);
    if (!*s.slot)
      return moduleError(lt->library_ + ": symbol " + s.name + " missing");
  }
  if (int st = a.create(&lt->lt_))
    return executionError("cublasLtCreate failed with status " + std::to_string(st));
  const CudaDriver &d = device.driver();
  KIMI_RETURN_IF_ERROR(d.check(d.cuMemAlloc(&lt->workspace_, kWorkspaceBytes),
                               "cuMemAlloc (cuBLASLt workspace)"));
  lt->workspaceBytes_ = kWorkspaceBytes;
  lt->tuningMsLeft_ = kDefaultTuningMs;
  if (const char *env = std::getenv("KIMI_GEMM_TUNING_MS")) {
    char *end = nullptr;
    double ms = std::strtod(env, &end);
    if (end == env || *end || !(ms >= 0))
      return invalidArgument(std::string("KIMI_GEMM_TUNING_MS='") + env +
                             "': expected milliseconds >= 0");
    lt->tuningMsLeft_ = ms;
  }
  lt->tuneCandidates_ = kTuneCandidates;
  if (const char *env = std::getenv("KIMI_GEMM_TUNING_CANDIDATES")) {
    char *end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end == env || *end || n < 1 || n > kMaxTuneCandidates)
      return invalidArgument(std::string("KIMI_GEMM_TUNING_CANDIDATES='") +
                             env + "': expected a count of 1.." +
                             std::to_string(kMaxTuneCandidates));
    lt->tuneCandidates_ = int(n);
  }
  return lt;
}

CublasLt::~CublasLt() {
  if (api_) {
    for (auto &[key, p] : plans_) {
      for (void *l : p->layouts)
        if (l)
          api_->layoutDestroy(l);
      if (p->desc)
        api_->descDestroy(p->desc);
    }
    if (lt_)
      api_->destroy(lt_);
  }
  if (workspace_)
    (void)device_->driver().cuMemFree(workspace_);
  if (handle_)
    dlclose(handle_);
}

StatusOr<CublasLt::Plan *> CublasLt::plan(const GemmF32 &in,
                                          cuda::CUstream stream) {
  auto key = std::make_tuple(in.m, in.n, in.k, in.batch, in.aM, in.aK, in.aBatch,
                             in.bK, in.bN, in.bBatch, in.cM, in.cN, in.cBatch,
                             int64_t(in.cBf16), in.precision);
  auto found = plans_.find(key);
  if (found != plans_.end())
    return found->second.get();

  // C must be column-major for cuBLASLt; a row-major C computes the
  // transposed product with the operands swapped.
  GemmF32 g = in;
  bool swap = false;
  {
    int64_t r, c, ld;
    bool t;
    if (!columnMajor(g.m, g.n, g.cM, g.cN, r, c, ld, t))
      return invalidArgument("GPU matrix product " + shapeOf(in) +
                             ": C has no unit stride");
    if (t) {
      swap = true;
      GemmF32 s = g;
      s.m = g.n, s.n = g.m;
      s.a = g.b, s.aM = g.bN, s.aK = g.bK, s.aBatch = g.bBatch;
      s.b = g.a, s.bK = g.aK, s.bN = g.aM, s.bBatch = g.aBatch;
      s.cM = g.cN, s.cN = g.cM;
      g = s;
    }
  }
  int64_t aRows, aCols, lda, bRows, bCols, ldb, cRows, cCols, ldc;
  bool aT, bT, cT;
  if (!columnMajor(g.m, g.k, g.aM, g.aK, aRows, aCols, lda, aT) ||
      !columnMajor(g.k, g.n, g.bK, g.bN, bRows, bCols, ldb, bT) ||
      !columnMajor(g.m, g.n, g.cM, g.cN, cRows, cCols, ldc, cT) || cT)
    return invalidArgument("GPU matrix product " + shapeOf(in) +
                           ": an operand has no unit stride");

  auto p = std::make_unique<Plan>();
  p->swap = swap;
  Api &a = *api_;
  if (in.precision < 0 || in.precision > 2)
    return invalidArgument("GPU matrix product " + shapeOf(in) + ": precision " +
                           std::to_string(in.precision) +
                           " (0 f32, 1 TF32, 2 bf16 operands)");
  if (in.cBf16 && (in.precision != 2 || !in.overwrite))
    return invalidArgument("GPU matrix product " + shapeOf(in) +
                           ": a bf16 C needs bf16 operands (precision 2) and "
                           "overwrite (beta = 0)");
  int compute = in.precision == 1 ? kComputeF32FastTf32 : kComputeF32;
  // Precision 2: A and B are bf16 buffers (tensor cores, f32 accumulation
  // and an f32 C, or a bf16 one that the epilogue rounds into); otherwise
  // all three are f32.
  const int operandType = in.precision == 2 ? kDataBf16 : kDataF32;
  const int cType = in.cBf16 ? kDataBf16 : kDataF32;
  if (a.descCreate(&p->desc, compute, kDataF32))
    return executionError("cublasLtMatmulDescCreate failed");
  int32_t ta = aT ? kOpT : kOpN, tb = bT ? kOpT : kOpN;
  a.descSet(p->desc, kDescTransA, &ta, sizeof(ta));
  a.descSet(p->desc, kDescTransB, &tb, sizeof(tb));
  const int64_t dims[3][3] = {{aRows, aCols, lda}, {bRows, bCols, ldb},
                              {cRows, cCols, ldc}};
  const int64_t batchStrides[3] = {g.aBatch, g.bBatch, g.cBatch};
  for (int i = 0; i < 3; ++i) {
    if (a.layoutCreate(&p->layouts[i], i < 2 ? operandType : cType,
                       uint64_t(dims[i][0]),
                       uint64_t(dims[i][1]), dims[i][2]))
      return executionError("cublasLtMatrixLayoutCreate failed for " +
                            shapeOf(in));
    if (g.batch > 1) {
      int32_t count = static_cast<int32_t>(g.batch);
      int64_t stride = batchStrides[i];
      a.layoutSet(p->layouts[i], kLayoutBatchCount, &count, sizeof(count));
      a.layoutSet(p->layouts[i], kLayoutBatchStride, &stride, sizeof(stride));
    }
  }
  void *pref = nullptr;
  a.prefCreate(&pref);
  uint64_t ws = workspaceBytes_;
  a.prefSet(pref, kPrefMaxWorkspace, &ws, sizeof(ws));
  int returned = 0;
  const bool tune = in.tune && tuningMsLeft_ > 0;
  p->candidates.resize(tune ? tuneCandidates_ : 1);
  int st = a.heuristic(lt_, p->desc, p->layouts[0], p->layouts[1],
                       p->layouts[2], p->layouts[2], pref,
                       int(p->candidates.size()), p->candidates.data(),
                       &returned);
  a.prefDestroy(pref);
  if (st || returned < 1)
    return executionError("cuBLASLt has no algorithm for " + shapeOf(in) +
                          " (status " + std::to_string(st) + ")");
  p->candidates.resize(size_t(returned));
  p->count = returned;
  p->algo = p->candidates[0];
  p->shape = shapeOf(in);
  if (tune && returned > 1)
    KIMI_RETURN_IF_ERROR(time(*p, in, reinterpret_cast<const void *>(swap ? in.b : in.a),
                              reinterpret_cast<const void *>(swap ? in.a : in.b),
                              stream));
  p->candidates.clear();
  p->candidates.shrink_to_fit();
  Plan *raw = p.get();
  plans_[key] = std::move(p);
  return raw;
}

Status CublasLt::time(Plan &p, const GemmF32 &g, const void *a, const void *b,
                      cuda::CUstream stream) {
  const CudaDriver &d = device_->driver();
  // A scratch C of the real one's extent: timing must not accumulate into
  // the caller's C.
  int64_t span = cExtent(g);
  cuda::CUdeviceptr scratch = 0;
  KIMI_RETURN_IF_ERROR(d.check(d.cuMemAlloc(&scratch, size_t(span) * 4),
                               "cuMemAlloc (cuBLASLt timing scratch)"));
  cuda::CUevent start = nullptr, stop = nullptr;
  Status status = d.check(d.cuEventCreate(&start, 0), "cuEventCreate");
  if (status.isOk())
    status = d.check(d.cuEventCreate(&stop, 0), "cuEventCreate");
  if (status.isOk())
    status = d.check(d.cuMemsetD32Async(scratch, 0, size_t(span), stream),
                     "cuMemsetD32Async (cuBLASLt timing scratch)");
  const float alpha = 1.0f, beta = 1.0f;
  void *c = reinterpret_cast<void *>(scratch);
  auto run = [&](const HeuristicResult &h) {
    return api_->matmul(lt_, p.desc, &alpha, a, p.layouts[0], b, p.layouts[1],
                        &beta, c, p.layouts[2], c, p.layouts[2], h.algo,
                        reinterpret_cast<void *>(workspace_), workspaceBytes_,
                        stream);
  };
  double best = 0;
  for (size_t i = 0; status.isOk() && i < p.candidates.size(); ++i) {
    const HeuristicResult &h = p.candidates[i];
    if (run(h)) // this algorithm cannot run the shape after all
      continue;
    status = d.check(d.cuEventRecord(start, stream), "cuEventRecord");
    bool ok = status.isOk();
    for (int r = 0; ok && r < kTuneRuns; ++r)
      ok = run(h) == 0;
    if (!status.isOk() || !ok)
      continue;
    status = d.check(d.cuEventRecord(stop, stream), "cuEventRecord");
    if (status.isOk())
      status = d.check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    if (status.isOk())
      status = d.check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    if (!status.isOk())
      break;
    tuningMsLeft_ -= ms * (kTuneRuns + 1.0) / kTuneRuns;
    double us = 1000.0 * ms / kTuneRuns;
    if (i == 0)
      p.heuristicUs = us;
    if (!p.timed || us < best) {
      best = us;
      p.chosen = int(i);
      p.algo = h;
      p.timed = true;
    }
  }
  p.chosenUs = best;
  if (status.isOk())
    status = d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  if (start)
    (void)d.cuEventDestroy(start);
  if (stop)
    (void)d.cuEventDestroy(stop);
  (void)d.cuMemFree(scratch);
  if (status.isOk() && !p.timed)
    return executionError("cuBLASLt: no algorithm of the heuristic's ran " +
                          p.shape);
  return status;
}

Status CublasLt::prepare(const GemmF32 &g, cuda::CUstream stream) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0)
    return Status::ok();
  return plan(g, stream).status();
}

std::string CublasLt::tuningReport() const {
  std::string out;
  char line[160];
  for (const auto &[key, p] : plans_) {
    if (!p->timed)
      continue;
    std::snprintf(line, sizeof(line),
                  ": heuristic %.1f us, candidate %d of %d %.1f us\n",
                  p->heuristicUs, p->chosen, p->count, p->chosenUs);
    out += "  " + p->shape + line;
  }
  return out;
}

Status CublasLt::gemm(const GemmF32 &g, cuda::CUstream stream) {
  if (g.m <= 0 || g.n <= 0 || g.batch <= 0)
    return Status::ok();
  if (g.k <= 0) {
    // An empty sum: C += 0 leaves C; C = 0 must still be written.
    if (!g.overwrite)
      return Status::ok();
    int64_t span = cExtent(g);
    if (span != g.m * g.n * g.batch)
      return invalidArgument("GPU matrix product " + shapeOf(g) +
                             ": k = 0 into a C with gaps");
    const CudaDriver &d = device_->driver();
    if (g.cBf16) // +0.0 is all-zero bytes in bf16 too
      return d.check(d.cuMemsetD8Async(g.c, 0, size_t(span) * 2, stream),
                     "cuMemsetD8Async (product with k = 0)");
    return d.check(d.cuMemsetD32Async(g.c, 0, size_t(span), stream),
                   "cuMemsetD32Async (product with k = 0)");
  }
  KIMI_ASSIGN_OR_RETURN(Plan * p, plan(g, stream));
  const float alpha = 1.0f, beta = g.overwrite ? 0.0f : 1.0f; // C (+)= A B
  const void *a = reinterpret_cast<const void *>(p->swap ? g.b : g.a);
  const void *b = reinterpret_cast<const void *>(p->swap ? g.a : g.b);
  void *c = reinterpret_cast<void *>(g.c);
  int st = api_->matmul(lt_, p->desc, &alpha, a, p->layouts[0], b,
                        p->layouts[1], &beta, c, p->layouts[2], c,
                        p->layouts[2], p->algo.algo,
                        reinterpret_cast<void *>(workspace_), workspaceBytes_,
                        stream);
  if (st)
    return executionError("cublasLtMatmul failed with status " +
                          std::to_string(st) + " for " + shapeOf(g));
  return Status::ok();
}

} // namespace kimi::rt

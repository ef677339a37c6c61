//===- ReferenceOps.h - float64 building blocks of the reference -*- C++ -*-===//
//
// The model's operations in float64 (shared/reference/kimi-k3.md), plain C++
// with no LLVM/MLIR dependency, so GPU tests can link them on machines that
// carry only the runtime. ReferenceModel composes them into the model.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_REFERENCE_REFERENCEOPS_H
#define KIMI_TEST_REFERENCE_REFERENCEOPS_H

#include <cstdint>
#include <optional>
#include <vector>

namespace kimi::reference {

//===----------------------------------------------------------------------===//
// The model's building blocks, exposed for the unit tests. Row-major arrays.
//===----------------------------------------------------------------------===//

namespace ops {

double sigmoid(double x);
/// log(1 + exp(x)), without overflow.
double softplus(double x);
double silu(double x);
/// SiTU(g, u) = [beta tanh(g/beta) sigmoid(g)] * [linearBeta tanh(u/linearBeta)].
double situ(double gate, double up, double beta, double linearBeta);

/// x * rsqrt(mean(x^2) + eps) * w over `n` values.
std::vector<double> rmsNorm(const double *x, int64_t n, const double *w,
                            double eps);
/// x * rsqrt(sum(x^2) + eps), in place.
void l2Normalize(double *x, int64_t n, double eps);

/// KDA log decay of one channel: `L * sigmoid(exp(aLog) * (z + dtBias))` when
/// `lowerBound` = L is set (K3), `-exp(aLog) * softplus(z + dtBias)` otherwise
/// (Kimi Linear).
double kdaGate(double z, double aLog, double dtBias,
               std::optional<double> lowerBound);

/// Depthwise causal convolution of `x : [T, C]` with the HF weight
/// `w : [C, 1, K]` (tap K-1 multiplies the current token) over the extended
/// sequence `state ++ x`; `state : [K-1, C]` holds the previous K-1 inputs
/// and is replaced by the last K-1 inputs of the extended sequence. Returns
/// the pre-activation output `[T, C]`.
std::vector<double> shortConv(const std::vector<double> &x, int64_t T,
                              int64_t C, const double *w, int64_t K,
                              std::vector<double> &state);

/// The KDA recurrence of one head over T tokens (§2), from and into the state
/// `S : [dk, dv]`: q, k, g `[T, dk]`, v `[T, dv]`, beta `[T]`. Returns o
/// `[T, dv]` (read after the update).
std::vector<double> kdaRecurrent(const double *q, const double *k,
                                 const double *v, const double *g,
                                 const double *beta, int64_t T, int64_t dk,
                                 int64_t dv, double scale,
                                 std::vector<double> &S);

/// Causal softmax attention of one head: queries `q : [T, dq]` sit at
/// positions S-T .. S-1 of keys `k : [S, dq]` and values `v : [S, dv]`; query
/// t sees keys 0 .. S-T+t. Returns `[T, dv]`.
std::vector<double> causalAttention(const double *q, int64_t T,
                                    const double *k, const double *v,
                                    int64_t S, int64_t dq, int64_t dv,
                                    double scale);

/// AttnRes mixing (§4) of sources `v_i : [D]` of one token with norm weight
/// `norm : [D]` and pseudo-query `query : [D]`. The softmax weights are
/// stored in `weights` when given.
std::vector<double> attnResMix(const std::vector<const double *> &sources,
                               int64_t D, const double *norm,
                               const double *query, double eps,
                               std::vector<double> *weights = nullptr);

struct Routing {
  std::vector<int64_t> experts; // by descending biased score, ties lower first
  std::vector<double> weights;
};

/// Routes one token (§5) from its unbiased sigmoid scores `scores : [E]`:
/// selection by `scores + bias`, weights from `scores` (renormalised with
/// 1e-20 in the denominator when `renormalize`), times `scaling`.
Routing route(const std::vector<double> &scores, const double *bias,
              int64_t topK, bool renormalize, double scaling);

} // namespace ops

} // namespace kimi::reference

#endif

//===- ReferenceOps.cpp - float64 building blocks of the reference --------===//

#include "test/reference/ReferenceOps.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kimi::reference {

//===----------------------------------------------------------------------===//
// Building blocks
//===----------------------------------------------------------------------===//

double ops::sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double ops::softplus(double x) {
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

double ops::silu(double x) { return x * sigmoid(x); }

double ops::situ(double gate, double up, double beta, double linearBeta) {
  return beta * std::tanh(gate / beta) * sigmoid(gate) * linearBeta *
         std::tanh(up / linearBeta);
}

std::vector<double> ops::rmsNorm(const double *x, int64_t n, const double *w,
                                 double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i)
    ss += x[i] * x[i];
  double r = 1.0 / std::sqrt(ss / double(n) + eps);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i)
    out[i] = x[i] * r * w[i];
  return out;
}

void ops::l2Normalize(double *x, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i)
    ss += x[i] * x[i];
  double r = 1.0 / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i)
    x[i] *= r;
}

double ops::kdaGate(double z, double aLog, double dtBias,
                    std::optional<double> lowerBound) {
  if (lowerBound) // §2: the bound replaces the activation, it is no clamp
    return *lowerBound * sigmoid(std::exp(aLog) * (z + dtBias));
  return -std::exp(aLog) * softplus(z + dtBias);
}

std::vector<double> ops::shortConv(const std::vector<double> &x, int64_t T,
                                   int64_t C, const double *w, int64_t K,
                                   std::vector<double> &state) {
  // ext = state (K-1 rows) ++ x (T rows); output t reads ext rows t .. t+K-1,
  // the last of which (tap K-1) is the current token.
  std::vector<double> ext(state);
  ext.insert(ext.end(), x.begin(), x.end());
  std::vector<double> y(T * C, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j)
        acc += w[c * K + j] * ext[(t + j) * C + c];
      y[t * C + c] = acc;
    }
  state.assign(ext.end() - (K - 1) * C, ext.end());
  return y;
}

std::vector<double> ops::kdaRecurrent(const double *q, const double *k,
                                      const double *v, const double *g,
                                      const double *beta, int64_t T,
                                      int64_t dk, int64_t dv, double scale,
                                      std::vector<double> &S) {
  std::vector<double> o(T * dv), u(dv);
  for (int64_t t = 0; t < T; ++t) {
    const double *qt = q + t * dk, *kt = k + t * dk, *vt = v + t * dv,
                 *gt = g + t * dk;
    // S' = Diag(exp(g_t)) S: row i of S belongs to key channel i.
    for (int64_t i = 0; i < dk; ++i) {
      double a = std::exp(gt[i]);
      for (int64_t j = 0; j < dv; ++j)
        S[i * dv + j] *= a;
    }
    // u_t = beta_t (v_t - S'^T k_t)
    for (int64_t j = 0; j < dv; ++j) {
      double sk = 0;
      for (int64_t i = 0; i < dk; ++i)
        sk += S[i * dv + j] * kt[i];
      u[j] = beta[t] * (vt[j] - sk);
    }
    // S = S' + k_t u_t^T
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j)
        S[i * dv + j] += kt[i] * u[j];
    // o_t = scale S^T q_t
    for (int64_t j = 0; j < dv; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < dk; ++i)
        acc += S[i * dv + j] * qt[i];
      o[t * dv + j] = scale * acc;
    }
  }
  return o;
}

std::vector<double> ops::causalAttention(const double *q, int64_t T,
                                         const double *k, const double *v,
                                         int64_t S, int64_t dq, int64_t dv,
                                         double scale) {
  std::vector<double> o(T * dv, 0.0), p;
  for (int64_t t = 0; t < T; ++t) {
    int64_t visible = S - T + t + 1; // keys 0 .. S-T+t
    p.assign(visible, 0.0);
    double mx = -INFINITY;
    for (int64_t s = 0; s < visible; ++s) {
      double dot = 0;
      for (int64_t d = 0; d < dq; ++d)
        dot += q[t * dq + d] * k[s * dq + d];
      p[s] = dot * scale;
      mx = std::max(mx, p[s]);
    }
    double sum = 0;
    for (int64_t s = 0; s < visible; ++s)
      sum += p[s] = std::exp(p[s] - mx);
    for (int64_t s = 0; s < visible; ++s)
      for (int64_t d = 0; d < dv; ++d)
        o[t * dv + d] += p[s] / sum * v[s * dv + d];
  }
  return o;
}

std::vector<double> ops::attnResMix(const std::vector<const double *> &sources,
                                    int64_t D, const double *norm,
                                    const double *query, double eps,
                                    std::vector<double> *weights) {
  const size_t n = sources.size();
  std::vector<double> score(n);
  double mx = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    // score_i = sum_d v_i,d * rsqrt(mean_d(v_i^2) + eps) * gamma_d * w_d
    std::vector<double> normed = rmsNorm(sources[i], D, norm, eps);
    double s = 0;
    for (int64_t d = 0; d < D; ++d)
      s += normed[d] * query[d];
    score[i] = s;
    mx = std::max(mx, s);
  }
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += score[i] = std::exp(score[i] - mx);
  for (size_t i = 0; i < n; ++i)
    score[i] /= sum;
  // mix = sum_i softmax_i(score) v_i (values are not normalised)
  std::vector<double> out(D, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d)
      out[d] += score[i] * sources[i][d];
  if (weights)
    *weights = score;
  return out;
}

ops::Routing ops::route(const std::vector<double> &scores, const double *bias,
                        int64_t topK, bool renormalize, double scaling) {
  const int64_t E = scores.size();
  std::vector<int64_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  // idx = top_k(s + b): descending biased score, equal scores to the lower
  // expert index.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return scores[a] + bias[a] > scores[b] + bias[b];
  });
  Routing r;
  r.experts.assign(order.begin(), order.begin() + topK);
  double sum = 0;
  for (int64_t e : r.experts)
    sum += scores[e];
  for (int64_t e : r.experts)
    r.weights.push_back((renormalize ? scores[e] / (sum + 1e-20) : scores[e]) *
                        scaling);
  return r;
}

} // namespace kimi::reference

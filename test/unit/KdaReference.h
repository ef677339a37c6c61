//===- KdaReference.h - recurrent float64 reference of KDA ------*- C++ -*-===//
//
// Written directly from the recurrence of shared/reference/kimi-k3.md §2 and
// nothing else (no chunking, no cumsum, no inverse), so that it is an
// independent check of the chunked lowering:
//
//   S'  = Diag(exp(g_t)) S
//   u_t = beta_t (v_t - S'^T k_t)
//   S   = S' + k_t u_t^T
//   o_t = scale S^T q_t
//
// Layouts: q, k, g [B, T, H, dk]; v, out [B, T, H, dv]; beta [B, T, H];
// states [B, H, dk, dv]; all row-major.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_UNIT_KDAREFERENCE_H
#define KIMI_TEST_UNIT_KDAREFERENCE_H

#include <cmath>
#include <cstdint>
#include <vector>

namespace kimi::test {

struct KdaShape {
  int64_t B, T, H, dk, dv;
  int64_t qkSize() const { return B * T * H * dk; }
  int64_t vSize() const { return B * T * H * dv; }
  int64_t betaSize() const { return B * T * H; }
  int64_t stateSize() const { return B * H * dk * dv; }
};

/// Runs the recurrence in double precision. `initialState` may be null
/// (zeros). Fills `out` (vSize) and `finalState` (stateSize).
inline void kdaRecurrentReference(const KdaShape &s, const float *q,
                                  const float *k, const float *v,
                                  const float *g, const float *beta,
                                  const float *initialState, double scale,
                                  std::vector<double> &out,
                                  std::vector<double> &finalState) {
  out.assign(s.vSize(), 0.0);
  finalState.assign(s.stateSize(), 0.0);
  std::vector<double> S(s.dk * s.dv), u(s.dv);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t i = 0; i < s.dk * s.dv; ++i)
        S[i] = initialState ? initialState[((b * s.H + h) * s.dk) * s.dv + i]
                            : 0.0;
      for (int64_t t = 0; t < s.T; ++t) {
        int64_t tok = (b * s.T + t) * s.H + h; // row of [B, T, H]
        const float *qt = q + tok * s.dk, *kt = k + tok * s.dk;
        const float *gt = g + tok * s.dk, *vt = v + tok * s.dv;
        double bt = beta[tok];
        // S' = Diag(exp(g_t)) S
        for (int64_t d = 0; d < s.dk; ++d) {
          double a = std::exp(static_cast<double>(gt[d]));
          for (int64_t e = 0; e < s.dv; ++e)
            S[d * s.dv + e] *= a;
        }
        // u_t = beta_t (v_t - S'^T k_t)
        for (int64_t e = 0; e < s.dv; ++e) {
          double acc = 0.0;
          for (int64_t d = 0; d < s.dk; ++d)
            acc += S[d * s.dv + e] * kt[d];
          u[e] = bt * (vt[e] - acc);
        }
        // S = S' + k_t u_t^T
        for (int64_t d = 0; d < s.dk; ++d)
          for (int64_t e = 0; e < s.dv; ++e)
            S[d * s.dv + e] += kt[d] * u[e];
        // o_t = scale S^T q_t
        for (int64_t e = 0; e < s.dv; ++e) {
          double acc = 0.0;
          for (int64_t d = 0; d < s.dk; ++d)
            acc += S[d * s.dv + e] * qt[d];
          out[tok * s.dv + e] = scale * acc;
        }
      }
      for (int64_t i = 0; i < s.dk * s.dv; ++i)
        finalState[((b * s.H + h) * s.dk) * s.dv + i] = S[i];
    }
  }
}

} // namespace kimi::test

#endif // KIMI_TEST_UNIT_KDAREFERENCE_H

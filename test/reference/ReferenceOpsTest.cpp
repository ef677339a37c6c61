//===- ReferenceOpsTest.cpp - the reference model's building blocks -------===//
//
// Each mechanism of the reference against a hand-worked case or a property
// that holds whatever the implementation strategy (chunking, absorption):
// KDA (§2), MLA (§3), AttnRes (§4), the router and SiTU (§5).
//
//===----------------------------------------------------------------------===//

#include "test/reference/RandomWeights.h"
#include "test/reference/ReferenceModel.h"
#include "gtest/gtest.h"
#include <cmath>

using namespace kimi::reference;

namespace {

/// Uniform values in [-1, 1) from a seeded stream.
std::vector<double> randomVector(int64_t n, uint64_t seed, double lo = -1.0,
                                 double hi = 1.0) {
  SplitMix64 rng{seed};
  std::vector<double> v(n);
  for (double &x : v)
    x = lo + (hi - lo) * rng.uniform();
  return v;
}

double maxAbsDiff(const std::vector<double> &a, const std::vector<double> &b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

//===----------------------------------------------------------------------===//
// KDA (§2)
//===----------------------------------------------------------------------===//

TEST(Kda, HandWorkedTwoTokens) {
  // dk = dv = 2, zero initial state, scale = dk^-0.5.
  //   t=0: k=[1,0], v=[2,4], beta=.5: u=[1,2], S=[[1,2],[0,0]]; q=[1,1]:
  //        o = s*[1,2]
  //   t=1: decay [.5,.25] on key rows: S'=[[.5,1],[0,0]]; k=[.6,.8]:
  //        S'^T k=[.3,.6], v=[1,0], beta=1: u=[.7,-.6];
  //        S=[[.92,.64],[.56,-.48]]; q=[0,1]: o = s*[.56,-.48]
  const double s = 1.0 / std::sqrt(2.0);
  std::vector<double> q = {1, 1, 0, 1}, k = {1, 0, 0.6, 0.8},
                      v = {2, 4, 1, 0}, beta = {0.5, 1.0},
                      g = {std::log(0.5), std::log(0.5), std::log(0.5),
                           std::log(0.25)};
  std::vector<double> S(4, 0.0);
  std::vector<double> o = ops::kdaRecurrent(q.data(), k.data(), v.data(),
                                            g.data(), beta.data(), 2, 2, 2, s,
                                            S);
  std::vector<double> oWant = {s * 1, s * 2, s * 0.56, s * -0.48};
  std::vector<double> sWant = {0.92, 0.64, 0.56, -0.48};
  EXPECT_LT(maxAbsDiff(o, oWant), 1e-14);
  EXPECT_LT(maxAbsDiff(S, sWant), 1e-14);
}

TEST(Kda, BetaZeroOnlyDecaysTheState) {
  const int64_t T = 7, dk = 5, dv = 3;
  std::vector<double> S0 = randomVector(dk * dv, 1), S = S0;
  std::vector<double> q = randomVector(T * dk, 2), k = randomVector(T * dk, 3),
                      v = randomVector(T * dv, 4),
                      g = randomVector(T * dk, 5, -2.0, 0.0),
                      beta(T, 0.0);
  std::vector<double> o = ops::kdaRecurrent(q.data(), k.data(), v.data(),
                                            g.data(), beta.data(), T, dk, dv,
                                            0.5, S);
  std::vector<double> expect = S0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j)
        expect[i * dv + j] *= std::exp(g[t * dk + i]);
    for (int64_t j = 0; j < dv; ++j) {
      double read = 0;
      for (int64_t i = 0; i < dk; ++i)
        read += expect[i * dv + j] * q[t * dk + i];
      EXPECT_NEAR(o[t * dv + j], 0.5 * read, 1e-14);
    }
  }
  EXPECT_LT(maxAbsDiff(S, expect), 1e-14);
}

/// Rows of an orthonormal basis of R^n (Gram-Schmidt of random vectors).
std::vector<double> orthonormalRows(int64_t n, uint64_t seed) {
  std::vector<double> m = randomVector(n * n, seed);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < n; ++d)
        dot += m[i * n + d] * m[j * n + d];
      for (int64_t d = 0; d < n; ++d)
        m[i * n + d] -= dot * m[j * n + d];
    }
    ops::l2Normalize(&m[i * n], n, 0.0);
  }
  return m;
}

TEST(Kda, DeltaRuleStoresValuesOfOrthonormalKeysExactly) {
  // g = 0 (no decay), beta = 1: writing an orthonormal basis of keys makes
  // S^T k_i = v_i whatever the initial state, and reading with q = k_i
  // returns scale * v_i.
  const int64_t dk = 6, dv = 4;
  std::vector<double> keys = orthonormalRows(dk, 11);
  std::vector<double> v = randomVector(dk * dv, 12), g(dk * dk, 0.0),
                      beta(dk, 1.0);
  std::vector<double> S = randomVector(dk * dv, 13);
  ops::kdaRecurrent(keys.data(), keys.data(), v.data(), g.data(), beta.data(),
                    dk, dk, dv, 1.0, S);
  // Read every key without writing (beta = 0).
  std::vector<double> zeroBeta(dk, 0.0);
  std::vector<double> o =
      ops::kdaRecurrent(keys.data(), keys.data(), v.data(), g.data(),
                        zeroBeta.data(), dk, dk, dv, 0.25, S);
  for (int64_t i = 0; i < dk * dv; ++i)
    EXPECT_NEAR(o[i], 0.25 * v[i], 1e-13);
}

TEST(Kda, DeltaRuleOverwritesTheValueOfARepeatedKey) {
  const int64_t dk = 3, dv = 2;
  std::vector<double> k = {0.6, 0.0, 0.8, 0.6, 0.0, 0.8};
  std::vector<double> v = {1.0, -2.0, 5.0, 7.0}, g(2 * dk, 0.0),
                      beta = {1.0, 1.0};
  std::vector<double> S(dk * dv, 0.0);
  std::vector<double> o = ops::kdaRecurrent(k.data(), k.data(), v.data(),
                                            g.data(), beta.data(), 2, dk, dv,
                                            1.0, S);
  EXPECT_NEAR(o[2], 5.0, 1e-14);
  EXPECT_NEAR(o[3], 7.0, 1e-14);
}

/// §2's chunked form, written here from the doc (C-token chunks, UT transform
/// with the Neumann-product inverse), must reproduce the recurrence.
TEST(Kda, ChunkedFormOfTheDocMatchesTheRecurrence) {
  const int64_t T = 40, dk = 8, dv = 6, C = 16;
  const double scale = 1.0 / std::sqrt(double(dk));
  std::vector<double> q = randomVector(T * dk, 21), k = randomVector(T * dk, 22),
                      v = randomVector(T * dv, 23),
                      g = randomVector(T * dk, 24, -5.0, 0.0), // (L, 0), L=-5
                      beta = randomVector(T, 25, 0.0, 1.0);
  for (int64_t t = 0; t < T; ++t) {
    ops::l2Normalize(&q[t * dk], dk, 1e-6);
    ops::l2Normalize(&k[t * dk], dk, 1e-6);
  }
  std::vector<double> S0 = randomVector(dk * dv, 26);
  std::vector<double> Sr = S0;
  std::vector<double> oRec = ops::kdaRecurrent(
      q.data(), k.data(), v.data(), g.data(), beta.data(), T, dk, dv, scale,
      Sr);

  std::vector<double> S = S0, oChunk(T * dv, 0.0);
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0); // the last chunk is partial
    // G: inclusive cumsum of g inside the chunk.
    std::vector<double> G(n * dk);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < dk; ++d)
        G[i * dk + d] = g[(c0 + i) * dk + d] + (i ? G[(i - 1) * dk + d] : 0.0);
    auto K = [&](int64_t i, int64_t d) { return k[(c0 + i) * dk + d]; };
    auto Q = [&](int64_t i, int64_t d) { return q[(c0 + i) * dk + d]; };
    // N = Akk (strictly lower), Tm = (I + N)^-1 = (I-N)(I+N^2)(I+N^4)(I+N^8)
    // on C x C (the chunk is padded with zero rows to C).
    std::vector<double> N(C * C, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < dk; ++d)
          acc += K(i, d) * std::exp(G[i * dk + d] - G[j * dk + d]) * K(j, d);
        N[i * C + j] = beta[c0 + i] * acc;
      }
    auto matmul = [&](const std::vector<double> &a,
                      const std::vector<double> &b) {
      std::vector<double> r(C * C, 0.0);
      for (int64_t i = 0; i < C; ++i)
        for (int64_t l = 0; l < C; ++l)
          for (int64_t j = 0; j < C; ++j)
            r[i * C + j] += a[i * C + l] * b[l * C + j];
      return r;
    };
    auto plusI = [&](std::vector<double> a, double sign) {
      for (double &x : a)
        x *= sign;
      for (int64_t i = 0; i < C; ++i)
        a[i * C + i] += 1.0;
      return a;
    };
    std::vector<double> N2 = matmul(N, N), N4 = matmul(N2, N2),
                        N8 = matmul(N4, N4);
    std::vector<double> Tm =
        matmul(matmul(plusI(N, -1.0), plusI(N2, 1.0)),
               matmul(plusI(N4, 1.0), plusI(N8, 1.0)));
    // W = Tm Diag(beta) (exp(G) . K), U = Tm Diag(beta) V.
    std::vector<double> Wm(n * dk, 0.0), U(n * dv, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double t = Tm[i * C + j] * beta[c0 + j];
        for (int64_t d = 0; d < dk; ++d)
          Wm[i * dk + d] += t * std::exp(G[j * dk + d]) * K(j, d);
        for (int64_t d = 0; d < dv; ++d)
          U[i * dv + d] += t * v[(c0 + j) * dv + d];
      }
    // V_new = U - W S.
    std::vector<double> Vnew = U;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < dv; ++e)
        for (int64_t d = 0; d < dk; ++d)
          Vnew[i * dv + e] -= Wm[i * dk + d] * S[d * dv + e];
    // O = scale (exp(G) . Q) S + Aqk V_new.
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t e = 0; e < dv; ++e) {
        double acc = 0;
        for (int64_t d = 0; d < dk; ++d)
          acc += std::exp(G[i * dk + d]) * Q(i, d) * S[d * dv + e];
        oChunk[(c0 + i) * dv + e] = scale * acc;
      }
      for (int64_t j = 0; j <= i; ++j) {
        double a = 0;
        for (int64_t d = 0; d < dk; ++d)
          a += Q(i, d) * std::exp(G[i * dk + d] - G[j * dk + d]) * K(j, d);
        for (int64_t e = 0; e < dv; ++e)
          oChunk[(c0 + i) * dv + e] += scale * a * Vnew[j * dv + e];
      }
    }
    // S = Diag(exp(G_last)) S + (exp(G_last - G) . K)^T V_new.
    const double *Glast = &G[(n - 1) * dk];
    for (int64_t d = 0; d < dk; ++d)
      for (int64_t e = 0; e < dv; ++e) {
        double acc = std::exp(Glast[d]) * S[d * dv + e];
        for (int64_t j = 0; j < n; ++j)
          acc += std::exp(Glast[d] - G[j * dk + d]) * K(j, d) *
                 Vnew[j * dv + e];
        S[d * dv + e] = acc;
      }
  }
  EXPECT_LT(maxAbsDiff(oChunk, oRec), 1e-12);
  EXPECT_LT(maxAbsDiff(S, Sr), 1e-12);
}

TEST(Kda, GateForms) {
  // Lower-bounded (K3): L * sigmoid(exp(A_log) (z + dt)), inside (L, 0).
  EXPECT_DOUBLE_EQ(ops::kdaGate(0.3, 0.7, -0.3, -5.0), -2.5);
  EXPECT_NEAR(ops::kdaGate(1.0, std::log(2.0), 0.5, -5.0),
              -5.0 / (1.0 + std::exp(-3.0)), 1e-15);
  EXPECT_GT(ops::kdaGate(1e6, 0.0, 0.0, -5.0), -5.0 - 1e-12);
  EXPECT_LE(ops::kdaGate(-1e6, 0.0, 0.0, -5.0), 0.0);
  // Softplus (Kimi Linear): -exp(A_log) softplus(z + dt).
  EXPECT_NEAR(ops::kdaGate(0.2, std::log(3.0), -0.2, std::nullopt),
              -3.0 * std::log(2.0), 1e-15);
  EXPECT_NEAR(ops::kdaGate(800.0, 0.0, 0.0, std::nullopt), -800.0, 1e-12);
  double tiny = ops::kdaGate(-800.0, 0.0, 0.0, std::nullopt);
  EXPECT_LE(tiny, 0.0);
  EXPECT_TRUE(std::isfinite(tiny));
}

TEST(Kda, ShortConvTapKMinus1IsTheCurrentToken) {
  // One channel, K = 3, w = [1, 2, 3]: y_t = x_{t-2} + 2 x_{t-1} + 3 x_t.
  std::vector<double> w = {1, 2, 3}, x = {1, 10, 100}, state(2, 0.0);
  std::vector<double> y = ops::shortConv(x, 3, 1, w.data(), 3, state);
  EXPECT_EQ(y, (std::vector<double>{3, 32, 321}));
  EXPECT_EQ(state, (std::vector<double>{10, 100}));
  // Split in two calls through the state.
  std::vector<double> s2(2, 0.0);
  std::vector<double> y1 = ops::shortConv({1, 10}, 2, 1, w.data(), 3, s2);
  std::vector<double> y2 = ops::shortConv({100}, 1, 1, w.data(), 3, s2);
  EXPECT_EQ(y1, (std::vector<double>{3, 32}));
  EXPECT_EQ(y2, (std::vector<double>{321}));
  EXPECT_EQ(s2, state);
}

TEST(Kda, L2NormUsesSumNotMean) {
  std::vector<double> x = {3.0, 4.0};
  ops::l2Normalize(x.data(), 2, 1e-6);
  EXPECT_NEAR(x[0], 3.0 / std::sqrt(25.0 + 1e-6), 1e-16);
  EXPECT_NEAR(x[1], 4.0 / std::sqrt(25.0 + 1e-6), 1e-16);
}

//===----------------------------------------------------------------------===//
// MLA (§3)
//===----------------------------------------------------------------------===//

TEST(Mla, CausalMask) {
  const int64_t T = 9, dq = 5, dv = 4;
  std::vector<double> q = randomVector(T * dq, 31), k = randomVector(T * dq, 32),
                      v = randomVector(T * dv, 33);
  std::vector<double> o =
      ops::causalAttention(q.data(), T, k.data(), v.data(), T, dq, dv, 0.7);
  for (int64_t t = 0; t + 1 < T; ++t) {
    // Change every token after t (query, key and value).
    std::vector<double> q2 = q, k2 = k, v2 = v;
    for (int64_t i = (t + 1) * dq; i < T * dq; ++i) {
      q2[i] += 3.0;
      k2[i] -= 2.0;
    }
    for (int64_t i = (t + 1) * dv; i < T * dv; ++i)
      v2[i] *= -5.0;
    std::vector<double> o2 = ops::causalAttention(q2.data(), T, k2.data(),
                                                  v2.data(), T, dq, dv, 0.7);
    for (int64_t i = 0; i < (t + 1) * dv; ++i)
      EXPECT_EQ(o[i], o2[i]) << "t=" << t;
    bool changed = false;
    for (int64_t i = (t + 1) * dv; i < T * dv; ++i)
      changed |= o[i] != o2[i];
    EXPECT_TRUE(changed);
  }
  // The first token attends to itself only.
  for (int64_t d = 0; d < dv; ++d)
    EXPECT_DOUBLE_EQ(o[d], v[d]);
}

TEST(Mla, QueriesAtTheEndOfACachedPrefix) {
  // T queries over S >= T keys are the last T rows of the full causal result.
  const int64_t S = 8, T = 3, dq = 4, dv = 3;
  std::vector<double> q = randomVector(S * dq, 41), k = randomVector(S * dq, 42),
                      v = randomVector(S * dv, 43);
  std::vector<double> full =
      ops::causalAttention(q.data(), S, k.data(), v.data(), S, dq, dv, 0.5);
  std::vector<double> tail = ops::causalAttention(
      q.data() + (S - T) * dq, T, k.data(), v.data(), S, dq, dv, 0.5);
  for (int64_t i = 0; i < T * dv; ++i)
    EXPECT_EQ(tail[i], full[(S - T) * dv + i]);
}

/// The absorbed decode form (§3: fold W_uk into q, attend over the cache rows
/// [ckv | k_pe] with one KV head, apply W_uv after), written here, equals the
/// materialised form the reference uses.
TEST(Mla, AbsorbedFormEqualsMaterialised) {
  const int64_t H = 3, dn = 6, dr = 4, dv = 5, Rk = 7, S = 10, T = 4;
  const int64_t dq = dn + dr;
  const double scale = 1.0 / std::sqrt(double(dq));
  std::vector<double> q = randomVector(T * H * dq, 51);
  std::vector<double> ckv = randomVector(S * Rk, 52), kpe = randomVector(S * dr, 53);
  std::vector<double> kvb = randomVector(H * (dn + dv) * Rk, 54);
  for (int64_t h = 0; h < H; ++h) {
    const double *uk = &kvb[h * (dn + dv) * Rk], *uv = uk + dn * Rk;
    // Materialised: k = [W_uk ckv | k_pe], v = W_uv ckv.
    std::vector<double> K(S * dq), V(S * dv), qh(T * dq);
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t i = 0; i < dn; ++i) {
        K[s * dq + i] = 0;
        for (int64_t r = 0; r < Rk; ++r)
          K[s * dq + i] += uk[i * Rk + r] * ckv[s * Rk + r];
      }
      for (int64_t i = 0; i < dr; ++i)
        K[s * dq + dn + i] = kpe[s * dr + i];
      for (int64_t i = 0; i < dv; ++i) {
        V[s * dv + i] = 0;
        for (int64_t r = 0; r < Rk; ++r)
          V[s * dv + i] += uv[i * Rk + r] * ckv[s * Rk + r];
      }
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < dq; ++d)
        qh[t * dq + d] = q[(t * H + h) * dq + d];
    std::vector<double> materialised = ops::causalAttention(
        qh.data(), T, K.data(), V.data(), S, dq, dv, scale);

    // Absorbed.
    for (int64_t t = 0; t < T; ++t) {
      const double *qt = &qh[t * dq];
      std::vector<double> qLatent(Rk, 0.0); // q_nope W_uk
      for (int64_t r = 0; r < Rk; ++r)
        for (int64_t i = 0; i < dn; ++i)
          qLatent[r] += qt[i] * uk[i * Rk + r];
      const int64_t visible = S - T + t + 1;
      std::vector<double> p(visible);
      double mx = -INFINITY;
      for (int64_t s = 0; s < visible; ++s) {
        double dot = 0;
        for (int64_t r = 0; r < Rk; ++r)
          dot += qLatent[r] * ckv[s * Rk + r];
        for (int64_t i = 0; i < dr; ++i)
          dot += qt[dn + i] * kpe[s * dr + i];
        p[s] = dot * scale;
        mx = std::max(mx, p[s]);
      }
      double sum = 0;
      for (double &x : p)
        sum += x = std::exp(x - mx);
      std::vector<double> latent(Rk, 0.0);
      for (int64_t s = 0; s < visible; ++s)
        for (int64_t r = 0; r < Rk; ++r)
          latent[r] += p[s] / sum * ckv[s * Rk + r];
      for (int64_t i = 0; i < dv; ++i) {
        double o = 0;
        for (int64_t r = 0; r < Rk; ++r)
          o += uv[i * Rk + r] * latent[r];
        EXPECT_NEAR(o, materialised[t * dv + i], 1e-12) << "h=" << h;
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// AttnRes (§4)
//===----------------------------------------------------------------------===//

TEST(AttnRes, OneSourceReturnsThatSource) {
  const int64_t D = 16;
  std::vector<double> v = randomVector(D, 61), norm = randomVector(D, 62),
                      query = randomVector(D, 63), weights;
  std::vector<double> out =
      ops::attnResMix({v.data()}, D, norm.data(), query.data(), 1e-5, &weights);
  EXPECT_EQ(out, v);
  EXPECT_EQ(weights, std::vector<double>{1.0});
}

TEST(AttnRes, SoftmaxWeightsSumToOneAndMixValuesUnnormalised) {
  const int64_t D = 12, n = 5;
  std::vector<std::vector<double>> src;
  std::vector<const double *> ptrs;
  for (int64_t i = 0; i < n; ++i)
    src.push_back(randomVector(D, 70 + i, -3.0, 3.0));
  for (auto &s : src)
    ptrs.push_back(s.data());
  std::vector<double> norm = randomVector(D, 80, 0.5, 1.5),
                      query = randomVector(D, 81, -2.0, 2.0), weights;
  std::vector<double> out =
      ops::attnResMix(ptrs, D, norm.data(), query.data(), 1e-5, &weights);
  ASSERT_EQ(weights.size(), size_t(n));
  double sum = 0, wmin = 1, wmax = 0;
  for (double w : weights) {
    sum += w;
    wmin = std::min(wmin, w);
    wmax = std::max(wmax, w);
  }
  EXPECT_NEAR(sum, 1.0, 1e-15);
  EXPECT_LT(wmin, wmax); // the scores do discriminate
  // The scores, by hand.
  std::vector<double> score(n);
  for (int64_t i = 0; i < n; ++i) {
    double ms = 0;
    for (double x : src[i])
      ms += x * x / D;
    for (int64_t d = 0; d < D; ++d)
      score[i] += src[i][d] / std::sqrt(ms + 1e-5) * norm[d] * query[d];
  }
  for (int64_t i = 1; i < n; ++i)
    EXPECT_NEAR(std::log(weights[i] / weights[0]), score[i] - score[0], 1e-12);
  for (int64_t d = 0; d < D; ++d) {
    double want = 0;
    for (int64_t i = 0; i < n; ++i)
      want += weights[i] * src[i][d];
    EXPECT_NEAR(out[d], want, 1e-14);
  }
  // A source's score ignores its scale (its values are normalised), but its
  // contribution to the mix does not.
  std::vector<double> scaled = src[2];
  for (double &x : scaled)
    x *= 10.0;
  ptrs[2] = scaled.data();
  std::vector<double> weights2;
  ops::attnResMix(ptrs, D, norm.data(), query.data(), 1e-5, &weights2);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(weights2[i], weights[i], 1e-6);
}

//===----------------------------------------------------------------------===//
// Router and SiTU (§5)
//===----------------------------------------------------------------------===//

TEST(Router, TiesGoToTheLowerIndex) {
  std::vector<double> s(6, 0.5), bias(6, 0.0);
  ops::Routing r = ops::route(s, bias.data(), 3, true, 1.0);
  EXPECT_EQ(r.experts, (std::vector<int64_t>{0, 1, 2}));
  // A tie at the boundary of the top-k: experts 3 and 5 both score 0.6.
  s = {0.1, 0.9, 0.2, 0.6, 0.3, 0.6};
  r = ops::route(s, bias.data(), 2, true, 1.0);
  EXPECT_EQ(r.experts, (std::vector<int64_t>{1, 3}));
  // Ties created by the bias.
  s = {0.5, 0.4, 0.3, 0.2};
  bias = {0.0, 0.1, 0.2, 0.3};
  r = ops::route(s, bias.data(), 4, false, 1.0);
  EXPECT_EQ(r.experts, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(Router, OrderByBiasedScoreWeightsFromUnbiasedScores) {
  std::vector<double> s = {0.9, 0.5, 0.3, 0.7}, bias = {0.0, 0.6, 0.0, 0.0};
  // Biased: [0.9, 1.1, 0.3, 0.7] -> top-2 = [1, 0].
  ops::Routing r = ops::route(s, bias.data(), 2, true, 2.0);
  EXPECT_EQ(r.experts, (std::vector<int64_t>{1, 0}));
  EXPECT_DOUBLE_EQ(r.weights[0], 0.5 / (1.4 + 1e-20) * 2.0);
  EXPECT_DOUBLE_EQ(r.weights[1], 0.9 / (1.4 + 1e-20) * 2.0);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 2.0, 1e-15); // renormalised
  // Without renormalisation: s[idx] * scaling.
  r = ops::route(s, bias.data(), 2, false, 2.0);
  EXPECT_DOUBLE_EQ(r.weights[0], 1.0);
  EXPECT_DOUBLE_EQ(r.weights[1], 1.8);
}

TEST(Router, RenormalisationOfVanishingScoresStaysFinite) {
  // sigmoid(-800) is 0 in double: the 1e-20 keeps 0/0 away.
  std::vector<double> s = {ops::sigmoid(-800.0), ops::sigmoid(-800.0), 0.0};
  std::vector<double> bias = {0.0, 0.0, 0.0};
  ops::Routing r = ops::route(s, bias.data(), 2, true, 1.0);
  EXPECT_EQ(r.weights, (std::vector<double>{0.0, 0.0}));
}

TEST(Situ, FormulaAndBound) {
  const double g = 1.3, u = -7.0;
  EXPECT_DOUBLE_EQ(ops::situ(g, u, 4.0, 25.0),
                   4.0 * std::tanh(g / 4.0) / (1.0 + std::exp(-g)) * 25.0 *
                       std::tanh(u / 25.0));
  EXPECT_LE(std::abs(ops::situ(1e4, -1e4, 4.0, 25.0)), 100.0);
  EXPECT_NEAR(ops::situ(1e4, 1e4, 4.0, 25.0), 100.0, 1e-12);
  EXPECT_DOUBLE_EQ(ops::silu(2.0), 2.0 / (1.0 + std::exp(-2.0)));
}

} // namespace

//===- ReferenceModel.cpp - float64 reference forward pass ----------------===//
//
// Plain loops in double, one mechanism per function, each citing the section
// of shared/reference/kimi-k3.md it implements. Speed is not a goal beyond
// keeping the tiny test models well under a second.
//
//===----------------------------------------------------------------------===//

#include "test/reference/ReferenceModel.h"
#include "llvm/Support/ErrorHandling.h"
#include <algorithm>
#include <cmath>
#include <numeric>

using namespace kimi;
using namespace kimi::reference;
using R = kimi::WeightRole;

int64_t Tensor::numElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

std::vector<WeightSpec> kimi::reference::weightSpecs(const ModelConfig &c) {
  std::vector<WeightSpec> specs;
  auto add = [&](R role, int64_t layer, std::vector<int64_t> shape) {
    specs.push_back({role, layer, weightName(role, layer), std::move(shape)});
  };
  const int64_t D = c.hidden;
  add(R::Embed, -1, {c.vocab, D});
  for (int64_t l = 0; l < c.numLayers; ++l) {
    add(R::InputNorm, l, {D});
    add(R::PostAttnNorm, l, {D});
    if (c.attnResBlock > 0) {
      if (l > 0) { // layer 0's attention input is the embedding itself
        add(R::AttnResNorm, l, {D});
        add(R::AttnResProj, l, {1, D});
      }
      add(R::MlpResNorm, l, {D});
      add(R::MlpResProj, l, {1, D});
    }
    if (c.layers[l] == AttentionKind::Kda) {
      const KdaConfig &k = c.kda;
      const int64_t C = k.numHeads * k.headDim; // dv = dk = head_dim
      add(R::KdaQ, l, {C, D});
      add(R::KdaK, l, {C, D});
      add(R::KdaV, l, {C, D});
      add(R::KdaQConv, l, {C, 1, k.convKernel});
      add(R::KdaKConv, l, {C, 1, k.convKernel});
      add(R::KdaVConv, l, {C, 1, k.convKernel});
      add(R::KdaFA, l, {k.headDim, D});
      add(R::KdaFB, l, {C, k.headDim});
      add(R::KdaALog, l, {k.numHeads});
      add(R::KdaDtBias, l, {C});
      add(R::KdaB, l, {k.numHeads, D});
      if (k.fullRankGate) {
        add(R::KdaG, l, {C, D});
      } else {
        add(R::KdaGA, l, {k.headDim, D});
        add(R::KdaGB, l, {C, k.headDim});
      }
      add(R::KdaONorm, l, {k.headDim});
      add(R::KdaO, l, {D, C});
    } else {
      const MlaConfig &m = c.mla;
      const int64_t qWidth = m.numHeads * (m.nopeDim + m.ropeDim);
      if (m.qLoraRank) {
        add(R::MlaQA, l, {m.qLoraRank, D});
        add(R::MlaQANorm, l, {m.qLoraRank});
        add(R::MlaQB, l, {qWidth, m.qLoraRank});
      } else {
        add(R::MlaQ, l, {qWidth, D});
      }
      add(R::MlaKvA, l, {m.kvLoraRank + m.ropeDim, D});
      add(R::MlaKvANorm, l, {m.kvLoraRank});
      add(R::MlaKvB, l, {m.numHeads * (m.nopeDim + m.vDim), m.kvLoraRank});
      if (m.outputGate)
        add(R::MlaG, l, {m.numHeads * m.vDim, D});
      add(R::MlaO, l, {D, m.numHeads * m.vDim});
    }
    if (!c.isMoeLayer(l)) {
      add(R::MlpGate, l, {c.denseIntermediate, D});
      add(R::MlpUp, l, {c.denseIntermediate, D});
      add(R::MlpDown, l, {D, c.denseIntermediate});
      continue;
    }
    const MoeConfig &m = c.moe;
    const int64_t W = c.expertWidth();
    add(R::Router, l, {m.numExperts, D});
    add(R::RouterBias, l, {m.numExperts});
    add(R::ExpertGate, l, {m.numExperts, m.intermediate, W});
    add(R::ExpertUp, l, {m.numExperts, m.intermediate, W});
    add(R::ExpertDown, l, {m.numExperts, W, m.intermediate});
    if (m.latent) {
      add(R::LatentDown, l, {W, D});
      if (m.latentNorm)
        add(R::LatentNorm, l, {W});
      add(R::LatentUp, l, {D, W});
    }
    if (m.numShared) {
      const int64_t S = m.numShared * m.intermediate;
      add(R::SharedGate, l, {S, D});
      add(R::SharedUp, l, {S, D});
      add(R::SharedDown, l, {D, S});
    }
  }
  if (c.attnResBlock > 0) {
    add(R::OutputResNorm, -1, {D});
    add(R::OutputResProj, -1, {1, D});
  }
  add(R::FinalNorm, -1, {D});
  if (!c.tieEmbeddings)
    add(R::LmHead, -1, {c.vocab, D});
  return specs;
}


//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

std::string ReferenceModel::checkWeights(const ModelConfig &config,
                                         const WeightMap &weights) {
  std::string problems;
  for (const WeightSpec &spec : weightSpecs(config)) {
    auto it = weights.find(spec.name);
    if (it == weights.end()) {
      problems += "missing weight " + spec.name + "\n";
      continue;
    }
    const Tensor &t = it->second;
    if (t.shape != spec.shape)
      problems += "weight " + spec.name + " has the wrong shape\n";
    else if (int64_t(t.data.size()) != Tensor::numElements(t.shape))
      problems += "weight " + spec.name + " has the wrong number of values\n";
  }
  return problems;
}

ReferenceModel::ReferenceModel(const ModelConfig &config, WeightMap weights)
    : config_(config), weights_(std::move(weights)) {
  std::string problems = checkWeights(config_, weights_);
  if (!problems.empty())
    llvm::report_fatal_error(llvm::Twine("ReferenceModel: ") + problems);
  state_ = initialState();
}

ModelState ReferenceModel::initialState() const {
  ModelState s;
  s.kda.resize(config_.numLayers);
  s.mla.resize(config_.numLayers);
  const KdaConfig &k = config_.kda;
  for (int64_t l = 0; l < config_.numLayers; ++l) {
    if (config_.layers[l] != AttentionKind::Kda)
      continue;
    s.kda[l].S.assign(k.numHeads * k.headDim * k.headDim, 0.0);
    for (auto &conv : s.kda[l].conv)
      conv.assign((k.convKernel - 1) * k.numHeads * k.headDim, 0.0);
  }
  return s;
}

const Tensor &ReferenceModel::w(R role, int64_t layer) const {
  return weights_.at(weightName(role, layer));
}

std::vector<double> ReferenceModel::linear(const std::vector<double> &x,
                                           int64_t T, R role,
                                           int64_t layer) const {
  const Tensor &W = w(role, layer); // [out, in], nn.Linear layout
  const int64_t out = W.shape[0], in = W.shape[1];
  const bool round = productRounding_ == Rounding::BF16;
  // Weights are rounded by the caller; the product's operand here.
  std::vector<double> rounded;
  if (round) {
    rounded = x;
    roundValues(rounded, Rounding::BF16);
  }
  const std::vector<double> &in_ = round ? rounded : x;
  std::vector<double> y(T * out);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += W.data[o * in + i] * in_[t * in + i];
      y[t * out + o] = acc;
    }
  if (round)
    roundValues(y, Rounding::BF16);
  return y;
}

void ReferenceModel::roundActivations(std::vector<double> &values) const {
  if (productRounding_ == Rounding::BF16)
    roundValues(values, Rounding::BF16);
}

std::vector<double> ReferenceModel::rmsNormRows(const std::vector<double> &x,
                                                int64_t T, R role,
                                                int64_t layer,
                                                double eps) const {
  const Tensor &W = w(role, layer);
  const int64_t n = W.shape[0];
  std::vector<double> y(T * n);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> row = ops::rmsNorm(&x[t * n], n, W.data.data(), eps);
    std::copy(row.begin(), row.end(), y.begin() + t * n);
  }
  roundActivations(y);
  return y;
}

std::vector<double>
ReferenceModel::mixRows(const std::vector<const std::vector<double> *> &sources,
                        int64_t T, R normRole, R queryRole,
                        int64_t layer) const {
  const int64_t D = config_.hidden;
  const double *norm = w(normRole, layer).data.data();
  const double *query = w(queryRole, layer).data.data();
  std::vector<double> y(T * D);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<const double *> rows;
    for (const std::vector<double> *s : sources)
      rows.push_back(s->data() + t * D);
    std::vector<double> mixed =
        ops::attnResMix(rows, D, norm, query, config_.rmsNormEps);
    std::copy(mixed.begin(), mixed.end(), y.begin() + t * D);
  }
  return y;
}

double ReferenceModel::activation(double gate, double up) const {
  if (config_.activation == MlpActivation::Situ)
    return ops::situ(gate, up, config_.situBeta, config_.situLinearBeta);
  return ops::silu(gate) * up;
}

std::vector<double> ReferenceModel::gatedMlp(const std::vector<double> &x,
                                             int64_t T, R gate, R up, R down,
                                             int64_t layer) const {
  std::vector<double> g = linear(x, T, gate, layer);
  std::vector<double> u = linear(x, T, up, layer);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = activation(g[i], u[i]);
  return linear(g, T, down, layer);
}

/// §2: KDA with its short convolutions, gate, beta, output gate and norm.
std::vector<double> ReferenceModel::kda(const std::vector<double> &x,
                                        int64_t T, int64_t layer,
                                        KdaState &st) const {
  const KdaConfig &k = config_.kda;
  const int64_t H = k.numHeads, dk = k.headDim, dv = k.headDim, C = H * dk;

  // q, k, v = SiLU(ShortConv(W x)); q, k L2-normalised per head.
  R projRoles[3] = {R::KdaQ, R::KdaK, R::KdaV};
  R convRoles[3] = {R::KdaQConv, R::KdaKConv, R::KdaVConv};
  std::vector<double> qkv[3];
  for (int i = 0; i < 3; ++i) {
    std::vector<double> p = linear(x, T, projRoles[i], layer);
    qkv[i] = ops::shortConv(p, T, C, w(convRoles[i], layer).data.data(),
                            k.convKernel, st.conv[i]);
    for (double &value : qkv[i])
      value = ops::silu(value);
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      ops::l2Normalize(&qkv[0][t * C + h * dk], dk, 1e-6);
      ops::l2Normalize(&qkv[1][t * C + h * dk], dk, 1e-6);
    }

  // Forget gate g from the low-rank input z = f_b(f_a(x)); beta.
  std::vector<double> z =
      linear(linear(x, T, R::KdaFA, layer), T, R::KdaFB, layer);
  const std::vector<double> &aLog = w(R::KdaALog, layer).data;
  const std::vector<double> &dtBias = w(R::KdaDtBias, layer).data;
  std::vector<double> g(T * C);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c)
      g[t * C + c] = ops::kdaGate(z[t * C + c], aLog[c / dk], dtBias[c],
                                  k.gateLowerBound);
  std::vector<double> beta = linear(x, T, R::KdaB, layer); // [T, H]
  for (double &b : beta)
    b = ops::sigmoid(b);

  // Output gate: full rank, or g_b(g_a(x)).
  std::vector<double> gate =
      k.fullRankGate ? linear(x, T, R::KdaG, layer)
                     : linear(linear(x, T, R::KdaGA, layer), T, R::KdaGB,
                              layer);
  const double *oNorm = w(R::KdaONorm, layer).data.data();
  const double scale = 1.0 / std::sqrt(double(dk));

  std::vector<double> y(T * H * dv);
  std::vector<double> qh(T * dk), kh(T * dk), vh(T * dv), gh(T * dk), bh(T),
      S(dk * dv);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < dk; ++d) {
        qh[t * dk + d] = qkv[0][t * C + h * dk + d];
        kh[t * dk + d] = qkv[1][t * C + h * dk + d];
        gh[t * dk + d] = g[t * C + h * dk + d];
      }
      for (int64_t d = 0; d < dv; ++d)
        vh[t * dv + d] = qkv[2][t * C + h * dv + d];
      bh[t] = beta[t * H + h];
    }
    std::copy(st.S.begin() + h * dk * dv, st.S.begin() + (h + 1) * dk * dv,
              S.begin());
    std::vector<double> o = ops::kdaRecurrent(qh.data(), kh.data(), vh.data(),
                                              gh.data(), bh.data(), T, dk, dv,
                                              scale, S);
    std::copy(S.begin(), S.end(), st.S.begin() + h * dk * dv);
    // y = sigmoid(gate) * RMSNorm_head(o): w * o * rsqrt(mean(o^2) + eps).
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> n =
          ops::rmsNorm(&o[t * dv], dv, oNorm, config_.rmsNormEps);
      for (int64_t d = 0; d < dv; ++d) {
        int64_t at = t * H * dv + h * dv + d;
        y[at] = n[d] * ops::sigmoid(gate[at]);
      }
    }
  }
  return linear(y, T, R::KdaO, layer);
}

/// §3: gated MLA without positional encoding, materialised K and V.
std::vector<double> ReferenceModel::mla(const std::vector<double> &x,
                                        int64_t T, int64_t layer,
                                        MlaState &st) const {
  const MlaConfig &m = config_.mla;
  const int64_t H = m.numHeads, dn = m.nopeDim, dr = m.ropeDim, dv = m.vDim,
                Rk = m.kvLoraRank, dq = dn + dr, row = Rk + dr;

  // q = W_qb RMSNorm(W_qa x) (or W_q x), per head [q_nope | q_pe].
  std::vector<double> q =
      m.qLoraRank
          ? linear(rmsNormRows(linear(x, T, R::MlaQA, layer), T, R::MlaQANorm,
                               layer, 1e-6),
                   T, R::MlaQB, layer)
          : linear(x, T, R::MlaQ, layer);

  // New cache rows [RMSNorm(ckv) | k_pe] (k_pe is never rotated).
  std::vector<double> kva = linear(x, T, R::MlaKvA, layer);
  const double *kvNorm = w(R::MlaKvANorm, layer).data.data();
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> ckv = ops::rmsNorm(&kva[t * row], Rk, kvNorm, 1e-6);
    st.cache.insert(st.cache.end(), ckv.begin(), ckv.end());
    st.cache.insert(st.cache.end(), kva.begin() + t * row + Rk,
                    kva.begin() + (t + 1) * row);
  }
  st.length += T;
  const int64_t S = st.length;

  // Per head: k = [W_uk ckv | k_pe], v = W_uv ckv for every cached token;
  // kv_b_proj holds per head dn rows of W_uk then dv rows of W_uv.
  const std::vector<double> &kvb = w(R::MlaKvB, layer).data;
  const double scale = 1.0 / std::sqrt(double(dq));
  std::vector<double> gate;
  if (m.outputGate)
    gate = linear(x, T, R::MlaG, layer);
  std::vector<double> out(T * H * dv);
  std::vector<double> K(S * dq), V(S * dv), qh(T * dq);
  for (int64_t h = 0; h < H; ++h) {
    const double *uk = &kvb[h * (dn + dv) * Rk];
    const double *uv = uk + dn * Rk;
    for (int64_t s = 0; s < S; ++s) {
      const double *ckv = &st.cache[s * row];
      for (int64_t i = 0; i < dn; ++i) {
        double acc = 0;
        for (int64_t r = 0; r < Rk; ++r)
          acc += uk[i * Rk + r] * ckv[r];
        K[s * dq + i] = acc;
      }
      for (int64_t i = 0; i < dr; ++i)
        K[s * dq + dn + i] = ckv[Rk + i];
      for (int64_t i = 0; i < dv; ++i) {
        double acc = 0;
        for (int64_t r = 0; r < Rk; ++r)
          acc += uv[i * Rk + r] * ckv[r];
        V[s * dv + i] = acc;
      }
    }
    for (int64_t t = 0; t < T; ++t)
      std::copy(q.begin() + t * H * dq + h * dq,
                q.begin() + t * H * dq + (h + 1) * dq, qh.begin() + t * dq);
    std::vector<double> o = ops::causalAttention(qh.data(), T, K.data(),
                                                 V.data(), S, dq, dv, scale);
    // y = o * sigmoid(W_g x) when the output gate is on.
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < dv; ++d) {
        int64_t at = t * H * dv + h * dv + d;
        out[at] = o[t * dv + d] * (m.outputGate ? ops::sigmoid(gate[at]) : 1.0);
      }
  }
  return linear(out, T, R::MlaO, layer);
}

/// §5: sigmoid router with bias selection, routed experts (on the latent when
/// the model has one), shared experts at full width.
std::vector<double> ReferenceModel::moe(const std::vector<double> &x,
                                        int64_t T, int64_t layer,
                                        double &margin) const {
  const MoeConfig &m = config_.moe;
  const int64_t D = config_.hidden, E = m.numExperts, I = m.intermediate,
                W = config_.expertWidth();
  const std::vector<double> logits = linear(x, T, R::Router, layer); // [T, E]
  const double *bias = w(R::RouterBias, layer).data.data();
  const std::vector<double> &gateW = w(R::ExpertGate, layer).data; // [E, I, W]
  const std::vector<double> &upW = w(R::ExpertUp, layer).data;     // [E, I, W]
  const std::vector<double> &downW = w(R::ExpertDown, layer).data; // [E, W, I]
  // z = W_down_latent x (the experts' input), or x itself.
  std::vector<double> z = m.latent ? linear(x, T, R::LatentDown, layer) : x;

  std::vector<double> routed(T * W, 0.0), a(I);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> s(E);
    for (int64_t e = 0; e < E; ++e)
      s[e] = ops::sigmoid(logits[t * E + e]);
    ops::Routing r = ops::route(s, bias, m.topK, m.renormalize, m.scaling);
    if (m.topK < E) {
      // Gap between the last selected and the best unselected biased score.
      double lastIn = s[r.experts.back()] + bias[r.experts.back()];
      double bestOut = -INFINITY;
      for (int64_t e = 0; e < E; ++e)
        if (std::find(r.experts.begin(), r.experts.end(), e) ==
            r.experts.end())
          bestOut = std::max(bestOut, s[e] + bias[e]);
      margin = std::min(margin, lastIn - bestOut);
    }
    const double *zt = &z[t * W];
    for (size_t j = 0; j < r.experts.size(); ++j) {
      const int64_t e = r.experts[j];
      for (int64_t i = 0; i < I; ++i) {
        double gsum = 0, usum = 0;
        for (int64_t c = 0; c < W; ++c) {
          gsum += gateW[(e * I + i) * W + c] * zt[c];
          usum += upW[(e * I + i) * W + c] * zt[c];
        }
        a[i] = activation(gsum, usum);
      }
      for (int64_t c = 0; c < W; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < I; ++i)
          acc += downW[(e * W + c) * I + i] * a[i];
        routed[t * W + c] += r.weights[j] * acc;
      }
    }
  }
  std::vector<double> y = routed;
  if (m.latent) {
    // y = W_up_latent RMSNorm_W(r)
    if (m.latentNorm)
      y = rmsNormRows(y, T, R::LatentNorm, layer, config_.rmsNormEps);
    y = linear(y, T, R::LatentUp, layer);
  }
  if (m.numShared) {
    std::vector<double> shared = gatedMlp(x, T, R::SharedGate, R::SharedUp,
                                          R::SharedDown, layer);
    for (int64_t i = 0; i < T * D; ++i)
      y[i] += shared[i];
  }
  return y;
}

std::vector<double> ReferenceModel::mlp(const std::vector<double> &x,
                                        int64_t T, int64_t layer,
                                        Trace *trace) const {
  double margin = INFINITY;
  std::vector<double> y =
      config_.isMoeLayer(layer)
          ? moe(x, T, layer, margin)
          : gatedMlp(x, T, R::MlpGate, R::MlpUp, R::MlpDown, layer);
  if (trace)
    trace->routingMargin.push_back(margin);
  return y;
}

std::vector<double> ReferenceModel::attention(const std::vector<double> &x,
                                              int64_t T, int64_t layer,
                                              ModelState &state) const {
  if (config_.layers[layer] == AttentionKind::Kda)
    return kda(x, T, layer, state.kda[layer]);
  return mla(x, T, layer, state.mla[layer]);
}

std::vector<double> ReferenceModel::run(const std::vector<int32_t> &tokens,
                                        ModelState &state,
                                        Trace *trace) const {
  const int64_t T = tokens.size(), D = config_.hidden, V = config_.vocab;
  const double eps = config_.rmsNormEps;
  if (trace)
    *trace = Trace();
  const Tensor &embed = w(R::Embed);
  std::vector<double> h(T * D);
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= V)
      llvm::report_fatal_error("ReferenceModel: token id out of range");
    std::copy(embed.data.begin() + tokens[t] * D,
              embed.data.begin() + (tokens[t] + 1) * D, h.begin() + t * D);
  }

  const int64_t block = config_.attnResBlock;
  std::vector<std::vector<double>> blocks; // sealed AttnRes sources
  roundActivations(h);
  auto add = [&](std::vector<double> a, const std::vector<double> &b) {
    for (size_t i = 0; i < a.size(); ++i)
      a[i] += b[i];
    roundActivations(a);
    return a;
  };
  auto sources = [&](const std::vector<double> &last) {
    std::vector<const std::vector<double> *> srcs;
    for (const auto &b : blocks)
      srcs.push_back(&b);
    srcs.push_back(&last);
    return srcs;
  };
  for (int64_t l = 0; l < config_.numLayers; ++l) {
    std::vector<double> attnIn, a, mlpIn, out;
    if (block == 0) {
      // Ordinary pre-norm residual stream.
      attnIn = h;
      a = attention(rmsNormRows(attnIn, T, R::InputNorm, l, eps), T, l, state);
      mlpIn = add(std::move(h), a);
      out = mlp(rmsNormRows(mlpIn, T, R::PostAttnNorm, l, eps), T, l, trace);
      h = add(mlpIn, out);
    } else {
      // §4, per decoder layer, literally:
      //   prefix = h
      //   if blocks: h = mix(blocks + [prefix]; self_attention_res)
      //   if l % block == 0: blocks.append(prefix); prefix = None
      //   a = Attn(input_layernorm(h))
      //   prefix = a if prefix is None else prefix + a
      //   m = mix(blocks + [prefix]; mlp_res)
      //   h_next = prefix + MLP(post_attention_layernorm(m))
      std::optional<std::vector<double>> prefix = h;
      attnIn = blocks.empty() ? h
                              : mixRows(sources(*prefix), T, R::AttnResNorm,
                                        R::AttnResProj, l);
      if (l % block == 0) {
        blocks.push_back(std::move(*prefix));
        prefix.reset();
      }
      a = attention(rmsNormRows(attnIn, T, R::InputNorm, l, eps), T, l, state);
      prefix = prefix ? add(std::move(*prefix), a) : a;
      mlpIn = mixRows(sources(*prefix), T, R::MlpResNorm, R::MlpResProj, l);
      out = mlp(rmsNormRows(mlpIn, T, R::PostAttnNorm, l, eps), T, l, trace);
      h = add(std::move(*prefix), out);
    }
    if (trace) {
      trace->attnInputs.push_back(std::move(attnIn));
      trace->attnOutputs.push_back(std::move(a));
      trace->mlpInputs.push_back(std::move(mlpIn));
      trace->mlpOutputs.push_back(std::move(out));
      trace->layerOutputs.push_back(h);
    }
  }
  if (block > 0) {
    // After the last layer: h = mix(blocks + [h]; output_attn_res).
    h = mixRows(sources(h), T, R::OutputResNorm, R::OutputResProj, -1);
  }
  if (trace)
    trace->finalHidden = h;
  h = rmsNormRows(h, T, R::FinalNorm, -1, eps);
  state.position += T;
  return linear(h, T, config_.tieEmbeddings ? R::Embed : R::LmHead);
}

std::vector<double>
ReferenceModel::forward(const std::vector<int32_t> &tokens) const {
  ModelState fresh = initialState();
  return run(tokens, fresh);
}

std::vector<double>
ReferenceModel::prefill(const std::vector<int32_t> &tokens) {
  state_ = initialState();
  return run(tokens, state_);
}

std::vector<double> ReferenceModel::decodeStep(int32_t token) {
  return run({token}, state_);
}

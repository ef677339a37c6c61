//===- ModelReport.cpp - what a model costs -------------------------------===//

#include "models/import/ModelReport.h"
#include "llvm/Support/JSON.h"

using namespace kimi;

namespace {

constexpr double kBf16 = 2.0, kF32 = 4.0;
/// MXFP4: a 4-bit value plus one E8M0 byte per 32 values.
constexpr double kMxfp4 = 0.5 + 1.0 / 32.0;

class PartTable {
public:
  /// Adds `perLayer` parameters of `name` for one layer; `activeFraction`
  /// of them are used per token; `bytesPerParam` is their storage.
  void add(const std::string &name, int64_t perLayer, double bytesPerParam,
           int64_t activePerLayer = -1, bool modelLevel = false) {
    ParameterPart *part = nullptr;
    for (ParameterPart &p : parts)
      if (p.name == name)
        part = &p;
    if (!part) {
      parts.push_back({name, 0, 0, 0, 0.0});
      part = &parts.back();
    }
    if (!modelLevel)
      ++part->layers;
    part->total += perLayer;
    part->active += activePerLayer < 0 ? perLayer : activePerLayer;
    part->bytes += perLayer * bytesPerParam;
  }
  std::vector<ParameterPart> parts;
};

} // namespace

ModelCost kimi::computeModelCost(const ModelConfig &c,
                                 const ReportOptions &options) {
  PartTable t;
  const int64_t D = c.hidden;
  const KdaConfig &k = c.kda;
  const MlaConfig &m = c.mla;
  const MoeConfig &e = c.moe;

  // Model level. The input embedding is a lookup: never active.
  t.add("embed_tokens", c.vocab * D, kBf16, 0, true);
  if (!c.tieEmbeddings)
    t.add("lm_head", c.vocab * D, kBf16, -1, true);
  t.add("final_norm", D, kBf16, -1, true);
  if (c.attnResBlock)
    t.add("output_attn_res", 2 * D, kBf16, -1, true);

  for (int64_t l = 0; l < c.numLayers; ++l) {
    t.add("layer_norms", 2 * D, kBf16);
    // AttnRes before attention and before the MLP; layer 0 has no sealed
    // block yet, so it mixes only before its MLP. The K3 release still
    // stores layer 0's pre-attention pair: counted, as the release counts it.
    if (c.attnResBlock)
      t.add("attn_res",
            (l == 0 && c.layout != CheckpointLayout::K3 ? 2 : 4) * D, kBf16);

    if (c.layers[l] == AttentionKind::Kda) {
      int64_t w = k.numHeads * k.headDim;
      t.add("kda.qkv_proj", 3 * D * w, kBf16);
      const auto convONorm = c.storesKdaConvAndONormF32() ? kF32 : kBf16;
      t.add("kda.short_conv", 3 * w * k.convKernel, convONorm);
      t.add("kda.forget_gate", D * k.headDim + k.headDim * w, kBf16);
      // A_log as stored (K3 pads it to 128 values).
      t.add("kda.gate_params(A_log,dt_bias)", c.storedALogLength() + w, kF32);
      t.add("kda.beta_proj", D * k.numHeads, kBf16);
      t.add("kda.output_gate",
            k.fullRankGate ? D * w : D * k.headDim + k.headDim * w, kBf16);
      t.add("kda.o_norm", k.headDim, convONorm);
      t.add("kda.o_proj", w * D, kBf16);
    } else {
      int64_t qd = m.nopeDim + m.ropeDim;
      int64_t q = m.qLoraRank
                      ? D * m.qLoraRank + m.qLoraRank +
                            m.qLoraRank * m.numHeads * qd
                      : D * m.numHeads * qd;
      t.add("mla.q", q, kBf16);
      t.add("mla.kv_a+norm",
            D * (m.kvLoraRank + m.ropeDim) + m.kvLoraRank, kBf16);
      t.add("mla.kv_b",
            m.kvLoraRank * m.numHeads * (m.nopeDim + m.vDim), kBf16);
      if (m.outputGate)
        t.add("mla.output_gate", D * m.numHeads * m.vDim, kBf16);
      t.add("mla.o_proj", m.numHeads * m.vDim * D, kBf16);
    }

    if (!c.isMoeLayer(l)) {
      t.add("dense_mlp", 3 * D * c.denseIntermediate, kBf16);
      continue;
    }
    int64_t width = c.expertWidth();
    int64_t perExpert = 3 * e.intermediate * width;
    t.add("moe.router", e.numExperts * D, kBf16);
    t.add("moe.router_bias", e.numExperts, kF32);
    t.add("moe.routed_experts", e.numExperts * perExpert,
          options.mxfp4Experts ? kMxfp4 : kBf16, e.topK * perExpert);
    if (e.latent)
      t.add("moe.latent_proj+norm",
            2 * D * e.latent + (e.latentNorm ? e.latent : 0), kBf16);
    if (e.numShared)
      t.add("moe.shared_experts", 3 * D * e.numShared * e.intermediate, kBf16);
  }

  ModelCost cost;
  cost.parts = t.parts;
  for (const ParameterPart &p : cost.parts) {
    cost.totalParams += p.total;
    cost.activeParams += p.active;
    cost.weightBytes += p.bytes;
  }

  // FLOPs per token: 2 per multiply-add of every active product weight,
  // plus the context-dependent attention work.
  cost.context = options.context;
  double ctx = double(options.context);
  double matmul = 2.0 * double(cost.activeParams);
  int64_t nKda = c.countLayers(AttentionKind::Kda);
  int64_t nMla = c.countLayers(AttentionKind::Mla);
  // KDA per token and head (recurrent form): decay dk*dv, S'^T k 2 dk dv,
  // rank-1 update 2 dk dv, read-out 2 dk dv.
  double kda = nKda * k.numHeads * 7.0 * k.headDim * k.headDim;
  int64_t qd = m.nopeDim + m.ropeDim;
  // Causal prefill of `ctx` tokens: a token attends to (ctx+1)/2 keys on
  // average, with qk^T over qd and p.v over dv per head.
  double mlaPrefill =
      nMla * m.numHeads * 2.0 * (qd + m.vDim) * (ctx + 1.0) / 2.0;
  // Absorbed decode against ctx cached rows: fold q_nope through W_uk,
  // scores over R + dr, mix over R, apply W_uv.
  double r = m.kvLoraRank;
  double mlaDecode = nMla * m.numHeads *
                     (2.0 * m.nopeDim * r + 2.0 * (r + m.ropeDim) * ctx +
                      2.0 * r * ctx + 2.0 * r * m.vDim);
  cost.prefillFlopsPerToken = matmul + kda + mlaPrefill;
  cost.decodeFlopsPerToken = matmul + kda + mlaDecode;

  cost.cacheBytesPerToken = nMla * double(m.kvLoraRank + m.ropeDim) * kBf16;
  cost.stateBytesPerRequest =
      nKda * (double(k.numHeads) * k.headDim * k.headDim * kF32 +
              3.0 * (k.convKernel - 1) * k.numHeads * k.headDim * kF32);
  return cost;
}

void kimi::writeModelReport(
    const ModelConfig &c, const ModelCost &cost, llvm::raw_ostream &os,
    llvm::function_ref<void(llvm::json::OStream &)> extra) {
  llvm::json::OStream j(os, 2);
  j.object([&] {
    j.attribute("model_type", c.modelType);
    j.attribute("layers", c.numLayers);
    j.attribute("kda_layers", c.countLayers(AttentionKind::Kda));
    j.attribute("mla_layers", c.countLayers(AttentionKind::Mla));
    std::string pattern;
    for (AttentionKind kind : c.layers)
      pattern += kind == AttentionKind::Kda ? 'K' : 'M';
    j.attribute("layer_pattern", pattern);
    j.attribute("total_params", cost.totalParams);
    j.attribute("active_params", cost.activeParams);
    j.attribute("total_params_billion", cost.totalParams / 1e9);
    j.attribute("active_params_billion", cost.activeParams / 1e9);
    j.attribute("weight_bytes", cost.weightBytes);
    j.attribute("weight_gib", cost.weightBytes / double(1ull << 30));
    j.attributeObject("flops_per_token", [&] {
      j.attribute("context", cost.context);
      j.attribute("prefill", cost.prefillFlopsPerToken);
      j.attribute("decode", cost.decodeFlopsPerToken);
    });
    j.attribute("mla_cache_bytes_per_token", cost.cacheBytesPerToken);
    j.attribute("kda_state_bytes_per_request", cost.stateBytesPerRequest);
    j.attributeArray("per_request", [&] {
      for (int64_t ctx : {int64_t(131072), int64_t(1048576)})
        j.object([&] {
          j.attribute("context", ctx);
          double cache = cost.cacheBytesPerToken * double(ctx);
          j.attribute("mla_cache_bytes", cache);
          j.attribute("kda_state_bytes", cost.stateBytesPerRequest);
          j.attribute("total_bytes", cache + cost.stateBytesPerRequest);
        });
    });
    j.attributeArray("parts", [&] {
      for (const ParameterPart &p : cost.parts)
        j.object([&] {
          j.attribute("name", p.name);
          j.attribute("layers", p.layers);
          j.attribute("params", p.total);
          j.attribute("active_params", p.active);
          j.attribute("bytes", p.bytes);
        });
    });
    if (extra)
      extra(j);
  });
  os << "\n";
}

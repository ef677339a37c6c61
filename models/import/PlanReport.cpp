//===- PlanReport.cpp - a model partitioned over a supernode --------------===//
//
// Strategies (docs/plan-report.md):
//   * routed experts: expert-parallel over all devices, all-to-all dispatch
//     and combine of latent tokens;
//   * attention and KDA (by heads), shared experts and the dense MLP (by
//     intermediate columns), lm_head (by vocabulary): tensor-parallel in a
//     group of `tp` devices inside one node; the grid is `groups` such
//     groups, each serving its own requests (data-parallel);
//   * latent projections: tensor-parallel by latent columns (down) and rows
//     (up); each rank dispatches its column slice, so every token's latent
//     row crosses the links once;
//   * router, norms, AttnRes and the input embedding: replicated;
//   * AttnRes sources follow the hidden state, which is replicated in the
//     group: no communication.
//
//===----------------------------------------------------------------------===//

#include "models/import/PlanReport.h"
#include <algorithm>
#include <cmath>

using namespace kimi;

namespace {

constexpr double kBf16 = 2.0, kF32 = 4.0;
constexpr double kMxfp4 = 0.5 + 1.0 / 32.0;
constexpr double kMxfp8 = 1.0 + 1.0 / 32.0;

/// Bytes of one layer (or of the model level) by how they are placed, and
/// the parameters one token multiplies by.
struct Placement {
  double replicated = 0.0;   // bytes every device holds
  double lookup = 0.0;       // of them, tables read a row per token
  double tensorParallel = 0.0; // bytes split over the TP group
  double experts = 0.0;      // bytes of all routed experts of the layer
  double activeParams = 0.0; // product weights one token uses
};

Placement placeModelLevel(const ModelConfig &c) {
  Placement p;
  double D = c.hidden;
  p.replicated += c.vocab * D * kBf16; // embed_tokens: a lookup, not active
  p.lookup = c.vocab * D * kBf16;
  if (!c.tieEmbeddings) {
    p.tensorParallel += c.vocab * D * kBf16; // lm_head by vocabulary
    p.activeParams += c.vocab * D;
  }
  p.replicated += D * kBf16;
  p.activeParams += D;
  if (c.attnResBlock) {
    p.replicated += 2 * D * kBf16;
    p.activeParams += 2 * D;
  }
  return p;
}

/// Mirrors the parts of computeModelCost layer by layer; the unit test checks
/// that the three placements add up to its weight bytes.
Placement placeLayer(const ModelConfig &c, int64_t l, bool mxfp4Experts) {
  Placement p;
  auto rep = [&](double params, double bytes) {
    p.replicated += params * bytes;
    p.activeParams += params;
  };
  auto tp = [&](double params, double bytes) {
    p.tensorParallel += params * bytes;
    p.activeParams += params;
  };
  const double D = c.hidden;
  const KdaConfig &k = c.kda;
  const MlaConfig &m = c.mla;
  const MoeConfig &e = c.moe;

  rep(2 * D, kBf16); // the two RMSNorms
  if (c.attnResBlock) // as the report counts them (K3 stores layer 0's pair)
    rep((l == 0 && c.layout != CheckpointLayout::K3 ? 2 : 4) * D, kBf16);

  if (c.layers[l] == AttentionKind::Kda) {
    double w = double(k.numHeads) * k.headDim;
    tp(3 * D * w, kBf16);                 // q, k, v by heads
    const double convONorm = c.storesKdaConvAndONormF32() ? kF32 : kBf16;
    tp(3 * w * k.convKernel, convONorm);  // short convs by channel
    rep(D * k.headDim, kBf16);            // forget gate, low-rank down
    tp(k.headDim * w, kBf16);             // forget gate, up by heads
    tp(c.storedALogLength() + w, kF32);   // A_log (as stored), dt_bias
    tp(D * k.numHeads, kBf16);            // beta by heads
    if (k.fullRankGate) {
      tp(D * w, kBf16);
    } else {
      rep(D * k.headDim, kBf16);
      tp(k.headDim * w, kBf16);
    }
    rep(k.headDim, convONorm);            // o_norm (per head_dim, shared)
    tp(w * D, kBf16);                     // o_proj, row-parallel
  } else {
    double qd = m.nopeDim + m.ropeDim;
    if (m.qLoraRank) {
      rep(D * m.qLoraRank + m.qLoraRank, kBf16); // q_a + norm
      tp(double(m.qLoraRank) * m.numHeads * qd, kBf16);
    } else {
      tp(D * m.numHeads * qd, kBf16);
    }
    rep(D * (m.kvLoraRank + m.ropeDim) + m.kvLoraRank, kBf16); // kv_a+norm
    tp(double(m.kvLoraRank) * m.numHeads * (m.nopeDim + m.vDim), kBf16);
    if (m.outputGate)
      tp(D * m.numHeads * m.vDim, kBf16);
    tp(double(m.numHeads) * m.vDim * D, kBf16);
  }

  if (!c.isMoeLayer(l)) {
    tp(3 * D * c.denseIntermediate, kBf16);
    return p;
  }
  double perExpert = 3.0 * e.intermediate * c.expertWidth();
  rep(double(e.numExperts) * D, kBf16);
  p.replicated += e.numExperts * kF32; // router bias: not a product
  p.experts += e.numExperts * perExpert * (mxfp4Experts ? kMxfp4 : kBf16);
  p.activeParams += e.topK * perExpert;
  if (e.latent) {
    // Down projection by latent columns, up projection by latent rows: each
    // rank sends its column slice of every token to the experts and gets
    // the same slice back, so the all-to-all bytes do not change and the up
    // projection's partial sums join the MLP all-reduce. The latent norm
    // runs where the whole latent row is, on the expert's device.
    tp(2 * D * e.latent, kBf16);
    if (e.latentNorm)
      rep(e.latent, kBf16);
  }
  if (e.numShared)
    tp(3 * D * e.numShared * e.intermediate, kBf16);
  return p;
}

/// Context-dependent attention FLOPs per token of one layer (the formulas of
/// computeModelCost, per layer).
double coreFlops(const ModelConfig &c, int64_t l, double ctx, bool decode) {
  if (c.layers[l] == AttentionKind::Kda)
    return c.kda.numHeads * 7.0 * c.kda.headDim * c.kda.headDim;
  const MlaConfig &m = c.mla;
  double qd = m.nopeDim + m.ropeDim, r = m.kvLoraRank;
  if (!decode)
    return m.numHeads * 2.0 * (qd + m.vDim) * (ctx + 1.0) / 2.0;
  return m.numHeads * (2.0 * m.nopeDim * r + 2.0 * (r + m.ropeDim) * ctx +
                       2.0 * r * ctx + 2.0 * r * m.vDim);
}

llvm::Error optionError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

} // namespace

llvm::Error kimi::parseGrid(llvm::StringRef text, PlanOptions &options) {
  auto bad = [&] {
    return optionError("--grid: '" + text +
                       "' is neither N nor GxT (e.g. 64 or 8x8)");
  };
  auto [left, right] = text.split('x');
  int64_t a = 0, b = 0;
  if (left.getAsInteger(10, a))
    return bad();
  if (right.empty() && !text.contains('x')) {
    options.devices = a;
    return llvm::Error::success();
  }
  if (right.getAsInteger(10, b) || a < 1 || b < 1)
    return bad();
  if (options.tpGroup && options.tpGroup != b)
    return optionError("--grid " + text + " sets the TP group to " +
                       llvm::Twine(b) + " but --tp-group is " +
                       llvm::Twine(options.tpGroup));
  options.devices = a * b;
  options.tpGroup = b;
  return llvm::Error::success();
}

static llvm::Error validate(const ModelConfig &c, const PlanOptions &o,
                            int64_t tp) {
  if (o.devices < 1 || o.devices > 64)
    return optionError("--grid: " + llvm::Twine(o.devices) +
                       " devices; a supernode has 1 to 64");
  if (tp < 1 || o.devices % tp)
    return optionError("--tp-group: " + llvm::Twine(tp) +
                       " does not divide the " + llvm::Twine(o.devices) +
                       " devices of the grid");
  if (o.nodeDevices < 1)
    return optionError("--node-devices must be positive");
  int64_t node = std::min(o.nodeDevices, o.devices);
  if (node % tp)
    return optionError("--tp-group: " + llvm::Twine(tp) +
                       " does not divide a node of " + llvm::Twine(node) +
                       " devices (TP stays on NVLink)");
  if (c.moe.numExperts % o.devices)
    return optionError("--grid: the " + llvm::Twine(c.moe.numExperts) +
                       " routed experts do not divide over " +
                       llvm::Twine(o.devices) + " devices");
  if (c.countLayers(AttentionKind::Kda) && c.kda.numHeads % tp)
    return optionError("--tp-group: " + llvm::Twine(tp) +
                       " does not divide the " + llvm::Twine(c.kda.numHeads) +
                       " KDA heads");
  if (c.countLayers(AttentionKind::Mla) && c.mla.numHeads % tp)
    return optionError("--tp-group: " + llvm::Twine(tp) +
                       " does not divide the " + llvm::Twine(c.mla.numHeads) +
                       " MLA heads");
  if ((c.moe.numShared * c.moe.intermediate) % tp ||
      (c.moe.firstDense && c.denseIntermediate % tp))
    return optionError("--tp-group: " + llvm::Twine(tp) +
                       " does not divide the shared-expert or dense MLP "
                       "intermediate size");
  if (o.batch < 1)
    return optionError("--batch must be at least 1");
  if (o.contexts.empty())
    return optionError("--plan-context: give at least one context");
  for (int64_t ctx : o.contexts)
    if (ctx < 1)
      return optionError("--plan-context: " + llvm::Twine(ctx) +
                         " is not a positive length");
  if (!(o.deviceMemory > 0))
    return optionError("--device-memory must be positive");
  if (!(o.nvlinkBytesPerS > 0) || !(o.interNodeBytesPerS > 0) ||
      !(o.hbmBytesPerS > 0) || !(o.flopsPerS > 0))
    return optionError("--nvlink-gbps, --inter-node-gbps, --hbm-gbps and "
                       "--tflops must be positive");
  if (!(o.collectiveLatencyS >= 0))
    return optionError("--collective-latency-us must not be negative");
  if (!(o.overlap >= 0 && o.overlap <= 1))
    return optionError("--comm-overlap must be within [0, 1]");
  if (o.prefillTokensPerGroup < 1)
    return optionError("--prefill-tokens must be at least 1");
  return llvm::Error::success();
}

llvm::Expected<SupernodePlan> kimi::computePlan(const ModelConfig &c,
                                                const PlanOptions &o) {
  int64_t tp = o.tpGroup ? o.tpGroup : std::min<int64_t>(8, o.devices);
  if (llvm::Error err = validate(c, o, tp))
    return std::move(err);

  SupernodePlan plan;
  plan.options = o;
  plan.options.tpGroup = tp;
  const double P = o.devices, T = tp;
  plan.devices = o.devices;
  plan.tpGroup = tp;
  plan.groups = o.devices / tp;
  plan.expertParallel = o.devices;
  plan.expertsPerDevice = c.moe.numExperts / o.devices;
  plan.requestsPerGroup =
      std::ceil(double(o.batch) / double(plan.groups));
  const MoeConfig &e = c.moe;
  plan.bytesPerExpert = 3.0 * e.intermediate * c.expertWidth() *
                        (o.mxfp4Experts ? kMxfp4 : kBf16);

  // Weights.
  Placement model = placeModelLevel(c);
  std::vector<Placement> layers;
  for (int64_t l = 0; l < c.numLayers; ++l)
    layers.push_back(placeLayer(c, l, o.mxfp4Experts));
  plan.totalReplicatedBytes = model.replicated;
  plan.totalTpBytes = model.tensorParallel;
  for (const Placement &p : layers) {
    plan.totalReplicatedBytes += p.replicated;
    plan.totalTpBytes += p.tensorParallel;
    plan.totalExpertBytes += p.experts;
  }
  plan.expertBytes = plan.totalExpertBytes / P;
  plan.tpBytes = plan.totalTpBytes / T;
  plan.replicatedBytes = plan.totalReplicatedBytes;
  plan.weightBytes = plan.expertBytes + plan.tpBytes + plan.replicatedBytes;

  // Cache and state: a request lives in one TP group. The MLA latent is
  // shared by all heads, so a head split would copy it to every rank; it is
  // split by sequence instead (or replicated, as an option). KDA state is
  // per head and follows the heads.
  const int64_t nMla = c.countLayers(AttentionKind::Mla);
  const int64_t nKda = c.countLayers(AttentionKind::Kda);
  const MlaConfig &m = c.mla;
  const KdaConfig &k = c.kda;
  const double mlaRowBytes = double(m.kvLoraRank + m.ropeDim) * kBf16;
  const double mlaShare = o.splitMlaCache ? T : 1.0;
  const double kdaStatePerRequest =
      nKda * (double(k.numHeads) * k.headDim * k.headDim * kF32 +
              3.0 * (k.convKernel - 1) * k.numHeads * k.headDim * kF32);
  for (int64_t ctx : o.contexts) {
    PlanCache pc;
    pc.context = ctx;
    double mlaPerRequest = nMla * mlaRowBytes * double(ctx) / mlaShare;
    double kdaPerRequest = kdaStatePerRequest / T;
    pc.mlaCacheBytes = plan.requestsPerGroup * mlaPerRequest;
    pc.kdaStateBytes = plan.requestsPerGroup * kdaPerRequest;
    pc.totalBytes = plan.weightBytes + pc.mlaCacheBytes + pc.kdaStateBytes;
    pc.headroomBytes = o.deviceMemory - pc.totalBytes;
    pc.fits = pc.headroomBytes >= 0;
    double free = o.deviceMemory - plan.weightBytes;
    pc.maxBatch = free <= 0 ? 0
                            : int64_t(std::floor(free / (mlaPerRequest +
                                                         kdaPerRequest))) *
                                  plan.groups;
    plan.cache.push_back(pc);
  }

  // Communication per token, summed over devices. A ring all-reduce of n
  // bytes over T ranks sends 2(T-1)/T n from each rank; an all-gather or a
  // reduce-scatter (T-1)/T n.
  const double D = c.hidden;
  const int64_t node = std::min(o.nodeDevices, o.devices);
  const double intraFrac = double(node - 1) / P;
  const double interFrac = double(o.devices - node) / P;
  auto fill = [&](LayerComm &lc, bool moe, bool mla) {
    if (tp > 1) {
      lc.tpAllReduce = 2 * 2.0 * (T - 1) * D * kBf16; // after attn and MLP
      lc.collectives += 2;
    }
    if (moe && o.devices > 1) {
      double routed = double(e.topK) * c.expertWidth();
      lc.dispatch = routed * (o.mxfp8Dispatch ? kMxfp8 : kBf16);
      lc.combine = routed * kBf16;
      lc.collectives += 2;
    }
    if (mla && o.splitMlaCache && tp > 1) {
      // Absorbed queries of all heads to every rank (bf16), partial outputs
      // (latent + log-sum-exp, f32) back to the heads' owners.
      lc.mlaCacheSplit = (T - 1) * m.numHeads *
                         (mlaRowBytes + (m.kvLoraRank + 1) * kF32);
      lc.collectives += 2;
    }
    // Tokens already on their expert's device send nothing.
    lc.intraNode = lc.tpAllReduce + lc.mlaCacheSplit +
                   (lc.dispatch + lc.combine) * intraFrac;
    lc.interNode = (lc.dispatch + lc.combine) * interFrac;
  };
  fill(plan.denseLayer, false, false);
  bool seenKda = false, seenMla = false;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    bool mla = c.layers[l] == AttentionKind::Mla;
    LayerComm lc;
    fill(lc, c.isMoeLayer(l), mla);
    plan.commBytesPerToken += lc.total();
    if (!c.isMoeLayer(l))
      continue;
    if (mla && !seenMla)
      plan.mlaMoeLayer = lc, seenMla = true;
    if (!mla && !seenKda)
      plan.kdaMoeLayer = lc, seenKda = true;
  }

  // Roofline of one step of `tokens` tokens over the grid. The load is
  // symmetric, so a device does 1/P of every per-token quantity.
  auto commTime = [&](const LayerComm &lc, double tokens) {
    double intra = tokens * lc.intraNode / P / o.nvlinkBytesPerS;
    double inter = tokens * lc.interNode / P / o.interNodeBytesPerS;
    double t = std::max(intra, inter) + lc.collectives * o.collectiveLatencyS;
    return (1.0 - o.overlap) * t;
  };
  auto expertsRead = [&](double tokens) {
    // Expected experts of a device hit by `tokens` tokens of top-k each,
    // routed uniformly.
    double miss = std::pow(1.0 - double(e.topK) / e.numExperts, tokens);
    return plan.expertsPerDevice * (1.0 - miss) * plan.bytesPerExpert;
  };
  auto step = [&](int64_t ctx, double tokens, bool decode) {
    PlanStep s;
    s.context = ctx;
    s.tokens = tokens;
    double requests = decode ? tokens : plan.groups;
    // The busiest group sets the pace: with ceil(B/G) requests in each group
    // the per-device load is that of a symmetric `paced` tokens.
    double paced = decode ? plan.requestsPerGroup * plan.groups : tokens;
    for (int64_t l = 0; l <= c.numLayers; ++l) {
      bool modelLevel = l == c.numLayers;
      const Placement &p = modelLevel ? model : layers[l];
      double flops = 2.0 * p.activeParams;
      if (!modelLevel)
        flops += coreFlops(c, l, double(ctx), decode);
      double compute = paced * flops / P / o.flopsPerS;
      // Weights are read once per step (the embedding: a row per token).
      double bytes = p.replicated - p.lookup + p.tensorParallel / T +
                     paced * c.hidden * kBf16 / P * (p.lookup > 0);
      if (!modelLevel && c.isMoeLayer(l))
        bytes += expertsRead(tokens);
      if (!modelLevel && c.layers[l] == AttentionKind::Mla) {
        // Decode reads every cached row of its requests; prefill writes its
        // new rows (the attention itself is compute-bound).
        double rows = decode ? paced * double(ctx) : tokens;
        bytes += rows * mlaRowBytes * (o.splitMlaCache ? 1.0 : T) / P;
      } else if (!modelLevel && decode) {
        bytes += 2.0 * paced * kdaStatePerRequest / nKda / P; // r + w
      }
      double hbm = bytes / o.hbmBytesPerS;
      LayerComm lc;
      if (!modelLevel)
        fill(lc, c.isMoeLayer(l), c.layers[l] == AttentionKind::Mla);
      double comm = commTime(lc, paced);
      s.computeS += compute;
      s.hbmS += hbm;
      s.commS += comm;
      s.stepS += std::max(compute, hbm) + comm;
    }
    s.tokensPerSAggregate = tokens / s.stepS;
    s.tokensPerSPerRequest = s.tokensPerSAggregate / requests;
    return s;
  };
  for (int64_t ctx : o.contexts) {
    plan.decode.push_back(step(ctx, double(o.batch), /*decode=*/true));
    plan.prefill.push_back(
        step(ctx, double(o.prefillTokensPerGroup) * plan.groups, false));
  }
  return plan;
}

static void writeComm(const LayerComm &lc, llvm::json::OStream &j) {
  j.object([&] {
    j.attribute("moe_dispatch", lc.dispatch);
    j.attribute("moe_combine", lc.combine);
    j.attribute("tp_all_reduce", lc.tpAllReduce);
    j.attribute("mla_cache_split", lc.mlaCacheSplit);
    j.attribute("total", lc.total());
    j.attribute("intra_node", lc.intraNode);
    j.attribute("inter_node", lc.interNode);
    j.attribute("collectives", lc.collectives);
  });
}

static void writeStep(const PlanStep &s, llvm::json::OStream &j) {
  j.object([&] {
    j.attribute("context", s.context);
    j.attribute("tokens_per_step", s.tokens);
    j.attribute("compute_s", s.computeS);
    j.attribute("hbm_s", s.hbmS);
    j.attribute("comm_s", s.commS);
    j.attribute("step_s", s.stepS);
    j.attribute("tokens_per_s_per_request", s.tokensPerSPerRequest);
    j.attribute("tokens_per_s_aggregate", s.tokensPerSAggregate);
  });
}

void kimi::writePlanJson(const SupernodePlan &plan, llvm::json::OStream &j) {
  const PlanOptions &o = plan.options;
  j.object([&] {
    j.attributeObject("grid", [&] {
      j.attribute("devices", plan.devices);
      j.attribute("tp_group", plan.tpGroup);
      j.attribute("groups", plan.groups);
      j.attribute("expert_parallel", plan.expertParallel);
      j.attribute("node_devices", std::min(o.nodeDevices, o.devices));
    });
    j.attributeObject("assumptions", [&] {
      j.attribute("device_memory_bytes", o.deviceMemory);
      j.attribute("batch", o.batch);
      j.attribute("requests_per_group", plan.requestsPerGroup);
      j.attribute("experts", o.mxfp4Experts ? "mxfp4" : "bf16");
      j.attribute("dispatch", o.mxfp8Dispatch ? "mxfp8" : "bf16");
      j.attribute("mla_cache", o.splitMlaCache ? "split" : "replicated");
      j.attribute("nvlink_bytes_per_s", o.nvlinkBytesPerS);
      j.attribute("inter_node_bytes_per_s", o.interNodeBytesPerS);
      j.attribute("hbm_bytes_per_s", o.hbmBytesPerS);
      j.attribute("flops_per_s", o.flopsPerS);
      j.attribute("collective_latency_s", o.collectiveLatencyS);
      j.attribute("comm_overlap", o.overlap);
      j.attribute("prefill_tokens_per_group", o.prefillTokensPerGroup);
    });
    j.attribute("experts_per_device", plan.expertsPerDevice);
    j.attributeObject("weights_per_device", [&] {
      j.attribute("bytes_per_expert", plan.bytesPerExpert);
      j.attribute("routed_experts", plan.expertBytes);
      j.attribute("tensor_parallel", plan.tpBytes);
      j.attribute("replicated", plan.replicatedBytes);
      j.attribute("total", plan.weightBytes);
      j.attribute("total_gb", plan.weightBytes / 1e9);
    });
    j.attributeArray("memory_per_device", [&] {
      for (const PlanCache &pc : plan.cache)
        j.object([&] {
          j.attribute("context", pc.context);
          j.attribute("mla_cache_bytes", pc.mlaCacheBytes);
          j.attribute("kda_state_bytes", pc.kdaStateBytes);
          j.attribute("total_bytes", pc.totalBytes);
          j.attribute("fits", pc.fits);
          j.attribute("headroom_bytes", pc.headroomBytes);
          j.attribute("max_batch", pc.maxBatch);
        });
    });
    j.attributeObject("comm_bytes_per_token_per_layer", [&] {
      j.attributeBegin("kda_moe_layer");
      writeComm(plan.kdaMoeLayer, j);
      j.attributeEnd();
      j.attributeBegin("mla_moe_layer");
      writeComm(plan.mlaMoeLayer, j);
      j.attributeEnd();
      j.attributeBegin("dense_layer");
      writeComm(plan.denseLayer, j);
      j.attributeEnd();
    });
    j.attribute("comm_bytes_per_token", plan.commBytesPerToken);
    j.attributeArray("decode", [&] {
      for (const PlanStep &s : plan.decode)
        writeStep(s, j);
    });
    j.attributeArray("prefill", [&] {
      for (const PlanStep &s : plan.prefill)
        writeStep(s, j);
    });
  });
}

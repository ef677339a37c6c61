//===- PlanReportTest.cpp - the supernode plan ----------------------------===//
//
// The plan is checked against hand computations from the K3 config
// (reference §1) and against computeModelCost: splitting the model over the
// grid must neither lose nor invent a byte.
//
//===----------------------------------------------------------------------===//

#include "models/import/PlanReport.h"
#include "gtest/gtest.h"
#include <cmath>

using namespace kimi;

#ifndef KIMI_SOURCE_DIR
#error "KIMI_SOURCE_DIR must point at the repository"
#endif

namespace {

ModelConfig loadK3() {
  llvm::Expected<ModelConfig> cfg =
      readModelConfig(std::string(KIMI_SOURCE_DIR) + "/models/kimi-k3.json");
  if (!cfg) {
    ADD_FAILURE() << llvm::toString(cfg.takeError());
    return {};
  }
  return *cfg;
}

SupernodePlan plan(const ModelConfig &cfg, const PlanOptions &options) {
  llvm::Expected<SupernodePlan> p = computePlan(cfg, options);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return *p;
}

/// The error message of a refused plan ("" when it was accepted).
std::string refusal(const ModelConfig &cfg, const PlanOptions &options) {
  llvm::Expected<SupernodePlan> p = computePlan(cfg, options);
  if (p)
    return "";
  return llvm::toString(p.takeError());
}

TEST(PlanReport, K3On64Devices) {
  ModelConfig cfg = loadK3();
  SupernodePlan p = plan(cfg, {});
  EXPECT_EQ(p.devices, 64);
  EXPECT_EQ(p.tpGroup, 8);
  EXPECT_EQ(p.groups, 8);
  EXPECT_EQ(p.expertsPerDevice, 14); // 896 / 64
  // One expert: gate, up, down of 3072 x 3584, 4 bits + one E8M0 byte per
  // 32 values.
  double expert = 3.0 * 3072 * 3584 * (0.5 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(p.bytesPerExpert, expert);
  EXPECT_DOUBLE_EQ(p.expertBytes, 92 * 14 * expert); // 92 MoE layers
  EXPECT_LT(p.weightBytes, 141e9);
  for (const PlanCache &c : p.cache)
    EXPECT_TRUE(c.fits) << c.context;
  // Per token, MoE layer: 16 latent rows of 3584 in MXFP8 out, bf16 back;
  // two ring all-reduces of a bf16 hidden state over 8 ranks, 2 * 7 * 14336
  // bytes each summed over the ranks.
  EXPECT_DOUBLE_EQ(p.kdaMoeLayer.dispatch, 16 * 3584 * (1 + 1.0 / 32));
  EXPECT_DOUBLE_EQ(p.kdaMoeLayer.combine, 16 * 3584 * 2.0);
  EXPECT_DOUBLE_EQ(p.kdaMoeLayer.tpAllReduce, 2 * 2 * 7 * 7168 * 2.0);
  EXPECT_EQ(p.kdaMoeLayer.mlaCacheSplit, 0.0);
  EXPECT_GT(p.mlaMoeLayer.mlaCacheSplit, 0.0);
  // 56 of the 64 expert devices are in other nodes.
  EXPECT_DOUBLE_EQ(p.kdaMoeLayer.interNode,
                   (p.kdaMoeLayer.dispatch + p.kdaMoeLayer.combine) * 56 / 64);
}

TEST(PlanReport, SplitLosesNoByte) {
  ModelConfig cfg = loadK3();
  for (bool mxfp4 : {true, false}) {
    ReportOptions ro;
    ro.mxfp4Experts = mxfp4;
    ModelCost cost = computeModelCost(cfg, ro);
    double partsExperts = 0;
    for (const ParameterPart &part : cost.parts)
      if (part.name == "moe.routed_experts")
        partsExperts = part.bytes;
    for (const char *grid : {"64", "8x8", "32", "16x4", "1"}) {
      PlanOptions o;
      o.mxfp4Experts = mxfp4;
      ASSERT_FALSE(bool(parseGrid(grid, o)));
      SupernodePlan p = plan(cfg, o);
      SCOPED_TRACE(grid);
      // Sum over devices of the expert bytes = the model's expert bytes.
      EXPECT_NEAR(p.expertBytes * p.devices / partsExperts, 1.0, 1e-12);
      EXPECT_NEAR((p.totalExpertBytes + p.totalTpBytes +
                   p.totalReplicatedBytes) /
                      cost.weightBytes,
                  1.0, 1e-12);
      EXPECT_NEAR(p.tpBytes * p.tpGroup / p.totalTpBytes, 1.0, 1e-12);
    }
  }
}

TEST(PlanReport, CacheIsLinearInContextAndBatch) {
  ModelConfig cfg = loadK3();
  PlanOptions o;
  o.contexts = {65536, 131072, 262144};
  o.batch = 8; // one request per TP group
  SupernodePlan one = plan(cfg, o);
  o.batch = 24;
  SupernodePlan three = plan(cfg, o);
  ASSERT_EQ(one.cache.size(), 3u);
  // 24 MLA layers x 576 x 2 bytes per token, split over the 8 ranks.
  EXPECT_DOUBLE_EQ(one.cache[0].mlaCacheBytes, 24 * 576 * 2.0 * 65536 / 8);
  EXPECT_DOUBLE_EQ(one.cache[1].mlaCacheBytes, 2 * one.cache[0].mlaCacheBytes);
  EXPECT_DOUBLE_EQ(one.cache[2].mlaCacheBytes, 4 * one.cache[0].mlaCacheBytes);
  // KDA state does not grow with the context, and is split by heads.
  EXPECT_DOUBLE_EQ(one.cache[0].kdaStateBytes, one.cache[2].kdaStateBytes);
  EXPECT_DOUBLE_EQ(one.cache[0].kdaStateBytes,
                   69 * (96 * 128 * 128 * 4.0 + 3 * 3 * 96 * 128 * 4.0) / 8);
  for (int i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(three.cache[i].mlaCacheBytes,
                     3 * one.cache[i].mlaCacheBytes);
    EXPECT_DOUBLE_EQ(three.cache[i].kdaStateBytes,
                     3 * one.cache[i].kdaStateBytes);
  }
  // Replicating the latent costs the group size.
  o.splitMlaCache = false;
  SupernodePlan replicated = plan(cfg, o);
  EXPECT_DOUBLE_EQ(replicated.cache[1].mlaCacheBytes,
                   8 * three.cache[1].mlaCacheBytes);
}

TEST(PlanReport, StepTimes) {
  ModelConfig cfg = loadK3();
  PlanOptions o;
  o.batch = 64;
  SupernodePlan p = plan(cfg, o);
  ASSERT_EQ(p.decode.size(), 2u);
  for (const PlanStep &s : p.decode) {
    EXPECT_GT(s.stepS, 0);
    EXPECT_GE(s.stepS + 1e-15, std::max(s.computeS, s.hbmS));
    EXPECT_DOUBLE_EQ(s.tokensPerSAggregate, 64 * s.tokensPerSPerRequest);
  }
  // A longer context reads more cache: slower decode.
  EXPECT_GT(p.decode[1].stepS, p.decode[0].stepS);
  // Hidden communication cannot slow a step down; faster links help.
  o.overlap = 1.0;
  SupernodePlan hidden = plan(cfg, o);
  EXPECT_LT(hidden.decode[0].stepS, p.decode[0].stepS);
  EXPECT_EQ(hidden.decode[0].commS, 0.0);
  o.overlap = 0.0;
  o.interNodeBytesPerS *= 4;
  SupernodePlan fast = plan(cfg, o);
  EXPECT_LT(fast.decode[0].commS, p.decode[0].commS);
  // Prefill of 8192 tokens per group is compute-bound on K3.
  EXPECT_GT(p.prefill[0].computeS, p.prefill[0].hbmS);
}

TEST(PlanReport, InvalidOptionsNameTheOption) {
  ModelConfig cfg = loadK3();
  auto with = [&](auto edit) {
    PlanOptions o;
    edit(o);
    return refusal(cfg, o);
  };
  EXPECT_NE(with([](PlanOptions &o) { o.devices = 0; }).find("--grid"),
            std::string::npos);
  EXPECT_NE(with([](PlanOptions &o) { o.devices = 65; }).find("--grid"),
            std::string::npos);
  std::string experts = with([](PlanOptions &o) { o.devices = 48; });
  EXPECT_NE(experts.find("--grid"), std::string::npos);
  EXPECT_NE(experts.find("896 routed experts"), std::string::npos) << experts;
  std::string heads = with([](PlanOptions &o) {
    o.devices = 7;
    o.tpGroup = 7;
  });
  EXPECT_NE(heads.find("--tp-group: 7 does not divide the 96 KDA heads"),
            std::string::npos)
      << heads;
  EXPECT_NE(with([](PlanOptions &o) { o.tpGroup = 3; }).find("--tp-group"),
            std::string::npos);
  EXPECT_NE(with([](PlanOptions &o) { o.tpGroup = 16; }).find("--tp-group"),
            std::string::npos); // larger than a node
  EXPECT_NE(with([](PlanOptions &o) { o.batch = 0; }).find("--batch"),
            std::string::npos);
  EXPECT_NE(with([](PlanOptions &o) { o.overlap = 1.5; }).find("--comm-overlap"),
            std::string::npos);
  EXPECT_NE(with([](PlanOptions &o) { o.contexts = {0}; })
                .find("--plan-context"),
            std::string::npos);

  PlanOptions o;
  EXPECT_FALSE(bool(parseGrid("8x8", o)));
  EXPECT_EQ(o.devices, 64);
  EXPECT_EQ(o.tpGroup, 8);
  for (const char *bad : {"", "x8", "8x", "8x0", "eight", "8x8x8"}) {
    PlanOptions q;
    llvm::Error err = parseGrid(bad, q);
    ASSERT_TRUE(bool(err)) << bad;
    EXPECT_NE(llvm::toString(std::move(err)).find("--grid"),
              std::string::npos);
  }
  PlanOptions conflict;
  conflict.tpGroup = 4;
  llvm::Error err = parseGrid("8x8", conflict);
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("--tp-group"),
            std::string::npos);
}

} // namespace

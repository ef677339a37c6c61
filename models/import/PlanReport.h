//===- PlanReport.h - a model partitioned over a supernode ------*- C++ -*-===//
//
// The plan report: how a ModelConfig is laid out over a grid of up to 64
// devices (routed experts expert-parallel over the whole grid, attention, KDA
// and dense MLPs tensor-parallel within a node-sized group), what each device
// stores, what crosses the links per token, and a roofline model of one
// decode step and of prefill. Assumptions and formulas: docs/plan-report.md.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_MODELS_IMPORT_PLANREPORT_H
#define KIMI_MODELS_IMPORT_PLANREPORT_H

#include "models/import/ModelConfig.h"
#include "models/import/ModelReport.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include <vector>

namespace kimi {

struct PlanOptions {
  /// Devices in the grid (1..64). Routed experts are split over all of them.
  int64_t devices = 64;
  /// Tensor-parallel group (attention/KDA heads, shared experts, dense MLP,
  /// lm_head); 0 = min(8, devices). The grid is devices/tp groups of tp.
  int64_t tpGroup = 0;
  /// Devices per node (NVLink domain); links leaving it are inter-node.
  int64_t nodeDevices = 8;
  /// Bytes of one device's memory (H200: 141 GB).
  double deviceMemory = 141e9;
  /// Concurrent requests over the whole grid (one decode token each).
  int64_t batch = 1;
  std::vector<int64_t> contexts = {131072, 1048576};
  /// Routed experts as MXFP4 (with E8M0 scales); else bf16.
  bool mxfp4Experts = true;
  /// MoE dispatch activations as MXFP8 (1 byte + one E8M0 byte per 32);
  /// else bf16. The combine is always bf16.
  bool mxfp8Dispatch = true;
  /// MLA latent cache split by sequence over the TP group (default), or
  /// replicated on every rank of the group.
  bool splitMlaCache = true;
  /// Link and device rates (docs/plan-report.md gives the sources).
  double nvlinkBytesPerS = 300e9;    // per device, per direction (measured)
  double interNodeBytesPerS = 50e9;  // per device, per direction (400 Gb/s)
  double hbmBytesPerS = 4.26e12;     // measured copy rate, reference §8
  double flopsPerS = 754e12;         // measured bf16 matmul, reference §8
  /// Fixed cost of one collective (launch + synchronisation).
  double collectiveLatencyS = 10e-6;
  /// Fraction of communication time hidden under compute (0..1).
  double overlap = 0.0;
  /// Tokens one TP group prefills per step.
  int64_t prefillTokensPerGroup = 8192;
};

/// Parses `--grid`: "N" (N devices, TP group from `tpGroup`) or "GxT"
/// (G groups of T devices: G*T devices, TP group T). Sets `devices` and,
/// for the 2-D form, `tpGroup`.
llvm::Error parseGrid(llvm::StringRef text, PlanOptions &options);

/// Bytes one token puts on the links in one layer, summed over devices.
struct LayerComm {
  double dispatch = 0.0;     // MoE all-to-all, token -> experts (latent)
  double combine = 0.0;      // MoE all-to-all, experts -> token (latent)
  double tpAllReduce = 0.0;  // hidden-state all-reduces in the TP group
  double mlaCacheSplit = 0.0; // query all-gather + partial reduce-scatter
  double intraNode = 0.0;
  double interNode = 0.0;
  int64_t collectives = 0;   // collectives per layer (latency terms)
  double total() const { return dispatch + combine + tpAllReduce + mlaCacheSplit; }
};

struct PlanCache {
  int64_t context = 0;
  double mlaCacheBytes = 0.0; // per device
  double kdaStateBytes = 0.0; // per device
  double totalBytes = 0.0;    // weights + cache + state per device
  bool fits = false;
  double headroomBytes = 0.0; // device memory - total (negative: overflow)
  /// Requests of this context that fit per device beside the weights, as a
  /// whole-grid batch.
  int64_t maxBatch = 0;
};

struct PlanStep {
  int64_t context = 0;
  double tokens = 0.0;       // tokens in the step, whole grid
  double computeS = 0.0, hbmS = 0.0, commS = 0.0, stepS = 0.0;
  double tokensPerSPerRequest = 0.0;
  double tokensPerSAggregate = 0.0;
};

struct SupernodePlan {
  PlanOptions options;
  int64_t devices = 0, tpGroup = 0, groups = 0, expertParallel = 0;
  int64_t expertsPerDevice = 0;
  double requestsPerGroup = 0.0;
  // Per-device weight bytes.
  double bytesPerExpert = 0.0;
  double expertBytes = 0.0;      // routed experts on one device
  double tpBytes = 0.0;          // TP-split parts, this device's share
  double replicatedBytes = 0.0;  // parts every device holds whole
  double weightBytes = 0.0;
  /// The same parts unsplit (their sum is the model's weight bytes).
  double totalExpertBytes = 0.0, totalTpBytes = 0.0, totalReplicatedBytes = 0.0;
  std::vector<PlanCache> cache;
  LayerComm kdaMoeLayer, mlaMoeLayer, denseLayer;
  double commBytesPerToken = 0.0; // whole model
  std::vector<PlanStep> decode, prefill;
};

/// Checks the options against the model (errors name the option) and plans.
llvm::Expected<SupernodePlan> computePlan(const ModelConfig &config,
                                          const PlanOptions &options);

/// Writes the plan as the value of the current JSON attribute.
void writePlanJson(const SupernodePlan &plan, llvm::json::OStream &j);

} // namespace kimi

#endif

//===- ModelReport.h - what a model costs -----------------------*- C++ -*-===//
//
// Parameter, weight-byte, FLOP and memory accounting of a ModelConfig,
// derived part by part from the architecture (docs/model-accounting.md).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_MODELS_IMPORT_MODELREPORT_H
#define KIMI_MODELS_IMPORT_MODELREPORT_H

#include "models/import/ModelConfig.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include <string>
#include <vector>

namespace kimi {

/// Parameters of one part of the model, summed over all layers.
struct ParameterPart {
  std::string name;
  int64_t layers = 0;        // layers that have this part (0 = model level)
  int64_t total = 0;         // parameters
  int64_t active = 0;        // parameters used per token
  double bytes = 0.0;        // storage under the report's formats
};

struct ModelCost {
  std::vector<ParameterPart> parts;
  int64_t totalParams = 0;
  /// Parameters used per token, without the input embedding table (a lookup,
  /// not a product), as the K3 report counts them.
  int64_t activeParams = 0;
  double weightBytes = 0.0;
  int64_t context = 0;
  double prefillFlopsPerToken = 0.0;
  double decodeFlopsPerToken = 0.0;
  /// MLA latent cache bytes per token (all MLA layers).
  double cacheBytesPerToken = 0.0;
  /// KDA recurrent + conv state bytes per request (independent of length).
  double stateBytesPerRequest = 0.0;
};

struct ReportOptions {
  /// Routed experts as MXFP4 (4 bits + one E8M0 byte per 32 values); else
  /// bf16 like every other weight.
  bool mxfp4Experts = true;
  /// Context length for the FLOP figures.
  int64_t context = 131072;
};

ModelCost computeModelCost(const ModelConfig &config,
                           const ReportOptions &options);

/// Writes the cost as JSON (with per-request memory at 128K and 1M tokens).
/// `extra`, when given, adds attributes at the end of the top-level object
/// (the supernode plan of `--grid`).
void writeModelReport(
    const ModelConfig &config, const ModelCost &cost, llvm::raw_ostream &os,
    llvm::function_ref<void(llvm::json::OStream &)> extra = nullptr);

} // namespace kimi

#endif

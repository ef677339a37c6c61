//===- ModelImportTest.cpp - importer and accounting ----------------------===//
//
// The cost report is checked against two independent references: the
// published K3 totals, and the weights the importer actually declares (the
// report's parameter count must equal the sum of the declared tensors, for
// every shipped config). The config reader is fuzzed: no input may crash it.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "models/import/ModelImporter.h"
#include "models/import/ModelReport.h"
#include "models/import/WeightNames.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "gtest/gtest.h"
#include <cmath>
#include <random>

using namespace kimi;

#ifndef KIMI_SOURCE_DIR
#error "KIMI_SOURCE_DIR must point at the repository"
#endif

namespace {

std::string modelPath(const char *name) {
  return std::string(KIMI_SOURCE_DIR) + "/models/" + name + ".json";
}

ModelConfig load(const char *name) {
  llvm::Expected<ModelConfig> cfg = readModelConfig(modelPath(name));
  if (!cfg) {
    ADD_FAILURE() << llvm::toString(cfg.takeError());
    return {};
  }
  return *cfg;
}

TEST(ModelReport, K3MatchesPublishedTotals) {
  ModelConfig cfg = load("kimi-k3");
  ModelCost cost = computeModelCost(cfg, {});
  // K3 report Table 1: 2.78T total, 104.2B active (input embedding excluded).
  EXPECT_LT(std::abs(cost.totalParams / 2.78e12 - 1.0), 0.005)
      << cost.totalParams;
  EXPECT_LT(std::abs(cost.activeParams / 104.2e9 - 1.0), 0.005)
      << cost.activeParams;
  EXPECT_EQ(cfg.countLayers(AttentionKind::Mla), 24);
  EXPECT_EQ(cfg.countLayers(AttentionKind::Kda), 69);
}

TEST(ModelReport, KimiLinearMatchesModelCardRounding) {
  ModelCost cost = computeModelCost(load("kimi-linear-48b-a3b"), {});
  // The model card rounds to 48B total / 3B active; the count without the
  // two 0.38B vocabulary matrices is 48.4B (docs/model-import.md).
  EXPECT_GT(cost.totalParams, 48e9);
  EXPECT_LT(cost.totalParams, 50e9);
  EXPECT_GT(cost.activeParams, 2.5e9);
  EXPECT_LT(cost.activeParams, 3.5e9);
}

/// Elements and bytes of every kimi.weight in `module`; E8M0 scales are
/// counted as bytes, not parameters.
std::pair<int64_t, double> declaredWeights(mlir::ModuleOp module) {
  int64_t params = 0;
  double bytes = 0;
  for (auto weight : module.getOps<WeightOp>()) {
    auto type = llvm::cast<mlir::RankedTensorType>(weight.getType());
    mlir::Type et = type.getElementType();
    double width = et.getIntOrFloatBitWidth() / 8.0;
    bytes += type.getNumElements() * width;
    if (!llvm::isa<mlir::Float8E8M0FNUType>(et))
      params += type.getNumElements();
  }
  return {params, bytes};
}

class ReportAgreesWithImport : public ::testing::TestWithParam<const char *> {};

TEST_P(ReportAgreesWithImport, ParametersAndBytes) {
  ModelConfig cfg = load(GetParam());
  mlir::MLIRContext ctx;
  ImportOptions options; // bf16 weights, MXFP4 experts: the report's formats
  auto module = importModel(cfg, options, ctx);
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  auto [params, bytes] = declaredWeights(**module);
  // The report counts what the release stores: beyond the weights the
  // model reads, K3's layer 0 keeps an unused AttnRes pair (norm + query,
  // bf16) and A_log is padded to 128 values (f32).
  if (cfg.layout == CheckpointLayout::K3) {
    int64_t unusedAttnRes = cfg.attnResBlock ? 2 * cfg.hidden : 0;
    int64_t aLogPad = (cfg.storedALogLength() - cfg.kda.numHeads) *
                      cfg.countLayers(AttentionKind::Kda);
    params += unusedAttnRes + aLogPad;
    bytes += 2.0 * unusedAttnRes + 4.0 * aLogPad;
  }
  // The importer stores the small gate parameters and conv weights in f32
  // and so does the report; the sums must agree exactly.
  ReportOptions reportOptions;
  reportOptions.mxfp4Experts = options.mxfp4Experts;
  ModelCost cost = computeModelCost(cfg, reportOptions);
  EXPECT_EQ(cost.totalParams, params);
  EXPECT_DOUBLE_EQ(cost.weightBytes, bytes);
}

INSTANTIATE_TEST_SUITE_P(Models, ReportAgreesWithImport,
                         ::testing::Values("kimi-k3", "kimi-linear-48b-a3b",
                                           "k3-tiny", "k3-mini"),
                         [](const auto &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (c == '-')
                               c = '_';
                           return name;
                         });

TEST(WeightNames, AliasesCoverReleasedSpellings) {
  std::vector<std::string> names =
      weightNameSpellings(WeightRole::ExpertGate, 5, 17);
  EXPECT_EQ(names.front(), "model.layers.5.mlp.experts.17.gate_proj.weight");
  EXPECT_NE(std::find(names.begin(), names.end(),
                      "language_model.model.layers.5.block_sparse_moe."
                      "experts.17.w1.weight"),
            names.end());
  // Every role has exactly one row.
  for (const WeightNameRule &rule : weightNameTable())
    EXPECT_EQ(llvm::count_if(weightNameTable(),
                             [&](const WeightNameRule &other) {
                               return other.role == rule.role;
                             }),
              1)
        << rule.canonical.str();
}

/// Mutates the k3-tiny config (byte flips, truncation, splices of digits and
/// JSON punctuation) and feeds it to the reader and, when it is accepted, the
/// importer. Either may refuse; neither may crash.
TEST(ConfigFuzz, MutatedConfigsNeverCrash) {
  auto buffer = llvm::MemoryBuffer::getFile(modelPath("k3-tiny"));
  ASSERT_TRUE(bool(buffer));
  std::string original = (*buffer)->getBuffer().str();
  unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const char alphabet[] = "0123456789-.,:{}[]\"eE truefalsn";
  int accepted = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string text = original;
    int edits = 1 + rng() % 4;
    for (int e = 0; e < edits && !text.empty(); ++e) {
      size_t at = rng() % text.size();
      switch (rng() % 4) {
      case 0:
        text[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
        text.resize(at);
        break;
      case 2:
        text.insert(at, 1, alphabet[rng() % (sizeof(alphabet) - 1)]);
        break;
      default:
        text.erase(at, 1 + rng() % 8);
      }
    }
    llvm::Expected<ModelConfig> cfg = parseModelConfig(text, "fuzz");
    if (!cfg) {
      std::string message = llvm::toString(cfg.takeError());
      EXPECT_EQ(message.rfind("fuzz: ", 0), 0u) << message;
      continue;
    }
    ++accepted;
    computeModelCost(*cfg, {});
    mlir::MLIRContext ctx;
    ImportOptions options;
    options.mxfp4Experts = false;
    auto module = importModel(*cfg, options, ctx);
    if (!module)
      llvm::consumeError(module.takeError());
  }
  RecordProperty("accepted", accepted);
}

} // namespace

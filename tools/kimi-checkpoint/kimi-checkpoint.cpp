//===- kimi-checkpoint.cpp - writes checkpoints in the released layouts ---===//
//
//   kimi-checkpoint CONFIG.json -o DIR [--seed N] [--shards N] [--config-only]
//
// Writes DIR/config.json as the release writes it (PretrainedConfig
// boilerplate; for K3 the multimodal wrapper and its quantization_config)
// and, unless --config-only, random weights in the released layout: shards,
// model.safetensors.index.json, real names, shapes and dtypes, routed
// experts MXFP4-packed when the K3 layout's widths allow it. A checkpoint
// that kimi-run loads the way it loads a downloaded one.
//
//===----------------------------------------------------------------------===//

#include "models/checkpoint/ReleasedCheckpoint.h"
#include "runtime/weights/random_weights.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace kimi;
namespace cl = llvm::cl;

namespace {
cl::OptionCategory category("kimi-checkpoint options");
cl::opt<std::string> configPath(cl::Positional, cl::Required,
                                cl::desc("<config.json>"), cl::cat(category));
cl::opt<std::string> outputDir("o", cl::Required,
                               cl::desc("Directory to write (created)"),
                               cl::value_desc("dir"), cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of the random weights"),
                       cl::init(1), cl::cat(category));
cl::opt<int> shards("shards", cl::desc("Number of safetensors shards"),
                    cl::init(3), cl::cat(category));
cl::opt<bool> configOnly("config-only",
                         cl::desc("Write only config.json, no weights"),
                         cl::init(false), cl::cat(category));
cl::opt<bool> mxfp4("mxfp4-experts",
                    cl::desc("K3 layout: routed experts as MXFP4 (default: "
                             "when their widths are multiples of 32)"),
                    cl::init(true), cl::cat(category));

int fail(const llvm::Twine &message) {
  llvm::errs() << "kimi-checkpoint: error: " << message << "\n";
  return 1;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "kimi-checkpoint: writes a checkpoint in the layout the Kimi releases "
      "use (shared/reference/kimi-k3.md section 9)\n\n"
      "  kimi-checkpoint models/k3-tiny.json -o k3-tiny-release\n"
      "  kimi-run k3-tiny.kimi --weights k3-tiny-release\n");
  if (shards < 1)
    return fail("--shards must be positive");

  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(configPath, /*IsText=*/true);
  if (!buffer)
    return fail(configPath + ": " + buffer.getError().message());
  llvm::Expected<ModelConfig> parsed =
      parseModelConfig((*buffer)->getBuffer(), configPath);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()));
  const bool k3 = parsed->layout == CheckpointLayout::K3;
  const bool quantize = k3 && mxfp4 && parsed->expertWidth() % 32 == 0 &&
                        parsed->moe.intermediate % 32 == 0;
  if (k3 && mxfp4 && mxfp4.getNumOccurrences() && !quantize)
    return fail("MXFP4 experts need routed widths that are multiples of 32");
  llvm::Expected<std::string> text =
      releasedConfigText((*buffer)->getBuffer(), quantize);
  if (!text)
    return fail(llvm::toString(text.takeError()));
  llvm::Expected<ModelConfig> config =
      parseModelConfig(*text, outputDir + "/config.json");
  if (!config)
    return fail("internal error: the written config does not read back: " +
                llvm::toString(config.takeError()));

  if (configOnly) {
    if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
      return fail("cannot create '" + outputDir + "': " + ec.message());
    std::error_code ec;
    llvm::raw_fd_ostream out(outputDir + "/config.json", ec);
    if (ec)
      return fail("cannot write config.json: " + ec.message());
    out << *text;
    return 0;
  }
  auto values = [&](const std::string &name, const std::vector<int64_t> &shape) {
    std::vector<float> f = rt::randomWeight(name, shape, seed);
    return std::vector<double>(f.begin(), f.end());
  };
  CheckpointWriteOptions options;
  options.shards = shards;
  llvm::Expected<std::map<std::string, std::vector<double>>> written =
      writeReleasedCheckpoint(*config, *text, outputDir, values, options);
  if (!written)
    return fail(llvm::toString(written.takeError()));
  llvm::outs() << "kimi-checkpoint: wrote " << releasedTensors(*config).size()
               << " text tensors in " << shards << " shards to " << outputDir
               << " (" << (k3 ? "K3" : "Kimi Linear") << " layout"
               << (quantize ? ", MXFP4 experts" : "") << ")\n";
  return 0;
}

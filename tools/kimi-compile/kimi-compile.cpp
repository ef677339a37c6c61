//===- kimi-compile.cpp - compile a model config --------------------------===//
//
//   kimi-compile config.json --emit=kimi [-o model.mlir]   whole model as kimi IR
//   kimi-compile config.json --report [--context N]        cost report (JSON)
//
//===----------------------------------------------------------------------===//

#include "models/import/ModelImporter.h"
#include "models/import/ModelReport.h"
#include "lowering/Passes.h"
#include "passes/Passes.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "lowering/ToProgram/CpuArtifact.h"
#include "llvm/Support/MemoryBuffer.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#ifndef KIMI_VERSION
#define KIMI_VERSION "unknown"
#endif

namespace cl = llvm::cl;
using namespace kimi;

namespace {
enum class Emit { Artifact, Kimi, SharedObject, LLVMIR };
enum class Target { Cpu, Sm90a };

cl::OptionCategory category("kimi-compile options");

cl::opt<std::string> configPath(cl::Positional, cl::Required,
                                cl::desc("<config.json>"), cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::cat(category));
cl::opt<Target> target(
    "target", cl::desc("Where the model runs"), cl::init(Target::Cpu),
    cl::values(clEnumValN(Target::Cpu, "cpu", "the host CPU (default)"),
               clEnumValN(Target::Sm90a, "sm_90a",
                          "NVIDIA Hopper (not available yet)")),
    cl::cat(category));
cl::opt<Emit> emit("emit", cl::desc("What to produce"),
                   cl::init(Emit::Artifact),
                   cl::values(clEnumValN(Emit::Artifact, "artifact",
                                         "the .kimi artifact the runtime "
                                         "executes (default; needs -o)"),
                              clEnumValN(Emit::Kimi, "kimi",
                                         "the whole model in the kimi dialect "
                                         "(@prefill and @decode)"),
                              clEnumValN(Emit::SharedObject, "so",
                                         "the CPU shared object alone"),
                              clEnumValN(Emit::LLVMIR, "llvm",
                                         "the optimised LLVM IR of the CPU "
                                         "code")),
                   cl::cat(category));
cl::opt<bool> report("report",
                     cl::desc("Print the cost report (parameters, weight "
                              "bytes, FLOPs per token, cache and state "
                              "bytes) as JSON instead of compiling"),
                     cl::cat(category));
cl::opt<int64_t> context("context",
                         cl::desc("Context length for the report's FLOPs per "
                                  "token (default 131072)"),
                         cl::init(131072), cl::cat(category));
cl::opt<NumericType> activations(
    "activations", cl::desc("Activation element type"),
    cl::init(NumericType::BF16),
    cl::values(clEnumValN(NumericType::BF16, "bf16", "bfloat16"),
               clEnumValN(NumericType::F32, "f32", "float32")),
    cl::cat(category));
cl::opt<NumericType> weights(
    "weights", cl::desc("Storage type of dense weights"),
    cl::init(NumericType::BF16),
    cl::values(clEnumValN(NumericType::BF16, "bf16", "bfloat16"),
               clEnumValN(NumericType::F32, "f32", "float32")),
    cl::cat(category));
cl::opt<bool> mxfp4Experts("mxfp4-experts",
                           cl::desc("Store routed experts as MXFP4 (default "
                                    "on; =false keeps them in the dense "
                                    "weight type)"),
                           cl::init(true), cl::cat(category));
cl::opt<int64_t> decodeBatch("decode-batch",
                             cl::desc("Sequences per @decode step"),
                             cl::init(1), cl::cat(category));
cl::opt<int64_t> prefillChunk(
    "prefill-chunk",
    cl::desc("0: @prefill takes a whole sequence from zero state; N: @prefill "
             "is a stateful step over N tokens (static shapes)"),
    cl::init(0), cl::cat(category));
cl::opt<std::string> frontPipeline(
    "front-pipeline",
    cl::desc("Passes run on kimi IR before lowering to CPU code (default: "
             "the decay proof and KDA chunking)"),
    cl::init("kimi-prove-decay-bounds,kimi-chunk-kda"), cl::cat(category));
cl::opt<bool> allowUnknown("allow-unknown-fields",
                           cl::desc("Skip config fields kimi does not know "
                                    "instead of rejecting them"),
                           cl::cat(category));
} // namespace

static int fail(const llvm::Twine &message) {
  llvm::errs() << "kimi-compile: error: " << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  kimi::registerKimiLoweringPasses();
  kimi::registerKimiPasses();
  cl::AddExtraVersionPrinter([](llvm::raw_ostream &os) {
    os << "kimi-compile " << KIMI_VERSION << "\n";
  });
  cl::ParseCommandLineOptions(
      argc, argv,
      "kimi-compile: compiles a Kimi-family model from its Hugging Face "
      "config.json.\n\n"
      "  kimi-compile config.json --target cpu -o model.kimi\n"
      "  kimi-compile config.json --emit=kimi -o model.mlir\n"
      "  kimi-compile config.json --report --context 1048576\n");

  ConfigReadOptions readOptions;
  readOptions.allowUnknownFields = allowUnknown;
  llvm::Expected<ModelConfig> config = readModelConfig(configPath, readOptions);
  if (!config)
    return fail(llvm::toString(config.takeError()));

  if (emit == Emit::Artifact && outputPath == "-" && !report)
    return fail("the artifact is binary: name the output file with -o");
  if (target == Target::Sm90a && !report && emit != Emit::Kimi)
    return fail("--target sm_90a is not available yet; use --target cpu");

  std::string errorMessage;
  std::unique_ptr<llvm::ToolOutputFile> output;
  if (emit != Emit::Artifact || report) {
    output = mlir::openOutputFile(outputPath, &errorMessage);
    if (!output)
      return fail(errorMessage);
  }

  if (report) {
    if (context < 1)
      return fail("--context must be positive");
    ReportOptions options;
    options.mxfp4Experts = mxfp4Experts;
    options.context = context;
    writeModelReport(*config, computeModelCost(*config, options), output->os());
    output->keep();
    return 0;
  }

  // The CPU target computes in f32 with dense weights (the runtime converts
  // bf16 and dequantises MXFP4 at load) and prefills in static chunks.
  bool cpu = emit != Emit::Kimi;
  ImportOptions options;
  options.activations = cpu ? NumericType::F32 : activations.getValue();
  options.weights = cpu ? NumericType::F32 : weights.getValue();
  options.mxfp4Experts = cpu ? false : mxfp4Experts.getValue();
  options.decodeBatch = decodeBatch;
  options.prefillChunk = cpu && prefillChunk == 0 ? 64 : prefillChunk.getValue();
  mlir::DialectRegistry registry;
  registerImportDialects(registry);
  registerCpuCodegenDialects(registry);
  mlir::MLIRContext context(registry);
  auto module = importModel(*config, options, context);
  if (!module)
    return fail(llvm::toString(module.takeError()));
  if (cpu) {
    // The artifact's signatures come from the imported IR, before lowering.
    rt::ArtifactSpec spec;
    if (emit == Emit::Artifact) {
      auto text = llvm::MemoryBuffer::getFile(configPath, /*IsText=*/true);
      if (!text)
        return fail(configPath + ": cannot read: " + text.getError().message());
      llvm::Expected<rt::ArtifactSpec> described =
          describeCpuArtifact(**module, *config, (*text)->getBuffer());
      if (!described)
        return fail(llvm::toString(described.takeError()));
      spec = std::move(*described);
    }
    CpuCodegenOptions codegen;
    codegen.frontPipeline = frontPipeline;
    std::string llvmIR;
    if (emit == Emit::LLVMIR)
      codegen.llvmIR = &llvmIR;
    llvm::Expected<std::string> so = compileToSharedObject(**module, codegen);
    if (!so)
      return fail(llvm::toString(so.takeError()));
    if (emit == Emit::Artifact) {
      if (llvm::Error e = writeCpuArtifact(std::move(spec), *so, outputPath))
        return fail(llvm::toString(std::move(e)));
      return 0;
    }
    output->os() << (emit == Emit::LLVMIR ? llvmIR : *so);
    output->keep();
    return 0;
  }
  (*module)->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}

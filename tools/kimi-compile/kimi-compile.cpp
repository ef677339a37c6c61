//===- kimi-compile.cpp - compile a model config --------------------------===//
//
//   kimi-compile config.json --emit=kimi [-o model.mlir]   whole model as kimi IR
//   kimi-compile config.json --emit=linalg|memref          after that stage
//                                      (docs/lowering/pipelines.md)
//   kimi-compile config.json --report [--context N]        cost report (JSON)
//   kimi-compile config.json --report --grid 64 [--tp-group 8 ...]
//                                      + the supernode plan (docs/plan-report.md)
//   kimi-compile config.json --grid 8 --strategy tp,ep -o model.kimi
//                                      partitioned over 8 ranks (docs/passes/shard.md)
//
//===----------------------------------------------------------------------===//

#include "models/import/ModelImporter.h"
#include "models/import/ModelReport.h"
#include "models/import/PlanReport.h"
#include "lowering/Passes.h"
#include "lowering/Pipelines.h"
#include "passes/Passes.h"
#include "passes/ShardingModels.h"
#include "mlir/Pass/PassManager.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "lowering/ToGPU/ModelGpuCodegen.h"
#include "lowering/ToGPU/CubinResources.h"
#include "lowering/ToGPU/GpuSerialize.h"
#include "lowering/ToProgram/CpuArtifact.h"
#include "tools/kimi-compile/Version.h"
#include "GpuKernelLibrary.h"
#include "llvm/Support/MemoryBuffer.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"


namespace cl = llvm::cl;
using namespace kimi;

namespace {
enum class Emit {
  Artifact,
  Kimi,
  Linalg,
  MemRef,
  SharedObject,
  LLVMIR,
  Gpu,
  Ptx,
  Kernels
};
enum class Target { Cpu, Sm90a };

cl::OptionCategory category("kimi-compile options");

cl::opt<std::string> configPath(cl::Positional, cl::Required,
                                cl::desc("<config.json | kernels.mlir>"),
                                cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::cat(category));
cl::opt<Target> target(
    "target", cl::desc("Where the model runs"), cl::init(Target::Cpu),
    cl::values(clEnumValN(Target::Cpu, "cpu", "the host CPU (default)"),
               clEnumValN(Target::Sm90a, "sm_90a",
                          "NVIDIA Hopper: models from a config.json, "
                          "kernel libraries from .mlir input")),
    cl::cat(category));
cl::opt<Emit> emit("emit", cl::desc("What to produce"),
                   cl::init(Emit::Artifact),
                   cl::values(clEnumValN(Emit::Artifact, "artifact",
                                         "the .kimi artifact the runtime "
                                         "executes (default; needs -o)"),
                              clEnumValN(Emit::Kimi, "kimi",
                                         "the whole model in the kimi dialect "
                                         "(@prefill and @decode)"),
                              clEnumValN(Emit::Linalg, "linalg",
                                         "the model after the front pipeline "
                                         "(and on sm_90a its kernel passes) "
                                         "and kimi-to-linalg-pipeline: linalg "
                                         "on tensors"),
                              clEnumValN(Emit::MemRef, "memref",
                                         "the same after "
                                         "kimi-to-memref-pipeline: bufferized "
                                         "memrefs"),
                              clEnumValN(Emit::SharedObject, "so",
                                         "the CPU shared object alone"),
                              clEnumValN(Emit::LLVMIR, "llvm",
                                         "the optimised LLVM IR of the CPU "
                                         "code"),
                              clEnumValN(Emit::Gpu, "gpu",
                                         "sm_90a: the generated gpu.module "
                                         "of each entry (models: the whole "
                                         "program after kernel outlining)"),
                              clEnumValN(Emit::Ptx, "ptx",
                                         "sm_90a: the PTX of each entry "
                                         "(kernel libraries) or of the "
                                         "model's kernel module"),
                              clEnumValN(Emit::Kernels, "kernels",
                                         "sm_90a: each kernel's "
                                         "registers and local-memory frame "
                                         "a thread and static shared memory "
                                         "a block, as ptxas gave them (JSON, "
                                         "from the cubin)")),
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

cl::OptionCategory planCategory(
    "kimi-compile --report --grid: the supernode plan (docs/plan-report.md)");
cl::opt<std::string> grid(
    "grid",
    cl::desc("Add a \"plan\" object to the report for a grid of devices: N "
             "(N devices, 1..64; TP group from --tp-group) or GxT (G groups "
             "of T devices, TP group T; 8x8 = 64 devices, TP 8). Routed "
             "experts are split over all devices"),
    cl::value_desc("N|GxT"), cl::cat(planCategory));
cl::opt<int64_t> tpGroup(
    "tp-group",
    cl::desc("Tensor-parallel group for attention/KDA heads, shared experts, "
             "dense MLP, latent projections and lm_head; stays inside a node "
             "(default min(8, N))"),
    cl::init(0), cl::cat(planCategory));
cl::opt<int64_t> nodeDevices("node-devices",
                             cl::desc("Devices per NVLink node (default 8)"),
                             cl::init(8), cl::cat(planCategory));
cl::opt<int64_t> batch(
    "batch",
    cl::desc("Concurrent sequences over the whole grid (default 1). Report: "
             "the plan's requests. Compiling: the B of @prefill and @decode; "
             "with --strategy dp the default is one sequence per "
             "data-parallel group"),
    cl::init(1), cl::cat(planCategory));
cl::list<int64_t> planContexts(
    "plan-context",
    cl::desc("Context lengths of the plan's memory and step times (default "
             "131072,1048576)"),
    cl::CommaSeparated, cl::cat(planCategory));
cl::opt<double> deviceMemoryGB("device-memory-gb",
                               cl::desc("Memory of one device in GB (1e9 "
                                        "bytes; default 141, H200)"),
                               cl::init(141.0), cl::cat(planCategory));
cl::opt<double> nvlinkGBps(
    "nvlink-gbps",
    cl::desc("NVLink bandwidth per device per direction, GB/s (default 300: "
             "NCCL all-to-all measured among H200s of one node; the "
             "datasheet's 450 is not reached)"),
    cl::init(300.0), cl::cat(planCategory));
cl::opt<double> interNodeGBps(
    "inter-node-gbps",
    cl::desc("Inter-node bandwidth per device per direction, GB/s (default "
             "50: one 400 Gb/s NIC per GPU)"),
    cl::init(50.0), cl::cat(planCategory));
cl::opt<double> hbmGBps("hbm-gbps",
                        cl::desc("HBM bandwidth, GB/s (default 4260: the "
                                 "measured H200 copy rate)"),
                        cl::init(4260.0), cl::cat(planCategory));
cl::opt<double> tflops("tflops",
                       cl::desc("Dense bf16 rate, TFLOP/s (default 754: the "
                                "measured H200 matmul rate)"),
                       cl::init(754.0), cl::cat(planCategory));
cl::opt<double> collectiveLatencyUs(
    "collective-latency-us",
    cl::desc("Fixed cost of one collective, microseconds (default 10)"),
    cl::init(10.0), cl::cat(planCategory));
cl::opt<double> commOverlap(
    "comm-overlap",
    cl::desc("Fraction of communication hidden under compute, 0..1 "
             "(default 0)"),
    cl::init(0.0), cl::cat(planCategory));
cl::opt<int64_t> prefillTokens("prefill-tokens",
                               cl::desc("Tokens a TP group prefills per step "
                                        "(default 8192)"),
                               cl::init(8192), cl::cat(planCategory));
cl::opt<bool> mxfp8Dispatch("mxfp8-dispatch",
                            cl::desc("MoE dispatch in MXFP8 (default on; "
                                     "=false: bf16)"),
                            cl::init(true), cl::cat(planCategory));
cl::opt<bool> replicateMlaCache(
    "replicate-mla-cache",
    cl::desc("Keep the whole MLA latent cache on every rank of the TP group "
             "instead of splitting it by sequence"),
    cl::cat(planCategory));

cl::opt<NumericType> activations(
    "activations",
    cl::desc("Activation element type of the tensors between ops: products, "
             "norms, softmax and reductions accumulate in f32 either way, the "
             "KDA state is f32, the MLA latent cache has this type (default: "
             "bf16 for --emit=kimi and --target sm_90a, f32 for --target cpu "
             "and for partitioned sm_90a models, whose collectives carry f32; "
             "f32 is the reference configuration)"),
    cl::init(NumericType::BF16),
    cl::values(clEnumValN(NumericType::BF16, "bf16", "bfloat16"),
               clEnumValN(NumericType::F32, "f32", "float32")),
    cl::cat(category));
cl::opt<NumericType> weights(
    "weights",
    cl::desc("Storage type of dense weights: bf16 keeps the release's types "
             "(bf16, and f32 where it stores f32: A_log, dt_bias, the router "
             "bias, K3's conv and o_norm); f32 is the reference configuration "
             "(default bf16, on every target)"),
    cl::init(NumericType::BF16),
    cl::values(clEnumValN(NumericType::BF16, "bf16", "bfloat16"),
               clEnumValN(NumericType::F32, "f32", "float32")),
    cl::cat(category));
cl::opt<bool> mxfp4Experts("mxfp4-experts",
                           cl::desc("Store routed experts as MXFP4 (default: "
                                    "what the config's quantization_config "
                                    "says; without one, the dense weight "
                                    "type)"),
                           cl::init(false), cl::cat(category));
cl::opt<bool> kdaBf16Io(
    "kda-bf16-io",
    cl::desc("Round kimi.kda's q/k/v/beta and prefill output through bf16, as "
             "the Hopper KDA kernels read and write them (kimi-kda-bf16-io): "
             "the CPU reference of a GPU model compiled with "
             "--gpu-kda-kernels"),
    cl::init(false), cl::cat(category));
cl::opt<int64_t> decodeBatch("decode-batch",
                             cl::desc("Sequences per @decode step (default: "
                                      "--batch)"),
                             cl::init(1), cl::cat(category));
cl::opt<int64_t> prefillChunk(
    "prefill-chunk",
    cl::desc("0: @prefill takes a whole sequence from zero state; N: @prefill "
             "is a stateful step over N tokens (static shapes)"),
    cl::init(0), cl::cat(category));
cl::opt<std::string> prefillLogits(
    "prefill-logits",
    cl::desc("all: @prefill returns the logits of every token [B, T, V] "
             "(perplexity, scoring); last: of each sequence's last token "
             "[B, 1, V], all generation needs: the final norm and the LM "
             "head run on one row, and a chunked prefill's earlier chunks "
             "compute no logits (default all)"),
    cl::init("all"), cl::cat(category));
cl::opt<bool> cacheLengths(
    "cache-lengths",
    cl::desc("Stateful entries take cache_length [B] (i32), the valid rows of "
             "the MLA caches, which may then be padded past it: new rows are "
             "written at that length and attention masks the rest. Lets the "
             "GPU runtime replay one CUDA graph of the decode step over a "
             "range of lengths (default on for --target sm_90a without "
             "--strategy, off otherwise)"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> frontPipeline(
    "front-pipeline",
    cl::desc("Passes run on kimi IR before lowering to CPU code (default: "
             "the decay proof and KDA chunking)"),
    cl::init("kimi-prove-decay-bounds,kimi-chunk-kda"), cl::cat(category));
cl::list<std::string> strategy(
    "strategy",
    cl::desc("With --grid (N or GxT): partition the model over the grid, "
             "one program per rank (docs/passes/shard.md). Any of tp (heads, "
             "MLP intermediate, lm_head vocabulary), ep (routed experts), dp "
             "(batch), sp (sequence)"),
    cl::CommaSeparated, cl::value_desc("tp,ep,dp,sp"), cl::cat(category));
cl::opt<std::string> gpuMatmulPrecision(
    "gpu-matmul-precision",
    cl::desc("--target sm_90a models: matrix products of f32 operands "
             "through cuBLASLt in exact f32 (f32, default) or on TF32 tensor "
             "cores with f32 accumulation (tf32)"),
    cl::init("f32"), cl::cat(category));
cl::opt<bool> gpuBf16WeightProducts(
    "gpu-bf16-weight-products",
    cl::desc("--target sm_90a models: a product of a bf16 or MXFP4 weight "
             "and f32 activations rounds the activations to bf16 and runs "
             "on bf16 tensor cores with f32 accumulation (default on; "
             "=false: the reference configuration, products as exact as "
             "f32 (cuBLASLt widens the weight; the MXFP4 expert products "
             "split the activations into three bf16 terms))"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuCublas(
    "gpu-cublas",
    cl::desc("--target sm_90a models: run plain matrix products through the "
             "runtime's cuBLASLt (default on; =false generates kernels)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuFuseElementwise(
    "gpu-fuse-elementwise",
    cl::desc("--target sm_90a models: fuse chains of elementwise ops into the "
             "op that consumes them, one kernel each (default on; =false "
             "keeps one kernel per op)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuKdaKernels(
    "gpu-kda-kernels",
    cl::desc("--target sm_90a models: run kimi.kda through the generated KDA "
             "kernels (bf16 tensor-core products, f32 state; default on for "
             "single-GPU models, off for partitioned ones, where they are "
             "not yet checked; =false lowers it through linalg like the "
             "other ops)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuMlaKernels(
    "gpu-mla-kernels",
    cl::desc("--target sm_90a models: run MLA prefill (kimi.mla, and "
             "kimi.mla_decode over 16 or more queries) through the generated "
             "flash-style kernel and decode steps through the split-key "
             "decode kernels (kimi-gpu-mla-kernels: f16 tensor-core "
             "products, f32 softmax; default on for single-GPU models, off "
             "for partitioned ones, where they are not yet checked; =false: "
             "the absorbed f32 decomposition)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuMlaDecodeKernels(
    "gpu-mla-decode-kernels",
    cl::desc("With --gpu-mla-kernels: run decode steps' attention over the "
             "latent cache through the split-key kernels (default on; off "
             "keeps the absorbed f32 linalg form for them)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuTokenwiseKernels(
    "gpu-tokenwise-kernels",
    cl::desc("--target sm_90a models: run the token-wise ops as generated "
             "kernels, one launch each: every AttnRes application with the "
             "RMSNorm of its mix, the RMS, L2 and gated RMS norms, the "
             "short convolutions with their SiLU and final state, and the "
             "MoE routers' top-k selection after their logits product, "
             "and a decode step's routed experts as two launches "
             "(kimi-gpu-attn-res-kernels, kimi-gpu-norm-kernels, "
             "kimi-gpu-short-conv-kernels, kimi-gpu-router-kernels, "
             "kimi-gpu-routed-experts-kernels; f32; "
             "default on; =false: their linalg decompositions, three to ten "
             "launches each)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuGridDependencies(
    "gpu-grid-dependencies",
    cl::desc("--target sm_90a models: every kernel begins by waiting for the "
             "grid before it (griddepcontrol.wait), and the artifact says so, "
             "so the runtime launches the kernels with programmatic dependent "
             "launch: each one's launch overlaps the end of the one before "
             "(kimi-gpu-grid-dependencies; default on; =false: plain "
             "launches)"),
    cl::init(true), cl::cat(category));
cl::opt<int64_t> gpuGemvMaxM(
    "gpu-gemv-max-m",
    cl::desc("--target sm_90a models: matrix products of at most this many "
             "rows (decode steps; 0..8) run as the generated GEMV kernel, "
             "reading the weight at its stored type (f32, bf16 or MXFP4) "
             "with f32 accumulation, instead of cuBLASLt "
             "(kimi-gpu-gemm-calls{gemv-max-m}; default 4, 0: none)"),
    cl::init(4), cl::cat(category));
cl::opt<int64_t> gpuGemvMaxGroup(
    "gpu-gemv-max-group",
    cl::desc("--target sm_90a models: GEMV products that read the same "
             "input (a decode step's q, k, v and gate projections) run as one "
             "launch of at most this many (1..8; kimi-gpu-gemm-calls"
             "{gemv-max-group}; default 8, 1: one launch per product)"),
    cl::init(8), cl::cat(category));
cl::opt<bool> gpuGemvEpilogues(
    "gpu-gemv-epilogues",
    cl::desc("--target sm_90a models: the elementwise op that consumes a GEMV "
             "product (a residual add, the beta sigmoid, SiTU of a gate and up "
             "pair) runs at the GEMV kernel's store instead of as a launch of "
             "its own (kimi-gpu-gemm-calls{gemv-epilogues}; default on)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> gpuGemvWeightPrefetch(
    "gpu-gemv-weight-prefetch",
    cl::desc("--target sm_90a models: each GEMV block asks for its weight rows "
             "to be brought into L2 before it waits for the kernel before it, "
             "so the weights stream while that one finishes "
             "(kimi-gpu-gemm-calls{gemv-weight-prefetch}; default on; needs "
             "--gpu-grid-dependencies to overlap anything)"),
    cl::init(true), cl::cat(category));
cl::opt<int64_t> gpuReductionUnroll(
    "gpu-reduction-unroll",
    cl::desc("--target sm_90a models: iterations each lane of a reduction "
             "with few outputs (norms, attention rows) keeps in flight "
             "(kimi-gpu-warp-reductions{unroll}, default 8)"),
    cl::init(8), cl::cat(category));
cl::opt<int64_t> sortedExpertsMinTokens(
    "sorted-experts-min-tokens",
    cl::desc("Routed experts over at least this many tokens (prefill steps, "
             "batched decode) are sorted by expert: each expert's tokens as "
             "one block of rows, the projections as products batched over "
             "experts (default 64 for --target sm_90a, 0 for cpu: 0 gathers "
             "each token's experts instead)"),
    cl::init(64), cl::cat(category));
cl::opt<bool> allowUnknown("allow-unknown-fields",
                           cl::desc("Skip config fields kimi does not know "
                                    "instead of rejecting them"),
                           cl::cat(category));
} // namespace

static int fail(const llvm::Twine &message) {
  llvm::errs() << "kimi-compile: error: " << message << "\n";
  return 1;
}

/// --emit=linalg|memref: the model lowered through that stage, printed.
static int emitLoweringStage(mlir::ModuleOp module, const std::string &front,
                             const KimiToMemRefOptions &options,
                             llvm::ToolOutputFile &output,
                             FrontPassAdder addFrontPasses) {
  if (llvm::Error e = lowerToBufferizedMemRefs(
          module, front, options, addFrontPasses,
          emit == Emit::Linalg ? LoweringStage::Linalg : LoweringStage::MemRef))
    return fail(llvm::toString(std::move(e)));
  module.print(output.os());
  output.os() << "\n";
  output.keep();
  return 0;
}

/// --report: the cost report, and with --grid the supernode plan (JSON).
static int writeReports(const ModelConfig &config, bool expertsMxfp4,
                        llvm::ToolOutputFile &output) {
  if (context < 1)
    return fail("--context must be positive");
  ReportOptions options;
  options.mxfp4Experts = expertsMxfp4;
  options.context = context;
  ModelCost cost = computeModelCost(config, options);
  if (grid.empty()) {
    writeModelReport(config, cost, output.os());
    output.keep();
    return 0;
  }
  PlanOptions planOptions;
  planOptions.tpGroup = tpGroup;
  if (llvm::Error err = parseGrid(grid, planOptions))
    return fail(llvm::toString(std::move(err)));
  planOptions.nodeDevices = nodeDevices;
  planOptions.batch = batch;
  if (!planContexts.empty())
    planOptions.contexts.assign(planContexts.begin(), planContexts.end());
  planOptions.deviceMemory = deviceMemoryGB * 1e9;
  planOptions.mxfp4Experts = expertsMxfp4;
  planOptions.mxfp8Dispatch = mxfp8Dispatch;
  planOptions.splitMlaCache = !replicateMlaCache;
  planOptions.nvlinkBytesPerS = nvlinkGBps * 1e9;
  planOptions.interNodeBytesPerS = interNodeGBps * 1e9;
  planOptions.hbmBytesPerS = hbmGBps * 1e9;
  planOptions.flopsPerS = tflops * 1e12;
  planOptions.collectiveLatencyS = collectiveLatencyUs * 1e-6;
  planOptions.overlap = commOverlap;
  planOptions.prefillTokensPerGroup = prefillTokens;
  llvm::Expected<SupernodePlan> plan = computePlan(config, planOptions);
  if (!plan)
    return fail(llvm::toString(plan.takeError()));
  writeModelReport(config, cost, output.os(), [&](llvm::json::OStream &j) {
    j.attributeBegin("plan");
    writePlanJson(*plan, j);
    j.attributeEnd();
  });
  output.keep();
  return 0;
}

/// --target sm_90a: the model compiled, and what --emit asks for written
/// (`spec`: the artifact's signatures and manifest, for --emit=artifact;
/// `output`: null for --emit=artifact, which writes -o itself).
/// --kda-bf16-io: kimi-kda-bf16-io after the front pipeline, on either
/// target (none without the flag).
static std::function<void(mlir::OpPassManager &)> kdaBf16IoPasses() {
  if (!kdaBf16Io)
    return {};
  return [](mlir::OpPassManager &pm) { pm.addPass(kimi::createKimiKdaBf16Io()); };
}

static int compileGpuModel(mlir::ModuleOp module, rt::ArtifactSpec spec,
                           const std::string &front,
                           llvm::ToolOutputFile *output) {
  if (emit == Emit::SharedObject && outputPath == "-")
    return fail("the shared object is binary: name the output file with -o");
  kimi::gpu::ModelGpuCodegenOptions codegen;
  codegen.frontPipeline = front;
  codegen.frontPasses = kdaBf16IoPasses();
  codegen.cubin = !gpuNoCubin();
  if (gpuMatmulPrecision != "f32" && gpuMatmulPrecision != "tf32")
    return fail("--gpu-matmul-precision must be f32 or tf32, got '" +
                gpuMatmulPrecision + "'");
  codegen.matmulPrecision = gpuMatmulPrecision;
  codegen.bf16WeightProducts = gpuBf16WeightProducts;
  // The generated KDA and MLA kernels: on unless asked otherwise, except
  // for partitioned models, which have not run with them.
  codegen.kdaKernels =
      gpuKdaKernels.getNumOccurrences() ? gpuKdaKernels : strategy.empty();
  codegen.mlaKernels =
      gpuMlaKernels.getNumOccurrences() ? gpuMlaKernels : strategy.empty();
  codegen.mlaDecodeKernels = gpuMlaDecodeKernels;
  codegen.tokenwiseKernels = gpuTokenwiseKernels;
  if (gpuGemvMaxM < 0 || gpuGemvMaxM > 8)
    return fail("--gpu-gemv-max-m must be in 0..8");
  codegen.gemvMaxM = gpuGemvMaxM;
  if (gpuGemvMaxGroup < 1 || gpuGemvMaxGroup > 8)
    return fail("--gpu-gemv-max-group must be in 1..8");
  codegen.gemvMaxGroup = gpuGemvMaxGroup;
  codegen.gemvEpilogues = gpuGemvEpilogues;
  // The prefetch is a prologue before the grid-dependency wait: without
  // the waits there is nothing for it to overlap.
  if (gpuGemvWeightPrefetch.getNumOccurrences() && gpuGemvWeightPrefetch &&
      !gpuGridDependencies)
    return fail("--gpu-gemv-weight-prefetch needs --gpu-grid-dependencies "
                "(the GEMV kernels prefetch before their grid-dependency "
                "wait)");
  codegen.gemvWeightPrefetch = gpuGemvWeightPrefetch;
  codegen.gridDependencies = gpuGridDependencies;
  codegen.gemmCalls = gpuCublas;
  codegen.fuseElementwise = gpuFuseElementwise;
  if (sortedExpertsMinTokens < 0)
    return fail("--sorted-experts-min-tokens must be >= 0");
  codegen.sortedExpertsMinTokens = sortedExpertsMinTokens;
  if (gpuReductionUnroll < 1)
    return fail("--gpu-reduction-unroll must be >= 1");
  codegen.reductionUnroll = gpuReductionUnroll;
  if (emit == Emit::Linalg || emit == Emit::MemRef) {
    KimiToMemRefOptions memref;
    kimi::gpu::setGpuMemRefOptions(codegen, memref);
    return emitLoweringStage(module, front, memref, *output,
                             [&](mlir::OpPassManager &pm) {
                               kimi::gpu::addGpuKernelPasses(pm, codegen);
                             });
  }
  using Stop = kimi::gpu::ModelGpuCodegenOptions::Stop;
  codegen.stopAfter = emit == Emit::Gpu ? Stop::GpuIR
                      : emit == Emit::Ptx || emit == Emit::Kernels
                          ? Stop::KernelImages
                          : Stop::Object;
  codegen.keepLLVMIR = emit == Emit::LLVMIR;
  if (emit == Emit::Ptx || emit == Emit::Kernels)
    codegen.cubin = emit == Emit::Kernels;
  llvm::Expected<kimi::gpu::ModelGpuCodegenResult> compiled =
      kimi::gpu::compileModelForGpu(module, codegen);
  if (!compiled)
    return fail(llvm::toString(compiled.takeError()));
  spec.compiler = kCompilerName;
  if (emit == Emit::Artifact) {
    if (llvm::Error e =
            writeCpuArtifact(std::move(spec), compiled->object, outputPath,
                             compiled->waitsGridDependencies))
      return fail(llvm::toString(std::move(e)));
    return 0;
  }
  if (emit == Emit::Ptx) {
    for (const std::string &ptx : compiled->kernelImages)
      output->os() << ptx;
    output->keep();
    return 0;
  }
  if (emit == Emit::Kernels) {
    if (llvm::Error e = kimi::gpu::writeKernelReport(compiled->kernelImages,
                                                      output->os()))
      return fail(llvm::toString(std::move(e)));
    output->keep();
    return 0;
  }
  output->os() << (emit == Emit::Gpu      ? compiled->gpuIR
                   : emit == Emit::LLVMIR ? compiled->llvmIR
                                          : compiled->object);
  output->keep();
  return 0;
}

/// --target cpu: the model compiled, and what --emit asks for written.
static int compileCpuModel(mlir::ModuleOp module, rt::ArtifactSpec spec,
                           const std::string &front,
                           llvm::ToolOutputFile *output) {
  CpuCodegenOptions codegen;
  codegen.frontPipeline = front;
  codegen.frontPasses = kdaBf16IoPasses();
  if (sortedExpertsMinTokens.getNumOccurrences()) {
    if (sortedExpertsMinTokens < 0)
      return fail("--sorted-experts-min-tokens must be >= 0");
    codegen.sortedExpertsMinTokens = sortedExpertsMinTokens;
  }
  if (emit == Emit::Linalg || emit == Emit::MemRef) {
    KimiToMemRefOptions memref;
    memref.sortedExpertsMinTokens = codegen.sortedExpertsMinTokens;
    return emitLoweringStage(module, front, memref, *output,
                             codegen.frontPasses ? FrontPassAdder(codegen.frontPasses)
                                                 : FrontPassAdder());
  }
  std::string llvmIR;
  if (emit == Emit::LLVMIR)
    codegen.llvmIR = &llvmIR;
  llvm::Expected<std::string> so = compileToSharedObject(module, codegen);
  if (!so)
    return fail(llvm::toString(so.takeError()));
  spec.compiler = kCompilerName;
  if (emit == Emit::Artifact) {
    if (llvm::Error e = writeCpuArtifact(std::move(spec), *so, outputPath))
      return fail(llvm::toString(std::move(e)));
    return 0;
  }
  output->os() << (emit == Emit::LLVMIR ? llvmIR : *so);
  output->keep();
  return 0;
}

/// The import options the flags ask for, with every combination a target
/// cannot honour refused (named), never ignored; `parsedGrid` gets --grid
/// when the model is partitioned.
static llvm::Expected<ImportOptions>
importOptionsFromFlags(bool cpu, bool gpu, bool expertsMxfp4,
                       PlanOptions &parsedGrid) {
  auto refused = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  // The GPU model options shape sm_90a code only: elsewhere they are
  // refused rather than ignored.
  if (!gpu)
    for (const cl::Option *o : std::initializer_list<const cl::Option *>{
             &gpuMatmulPrecision, &gpuBf16WeightProducts, &gpuCublas,
             &gpuFuseElementwise, &gpuKdaKernels, &gpuMlaKernels,
             &gpuMlaDecodeKernels, &gpuTokenwiseKernels, &gpuGridDependencies,
             &gpuGemvMaxM, &gpuGemvMaxGroup, &gpuGemvEpilogues,
             &gpuGemvWeightPrefetch, &gpuReductionUnroll})
      if (o->getNumOccurrences())
        return refused("--" + o->ArgStr.str() +
                    " applies to models compiled for --target sm_90a (here: " +
                    (target == Target::Sm90a ? "--emit=kimi" : "--target cpu") +
                    ")");
  ImportOptions options;
  options.activations = activations.getValue();
  options.weights = weights.getValue();
  options.mxfp4Experts = expertsMxfp4;
  // The CPU computes in f32 unless bf16 is asked for (its f32 arithmetic is
  // the faster one there); the GPU in bf16, the type the model ships in,
  // except partitioned models: their collectives carry f32 (and i32, i64)
  // only.
  if (cpu && !activations.getNumOccurrences() && (!gpu || !strategy.empty()))
    options.activations = NumericType::F32;
  if (!strategy.empty() && options.activations == NumericType::BF16 &&
      emit != Emit::Kimi)
    return refused("--activations bf16 with --strategy: the collectives of "
                "partitioned executables carry f32 tensors only (use "
                "--activations f32)");
  // Data-parallel groups: the outer grid axis under --strategy dp.
  int64_t dataParallel = 1;
  if (!strategy.empty()) {
    if (llvm::Error err = parseGrid(grid, parsedGrid))
      return std::move(err);
    if (llvm::is_contained(strategy, "dp"))
      dataParallel = parsedGrid.tpGroup ? parsedGrid.devices / parsedGrid.tpGroup
                                        : parsedGrid.devices;
  }
  options.prefillBatch = batch.getNumOccurrences() ? batch.getValue()
                                                   : dataParallel;
  options.decodeBatch = decodeBatch.getNumOccurrences()
                            ? decodeBatch.getValue()
                            : options.prefillBatch;
  options.prefillChunk = cpu && prefillChunk == 0 ? (gpu ? 256 : 64)
                                                  : prefillChunk.getValue();
  options.cacheLengths = cacheLengths.getNumOccurrences()
                             ? cacheLengths.getValue()
                             : gpu && strategy.empty();
  if (prefillLogits != "all" && prefillLogits != "last")
    return refused("--prefill-logits must be 'all' or 'last', got '" +
                prefillLogits.getValue() + "'");
  options.lastLogitsOnly = prefillLogits == "last";
  if (options.lastLogitsOnly && !strategy.empty())
    return refused("--prefill-logits=last is not supported with --strategy (the "
                "partitioned models return every token's logits)");
  if (options.cacheLengths && !strategy.empty())
    return refused("--cache-lengths is not supported with --strategy (the "
                "partitioned models keep exact cache lengths)");
  return options;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions({&category, &planCategory, &gpuLibraryCategory});
  kimi::registerKimiLoweringPasses();
  kimi::registerKimiPasses();
  cl::AddExtraVersionPrinter([](llvm::raw_ostream &os) {
    os << kCompilerName << "\n";
  });
  cl::ParseCommandLineOptions(
      argc, argv,
      "kimi-compile: compiles a Kimi-family model from its Hugging Face "
      "config.json.\n\n"
      "  kimi-compile config.json --target cpu -o model.kimi\n"
      "  kimi-compile config.json --target sm_90a -o model-gpu.kimi\n"
      "  kimi-compile config.json --emit=kimi -o model.mlir\n"
      "  kimi-compile config.json --report --context 1048576\n"
      "  kimi-compile config.json --report --grid 64 --batch 64\n"
      "  kimi-compile kda.mlir --target sm_90a -o kda.kimi\n");

  if (llvm::StringRef(configPath).ends_with(".mlir")) {
    if (prefillLogits.getNumOccurrences())
      return fail("--prefill-logits shapes a model's @prefill: it applies to "
                  "a config.json, not to .mlir kernel libraries");
    if (target != Target::Sm90a)
      return fail(".mlir input compiles for --target sm_90a (kernel "
                  "libraries); models come from a config.json");
    if (emit != Emit::Artifact && emit != Emit::Gpu && emit != Emit::Ptx &&
        emit != Emit::Kernels)
      return fail("--emit for .mlir input is artifact, gpu, ptx or kernels");
    if (emit == Emit::Kernels && gpuNoCubin())
      return fail("--emit=kernels reads the cubin: drop --no-cubin");
    return compileGpuLibraryFile(configPath, outputPath, frontPipeline,
                                 emit == Emit::Gpu, emit == Emit::Ptx,
                                 emit == Emit::Kernels);
  }
  if ((emit == Emit::Gpu || emit == Emit::Ptx || emit == Emit::Kernels) &&
      target != Target::Sm90a)
    return fail("--emit=gpu, ptx and kernels need --target sm_90a");
  if (emit == Emit::Kernels && gpuNoCubin())
    return fail("--emit=kernels reads the cubin: drop --no-cubin");

  ConfigReadOptions readOptions;
  readOptions.allowUnknownFields = allowUnknown;
  llvm::Expected<ModelConfig> config = readModelConfig(configPath, readOptions);
  if (!config)
    return fail(llvm::toString(config.takeError()));
  // The checkpoint's quantization_config says how experts are stored; the
  // flag, when given, overrides it (to plan another storage).
  const bool expertsMxfp4 = mxfp4Experts.getNumOccurrences()
                                ? mxfp4Experts.getValue()
                                : config->quantization.mxfp4Experts;

  if (!grid.empty() && !report && strategy.empty())
    return fail("--grid plans the report (add --report) or partitions the "
                "model (add --strategy)");
  if (!strategy.empty() && (grid.empty() || report))
    return fail("--strategy partitions the model over --grid; give --grid "
                "and no --report");
  if (emit == Emit::Artifact && outputPath == "-" && !report)
    return fail("the artifact is binary: name the output file with -o");

  std::string errorMessage;
  std::unique_ptr<llvm::ToolOutputFile> output;
  if (emit != Emit::Artifact || report) {
    output = mlir::openOutputFile(outputPath, &errorMessage);
    if (!output)
      return fail(errorMessage);
  }

  if (report)
    return writeReports(*config, expertsMxfp4, *output);

  // Executables hold their weights at the types asked for (--weights: bf16
  // dense weights where the release stores bf16, f32 where it stores f32, by
  // default) and compute at --activations, accumulating in f32, and prefill
  // in static chunks (64 tokens on the CPU, --prefill-chunk on the GPU). A
  // type a target cannot run is refused, naming the target, never ignored.
  bool cpu = emit != Emit::Kimi;
  bool gpu = cpu && target == Target::Sm90a;
  PlanOptions parsedGrid;
  llvm::Expected<ImportOptions> imported =
      importOptionsFromFlags(cpu, gpu, expertsMxfp4, parsedGrid);
  if (!imported)
    return fail(llvm::toString(imported.takeError()));
  const ImportOptions &options = *imported;
  mlir::DialectRegistry registry;
  registerImportDialects(registry);
  registerCpuCodegenDialects(registry);
  if (gpu)
    kimi::gpu::registerModelGpuExtensions(registry);
  registerKimiShardingModels(registry);
  mlir::MLIRContext context(registry);
  auto module = importModel(*config, options, context);
  if (!module)
    return fail(llvm::toString(module.takeError()));
  if (!strategy.empty()) {
    const PlanOptions &parsed = parsedGrid;
    llvm::SmallVector<int64_t> shape = {parsed.devices};
    if (parsed.tpGroup)
      shape = {parsed.devices / parsed.tpGroup, parsed.tpGroup};
    mlir::PassManager pm(&context);
    buildPartitionPipeline(pm, shape,
                           std::vector<std::string>(strategy.begin(),
                                                    strategy.end()));
    if (mlir::failed(pm.run(**module)))
      return fail("partitioning over --grid " + grid + " failed (see the "
                  "diagnostics above)");
  }
  if (cpu) {
    std::string front = frontPipeline;
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
      if (gpu)
        spec.target.kind = rt::TargetKind::kSm90a;
    }
    if (gpu)
      return compileGpuModel(**module, std::move(spec), front, output.get());
    return compileCpuModel(**module, std::move(spec), front, output.get());
  }
  (*module)->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}

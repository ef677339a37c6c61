//===- GpuKernelLibrary.cpp - kimi-compile on .mlir input for sm_90a -------===//

#include "tools/common/IrNesting.h"
#include "GpuKernelLibrary.h"
#include "lowering/ToGPU/CubinResources.h"

#include "dialects/Kimi/KimiDialect.h"
#include "lowering/ToProgram/GpuArtifact.h"
#include "passes/Passes.h"
#include "runtime/artifact/writer.h"
#include "tools/kimi-compile/Version.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

namespace cl = llvm::cl;

namespace kimi {

cl::OptionCategory gpuLibraryCategory(
    "kimi-compile kernels.mlir --target sm_90a: GPU kernel libraries "
    "(docs/lowering/gpu-kda.md)");

namespace {
cl::opt<int64_t> kdaSegments(
    "kda-segments",
    cl::desc("Split each KDA recurrence over this many sequence segments "
             "(the (M, S_ext) composition); 0 (default) picks it from the "
             "SM count"),
    cl::init(0), cl::cat(gpuLibraryCategory));
cl::opt<int64_t> kdaValueSplit(
    "kda-value-split",
    cl::desc("Blocks per KDA state along the value columns (a divisor of "
             "dv / 16); 0 (default) picks it from the SM count"),
    cl::init(0), cl::cat(gpuLibraryCategory));
cl::opt<int> gpuSms("gpu-sms",
                    cl::desc("Multiprocessors the launch planning assumes "
                             "(default 132, an H200)"),
                    cl::init(132), cl::cat(gpuLibraryCategory));
cl::opt<bool> noCubin("no-cubin",
                      cl::desc("Store PTX only (the driver JIT-compiles it); "
                               "by default a cubin is added when ptxas is "
                               "found"),
                      cl::cat(gpuLibraryCategory));

} // namespace

bool gpuNoCubin() { return noCubin; }

namespace {
int fail(const llvm::Twine &message) {
  llvm::errs() << "kimi-compile: error: " << message << "\n";
  return 1;
}
} // namespace

int compileGpuLibraryFile(const std::string &input, const std::string &output,
                          const std::string &frontPipeline, bool emitGpuIR,
                          bool emitPtx, bool emitKernels) {
  mlir::DialectRegistry registry;
  registry.insert<KimiDialect, mlir::func::FuncDialect, mlir::tensor::TensorDialect>();
  gpu::registerGpuCodegenDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sources;
  std::string error;
  auto file = mlir::openInputFile(input, &error);
  if (!file)
    return fail(error);
  // Nesting past kMaxIrNesting would overflow the parser's stack.
  if (std::optional<IrNestingExcess> deep = findIrNestingExcess(file->getBuffer()))
    return fail(input + ":" + std::to_string(deep->line) + ":" +
                std::to_string(deep->column) + ": " + deep->message());
  sources.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sources, &context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &context);
  if (!module)
    return fail(input + ": not a valid kimi module");
  if (!frontPipeline.empty()) {
    mlir::PassManager pm(&context);
    if (mlir::failed(mlir::parsePassPipeline(frontPipeline, pm)))
      return fail("bad --front-pipeline '" + frontPipeline + "'");
    if (mlir::failed(pm.run(*module)))
      return fail("the front pipeline failed on " + input);
  }
  std::unique_ptr<llvm::ToolOutputFile> out;
  if (emitGpuIR || emitPtx || emitKernels) {
    out = mlir::openOutputFile(output, &error);
    if (!out)
      return fail(error);
  } else if (output == "-") {
    return fail("the artifact is binary: name the output file with -o");
  }
  GpuLibraryOptions options;
  options.plan.segments = kdaSegments;
  options.plan.valueSplit = kdaValueSplit;
  options.plan.device.smCount = gpuSms;
  options.target.cubin = emitKernels || (!noCubin && !emitGpuIR && !emitPtx);
  if (emitGpuIR)
    options.onPlan = [&](const gpu::GpuEntryPlan &plan) {
      out->os() << "// entry @" << plan.name << ": " << plan.summary << "\n";
      mlir::ModuleOp kernels = plan.kernels.get();
      kernels.print(out->os());
      out->os() << "\n";
    };
  llvm::Expected<rt::ArtifactSpec> spec = compileGpuKernelLibrary(*module, options);
  if (!spec)
    return fail(llvm::toString(spec.takeError()));
  if (emitGpuIR) {
    out->keep();
    return 0;
  }
  if (emitKernels) {
    std::vector<std::string> cubins, modules;
    for (const rt::KernelImage &k : spec->kernels)
      if (k.kind == rt::KernelKind::kCubin) {
        cubins.emplace_back(k.image.begin(), k.image.end());
        modules.push_back(k.name);
      }
    if (cubins.empty())
      return fail("no cubin was made (is ptxas installed? PATH, CUDA_HOME)");
    if (llvm::Error e = gpu::writeKernelReport(cubins, out->os(), modules))
      return fail(llvm::toString(std::move(e)));
    out->keep();
    return 0;
  }
  if (emitPtx) {
    for (const rt::KernelImage &k : spec->kernels)
      if (k.kind == rt::KernelKind::kPtx)
        out->os().write(reinterpret_cast<const char *>(k.image.data()),
                        k.image.size());
    out->keep();
    return 0;
  }
  spec->compiler = kCompilerName;
  rt::ArtifactWriter writer(std::move(*spec));
  rt::Status s = writer.writeFile(output);
  if (!s.ok())
    return fail(output + ": " + s.message());
  return 0;
}

} // namespace kimi

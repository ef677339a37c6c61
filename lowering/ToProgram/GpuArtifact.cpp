//===- GpuArtifact.cpp - GPU kernel-library artifacts ----------------------===//

#include "lowering/ToProgram/GpuArtifact.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace kimi {

llvm::Expected<rt::ArtifactSpec>
compileGpuKernelLibrary(ModuleOp module, const GpuLibraryOptions &options) {
  rt::ArtifactSpec spec;
  spec.target.name = options.target.chip;
  auto error = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m.c_str());
  };
  for (auto func : module.getOps<func::FuncOp>()) {
    SmallVector<KdaOp> kdas;
    bool other = false;
    func.walk([&](Operation *op) {
      if (auto kda = dyn_cast<KdaOp>(op))
        kdas.push_back(kda);
      else if (auto gate = dyn_cast<KdaGateOp>(op);
               gate && gate->hasOneUse() &&
               isa<KdaOp>(*gate->getUsers().begin()) &&
               cast<KdaOp>(*gate->getUsers().begin()).getG() == gate.getG())
        ; // fused into the KDA kernels
      else if (op->getDialect() &&
               op->getDialect()->getNamespace() == "kimi")
        other = true;
    });
    if (kdas.size() != 1 || other)
      return error("function @" + func.getName().str() +
                   ": the sm_90a target compiles functions holding exactly "
                   "one kimi.kda op, optionally fed by one kimi.kda_gate "
                   "(whole models on the GPU are not "
                   "available yet); found " + std::to_string(kdas.size()) +
                   " kimi.kda" + (other ? " and other kimi ops" : ""));
    std::string diagnostics;
    FailureOr<gpu::GpuEntryPlan> plan;
    {
      ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
        llvm::raw_string_ostream os(diagnostics);
        os << d.getLocation() << ": " << d << "\n";
        return success();
      });
      plan = gpu::planKdaEntry(kdas.front(), func.getName(), options.plan);
      // The generated kernels must verify; a failure is a generator bug
      // and its diagnostics say where.
      if (succeeded(plan) && failed(mlir::verify(*plan->kernels)))
        plan = failure();
    }
    if (failed(plan))
      return error("function @" + func.getName().str() + ": " + diagnostics);
    if (options.onPlan)
      options.onPlan(*plan);
    auto binary = gpu::serializeGpuModule(*plan->kernels, options.target);
    if (!binary)
      return binary.takeError();
    std::string imageName = "kda_" + plan->name;
    rt::KernelImage ptx;
    ptx.name = imageName;
    ptx.kind = rt::KernelKind::kPtx;
    ptx.image.assign(binary->ptx.begin(), binary->ptx.end());
    spec.kernels.push_back(std::move(ptx));
    uint32_t ptxIndex = static_cast<uint32_t>(spec.kernels.size() - 1);
    if (!binary->cubin.empty()) {
      rt::KernelImage cubin;
      cubin.name = imageName;
      cubin.kind = rt::KernelKind::kCubin;
      cubin.image.assign(binary->cubin.begin(), binary->cubin.end());
      spec.kernels.push_back(std::move(cubin));
    }
    rt::EntrySpec entry;
    entry.name = plan->name;
    entry.symbol = plan->name;
    entry.kernel = ptxIndex;
    entry.buffers = std::move(plan->buffers);
    entry.launches = std::move(plan->launches);
    for (rt::LaunchSpec &l : entry.launches)
      l.kernel = ptxIndex;
    spec.entries.push_back(std::move(entry));
  }
  if (spec.entries.empty())
    return error("the module has no functions to compile");
  return spec;
}

} // namespace kimi

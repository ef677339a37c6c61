//===- GpuArtifact.cpp - GPU kernel-library artifacts ----------------------===//

#include "lowering/ToProgram/GpuArtifact.h"

#include "dialects/Kimi/KimiOps.h"
#include "lowering/ToGPU/Kernels/AttnResKernel.h"
#include "lowering/ToGPU/Kernels/RoutedExpertsKernel.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace kimi {

llvm::Expected<rt::ArtifactSpec>
compileGpuKernelLibrary(ModuleOp module, const GpuLibraryOptions &options) {
  rt::ArtifactSpec spec;
  auto error = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m.c_str());
  };
  // The artifact names its target by kind: sm_90a is the one GPU target.
  if (options.target.chip != "sm_90a")
    return error("GPU kernel library: chip '" + options.target.chip +
                 "' has no artifact target (sm_90a is supported)");
  spec.target.kind = rt::TargetKind::kSm90a;
  for (auto func : module.getOps<func::FuncOp>()) {
    // What the function holds decides the entry: one kimi.kda (with the
    // kimi.kda_gate feeding it), one kimi.attn_res (with one kimi.rms_norm
    // of its result), or one kimi.routed_experts.
    SmallVector<KdaOp> kdas;
    SmallVector<AttnResOp> attnRes;
    SmallVector<RoutedExpertsOp> experts;
    SmallVector<Operation *> others;
    func.walk([&](Operation *op) {
      if (auto kda = dyn_cast<KdaOp>(op))
        kdas.push_back(kda);
      else if (auto ar = dyn_cast<AttnResOp>(op))
        attnRes.push_back(ar);
      else if (auto re = dyn_cast<RoutedExpertsOp>(op))
        experts.push_back(re);
      else if (op->getDialect() && op->getDialect()->getNamespace() == "kimi")
        others.push_back(op);
    });
    auto fusedInto = [&](Operation *op) -> bool {
      if (auto gate = dyn_cast<KdaGateOp>(op))
        return kdas.size() == 1 && gate->hasOneUse() &&
               kdas.front().getG() == gate.getG();
      if (auto rms = dyn_cast<RmsNormOp>(op))
        return attnRes.size() == 1 && rms.getX() == attnRes.front().getOut();
      return false;
    };
    bool fusable = llvm::all_of(others, fusedInto) && others.size() <= 1;
    if (!fusable || kdas.size() + attnRes.size() + experts.size() != 1 ||
        (!experts.empty() && !others.empty()))
      return error("function @" + func.getName().str() +
                   ": a kernel library's function holds exactly one "
                   "kimi.kda op, optionally fed by one kimi.kda_gate, one "
                   "kimi.attn_res, optionally followed by one kimi.rms_norm, "
                   "or one kimi.routed_experts (compile a model config for "
                   "whole models); found " + std::to_string(kdas.size()) +
                   " kimi.kda, " + std::to_string(attnRes.size()) +
                   " kimi.attn_res, " + std::to_string(experts.size()) +
                   " kimi.routed_experts and " + std::to_string(others.size()) +
                   " other kimi ops");
    std::string diagnostics;
    FailureOr<gpu::GpuEntryPlan> plan;
    {
      ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
        llvm::raw_string_ostream os(diagnostics);
        os << d.getLocation() << ": " << d << "\n";
        return success();
      });
      if (!kdas.empty())
        plan = gpu::planKdaEntry(kdas.front(), func.getName(), options.plan);
      else if (!experts.empty())
        plan = gpu::planRoutedExpertsEntry(experts.front(), func.getName());
      else
        plan = gpu::planAttnResEntry(
            attnRes.front(),
            others.empty() ? RmsNormOp() : cast<RmsNormOp>(others.front()),
            func.getName());
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
    std::string imageName = (!kdas.empty()      ? "kda_"
                             : !experts.empty() ? "routed_experts_"
                                                : "attn_res_") +
                            plan->name;
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

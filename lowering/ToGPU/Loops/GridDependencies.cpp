//===- GridDependencies.cpp - kernels that wait for their predecessors ----===//
//
// kimi-gpu-grid-dependencies: see lowering/Passes.td. Every kernel of every
// gpu.module begins with `griddepcontrol.wait` (nothing it reads or writes
// is touched before its prerequisite grids have completed and flushed) and
// then `griddepcontrol.launch_dependents` (the next kernel may be scheduled
// now, to wait in its own prologue rather than behind a launch), unless its
// entry block already waits (a generator's prologue before the wait).
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUGRIDDEPENDENCIES
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {

struct KimiGpuGridDependencies
    : kimi::impl::KimiGpuGridDependenciesBase<KimiGpuGridDependencies> {
  using Base::Base;

  void runOnOperation() override {
    for (auto module : getOperation().getOps<gpu::GPUModuleOp>()) {
      for (auto func : module.getOps<gpu::GPUFuncOp>()) {
        if (!func.isKernel() || func.getBody().empty())
          continue;
        Block &entry = func.getBody().front();
        // Idempotent, and a kernel that waits after a prologue of its own
        // (reads of what no grid writes, such as its weights) keeps it.
        if (llvm::any_of(entry, [](Operation &op) {
              auto dep = dyn_cast<NVVM::GriddepcontrolOp>(op);
              return dep && dep.getKind() == NVVM::GridDepActionKind::wait;
            }))
          continue;
        OpBuilder b = OpBuilder::atBlockBegin(&entry);
        NVVM::GriddepcontrolOp::create(b, func.getLoc(),
                                       NVVM::GridDepActionKind::wait);
        NVVM::GriddepcontrolOp::create(
            b, func.getLoc(), NVVM::GridDepActionKind::launch_dependents);
      }
      module->setAttr(kimi::kWaitsGridDependenciesAttr,
                      UnitAttr::get(module.getContext()));
    }
  }
};

} // namespace

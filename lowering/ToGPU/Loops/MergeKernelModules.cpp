//===- MergeKernelModules.cpp - one gpu.module for every kernel -----------===//
//
// kimi-gpu-merge-kernel-modules: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/SymbolTable.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUMERGEKERNELMODULES
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {

struct KimiGpuMergeKernelModules
    : kimi::impl::KimiGpuMergeKernelModulesBase<KimiGpuMergeKernelModules> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<gpu::GPUModuleOp> modules(module.getOps<gpu::GPUModuleOp>());
    if (modules.empty())
      return;
    llvm::DenseMap<std::pair<StringAttr, StringAttr>, StringAttr> renamed;
    OpBuilder b(modules.front());
    auto merged = gpu::GPUModuleOp::create(b, module.getLoc(), "kimi_kernels");
    Block &body = merged.getBodyRegion().front();
    for (gpu::GPUModuleOp m : modules) {
      SmallVector<Operation *> ops;
      for (Operation &op : m.getBodyRegion().front().getOperations())
        ops.push_back(&op);
      size_t kernels = llvm::count_if(
          ops, [](Operation *op) { return isa<gpu::GPUFuncOp>(op); });
      for (Operation *op : ops) {
        if (isa<gpu::GPUFuncOp>(op))
          continue;
        auto name =
            op->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName());
        if (!name)
          continue;
        StringAttr renamedSymbol =
            b.getStringAttr(m.getSymName() + "_" + name.getValue());
        if (failed(SymbolTable::replaceAllSymbolUses(op, renamedSymbol, m))) {
          op->emitError(
              "cannot rename the symbol for the merged kernel module");
          return signalPassFailure();
        }
        SymbolTable::setSymbolName(op, renamedSymbol);
      }
      for (Operation *op : ops) {
        if (auto fn = dyn_cast<gpu::GPUFuncOp>(op)) {
          // Outlined kernels (@f_kernel in @f_kernel_3) take the module's
          // name; generated ones keep theirs after it (@kimi_kda_0_kda_prep).
          std::string name = m.getSymName().str();
          if (kernels > 1 || !m.getSymName().starts_with(fn.getName()))
            name += "_" + fn.getName().str();
          StringAttr newName = b.getStringAttr(name);
          renamed[{m.getSymNameAttr(), fn.getNameAttr()}] = newName;
          SymbolTable::setSymbolName(fn, newName);
        }
        op->moveBefore(&body, body.end());
      }
      m.erase();
    }
    module.walk([&](gpu::LaunchFuncOp launch) {
      SymbolRefAttr kernel = launch.getKernel();
      auto it =
          renamed.find({kernel.getRootReference(), kernel.getLeafReference()});
      if (it == renamed.end())
        return;
      launch.setKernelAttr(SymbolRefAttr::get(
          merged.getSymNameAttr(), {FlatSymbolRefAttr::get(it->second)}));
    });
  }
};

} // namespace

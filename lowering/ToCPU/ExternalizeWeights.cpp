//===- ExternalizeWeights.cpp - weights as runtime-filled globals ---------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/Passes.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "llvm/ADT/StringMap.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIEXTERNALIZEWEIGHTS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

std::string kimi::weightGlobalName(size_t slot) {
  return "kimi_w_" + std::to_string(slot);
}

namespace {
struct KimiExternalizeWeights
    : kimi::impl::KimiExternalizeWeightsBase<KimiExternalizeWeights> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpBuilder b(&getContext());
    llvm::StringMap<memref::GlobalOp> globals;
    size_t slot = 0;
    for (auto weight :
         llvm::make_early_inc_range(module.getOps<kimi::WeightOp>())) {
      auto type = cast<RankedTensorType>(weight.getType());
      if (!isa<FloatType>(type.getElementType()) ||
          isa<Float4E2M1FNType, Float8E4M3FNType, Float8E8M0FNUType>(
              type.getElementType())) {
        weight.emitError() << "weight @\"" << weight.getSymName()
                           << "\" of type " << type
                           << " cannot be a CPU global: compile with dense "
                              "float weights";
        return signalPassFailure();
      }
      b.setInsertionPoint(weight);
      auto memrefType =
          MemRefType::get(type.getShape(), type.getElementType());
      auto global = memref::GlobalOp::create(
          b, weight.getLoc(), kimi::weightGlobalName(slot++),
          b.getStringAttr("public"), memrefType, b.getUnitAttr(),
          /*constant=*/false, b.getI64IntegerAttr(64));
      globals[weight.getSymName()] = global;
      weight.erase();
    }
    WalkResult result = module.walk([&](kimi::WeightRefOp ref) {
      auto it = globals.find(ref.getName());
      if (it == globals.end()) {
        ref.emitError() << "'" << ref.getName() << "' names no weight";
        return WalkResult::interrupt();
      }
      memref::GlobalOp global = it->second;
      b.setInsertionPoint(ref);
      Value m = memref::GetGlobalOp::create(b, ref.getLoc(), global.getType(),
                                            global.getSymName());
      Value t = bufferization::ToTensorOp::create(
          b, ref.getLoc(), ref.getType(), m, /*restrict=*/true,
          /*writable=*/false);
      ref.replaceAllUsesWith(t);
      ref.erase();
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace

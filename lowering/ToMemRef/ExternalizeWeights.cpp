//===- ExternalizeWeights.cpp - weights as runtime-filled globals ---------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/Passes.h"
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
      Type element = type.getElementType();
      SmallVector<int64_t> shape(type.getShape());
      // MXFP4 values and their E8M0 scales are held as their bytes: two
      // e2m1 codes a byte, one scale a byte.
      if (isa<Float4E2M1FNType>(element)) {
        if (shape.empty() || shape.back() % 2) {
          weight.emitError() << "MXFP4 weight @\"" << weight.getSymName()
                             << "\" needs an even last dimension, got "
                             << type;
          return signalPassFailure();
        }
        shape.back() /= 2;
        element = b.getI8Type();
      } else if (isa<Float8E8M0FNUType>(element)) {
        element = b.getI8Type();
      } else if (!isa<FloatType>(element) || isa<Float8E4M3FNType>(element)) {
        weight.emitError() << "weight @\"" << weight.getSymName()
                           << "\" of type " << type
                           << " cannot be a CPU global: compile with dense "
                              "float or MXFP4 weights";
        return signalPassFailure();
      }
      b.setInsertionPoint(weight);
      auto memrefType = MemRefType::get(shape, element);
      auto global = memref::GlobalOp::create(
          b, weight.getLoc(), kimi::weightGlobalName(slot++),
          b.getStringAttr("public"), memrefType, b.getUnitAttr(),
          /*constant=*/false, b.getI64IntegerAttr(64));
      globals[weight.getSymName()] = global;
      weight.erase();
    }
    // Collected first: resolving a byte-held weight erases its casts, which
    // a walk could be about to visit.
    SmallVector<kimi::WeightRefOp> refs;
    module.walk([&](kimi::WeightRefOp ref) { refs.push_back(ref); });
    auto externalize = [&](kimi::WeightRefOp ref) {
      auto it = globals.find(ref.getName());
      if (it == globals.end()) {
        ref.emitError() << "'" << ref.getName() << "' names no weight";
        return WalkResult::interrupt();
      }
      memref::GlobalOp global = it->second;
      b.setInsertionPoint(ref);
      Value m = memref::GetGlobalOp::create(b, ref.getLoc(), global.getType(),
                                            global.getSymName());
      auto bytes = RankedTensorType::get(global.getType().getShape(),
                                         global.getType().getElementType());
      Value t = bufferization::ToTensorOp::create(
          b, ref.getLoc(), bytes, m, /*restrict=*/true, /*writable=*/false);
      if (bytes == ref.getType()) {
        ref.replaceAllUsesWith(t);
        ref.erase();
        return WalkResult::advance();
      }
      // A byte-held weight is read only through the casts to its bytes that
      // the lowering of its users made (the MXFP4 expert loops).
      for (Operation *user : llvm::make_early_inc_range(ref->getUsers())) {
        auto cast = dyn_cast<UnrealizedConversionCastOp>(user);
        if (!cast || cast->getNumOperands() != 1 ||
            cast->getResult(0).getType() != bytes) {
          user->emitError() << "reads the MXFP4 weight '" << ref.getName()
                            << "' as " << ref.getType()
                            << "; the CPU reads MXFP4 only as its bytes "
                            << bytes;
          return WalkResult::interrupt();
        }
        cast->getResult(0).replaceAllUsesWith(t);
        cast->erase();
      }
      ref.erase();
      return WalkResult::advance();
    };
    for (kimi::WeightRefOp ref : refs)
      if (externalize(ref).wasInterrupted())
        return signalPassFailure();
  }
};
} // namespace

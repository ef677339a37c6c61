//===- PrepareBufferization.cpp - entries and inits before bufferization --===//

#include "lowering/Passes.h"
#include "mlir/IR/IRMapping.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIPREPAREBUFFERIZATION
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {

/// The uses of `value` that write into it (destination operands).
SmallVector<OpOperand *> writers(Value value) {
  SmallVector<OpOperand *> uses;
  for (OpOperand &use : value.getUses())
    if (auto dps = dyn_cast<DestinationStyleOpInterface>(use.getOwner());
        dps && dps.isDpsInit(&use))
      uses.push_back(&use);
  return uses;
}

struct KimiPrepareBufferization
    : kimi::impl::KimiPrepareBufferizationBase<KimiPrepareBufferization> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();

    // Entries: the C interface and read-only arguments; the state names
    // on arguments and results live on in the artifact's signature.
    for (auto fn : module.getOps<func::FuncOp>()) {
      fn.setArgAttrsAttr(nullptr);
      fn.setResAttrsAttr(nullptr);
      if (!fn.isPublic())
        continue;
      fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                  UnitAttr::get(ctx));
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        fn.setArgAttr(i, bufferization::BufferizationDialect::kWritableAttrName,
                      BoolAttr::get(ctx, false));
    }

    if (splatsAsFills) {
      SmallVector<arith::ConstantOp> splats;
      module.walk([&](arith::ConstantOp c) {
        auto type = dyn_cast<RankedTensorType>(c.getType());
        if (type && type.getRank() > 0 && isa<SplatElementsAttr>(c.getValue()))
          splats.push_back(c);
      });
      for (arith::ConstantOp c : splats) {
        OpBuilder b(c);
        auto type = cast<RankedTensorType>(c.getType());
        auto value =
            cast<SplatElementsAttr>(c.getValue()).getSplatValue<TypedAttr>();
        Value empty = tensor::EmptyOp::create(b, c.getLoc(), type.getShape(),
                                              type.getElementType());
        Value scalar = arith::ConstantOp::create(b, c.getLoc(), value);
        Value fill =
            linalg::FillOp::create(b, c.getLoc(), scalar, empty).getResult(0);
        c.replaceAllUsesWith(fill);
        c.erase();
      }
    }

    // One fill per writer (readers may share one).
    SmallVector<linalg::FillOp> sharedFills;
    module.walk([&](linalg::FillOp fill) {
      if (fill.hasPureTensorSemantics() && !fill->getResult(0).hasOneUse() &&
          !fill->getResult(0).use_empty())
        sharedFills.push_back(fill);
    });
    for (linalg::FillOp fill : sharedFills) {
      SmallVector<OpOperand *> uses = writers(fill->getResult(0));
      if (uses.size() < 2)
        continue;
      Value init = fill.getDpsInits()[0];
      auto empty = init.getDefiningOp<tensor::EmptyOp>();
      for (OpOperand *use : llvm::drop_begin(uses)) {
        OpBuilder b(use->getOwner());
        IRMapping map;
        if (empty)
          map.map(init, b.clone(*empty)->getResult(0));
        use->set(b.clone(*fill, map)->getResult(0));
      }
    }

    if (emptyPerWriter) {
      SmallVector<tensor::EmptyOp> sharedEmpties;
      module.walk([&](tensor::EmptyOp empty) {
        if (!empty->getResult(0).hasOneUse() && !empty->getResult(0).use_empty())
          sharedEmpties.push_back(empty);
      });
      for (tensor::EmptyOp empty : sharedEmpties) {
        SmallVector<OpOperand *> uses = writers(empty->getResult(0));
        for (OpOperand *use : llvm::drop_begin(uses)) {
          OpBuilder b(use->getOwner());
          use->set(b.clone(*empty)->getResult(0));
        }
      }
    }
  }
};
} // namespace

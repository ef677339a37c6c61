//===- KdaBf16Io.cpp - kimi.kda with the Hopper kernels' I/O types --------===//
//
// kimi-kda-bf16-io: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Rewrites/KdaBf16Io.h"
#include "lowering/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIKDABF16IO
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

Type kimi::gpu::kdaKernelActivationType(KdaOp op) {
  auto q = cast<RankedTensorType>(op.getQ().getType());
  const bool prefill = q.getDimSize(1) != 1 || op.getCuSeqlens();
  Type act = q.getElementType();
  return prefill && act.isF32() ? BFloat16Type::get(op.getContext()) : act;
}

Value kimi::gpu::convertElementType(OpBuilder &b, Location loc, Value t,
                                    Type element) {
  auto type = cast<RankedTensorType>(t.getType());
  if (type.getElementType() == element)
    return t;
  Type to = type.clone(element);
  // bf16 <-> f16: through f32 (exact), then one rounding.
  if (element.getIntOrFloatBitWidth() == type.getElementTypeBitWidth())
    return convertElementType(
        b, loc, convertElementType(b, loc, t, b.getF32Type()), element);
  if (element.getIntOrFloatBitWidth() < type.getElementTypeBitWidth())
    return arith::TruncFOp::create(b, loc, to, t);
  return arith::ExtFOp::create(b, loc, to, t);
}

KdaOp kimi::gpu::cloneKdaWithActivations(OpBuilder &b, KdaOp op, Type act,
                                         SmallVectorImpl<Operation *> &created) {
  Location loc = op.getLoc();
  auto as = [&](Value v) {
    Value c = convertElementType(b, loc, v, act);
    if (c != v)
      created.push_back(c.getDefiningOp());
    return c;
  };
  SmallVector<Value> operands(op->getOperands());
  operands[0] = as(op.getQ());
  operands[1] = as(op.getK());
  operands[2] = as(op.getV());
  operands[4] = as(op.getBeta());
  OperationState state(loc, op->getName());
  state.addOperands(operands);
  state.addTypes({cast<RankedTensorType>(op.getOut().getType()).clone(act),
                  op.getFinalState().getType()});
  state.propertiesAttr = op->getPropertiesAsAttribute();
  for (NamedAttribute a : op->getDiscardableAttrs())
    state.addAttribute(a.getName(), a.getValue());
  auto copy = cast<KdaOp>(b.create(state));
  created.push_back(copy);
  return copy;
}

namespace {
struct KimiKdaBf16Io : kimi::impl::KimiKdaBf16IoBase<KimiKdaBf16Io> {
  void runOnOperation() override {
    SmallVector<KdaOp> ops;
    getOperation()->walk([&](KdaOp op) { ops.push_back(op); });
    for (KdaOp op : ops) {
      Type act = kimi::gpu::kdaKernelActivationType(op);
      Type own = cast<RankedTensorType>(op.getQ().getType()).getElementType();
      if (act == own)
        continue;
      OpBuilder b(op);
      SmallVector<Operation *> created;
      KdaOp copy = kimi::gpu::cloneKdaWithActivations(b, op, act, created);
      Value out = kimi::gpu::convertElementType(b, op.getLoc(), copy.getOut(), own);
      op.getOut().replaceAllUsesWith(out);
      op.getFinalState().replaceAllUsesWith(copy.getFinalState());
      op.erase();
    }
  }
};
} // namespace

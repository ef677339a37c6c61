//===- LinalgBuilders.cpp - small helpers for emitting linalg -------------===//

#include "lowering/KimiToLinalg/LinalgBuilders.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace kimi::lowering {

Value toF32(OpBuilder &b, Location loc, Value v) {
  Type t = v.getType();
  if (!isa<FloatType>(t) || t.isF32())
    return v;
  if (t.getIntOrFloatBitWidth() < 32)
    return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
  return arith::TruncFOp::create(b, loc, b.getF32Type(), v);
}

Value fromF32(OpBuilder &b, Location loc, Value v, Type type) {
  if (v.getType() == type || !isa<FloatType>(type))
    return v;
  if (type.getIntOrFloatBitWidth() < 32)
    return arith::TruncFOp::create(b, loc, type, v);
  return arith::ExtFOp::create(b, loc, type, v);
}

SmallVector<OpFoldResult> sizesOf(OpBuilder &b, Location loc, Value tensor) {
  return tensor::getMixedSizes(b, loc, tensor);
}

Value filled(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes,
             Type elementType, double value) {
  Value empty = tensor::EmptyOp::create(b, loc, sizes, elementType);
  Value scalar;
  if (auto ft = dyn_cast<FloatType>(elementType))
    scalar = arith::ConstantOp::create(b, loc, b.getFloatAttr(ft, value));
  else
    scalar = arith::ConstantOp::create(
        b, loc, b.getIntegerAttr(elementType, static_cast<int64_t>(value)));
  return linalg::FillOp::create(b, loc, scalar, empty).getResult(0);
}

Value carryLoop(OpBuilder &b, Location loc, int64_t n, Value init,
                llvm::function_ref<Value(OpBuilder &, Location, Value, Value)>
                    body) {
  auto idx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
  auto loop = scf::ForOp::create(
      b, loc, idx(0), idx(n), idx(1), ValueRange{init},
      [&](OpBuilder &lb, Location l, Value i, ValueRange it) {
        scf::YieldOp::create(lb, l, body(lb, l, i, it[0]));
      });
  return loop.getResult(0);
}

Value generic(OpBuilder &b, Location loc, Value init, ValueRange inputs,
              ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iterators,
              BodyFn body) {
  auto initType = cast<RankedTensorType>(init.getType());
  Type outElement = initType.getElementType();
  // Reductions accumulate in f32 whatever the result type: a bf16
  // accumulator would round every partial sum. The init is widened, the
  // reduction runs in f32, and only its result is rounded.
  if (isa<FloatType>(outElement) && !outElement.isF32() &&
      llvm::is_contained(iterators, utils::IteratorType::reduction)) {
    auto wideType = initType.clone(b.getF32Type());
    auto cast = [&](Value v, RankedTensorType to) {
      return elementwise(b, loc, to, v,
                         [](OpBuilder &, Location, ValueRange a) { return a[0]; });
    };
    // A filled init (a product's zeros) becomes an f32 fill, not a cast of
    // one: later passes recognise a fill (one per product, and the GPU's
    // products overwrite their output instead of reading it).
    Value wideInit;
    if (auto fill = init.getDefiningOp<linalg::FillOp>()) {
      Value scalar = toF32(b, loc, fill.getInputs()[0]);
      Value empty = tensor::EmptyOp::create(b, loc, sizesOf(b, loc, init),
                                            b.getF32Type());
      wideInit = linalg::FillOp::create(b, loc, scalar, empty).getResult(0);
    } else {
      wideInit = cast(init, wideType);
    }
    Value wide = generic(b, loc, wideInit, inputs, maps, iterators, body);
    return cast(wide, initType);
  }
  auto op = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, inputs, ValueRange{init}, maps,
      iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        SmallVector<Value> converted;
        for (Value a : args)
          converted.push_back(toF32(nb, nloc, a));
        Value result = body(nb, nloc, converted);
        linalg::YieldOp::create(nb, nloc,
                                fromF32(nb, nloc, result, outElement));
      });
  return op.getResult(0);
}

Value elementwise(OpBuilder &b, Location loc, RankedTensorType outType,
                  ValueRange inputs, BodyFn body) {
  Value init = tensor::EmptyOp::create(b, loc, sizesOf(b, loc, inputs[0]),
                                       outType.getElementType());
  unsigned rank = outType.getRank();
  SmallVector<AffineMap> maps(inputs.size() + 1,
                              b.getMultiDimIdentityMap(rank));
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  return generic(b, loc, init, inputs, maps, iterators,
                 [&](OpBuilder &nb, Location nloc, ValueRange args) {
                   return body(nb, nloc, args.drop_back());
                 });
}

Value constF32(OpBuilder &b, Location loc, double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

Value sigmoid(OpBuilder &b, Location loc, Value x) {
  Value one = constF32(b, loc, 1.0);
  Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x));
  return arith::DivFOp::create(b, loc, one,
                               arith::AddFOp::create(b, loc, one, e));
}

AffineMap dimsMap(MLIRContext *ctx, unsigned numDims, ArrayRef<unsigned> dims) {
  SmallVector<AffineExpr> exprs;
  for (unsigned d : dims)
    exprs.push_back(getAffineDimExpr(d, ctx));
  return AffineMap::get(numDims, 0, exprs, ctx);
}

AffineMap prefixMap(MLIRContext *ctx, unsigned numDims, unsigned rank) {
  SmallVector<unsigned> dims;
  for (unsigned i = 0; i < rank; ++i)
    dims.push_back(i);
  return dimsMap(ctx, numDims, dims);
}

Value collapseLeading(OpBuilder &b, Location loc, Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t rank = type.getRank();
  if (rank == 2)
    return v;
  ReassociationIndices leading;
  int64_t n = 1;
  for (int64_t i = 0; i + 1 < rank; ++i) {
    leading.push_back(i);
    n = ShapedType::isDynamic(type.getDimSize(i)) || ShapedType::isDynamic(n)
            ? ShapedType::kDynamic
            : n * type.getDimSize(i);
  }
  SmallVector<ReassociationIndices> reassociation = {leading, {rank - 1}};
  auto out = RankedTensorType::get({n, type.getDimSize(rank - 1)},
                                   type.getElementType());
  return tensor::CollapseShapeOp::create(b, loc, out, v, reassociation);
}

Value expandLeadingLike(OpBuilder &b, Location loc, Value v, Value like) {
  auto likeType = cast<RankedTensorType>(like.getType());
  auto vType = cast<RankedTensorType>(v.getType());
  int64_t rank = likeType.getRank();
  if (rank == 2 && vType.getRank() == 2 &&
      likeType.getDimSize(0) == vType.getDimSize(0))
    return v;
  SmallVector<int64_t> shape(likeType.getShape());
  shape.back() = vType.getDimSize(1);
  SmallVector<OpFoldResult> outShape = sizesOf(b, loc, like);
  outShape.back() = b.getIndexAttr(vType.getDimSize(1));
  ReassociationIndices leading;
  for (int64_t i = 0; i + 1 < rank; ++i)
    leading.push_back(i);
  SmallVector<ReassociationIndices> reassociation = {leading, {rank - 1}};
  return tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(shape, vType.getElementType()), v,
      reassociation, outShape);
}

} // namespace kimi::lowering

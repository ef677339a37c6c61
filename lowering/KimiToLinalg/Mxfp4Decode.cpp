//===- Mxfp4Decode.cpp - MXFP4 weights decoded inside the loops ----------===//

#include "lowering/KimiToLinalg/Mxfp4Decode.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace kimi::lowering {

Mxfp4Table packedTable(OpBuilder &b, Location loc, Value weight, Value scale) {
  auto w = cast<RankedTensorType>(weight.getType());
  auto sc = cast<RankedTensorType>(scale.getType());
  SmallVector<int64_t> shape(w.getShape().begin(), w.getShape().end());
  shape.back() /= 2;
  Type i8 = b.getI8Type();
  Type packedType = RankedTensorType::get(shape, i8);
  Type scaleType = RankedTensorType::get(sc.getShape(), i8);
  auto packedCast = UnrealizedConversionCastOp::create(
      b, loc, TypeRange{packedType}, ValueRange{weight});
  auto scaleCast = UnrealizedConversionCastOp::create(
      b, loc, TypeRange{scaleType}, ValueRange{scale});
  return {packedCast.getResult(0), scaleCast.getResult(0)};
}


Value mxfp4Element(OpBuilder &b, Location l, const Mxfp4Table &t, Value e,
                   Value row, Value col) {
  Type i32 = b.getI32Type();
  auto cIdx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, l, v); };
  auto c32 = [&](int64_t v) {
    return arith::ConstantIntOp::create(b, l, i32, v).getResult();
  };
  Value byte = tensor::ExtractOp::create(
      b, l, t.packed,
      ValueRange{e, row, arith::DivUIOp::create(b, l, col, cIdx(2))});
  Value word = arith::ExtUIOp::create(b, l, i32, byte);
  Value odd = arith::IndexCastOp::create(
      b, l, i32, arith::RemUIOp::create(b, l, col, cIdx(2)));
  Value code = arith::AndIOp::create(
      b, l,
      arith::ShRUIOp::create(b, l, word, arith::MulIOp::create(b, l, odd, c32(4))),
      c32(15));
  Value sign = arith::ShRUIOp::create(b, l, code, c32(3));
  Value ex = arith::AndIOp::create(
      b, l, arith::ShRUIOp::create(b, l, code, c32(1)), c32(3));
  Value m = arith::AndIOp::create(b, l, code, c32(1));
  // ex > 0: (1 + m/2) 2^(ex - 1), f32 exponent field ex + 126; ex = 0: m/2.
  Value normal = arith::OrIOp::create(
      b, l,
      arith::ShLIOp::create(b, l, arith::AddIOp::create(b, l, ex, c32(126)),
                            c32(23)),
      arith::ShLIOp::create(b, l, m, c32(22)));
  Value half = arith::MulIOp::create(b, l, m, c32(126 << 23));
  Value isSub = arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, ex, c32(0));
  Value mag = arith::SelectOp::create(b, l, isSub, half, normal);
  Value bits = arith::OrIOp::create(b, l, mag,
                                    arith::ShLIOp::create(b, l, sign, c32(31)));
  Value value = arith::BitcastOp::create(b, l, b.getF32Type(), bits);
  Value sByte = tensor::ExtractOp::create(
      b, l, t.scales,
      ValueRange{e, row, arith::DivUIOp::create(b, l, col, cIdx(32))});
  Value s = arith::ExtUIOp::create(b, l, i32, sByte);
  Value isZero = arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, s, c32(0));
  Value sBits = arith::SelectOp::create(b, l, isZero, c32(0x00400000),
                                        arith::ShLIOp::create(b, l, s, c32(23)));
  Value scale = arith::BitcastOp::create(b, l, b.getF32Type(), sBits);
  return arith::MulFOp::create(b, l, value, scale);
}

} // namespace kimi::lowering

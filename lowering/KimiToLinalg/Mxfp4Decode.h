//===- Mxfp4Decode.h - MXFP4 weights decoded inside the loops ---*- C++ -*-===//
//
// The CPU target keeps routed experts as the checkpoint's MXFP4 bytes and
// decodes each element where a contraction reads it (kimi-lower-to-linalg,
// LowerMoeOps.cpp). These builders are that decode, separate so that a unit
// test can run it over every code and scale (test/unit/Mxfp4DecodeTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_KIMITOLINALG_MXFP4DECODE_H
#define KIMI_LOWERING_KIMITOLINALG_MXFP4DECODE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

namespace kimi::lowering {

/// MXFP4 weights as the CPU reads them: the packed bytes of one table
/// (`tensor<... x N x K/2 x i8>`, the low nibble is the even element) and
/// its E8M0 scales (`tensor<... x N x K/32 x i8>`, bias 127, one per 32
/// values).
struct Mxfp4Table {
  mlir::Value packed, scales;
};

/// The table of an f4E2M1FN `weight` and its f8E8M0FNU `scale`, as casts to
/// the i8 tensors above. kimi-externalize-weights resolves the casts: the
/// globals it makes hold exactly these bytes.
Mxfp4Table packedTable(mlir::OpBuilder &b, mlir::Location loc,
                       mlir::Value weight, mlir::Value scale);

/// The f32 value of element (e, row, col) of a rank-3 table: the e2m1 code
/// (sign, 2-bit exponent with bias 1, 1-bit mantissa) built as f32 bits,
/// times the block's scale 2^(s - 127) (s = 0 is the subnormal 2^-127).
/// Both factors and their product are exact in f32, except that products
/// above the largest f32 (6 x 2^127 and the like) are infinite.
mlir::Value mxfp4Element(mlir::OpBuilder &b, mlir::Location l,
                         const Mxfp4Table &t, mlir::Value e, mlir::Value row,
                         mlir::Value col);

} // namespace kimi::lowering

#endif // KIMI_LOWERING_KIMITOLINALG_MXFP4DECODE_H

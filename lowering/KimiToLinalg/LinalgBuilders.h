//===- LinalgBuilders.h - small helpers for emitting linalg ----*- C++ -*-===//
//
// Shared by the kimi -> linalg patterns: f32 compute with conversion at the
// edges, empty/zero tensors sized like existing values, and one-output
// linalg.generic construction from affine maps.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_LOWERING_KIMITOLINALG_LINALGBUILDERS_H
#define KIMI_LOWERING_KIMITOLINALG_LINALGBUILDERS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/Builders.h"

namespace kimi::lowering {

/// The ranked tensor type of `v`.
inline mlir::RankedTensorType typeOf(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

/// Extends a float scalar to f32 (other types pass through).
mlir::Value toF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v);
/// Converts an f32 scalar to `type` (truncation or extension).
mlir::Value fromF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                    mlir::Type type);

/// The sizes of `tensor`, static where known.
llvm::SmallVector<mlir::OpFoldResult> sizesOf(mlir::OpBuilder &b,
                                              mlir::Location loc,
                                              mlir::Value tensor);
/// A tensor of `sizes` filled with `value` (an f32 constant converted to
/// `elementType`).
mlir::Value filled(mlir::OpBuilder &b, mlir::Location loc,
                   llvm::ArrayRef<mlir::OpFoldResult> sizes,
                   mlir::Type elementType, double value);

/// scf.for over [0, n) carrying one value; `body(b, loc, i, carried)`
/// returns its update.
mlir::Value carryLoop(
    mlir::OpBuilder &b, mlir::Location loc, int64_t n, mlir::Value init,
    llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location,
                                   mlir::Value, mlir::Value)>
        body);

/// Body of a generic: receives the inputs converted to f32 (integers as
/// they are) and the output accumulator converted to f32, returns the new
/// output value in f32.
using BodyFn = llvm::function_ref<mlir::Value(
    mlir::OpBuilder &, mlir::Location, mlir::ValueRange)>;

/// A linalg.generic with one output `init`; `maps` holds one map per input
/// followed by the output's.
mlir::Value generic(mlir::OpBuilder &b, mlir::Location loc, mlir::Value init,
                    mlir::ValueRange inputs,
                    llvm::ArrayRef<mlir::AffineMap> maps,
                    llvm::ArrayRef<mlir::utils::IteratorType> iterators,
                    BodyFn body);

/// All-parallel elementwise generic over `outType`'s shape whose inputs have
/// the same shape as the output (identity maps); sizes come from `inputs[0]`.
mlir::Value elementwise(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::RankedTensorType outType, mlir::ValueRange inputs,
                        BodyFn body);

/// f32 scalar helpers.
mlir::Value constF32(mlir::OpBuilder &b, mlir::Location loc, double v);
mlir::Value sigmoid(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);

/// The affine map (d0..d{numDims-1}) -> (dims...).
mlir::AffineMap dimsMap(mlir::MLIRContext *ctx, unsigned numDims,
                        llvm::ArrayRef<unsigned> dims);
/// Identity over the first `rank` of `numDims` loop dims.
mlir::AffineMap prefixMap(mlir::MLIRContext *ctx, unsigned numDims,
                          unsigned rank);

/// Collapses all leading dims of a tensor into one: [..., D] -> [N, D].
mlir::Value collapseLeading(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Value v);
/// Inverse of collapseLeading: [N, D'] -> leading dims of `like` ++ [D'].
mlir::Value expandLeadingLike(mlir::OpBuilder &b, mlir::Location loc,
                              mlir::Value v, mlir::Value like);

} // namespace kimi::lowering

#endif

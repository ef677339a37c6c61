//===- KernelLaunchSupport.cpp - tensors in and out of generated kernels --===//

#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace kimi::gpu {

namespace {
SmallVector<ReassociationIndices> allDims(int64_t rank) {
  SmallVector<ReassociationIndices> all(1);
  for (int64_t d = 0; d < rank; ++d)
    all[0].push_back(d);
  return all;
}
} // namespace

Value flatInputBuffer(OpBuilder &b, Location loc, Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  Value flat = tensor;
  if (type.getRank() != 1)
    flat = tensor::CollapseShapeOp::create(b, loc, tensor, allDims(type.getRank()));
  auto flatType = cast<RankedTensorType>(flat.getType());
  auto memrefType = MemRefType::get(flatType.getShape(), type.getElementType());
  return bufferization::ToBufferOp::create(b, loc, memrefType, flat,
                                           /*readOnly=*/true);
}

Value allocFlatBuffer(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes,
                      Type type) {
  int64_t staticCount = 1;
  Value dynamicCount;
  for (OpFoldResult s : sizes) {
    if (std::optional<int64_t> c = getConstantIntValue(s)) {
      staticCount *= *c;
      continue;
    }
    Value v = cast<Value>(s);
    dynamicCount = dynamicCount ? arith::MulIOp::create(b, loc, dynamicCount, v)
                                : v;
  }
  if (!dynamicCount)
    return memref::AllocOp::create(b, loc, MemRefType::get({staticCount}, type));
  Value count = arith::MulIOp::create(
      b, loc, dynamicCount, arith::ConstantIndexOp::create(b, loc, staticCount));
  return memref::AllocOp::create(
      b, loc, MemRefType::get({ShapedType::kDynamic}, type), ValueRange{count});
}

Value tensorOfFlatBuffer(OpBuilder &b, Location loc, Value buffer,
                         RankedTensorType type, ArrayRef<OpFoldResult> sizes) {
  auto memrefType = cast<MemRefType>(buffer.getType());
  Value flat = bufferization::ToTensorOp::create(
      b, loc,
      RankedTensorType::get(memrefType.getShape(), type.getElementType()),
      buffer, /*restrict=*/true, /*writable=*/true);
  if (type.getRank() == 1)
    return flat;
  return tensor::ExpandShapeOp::create(b, loc, type, flat, allDims(type.getRank()),
                                       sizes);
}

Value rowCount(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes) {
  int64_t staticRows = 1;
  Value dynamicRows;
  for (OpFoldResult s : sizes.drop_back()) {
    if (std::optional<int64_t> c = getConstantIntValue(s)) {
      staticRows *= *c;
      continue;
    }
    Value v = cast<Value>(s);
    dynamicRows = dynamicRows ? arith::MulIOp::create(b, loc, dynamicRows, v) : v;
  }
  Value rows = arith::ConstantIndexOp::create(b, loc, staticRows);
  if (!dynamicRows)
    return rows;
  return staticRows == 1 ? dynamicRows
                         : arith::MulIOp::create(b, loc, dynamicRows, rows);
}

Value asDynamicBuffer(OpBuilder &b, Location loc, Value buffer) {
  auto type = cast<MemRefType>(buffer.getType());
  if (type.isDynamicDim(0))
    return buffer;
  return memref::CastOp::create(
      b, loc, MemRefType::get({ShapedType::kDynamic}, type.getElementType()),
      buffer);
}

mlir::gpu::GPUFuncOp GeneratedKernels::get(
    StringRef key,
    function_ref<mlir::gpu::GPUFuncOp(OpBuilder &, mlir::gpu::GPUModuleOp)> emit) {
  auto found = kernels.find(key);
  if (found != kernels.end())
    return found->second;
  OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
  if (!kernelModule) {
    kernelModule = mlir::gpu::GPUModuleOp::create(mb, module.getLoc(), moduleName);
    module->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(module.getContext()));
  }
  mlir::gpu::GPUFuncOp fn = emit(mb, kernelModule);
  kernels[key] = fn;
  return fn;
}

} // namespace kimi::gpu

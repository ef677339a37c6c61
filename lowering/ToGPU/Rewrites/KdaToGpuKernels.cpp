//===- KdaToGpuKernels.cpp - kimi.kda -> the generated KDA kernels --------===//
//
// kimi-gpu-kda-kernels: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/Rewrites/KdaBf16Io.h"
#include "lowering/ToGPU/Rewrites/KdaGpuProgram.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/SymbolTable.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUKDAKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

/// The sequence as IR at the op: its operands' buffers, allocations for
/// the rest, and the launches, in the model's module.
struct KdaLaunchSink final : kimi::gpu::KernelSequenceSink {
  KdaLaunchSink(OpBuilder &b, Operation *op, mlir::gpu::GPUModuleOp kernels)
      : b(b), op(op), loc(op->getLoc()), kernels(kernels) {}

  OpBuilder &b;
  Operation *op;
  Location loc;
  mlir::gpu::GPUModuleOp kernels;
  SmallVector<Value> buffers;
  /// Set when an operand does not hold the values the kernels read.
  bool failed = false;

  mlir::gpu::GPUModuleOp kernelModule() override { return kernels; }

  uint32_t add(Value buffer) {
    buffers.push_back(buffer);
    return buffers.size() - 1;
  }
  static int64_t numel(ArrayRef<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  Value alloc(Type type, ArrayRef<int64_t> shape) {
    return memref::AllocOp::create(b, loc, MemRefType::get({numel(shape)}, type));
  }

  uint32_t input(StringRef name, Value operand, Type type,
                 std::vector<int64_t> shape) override {
    auto operandType = cast<RankedTensorType>(operand.getType());
    if (operandType.getNumElements() != numel(shape) ||
        operandType.getElementType() != type) {
      op->emitOpError("GPU KDA kernels read '")
          << name << "' as " << RankedTensorType::get(shape, type) << ", it is "
          << operandType;
      failed = true;
      return add(alloc(type, shape)); // unread: the pass fails
    }
    return add(kimi::gpu::flatInputBuffer(b, loc, operand));
  }

  uint32_t sequenceOffsets(int64_t sequences, int64_t length) override {
    // Computed on the device: a constant tensor would bufferize to a host
    // global.
    Type i32 = b.getI32Type();
    auto tensorType = RankedTensorType::get({sequences + 1}, i32);
    Value empty = tensor::EmptyOp::create(b, loc, tensorType.getShape(), i32);
    MLIRContext *c = b.getContext();
    Value offsets =
        linalg::GenericOp::create(
            b, loc, TypeRange{tensorType}, ValueRange{}, ValueRange{empty},
            ArrayRef<AffineMap>{AffineMap::getMultiDimIdentityMap(1, c)},
            ArrayRef<utils::IteratorType>{utils::IteratorType::parallel},
            [&](OpBuilder &nb, Location l, ValueRange) {
              Value i = linalg::IndexOp::create(nb, l, 0);
              Value scaled = arith::MulIOp::create(
                  nb, l, i, arith::ConstantIndexOp::create(nb, l, length));
              linalg::YieldOp::create(
                  nb, l, ValueRange{arith::IndexCastOp::create(
                             nb, l, nb.getI32Type(), scaled)});
            })
            .getResult(0);
    return add(bufferization::ToBufferOp::create(
        b, loc, MemRefType::get({sequences + 1}, i32), offsets, true));
  }

  uint32_t output(StringRef, Type type, std::vector<int64_t> shape) override {
    return add(alloc(type, shape));
  }
  uint32_t temporary(StringRef, Type type, std::vector<int64_t> shape) override {
    return add(alloc(type, shape));
  }

  void launch(StringRef function, std::array<int64_t, 3> grid, int64_t threads,
              std::vector<uint32_t> args) override {
    auto fn = kernels.lookupSymbol<mlir::gpu::GPUFuncOp>(function);
    assert(fn && "a launch of a kernel the sequence did not generate");
    auto dim = [&](int64_t v) -> Value {
      return arith::ConstantIndexOp::create(b, loc, v);
    };
    SmallVector<Value> operands;
    for (uint32_t a : args)
      operands.push_back(buffers[a]);
    mlir::gpu::LaunchFuncOp::create(
        b, loc, fn, mlir::gpu::KernelDim3{dim(grid[0]), dim(grid[1]), dim(grid[2])},
        mlir::gpu::KernelDim3{dim(threads), dim(1), dim(1)}, Value(), operands);
  }
};

struct KimiGpuKdaKernels
    : kimi::impl::KimiGpuKdaKernelsBase<KimiGpuKdaKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<KdaOp> ops;
    module.walk([&](KdaOp op) { ops.push_back(op); });
    int index = 0;
    for (KdaOp op : ops)
      if (failed(rewrite(module, op, index)))
        return signalPassFailure();
  }

  LogicalResult rewrite(ModuleOp module, KdaOp op, int &index) {
    MLIRContext *ctx = &getContext();
    Location loc = op.getLoc();
    OpBuilder b(op);
    // The prefill kernels read bf16 q/k/v/beta and write a bf16 output.
    Type act = cast<RankedTensorType>(op.getQ().getType()).getElementType();
    SmallVector<Operation *> created;
    KdaOp kernelOp = kimi::gpu::cloneKdaWithActivations(
        b, op, kimi::gpu::kdaKernelActivationType(op), created);
    KdaGateOp gate = kernelOp.getG().getDefiningOp<KdaGateOp>();

    // The kernels join the model's under a unique name; a shape the
    // generators do not cover (checked before anything is emitted) stays
    // for kimi-lower-kda.
    OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
    auto kernels = mlir::gpu::GPUModuleOp::create(
        mb, loc, "kimi_kda_" + std::to_string(index));
    KdaLaunchSink sink(b, op, kernels);
    std::string why;
    FailureOr<kimi::gpu::KdaKernelSequence> sequence;
    {
      ScopedDiagnosticHandler quiet(ctx, [&](Diagnostic &d) {
        why = d.str();
        return success();
      });
      kimi::gpu::KdaPlanOptions options;
      options.device.smCount = smCount;
      sequence = kimi::gpu::buildKdaKernels(kernelOp, sink, options);
    }
    if (failed(sequence)) {
      kernels.erase();
      for (Operation *c : llvm::reverse(created))
        c->erase();
      op.emitRemark() << "kept for kimi-lower-kda (no GPU kernel): " << why;
      return success();
    }
    if (sink.failed)
      return failure();
    ++index;
    module->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(ctx));

    auto asTensor = [&](uint32_t buffer, Type full) {
      auto fullType = cast<RankedTensorType>(full);
      SmallVector<OpFoldResult> sizes;
      for (int64_t d : fullType.getShape())
        sizes.push_back(b.getIndexAttr(d));
      return kimi::gpu::tensorOfFlatBuffer(b, loc, sink.buffers[buffer],
                                           fullType, sizes);
    };
    Value out = asTensor(sequence->out, kernelOp.getOut().getType());
    Value finalState =
        asTensor(sequence->finalState, kernelOp.getFinalState().getType());
    op.getOut().replaceAllUsesWith(kimi::gpu::convertElementType(b, loc, out, act));
    op.getFinalState().replaceAllUsesWith(finalState);
    kernelOp.erase();
    op.erase();
    if (gate && gate->use_empty())
      gate.erase();
    return success();
  }
};
} // namespace

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
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/SymbolTable.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUKDAKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

Type elementTypeOf(MLIRContext *ctx, rt::DType d) {
  switch (d) {
  case rt::DType::kF32:
    return Float32Type::get(ctx);
  case rt::DType::kBF16:
    return BFloat16Type::get(ctx);
  case rt::DType::kF16:
    return Float16Type::get(ctx);
  case rt::DType::kI32:
    return IntegerType::get(ctx, 32);
  default:
    return Type();
  }
}

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
    auto qType = cast<RankedTensorType>(op.getQ().getType());
    // The prefill kernels read bf16 q/k/v/beta and write a bf16 output.
    Type act = qType.getElementType();
    SmallVector<Operation *> created;
    KdaOp kernelOp = kimi::gpu::cloneKdaWithActivations(
        b, op, kimi::gpu::kdaKernelActivationType(op), created);

    // Planning: a shape the generators do not cover stays for kimi-lower-kda.
    std::string why;
    FailureOr<kimi::gpu::GpuEntryPlan> plan;
    {
      ScopedDiagnosticHandler quiet(ctx, [&](Diagnostic &d) {
        why = d.str();
        return success();
      });
      kimi::gpu::KdaPlanOptions options;
      options.device.smCount = smCount;
      plan = kimi::gpu::planKdaEntry(kernelOp, "kda" + std::to_string(index),
                               options);
    }
    if (failed(plan)) {
      for (Operation *c : llvm::reverse(created))
        c->erase();
      op.emitRemark() << "kept for kimi-lower-kda (no GPU kernel): " << why;
      return success();
    }

    // The plan's gpu.module joins the model's kernels under a unique name.
    auto kernels = *plan->kernels->getOps<mlir::gpu::GPUModuleOp>().begin();
    kernels->moveBefore(module.getBody(), module.getBody()->end());
    std::string moduleName = "kimi_kda_" + std::to_string(index++);
    SymbolTable::setSymbolName(kernels, moduleName);
    module->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(ctx));

    // Buffers by name.
    KdaGateOp gate = kernelOp.getG().getDefiningOp<KdaGateOp>();
    auto tensorFor = [&](StringRef name) -> Value {
      if (name == "q") return kernelOp.getQ();
      if (name == "k") return kernelOp.getK();
      if (name == "v") return kernelOp.getV();
      if (name == "g") return kernelOp.getG();
      if (name == "beta") return kernelOp.getBeta();
      if (name == "initial_state" || name == "state")
        return kernelOp.getInitialState();
      if (name == "cu_seqlens") return kernelOp.getCuSeqlens();
      if (gate && name == "z") return gate.getZ();
      if (gate && name == "a_log") return gate.getALog();
      if (gate && name == "dt_bias") return gate.getDtBias();
      return Value();
    };
    SmallVector<Value> buffers;
    Value outBuffer, stateBuffer;
    for (const rt::BufferSpec &spec : plan->buffers) {
      int64_t numel = 1;
      for (int64_t d : spec.shape)
        numel *= d;
      auto type = MemRefType::get({numel}, elementTypeOf(ctx, spec.dtype));
      auto fullType = RankedTensorType::get(spec.shape, type.getElementType());
      Value buffer;
      switch (spec.kind) {
      case rt::BufferKind::kInput: {
        Value t = tensorFor(spec.name);
        if (!t)
          return op.emitOpError("GPU KDA plan input '") << spec.name
                 << "' has no operand";
        if (cast<RankedTensorType>(t.getType()).getNumElements() != numel)
          return op.emitOpError("GPU KDA plan input '") << spec.name
                 << "' is " << t.getType() << ", the kernels expect "
                 << fullType;
        buffer = kimi::gpu::flatInputBuffer(b, loc, t);
        break;
      }
      case rt::BufferKind::kConstant: {
        // Equal-length sequence offsets i * T, computed on the device: a
        // constant tensor would bufferize to a host global.
        if (spec.name != "cu_seqlens")
          return op.emitOpError("GPU KDA plan constant '") << spec.name
                 << "' has no device form";
        int64_t stride = qType.getDimSize(1);
        auto tensorType = RankedTensorType::get({numel}, type.getElementType());
        Value empty = tensor::EmptyOp::create(b, loc, tensorType.getShape(),
                                              tensorType.getElementType());
        MLIRContext *c = b.getContext();
        Value offsets =
            linalg::GenericOp::create(
                b, loc, TypeRange{tensorType}, ValueRange{}, ValueRange{empty},
                ArrayRef<AffineMap>{AffineMap::getMultiDimIdentityMap(1, c)},
                ArrayRef<utils::IteratorType>{utils::IteratorType::parallel},
                [&](OpBuilder &nb, Location l, ValueRange) {
                  Value i = linalg::IndexOp::create(nb, l, 0);
                  Value scaled = arith::MulIOp::create(
                      nb, l, i, arith::ConstantIndexOp::create(nb, l, stride));
                  linalg::YieldOp::create(
                      nb, l, ValueRange{arith::IndexCastOp::create(
                                 nb, l, nb.getI32Type(), scaled)});
                })
                .getResult(0);
        buffer = bufferization::ToBufferOp::create(b, loc, type, offsets, true);
        break;
      }
      case rt::BufferKind::kInOut:
        // The caller's tensors are read-only; the plans write new buffers.
        return op.emitOpError("GPU KDA plan buffer '")
               << spec.name << "' is updated in place";
      case rt::BufferKind::kOutput:
      case rt::BufferKind::kTemporary:
        buffer = memref::AllocOp::create(b, loc, type);
        if (spec.name == "out")
          outBuffer = buffer;
        if (spec.name == "final_state")
          stateBuffer = buffer;
        break;
      }
      buffers.push_back(buffer);
    }
    if (!outBuffer || !stateBuffer)
      return op.emitOpError("GPU KDA plan has no 'out' or state buffer");

    for (const rt::LaunchSpec &l : plan->launches) {
      auto fn = kernels.lookupSymbol<mlir::gpu::GPUFuncOp>(l.function);
      if (!fn)
        return op.emitOpError("GPU KDA plan launches unknown kernel '")
               << l.function << "'";
      auto dim = [&](uint32_t v) -> Value {
        return arith::ConstantIndexOp::create(b, loc, v);
      };
      SmallVector<Value> args;
      for (uint32_t a : l.args)
        args.push_back(buffers[a]);
      mlir::gpu::LaunchFuncOp::create(
          b, loc, fn,
          mlir::gpu::KernelDim3{dim(l.grid[0]), dim(l.grid[1]), dim(l.grid[2])},
          mlir::gpu::KernelDim3{dim(l.block[0]), dim(l.block[1]), dim(l.block[2])},
          Value(), args);
    }
    auto asTensor = [&](Value buffer, Type full) {
      auto fullType = cast<RankedTensorType>(full);
      SmallVector<OpFoldResult> sizes;
      for (int64_t d : fullType.getShape())
        sizes.push_back(b.getIndexAttr(d));
      return kimi::gpu::tensorOfFlatBuffer(b, loc, buffer, fullType, sizes);
    };
    Value out = asTensor(outBuffer, kernelOp.getOut().getType());
    Value finalState = asTensor(stateBuffer, kernelOp.getFinalState().getType());
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

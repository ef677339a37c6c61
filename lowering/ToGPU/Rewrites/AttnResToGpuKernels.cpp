//===- AttnResToGpuKernels.cpp - kimi.attn_res (+ rms_norm) -> one kernel --===//
//
// kimi-gpu-attn-res-kernels: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/Kernels/AttnResKernel.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"


namespace kimi {
#define GEN_PASS_DEF_KIMIGPUATTNRESKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

struct KimiGpuAttnResKernels
    : kimi::impl::KimiGpuAttnResKernelsBase<KimiGpuAttnResKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<AttnResOp> ops;
    module.walk([&](AttnResOp op) { ops.push_back(op); });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_attn_res");
    for (AttnResOp op : ops)
      rewrite(kernels, op);
  }

  void rewrite(kimi::gpu::GeneratedKernels &kernels, AttnResOp op) {
    Location loc = op.getLoc();
    auto outType = cast<RankedTensorType>(op.getOut().getType());
    auto elementType = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getElementType();
    };
    kimi::gpu::AttnResKernelSpec spec;
    spec.sources = static_cast<int64_t>(op.getSources().size());
    spec.width = outType.getShape().back();
    spec.act = outType.getElementType();
    spec.query = elementType(op.getQuery());
    spec.norm = elementType(op.getNorm());
    spec.eps = op.getEps().convertToDouble();
    // The norm after the mix, when the mix feeds nothing else.
    RmsNormOp norm;
    if (op->hasOneUse())
      if (auto user = dyn_cast<RmsNormOp>(*op->user_begin());
          user && user.getX() == op.getOut() && user.getType() == outType) {
        norm = user;
        spec.normWeight = elementType(norm.getWeight());
        spec.normEps = norm.getEps().convertToDouble();
        spec.writeMix = false;
      }
    std::string why;
    auto isFloat = [](Type t) { return t.isF32() || t.isBF16() || t.isF16(); };
    if (!isFloat(spec.act) || !isFloat(spec.query) || !isFloat(spec.norm) ||
        (spec.normWeight && !isFloat(spec.normWeight)))
      why = "the kernel reads and writes f32, bf16 or f16";
    else if (llvm::any_of(op.getSources(), [&](Value v) {
               return v.getType() != outType;
             }))
      why = "every source must have the result's type";
    else
      (void)kimi::gpu::verifyAttnResKernelSpec(spec, why);
    if (!why.empty()) {
      op.emitRemark() << "kept for kimi-lower-to-linalg (no GPU AttnRes "
                         "kernel): "
                      << why;
      return;
    }
    std::string key;
    llvm::raw_string_ostream os(key);
    os << spec.sources << "x" << spec.width << " " << spec.act << " "
       << spec.query << " " << spec.norm << " " << spec.eps << " "
       << spec.writeMix << " " << spec.normWeight << " " << spec.normEps;
    std::string name = "attn_res_" + std::to_string(spec.sources) + "src" +
                       (spec.normWeight ? "_norm" : "") + "_" +
                       std::to_string(kernels.size());
    auto fn = kernels.get(key, [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
      return kimi::gpu::emitAttnResKernel(mb, loc, m, name, spec);
    });

    OpBuilder b(norm ? norm.getOperation() : op.getOperation());
    SmallVector<OpFoldResult> sizes =
        tensor::getMixedSizes(b, loc, op.getSources().front());
    // One block per token: the product of every size but the width.
    Value tokens = kimi::gpu::rowCount(b, loc, sizes);
    // The kernel's buffers are memref<?x...> (tokens at run time) and the
    // weights' static ones.
    auto input = [&](Value t, bool perToken) -> Value {
      Value buffer = kimi::gpu::flatInputBuffer(b, loc, t);
      return perToken ? kimi::gpu::asDynamicBuffer(b, loc, buffer) : buffer;
    };
    SmallVector<Value> args;
    for (Value source : op.getSources())
      args.push_back(input(source, true));
    args.push_back(input(op.getQuery(), false));
    args.push_back(input(op.getNorm(), false));
    Value out = kimi::gpu::allocFlatBuffer(b, loc, sizes, spec.act);
    if (norm)
      args.push_back(input(norm.getWeight(), false));
    args.push_back(kimi::gpu::asDynamicBuffer(b, loc, out));
    auto c1 = arith::ConstantIndexOp::create(b, loc, 1);
    auto threads =
        arith::ConstantIndexOp::create(b, loc, kimi::gpu::kAttnResThreads);
    mlir::gpu::LaunchFuncOp::create(b, loc, fn,
                                    mlir::gpu::KernelDim3{tokens, c1, c1},
                                    mlir::gpu::KernelDim3{threads, c1, c1},
                                    Value(), args);
    Value result = kimi::gpu::tensorOfFlatBuffer(b, loc, out, outType, sizes);
    if (norm) {
      norm.getOut().replaceAllUsesWith(result);
      norm.erase();
    } else {
      op.getOut().replaceAllUsesWith(result);
    }
    op.erase();
  }
};

} // namespace

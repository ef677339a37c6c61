//===- RoutedExpertsToGpuKernels.cpp - kimi.routed_experts -> two kernels -===//
//
// kimi-gpu-routed-experts-kernels: see lowering/Passes.td. The kernels are
// RoutedExpertsKernel.h's; this pass binds an op's buffers to them.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/KimiToLinalg/Mxfp4Decode.h"
#include "lowering/ToGPU/KernelLaunchSupport.h"
#include "lowering/ToGPU/RoutedExpertsKernel.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUROUTEDEXPERTSKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;
using kimi::gpu::RoutedExpertsSpec;

namespace {

struct KimiGpuRoutedExpertsKernels
    : kimi::impl::KimiGpuRoutedExpertsKernelsBase<KimiGpuRoutedExpertsKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<RoutedExpertsOp> ops;
    module.walk([&](RoutedExpertsOp op) { ops.push_back(op); });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_routed_experts");
    for (RoutedExpertsOp op : ops)
      rewrite(kernels, op);
  }

  void rewrite(kimi::gpu::GeneratedKernels &kernels, RoutedExpertsOp op) {
    std::string why;
    std::optional<RoutedExpertsSpec> spec =
        kimi::gpu::routedExpertsSpec(op, maxTokens, why);
    if (!spec) {
      if (!why.empty())
        op.emitRemark()
            << "kept for kimi-lower-to-linalg (no GPU routed-experts kernels): "
            << why;
      return;
    }
    const RoutedExpertsSpec &s = *spec;
    Location loc = op.getLoc();
    std::string base = "routed_experts_" + std::to_string(kernels.size() / 2);
    auto gateUp = kernels.get(s.key() + "_gate_up", [&](OpBuilder &mb,
                                                       mlir::gpu::GPUModuleOp m) {
      return kimi::gpu::emitRoutedGateUpKernel(mb, loc, m, base + "_gate_up", s);
    });
    auto down = kernels.get(s.key() + "_down", [&](OpBuilder &mb,
                                                  mlir::gpu::GPUModuleOp m) {
      return kimi::gpu::emitRoutedDownKernel(mb, loc, m, base + "_down", s);
    });

    OpBuilder b(op);
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    Type f32 = b.getF32Type();
    Value z = kimi::gpu::flatInputBuffer(b, loc, op.getX());
    Value ids = kimi::gpu::flatInputBuffer(b, loc, op.getIndices());
    Value weights = kimi::gpu::flatInputBuffer(b, loc, op.getWeights());
    // A table's buffers: the weights, or an MXFP4 table's codes and scales
    // as bytes (kimi-externalize-weights resolves the casts to its globals).
    auto table = [&](unsigned which) -> SmallVector<Value, 2> {
      Value w = which == 0 ? op.getGateProj() : which == 1 ? op.getUpProj()
                                                     : op.getDownProj();
      if (!s.mxfp4)
        return {kimi::gpu::flatInputBuffer(b, loc, w)};
      lowering::Mxfp4Table t =
          lowering::packedTable(b, loc, w, op.getScales()[which]);
      return {kimi::gpu::flatInputBuffer(b, loc, t.packed),
              kimi::gpu::flatInputBuffer(b, loc, t.scales)};
    };
    SmallVector<Value, 2> gate = table(0), up = table(1), downTable = table(2);
    Value h = kimi::gpu::allocFlatBuffer(
        b, loc, {b.getIndexAttr(s.tokens * s.topK * s.inner)}, f32);
    SmallVector<OpFoldResult> outSizes =
        tensor::getMixedSizes(b, loc, op.getX());
    Value out = kimi::gpu::allocFlatBuffer(b, loc, outSizes, f32);
    auto dims = [&](std::array<int64_t, 3> g) {
      return mlir::gpu::KernelDim3{c(g[0]), c(g[1]), c(g[2])};
    };
    const mlir::gpu::KernelDim3 threads{c(kimi::gpu::kRoutedExpertsThreads),
                                        c(1), c(1)};
    mlir::gpu::LaunchFuncOp::create(b, loc, gateUp,
                                    dims(kimi::gpu::routedGateUpGrid(s)),
                                    threads, Value(),
                                    kimi::gpu::routedGateUpArgs<Value>(
                                        z, ids, gate, up, h));
    mlir::gpu::LaunchFuncOp::create(b, loc, down,
                                    dims(kimi::gpu::routedDownGrid(s)), threads,
                                    Value(),
                                    kimi::gpu::routedDownArgs<Value>(
                                        h, ids, weights, downTable, out));
    op.getOut().replaceAllUsesWith(kimi::gpu::tensorOfFlatBuffer(
        b, loc, out, op.getOut().getType(), outSizes));
    op.erase();
  }
};

} // namespace

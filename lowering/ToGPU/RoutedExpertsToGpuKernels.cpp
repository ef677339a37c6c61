//===- RoutedExpertsToGpuKernels.cpp - kimi.routed_experts -> two kernels -===//
//
// kimi-gpu-routed-experts-kernels: see lowering/Passes.td. The kernels are
// RoutedExpertsKernel.h's; this pass binds an op's buffers to them.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/KimiToLinalg/Mxfp4Decode.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "lowering/ToGPU/ExpertProductKernel.h"
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
    for (RoutedExpertsOp op : ops) {
      int64_t tokens = lowering::sortedTokens(op);
      if (tokens > maxTokens && !op.getScales().empty())
        rewriteSorted(kernels, op);
      else
        rewrite(kernels, op);
    }
    lowering::defineHostRead(module);
  }

  /// A prefill step's MXFP4 experts: the token-sorted lowering with its
  /// three products as the tensor-core kernel.
  void rewriteSorted(kimi::gpu::GeneratedKernels &kernels, RoutedExpertsOp op) {
    Value tables[] = {op.getGateProj(), op.getUpProj(), op.getDownProj()};
    kimi::gpu::ExpertProductSpec specs[3];
    for (unsigned which = 0; which < 3; ++which) {
      auto type = cast<RankedTensorType>(tables[which].getType());
      specs[which].experts = type.getDimSize(0);
      specs[which].n = type.getDimSize(1);
      specs[which].k = type.getDimSize(2);
      // The gathered rows are at the tokens' type (gate and up) or f32
      // (down reads the SiTU products); bf16 rows are one term as they are.
      specs[which].bf16Rows =
          which < 2 && cast<RankedTensorType>(op.getX().getType())
                           .getElementType()
                           .isBF16();
      specs[which].terms = bf16Products || specs[which].bf16Rows ? 1 : 3;
      std::string why = kimi::gpu::verifyExpertProductSpec(specs[which]);
      if (!why.empty()) {
        op.emitRemark() << "kept for kimi-lower-to-linalg (no MXFP4 expert "
                           "product kernel): "
                        << why;
        return;
      }
    }
    const mlir::gpu::KernelDim3 threads = [&] {
      OpBuilder b(op);
      auto c = [&](int64_t v) {
        return arith::ConstantIndexOp::create(b, op.getLoc(), v);
      };
      return mlir::gpu::KernelDim3{c(kimi::gpu::kExpertProductThreads), c(1),
                                   c(1)};
    }();
    auto product = [&](OpBuilder &b, Location loc, Value rows, unsigned which,
                       int64_t out, Value cap, Value counts) -> Value {
      const kimi::gpu::ExpertProductSpec &s = specs[which];
      std::string name =
          "expert_product_" + std::to_string(kernels.size());
      auto kernel = kernels.get(s.key(), [&](OpBuilder &mb,
                                             mlir::gpu::GPUModuleOp m) {
        return kimi::gpu::emitExpertProductKernel(mb, loc, m, name, s);
      });
      auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
      lowering::Mxfp4Table t =
          lowering::packedTable(b, loc, tables[which], op.getScales()[which]);
      auto input = [&](Value tensor) {
        return kimi::gpu::asDynamicBuffer(
            b, loc, kimi::gpu::flatInputBuffer(b, loc, tensor));
      };
      SmallVector<OpFoldResult> sizes = {b.getIndexAttr(s.experts), cap,
                                         b.getIndexAttr(out)};
      Value result = kimi::gpu::allocFlatBuffer(b, loc, sizes, b.getF32Type());
      Value rowTiles = arith::DivUIOp::create(
          b, loc, arith::AddIOp::create(b, loc, cap, c(kimi::gpu::kExpertProductTileM - 1)),
          c(kimi::gpu::kExpertProductTileM));
      mlir::gpu::KernelDim3 grid{
          c((out + kimi::gpu::kExpertProductTileN - 1) /
            kimi::gpu::kExpertProductTileN),
          rowTiles, c(s.experts)};
      mlir::gpu::LaunchFuncOp::create(
          b, loc, kernel, grid, threads, Value(),
          ValueRange{input(rows), input(t.packed), input(t.scales),
                     input(counts), kimi::gpu::asDynamicBuffer(b, loc, result),
                     cap});
      return kimi::gpu::tensorOfFlatBuffer(
          b, loc, result,
          RankedTensorType::get({s.experts, ShapedType::kDynamic, out},
                                b.getF32Type()),
          sizes);
    };
    OpBuilder b(op);
    Value replacement = lowering::lowerSortedRoutedExperts(b, op, product);
    op.getOut().replaceAllUsesWith(replacement);
    op.erase();
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
    Value out = kimi::gpu::allocFlatBuffer(b, loc, outSizes, s.tokenType(b));
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

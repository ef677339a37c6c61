//===- MlaToGpuKernels.cpp - MLA over many queries -> the flash kernel ----===//
//
// kimi-gpu-mla-kernels: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/KdaBf16Io.h"
#include "lowering/ToGPU/KernelLaunchSupport.h"
#include "lowering/ToGPU/MlaPrefillKernel.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/IR/SymbolTable.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUMLAKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

/// The operands of one MLA op in the kernel's terms.
struct MlaOperands {
  Value q, latent, pe, kvb, gate, lengths;
  int64_t rope = 0;
  /// kimi.mla_decode: the cache whose columns are [latent | k_pe].
  Value cache;
  int64_t latentWidth = 0;
};

struct KimiGpuMlaKernels
    : kimi::impl::KimiGpuMlaKernelsBase<KimiGpuMlaKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (isa<MlaOp, MlaDecodeOp>(op))
        ops.push_back(op);
    });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_mla");
    for (Operation *op : ops)
      if (failed(rewrite(kernels, op)))
        return signalPassFailure();
  }

  LogicalResult rewrite(kimi::gpu::GeneratedKernels &kernels, Operation *op) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    MlaOperands m;
    double scale = 1.0;
    if (auto mla = dyn_cast<MlaOp>(op)) {
      m = {mla.getQ(), mla.getCkv(), mla.getKPe(), mla.getKvBProj(),
           mla.getGate(), Value()};
      m.rope = cast<RankedTensorType>(m.pe.getType()).getDimSize(2);
      scale = mla.getScale().convertToDouble();
    } else {
      auto dec = cast<MlaDecodeOp>(op);
      Value cache = dec.getCache();
      auto cacheType = cast<RankedTensorType>(cache.getType());
      int64_t latent =
          cast<RankedTensorType>(dec.getKvBProj().getType()).getDimSize(1);
      m = {dec.getQ(), Value(), Value(), dec.getKvBProj(), dec.getGate(),
           dec.getLengths()};
      m.rope = cacheType.getDimSize(2) - latent;
      m.cache = cache;
      m.latentWidth = latent;
      scale = dec.getScale().convertToDouble();
    }
    auto qType = cast<RankedTensorType>(m.q.getType());
    auto outType = cast<RankedTensorType>(op->getResult(0).getType());
    // One-token decode keeps the absorbed form (one KV head over the
    // latent cache reads the least); the kernel pays off for many queries.
    if (!qType.isDynamicDim(1) && qType.getDimSize(1) < minQueries)
      return success();
    kimi::gpu::MlaPrefillShape shape;
    shape.heads = qType.getDimSize(2);
    shape.rope = m.rope;
    shape.nope = qType.getDimSize(3) - m.rope;
    shape.dv = cast<RankedTensorType>(m.kvb.getType()).getDimSize(0) /
                   std::max<int64_t>(shape.heads, 1) -
               shape.nope;
    shape.hasGate = bool(m.gate);
    shape.hasLengths = bool(m.lengths);
    shape.scale = scale;
    std::string why;
    auto isF32 = [](Value v) {
      return !v || cast<RankedTensorType>(v.getType()).getElementType().isF32();
    };
    if (!isF32(m.q) || !isF32(m.pe ? m.pe : m.cache) ||
        !isF32(m.latent) || !isF32(m.gate) ||
        !outType.getElementType().isF32())
      why = "the kernel reads f32 queries, keys and gate and writes f32";
    else if (ShapedType::isDynamic(shape.heads) ||
             ShapedType::isDynamic(qType.getDimSize(3)) ||
             ShapedType::isDynamic(m.rope))
      why = "heads and head widths must be static";
    else
      (void)kimi::gpu::verifyMlaPrefillShape(shape, why);
    if (!why.empty()) {
      op->emitRemark() << "kept for kimi-lower-to-linalg (no GPU MLA kernel): "
                       << why;
      return success();
    }
    if (m.cache) {
      // The cache's latent columns (the expansion product's input) and its
      // k_pe columns.
      auto cacheType = cast<RankedTensorType>(m.cache.getType());
      auto columns = [&](int64_t offset, int64_t width) -> Value {
        SmallVector<OpFoldResult> offsets(3, b.getIndexAttr(0));
        offsets[2] = b.getIndexAttr(offset);
        SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, m.cache);
        sizes[2] = b.getIndexAttr(width);
        SmallVector<OpFoldResult> strides(3, b.getIndexAttr(1));
        SmallVector<int64_t> shape(cacheType.getShape());
        shape[2] = width;
        return tensor::ExtractSliceOp::create(
            b, loc, RankedTensorType::get(shape, cacheType.getElementType()),
            m.cache, offsets, sizes, strides);
      };
      m.latent = columns(0, m.latentWidth);
      m.pe = columns(m.latentWidth, m.rope);
    }

    // k_nope and v of every cached row and head: ckv W_kv_b^T, a plain
    // product (cuBLASLt after kimi-gpu-gemm-calls).
    const int64_t H = shape.heads, dn = shape.nope, dv = shape.dv;
    SmallVector<OpFoldResult> latentSizes =
        tensor::getMixedSizes(b, loc, m.latent);
    auto latentType = cast<RankedTensorType>(m.latent.getType());
    auto kvType = RankedTensorType::get(
        {latentType.getDimSize(0), latentType.getDimSize(1), H * (dn + dv)},
        b.getF32Type());
    Value kv = LinearOp::create(b, loc, kvType, m.latent, m.kvb, Value());

    // One kernel per specialisation (B, T and S are run-time arguments).
    std::string key = std::to_string(shape.heads) + "_" +
                      std::to_string(shape.nope) + "_" + std::to_string(shape.rope) +
                      "_" + std::to_string(shape.dv) + "_" +
                      std::to_string(shape.hasGate) + std::to_string(shape.hasLengths) +
                      "_" + std::to_string(shape.scale);
    std::string name = "mla_prefill_" + std::to_string(kernels.size());
    auto fn = kernels.get(key, [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
      return kimi::gpu::emitMlaPrefillKernel(mb, loc, m, name, shape);
    });

    SmallVector<OpFoldResult> qSizes = tensor::getMixedSizes(b, loc, m.q);
    Value B = getValueOrCreateConstantIndexOp(b, loc, qSizes[0]);
    Value T = getValueOrCreateConstantIndexOp(b, loc, qSizes[1]);
    Value S = getValueOrCreateConstantIndexOp(b, loc, latentSizes[1]);
    // The kernel takes memref<?x...>: one kernel for any B, T and S.
    auto dynamic = [&](Value buffer) {
      return kimi::gpu::asDynamicBuffer(b, loc, buffer);
    };
    auto input = [&](Value t) {
      return dynamic(kimi::gpu::flatInputBuffer(b, loc, t));
    };
    // The kernel reads f16 copies (16-byte loads; one rounding, done here
    // once rather than by every block that stages a tile).
    Type f16 = b.getF16Type();
    auto half = [&](Value t) {
      return kimi::gpu::convertElementType(b, loc, t, f16);
    };
    SmallVector<Value> args = {input(half(m.q)), input(half(kv)),
                               input(half(m.pe))};
    if (m.gate)
      args.push_back(input(m.gate));
    if (m.lengths)
      args.push_back(input(m.lengths));
    SmallVector<OpFoldResult> outSizes = qSizes;
    outSizes[3] = b.getIndexAttr(dv);
    Value out = kimi::gpu::allocFlatBuffer(b, loc, outSizes, b.getF32Type());
    args.append({dynamic(out), B, T, S});
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    Value gridX = arith::CeilDivUIOp::create(b, loc, T, c(kimi::gpu::kMlaBlockQueries));
    mlir::gpu::LaunchFuncOp::create(
        b, loc, fn, mlir::gpu::KernelDim3{gridX, c(H), B},
        mlir::gpu::KernelDim3{c(kimi::gpu::kMlaThreads), c(1), c(1)}, Value(),
        args);
    op->getResult(0).replaceAllUsesWith(
        kimi::gpu::tensorOfFlatBuffer(b, loc, out, outType, outSizes));
    op->erase();
    return success();
  }

};
} // namespace

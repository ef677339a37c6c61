//===- MlaToGpuKernels.cpp - MLA ops -> the flash and decode kernels -----===//
//
// kimi-gpu-mla-kernels: see lowering/Passes.td.
//
//===----------------------------------------------------------------------===//

#include "lowering/KimiToLinalg/LatentAttention.h"
#include "lowering/Passes.h"
#include "lowering/ToGPU/Rewrites/KdaBf16Io.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"
#include "lowering/ToGPU/Kernels/MlaDecodeKernel.h"
#include "lowering/ToGPU/Kernels/MlaPrefillKernel.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
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
    // Decode steps (few queries) keep the absorbed form, which reads the
    // latent cache once for all heads: as the split-key decode kernels, or
    // as linalg.
    if (!qType.isDynamicDim(1) && qType.getDimSize(1) < minQueries) {
      if (auto dec = dyn_cast<MlaDecodeOp>(op); dec && decodeKernels)
        return rewriteDecode(kernels, dec);
      return success();
    }
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
    // All f32, or all bf16 (bf16 activations): the kernel reads f16 copies
    // of the queries and keys either way, and the gate and the result at
    // their type.
    Type io = outType.getElementType();
    auto isIo = [&](Value v) {
      return !v || cast<RankedTensorType>(v.getType()).getElementType() == io;
    };
    shape.bf16Io = io.isBF16();
    if (!(io.isF32() || io.isBF16()) || !isIo(m.q) ||
        !isIo(m.pe ? m.pe : m.cache) || !isIo(m.latent) || !isIo(m.gate))
      why = "the kernel reads queries, keys and gate of its result's type, "
            "f32 or bf16";
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
                      "_" + std::to_string(shape.scale) +
                      (shape.bf16Io ? "_bf16" : "");
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
    Value out = kimi::gpu::allocFlatBuffer(b, loc, outSizes, io);
    args.append({dynamic(out), B, T, S});
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    Value gridX = arith::CeilDivUIOp::create(b, loc, T, c(kimi::gpu::kMlaBlockQueries));
    mlir::gpu::LaunchFuncOp::create(
        b, loc, fn, mlir::gpu::KernelDim3{gridX, c(H), B},
        mlir::gpu::KernelDim3{c(kimi::gpu::kMlaThreads), c(1), c(1)},
        arith::ConstantIntOp::create(b, loc, kimi::gpu::mlaPrefillSharedBytes(shape), 32),
        args);
    op->getResult(0).replaceAllUsesWith(
        kimi::gpu::tensorOfFlatBuffer(b, loc, out, outType, outSizes));
    op->erase();
    return success();
  }

  /// The cache rows, the step's new rows and the valid cache rows behind a
  /// decode op's `cache` operand: the model writes the new rows after the
  /// valid ones (`kimi.cache_insert`, lengths + T valid after it) or
  /// concatenates them (no lengths). Reading both where they are saves
  /// materialising the grown cache, a copy of all of it every step.
  struct DecodeKeys {
    Value cache, rows, cacheLengths;
  };
  static DecodeKeys decodeKeys(MlaDecodeOp op) {
    Value cache = op.getCache();
    if (auto insert = cache.getDefiningOp<CacheInsertOp>()) {
      auto rowsType = cast<RankedTensorType>(insert.getRows().getType());
      // lengths(insert) + T must be the op's lengths.
      auto add = op.getLengths() ? op.getLengths().getDefiningOp<arith::AddIOp>()
                                 : arith::AddIOp();
      DenseIntElementsAttr rowsAdded;
      if (add && !rowsType.isDynamicDim(1) &&
          add.getLhs() == insert.getLengths() &&
          matchPattern(add.getRhs(), m_Constant(&rowsAdded)) &&
          rowsAdded.isSplat() &&
          rowsAdded.getSplatValue<APInt>().getSExtValue() == rowsType.getDimSize(1))
        return {insert.getCache(), insert.getRows(), insert.getLengths()};
    }
    if (auto concat = cache.getDefiningOp<tensor::ConcatOp>();
        concat && !op.getLengths() && concat.getDim() == 1 &&
        concat.getInputs().size() == 2)
      return {concat.getInputs()[0], concat.getInputs()[1], Value()};
    return {cache, Value(), op.getLengths()};
  }

  LogicalResult rewriteDecode(kimi::gpu::GeneratedKernels &kernels,
                              MlaDecodeOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto qType = cast<RankedTensorType>(op.getQ().getType());
    auto outType = cast<RankedTensorType>(op.getOut().getType());
    auto cacheType = cast<RankedTensorType>(op.getCache().getType());
    kimi::gpu::MlaDecodeShape shape;
    shape.heads = qType.getDimSize(2);
    shape.latent = cast<RankedTensorType>(op.getKvBProj().getType()).getDimSize(1);
    shape.rope = cacheType.getDimSize(2) - shape.latent;
    shape.nope = qType.getDimSize(3) - shape.rope;
    shape.scale = op.getScale().convertToDouble();
    std::string why;
    auto isFloat = [](Value v) {
      Type t = v ? cast<RankedTensorType>(v.getType()).getElementType()
                 : Type();
      return !t || t.isF32() || t.isBF16();
    };
    auto isBf16 = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getElementType().isBF16();
    };
    // The weight is read by the absorption and expansion products (linalg,
    // then GEMV kernels or cuBLASLt), which take it at its stored type, and
    // so do they the gate and the result.
    if (!isFloat(op.getQ()) || !isFloat(op.getCache()) ||
        !isFloat(op.getGate()) || !isFloat(op.getKvBProj()) ||
        !isFloat(op.getOut()))
      why = "the decode kernels read f32 or bf16 queries, cache, gate and "
            "weight, and write f32 or bf16";
    else if (ShapedType::isDynamic(shape.heads) ||
             qType.isDynamicDim(3) || cacheType.isDynamicDim(2))
      why = "heads and head widths must be static";
    else
      (void)kimi::gpu::verifyMlaDecodeShape(shape, why);
    if (!why.empty()) {
      op->emitRemark() << "kept for kimi-lower-to-linalg (no GPU MLA decode "
                          "kernel): "
                       << why;
      return success();
    }
    DecodeKeys keys = decodeKeys(op);
    shape.hasRows = bool(keys.rows);
    shape.hasLengths = bool(keys.cacheLengths);
    shape.bf16Queries = isBf16(op.getQ());
    shape.bf16Cache = isBf16(keys.cache);
    if (keys.rows && isBf16(keys.rows) != shape.bf16Cache) {
      op->emitRemark() << "kept for kimi-lower-to-linalg (no GPU MLA decode "
                          "kernel): the new rows and the cache differ in type";
      return success();
    }

    // The queries in the latent space (linalg, like the CPU target).
    Value qa = kimi::lowering::absorbLatentQueries(b, loc, op.getQ(),
                                                   op.getKvBProj(), shape.rope);

    std::string key = std::to_string(shape.heads) + "_" +
                      std::to_string(shape.nope) + "_" +
                      std::to_string(shape.rope) + "_" +
                      std::to_string(shape.latent) + "_" +
                      std::to_string(shape.hasRows) +
                      std::to_string(shape.hasLengths) + "_" +
                      std::to_string(shape.scale) +
                      (shape.bf16Queries ? "_q16" : "") +
                      (shape.bf16Cache ? "_c16" : "");
    std::string n = std::to_string(kernels.size());
    auto split = kernels.get("decode_split_" + key,
                             [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
                               return kimi::gpu::emitMlaDecodeSplitKernel(
                                   mb, loc, m, "mla_decode_split_" + n, shape);
                             });
    // At most smCount / (B ceil(T H / 16)) splits (below): a batch whose
    // blocks fill the SMs with a few splits each takes the wide combine, a
    // thread a column (the narrow one's 16 groups of a block would mostly
    // idle, and its blocks be 16 times as many).
    int64_t fewestBlocks =
        qType.isDynamicDim(0) || qType.isDynamicDim(1)
            ? 1
            : qType.getDimSize(0) *
                  ((qType.getDimSize(1) * shape.heads + kimi::gpu::kMlaDecodeRows - 1) /
                   kimi::gpu::kMlaDecodeRows);
    const int64_t combineColumns =
        smCount / std::max<int64_t>(1, fewestBlocks) <= kimi::gpu::kMlaDecodeFewSplits
            ? kimi::gpu::kMlaDecodeCombineWideColumns
            : kimi::gpu::kMlaDecodeCombineColumns;
    auto combine = kernels.get(
        "decode_combine_" + std::to_string(shape.latent) + "_c" +
            std::to_string(combineColumns),
        [&](OpBuilder &mb, mlir::gpu::GPUModuleOp m) {
          return kimi::gpu::emitMlaDecodeCombineKernel(
              mb, loc, m, "mla_decode_combine_" + n, shape, combineColumns);
        });

    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    auto dimOf = [&](Value t, int64_t d) {
      return getValueOrCreateConstantIndexOp(
          b, loc, tensor::getMixedSizes(b, loc, t)[d]);
    };
    auto ceilDiv = [&](Value x, Value y) {
      return arith::CeilDivUIOp::create(b, loc, x, y).getResult();
    };
    Value B = dimOf(op.getQ(), 0), T = dimOf(op.getQ(), 1);
    Value S = dimOf(keys.cache, 1);
    Value Tr = keys.rows ? dimOf(keys.rows, 1) : Value();
    Value TH = arith::MulIOp::create(b, loc, T, c(shape.heads));
    Value rowTiles = ceilDiv(TH, c(kimi::gpu::kMlaDecodeRows));
    Value padded = arith::MulIOp::create(b, loc, rowTiles, c(kimi::gpu::kMlaDecodeRows));
    // Keys per split: enough splits that the blocks of all sequences and
    // row tiles fill the SMs once (a block per SM: the kernel's registers
    // allow no more), no more, since every split adds a partial mix to
    // write and combine; at least `decode-split-keys`, and at most 1,024
    // splits (the combine kernel's weights); multiples of the tile.
    Value maxKeys = Tr ? arith::AddIOp::create(b, loc, S, Tr).getResult() : S;
    Value tile = c(kimi::gpu::kMlaDecodeTileKeys);
    auto roundUp = [&](Value x) {
      return arith::MulIOp::create(b, loc, ceilDiv(x, tile), tile).getResult();
    };
    Value blocksPerSplit = arith::MulIOp::create(b, loc, B, rowTiles);
    Value wanted = arith::MaxUIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, c(smCount), blocksPerSplit), c(1));
    Value kps = roundUp(ceilDiv(maxKeys, wanted));
    kps = arith::MaxUIOp::create(
        b, loc, kps, roundUp(ceilDiv(maxKeys, c(kimi::gpu::kMlaDecodeMaxSplits))));
    kps = arith::MaxUIOp::create(b, loc, kps,
                                 c(std::max<int64_t>(
                                     kimi::gpu::kMlaDecodeTileKeys,
                                     (decodeSplitKeys + kimi::gpu::kMlaDecodeTileKeys - 1) /
                                         kimi::gpu::kMlaDecodeTileKeys *
                                         kimi::gpu::kMlaDecodeTileKeys)));
    Value splits = arith::MaxUIOp::create(b, loc, ceilDiv(maxKeys, kps), c(1));

    auto dynamic = [&](Value buffer) {
      return kimi::gpu::asDynamicBuffer(b, loc, buffer);
    };
    auto input = [&](Value t) {
      return dynamic(kimi::gpu::flatInputBuffer(b, loc, t));
    };
    Type f32 = b.getF32Type();
    SmallVector<OpFoldResult> partSizes = {B, splits, padded};
    Value partM = kimi::gpu::allocFlatBuffer(b, loc, partSizes, f32);
    Value partL = kimi::gpu::allocFlatBuffer(b, loc, partSizes, f32);
    partSizes.push_back(b.getIndexAttr(shape.latent));
    Value partAcc = kimi::gpu::allocFlatBuffer(b, loc, partSizes, f32);
    SmallVector<Value> args = {input(qa), input(op.getQ()), input(keys.cache)};
    if (keys.rows)
      args.push_back(input(keys.rows));
    if (keys.cacheLengths)
      args.push_back(input(keys.cacheLengths));
    args.append({dynamic(partAcc), dynamic(partM), dynamic(partL), T, S});
    if (Tr)
      args.push_back(Tr);
    args.append({kps, splits});
    mlir::gpu::LaunchFuncOp::create(
        b, loc, split,
        mlir::gpu::KernelDim3{splits, rowTiles, B},
        mlir::gpu::KernelDim3{c(kimi::gpu::kMlaDecodeThreads), c(1), c(1)}, Value(),
        args);

    SmallVector<OpFoldResult> mixedSizes = tensor::getMixedSizes(b, loc, op.getQ());
    mixedSizes[3] = b.getIndexAttr(shape.latent);
    Value mixed = kimi::gpu::allocFlatBuffer(b, loc, mixedSizes, f32);
    mlir::gpu::LaunchFuncOp::create(
        b, loc, combine,
        mlir::gpu::KernelDim3{
            c((shape.latent + combineColumns - 1) / combineColumns),
            TH, B},
        mlir::gpu::KernelDim3{c(kimi::gpu::kMlaDecodeThreads), c(1), c(1)}, Value(),
        ValueRange{dynamic(partAcc), dynamic(partM), dynamic(partL), dynamic(mixed),
                   TH, splits});
    auto mixedType = RankedTensorType::get(
        {qType.getDimSize(0), qType.getDimSize(1), shape.heads, shape.latent}, f32);
    Value mixedTensor =
        kimi::gpu::tensorOfFlatBuffer(b, loc, mixed, mixedType, mixedSizes);
    Value out = kimi::lowering::expandLatentOutput(
        b, loc, mixedTensor, /*rowSum=*/Value(), op.getKvBProj(), op.getGate(),
        shape.nope, outType);
    Operation *grown = op.getCache().getDefiningOp();
    op.getOut().replaceAllUsesWith(out);
    op.erase();
    // The grown cache, when nothing else reads it.
    if (grown && keys.rows && grown->use_empty())
      grown->erase();
    return success();
  }
};
} // namespace

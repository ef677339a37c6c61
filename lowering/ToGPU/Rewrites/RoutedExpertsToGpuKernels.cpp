//===- RoutedExpertsToGpuKernels.cpp - kimi.routed_experts -> two kernels -===//
//
// kimi-gpu-routed-experts-kernels: see lowering/Passes.td. The kernels are
// RoutedExpertsKernel.h's; this pass binds an op's buffers to them.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/KimiToLinalg/Mxfp4Decode.h"
#include "lowering/KimiToLinalg/Patterns.h"
#include "lowering/ToGPU/Kernels/ExpertProductKernel.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"
#include "lowering/ToGPU/Kernels/RoutedExpertsKernel.h"
#include "lowering/ToGPU/Kernels/SortedExpertTablesKernel.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
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

  /// Kernels of each kind made so far: their names' numbers.
  int productKernels = 0, tableKernels = 0;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    productKernels = tableKernels = 0;
    SmallVector<RoutedExpertsOp> ops;
    module.walk([&](RoutedExpertsOp op) { ops.push_back(op); });
    kimi::gpu::GeneratedKernels kernels(module, "kimi_routed_experts");
    for (RoutedExpertsOp op : ops) {
      int64_t tokens = lowering::sortedTokens(op);
      if (tokens > maxTokens && sortedTablesFit(op))
        rewriteSorted(kernels, op);
      else
        rewrite(kernels, op);
    }
    lowering::defineHostRead(module);
  }

  /// Whether the sorted products' kernel reads the op's tables: MXFP4, or
  /// bf16 (f32 tables keep the linalg form's cuBLASLt products).
  static bool sortedTablesFit(RoutedExpertsOp op) {
    return !op.getScales().empty() ||
           cast<RankedTensorType>(op.getGateProj().getType())
               .getElementType()
               .isBF16();
  }

  /// A prefill step's MXFP4 or bf16 experts: the token-sorted lowering with
  /// gate, up and their GLU as one tensor-core kernel and down as another.
  void rewriteSorted(kimi::gpu::GeneratedKernels &kernels, RoutedExpertsOp op) {
    Value tables[] = {op.getGateProj(), op.getUpProj(), op.getDownProj()};
    const bool mxfp4 = !op.getScales().empty();
    const bool bf16Tokens =
        cast<RankedTensorType>(op.getX().getType()).getElementType().isBF16();
    auto tableSpec = [&](unsigned which) {
      auto type = cast<RankedTensorType>(tables[which].getType());
      kimi::gpu::ExpertProductSpec s;
      s.experts = type.getDimSize(0);
      s.n = type.getDimSize(1);
      s.k = type.getDimSize(2);
      s.bf16Tables = !mxfp4;
      return s;
    };
    // Gate and up read the gathered tokens at their type; their GLU is
    // stored as bf16 when the down product rounds its rows to bf16 anyway
    // (bf16 products), else as f32 and split into three terms there.
    kimi::gpu::ExpertProductSpec gluSpec = tableSpec(0);
    gluSpec.bf16Rows = bf16Tokens;
    gluSpec.terms = bf16Products || bf16Tokens ? 1 : 3;
    gluSpec.glu = true;
    gluSpec.situ = op.getActivation() == GluActivation::situ;
    if (gluSpec.situ) {
      gluSpec.beta = op.getBetaAttr().getValueAsDouble();
      gluSpec.linearBeta = op.getLinearBetaAttr().getValueAsDouble();
    }
    gluSpec.bf16Out = bf16Products;
    gluSpec.gatherRows = true;
    kimi::gpu::ExpertProductSpec downSpec = tableSpec(2);
    downSpec.bf16Rows = gluSpec.bf16Out;
    downSpec.terms = bf16Products ? 1 : 3;
    // Tiles of 32 rows where the experts hold a few rows each.
    gluSpec.tileM = downSpec.tileM = kimi::gpu::chooseExpertProductTileM(
        lowering::sortedTokens(op) *
            cast<RankedTensorType>(op.getIndices().getType()).getDimSize(1),
        gluSpec.experts);
    for (const kimi::gpu::ExpertProductSpec *s : {&gluSpec, &downSpec}) {
      std::string why = kimi::gpu::verifyExpertProductSpec(*s);
      if (tableSpec(1).n != gluSpec.n || tableSpec(1).k != gluSpec.k)
        why = "gate and up tables differ in shape";
      if (!why.empty()) {
        op.emitRemark() << "kept for kimi-lower-to-linalg (no expert product "
                           "kernel): "
                        << why;
        return;
      }
    }
    // One launch of `s`'s kernel: rows [R, s.k] -> [R, s.n].
    auto launch = [&](OpBuilder &b, Location loc,
                      const kimi::gpu::ExpertProductSpec &s, Value rows,
                      ArrayRef<unsigned> which,
                      const lowering::SortedExpertTiles &tiles) -> Value {
      auto kernel = kernels.get(s.key(), [&](OpBuilder &mb,
                                             mlir::gpu::GPUModuleOp m) {
        return kimi::gpu::emitExpertProductKernel(
            mb, loc, m, "expert_product_" + std::to_string(productKernels++), s);
      });
      auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
      auto input = [&](Value tensor) {
        return kimi::gpu::asDynamicBuffer(
            b, loc, kimi::gpu::flatInputBuffer(b, loc, tensor));
      };
      SmallVector<Value> args = {input(rows)};
      if (s.gatherRows)
        args.push_back(input(tiles.token));
      for (unsigned w : which) {
        if (!mxfp4) {
          args.push_back(input(tables[w]));
          continue;
        }
        lowering::Mxfp4Table t =
            lowering::packedTable(b, loc, tables[w], op.getScales()[w]);
        args.append({input(t.packed), input(t.scales)});
      }
      Type outType = s.bf16Out ? b.getBF16Type() : b.getF32Type();
      int64_t R = tiles.rows;
      SmallVector<OpFoldResult> sizes = {b.getIndexAttr(R), b.getIndexAttr(s.n)};
      Value result = kimi::gpu::allocFlatBuffer(b, loc, sizes, outType);
      args.append({input(tiles.expert), input(tiles.start), input(tiles.end),
                   kimi::gpu::asDynamicBuffer(b, loc, result)});
      mlir::gpu::KernelDim3 grid{
          c((s.n + s.tileN() - 1) / s.tileN()),
          c(tiles.tiles), c(1)};
      const int64_t shared = kimi::gpu::expertProductSharedBytes(s);
      mlir::gpu::LaunchFuncOp::create(
          b, loc, kernel, grid,
          mlir::gpu::KernelDim3{c(kimi::gpu::kExpertProductThreads), c(1), c(1)},
          shared ? Value(arith::ConstantIntOp::create(b, loc, shared, 32))
                 : Value(),
          args);
      return kimi::gpu::tensorOfFlatBuffer(
          b, loc, result, RankedTensorType::get({R, s.n}, outType), sizes);
    };
    lowering::SortedExpertKernels products;
    products.tileRows = gluSpec.tileM;
    auto glu = [&](OpBuilder &b, Location loc, Value rows,
                   const lowering::SortedExpertTiles &tiles) -> Value {
      return launch(b, loc, gluSpec, rows, {0u, 1u}, tiles);
    };
    auto down = [&](OpBuilder &b, Location loc, Value h,
                    const lowering::SortedExpertTiles &tiles) -> Value {
      return launch(b, loc, downSpec, h, {2u}, tiles);
    };
    // The tables (rows, tokens, tiles) in one block when they fit it.
    auto buildTables = [&](OpBuilder &b, Location loc, Value ids, Value weights,
                      lowering::SortedExpertTiles &tiles) -> Value {
      auto idsType = cast<RankedTensorType>(ids.getType());
      Type weightType =
          cast<RankedTensorType>(weights.getType()).getElementType();
      kimi::gpu::SortedExpertTablesSpec t;
      t.slots = tiles.rows;
      t.topK = idsType.getDimSize(1);
      t.experts = gluSpec.experts;
      t.tileRows = gluSpec.tileM;
      t.tiles = tiles.tiles;
      t.bf16Weights = weightType.isBF16();
      if (!idsType.getElementType().isInteger(32) ||
          !(weightType.isF32() || weightType.isBF16()) ||
          !kimi::gpu::verifySortedExpertTablesSpec(t).empty())
        return Value();
      auto kernel = kernels.get("tables_" + t.key(), [&](OpBuilder &mb,
                                                         mlir::gpu::GPUModuleOp m) {
        return kimi::gpu::emitSortedExpertTablesKernel(
            mb, loc, m, "sorted_tables_" + std::to_string(tableKernels++), t);
      });
      auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
      Type i32 = b.getI32Type();
      auto alloc = [&](int64_t n) {
        return kimi::gpu::allocFlatBuffer(b, loc, {b.getIndexAttr(n)}, i32);
      };
      Value row = alloc(t.slots), token = alloc(t.slots), expert = alloc(t.tiles),
            start = alloc(t.tiles), end = alloc(t.tiles);
      mlir::gpu::LaunchFuncOp::create(
          b, loc, kernel, mlir::gpu::KernelDim3{c(1), c(1), c(1)},
          mlir::gpu::KernelDim3{c(kimi::gpu::kSortedExpertTablesThreads), c(1),
                                c(1)},
          arith::ConstantIntOp::create(
              b, loc, kimi::gpu::sortedExpertTablesSharedBytes(t), 32),
          ValueRange{kimi::gpu::flatInputBuffer(b, loc, ids),
                     kimi::gpu::flatInputBuffer(b, loc, weights), row, token,
                     expert, start, end});
      auto asTensor = [&](Value buffer, ArrayRef<int64_t> shape) {
        SmallVector<OpFoldResult> sizes;
        for (int64_t d : shape)
          sizes.push_back(b.getIndexAttr(d));
        return kimi::gpu::tensorOfFlatBuffer(
            b, loc, buffer, RankedTensorType::get(shape, i32), sizes);
      };
      tiles.token = asTensor(token, {t.slots});
      tiles.expert = asTensor(expert, {t.tiles});
      tiles.start = asTensor(start, {t.tiles});
      tiles.end = asTensor(end, {t.tiles});
      return asTensor(row, idsType.getShape());
    };
    products.glu = glu;
    products.down = down;
    products.tables = buildTables;
    OpBuilder b(op);
    Value replacement = lowering::lowerSortedRoutedExperts(b, op, &products);
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

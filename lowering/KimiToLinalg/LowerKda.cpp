//===- LowerKda.cpp - kimi-lower-kda: chunked kimi.kda to linalg ----------===//
//
// Rewrites a `kimi.kda` carrying `#kimi.decay<chunk = C, diag = ...>` into
// loops over batch, head and chunks whose bodies are the chunk IR built by
// KdaChunkEmitter. Shapes must be static; T need not be a multiple of C (the
// partial last chunk is emitted after the chunk loop with its own static
// shape). See docs/lowering/kda-to-linalg.md.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "lowering/KimiToLinalg/KdaChunkEmitter.h"
#include "lowering/KimiToLinalg/LinalgBuilders.h"
#include "lowering/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kimi {
#define GEN_PASS_DEF_KIMILOWERKDA
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace kimi {
namespace {

bool allStatic(KdaOp op) {
  auto isStatic = [](Type t) {
    return cast<RankedTensorType>(t).hasStaticShape();
  };
  return llvm::all_of(op->getOperandTypes(), isStatic) &&
         llvm::all_of(op->getResultTypes(), isStatic);
}

/// Extracts src[b, t0 : t0+n, h, :] (rank 4) or src[b, t0 : t0+n, h]
/// (rank 3) as an f32 tensor [n, d] or [n].
Value loadTokens(OpBuilder &b, Location loc, Value src, Value bi, Value t0,
                 Value hi, int64_t n) {
  auto type = cast<RankedTensorType>(src.getType());
  Type elt = type.getElementType();
  SmallVector<OpFoldResult> offs = {bi, t0, hi};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(1), b.getIndexAttr(n),
                                     b.getIndexAttr(1)};
  SmallVector<int64_t> shape = {n};
  if (type.getRank() == 4) {
    int64_t d = type.getDimSize(3);
    offs.push_back(b.getIndexAttr(0));
    sizes.push_back(b.getIndexAttr(d));
    shape.push_back(d);
  }
  SmallVector<OpFoldResult> strides(type.getRank(), b.getIndexAttr(1));
  Value slice = tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get(shape, elt), src, offs, sizes, strides);
  Type f32 = b.getF32Type();
  if (elt == f32)
    return slice;
  Value init = tensor::EmptyOp::create(b, loc, shape, f32);
  SmallVector<AffineMap> maps(2, b.getMultiDimIdentityMap(shape.size()));
  SmallVector<utils::IteratorType> iters(shape.size(),
                                         utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, loc, TypeRange{init.getType()}, ValueRange{slice},
             ValueRange{init}, maps, iters,
             [&](OpBuilder &nb, Location nl, ValueRange a) {
               linalg::YieldOp::create(
                   nb, nl, Value(arith::ExtFOp::create(nb, nl, f32, a[0])));
             })
      .getResult(0);
}

struct LowerChunkedKda : OpRewritePattern<KdaOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(KdaOp op,
                                PatternRewriter &rewriter) const override {
    DecayAttr decay = op.getDecayAttr();
    if (!decay)
      return rewriter.notifyMatchFailure(op, "not chunked (no decay attr)");
    if (!allStatic(op))
      return rewriter.notifyMatchFailure(op, "dynamic shapes");

    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    auto qType = cast<RankedTensorType>(op.getQ().getType());
    auto outType = cast<RankedTensorType>(op.getOut().getType());
    auto stType = cast<RankedTensorType>(op.getFinalState().getType());
    int64_t batch = qType.getDimSize(0), tokens = qType.getDimSize(1),
            heads = qType.getDimSize(2), dk = qType.getDimSize(3),
            dv = outType.getDimSize(3);
    int64_t chunk = decay.getChunk();
    int64_t fullChunks = tokens / chunk, tail = tokens % chunk;
    DiagStrategy diag = decay.getDiag();
    double scale = op.getScale().convertToDouble();
    Type f32 = b.getF32Type();

    auto idx = [&](int64_t v) -> Value {
      return arith::ConstantIndexOp::create(b, loc, v);
    };
    Value zeroIdx = idx(0), oneIdx = idx(1);
    Value outInit = tensor::EmptyOp::create(b, loc, outType.getShape(),
                                            outType.getElementType());
    Value stInit = tensor::EmptyOp::create(b, loc, stType.getShape(), f32);
    // The state is computed in f32; a bf16/f16 state is widened on entry
    // and rounded once on exit.
    auto passThrough = [](OpBuilder &, Location, ValueRange a) { return a[0]; };
    Value initialState = op.getInitialState();
    if (initialState && !lowering::typeOf(initialState).getElementType().isF32())
      initialState = lowering::elementwise(
          b, loc, RankedTensorType::get(stType.getShape(), f32), {initialState},
          passThrough);

    // One chunk of n tokens starting at t0: loads, emits, stores the output.
    auto chunkStep = [&](OpBuilder &nb, Location nl, Value bi, Value hi,
                         Value t0, int64_t n, Value out,
                         Value state) -> std::pair<Value, Value> {
      KdaChunkInputs in;
      in.q = loadTokens(nb, nl, op.getQ(), bi, t0, hi, n);
      in.k = loadTokens(nb, nl, op.getK(), bi, t0, hi, n);
      in.v = loadTokens(nb, nl, op.getV(), bi, t0, hi, n);
      in.g = loadTokens(nb, nl, op.getG(), bi, t0, hi, n);
      in.beta = loadTokens(nb, nl, op.getBeta(), bi, t0, hi, n);
      in.state = state;
      KdaChunkResults r =
          emitKdaChunk(nb, nl, in, diag, scale, outType.getElementType());
      SmallVector<OpFoldResult> offs = {bi, t0, hi, nb.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes = {nb.getIndexAttr(1), nb.getIndexAttr(n),
                                         nb.getIndexAttr(1),
                                         nb.getIndexAttr(dv)};
      SmallVector<OpFoldResult> strides(4, nb.getIndexAttr(1));
      Value newOut = tensor::InsertSliceOp::create(nb, nl, r.out, out, offs,
                                                   sizes, strides);
      return {newOut, r.state};
    };

    // Per (batch, head): the chunk loop, then the partial last chunk.
    auto headBody = [&](OpBuilder &nb, Location nl, Value bi, Value hi,
                        Value out,
                        Value finalStates) -> std::pair<Value, Value> {
      SmallVector<OpFoldResult> stOffs = {bi, hi, nb.getIndexAttr(0),
                                          nb.getIndexAttr(0)};
      SmallVector<OpFoldResult> stSizes = {
          nb.getIndexAttr(1), nb.getIndexAttr(1), nb.getIndexAttr(dk),
          nb.getIndexAttr(dv)};
      SmallVector<OpFoldResult> strides(4, nb.getIndexAttr(1));
      auto stTile = RankedTensorType::get({dk, dv}, f32);
      Value state;
      if (initialState) {
        state = tensor::ExtractSliceOp::create(nb, nl, stTile, initialState,
                                               stOffs, stSizes, strides);
      } else {
        Value zero = arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(0));
        Value init = tensor::EmptyOp::create(nb, nl, stTile.getShape(), f32);
        state =
            linalg::FillOp::create(nb, nl, ValueRange{zero}, ValueRange{init})
                .getResult(0);
      }
      if (fullChunks > 0) {
        Value step = arith::ConstantIndexOp::create(nb, nl, chunk);
        Value end = arith::ConstantIndexOp::create(nb, nl, fullChunks * chunk);
        auto loop = scf::ForOp::create(
            nb, nl, zeroIdx, end, step, ValueRange{out, state},
            [&](OpBuilder &lb, Location ll, Value t0, ValueRange iter) {
              auto [o, s] =
                  chunkStep(lb, ll, bi, hi, t0, chunk, iter[0], iter[1]);
              scf::YieldOp::create(lb, ll, ValueRange{o, s});
            });
        out = loop.getResult(0);
        state = loop.getResult(1);
      }
      if (tail > 0) {
        Value t0 = arith::ConstantIndexOp::create(nb, nl, fullChunks * chunk);
        std::tie(out, state) = chunkStep(nb, nl, bi, hi, t0, tail, out, state);
      }
      Value fs = tensor::InsertSliceOp::create(nb, nl, state, finalStates,
                                               stOffs, stSizes, strides);
      return {out, fs};
    };

    auto batchLoop = scf::ForOp::create(
        b, loc, zeroIdx, idx(batch), oneIdx, ValueRange{outInit, stInit},
        [&](OpBuilder &bb, Location bl, Value bi, ValueRange bIter) {
          auto headLoop = scf::ForOp::create(
              bb, bl, zeroIdx, arith::ConstantIndexOp::create(bb, bl, heads),
              oneIdx, ValueRange{bIter[0], bIter[1]},
              [&](OpBuilder &hb, Location hl, Value hi, ValueRange hIter) {
                auto [o, s] = headBody(hb, hl, bi, hi, hIter[0], hIter[1]);
                scf::YieldOp::create(hb, hl, ValueRange{o, s});
              });
          scf::YieldOp::create(bb, bl, headLoop.getResults());
        });
    Value finalState = batchLoop.getResult(1);
    if (!stType.getElementType().isF32())
      finalState = lowering::elementwise(b, loc, stType, {finalState}, passThrough);
    rewriter.replaceOp(op, ValueRange{batchLoop.getResult(0), finalState});
    return success();
  }
};

struct KimiLowerKdaPass : impl::KimiLowerKdaBase<KimiLowerKdaPass> {
  void runOnOperation() override {
    // Chunked ops with dynamic shapes are an error, not a silent no-op.
    WalkResult walk = getOperation()->walk([](KdaOp op) {
      if (op.getDecayAttr() && !allStatic(op)) {
        op.emitOpError("kimi-lower-kda needs static shapes");
        return WalkResult::interrupt();
      }
      if (op.getCuSeqlens()) {
        op.emitOpError("with 'cu_seqlens' (variable-length sequences) has no "
                       "CPU lowering; compile it for the GPU target "
                       "(--target sm_90a)");
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    RewritePatternSet patterns(&getContext());
    patterns.add<LowerChunkedKda>(&getContext());
    GreedyRewriteConfig config;
    config.setStrictness(GreedyRewriteStrictness::ExistingOps);
    if (failed(
            applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
  }
};

} // namespace
} // namespace kimi

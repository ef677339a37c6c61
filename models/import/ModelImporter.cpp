//===- ModelImporter.cpp - config -> kimi IR ------------------------------===//
//
// The model is emitted as one private function per decoder layer (one region
// per layer, readable and cheap to print) and two public entry points:
//
//   @prefill(tokens: [1, T])          -> (logits [1, T, V], state...)
//   @decode(tokens: [B, 1], state...) -> (logits [B, 1, V], state...)
//
// (with ImportOptions::prefillChunk = N, @prefill is instead a stateful step
// over [1, N] tokens with the signature of @decode).
//
// "state" is, per KDA layer, the recurrent state [B, H, dk, dv] (f32) and the
// three short-conv states [B, K-1, H*dk] (f32); per MLA layer, prefill returns
// the latent cache rows [B, T, R+dr] and decode takes the past cache
// [B, S, R+dr] and returns the new row [B, 1, R+dr] (the runtime appends it).
// Every state argument and result is named by a `kimi.state` attribute.
// With ImportOptions::cacheLengths, stateful entries (and their MLA layer
// functions) take a last argument `cache_length : [B]` (i32, marked
// `kimi.cache_length`): the valid rows of each cache, which may be padded.
//
// Layer structure follows shared/reference/kimi-k3.md §4 (AttnRes) or the
// ordinary pre-norm residual when the config has no AttnRes.
//
//===----------------------------------------------------------------------===//

#include "models/import/ModelImporter.h"
#include "dialects/Kimi/KimiOps.h"
#include "models/import/WeightNames.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include <cmath>

using namespace mlir;
using namespace kimi;
using R = kimi::WeightRole;

void kimi::registerImportDialects(DialectRegistry &registry) {
  registry.insert<KimiDialect, func::FuncDialect, arith::ArithDialect,
                  math::MathDialect, tensor::TensorDialect>();
}

namespace {

/// What one entry point computes: `stateful` entries take the state of the
/// previous tokens as arguments (decode, and chunked prefill); the others
/// start from zero state (whole-sequence prefill).
struct EntrySpec {
  std::string name;
  int64_t batch;
  int64_t tokens; // ShapedType::kDynamic for any length
  bool stateful;
  /// Logits of each sequence's last token only ([B, 1, V]): the final
  /// norm and the LM head run on one row (ImportOptions::lastLogitsOnly).
  bool lastLogits = false;
};

/// One state tensor a layer function takes (decode) or returns.
struct StateSlot {
  std::string name;
  RankedTensorType inType;  // decode argument type
  RankedTensorType outType; // prefill/decode result type
};

class ModelBuilder {
public:
  ModelBuilder(const ModelConfig &cfg, const ImportOptions &opts,
               MLIRContext &ctx)
      : cfg(cfg), opts(opts), ctx(ctx), b(&ctx), loc(UnknownLoc::get(&ctx)) {}

  llvm::Expected<OwningOpRef<ModuleOp>> build();

private:
  // Types.
  Type numeric(NumericType t) {
    return t == NumericType::F32 ? Type(b.getF32Type())
                                 : Type(b.getBF16Type());
  }
  Type act() { return numeric(opts.activations); }
  Type wt() { return numeric(opts.weights); }
  /// The KDA conv taps and o_norm at the release's type (f32 in K3).
  Type kdaConvONormType() {
    return cfg.storesKdaConvAndONormF32() ? Type(b.getF32Type()) : wt();
  }
  RankedTensorType tt(ArrayRef<int64_t> shape, Type et) {
    return RankedTensorType::get(shape, et);
  }
  static SmallVector<int64_t> shapeOf(Value v) {
    return SmallVector<int64_t>(cast<RankedTensorType>(v.getType()).getShape());
  }
  /// `v`'s shape with the last dimension replaced by `last`.
  RankedTensorType withLast(Value v, int64_t last, Type et) {
    SmallVector<int64_t> shape = shapeOf(v);
    shape.back() = last;
    return tt(shape, et);
  }

  // Weights.
  Value weight(R role, int64_t layer, ArrayRef<int64_t> shape, Type et);

  // Building blocks.
  Value linear(Value x, R role, int64_t layer, int64_t out, Type et = {});
  Value rmsNorm(Value x, R role, int64_t layer, double eps);
  Value splitHeads(Value x, int64_t heads, int64_t headDim);
  Value mergeHeads(Value x);
  Value slice(Value x, int64_t offset, int64_t size);
  Value glu(Value gate, Value up);
  Value mlp(Value x, R gateRole, R upRole, R downRole, int64_t layer,
            int64_t width);

  // Layers.
  Value kdaAttention(Value x, int64_t layer, const EntrySpec &mode, ValueRange stateIn,
                     SmallVectorImpl<Value> &stateOut);
  Value mlaAttention(Value x, int64_t layer, const EntrySpec &mode, ValueRange stateIn,
                     SmallVectorImpl<Value> &stateOut);
  Value moe(Value x, int64_t layer);
  std::vector<StateSlot> stateSlots(int64_t layer, const EntrySpec &mode);
  /// The MLA layers of stateful entries, with ImportOptions::cacheLengths.
  bool takesCacheLength(int64_t layer, const EntrySpec &mode) const {
    return opts.cacheLengths && mode.stateful &&
           cfg.layers[layer] == AttentionKind::Mla;
  }
  /// The current layer function's `cache_length` argument (or null).
  Value cacheLength;
  func::FuncOp layerFunction(int64_t layer, const EntrySpec &mode, int64_t numSources);
  void entryFunction(const EntrySpec &mode);

  llvm::Error checkOptions();

  const ModelConfig &cfg;
  const ImportOptions &opts;
  MLIRContext &ctx;
  OpBuilder b;
  Location loc;
  ModuleOp module;
  llvm::StringMap<RankedTensorType> declared;
  // Batch and token count of the function being built.
  int64_t batch = 1;
};

//===----------------------------------------------------------------------===//
// Weights and building blocks
//===----------------------------------------------------------------------===//

Value ModelBuilder::weight(R role, int64_t layer, ArrayRef<int64_t> shape,
                           Type et) {
  std::string name = weightName(role, layer);
  RankedTensorType type = tt(shape, et);
  if (!declared.count(name)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(module.getBody(), module.getBody()->end());
    // Keep declarations ahead of the functions.
    Operation *firstFunc = nullptr;
    for (Operation &op : *module.getBody())
      if (isa<func::FuncOp>(op)) {
        firstFunc = &op;
        break;
      }
    if (firstFunc)
      b.setInsertionPoint(firstFunc);
    WeightOp::create(b, loc, name, type);
    declared[name] = type;
  }
  return WeightRefOp::create(b, loc, type, name);
}

Value ModelBuilder::linear(Value x, R role, int64_t layer, int64_t out,
                           Type et) {
  int64_t in = shapeOf(x).back();
  Value w = weight(role, layer, {out, in}, wt());
  return LinearOp::create(b, loc, withLast(x, out, et ? et : act()), x, w,
                          Value());
}

Value ModelBuilder::rmsNorm(Value x, R role, int64_t layer, double eps) {
  Value w = weight(role, layer, {shapeOf(x).back()}, wt());
  return RmsNormOp::create(b, loc, x.getType(), x, w, b.getF64FloatAttr(eps));
}

/// [B, T, H*Dh] -> [B, T, H, Dh]; T may be dynamic.
Value ModelBuilder::splitHeads(Value x, int64_t heads, int64_t headDim) {
  SmallVector<int64_t> shape = shapeOf(x);
  auto type = tt({shape[0], shape[1], heads, headDim},
                 cast<RankedTensorType>(x.getType()).getElementType());
  SmallVector<OpFoldResult> outShape = {b.getIndexAttr(shape[0])};
  if (ShapedType::isDynamic(shape[1]))
    outShape.push_back(tensor::DimOp::create(b, loc, x, 1).getResult());
  else
    outShape.push_back(b.getIndexAttr(shape[1]));
  outShape.push_back(b.getIndexAttr(heads));
  outShape.push_back(b.getIndexAttr(headDim));
  SmallVector<ReassociationIndices> reassociation = {{0}, {1}, {2, 3}};
  return tensor::ExpandShapeOp::create(b, loc, type, x, reassociation,
                                       outShape);
}

Value ModelBuilder::mergeHeads(Value x) {
  SmallVector<int64_t> shape = shapeOf(x);
  auto type = tt({shape[0], shape[1], shape[2] * shape[3]},
                 cast<RankedTensorType>(x.getType()).getElementType());
  SmallVector<ReassociationIndices> reassociation = {{0}, {1}, {2, 3}};
  return tensor::CollapseShapeOp::create(b, loc, type, x, reassociation);
}

/// Columns [offset, offset + size) of the last dimension of [B, T, N].
Value ModelBuilder::slice(Value x, int64_t offset, int64_t size) {
  SmallVector<int64_t> shape = shapeOf(x);
  RankedTensorType type = withLast(
      x, size, cast<RankedTensorType>(x.getType()).getElementType());
  SmallVector<OpFoldResult> offsets = {b.getIndexAttr(0), b.getIndexAttr(0),
                                       b.getIndexAttr(offset)};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(shape[0])};
  if (ShapedType::isDynamic(shape[1]))
    sizes.push_back(tensor::DimOp::create(b, loc, x, 1).getResult());
  else
    sizes.push_back(b.getIndexAttr(shape[1]));
  sizes.push_back(b.getIndexAttr(size));
  SmallVector<OpFoldResult> strides(3, b.getIndexAttr(1));
  return tensor::ExtractSliceOp::create(b, loc, type, x, offsets, sizes,
                                        strides);
}

/// The model's gated activation: SiTU, or SiLU(gate) * up.
Value ModelBuilder::glu(Value gate, Value up) {
  if (cfg.activation == MlpActivation::Situ)
    return SituGluOp::create(b, loc, gate.getType(), gate, up,
                             b.getF64FloatAttr(cfg.situBeta),
                             b.getF64FloatAttr(cfg.situLinearBeta));
  Value sig = SigmoidOp::create(b, loc, gate.getType(), gate);
  Value silu = arith::MulFOp::create(b, loc, gate, sig);
  return arith::MulFOp::create(b, loc, silu, up);
}

Value ModelBuilder::mlp(Value x, R gateRole, R upRole, R downRole,
                        int64_t layer, int64_t width) {
  Value g = linear(x, gateRole, layer, width);
  Value u = linear(x, upRole, layer, width);
  return linear(glu(g, u), downRole, layer, cfg.hidden);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

Value ModelBuilder::kdaAttention(Value x, int64_t layer, const EntrySpec &mode,
                                 ValueRange stateIn,
                                 SmallVectorImpl<Value> &stateOut) {
  const KdaConfig &k = cfg.kda;
  int64_t width = k.numHeads * k.headDim, taps = k.convKernel;
  Type f32 = b.getF32Type();

  // q, k, v: projection, causal short conv + SiLU, heads.
  R projRoles[] = {R::KdaQ, R::KdaK, R::KdaV};
  R convRoles[] = {R::KdaQConv, R::KdaKConv, R::KdaVConv};
  SmallVector<Value> qkv, convStates;
  for (int i = 0; i < 3; ++i) {
    Value p = linear(x, projRoles[i], layer, width);
    Value w = weight(convRoles[i], layer, {width, 1, taps}, kdaConvONormType());
    Value state = mode.stateful ? stateIn[1 + i] : Value();
    auto conv = ShortConvOp::create(
        b, loc, p.getType(), tt({batch, taps - 1, width}, f32), p, w, state,
        b.getUnitAttr());
    convStates.push_back(conv.getFinalState());
    qkv.push_back(splitHeads(conv.getOut(), k.numHeads, k.headDim));
  }
  auto eps6 = b.getF64FloatAttr(1e-6);
  Value q = L2NormOp::create(b, loc, qkv[0].getType(), qkv[0], eps6);
  Value kk = L2NormOp::create(b, loc, qkv[1].getType(), qkv[1], eps6);
  Value v = qkv[2];

  // Forget gate from the low-rank input.
  Value z0 = linear(x, R::KdaFA, layer, k.headDim);
  Value z = splitHeads(linear(z0, R::KdaFB, layer, width), k.numHeads,
                       k.headDim);
  Value aLog = weight(R::KdaALog, layer, {k.numHeads}, f32);
  Value dtFlat = weight(R::KdaDtBias, layer, {width}, f32);
  SmallVector<ReassociationIndices> split = {{0, 1}};
  Value dt = tensor::ExpandShapeOp::create(
      b, loc, tt({k.numHeads, k.headDim}, f32), dtFlat, split);
  auto gType = cast<RankedTensorType>(z.getType()).clone(f32);
  Value g;
  if (k.gateLowerBound)
    g = KdaGateOp::create(b, loc, gType, GateForm::lower_bound,
                          b.getF64FloatAttr(*k.gateLowerBound), z, aLog, dt);
  else
    g = KdaGateOp::create(b, loc, gType, GateForm::softplus, FloatAttr(), z,
                          aLog, dt);

  Value betaLogits = linear(x, R::KdaB, layer, k.numHeads, f32);
  Value beta = SigmoidOp::create(b, loc, betaLogits.getType(), betaLogits);

  auto stateType = tt({batch, k.numHeads, k.headDim, k.headDim}, f32);
  Value initial = mode.stateful ? stateIn[0] : Value();
  auto kda = KdaOp::create(b, loc, v.getType(), stateType, q, kk, v, g, beta,
                           initial, /*cu_seqlens=*/Value(),
                           b.getF64FloatAttr(1.0 / std::sqrt(
                                                          double(k.headDim))),
                           DecayAttr());
  stateOut.push_back(kda.getFinalState());
  stateOut.append(convStates.begin(), convStates.end());

  // Output gate (full rank in K3, low rank in Kimi Linear), norm, o_proj.
  Value gate = k.fullRankGate
                   ? linear(x, R::KdaG, layer, width)
                   : linear(linear(x, R::KdaGA, layer, k.headDim), R::KdaGB,
                            layer, width);
  gate = splitHeads(gate, k.numHeads, k.headDim);
  Value oNorm = weight(R::KdaONorm, layer, {k.headDim}, kdaConvONormType());
  Value y = GatedRmsNormOp::create(b, loc, kda.getOut().getType(),
                                   kda.getOut(), gate, oNorm,
                                   b.getF64FloatAttr(cfg.rmsNormEps));
  return linear(mergeHeads(y), R::KdaO, layer, cfg.hidden);
}

Value ModelBuilder::mlaAttention(Value x, int64_t layer, const EntrySpec &mode,
                                 ValueRange stateIn,
                                 SmallVectorImpl<Value> &stateOut) {
  const MlaConfig &m = cfg.mla;
  int64_t qDim = m.nopeDim + m.ropeDim, row = m.kvLoraRank + m.ropeDim;

  Value qFlat;
  if (m.qLoraRank) {
    Value qa = linear(x, R::MlaQA, layer, m.qLoraRank);
    qFlat = linear(rmsNorm(qa, R::MlaQANorm, layer, 1e-6), R::MlaQB, layer,
                   m.numHeads * qDim);
  } else {
    qFlat = linear(x, R::MlaQ, layer, m.numHeads * qDim);
  }
  Value q = splitHeads(qFlat, m.numHeads, qDim);

  // The cached row [RMSNorm(ckv) | k_pe] of each token.
  Value kva = linear(x, R::MlaKvA, layer, row);
  Value ckv = rmsNorm(slice(kva, 0, m.kvLoraRank), R::MlaKvANorm, layer, 1e-6);
  Value kpe = slice(kva, m.kvLoraRank, m.ropeDim);
  Value cacheRow = tensor::ConcatOp::create(b, loc, 2, ValueRange{ckv, kpe});
  stateOut.push_back(cacheRow);

  Value kvb = weight(R::MlaKvB, layer, {m.numHeads * (m.nopeDim + m.vDim),
                                        m.kvLoraRank},
                     wt());
  Value gate;
  if (m.outputGate)
    gate = splitHeads(linear(x, R::MlaG, layer, m.numHeads * m.vDim),
                      m.numHeads, m.vDim);
  SmallVector<int64_t> oShape = shapeOf(q);
  oShape.back() = m.vDim;
  auto oType = tt(oShape, act());
  auto scale = b.getF64FloatAttr(1.0 / std::sqrt(double(qDim)));
  Value o;
  if (!mode.stateful) {
    o = MlaOp::create(b, loc, oType, q, ckv, kpe, kvb, gate, scale);
  } else if (!cacheLength) {
    Value cache =
        tensor::ConcatOp::create(b, loc, 1, ValueRange{stateIn[0], cacheRow});
    o = MlaDecodeOp::create(b, loc, oType, q, cache, kvb, gate, Value(), scale);
  } else {
    // A padded cache: the rows go in after the valid ones, on the device.
    SmallVector<int64_t> shape = shapeOf(stateIn[0]);
    int64_t rows = shapeOf(cacheRow)[1];
    if (!ShapedType::isDynamic(shape[1]) && !ShapedType::isDynamic(rows))
      shape[1] += rows;
    else
      shape[1] = ShapedType::kDynamic;
    Value cache = CacheInsertOp::create(b, loc, tt(shape, act()), stateIn[0],
                                        cacheRow, cacheLength);
    Value t = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(tt({batch}, b.getI32Type()),
                                       b.getI32IntegerAttr(int32_t(rows))));
    Value valid = arith::AddIOp::create(b, loc, cacheLength, t);
    o = MlaDecodeOp::create(b, loc, oType, q, cache, kvb, gate, valid, scale);
  }
  return linear(mergeHeads(o), R::MlaO, layer, cfg.hidden);
}

//===----------------------------------------------------------------------===//
// MoE
//===----------------------------------------------------------------------===//

Value ModelBuilder::moe(Value x, int64_t layer) {
  const MoeConfig &m = cfg.moe;
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  int64_t width = cfg.expertWidth();

  Value router = weight(R::Router, layer, {m.numExperts, cfg.hidden}, wt());
  Value bias = weight(R::RouterBias, layer, {m.numExperts}, f32);
  auto route = RouterOp::create(
      b, loc, withLast(x, m.topK, f32), withLast(x, m.topK, i32), Type(), x,
      router, bias, b.getI64IntegerAttr(m.topK), b.getF64FloatAttr(m.scaling),
      m.renormalize ? b.getUnitAttr() : UnitAttr());

  Type expertType = opts.mxfp4Experts ? Type(b.getType<Float4E2M1FNType>())
                                      : wt();
  Value gate = weight(R::ExpertGate, layer, {m.numExperts, m.intermediate,
                                             width},
                      expertType);
  Value up = weight(R::ExpertUp, layer, {m.numExperts, m.intermediate, width},
                    expertType);
  Value down = weight(R::ExpertDown, layer,
                      {m.numExperts, width, m.intermediate}, expertType);
  SmallVector<Value> scales;
  if (opts.mxfp4Experts) {
    Type e8 = b.getType<Float8E8M0FNUType>();
    scales.push_back(weight(R::ExpertGateScale, layer,
                            {m.numExperts, m.intermediate, width / 32}, e8));
    scales.push_back(weight(R::ExpertUpScale, layer,
                            {m.numExperts, m.intermediate, width / 32}, e8));
    scales.push_back(weight(R::ExpertDownScale, layer,
                            {m.numExperts, width, m.intermediate / 32}, e8));
  }
  GluActivation activationKind = cfg.activation == MlpActivation::Situ
                                 ? GluActivation::situ
                                 : GluActivation::silu;
  auto activation = GluActivationAttr::get(&ctx, activationKind);
  FloatAttr beta, linearBeta;
  if (activationKind == GluActivation::situ) {
    beta = b.getF64FloatAttr(cfg.situBeta);
    linearBeta = b.getF64FloatAttr(cfg.situLinearBeta);
  }

  Value routed;
  if (m.latent) {
    Value downLatent = weight(R::LatentDown, layer, {width, cfg.hidden}, wt());
    Value norm =
        m.latentNorm ? weight(R::LatentNorm, layer, {width}, wt()) : Value();
    Value upLatent = weight(R::LatentUp, layer, {cfg.hidden, width}, wt());
    routed = LatentMoeOp::create(
        b, loc, x.getType(), x, route.getWeights(), route.getIndices(),
        downLatent, gate, up, down, scales, norm, upLatent, activation, beta,
        linearBeta, b.getF64FloatAttr(cfg.rmsNormEps));
  } else {
    routed = RoutedExpertsOp::create(b, loc, x.getType(), x,
                                     route.getWeights(), route.getIndices(),
                                     gate, up, down, scales, activation, beta,
                                     linearBeta);
  }
  if (!m.numShared)
    return routed;
  Value shared = mlp(x, R::SharedGate, R::SharedUp, R::SharedDown, layer,
                     m.numShared * m.intermediate);
  return arith::AddFOp::create(b, loc, routed, shared);
}

//===----------------------------------------------------------------------===//
// Layers and entry points
//===----------------------------------------------------------------------===//

std::vector<StateSlot> ModelBuilder::stateSlots(int64_t layer, const EntrySpec &mode) {
  Type f32 = b.getF32Type();
  std::string prefix = "layers." + std::to_string(layer) + ".";
  std::vector<StateSlot> slots;
  int64_t tokens = mode.tokens;
  if (cfg.layers[layer] == AttentionKind::Kda) {
    const KdaConfig &k = cfg.kda;
    auto state = tt({batch, k.numHeads, k.headDim, k.headDim}, f32);
    auto conv = tt({batch, k.convKernel - 1, k.numHeads * k.headDim}, f32);
    slots.push_back({prefix + "kda_state", state, state});
    slots.push_back({prefix + "q_conv_state", conv, conv});
    slots.push_back({prefix + "k_conv_state", conv, conv});
    slots.push_back({prefix + "v_conv_state", conv, conv});
  } else {
    int64_t row = cfg.mla.kvLoraRank + cfg.mla.ropeDim;
    slots.push_back({prefix + "mla_cache",
                     tt({batch, ShapedType::kDynamic, row}, act()),
                     tt({batch, tokens, row}, act())});
  }
  return slots;
}

/// One decoder layer: (sources..., h [, state...]) -> (h_next, state...).
func::FuncOp ModelBuilder::layerFunction(int64_t layer, const EntrySpec &mode,
                                         int64_t numSources) {
  int64_t tokens = mode.tokens;
  auto hType = tt({batch, tokens, cfg.hidden}, act());
  std::vector<StateSlot> slots = stateSlots(layer, mode);

  SmallVector<Type> inputs(numSources + 1, hType), results = {hType};
  if (mode.stateful)
    for (const StateSlot &s : slots)
      inputs.push_back(s.inType);
  const bool takesLength = takesCacheLength(layer, mode);
  if (takesLength)
    inputs.push_back(tt({batch}, b.getI32Type()));
  for (const StateSlot &s : slots)
    results.push_back(s.outType);

  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  std::string name = llvm::formatv("{0}_layer_{1}", mode.name, layer);
  auto fn = func::FuncOp::create(b, loc, name,
                                 b.getFunctionType(inputs, results));
  fn.setPrivate();
  for (auto [i, s] : llvm::enumerate(slots)) {
    if (mode.stateful)
      fn.setArgAttr(numSources + 1 + i, "kimi.state", b.getStringAttr(s.name));
    fn.setResultAttr(1 + i, "kimi.state", b.getStringAttr(s.name));
  }
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  ValueRange sources = body->getArguments().take_front(numSources);
  Value h = body->getArgument(numSources);
  ValueRange stateIn = body->getArguments().drop_front(numSources + 1);
  cacheLength = Value();
  if (takesLength) {
    cacheLength = stateIn.back();
    stateIn = stateIn.drop_back();
  }
  double eps = cfg.rmsNormEps;

  // Attention input.
  SmallVector<Value> blocks(sources.begin(), sources.end());
  bool attnRes = cfg.attnResBlock > 0;
  bool seal = attnRes && layer % cfg.attnResBlock == 0;
  Value mixed = h;
  if (attnRes && !blocks.empty()) {
    SmallVector<Value> srcs(blocks);
    srcs.push_back(h);
    Value proj = weight(R::AttnResProj, layer, {1, cfg.hidden}, wt());
    Value norm = weight(R::AttnResNorm, layer, {cfg.hidden}, wt());
    mixed = AttnResOp::create(b, loc, hType, srcs, proj, norm,
                              b.getF64FloatAttr(eps));
  }
  if (seal)
    blocks.push_back(h);
  Value x = rmsNorm(mixed, R::InputNorm, layer, eps);
  SmallVector<Value> stateOut;
  Value a = cfg.layers[layer] == AttentionKind::Kda
                ? kdaAttention(x, layer, mode, stateIn, stateOut)
                : mlaAttention(x, layer, mode, stateIn, stateOut);
  Value prefix = seal ? a : Value(arith::AddFOp::create(b, loc, h, a));

  // MLP input.
  Value m = prefix;
  if (attnRes) {
    SmallVector<Value> srcs(blocks);
    srcs.push_back(prefix);
    Value proj = weight(R::MlpResProj, layer, {1, cfg.hidden}, wt());
    Value norm = weight(R::MlpResNorm, layer, {cfg.hidden}, wt());
    m = AttnResOp::create(b, loc, hType, srcs, proj, norm,
                          b.getF64FloatAttr(eps));
  }
  Value xm = rmsNorm(m, R::PostAttnNorm, layer, eps);
  Value out = cfg.isMoeLayer(layer)
                  ? moe(xm, layer)
                  : mlp(xm, R::MlpGate, R::MlpUp, R::MlpDown, layer,
                        cfg.denseIntermediate);
  Value next = arith::AddFOp::create(b, loc, prefix, out);

  SmallVector<Value> rets = {next};
  rets.append(stateOut.begin(), stateOut.end());
  func::ReturnOp::create(b, loc, rets);
  return fn;
}

void ModelBuilder::entryFunction(const EntrySpec &mode) {
  batch = mode.batch;
  int64_t tokens = mode.tokens;
  Type f32 = b.getF32Type();

  // Layer functions first (they need the running count of AttnRes sources).
  SmallVector<func::FuncOp> layers;
  int64_t numSources = 0;
  for (int64_t l = 0; l < cfg.numLayers; ++l) {
    layers.push_back(layerFunction(l, mode, numSources));
    if (cfg.attnResBlock > 0 && l % cfg.attnResBlock == 0)
      ++numSources;
  }

  SmallVector<Type> inputs = {tt({batch, tokens}, b.getI32Type())};
  SmallVector<Type> results = {
      tt({batch, mode.lastLogits ? 1 : tokens, cfg.vocab}, f32)};
  SmallVector<StateSlot> allSlots;
  for (int64_t l = 0; l < cfg.numLayers; ++l)
    for (const StateSlot &s : stateSlots(l, mode)) {
      if (mode.stateful)
        inputs.push_back(s.inType);
      results.push_back(s.outType);
      allSlots.push_back(s);
    }

  const bool takesLength = mode.stateful && opts.cacheLengths;
  if (takesLength)
    inputs.push_back(tt({batch}, b.getI32Type()));

  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  auto fn = func::FuncOp::create(b, loc, mode.name,
                                 b.getFunctionType(inputs, results));
  for (auto [i, s] : llvm::enumerate(allSlots)) {
    if (mode.stateful)
      fn.setArgAttr(1 + i, "kimi.state", b.getStringAttr(s.name));
    fn.setResultAttr(1 + i, "kimi.state", b.getStringAttr(s.name));
  }
  if (takesLength)
    fn.setArgAttr(inputs.size() - 1, "kimi.cache_length", b.getUnitAttr());
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);

  Value table = weight(R::Embed, -1, {cfg.vocab, cfg.hidden}, wt());
  Value h = EmbedOp::create(b, loc, tt({batch, tokens, cfg.hidden}, act()),
                            table, body->getArgument(0));
  SmallVector<Value> blocks, stateOut;
  unsigned nextState = 1;
  for (int64_t l = 0; l < cfg.numLayers; ++l) {
    SmallVector<Value> args(blocks);
    args.push_back(h);
    size_t slotCount = stateSlots(l, mode).size();
    if (mode.stateful)
      for (size_t i = 0; i < slotCount; ++i)
        args.push_back(body->getArgument(nextState++));
    if (takesCacheLength(l, mode))
      args.push_back(body->getArguments().back());
    auto call = func::CallOp::create(b, loc, layers[l], args);
    if (cfg.attnResBlock > 0 && l % cfg.attnResBlock == 0)
      blocks.push_back(h);
    h = call.getResult(0);
    for (Value r : call.getResults().drop_front())
      stateOut.push_back(r);
  }

  if (mode.lastLogits) {
    // Everything after the last layer is per token: only the last row of
    // h and of each block source goes on.
    auto lastRow = [&](Value x) {
      SmallVector<int64_t> shape = shapeOf(x);
      Value rows = ShapedType::isDynamic(shape[1])
                       ? tensor::DimOp::create(b, loc, x, 1).getResult()
                       : arith::ConstantIndexOp::create(b, loc, shape[1]).getResult();
      Value last = arith::SubIOp::create(
          b, loc, rows, arith::ConstantIndexOp::create(b, loc, 1));
      SmallVector<OpFoldResult> offsets = {b.getIndexAttr(0), last,
                                           b.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes = {b.getIndexAttr(shape[0]),
                                         b.getIndexAttr(1),
                                         b.getIndexAttr(shape[2])};
      SmallVector<OpFoldResult> strides(3, b.getIndexAttr(1));
      auto type = tt({shape[0], 1, shape[2]},
                     cast<RankedTensorType>(x.getType()).getElementType());
      return tensor::ExtractSliceOp::create(b, loc, type, x, offsets, sizes,
                                            strides)
          .getResult();
    };
    h = lastRow(h);
    for (Value &block : blocks)
      block = lastRow(block);
  }
  if (cfg.attnResBlock > 0) {
    SmallVector<Value> srcs(blocks);
    srcs.push_back(h);
    Value proj = weight(R::OutputResProj, -1, {1, cfg.hidden}, wt());
    Value norm = weight(R::OutputResNorm, -1, {cfg.hidden}, wt());
    h = AttnResOp::create(b, loc, h.getType(), srcs, proj, norm,
                          b.getF64FloatAttr(cfg.rmsNormEps));
  }
  h = rmsNorm(h, R::FinalNorm, -1, cfg.rmsNormEps);
  R head = cfg.tieEmbeddings ? R::Embed : R::LmHead;
  Value logits = linear(h, head, -1, cfg.vocab, f32);
  SmallVector<Value> rets = {logits};
  rets.append(stateOut.begin(), stateOut.end());
  func::ReturnOp::create(b, loc, rets);
}

llvm::Error ModelBuilder::checkOptions() {
  if (opts.prefillChunk < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "prefill chunk must not be negative, got "
                                   "%lld",
                                   (long long)opts.prefillChunk);
  if (opts.decodeBatch < 1 || opts.prefillBatch < 1)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "batch sizes must be positive, got prefill %lld and decode %lld",
        (long long)opts.prefillBatch, (long long)opts.decodeBatch);
  if (!opts.mxfp4Experts)
    return llvm::Error::success();
  auto fail = [](const char *field, int64_t value) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "MXFP4 experts need %s to be a multiple of the 32-value block, got "
        "%lld (import without MXFP4 experts instead)",
        field, (long long)value);
  };
  if (cfg.expertWidth() % 32)
    return fail(cfg.moe.latent ? "routed_expert_hidden_size" : "hidden_size",
                cfg.expertWidth());
  if (cfg.moe.intermediate % 32)
    return fail("moe_intermediate_size", cfg.moe.intermediate);
  return llvm::Error::success();
}

llvm::Expected<OwningOpRef<ModuleOp>> ModelBuilder::build() {
  if (llvm::Error e = checkOptions())
    return std::move(e);
  OwningOpRef<ModuleOp> owned = ModuleOp::create(loc);
  module = *owned;
  module->setAttr("kimi.model_type", b.getStringAttr(cfg.modelType));
  if (opts.prefillChunk > 0)
    entryFunction({"prefill", opts.prefillBatch, opts.prefillChunk,
                   /*stateful=*/true, opts.lastLogitsOnly});
  else
    entryFunction({"prefill", opts.prefillBatch, ShapedType::kDynamic,
                   /*stateful=*/false, opts.lastLogitsOnly});
  entryFunction({"decode", opts.decodeBatch, 1, /*stateful=*/true});
  if (failed(verify(module)))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "internal error: imported IR does not "
                                   "verify (see diagnostics above)");
  return std::move(owned);
}

} // namespace

llvm::Expected<OwningOpRef<ModuleOp>>
kimi::importModel(const ModelConfig &config, const ImportOptions &options,
                  MLIRContext &context) {
  context.loadDialect<KimiDialect, func::FuncDialect, arith::ArithDialect,
                      math::MathDialect, tensor::TensorDialect>();
  return ModelBuilder(config, options, context).build();
}

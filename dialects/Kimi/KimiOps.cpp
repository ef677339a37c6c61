//===- KimiOps.cpp - ops of the kimi dialect ------------------------------===//
//
// Verifiers. Every message names the operand (by its ODS name) and the
// dimension at fault, so a user can find the wrong tensor in a large module.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace kimi;

namespace {

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isMicroscaled(Type elementType) {
  return isa<Float4E2M1FNType, Float8E4M3FNType>(elementType);
}

std::optional<double> valueOf(FloatAttr attr) {
  if (!attr)
    return std::nullopt;
  return attr.getValueAsDouble();
}

std::string dimString(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

/// Shape checks shared by the verifiers. Dimensions that are dynamic on either
/// side are accepted; negative indices count from the end.
class ShapeVerifier {
public:
  explicit ShapeVerifier(Operation *op) : op(op) {}

  LogicalResult rank(StringRef name, Value v, int64_t expected,
                     StringRef layout) {
    if (tensorOf(v).getRank() == expected)
      return success();
    return op->emitOpError() << "'" << name << "' must have rank " << expected
                             << " (" << layout << "), got " << v.getType();
  }

  LogicalResult minRank(StringRef name, Value v, int64_t minimum,
                        StringRef layout) {
    if (tensorOf(v).getRank() >= minimum)
      return success();
    return op->emitOpError() << "'" << name << "' must have rank >= " << minimum
                             << " (" << layout << "), got " << v.getType();
  }

  /// Dimension `ia` of `a` equals dimension `ib` of `b`; `meaning` says what
  /// the two dimensions both are.
  LogicalResult sameDim(StringRef a, Value va, int64_t ia, StringRef b,
                        Value vb, int64_t ib, StringRef meaning) {
    int64_t da = dim(va, ia), db = dim(vb, ib);
    if (ShapedType::isDynamic(da) || ShapedType::isDynamic(db) || da == db)
      return success();
    return op->emitOpError()
           << meaning << " mismatch: dimension " << norm(va, ia) << " of '" << a
           << "' is " << da << " but dimension " << norm(vb, ib) << " of '" << b
           << "' is " << db;
  }

  LogicalResult dimIs(StringRef name, Value v, int64_t i, int64_t expected,
                      StringRef meaning) {
    int64_t d = dim(v, i);
    if (ShapedType::isDynamic(d) || ShapedType::isDynamic(expected) ||
        d == expected)
      return success();
    return op->emitOpError() << "dimension " << norm(v, i) << " of '" << name
                             << "' (" << meaning << ") must be "
                             << dimString(expected) << ", got " << d;
  }

  /// All dimensions of `a` and `b` agree.
  LogicalResult sameShape(StringRef a, Value va, StringRef b, Value vb) {
    RankedTensorType ta = tensorOf(va), tb = tensorOf(vb);
    if (ta.getRank() != tb.getRank())
      return op->emitOpError() << "'" << a << "' and '" << b
                               << "' must have the same shape, got " << ta
                               << " and " << tb;
    for (int64_t i = 0; i < ta.getRank(); ++i)
      if (failed(sameDim(a, va, i, b, vb, i, "shape")))
        return failure();
    return success();
  }

  /// `a` and `b` have the same rank and agree on all but the last dimension
  /// (the token dimensions of token-wise ops).
  LogicalResult sameLeading(StringRef a, Value va, StringRef b, Value vb) {
    RankedTensorType ta = tensorOf(va), tb = tensorOf(vb);
    if (ta.getRank() != tb.getRank())
      return op->emitOpError() << "'" << a << "' and '" << b
                               << "' must have the same rank, got " << ta
                               << " and " << tb;
    for (int64_t i = 0; i + 1 < ta.getRank(); ++i)
      if (failed(sameDim(a, va, i, b, vb, i, "token dimension")))
        return failure();
    return success();
  }

  int64_t dim(Value v, int64_t i) {
    return tensorOf(v).getDimSize(norm(v, i));
  }

private:
  int64_t norm(Value v, int64_t i) {
    return i < 0 ? tensorOf(v).getRank() + i : i;
  }
  Operation *op;
};

/// `scale` must hold one f8E8M0FNU per 32 values of `weight`'s last dim.
LogicalResult verifyScaleFor(Operation *op, ShapeVerifier &sv,
                             StringRef weightName, Value weight,
                             StringRef scaleName, Value scale) {
  RankedTensorType w = tensorOf(weight), s = tensorOf(scale);
  if (s.getRank() != w.getRank())
    return op->emitOpError() << "'" << scaleName << "' must have the rank of '"
                             << weightName << "' (" << w.getRank() << "), got "
                             << s;
  for (int64_t i = 0; i + 1 < w.getRank(); ++i)
    if (failed(sv.sameDim(scaleName, scale, i, weightName, weight, i,
                          "scale block")))
      return failure();
  int64_t k = w.getDimSize(w.getRank() - 1);
  if (ShapedType::isDynamic(k))
    return success();
  if (k % 32 != 0)
    return op->emitOpError() << "microscaled '" << weightName
                             << "' needs its last dimension to be a multiple "
                                "of the 32-value block, got "
                             << k;
  return sv.dimIs(scaleName, scale, -1, k / 32, "one scale per 32 values");
}

/// Checks the stacked expert weights `gate/up : [E, I, W]`, `down : [E, W, I]`
/// for token width `width`, top-k (the last dim of `routingWeights`) against
/// the expert count, the scales and the activation attributes.
LogicalResult verifyExperts(Operation *op, ShapeVerifier &sv, int64_t width,
                            Value routingWeights, Value gate, Value up,
                            Value down,
                            ValueRange scales, GluActivation activation,
                            std::optional<double> beta,
                            std::optional<double> linearBeta) {
  if (failed(sv.rank("gate_proj", gate, 3, "[E, I, W]")) ||
      failed(sv.rank("up_proj", up, 3, "[E, I, W]")) ||
      failed(sv.rank("down_proj", down, 3, "[E, W, I]")) ||
      failed(sv.sameShape("up_proj", up, "gate_proj", gate)) ||
      failed(sv.sameDim("down_proj", down, 0, "gate_proj", gate, 0,
                        "expert count")) ||
      failed(sv.sameDim("down_proj", down, 2, "gate_proj", gate, 1,
                        "expert intermediate size")) ||
      failed(sv.dimIs("gate_proj", gate, 2, width, "expert input width")) ||
      failed(sv.dimIs("down_proj", down, 1, width, "expert output width")))
    return failure();

  // kimi.routed_experts may hold one rank's block of the experts (expert
  // parallelism), which can be fewer than k; the whole latent MoE may not.
  int64_t k = sv.dim(routingWeights, -1), experts = sv.dim(gate, 0);
  if (isa<LatentMoeOp>(op) && !ShapedType::isDynamic(k) &&
      !ShapedType::isDynamic(experts) && k > experts)
    return op->emitOpError() << "routes each token to " << k
                             << " experts but only " << experts << " exist";

  Type et = tensorOf(gate).getElementType();
  if (tensorOf(up).getElementType() != et ||
      tensorOf(down).getElementType() != et)
    return op->emitOpError()
           << "'gate_proj', 'up_proj' and 'down_proj' must share one element "
              "type, got "
           << et << ", " << tensorOf(up).getElementType() << " and "
           << tensorOf(down).getElementType();
  if (isMicroscaled(et)) {
    if (scales.size() != 3)
      return op->emitOpError() << "microscaled experts (" << et
                               << ") need 3 scale tensors, got "
                               << scales.size();
    if (failed(verifyScaleFor(op, sv, "gate_proj", gate, "scales[0]",
                              scales[0])) ||
        failed(verifyScaleFor(op, sv, "up_proj", up, "scales[1]", scales[1])) ||
        failed(verifyScaleFor(op, sv, "down_proj", down, "scales[2]",
                              scales[2])))
      return failure();
  } else if (!scales.empty()) {
    return op->emitOpError() << "experts of element type " << et
                             << " take no scales, got " << scales.size();
  }

  bool hasBetas = beta.has_value() && linearBeta.has_value();
  if (activation == GluActivation::situ && !hasBetas)
    return op->emitOpError("situ activation needs both 'beta' and "
                           "'linear_beta'");
  if (activation == GluActivation::silu && (beta || linearBeta))
    return op->emitOpError("silu activation takes no 'beta' or 'linear_beta'");
  return success();
}

/// MLA shapes common to the prefill and decode forms. `keys` is the tensor
/// whose dims 0 and 1 are [B, S]; `latent` is R, `rope` is dr.
LogicalResult verifyMla(Operation *op, ShapeVerifier &sv, Value q, Value keys,
                        StringRef keysName, int64_t latent, int64_t rope,
                        Value kvb, Value gate, Value out) {
  if (failed(sv.rank("q", q, 4, "[B, T, H, dn + dr]")) ||
      failed(sv.rank("kv_b_proj", kvb, 2, "[H * (dn + dv), R]")) ||
      failed(sv.rank("out", out, 4, "[B, T, H, dv]")) ||
      failed(sv.sameDim(keysName, keys, 0, "q", q, 0, "batch")) ||
      failed(sv.dimIs("kv_b_proj", kvb, 1, latent, "latent rank R")))
    return failure();
  for (int64_t i = 0; i < 3; ++i)
    if (failed(sv.sameDim("out", out, i, "q", q, i, "[B, T, H]")))
      return failure();
  if (gate && failed(sv.sameShape("gate", gate, "out", out)))
    return failure();

  int64_t t = sv.dim(q, 1), s = sv.dim(keys, 1);
  if (!ShapedType::isDynamic(t) && !ShapedType::isDynamic(s) && s < t)
    return op->emitOpError() << "'" << keysName << "' holds " << s
                             << " positions, fewer than the " << t
                             << " queries";

  int64_t dq = sv.dim(q, 3), heads = sv.dim(q, 2), rows = sv.dim(kvb, 0);
  if (ShapedType::isDynamic(dq) || ShapedType::isDynamic(rope))
    return success();
  int64_t nope = dq - rope;
  if (nope <= 0)
    return op->emitOpError() << "query head dim " << dq
                             << " leaves no non-positional part after the "
                             << rope << "-wide shared key";
  if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(rows))
    return success();
  if (rows % heads != 0)
    return op->emitOpError() << "'kv_b_proj' has " << rows
                             << " rows, not a multiple of the " << heads
                             << " heads";
  int64_t dv = rows / heads - nope;
  if (dv <= 0)
    return op->emitOpError() << "'kv_b_proj' rows per head (" << rows / heads
                             << ") leave no value dims after dn = " << nope;
  return sv.dimIs("out", out, 3, dv, "dv = rows per head - dn");
}

} // namespace

#define GET_OP_CLASSES
#include "dialects/Kimi/KimiOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

LogicalResult WeightOp::verify() {
  auto type = cast<RankedTensorType>(getType());
  if (getSymName().empty())
    return emitOpError("weight name must not be empty");
  if (!type.hasStaticShape())
    return emitOpError() << "weight @\"" << getSymName()
                         << "\" must have a static shape, got " << type;
  Type et = type.getElementType();
  if (!isa<BFloat16Type, Float16Type, Float32Type, Float8E4M3FNType,
           Float4E2M1FNType, Float8E8M0FNUType>(et) &&
      !et.isInteger(32) && !et.isInteger(64))
    return emitOpError() << "weight @\"" << getSymName()
                         << "\" has unsupported element type " << et;
  if (getSymName().contains("{e}") && type.getRank() < 2)
    return emitOpError() << "expert stack @\"" << getSymName()
                         << "\" needs a leading expert dimension, got " << type;
  if (std::optional<ArrayRef<int64_t>> parts = getParts()) {
    if (static_cast<int64_t>(parts->size()) != type.getRank())
      return emitOpError() << "weight @\"" << getSymName() << "\" has "
                           << parts->size() << " parts for rank "
                           << type.getRank();
    for (int64_t p : *parts)
      if (p < 1)
        return emitOpError() << "weight @\"" << getSymName()
                             << "\": parts must be positive, got " << p;
  }
  return success();
}

/// The logical (unpartitioned) shape of `type` cut into `parts` blocks.
static SmallVector<int64_t> logicalShape(RankedTensorType type,
                                         std::optional<ArrayRef<int64_t>> parts) {
  SmallVector<int64_t> shape(type.getShape());
  if (parts && parts->size() == shape.size())
    for (auto [d, p] : llvm::zip(shape, *parts))
      d *= p;
  return shape;
}

LogicalResult
WeightRefOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto weight =
      symbolTable.lookupNearestSymbolFrom<WeightOp>(*this, getNameAttr());
  if (!weight)
    return emitOpError() << "'" << getName()
                         << "' does not name a kimi.weight";
  auto declared = cast<RankedTensorType>(weight.getType());
  auto type = cast<RankedTensorType>(getType());
  if (!getParts()) {
    if (declared != type)
      return emitOpError() << "result type " << getType()
                           << " does not match the declared type "
                           << weight.getType() << " of @\"" << getName()
                           << "\"";
    return success();
  }
  if (static_cast<int64_t>(getParts()->size()) != type.getRank())
    return emitOpError() << "has " << getParts()->size()
                         << " parts for a result of rank " << type.getRank();
  if (declared.getElementType() != type.getElementType() ||
      logicalShape(declared, weight.getParts()) !=
          logicalShape(type, getParts()))
    return emitOpError() << "result type " << getType() << " in parts "
                         << "does not cover the declared type "
                         << weight.getType() << " of @\"" << getName()
                         << "\"";
  return success();
}

//===----------------------------------------------------------------------===//
// Token-wise ops
//===----------------------------------------------------------------------===//

LogicalResult EmbedOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.rank("table", getTable(), 2, "[V, D]")))
    return failure();
  if (isMicroscaled(getTable().getType().getElementType()))
    return emitOpError("embedding 'table' must be bf16, f16 or f32");
  int64_t idsRank = getIds().getType().getRank();
  if (failed(sv.rank("out", getOut(), idsRank + 1, "ids.shape ++ [D]")))
    return failure();
  for (int64_t i = 0; i < idsRank; ++i)
    if (failed(sv.sameDim("out", getOut(), i, "ids", getIds(), i, "token")))
      return failure();
  return sv.sameDim("out", getOut(), -1, "table", getTable(), 1,
                    "embedding width");
}

LogicalResult LinearOp::verify() {
  ShapeVerifier sv(*this);
  Value x = getX(), w = getWeight(), out = getOut();
  if (failed(sv.minRank("x", x, 1, "[..., K]")) ||
      failed(sv.rank("weight", w, 2, "[N, K]")) ||
      failed(sv.sameLeading("out", out, "x", x)) ||
      failed(sv.sameDim("x", x, -1, "weight", w, 1, "input width K")) ||
      failed(sv.sameDim("out", out, -1, "weight", w, 0, "output width N")))
    return failure();
  Type et = getWeight().getType().getElementType();
  if (isMicroscaled(et)) {
    if (!getScale())
      return emitOpError() << "microscaled 'weight' (" << et
                           << ") needs a 'scale' operand";
    return verifyScaleFor(*this, sv, "weight", w, "scale", getScale());
  }
  if (getScale())
    return emitOpError() << "'weight' of element type " << et
                         << " takes no 'scale'";
  return success();
}

LogicalResult RmsNormOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.minRank("x", getX(), 1, "[..., D]")) ||
      failed(sv.rank("weight", getWeight(), 1, "[D]")) ||
      failed(sv.sameDim("weight", getWeight(), 0, "x", getX(), -1,
                        "normalised width D")))
    return failure();
  return sv.sameShape("out", getOut(), "x", getX());
}

LogicalResult GatedRmsNormOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.minRank("x", getX(), 2, "[..., H, D]")) ||
      failed(sv.sameShape("gate", getGate(), "x", getX())) ||
      failed(sv.rank("weight", getWeight(), 1, "[D]")) ||
      failed(sv.sameDim("weight", getWeight(), 0, "x", getX(), -1,
                        "head dim D")))
    return failure();
  return sv.sameShape("out", getOut(), "x", getX());
}

LogicalResult L2NormOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.minRank("x", getX(), 1, "[..., D]")))
    return failure();
  return sv.sameShape("out", getOut(), "x", getX());
}

LogicalResult SigmoidOp::verify() {
  ShapeVerifier sv(*this);
  return sv.sameShape("out", getOut(), "x", getX());
}

LogicalResult SituGluOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.sameShape("up", getUp(), "gate", getGate())))
    return failure();
  return sv.sameShape("out", getOut(), "gate", getGate());
}

//===----------------------------------------------------------------------===//
// Kimi Delta Attention
//===----------------------------------------------------------------------===//

LogicalResult ShortConvOp::verify() {
  ShapeVerifier sv(*this);
  Value x = getX(), w = getWeight(), fs = getFinalState();
  if (failed(sv.rank("x", x, 3, "[B, T, C]")) ||
      failed(sv.rank("weight", w, 3, "[C, 1, K]")) ||
      failed(sv.sameDim("weight", w, 0, "x", x, 2, "channel count C")) ||
      failed(sv.dimIs("weight", w, 1, 1, "depthwise")) ||
      failed(sv.sameShape("out", getOut(), "x", x)) ||
      failed(sv.rank("final_state", fs, 3, "[B, K-1, C]")))
    return failure();
  int64_t kernel = sv.dim(w, 2);
  if (ShapedType::isDynamic(kernel))
    return emitOpError("'weight' kernel size (dimension 2) must be static");
  if (kernel < 2)
    return emitOpError() << "kernel size must be at least 2, got " << kernel;
  if (failed(sv.sameDim("final_state", fs, 0, "x", x, 0, "batch")) ||
      failed(sv.dimIs("final_state", fs, 1, kernel - 1, "K-1 previous inputs")) ||
      failed(sv.sameDim("final_state", fs, 2, "x", x, 2, "channel count C")))
    return failure();
  if (Value st = getState())
    return sv.sameShape("state", st, "final_state", fs);
  return success();
}

LogicalResult KdaGateOp::verify() {
  ShapeVerifier sv(*this);
  Value z = getZ();
  if (failed(sv.rank("z", z, 4, "[B, T, H, D]")) ||
      failed(sv.rank("a_log", getALog(), 1, "[H]")) ||
      failed(sv.rank("dt_bias", getDtBias(), 2, "[H, D]")) ||
      failed(sv.sameDim("a_log", getALog(), 0, "z", z, 2, "head count H")) ||
      failed(sv.sameDim("dt_bias", getDtBias(), 0, "z", z, 2, "head count H")) ||
      failed(sv.sameDim("dt_bias", getDtBias(), 1, "z", z, 3, "head dim D")) ||
      failed(sv.sameShape("g", getG(), "z", z)))
    return failure();
  std::optional<double> lower = valueOf(getLowerAttr());
  if (getForm() == GateForm::lower_bound) {
    if (!lower)
      return emitOpError("lower_bound gate needs a 'lower' bound");
    if (!(*lower < 0.0))
      return emitOpError() << "lower_bound gate needs 'lower' < 0, got "
                           << *lower;
  } else if (lower) {
    return emitOpError("softplus gate is unbounded and takes no 'lower'");
  }
  return success();
}

LogicalResult KdaOp::verify() {
  ShapeVerifier sv(*this);
  Value q = getQ(), v = getV(), fs = getFinalState();
  if (failed(sv.rank("q", q, 4, "[B, T, H, dk]")) ||
      failed(sv.sameShape("k", getK(), "q", q)) ||
      failed(sv.sameShape("g", getG(), "q", q)) ||
      failed(sv.rank("v", v, 4, "[B, T, H, dv]")) ||
      failed(sv.rank("beta", getBeta(), 3, "[B, T, H]")) ||
      failed(sv.rank("out", getOut(), 4, "[B, T, H, dv]")) ||
      failed(sv.rank("final_state", fs, 4, "[B, H, dk, dv]")))
    return failure();
  for (int64_t i = 0; i < 3; ++i)
    if (failed(sv.sameDim("v", v, i, "q", q, i, "[B, T, H]")) ||
        failed(sv.sameDim("beta", getBeta(), i, "q", q, i, "[B, T, H]")))
      return failure();
  if (Value cu = getCuSeqlens()) {
    if (failed(sv.rank("cu_seqlens", cu, 1, "[N + 1]")))
      return failure();
    int64_t b = sv.dim(q, 0), n1 = sv.dim(cu, 0), nfs = sv.dim(fs, 0);
    if (!ShapedType::isDynamic(b) && b != 1)
      return emitOpError() << "with 'cu_seqlens' the batch dimension of 'q' "
                              "must be 1 (sequences are packed along T), got "
                           << b;
    if (!ShapedType::isDynamic(n1) && n1 < 2)
      return emitOpError() << "'cu_seqlens' must hold at least 2 offsets, got "
                           << n1;
    if (!ShapedType::isDynamic(n1) && !ShapedType::isDynamic(nfs) &&
        nfs != n1 - 1)
      return emitOpError() << "'final_state' dimension 0 (" << nfs
                           << ") must equal the sequence count N = "
                           << n1 - 1 << " of 'cu_seqlens'";
  } else if (failed(sv.sameDim("final_state", fs, 0, "q", q, 0, "batch"))) {
    return failure();
  }
  if (failed(sv.sameShape("out", getOut(), "v", v)) ||
      failed(sv.sameDim("final_state", fs, 1, "q", q, 2, "head count H")) ||
      failed(sv.sameDim("final_state", fs, 2, "q", q, 3, "key dim dk")) ||
      failed(sv.sameDim("final_state", fs, 3, "v", v, 3, "value dim dv")))
    return failure();
  if (Value st = getInitialState()) {
    if (failed(sv.sameShape("initial_state", st, "final_state", fs)))
      return failure();
    Type a = cast<ShapedType>(st.getType()).getElementType();
    Type b = cast<ShapedType>(fs.getType()).getElementType();
    if (a != b)
      return emitOpError() << "'initial_state' (" << a << ") and 'final_state' ("
                           << b << ") must share one element type";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// MLA
//===----------------------------------------------------------------------===//

LogicalResult MlaOp::verify() {
  ShapeVerifier sv(*this);
  Value ckv = getCkv(), kpe = getKPe();
  if (failed(sv.rank("ckv", ckv, 3, "[B, S, R]")) ||
      failed(sv.rank("k_pe", kpe, 3, "[B, S, dr]")) ||
      failed(sv.sameDim("k_pe", kpe, 0, "ckv", ckv, 0, "batch")) ||
      failed(sv.sameDim("k_pe", kpe, 1, "ckv", ckv, 1, "key positions S")))
    return failure();
  return verifyMla(*this, sv, getQ(), ckv, "ckv", sv.dim(ckv, 2),
                   sv.dim(kpe, 2), getKvBProj(), getGate(), getOut());
}

LogicalResult MlaDecodeOp::verify() {
  ShapeVerifier sv(*this);
  Value cache = getCache(), kvb = getKvBProj();
  if (failed(sv.rank("cache", cache, 3, "[B, S, R + dr]")) ||
      failed(sv.rank("kv_b_proj", kvb, 2, "[H * (dn + dv), R]")))
    return failure();
  int64_t width = sv.dim(cache, 2), latent = sv.dim(kvb, 1);
  int64_t rope = ShapedType::kDynamic;
  if (!ShapedType::isDynamic(width) && !ShapedType::isDynamic(latent)) {
    rope = width - latent;
    if (rope <= 0)
      return emitOpError() << "'cache' rows (" << width
                           << ") must be wider than the latent rank R = "
                           << latent << " of 'kv_b_proj'";
  }
  if (Value lengths = getLengths())
    if (failed(sv.rank("lengths", lengths, 1, "[B]")) ||
        failed(sv.sameDim("lengths", lengths, 0, "cache", cache, 0, "batch")))
      return failure();
  return verifyMla(*this, sv, getQ(), cache, "cache", latent, rope, kvb,
                   getGate(), getOut());
}

LogicalResult CacheInsertOp::verify() {
  ShapeVerifier sv(*this);
  Value cache = getCache(), rows = getRows(), lengths = getLengths();
  if (failed(sv.rank("cache", cache, 3, "[B, S, W]")) ||
      failed(sv.rank("rows", rows, 3, "[B, T, W]")) ||
      failed(sv.rank("lengths", lengths, 1, "[B]")) ||
      failed(sv.rank("out", getOut(), 3, "[B, S + T, W]")) ||
      failed(sv.sameDim("rows", rows, 0, "cache", cache, 0, "batch")) ||
      failed(sv.sameDim("lengths", lengths, 0, "cache", cache, 0, "batch")) ||
      failed(sv.sameDim("out", getOut(), 0, "cache", cache, 0, "batch")) ||
      failed(sv.sameDim("rows", rows, 2, "cache", cache, 2, "row width")) ||
      failed(sv.sameDim("out", getOut(), 2, "cache", cache, 2, "row width")))
    return failure();
  Type et = tensorOf(cache).getElementType();
  if (tensorOf(rows).getElementType() != et ||
      tensorOf(getOut()).getElementType() != et)
    return emitOpError() << "'cache', 'rows' and 'out' must share one element "
                            "type, got "
                         << et << ", " << tensorOf(rows).getElementType()
                         << " and " << tensorOf(getOut()).getElementType();
  int64_t s = sv.dim(cache, 1), t = sv.dim(rows, 1);
  if (!ShapedType::isDynamic(s) && !ShapedType::isDynamic(t))
    return sv.dimIs("out", getOut(), 1, s + t, "cache rows S + new rows T");
  return success();
}

//===----------------------------------------------------------------------===//
// Attention Residuals
//===----------------------------------------------------------------------===//

LogicalResult AttnResOp::verify() {
  ShapeVerifier sv(*this);
  if (getSources().empty())
    return emitOpError("needs at least one source");
  Value first = getSources().front();
  if (failed(sv.minRank("sources[0]", first, 1, "[..., D]")))
    return failure();
  for (auto [i, src] : llvm::enumerate(getSources().drop_front())) {
    std::string name = "sources[" + std::to_string(i + 1) + "]";
    if (failed(sv.sameShape(name, src, "sources[0]", first)))
      return failure();
  }
  RankedTensorType query = getQuery().getType();
  if (query.getRank() == 2) {
    if (failed(sv.dimIs("query", getQuery(), 0, 1, "[1, D] form")))
      return failure();
  } else if (failed(sv.rank("query", getQuery(), 1, "[D] or [1, D]"))) {
    return failure();
  }
  if (failed(sv.sameDim("query", getQuery(), -1, "sources[0]", first, -1,
                        "hidden width D")) ||
      failed(sv.rank("norm", getNorm(), 1, "[D]")) ||
      failed(sv.sameDim("norm", getNorm(), 0, "sources[0]", first, -1,
                        "hidden width D")))
    return failure();
  return sv.sameShape("out", getOut(), "sources[0]", first);
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

LogicalResult RouterOp::verify() {
  ShapeVerifier sv(*this);
  Value x = getX(), w = getWeight();
  if (failed(sv.minRank("x", x, 1, "[..., D]")) ||
      failed(sv.rank("weight", w, 2, "[E, D]")) ||
      failed(sv.sameDim("weight", w, 1, "x", x, -1, "hidden width D")) ||
      failed(sv.rank("bias", getBias(), 1, "[E]")) ||
      failed(sv.sameDim("bias", getBias(), 0, "weight", w, 0, "expert count E")))
    return failure();
  if (isMicroscaled(tensorOf(w).getElementType()))
    return emitOpError("router 'weight' must be bf16, f16 or f32");
  int64_t experts = sv.dim(w, 0), k = getTopK();
  if (!ShapedType::isDynamic(experts) && k > experts)
    return emitOpError() << "top_k = " << k << " exceeds the " << experts
                         << " experts";
  if (failed(sv.sameLeading("weights", getWeights(), "x", x)) ||
      failed(sv.dimIs("weights", getWeights(), -1, k, "top_k")) ||
      failed(sv.sameShape("indices", getIndices(), "weights", getWeights())))
    return failure();
  if (Value margins = getMargins()) {
    if (!ShapedType::isDynamic(experts) && k >= experts)
      return emitOpError() << "margins need the (k+1)-th score: top_k = " << k
                           << " must be below the " << experts << " experts";
    if (failed(sv.sameLeading("margins", margins, "x", x)) ||
        failed(sv.sameDim("margins", margins, -1, "weight", w, 0,
                          "expert count E")))
      return failure();
  }
  return success();
}

LogicalResult RoutedExpertsOp::verify() {
  ShapeVerifier sv(*this);
  Value x = getX();
  if (failed(sv.minRank("x", x, 1, "[..., W]")) ||
      failed(sv.sameLeading("weights", getWeights(), "x", x)) ||
      failed(sv.sameShape("indices", getIndices(), "weights", getWeights())) ||
      failed(sv.sameShape("out", getOut(), "x", x)))
    return failure();
  return verifyExperts(*this, sv, sv.dim(x, -1), getWeights(), getGateProj(),
                       getUpProj(),
                       getDownProj(), getScales(), getActivation(),
                       valueOf(getBetaAttr()), valueOf(getLinearBetaAttr()));
}

LogicalResult LatentMoeOp::verify() {
  ShapeVerifier sv(*this);
  Value x = getX(), down = getDownLatent(), up = getUpLatent();
  if (failed(sv.minRank("x", x, 1, "[..., D]")) ||
      failed(sv.sameLeading("weights", getWeights(), "x", x)) ||
      failed(sv.sameShape("indices", getIndices(), "weights", getWeights())) ||
      failed(sv.rank("down_latent", down, 2, "[W, D]")) ||
      failed(sv.rank("up_latent", up, 2, "[D, W]")) ||
      failed(sv.sameDim("down_latent", down, 1, "x", x, -1, "hidden width D")) ||
      failed(sv.sameDim("up_latent", up, 0, "x", x, -1, "hidden width D")) ||
      failed(sv.sameDim("up_latent", up, 1, "down_latent", down, 0,
                        "latent width W")) ||
      failed(sv.sameShape("out", getOut(), "x", x)))
    return failure();
  if (Value norm = getNorm())
    if (failed(sv.rank("norm", norm, 1, "[W]")) ||
        failed(sv.sameDim("norm", norm, 0, "down_latent", down, 0,
                          "latent width W")))
      return failure();
  if (isMicroscaled(tensorOf(down).getElementType()) ||
      isMicroscaled(tensorOf(up).getElementType()))
    return emitOpError("latent projections must be bf16, f16 or f32");
  return verifyExperts(*this, sv, sv.dim(down, 0), getWeights(),
                       getGateProj(), getUpProj(),
                       getDownProj(), getScales(), getActivation(),
                       valueOf(getBetaAttr()), valueOf(getLinearBetaAttr()));
}

LogicalResult QuantileBalanceOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.rank("margins", getMargins(), 2, "[N, E]")) ||
      failed(sv.rank("bias", getBias(), 1, "[E]")) ||
      failed(sv.sameDim("bias", getBias(), 0, "margins", getMargins(), 1,
                        "expert count E")) ||
      failed(sv.sameShape("new_bias", getNewBias(), "bias", getBias())))
    return failure();
  int64_t experts = sv.dim(getMargins(), 1);
  if (!ShapedType::isDynamic(experts) &&
      static_cast<int64_t>(getTopK()) >= experts)
    return emitOpError() << "top_k = " << getTopK()
                         << " must be below the expert count " << experts;
  if (std::optional<int64_t> bins = getBins(); bins && *bins < 2)
    return emitOpError() << "histogram needs at least 2 bins, got " << *bins;
  return success();
}

LogicalResult QuantileCountsOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.rank("margins", getMargins(), 2, "[N, E]")) ||
      failed(sv.rank("bias", getBias(), 1, "[E]")) ||
      failed(sv.sameDim("bias", getBias(), 0, "margins", getMargins(), 1,
                        "expert count E")) ||
      failed(sv.rank("counts", getCounts(), 2, "[E, bins]")) ||
      failed(sv.sameDim("counts", getCounts(), 0, "bias", getBias(), 0,
                        "expert count E")) ||
      failed(sv.dimIs("counts", getCounts(), 1, getBins(), "bins")))
    return failure();
  if (getBins() < 2)
    return emitOpError() << "histogram needs at least 2 bins, got "
                         << getBins();
  return success();
}

LogicalResult QuantileUpdateOp::verify() {
  ShapeVerifier sv(*this);
  if (failed(sv.rank("counts", getCounts(), 2, "[E, bins]")) ||
      failed(sv.rank("bias", getBias(), 1, "[E]")) ||
      failed(sv.sameDim("counts", getCounts(), 0, "bias", getBias(), 0,
                        "expert count E")) ||
      failed(sv.sameShape("new_bias", getNewBias(), "bias", getBias())))
    return failure();
  int64_t experts = sv.dim(getBias(), 0);
  if (!ShapedType::isDynamic(experts) &&
      static_cast<int64_t>(getTopK()) >= experts)
    return emitOpError() << "top_k = " << getTopK()
                         << " must be below the expert count " << experts;
  return success();
}

LogicalResult KdaTransitionOp::verify() {
  ShapeVerifier sv(*this);
  Value k = getK(), m = getTransition();
  if (failed(sv.rank("k", k, 4, "[B, T, H, dk]")) ||
      failed(sv.sameShape("g", getG(), "k", k)) ||
      failed(sv.rank("beta", getBeta(), 3, "[B, T, H]")) ||
      failed(sv.rank("transition", m, 4, "[B, H, dk, dk]")))
    return failure();
  for (int64_t i = 0; i < 3; ++i)
    if (failed(sv.sameDim("beta", getBeta(), i, "k", k, i, "[B, T, H]")))
      return failure();
  if (failed(sv.sameDim("transition", m, 0, "k", k, 0, "batch")) ||
      failed(sv.sameDim("transition", m, 1, "k", k, 2, "head count H")) ||
      failed(sv.sameDim("transition", m, 2, "k", k, 3, "key dim dk")) ||
      failed(sv.sameDim("transition", m, 3, "k", k, 3, "key dim dk")))
    return failure();
  return success();
}

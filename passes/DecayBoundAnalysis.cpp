//===- DecayBoundAnalysis.cpp - interval analysis of KDA gates ------------===//
//
// Transfer rules of the decay-bound analysis and the solver wrapper the
// passes use. docs/passes/decay-bound.md lists the rules.
//
//===----------------------------------------------------------------------===//

#include "passes/DecayBoundAnalysis.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Analysis/DataFlow/ConstantPropagationAnalysis.h"
#include "mlir/Analysis/DataFlow/DeadCodeAnalysis.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cfloat>
#include <cmath>

using namespace mlir;
using namespace kimi;

bool kimi::hasFloatElements(Type type) {
  return isa<FloatType>(getElementTypeOrSelf(type));
}

/// The format of a float result under `model`: its element type's for IEEE
/// evaluation, none (exact real arithmetic) otherwise.
static interval::Format formatOf(Value result, RoundingModel model) {
  if (model == RoundingModel::exact)
    return nullptr;
  return &cast<FloatType>(getElementTypeOrSelf(result.getType()))
              .getFloatSemantics();
}

/// The interval of a constant element; infinities are unbounded ends, NaN
/// is not modelled (uninitialized, the identity of the hull).
static FloatInterval constantInterval(const llvm::APFloat &value) {
  if (value.isNaN())
    return {};
  if (value.isInfinity())
    return value.isNegative()
               ? FloatInterval::get(-FloatInterval::kInf, -DBL_MAX, true, false)
               : FloatInterval::get(DBL_MAX, FloatInterval::kInf, false, true);
  llvm::APFloat asDouble = value;
  bool losesInfo = false;
  (void)asDouble.convert(llvm::APFloat::IEEEdouble(),
                         llvm::RoundingMode::NearestTiesToEven, &losesInfo);
  return FloatInterval::point(asDouble.convertToDouble());
}

static std::optional<FloatInterval> constantRule(arith::ConstantOp op) {
  Attribute value = op.getValue();
  if (auto scalar = dyn_cast<FloatAttr>(value))
    return constantInterval(scalar.getValue());
  auto dense = dyn_cast<DenseFPElementsAttr>(value);
  if (!dense)
    return std::nullopt;
  if (dense.isSplat())
    return constantInterval(dense.getSplatValue<llvm::APFloat>());
  FloatInterval hull;
  for (const llvm::APFloat &element : dense.getValues<llvm::APFloat>())
    hull = FloatInterval::join(hull, constantInterval(element));
  return hull;
}

/// `kimi.kda_gate`: the range promised by the gate form. The exact
/// (reference) ranges are open, (L, 0) and (-inf, 0); f32 evaluation reaches
/// the ends (sigmoid rounds to 0 and 1, softplus underflows to 0).
static FloatInterval gateRule(KdaGateOp gate, RoundingModel model) {
  FloatInterval exact;
  if (gate.getForm() == GateForm::lower_bound)
    exact = FloatInterval::open(gate.getLowerAttr().getValueAsDouble(), 0.0);
  else
    exact = FloatInterval::open(-FloatInterval::kInf, 0.0);
  if (model == RoundingModel::exact)
    return exact;
  return interval::roundTo(exact, *formatOf(gate.getG(), model));
}

bool kimi::isIntervalSource(Operation *op) {
  return isa<arith::ConstantOp, KdaGateOp>(op);
}

bool kimi::hasIntervalRule(Operation *op) {
  if (auto constant = dyn_cast<arith::ConstantOp>(op))
    return isa<FloatAttr, DenseFPElementsAttr>(constant.getValue());
  return isa<KdaGateOp,
             // arith
             arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp,
             arith::NegFOp, arith::MaximumFOp, arith::MinimumFOp,
             arith::MaxNumFOp, arith::MinNumFOp, arith::SelectOp,
             arith::ExtFOp, arith::TruncFOp,
             // math
             math::ExpOp, math::LogOp, math::Log1pOp, math::TanhOp,
             math::AbsFOp,
             // tensor: values move, they are not computed
             tensor::ExpandShapeOp, tensor::CollapseShapeOp,
             tensor::ExtractSliceOp, tensor::CastOp, tensor::ReshapeOp,
             tensor::ExtractOp, tensor::SplatOp, tensor::FromElementsOp,
             tensor::InsertSliceOp, tensor::InsertOp, tensor::ConcatOp>(op);
}

std::optional<FloatInterval>
kimi::transferInterval(Operation *op, ArrayRef<FloatInterval> in,
                       unsigned resultIndex, RoundingModel model) {
  if (!hasIntervalRule(op))
    return std::nullopt;
  Value result = op->getResult(resultIndex);
  if (!hasFloatElements(result.getType()))
    return std::nullopt;
  interval::Format f = formatOf(result, model);
  /// The hull of the intervals of all float operands.
  auto hullOfFloatOperands = [&] {
    FloatInterval hull;
    for (auto [value, range] : llvm::zip(op->getOperands(), in))
      if (hasFloatElements(value.getType()))
        hull = FloatInterval::join(hull, range);
    return hull;
  };
  return llvm::TypeSwitch<Operation *, std::optional<FloatInterval>>(op)
      .Case([&](arith::ConstantOp c) { return constantRule(c); })
      .Case([&](KdaGateOp gate) { return gateRule(gate, model); })
      .Case([&](arith::AddFOp) { return interval::add(in[0], in[1], f); })
      .Case([&](arith::SubFOp) { return interval::sub(in[0], in[1], f); })
      .Case([&](arith::MulFOp) { return interval::mul(in[0], in[1], f); })
      .Case([&](arith::DivFOp) { return interval::div(in[0], in[1], f); })
      .Case([&](arith::NegFOp) { return interval::neg(in[0]); })
      .Case<arith::MaximumFOp, arith::MaxNumFOp>(
          [&](Operation *) { return interval::max(in[0], in[1]); })
      .Case<arith::MinimumFOp, arith::MinNumFOp>(
          [&](Operation *) { return interval::min(in[0], in[1]); })
      // The condition is not read: either value may be chosen.
      .Case([&](arith::SelectOp) { return FloatInterval::join(in[1], in[2]); })
      .Case([&](arith::ExtFOp) { return in[0]; })
      .Case([&](arith::TruncFOp) {
        // Rounding is the op's meaning, so it applies in both models.
        return interval::roundTo(
            in[0], cast<FloatType>(getElementTypeOrSelf(result.getType()))
                       .getFloatSemantics());
      })
      .Case([&](math::ExpOp) { return interval::exp(in[0], f); })
      .Case([&](math::LogOp) { return interval::log(in[0], f); })
      .Case([&](math::Log1pOp) { return interval::log1p(in[0], f); })
      .Case([&](math::TanhOp) { return interval::tanh(in[0], f); })
      .Case([&](math::AbsFOp) { return interval::abs(in[0]); })
      .Case<tensor::ExpandShapeOp, tensor::CollapseShapeOp,
            tensor::ExtractSliceOp, tensor::CastOp, tensor::ReshapeOp,
            tensor::ExtractOp, tensor::SplatOp>(
          [&](Operation *) { return in[0]; })
      .Case<tensor::FromElementsOp, tensor::InsertSliceOp, tensor::InsertOp,
            tensor::ConcatOp>([&](Operation *) { return hullOfFloatOperands(); })
      .Default([](Operation *) { return std::nullopt; });
}

//===----------------------------------------------------------------------===//
// FloatIntervalLattice
//===----------------------------------------------------------------------===//

ChangeResult FloatIntervalLattice::join(const FloatInterval &rhs) {
  FloatInterval &value = getValue();
  FloatInterval joined = FloatInterval::join(value, rhs);
  if (joined == value)
    return ChangeResult::NoChange;
  if (!value.isUninitialized() && ++growths > kWidenAfter) {
    // Widen every end that moved outward.
    double lo = joined.lower(), hi = joined.upper();
    bool loOpen = joined.isLowerOpen(), hiOpen = joined.isUpperOpen();
    if (lo < value.lower())
      lo = -FloatInterval::kInf;
    if (hi > value.upper())
      hi = FloatInterval::kInf;
    joined = FloatInterval::get(lo, hi, loOpen, hiOpen);
  }
  value = joined;
  return ChangeResult::Change;
}

//===----------------------------------------------------------------------===//
// DecayBoundAnalysis
//===----------------------------------------------------------------------===//

void DecayBoundAnalysis::setToEntryState(FloatIntervalLattice *lattice) {
  propagateIfChanged(lattice, lattice->join(FloatInterval::unbounded()));
}

LogicalResult DecayBoundAnalysis::visitOperation(
    Operation *op, ArrayRef<const FloatIntervalLattice *> operands,
    ArrayRef<FloatIntervalLattice *> results) {
  if (!hasIntervalRule(op)) {
    setAllToEntryStates(results);
    return success();
  }
  SmallVector<FloatInterval> in;
  in.reserve(operands.size());
  for (auto [value, lattice] : llvm::zip(op->getOperands(), operands)) {
    const FloatInterval &range = lattice->getValue();
    // Wait until every float operand has been reached.
    if (!isIntervalSource(op) && hasFloatElements(value.getType()) &&
        range.isUninitialized())
      return success();
    in.push_back(range);
  }
  for (auto [index, lattice] : llvm::enumerate(results)) {
    std::optional<FloatInterval> range =
        transferInterval(op, in, index, model);
    propagateIfChanged(lattice,
                       lattice->join(range ? *range
                                           : FloatInterval::unbounded()));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// DecayBounds
//===----------------------------------------------------------------------===//

DecayBounds::DecayBounds(Operation *root, RoundingModel model) {
  solver.load<dataflow::DeadCodeAnalysis>();
  solver.load<dataflow::SparseConstantPropagation>();
  solver.load<DecayBoundAnalysis>(model);
  ok = mlir::succeeded(solver.initializeAndRun(root));
}

FloatInterval DecayBounds::getInterval(Value value) const {
  if (const auto *lattice = solver.lookupState<FloatIntervalLattice>(value))
    return lattice->getValue();
  return {};
}

Value DecayBounds::blame(
    Value value, llvm::function_ref<bool(const FloatInterval &)> bad) const {
  llvm::SmallPtrSet<Operation *, 8> visited;
  while (true) {
    Operation *op = value.getDefiningOp();
    if (!op || isIntervalSource(op) || !hasIntervalRule(op) ||
        !visited.insert(op).second)
      return value;
    Value next;
    for (Value operand : op->getOperands())
      if (hasFloatElements(operand.getType()) && bad(getInterval(operand))) {
        next = operand;
        break;
      }
    if (!next && !getInterval(value).isBounded())
      for (Value operand : op->getOperands())
        if (hasFloatElements(operand.getType()) &&
            !getInterval(operand).isBounded()) {
          next = operand;
          break;
        }
    if (!next)
      return value;
    value = next;
  }
}

//===----------------------------------------------------------------------===//
// Naming values in diagnostics
//===----------------------------------------------------------------------===//

std::string kimi::formatLocation(Location loc) {
  FileLineColLoc file;
  loc->walk([&](Location nested) {
    if (auto found = dyn_cast<FileLineColLoc>(nested)) {
      file = found;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  std::string text;
  llvm::raw_string_ostream os(text);
  if (file)
    os << file.getFilename().getValue() << ":" << file.getLine() << ":"
       << file.getColumn();
  else
    loc.print(os);
  return text;
}

std::string kimi::describeValue(Value value) {
  std::string name;
  {
    llvm::raw_string_ostream os(name);
    value.printAsOperand(os, OpPrintingFlags());
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    Block *block = arg.getOwner();
    Operation *parent = block->getParentOp();
    auto function = dyn_cast_or_null<FunctionOpInterface>(parent);
    if (function && block->isEntryBlock())
      os << "function argument " << name << " of @" << function.getName();
    else
      os << "block argument " << name << " of '"
         << (parent ? parent->getName().getStringRef() : "<detached>") << "'";
    return text;
  }
  Operation *op = value.getDefiningOp();
  os << "'" << op->getName();
  if (auto gate = dyn_cast<KdaGateOp>(op)) {
    os << " " << stringifyGateForm(gate.getForm());
    if (FloatAttr lower = gate.getLowerAttr())
      os << " lower = " << formatBound(lower.getValueAsDouble());
  }
  os << "' " << name;
  return text;
}

Location kimi::valueLocation(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    return arg.getLoc();
  return value.getDefiningOp()->getLoc();
}

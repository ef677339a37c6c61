//===- KimiAttrs.cpp - attributes and enums of kimi -----------------------===//
#include "dialects/Kimi/KimiAttrs.h"
#include "dialects/Kimi/KimiDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace kimi;

#include "dialects/Kimi/KimiEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Kimi/KimiAttrs.cpp.inc"

void KimiDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Kimi/KimiAttrs.cpp.inc"
      >();
}

// #kimi.decay<[lower = <float>,] chunk = <int>, diag = dense|pairwise>
Attribute DecayAttr::parse(AsmParser &parser, Type) {
  FloatAttr lower;
  int64_t chunk = 0;
  std::string diagName;
  if (parser.parseLess())
    return {};
  if (succeeded(parser.parseOptionalKeyword("lower"))) {
    double value;
    if (parser.parseEqual() || parser.parseFloat(value) || parser.parseComma())
      return {};
    lower = FloatAttr::get(Float64Type::get(parser.getContext()), value);
  }
  SMLoc diagLoc;
  if (parser.parseKeyword("chunk") || parser.parseEqual() ||
      parser.parseInteger(chunk) || parser.parseComma() ||
      parser.parseKeyword("diag") || parser.parseEqual() ||
      parser.getCurrentLocation(&diagLoc) ||
      parser.parseKeywordOrString(&diagName) || parser.parseGreater())
    return {};
  std::optional<DiagStrategy> diag = symbolizeDiagStrategy(diagName);
  if (!diag) {
    parser.emitError(diagLoc, "expected 'dense' or 'pairwise' for diag, got '")
        << diagName << "'";
    return {};
  }
  return getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                    parser.getContext(), lower, chunk, *diag);
}

void DecayAttr::print(AsmPrinter &printer) const {
  printer << "<";
  if (FloatAttr lower = getLower()) {
    printer << "lower = ";
    printer.printFloat(lower.getValue());
    printer << ", ";
  }
  printer << "chunk = " << getChunk()
          << ", diag = " << stringifyDiagStrategy(getDiag()) << ">";
}

LogicalResult
DecayAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                  FloatAttr lower, int64_t chunk,
                  DiagStrategy diag) {
  if (chunk < 16 || chunk > 64 || !llvm::isPowerOf2_64(chunk))
    return emitError() << "decay chunk must be a power of two in [16, 64], got "
                       << chunk;
  if (lower && !(lower.getValueAsDouble() <= 0.0))
    return emitError() << "decay lower bound must not be positive, got "
                       << lower.getValueAsDouble();
  return success();
}

// #kimi.interval<[lower = <float> [open]] [,] [upper = <float> [open]]>
Attribute IntervalAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  Type f64 = Float64Type::get(ctx);
  FloatAttr bounds[2];
  bool open[2] = {false, false};
  if (parser.parseLess())
    return {};
  auto parseBound = [&](int index) -> ParseResult {
    double value;
    if (parser.parseEqual() || parser.parseFloat(value))
      return failure();
    bounds[index] = FloatAttr::get(f64, value);
    open[index] = succeeded(parser.parseOptionalKeyword("open"));
    return success();
  };
  bool any = false;
  if (succeeded(parser.parseOptionalKeyword("lower"))) {
    if (parseBound(0))
      return {};
    any = true;
  }
  if (!any || succeeded(parser.parseOptionalComma())) {
    if (succeeded(parser.parseOptionalKeyword("upper"))) {
      if (parseBound(1))
        return {};
    } else if (any) {
      parser.emitError(parser.getCurrentLocation(), "expected 'upper'");
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                    ctx, bounds[0], bounds[1], open[0], open[1]);
}

void IntervalAttr::print(AsmPrinter &printer) const {
  printer << "<";
  auto printBound = [&](StringRef name, FloatAttr bound, bool open) {
    printer << name << " = ";
    printer.printFloat(bound.getValue());
    if (open)
      printer << " open";
  };
  if (FloatAttr lower = getLower())
    printBound("lower", lower, getLowerOpen());
  if (getLower() && getUpper())
    printer << ", ";
  if (FloatAttr upper = getUpper())
    printBound("upper", upper, getUpperOpen());
  printer << ">";
}

LogicalResult
IntervalAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                     FloatAttr lower, FloatAttr upper, bool lowerOpen,
                     bool upperOpen) {
  for (FloatAttr bound : {lower, upper})
    if (bound && !bound.getValue().isFinite())
      return emitError() << "interval bounds must be finite (leave an "
                            "unbounded end out), got "
                         << bound.getValueAsDouble();
  if ((lowerOpen && !lower) || (upperOpen && !upper))
    return emitError() << "an absent (unbounded) interval end cannot be "
                          "marked open";
  if (lower && upper) {
    double lo = lower.getValueAsDouble(), hi = upper.getValueAsDouble();
    if (lo > hi)
      return emitError() << "interval is empty: lower " << lo
                         << " is above upper " << hi;
    if (lo == hi && (lowerOpen || upperOpen))
      return emitError() << "interval is empty: an open end at both bounds "
                         << lo;
  }
  return success();
}

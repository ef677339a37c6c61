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
  if (lower && !(lower.getValueAsDouble() < 0.0))
    return emitError() << "decay lower bound must be negative, got "
                       << lower.getValueAsDouble();
  return success();
}

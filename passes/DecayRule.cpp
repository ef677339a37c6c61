//===- DecayRule.cpp - chunk length from a proven decay bound -------------===//

#include "passes/DecayRule.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cassert>
#include <cmath>

using namespace mlir;
using namespace kimi;

llvm::ArrayRef<ExponentHeadroom> kimi::exponentHeadroomTable() {
  // Largest binary exponent e of a finite value (max = (2 - ulp) * 2^e).
  static const ExponentHeadroom table[] = {
      // 8 exponent bits, like f32.
      {"bf16", 127, [](Type t) { return isa<BFloat16Type>(t); }},
      // 5 exponent bits: max 65504.
      {"f16", 15, [](Type t) { return isa<Float16Type>(t); }},
      {"f32", 127, [](Type t) { return isa<Float32Type>(t); }},
      // f32's range with a 10-bit mantissa.
      {"tf32", 127, [](Type t) { return isa<FloatTF32Type>(t); }},
      {"f64", 1023, [](Type t) { return isa<Float64Type>(t); }},
      // f16's range: max 57344.
      {"f8E5M2", 15, [](Type t) { return isa<Float8E5M2Type>(t); }},
      // No infinities: max 448 = 1.75 * 2^8.
      {"f8E4M3FN", 8, [](Type t) { return isa<Float8E4M3FNType>(t); }},
  };
  return table;
}

std::optional<int> kimi::exponentHeadroom(Type elementType) {
  for (const ExponentHeadroom &row : exponentHeadroomTable())
    if (row.matches(elementType))
      return row.headroom;
  return std::nullopt;
}

double kimi::denseExponent(int64_t chunk, double lower) {
  return static_cast<double>(chunk) * std::fabs(lower) * M_LOG2E;
}

std::optional<int64_t> kimi::chooseDenseChunk(double lower, int headroom) {
  assert(std::isfinite(lower) && lower <= 0.0 && "expected a finite L <= 0");
  double budget = headroom - kHeadroomMarginBits;
  for (int64_t chunk = kMaxChunk; chunk >= kMinChunk; chunk /= 2)
    if (denseExponent(chunk, lower) < budget)
      return chunk;
  return std::nullopt;
}

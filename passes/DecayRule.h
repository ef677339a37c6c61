//===- DecayRule.h - chunk length from a proven decay bound -----*- C++ -*-===//
//
// The rule that turns a proven lower bound L of the KDA log decay g into a
// chunk length C and a diagonal strategy. Inside a chunk, G = cumsum(g)
// lies in [C*L, 0], and the dense diagonal tile multiplies operands rescaled
// by exp(G) and exp(-G), whose binary exponents reach C*|L|*log2(e). That
// must stay below the operand type's exponent headroom (its largest binary
// exponent) minus a safety margin. See docs/passes/decay-bound.md.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_PASSES_DECAYRULE_H
#define KIMI_PASSES_DECAYRULE_H

#include "mlir/IR/Types.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <optional>

namespace kimi {

/// One row of the exponent headroom table.
struct ExponentHeadroom {
  llvm::StringLiteral type;         // MLIR spelling of the element type
  int headroom;                     // largest binary exponent of a finite value
  bool (*matches)(mlir::Type type); // whether `type` is this element type
};

/// The table, in the order of docs/passes/decay-bound.md: bf16, f16, f32,
/// tf32, f64, f8E5M2, f8E4M3FN.
llvm::ArrayRef<ExponentHeadroom> exponentHeadroomTable();

/// Bits subtracted from the headroom: the smallest normal exponent of an
/// IEEE-style format is 1 - headroom, so the margin keeps the query side
/// q * exp(G) >= 2^-(C|L|log2 e) normal, and it absorbs the rounding of the
/// cumulative sum and of exp.
constexpr int kHeadroomMarginBits = 1;

/// Chunk lengths: powers of two in [kMinChunk, kMaxChunk]; the pairwise
/// (log-space) path uses kPairwiseChunk.
constexpr int64_t kMinChunk = 16;
constexpr int64_t kMaxChunk = 64;
constexpr int64_t kPairwiseChunk = 64;

/// The headroom of a float element type, from the table; std::nullopt for
/// other types (the dense path is then never chosen).
std::optional<int> exponentHeadroom(mlir::Type elementType);

/// The binary exponent the rescaled operands of a dense tile reach:
/// C * |L| * log2(e).
double denseExponent(int64_t chunk, double lower);

/// The largest power-of-two chunk C in [kMinChunk, kMaxChunk] with
/// denseExponent(C, lower) < headroom - kHeadroomMarginBits, or std::nullopt
/// when even kMinChunk does not fit. Requires lower <= 0 and finite.
std::optional<int64_t> chooseDenseChunk(double lower, int headroom);

} // namespace kimi

#endif // KIMI_PASSES_DECAYRULE_H

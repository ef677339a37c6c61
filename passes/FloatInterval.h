//===- FloatInterval.h - intervals of reals with open/closed ends -*- C++ -*-===//
//
// The value of the decay-bound lattice: a set {x : lo <(=) x <(=) hi} of real
// numbers whose ends are each open or closed and possibly infinite, plus an
// "uninitialized" bottom element. The arithmetic below encloses the exact
// result of an op applied to every pair of members; with a rounding format it
// also encloses what IEEE round-to-nearest evaluation in that format can
// return (see docs/passes/decay-bound.md, "Rounding").
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_PASSES_FLOATINTERVAL_H
#define KIMI_PASSES_FLOATINTERVAL_H

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/raw_ostream.h"
#include <limits>
#include <string>

namespace kimi {

/// A closed, open or half-open interval of reals, possibly unbounded, or the
/// uninitialized element (no information yet; the bottom of the lattice).
/// Infinite ends are always open: `-inf`/`+inf` mean "unbounded", and values
/// that overflow to an infinity are inside an unbounded end. NaN is not
/// modelled: an interval bounds the non-NaN values of an SSA value.
class FloatInterval {
public:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  /// The uninitialized (bottom) element.
  FloatInterval() = default;

  /// `{x : lo <(=) x <(=) hi}`; infinite ends become open. Requires a
  /// non-empty set: `lo <= hi`, and `lo == hi` only with both ends closed.
  static FloatInterval get(double lo, double hi, bool loOpen, bool hiOpen);
  static FloatInterval closed(double lo, double hi) {
    return get(lo, hi, false, false);
  }
  static FloatInterval open(double lo, double hi) {
    return get(lo, hi, true, true);
  }
  static FloatInterval point(double v) { return get(v, v, false, false); }
  /// (-inf, +inf): nothing is known (function arguments, weights, ...).
  static FloatInterval unbounded() { return open(-kInf, kInf); }

  bool isUninitialized() const { return !initialized; }
  double lower() const { return lo; }
  double upper() const { return hi; }
  bool isLowerOpen() const { return loOpen; }
  bool isUpperOpen() const { return hiOpen; }
  bool isLowerBounded() const { return initialized && lo != -kInf; }
  bool isUpperBounded() const { return initialized && hi != kInf; }
  bool isBounded() const { return isLowerBounded() && isUpperBounded(); }
  bool isUnbounded() const {
    return initialized && lo == -kInf && hi == kInf;
  }
  bool contains(double v) const;
  /// Copy with finite ends closed (what rounding to a format does to them).
  FloatInterval closedEnds() const;

  /// The hull of both (the lattice join); uninitialized is the identity.
  static FloatInterval join(const FloatInterval &lhs, const FloatInterval &rhs);

  bool operator==(const FloatInterval &rhs) const;
  bool operator!=(const FloatInterval &rhs) const { return !(*this == rhs); }

  /// Prints `[-5, 0)`, `(-inf, 0]`, `<uninitialized>`.
  void print(llvm::raw_ostream &os) const;
  std::string str() const;

private:
  bool initialized = false;
  double lo = 0.0, hi = 0.0;
  bool loOpen = false, hiOpen = false;
};

inline llvm::raw_ostream &operator<<(llvm::raw_ostream &os,
                                     const FloatInterval &interval) {
  interval.print(os);
  return os;
}

/// Shortest text for a bound: `-5`, `0.5`, `1.0000001`, `-inf`.
std::string formatBound(double v);

/// Interval arithmetic. Every function encloses the exact real-valued result
/// of the op over all members of its operands. `format`, when given, is the
/// floating-point format the op computes in: ends are then rounded outward
/// to that format and finite ends are closed, because round-to-nearest can
/// return a bound that the exact result only approaches. With no format the
/// ends are computed in f64 rounded outward and keep their open/closed kind
/// (exact real arithmetic). Uninitialized operands give uninitialized results.
namespace interval {
using Format = const llvm::fltSemantics *;

FloatInterval add(const FloatInterval &a, const FloatInterval &b, Format f);
FloatInterval sub(const FloatInterval &a, const FloatInterval &b, Format f);
FloatInterval mul(const FloatInterval &a, const FloatInterval &b, Format f);
/// (-inf, +inf) when `b` contains 0.
FloatInterval div(const FloatInterval &a, const FloatInterval &b, Format f);
FloatInterval neg(const FloatInterval &a);
FloatInterval abs(const FloatInterval &a);
FloatInterval max(const FloatInterval &a, const FloatInterval &b);
FloatInterval min(const FloatInterval &a, const FloatInterval &b);

/// Library functions: assumed monotone, within `kMathUlps` ulps of the result
/// format and inside their mathematical range (exp >= 0, |tanh| <= 1).
constexpr int kMathUlps = 2;
FloatInterval exp(const FloatInterval &a, Format f);
/// (-inf, +inf) when no member is in the domain (x > 0, resp. x > -1).
FloatInterval log(const FloatInterval &a, Format f);
FloatInterval log1p(const FloatInterval &a, Format f);
FloatInterval tanh(const FloatInterval &a, Format f);

/// Rounding to a (narrower) format, e.g. arith.truncf: ends rounded outward
/// and closed; values beyond the format's range become unbounded ends.
FloatInterval roundTo(const FloatInterval &a, const llvm::fltSemantics &f);
} // namespace interval

} // namespace kimi

#endif // KIMI_PASSES_FLOATINTERVAL_H

//===- FloatInterval.cpp - intervals of reals with open/closed ends -------===//
//
// Interval arithmetic for the decay-bound proof. The ends of a result are
// computed with directed rounding (toward -inf for the lower end, +inf for
// the upper end) so that the enclosure survives the arithmetic of the
// analysis itself, either in f64 (exact real arithmetic) or in the format an
// op computes in (IEEE evaluation).
//
//===----------------------------------------------------------------------===//

#include "passes/FloatInterval.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace kimi;
using llvm::APFloat;
using llvm::APFloatBase;
using llvm::fltSemantics;

static constexpr double kInf = FloatInterval::kInf;

//===----------------------------------------------------------------------===//
// FloatInterval
//===----------------------------------------------------------------------===//

FloatInterval FloatInterval::get(double lo, double hi, bool loOpen,
                                 bool hiOpen) {
  assert(!std::isnan(lo) && !std::isnan(hi) && "NaN interval end");
  assert(lo <= hi && "empty interval");
  FloatInterval r;
  r.initialized = true;
  r.lo = lo;
  r.hi = hi;
  // Normalise: infinite ends are open (they mean "unbounded"); a point is
  // closed (an open point would be empty, and no rule produces one).
  r.loOpen = std::isinf(lo) || (loOpen && lo != hi);
  r.hiOpen = std::isinf(hi) || (hiOpen && lo != hi);
  // Normalise the sign of zero so that equal sets compare equal.
  if (r.lo == 0.0)
    r.lo = 0.0;
  if (r.hi == 0.0)
    r.hi = 0.0;
  return r;
}

bool FloatInterval::contains(double v) const {
  if (!initialized || std::isnan(v))
    return false;
  bool aboveLo = loOpen ? v > lo : v >= lo;
  bool belowHi = hiOpen ? v < hi : v <= hi;
  return aboveLo && belowHi;
}

FloatInterval FloatInterval::closedEnds() const {
  if (!initialized)
    return *this;
  return get(lo, hi, false, false);
}

FloatInterval FloatInterval::join(const FloatInterval &a,
                                  const FloatInterval &b) {
  if (!a.initialized)
    return b;
  if (!b.initialized)
    return a;
  double lo = std::min(a.lo, b.lo), hi = std::max(a.hi, b.hi);
  // An end of the hull is open only if it is open in every operand that
  // reaches it.
  bool loOpen = (a.lo != lo || a.loOpen) && (b.lo != lo || b.loOpen);
  bool hiOpen = (a.hi != hi || a.hiOpen) && (b.hi != hi || b.hiOpen);
  return get(lo, hi, loOpen, hiOpen);
}

bool FloatInterval::operator==(const FloatInterval &rhs) const {
  if (initialized != rhs.initialized)
    return false;
  if (!initialized)
    return true;
  return lo == rhs.lo && hi == rhs.hi && loOpen == rhs.loOpen &&
         hiOpen == rhs.hiOpen;
}

std::string kimi::formatBound(double v) {
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  if (v == 0.0)
    return "0";
  // The shortest decimal that reads back as the same double, with at least
  // the integer digits (so -20 does not print as -2e+01).
  char buf[40];
  double magnitude = std::fabs(v);
  int first = magnitude >= 1.0 && magnitude < 1e17
                  ? static_cast<int>(std::floor(std::log10(magnitude))) + 1
                  : 1;
  for (int precision = std::min(first, 17); precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

void FloatInterval::print(llvm::raw_ostream &os) const {
  if (!initialized) {
    os << "<uninitialized>";
    return;
  }
  os << (loOpen ? "(" : "[") << formatBound(lo) << ", " << formatBound(hi)
     << (hiOpen ? ")" : "]");
}

std::string FloatInterval::str() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  print(os);
  return s;
}

//===----------------------------------------------------------------------===//
// Directed rounding of interval ends
//===----------------------------------------------------------------------===//

namespace {
enum class Dir { Down, Up };
enum class BinOp { Add, Sub, Mul, Div };

/// One end of an interval, as an operand of a corner computation.
struct End {
  double v;
  bool open;
};

/// A candidate end of a result: the corner value rounded down and up, and
/// whether the exact corner value is a limit only (not attained).
struct Candidate {
  double down, up;
  bool open;
};
} // namespace

/// The format the ends are computed in: the op's format when it is no wider
/// than f64 (a wider format rounds less, so an f64 enclosure still holds),
/// f64 for exact real arithmetic.
static const fltSemantics &endFormat(interval::Format f) {
  if (f && APFloat::semanticsPrecision(*f) <= 53 &&
      APFloat::semanticsMaxExponent(*f) <= 1023)
    return *f;
  return APFloat::IEEEdouble();
}

static llvm::RoundingMode modeFor(Dir d) {
  return d == Dir::Down ? llvm::RoundingMode::TowardNegative
                        : llvm::RoundingMode::TowardPositive;
}

/// Converts an APFloat result of a directed operation back to double. An
/// infinity, or a NaN from a format without infinities, is an unbounded end.
static double toEnd(const APFloat &r, Dir d) {
  if (r.isNaN())
    return d == Dir::Down ? -kInf : kInf;
  if (r.isInfinity())
    return r.isNegative() ? -kInf : kInf;
  APFloat asDouble = r;
  bool losesInfo = false;
  (void)asDouble.convert(APFloat::IEEEdouble(), modeFor(d), &losesInfo);
  return asDouble.convertToDouble();
}

/// `v` rounded in direction `d` to format `s` (finite `v`).
static APFloat toFormat(double v, const fltSemantics &s, Dir d) {
  APFloat x(v);
  bool losesInfo = false;
  (void)x.convert(s, modeFor(d), &losesInfo);
  return x;
}

/// `x op y` for finite `x`, `y`, rounded in direction `d` in format `f`.
static double directed(BinOp op, double x, double y, Dir d,
                       interval::Format f) {
  const fltSemantics &s = endFormat(f);
  APFloat a = toFormat(x, s, d), b = toFormat(y, s, d);
  llvm::RoundingMode rm = modeFor(d);
  switch (op) {
  case BinOp::Add:
    (void)a.add(b, rm);
    break;
  case BinOp::Sub:
    (void)a.subtract(b, rm);
    break;
  case BinOp::Mul:
    (void)a.multiply(b, rm);
    break;
  case BinOp::Div:
    (void)a.divide(b, rm);
    break;
  }
  return toEnd(a, d);
}

/// Sum or difference of two ends, where an infinite operand wins (the
/// callers never combine opposite infinities).
static double addEnds(BinOp op, double x, double y, Dir d,
                      interval::Format f) {
  if (std::isinf(x) || std::isinf(y))
    return op == BinOp::Add ? x + y : x - y;
  return directed(op, x, y, d, f);
}

/// Moves a finite end outward by `ulps` steps of format `s`.
static double widen(double v, int ulps, Dir d, const fltSemantics &s) {
  if (std::isinf(v))
    return v;
  APFloat x = toFormat(v, s, d);
  for (int i = 0; i < ulps && !x.isInfinity() && !x.isNaN(); ++i)
    (void)x.next(/*nextDown=*/d == Dir::Down);
  return toEnd(x, d);
}

/// The interval spanned by `candidates`: the smallest `down` and the largest
/// `up`; an end is open when every candidate reaching it is a limit only.
static FloatInterval hullOf(llvm::ArrayRef<Candidate> candidates,
                            interval::Format f) {
  double lo = kInf, hi = -kInf;
  for (const Candidate &c : candidates) {
    lo = std::min(lo, c.down);
    hi = std::max(hi, c.up);
  }
  bool loOpen = true, hiOpen = true;
  for (const Candidate &c : candidates) {
    if (c.down == lo && !c.open)
      loOpen = false;
    if (c.up == hi && !c.open)
      hiOpen = false;
  }
  FloatInterval r = FloatInterval::get(lo, hi, loOpen, hiOpen);
  return f ? r.closedEnds() : r;
}

static bool anyUninitialized(const FloatInterval &a, const FloatInterval &b) {
  return a.isUninitialized() || b.isUninitialized();
}

//===----------------------------------------------------------------------===//
// Arithmetic
//===----------------------------------------------------------------------===//

FloatInterval interval::add(const FloatInterval &a, const FloatInterval &b,
                            Format f) {
  if (anyUninitialized(a, b))
    return {};
  FloatInterval r = FloatInterval::get(
      addEnds(BinOp::Add, a.lower(), b.lower(), Dir::Down, f),
      addEnds(BinOp::Add, a.upper(), b.upper(), Dir::Up, f),
      a.isLowerOpen() || b.isLowerOpen(), a.isUpperOpen() || b.isUpperOpen());
  return f ? r.closedEnds() : r;
}

FloatInterval interval::sub(const FloatInterval &a, const FloatInterval &b,
                            Format f) {
  if (anyUninitialized(a, b))
    return {};
  FloatInterval r = FloatInterval::get(
      addEnds(BinOp::Sub, a.lower(), b.upper(), Dir::Down, f),
      addEnds(BinOp::Sub, a.upper(), b.lower(), Dir::Up, f),
      a.isLowerOpen() || b.isUpperOpen(), a.isUpperOpen() || b.isLowerOpen());
  return f ? r.closedEnds() : r;
}

/// The product of two ends. Products with a zero factor are 0 (also against
/// an unbounded end: the zero is attained, or the other corners cover the
/// limit), and they are attained when a zero factor is a closed end.
static Candidate mulCorner(End x, End y, interval::Format f) {
  bool xZero = x.v == 0.0, yZero = y.v == 0.0;
  if (xZero || yZero) {
    bool attained = (xZero && !x.open) || (yZero && !y.open);
    return {0.0, 0.0, !attained};
  }
  if (std::isinf(x.v) || std::isinf(y.v)) {
    double v = (x.v < 0) != (y.v < 0) ? -kInf : kInf;
    return {v, v, true};
  }
  return {directed(BinOp::Mul, x.v, y.v, Dir::Down, f),
          directed(BinOp::Mul, x.v, y.v, Dir::Up, f), x.open || y.open};
}

FloatInterval interval::mul(const FloatInterval &a, const FloatInterval &b,
                            Format f) {
  if (anyUninitialized(a, b))
    return {};
  End aEnds[] = {{a.lower(), a.isLowerOpen()}, {a.upper(), a.isUpperOpen()}};
  End bEnds[] = {{b.lower(), b.isLowerOpen()}, {b.upper(), b.isUpperOpen()}};
  llvm::SmallVector<Candidate, 4> candidates;
  for (End x : aEnds)
    for (End y : bEnds)
      candidates.push_back(mulCorner(x, y, f));
  return hullOf(candidates, f);
}

/// `x / y` as the product `x * (1 / y)` for an end `y` of a divisor that
/// does not contain 0 (`divisorNegative` gives its sign): 1/0 at an open end
/// is an unbounded end, 1/inf is an open 0.
static Candidate divCorner(End x, End y, bool divisorNegative,
                           interval::Format f) {
  if (y.v == 0.0) {
    if (x.v == 0.0)
      return {0.0, 0.0, x.open};
    double v = (x.v < 0) != divisorNegative ? -kInf : kInf;
    return {v, v, true};
  }
  if (std::isinf(y.v)) {
    bool attained = x.v == 0.0 && !x.open;
    return {0.0, 0.0, !attained};
  }
  if (x.v == 0.0)
    return {0.0, 0.0, x.open};
  if (std::isinf(x.v)) {
    double v = (x.v < 0) != (y.v < 0) ? -kInf : kInf;
    return {v, v, true};
  }
  return {directed(BinOp::Div, x.v, y.v, Dir::Down, f),
          directed(BinOp::Div, x.v, y.v, Dir::Up, f), x.open || y.open};
}

FloatInterval interval::div(const FloatInterval &a, const FloatInterval &b,
                            Format f) {
  if (anyUninitialized(a, b))
    return {};
  if (b.contains(0.0) || (b.lower() < 0.0 && b.upper() > 0.0))
    return FloatInterval::unbounded();
  bool divisorNegative = b.upper() <= 0.0;
  End aEnds[] = {{a.lower(), a.isLowerOpen()}, {a.upper(), a.isUpperOpen()}};
  End bEnds[] = {{b.lower(), b.isLowerOpen()}, {b.upper(), b.isUpperOpen()}};
  llvm::SmallVector<Candidate, 4> candidates;
  for (End x : aEnds)
    for (End y : bEnds)
      candidates.push_back(divCorner(x, y, divisorNegative, f));
  return hullOf(candidates, f);
}

FloatInterval interval::neg(const FloatInterval &a) {
  if (a.isUninitialized())
    return a;
  return FloatInterval::get(-a.upper(), -a.lower(), a.isUpperOpen(),
                            a.isLowerOpen());
}

FloatInterval interval::abs(const FloatInterval &a) {
  if (a.isUninitialized() || a.lower() >= 0.0)
    return a;
  if (a.upper() <= 0.0)
    return neg(a);
  double fromBelow = -a.lower(), fromAbove = a.upper();
  double hi = std::max(fromBelow, fromAbove);
  bool hiOpen = (fromBelow != hi || a.isLowerOpen()) &&
                (fromAbove != hi || a.isUpperOpen());
  return FloatInterval::get(0.0, hi, /*loOpen=*/false, hiOpen);
}

FloatInterval interval::max(const FloatInterval &a, const FloatInterval &b) {
  if (anyUninitialized(a, b))
    return {};
  double lo, hi;
  bool loOpen, hiOpen;
  if (a.lower() != b.lower()) {
    const FloatInterval &m = a.lower() > b.lower() ? a : b;
    lo = m.lower();
    loOpen = m.isLowerOpen();
  } else {
    lo = a.lower();
    loOpen = a.isLowerOpen() || b.isLowerOpen();
  }
  if (a.upper() != b.upper()) {
    const FloatInterval &m = a.upper() > b.upper() ? a : b;
    hi = m.upper();
    hiOpen = m.isUpperOpen();
  } else {
    hi = a.upper();
    hiOpen = a.isUpperOpen() && b.isUpperOpen();
  }
  return FloatInterval::get(lo, hi, loOpen, hiOpen);
}

FloatInterval interval::min(const FloatInterval &a, const FloatInterval &b) {
  return neg(max(neg(a), neg(b)));
}

//===----------------------------------------------------------------------===//
// Library functions
//===----------------------------------------------------------------------===//

namespace {
/// A monotone increasing library function with its mathematical range.
struct MonotoneFn {
  double (*eval)(double);
  double rangeLo, rangeHi; // the range; its finite limits are never
                           // attained in real arithmetic
  double exactAt;          // an input whose value is exactly known
  double exactValue;
};
} // namespace

/// One end of `fn` over an end of the operand.
static double fnEnd(const MonotoneFn &fn, double x, Dir d,
                    interval::Format f) {
  if (std::isinf(x))
    return x < 0 ? fn.rangeLo : fn.rangeHi;
  if (x == fn.exactAt)
    return fn.exactValue;
  double v = fn.eval(x);
  if (std::isnan(v))
    return d == Dir::Down ? -kInf : kInf;
  // libm (f64) is within 1 ulp; a format's library within kMathUlps ulps.
  v = widen(v, 1, d, APFloat::IEEEdouble());
  if (f)
    v = widen(v, interval::kMathUlps, d, endFormat(f));
  return std::clamp(v, fn.rangeLo, fn.rangeHi);
}

static FloatInterval applyMonotone(const MonotoneFn &fn, const FloatInterval &a,
                                   interval::Format f) {
  if (a.isUninitialized())
    return a;
  double lo = fnEnd(fn, a.lower(), Dir::Down, f);
  double hi = fnEnd(fn, a.upper(), Dir::Up, f);
  // The finite limits of the range (exp -> 0, tanh -> +-1) are approached
  // but never attained in real arithmetic; IEEE evaluation (closed ends
  // below) does reach them.
  bool loOpen = a.isLowerOpen() || lo == fn.rangeLo;
  bool hiOpen = a.isUpperOpen() || hi == fn.rangeHi;
  if (lo == hi) // a clamped point
    loOpen = hiOpen = false;
  FloatInterval r = FloatInterval::get(lo, hi, loOpen, hiOpen);
  return f ? r.closedEnds() : r;
}

static double evalExp(double x) { return std::exp(x); }
static double evalLog(double x) { return std::log(x); }
static double evalLog1p(double x) { return std::log1p(x); }
static double evalTanh(double x) { return std::tanh(x); }

FloatInterval interval::exp(const FloatInterval &a, Format f) {
  return applyMonotone({evalExp, 0.0, kInf, 0.0, 1.0}, a, f);
}

FloatInterval interval::tanh(const FloatInterval &a, Format f) {
  return applyMonotone({evalTanh, -1.0, 1.0, 0.0, 0.0}, a, f);
}

/// log-like functions defined for x > domainLo, tending to -inf there.
static FloatInterval logLike(double (*eval)(double), double domainLo,
                             double exactAt, const FloatInterval &a,
                             interval::Format f) {
  if (a.isUninitialized())
    return a;
  if (!(a.upper() > domainLo))
    return FloatInterval::unbounded(); // no member in the domain
  FloatInterval inDomain = a;
  if (!(a.lower() > domainLo))
    inDomain = FloatInterval::get(-kInf, a.upper(), true, a.isUpperOpen());
  MonotoneFn fn{eval, -kInf, kInf, exactAt, 0.0};
  if (inDomain.lower() == -kInf) {
    // Members at or below the domain's edge give -inf (or NaN): unbounded.
    double hi = fnEnd(fn, inDomain.upper(), Dir::Up, f);
    FloatInterval r = FloatInterval::get(-kInf, hi, true, a.isUpperOpen());
    return f ? r.closedEnds() : r;
  }
  return applyMonotone(fn, inDomain, f);
}

FloatInterval interval::log(const FloatInterval &a, Format f) {
  return logLike(evalLog, 0.0, 1.0, a, f);
}

FloatInterval interval::log1p(const FloatInterval &a, Format f) {
  return logLike(evalLog1p, -1.0, 0.0, a, f);
}

FloatInterval interval::roundTo(const FloatInterval &a,
                                const llvm::fltSemantics &f) {
  if (a.isUninitialized())
    return a;
  const fltSemantics &s = endFormat(&f);
  auto round = [&](double v, Dir d) {
    if (std::isinf(v))
      return v;
    return toEnd(toFormat(v, s, d), d);
  };
  return FloatInterval::closed(round(a.lower(), Dir::Down),
                               round(a.upper(), Dir::Up));
}

//===- DecayBoundTest.cpp - interval arithmetic and the chunk rule --------===//
//
// Unit tests of the pieces under the decay-bound proof: FloatInterval
// arithmetic (signs, open ends, unbounded ends, directed rounding), the
// exponent headroom table and the chunk choice, and the interval attribute.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiAttrs.h"
#include "dialects/Kimi/KimiDialect.h"
#include "passes/DecayRule.h"
#include "passes/FloatInterval.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/AsmParser/AsmParser.h"
#include "gtest/gtest.h"

#include <cmath>

using namespace kimi;
using I = FloatInterval;
namespace iv = kimi::interval;

namespace {

constexpr double inf = FloatInterval::kInf;
const llvm::fltSemantics *f32 = &llvm::APFloat::IEEEsingle();
const llvm::fltSemantics *bf16 = &llvm::APFloat::BFloat();

TEST(FloatInterval, NormalisesInfiniteEndsAndPrints) {
  I top = I::get(-inf, inf, false, false);
  EXPECT_TRUE(top.isLowerOpen());
  EXPECT_TRUE(top.isUpperOpen());
  EXPECT_EQ(top, I::unbounded());
  EXPECT_EQ(I::get(-5, 0, true, false).str(), "(-5, 0]");
  EXPECT_EQ(I::unbounded().str(), "(-inf, inf)");
  EXPECT_EQ(I().str(), "<uninitialized>");
  EXPECT_EQ(formatBound(-20), "-20");
  EXPECT_EQ(formatBound(0.1), "0.1");
  EXPECT_EQ(formatBound(-5.03125), "-5.03125");
}

TEST(FloatInterval, JoinIsHullAndUninitializedIsIdentity) {
  I a = I::get(-5, 0, true, true), b = I::closed(-5, -1);
  EXPECT_EQ(I::join(a, b), I::get(-5, 0, false, true));
  EXPECT_EQ(I::join(I(), a), a);
  EXPECT_EQ(I::join(a, I()), a);
  EXPECT_EQ(I::join(I::point(1), I::point(3)), I::closed(1, 3));
}

TEST(FloatInterval, MultiplicationHandlesSigns) {
  EXPECT_EQ(iv::mul(I::closed(-2, 3), I::closed(-4, 5), nullptr),
            I::closed(-12, 15));
  EXPECT_EQ(iv::mul(I::closed(-3, -2), I::closed(-5, -4), nullptr),
            I::closed(8, 15));
  EXPECT_EQ(iv::mul(I::closed(-3, -2), I::closed(4, 5), nullptr),
            I::closed(-15, -8));
  // L * sigmoid: (-5, 0) exactly.
  EXPECT_EQ(iv::mul(I::point(-5), I::open(0, 1), nullptr), I::open(-5, 0));
}

TEST(FloatInterval, MultiplicationWithOpenAndUnboundedEnds) {
  // (0, 1] * [2, inf) = (0, inf).
  EXPECT_EQ(iv::mul(I::get(0, 1, true, false), I::get(2, inf, false, true),
                    nullptr),
            I::open(0, inf));
  // A closed zero times anything is attained: [0, 1] * [2, inf) = [0, inf).
  EXPECT_EQ(iv::mul(I::closed(0, 1), I::get(2, inf, false, true), nullptr),
            I::get(0, inf, false, true));
  // The point 0 times an unbounded interval is 0.
  EXPECT_EQ(iv::mul(I::point(0), I::unbounded(), nullptr), I::point(0));
  // (-1, 2) * 3 = (-3, 6).
  EXPECT_EQ(iv::mul(I::open(-1, 2), I::point(3), nullptr), I::open(-3, 6));
}

TEST(FloatInterval, DivisionByAnIntervalContainingZeroIsUnbounded) {
  EXPECT_EQ(iv::div(I::point(1), I::closed(-1, 2), nullptr), I::unbounded());
  EXPECT_EQ(iv::div(I::point(1), I::closed(0, 2), nullptr), I::unbounded());
  EXPECT_EQ(iv::div(I::point(1), I::get(-1, 0, false, false), nullptr),
            I::unbounded());
  // An open zero end is not contained: 1 / (0, 1] = [1, inf).
  EXPECT_EQ(iv::div(I::point(1), I::get(0, 1, true, false), nullptr),
            I::get(1, inf, false, true));
  // 1 / (1, inf) = (0, 1); [1, inf) / [1, inf) = (0, inf).
  EXPECT_EQ(iv::div(I::point(1), I::open(1, inf), nullptr), I::open(0, 1));
  EXPECT_EQ(iv::div(I::get(1, inf, false, true), I::get(1, inf, false, true),
                    nullptr),
            I::open(0, inf));
  // Negative divisors: [2, 4] / [-2, -1] = [-4, -1].
  EXPECT_EQ(iv::div(I::closed(2, 4), I::closed(-2, -1), nullptr),
            I::closed(-4, -1));
}

TEST(FloatInterval, ExactEndsAreRoundedOutward) {
  // 0.1 + 0.2 is not a double: the ends bracket the real sum.
  I sum = iv::add(I::point(0.1), I::point(0.2), nullptr);
  EXPECT_LT(sum.lower(), sum.upper());
  EXPECT_EQ(std::nextafter(sum.lower(), inf), sum.upper());
  EXPECT_FALSE(sum.isLowerOpen());
}

TEST(FloatInterval, IeeeEvaluationRoundsToTheFormatAndClosesEnds) {
  // 1 + 2^-10 in bf16 (8 significant bits) lies between 1 and 1 + 2^-7.
  I sum = iv::add(I::point(1), I::point(std::ldexp(1.0, -10)), bf16);
  EXPECT_EQ(sum, I::closed(1, 1 + std::ldexp(1.0, -7)));
  // (-5, 0) * [0.5, 1] is (-5, 0) exactly, but f32 reaches both ends.
  EXPECT_EQ(iv::mul(I::open(-5, 0), I::closed(0.5, 1), nullptr),
            I::open(-5, 0));
  EXPECT_EQ(iv::mul(I::open(-5, 0), I::closed(0.5, 1), f32), I::closed(-5, 0));
  // Cancellation: ((-5, 0) + 1e8) - 1e8 in f32 is [-8, 0].
  I big = I::point(1e8);
  EXPECT_EQ(iv::sub(iv::add(I::open(-5, 0), big, f32), big, f32),
            I::closed(-8, 0));
}

TEST(FloatInterval, RoundToNarrowerFormat) {
  EXPECT_EQ(iv::roundTo(I::point(-5.01), *bf16), I::closed(-5.03125, -5));
  // Beyond f16's range the upper end is unbounded.
  EXPECT_EQ(iv::roundTo(I::closed(0, 70000), llvm::APFloat::IEEEhalf()),
            I::get(0, inf, false, true));
}

TEST(FloatInterval, LibraryFunctions) {
  EXPECT_EQ(iv::exp(I::point(0), nullptr), I::point(1));
  EXPECT_EQ(iv::exp(I::unbounded(), nullptr), I::open(0, inf));
  EXPECT_EQ(iv::exp(I::unbounded(), f32), I::get(0, inf, false, true));
  EXPECT_EQ(iv::tanh(I::unbounded(), nullptr), I::open(-1, 1));
  EXPECT_EQ(iv::tanh(I::unbounded(), f32), I::closed(-1, 1));
  EXPECT_EQ(iv::log(I::closed(-3, -1), nullptr), I::unbounded());
  EXPECT_EQ(iv::log(I::closed(0, 1), nullptr), I::get(-inf, 0, true, false));
  EXPECT_EQ(iv::log1p(I::get(-1, 0, true, false), nullptr),
            I::get(-inf, 0, true, false));
  // exp(1) enclosed within the allowed error, around e.
  I e = iv::exp(I::point(1), f32);
  EXPECT_LT(e.lower(), M_E);
  EXPECT_GT(e.upper(), M_E);
  EXPECT_LT(e.upper() - e.lower(), 1e-5);
}

TEST(FloatInterval, MaxMinKeepOpenEndsPrecisely) {
  // max((-5, 0), [-5, -3]) >= the open -5 end: (-5, 0).
  EXPECT_EQ(iv::max(I::open(-5, 0), I::closed(-5, -3)), I::open(-5, 0));
  // max((-inf, 0], -5) = [-5, 0].
  EXPECT_EQ(iv::max(I::get(-inf, 0, true, false), I::point(-5)),
            I::closed(-5, 0));
  // min((-inf, 0), -3) = (-inf, -3].
  EXPECT_EQ(iv::min(I::open(-inf, 0), I::point(-3)),
            I::get(-inf, -3, true, false));
  EXPECT_EQ(iv::abs(I::closed(-2, 3)), I::closed(0, 3));
  EXPECT_EQ(iv::abs(I::open(-4, -1)), I::open(1, 4));
}

TEST(DecayRule, HeadroomTableMatchesTheFormats) {
  mlir::MLIRContext ctx;
  for (const ExponentHeadroom &row : exponentHeadroomTable()) {
    mlir::Type type = mlir::parseType(row.type, &ctx);
    ASSERT_TRUE(type) << row.type.str();
    auto floatType = mlir::cast<mlir::FloatType>(type);
    EXPECT_EQ(row.headroom,
              llvm::APFloat::semanticsMaxExponent(floatType.getFloatSemantics()))
        << row.type.str();
    EXPECT_EQ(exponentHeadroom(type), row.headroom) << row.type.str();
  }
  EXPECT_EQ(exponentHeadroom(mlir::BFloat16Type::get(&ctx)), 127);
  EXPECT_EQ(exponentHeadroom(mlir::Float16Type::get(&ctx)), 15);
  EXPECT_EQ(exponentHeadroom(mlir::Float8E4M3FNUZType::get(&ctx)),
            std::nullopt);
  EXPECT_EQ(exponentHeadroom(mlir::IntegerType::get(&ctx, 8)), std::nullopt);
}

TEST(DecayRule, ChoosesTheLargestChunkUnderTheHeadroom) {
  // K3: L = -5 with bf16: 16 * 5 * log2(e) = 115.4 < 126, 32 -> 230.8.
  EXPECT_EQ(chooseDenseChunk(-5.0, 127), 16);
  EXPECT_NEAR(denseExponent(16, -5.0), 115.4, 0.05);
  EXPECT_EQ(chooseDenseChunk(-2.5, 127), 32);
  EXPECT_EQ(chooseDenseChunk(-1.0, 127), 64);
  EXPECT_EQ(chooseDenseChunk(0.0, 127), 64);
  EXPECT_EQ(chooseDenseChunk(-5.0, 15), std::nullopt);
  EXPECT_EQ(chooseDenseChunk(-0.5, 15), 16);
  EXPECT_EQ(chooseDenseChunk(-20.0, 127), std::nullopt);
  // The margin is strict: 16 * |L| * log2(e) must be below 126, not 127.
  double edge = 126.0 / denseExponent(16, -1.0);
  EXPECT_EQ(chooseDenseChunk(-edge, 127), std::nullopt);
  EXPECT_EQ(chooseDenseChunk(-edge * 0.999, 127), 16);
}

TEST(IntervalAttr, RoundTripsAndVerifies) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<KimiDialect>();
  for (llvm::StringRef text :
       {"#kimi.interval<lower = -5.000000e+00, upper = 0.000000e+00>",
        "#kimi.interval<lower = -5.000000e+00 open, upper = 0.000000e+00 open>",
        "#kimi.interval<upper = 0.000000e+00>",
        "#kimi.interval<lower = 1.000000e+00 open>", "#kimi.interval<>"}) {
    mlir::Attribute attr = mlir::parseAttribute(text, &ctx);
    ASSERT_TRUE(attr) << text.str();
    std::string printed;
    llvm::raw_string_ostream os(printed);
    attr.print(os);
    EXPECT_EQ(printed, text.str());
  }
  // An empty interval is refused.
  ctx.getDiagEngine().registerHandler([](mlir::Diagnostic &) {});
  EXPECT_FALSE(mlir::parseAttribute(
      "#kimi.interval<lower = 1.0, upper = 0.0>", &ctx));
  EXPECT_FALSE(mlir::parseAttribute(
      "#kimi.interval<lower = 1.0 open, upper = 1.0>", &ctx));
}

} // namespace

//===- ChunkKDA.cpp - kimi-chunk-kda --------------------------------------===//
//
// Chooses the chunk length and the diagonal strategy of every kimi.kda from
// the proven lower bound of its log decay (see Passes.td, DecayRule.h and
// docs/passes/decay-bound.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/Kimi/KimiOps.h"
#include "passes/DecayBoundAnalysis.h"
#include "passes/DecayRule.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/Support/Format.h"

#include <cmath>

namespace kimi {
#define GEN_PASS_DEF_KIMICHUNKKDA
#include "passes/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {
/// What the proof allows for one kimi.kda.
struct Decision {
  std::optional<double> lower; // the proven finite lower bound, if <= 0
  std::optional<int64_t> denseChunk; // set when dense tiles are proven safe
  std::string reason; // why dense tiles are not proven (empty when they are)
};
} // namespace

/// `<value> (range <interval>) at <location>` for the value that `bad`
/// traces back to.
static std::string culprit(const DecayBounds &bounds, Value g,
                           llvm::function_ref<bool(const FloatInterval &)> bad) {
  Value origin = bounds.blame(g, bad);
  return describeValue(origin) + " (range " + bounds.getInterval(origin).str() +
         ") at " + formatLocation(valueLocation(origin));
}

static std::string typeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

static Decision decide(KdaOp kda, const DecayBounds &bounds) {
  Decision d;
  Value g = kda.getG();
  FloatInterval range = bounds.getInterval(g);
  if (range.isUninitialized()) {
    d.reason = "'g' was not reached by the decay-bound analysis (dead code)";
    return d;
  }
  if (range.isLowerBounded() && range.lower() <= 0.0)
    d.lower = range.lower();

  // The operand type whose headroom limits the rescaled operands: the
  // narrower of q and k.
  std::optional<int> headroom;
  Type limiting;
  for (Value operand : {kda.getQ(), kda.getK()}) {
    Type element = getElementTypeOrSelf(operand.getType());
    std::optional<int> h = exponentHeadroom(element);
    if (!h) {
      d.reason = "no exponent headroom is known for the operand type " +
                 typeName(element) + " of 'q'/'k'";
      return d;
    }
    if (!headroom || *h < *headroom) {
      headroom = h;
      limiting = element;
    }
  }

  if (!range.isLowerBounded()) {
    d.reason = "lower bound of 'g' is unbounded: defeated by " +
               culprit(bounds, g, [](const FloatInterval &r) {
                 return !r.isLowerBounded();
               });
    return d;
  }
  if (range.upper() > 0.0) {
    d.reason = "'g' may be positive (range " + range.str() +
               "), outside kimi.kda's g <= 0: defeated by " +
               culprit(bounds, g, [](const FloatInterval &r) {
                 return r.upper() > 0.0;
               });
    return d;
  }
  d.denseChunk = chooseDenseChunk(range.lower(), *headroom);
  if (d.denseChunk)
    return d;

  // Even the smallest chunk is too long: name where the weak bound is set.
  double budget = *headroom - kHeadroomMarginBits;
  double weakest = budget / denseExponent(kMinChunk, -1.0); // |L| must be below
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "lower bound " << formatBound(range.lower()) << " of 'g' is too weak "
     << "for " << typeName(limiting) << " operands: " << kMinChunk << " * "
     << formatBound(-range.lower()) << " * log2(e) = "
     << llvm::format("%.1f", denseExponent(kMinChunk, range.lower()))
     << " is not below the exponent headroom " << *headroom << " - "
     << kHeadroomMarginBits << " (needs L > "
     // Rounded toward 0, so the printed condition is sufficient.
     << llvm::format("%.3f", -std::floor(weakest * 1000.0) / 1000.0)
     << "); bound from "
     << culprit(bounds, g, [&](const FloatInterval &r) {
          return !(r.lower() > -weakest);
        });
  d.reason = text;
  return d;
}

namespace {
struct ChunkKdaPass : kimi::impl::KimiChunkKdaBase<ChunkKdaPass> {
  using KimiChunkKdaBase::KimiChunkKdaBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    DecayBounds bounds(module, RoundingModel::ieee);
    if (!bounds.succeeded()) {
      module.emitError("kimi-chunk-kda: the decay-bound analysis did not "
                       "reach a fixpoint");
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    module.walk([&](KdaOp kda) {
      Decision d = decide(kda, bounds);
      DiagStrategy diag = DiagStrategy::pairwise;
      int64_t chunk = kPairwiseChunk;
      switch (force) {
      case DiagForce::none:
        if (d.denseChunk) {
          diag = DiagStrategy::dense;
          chunk = *d.denseChunk;
        } else {
          kda.emitRemark() << "kimi.kda keeps pairwise diagonal tiles (chunk = "
                           << kPairwiseChunk << "): " << d.reason;
        }
        break;
      case DiagForce::dense:
        diag = DiagStrategy::dense;
        if (d.denseChunk) {
          chunk = *d.denseChunk;
        } else {
          chunk = kMinChunk;
          kda.emitWarning()
              << "force=dense on kimi.kda without a proven decay bound: the "
                 "rescaled operands of its dense diagonal tiles (chunk = "
              << kMinChunk << ") may overflow; " << d.reason;
        }
        break;
      case DiagForce::pairwise:
        break;
      }
      kda.setDecayAttr(DecayAttr::get(ctx, d.lower, chunk, diag));
    });
  }
};
} // namespace

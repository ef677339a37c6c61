//===- DecayBoundAnalysis.h - interval analysis of KDA gates ----*- C++ -*-===//
//
// A sparse forward dataflow analysis (MLIR DataFlow framework) that computes,
// for every float SSA value, an interval enclosing all its elements. It is
// the proof behind `kimi-prove-decay-bounds` and `kimi-chunk-kda`: the lower
// bound of the `g` operand of a `kimi.kda` decides whether the diagonal
// tiles of chunked KDA can be dense matmuls. Rules and rationale:
// docs/passes/decay-bound.md.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_PASSES_DECAYBOUNDANALYSIS_H
#define KIMI_PASSES_DECAYBOUNDANALYSIS_H

#include "passes/FloatInterval.h"

#include "mlir/Analysis/DataFlow/SparseAnalysis.h"
#include "mlir/Analysis/DataFlowFramework.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include <optional>
#include <string>

namespace kimi {

/// How the analysis treats floating-point evaluation.
enum class RoundingModel {
  /// Sound for IEEE round-to-nearest evaluation in each op's element type:
  /// ends are rounded outward to the type and finite ends closed after
  /// every rounding op. The default, and what the chunking decision uses.
  ieee,
  /// Exact real arithmetic on the ops' reference semantics (ends computed in
  /// f64 with outward rounding; open ends stay open). For reading the math
  /// of a gate, e.g. sigmoid in (0, 1); not a proof about f32 evaluation.
  exact,
};

/// The lattice element: one FloatInterval per SSA value. Intervals form a
/// lattice of infinite height (a loop or a recursion that subtracts 1 would
/// grow an end forever), so joins widen: once a value's interval has grown
/// kWidenAfter times, every end that grows again jumps to -inf / +inf.
class FloatIntervalLattice : public mlir::dataflow::Lattice<FloatInterval> {
public:
  using Lattice::Lattice;

  static constexpr unsigned kWidenAfter = 8;

  mlir::ChangeResult
  join(const mlir::dataflow::AbstractSparseLattice &rhs) override {
    return join(static_cast<const FloatIntervalLattice &>(rhs).getValue());
  }
  mlir::ChangeResult join(const FloatInterval &rhs);

private:
  unsigned growths = 0;
};

/// The dataflow analysis. Unknown values (function arguments of public
/// functions, results of ops without a rule such as `kimi.linear`, weights)
/// are (-inf, +inf). Needs DeadCodeAnalysis (and SparseConstantPropagation)
/// in the same solver; DecayBounds below sets that up.
class DecayBoundAnalysis
    : public mlir::dataflow::SparseForwardDataFlowAnalysis<
          FloatIntervalLattice> {
public:
  DecayBoundAnalysis(mlir::DataFlowSolver &solver, RoundingModel model)
      : SparseForwardDataFlowAnalysis(solver), model(model) {}

  void setToEntryState(FloatIntervalLattice *lattice) override;

  mlir::LogicalResult
  visitOperation(mlir::Operation *op,
                 llvm::ArrayRef<const FloatIntervalLattice *> operands,
                 llvm::ArrayRef<FloatIntervalLattice *> results) override;

private:
  RoundingModel model;
};

/// Whether the analysis has a transfer rule for `op` (otherwise its results
/// are unbounded).
bool hasIntervalRule(mlir::Operation *op);

/// Whether `op`'s rule ignores its operands (constants, `kimi.kda_gate`).
bool isIntervalSource(mlir::Operation *op);

/// The transfer rule of `op` for result `resultIndex`, given one interval
/// per operand (entries of non-float operands are not read). Returns
/// std::nullopt when `op` has no rule.
std::optional<FloatInterval>
transferInterval(mlir::Operation *op, llvm::ArrayRef<FloatInterval> operands,
                 unsigned resultIndex, RoundingModel model);

/// Whether `type` (or its element type) is a float type.
bool hasFloatElements(mlir::Type type);

/// Runs DecayBoundAnalysis (with DeadCodeAnalysis and constant propagation)
/// over `root` and answers queries about the result.
class DecayBounds {
public:
  explicit DecayBounds(mlir::Operation *root,
                       RoundingModel model = RoundingModel::ieee);
  DecayBounds(const DecayBounds &) = delete;
  DecayBounds &operator=(const DecayBounds &) = delete;

  /// Whether the solver ran to a fixpoint.
  bool succeeded() const { return ok; }

  /// The interval of `value`; uninitialized when the analysis never reached
  /// it (dead code).
  FloatInterval getInterval(mlir::Value value) const;

  /// Follows the use-def chain from `value` to the value that makes `bad`
  /// hold: at each op with a rule, the walk continues into the first float
  /// operand for which `bad` holds (or, when the result is unbounded, into
  /// the first unbounded operand) and stops at a block argument, a source
  /// op, an op without a rule, or an op whose operands are all fine (that op
  /// made the interval bad).
  mlir::Value
  blame(mlir::Value value,
        llvm::function_ref<bool(const FloatInterval &)> bad) const;

private:
  mlir::DataFlowSolver solver;
  bool ok = false;
};

/// Names a value for diagnostics: `'kimi.kda_gate softplus' %0` or
/// `function argument %arg3 of @gate`.
std::string describeValue(mlir::Value value);

/// Where a value is defined: its op's location, or a block argument's.
mlir::Location valueLocation(mlir::Value value);

/// `file:line:col` for a file location (other kinds of locations are
/// unwrapped to the first file location inside them).
std::string formatLocation(mlir::Location loc);

} // namespace kimi

#endif // KIMI_PASSES_DECAYBOUNDANALYSIS_H

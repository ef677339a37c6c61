//===- LowerCollectives.cpp - shard collectives -> runtime comm calls -----===//
//
// The per-rank code that shard-partition writes talks to the other ranks
// through `shard` ops. On the CPU target each becomes a call to a function
// of the shared object's comm shim (`kimi_rt_*`, docs/runtime-abi.md), which
// forwards to the Communicator the runtime installed at load time:
//
//   shard.all_reduce       -> kimi_rt_all_reduce_<t>(send, recv, op, group)
//   shard.all_gather       -> kimi_rt_all_gather_<t>(send, recv, group)
//                             + transpose
//   shard.reduce_scatter   -> kimi_rt_reduce_scatter_<t>(send, recv, op, group)
//   shard.all_to_all       -> kimi_rt_all_to_all_<t>(send, recv, group)
//                             + transposes
//   shard.all_slice        -> tensor.extract_slice at this rank's block
//   shard.process_*_index  -> kimi_rt_rank() and index arithmetic
//
// `group` is the bit set of the grid axes the collective runs over (bit a:
// axis a): the ranks that share every other grid coordinate, ordered
// row-major over the group's axes. The runtime makes one communicator per
// axis set when it loads the model.
//
// Buffers: the operand is copied into a fresh contiguous buffer (the tensor
// may be a strided view), the result is a fresh buffer wrapped back into a
// tensor, so bufferization and deallocation see ordinary allocations.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "runtime/artifact/types.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"

namespace kimi {
#define GEN_PASS_DEF_KIMILOWERCOLLECTIVES
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace mlir::shard;

namespace {

class Lowering {
public:
  Lowering(ModuleOp module) : module(module), b(module.getContext()) {}

  LogicalResult run() {
    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (isa<ShardDialect>(op->getDialect()) && !isa<GridOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      b.setInsertionPoint(op);
      if (failed(lower(op)))
        return failure();
    }
    for (auto grid : llvm::make_early_inc_range(module.getOps<GridOp>()))
      grid.erase();
    return success();
  }

private:
  LogicalResult lower(Operation *op) {
    Location loc = op->getLoc();
    GridOp grid = gridOf(op);
    if (!grid)
      return op->emitOpError() << "names no shard.grid";
    if (!ShapedType::isStaticShape(grid.getShape()))
      return op->emitOpError() << "needs a static grid shape";
    if (auto x = dyn_cast<ProcessMultiIndexOp>(op)) {
      SmallVector<GridAxis> axes(x.getAxes());
      if (axes.empty())
        for (int64_t a = 0; a < grid.getRank(); ++a)
          axes.push_back(a);
      for (auto [r, a] : llvm::zip(x.getResults(), axes))
        r.replaceAllUsesWith(axisIndex(loc, grid, a));
      op->erase();
      return success();
    }
    if (auto x = dyn_cast<ProcessLinearIndexOp>(op)) {
      return replace(x, rank(loc));
    }
    if (auto x = dyn_cast<AllSliceOp>(op))
      return lowerAllSlice(x, grid);
    // Communication within the group of ranks that share every grid
    // coordinate outside `axes`.
    ArrayRef<GridAxis> axes;
    if (auto x = dyn_cast<AllReduceOp>(op))
      axes = x.getGridAxes();
    else if (auto x = dyn_cast<AllGatherOp>(op))
      axes = x.getGridAxes();
    else if (auto x = dyn_cast<ReduceScatterOp>(op))
      axes = x.getGridAxes();
    else if (auto x = dyn_cast<AllToAllOp>(op))
      axes = x.getGridAxes();
    else
      return op->emitOpError()
             << "has no lowering to the CPU runtime's communicator";
    if (grid.getRank() > static_cast<int64_t>(kimi::rt::kMaxGridAxes))
      return op->emitOpError() << "on a grid of " << grid.getRank()
                               << " axes; the runtime supports at most "
                               << kimi::rt::kMaxGridAxes;
    group = 0;
    for (auto [i, a] : llvm::enumerate(axes)) {
      if (a < 0 || a >= grid.getRank())
        return op->emitOpError() << "names grid axis " << a << " of a grid of "
                                 << grid.getRank() << " axes";
      // Ranks in a group are ordered row-major over ascending axes.
      if (i > 0 && a <= axes[i - 1])
        return op->emitOpError()
               << "lists grid axes out of ascending order; the runtime orders "
                  "the ranks of a group row-major over ascending axes";
      group |= 1 << a;
    }
    groupRanks = groupSize(grid, axes);
    if (auto x = dyn_cast<AllReduceOp>(op))
      return lowerAllReduce(x);
    if (auto x = dyn_cast<AllGatherOp>(op))
      return lowerAllGather(x);
    if (auto x = dyn_cast<ReduceScatterOp>(op))
      return lowerReduceScatter(x);
    return lowerAllToAll(cast<AllToAllOp>(op));
  }


  /// Replaces the single result of `op` by `v` and erases `op`.
  static LogicalResult replace(Operation *op, Value v) {
    op->getResult(0).replaceAllUsesWith(v);
    op->erase();
    return success();
  }

  GridOp gridOf(Operation *op) {
    auto attr = op->getAttrOfType<FlatSymbolRefAttr>("grid");
    if (!attr)
      return nullptr;
    return symbols.lookupNearestSymbolFrom<GridOp>(op, attr);
  }

  /// Ranks in the group over `axes` (1 for none: each rank alone).
  static int64_t groupSize(GridOp grid, ArrayRef<GridAxis> axes) {
    int64_t n = 1;
    for (GridAxis a : axes)
      n *= grid.getShape()[a];
    return n;
  }

  func::FuncOp declare(StringRef name, TypeRange args, TypeRange results) {
    if (auto fn = module.lookupSymbol<func::FuncOp>(name))
      return fn;
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    auto fn = func::FuncOp::create(b, module.getLoc(), name,
                                   b.getFunctionType(args, results));
    fn.setPrivate();
    return fn;
  }

  Value rank(Location loc) {
    func::FuncOp fn = declare("kimi_rt_rank", {}, {b.getI64Type()});
    Value r = func::CallOp::create(b, loc, fn, ValueRange{}).getResult(0);
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), r);
  }

  /// Position along grid axis `a` of this rank (row-major over the grid).
  Value axisIndex(Location loc, GridOp grid, int64_t a) {
    int64_t stride = 1;
    for (int64_t i = a + 1; i < grid.getRank(); ++i)
      stride *= grid.getShape()[i];
    Value r = rank(loc);
    r = arith::DivUIOp::create(b, loc, r,
                               arith::ConstantIndexOp::create(b, loc, stride));
    return arith::RemUIOp::create(
        b, loc, r, arith::ConstantIndexOp::create(b, loc, grid.getShape()[a]));
  }

  static std::optional<StringRef> suffix(Type t) {
    if (t.isF32())
      return StringRef("f32");
    if (t.isInteger(32))
      return StringRef("i32");
    if (t.isInteger(64))
      return StringRef("i64");
    return std::nullopt;
  }

  /// A contiguous rank-1 copy of tensor `v`, as memref<?xT>.
  Value flatCopy(Location loc, Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    auto anyLayout = MemRefType::get(
        t.getShape(), t.getElementType(),
        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                               SmallVector<int64_t>(t.getRank(),
                                                    ShapedType::kDynamic)));
    Value src = bufferization::ToBufferOp::create(b, loc, anyLayout, v,
                                                  /*read_only=*/true);
    auto plain = MemRefType::get(t.getShape(), t.getElementType());
    Value copy = memref::AllocOp::create(b, loc, plain);
    linalg::CopyOp::create(b, loc, src, copy);
    return flat(loc, copy);
  }

  Value flat(Location loc, Value m) {
    auto t = cast<MemRefType>(m.getType());
    SmallVector<ReassociationIndices> all(1);
    for (int64_t i = 0; i < t.getRank(); ++i)
      all[0].push_back(i);
    Value c = t.getRank() == 1 ? m
                               : Value(memref::CollapseShapeOp::create(
                                     b, loc, m, all));
    auto dyn = MemRefType::get({ShapedType::kDynamic}, t.getElementType());
    return memref::CastOp::create(b, loc, dyn, c);
  }

  /// Calls `kimi_rt_<what>_<t>(send, recv[, op], group)` and returns the
  /// received buffer, of shape `outShape`, as a tensor.
  FailureOr<Value> call(Operation *op, StringRef what, Value input,
                        ArrayRef<int64_t> outShape,
                        std::optional<ReductionKind> kind) {
    Location loc = op->getLoc();
    auto t = cast<RankedTensorType>(input.getType());
    std::optional<StringRef> s = suffix(t.getElementType());
    if (!s)
      return op->emitOpError() << "on " << t.getElementType()
                               << " elements: the runtime communicates f32, "
                                  "i32 and i64";
    int32_t code = 0;
    if (kind) {
      if (*kind == ReductionKind::Sum)
        code = 0;
      else if (*kind == ReductionKind::Max)
        code = 1;
      else
        return op->emitOpError() << "reduction '"
                                 << stringifyReductionKind(*kind)
                                 << "': the runtime reduces by sum or max";
    }
    Value send = flatCopy(loc, input);
    auto outType = MemRefType::get(outShape, t.getElementType());
    Value out = memref::AllocOp::create(b, loc, outType);
    SmallVector<Value> args = {send, flat(loc, out)};
    if (kind)
      args.push_back(arith::ConstantIntOp::create(b, loc, code, 32));
    args.push_back(arith::ConstantIntOp::create(b, loc, group, 32));
    func::FuncOp fn = declare(("kimi_rt_" + what + "_" + *s).str(),
                              ValueRange(args).getTypes(), {});
    func::CallOp::create(b, loc, fn, args);
    return Value(bufferization::ToTensorOp::create(
        b, loc, RankedTensorType::get(outShape, t.getElementType()), out,
        /*restrict=*/true, /*writable=*/true));
  }

  LogicalResult lowerAllReduce(AllReduceOp x) {
    auto t = cast<RankedTensorType>(x.getResult().getType());
    if (t.getElementType() != cast<RankedTensorType>(x.getInput().getType())
                                  .getElementType())
      return x.emitOpError() << "changes the element type; not supported";
    FailureOr<Value> r = call(x, "all_reduce", x.getInput(), t.getShape(),
                              x.getReduction());
    if (failed(r))
      return failure();
    return replace(x, *r);
  }

  /// Moves dim `from` of `v` to position `to` (linalg.transpose).
  Value moveDim(Location loc, Value v, int64_t from, int64_t to) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < t.getRank(); ++i)
      if (i != from)
        perm.push_back(i);
    perm.insert(perm.begin() + to, from);
    if (llvm::equal(perm, llvm::seq<int64_t>(0, t.getRank())))
      return v;
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(t.getDimSize(p));
    Value init = tensor::EmptyOp::create(b, loc, shape, t.getElementType());
    return linalg::TransposeOp::create(b, loc, v, init, perm).getResult()[0];
  }

  /// Reshapes `v` by merging dims `d` and `d + 1`.
  Value merge(Location loc, Value v, int64_t d) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<ReassociationIndices> groups;
    for (int64_t i = 0; i < t.getRank(); ++i) {
      if (i == d + 1)
        continue;
      groups.push_back(i == d ? ReassociationIndices{i, i + 1}
                              : ReassociationIndices{i});
    }
    return tensor::CollapseShapeOp::create(b, loc, v, groups);
  }

  /// Splits dim `d` of `v` into (parts, size / parts).
  Value split(Location loc, Value v, int64_t d, int64_t parts) {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape;
    SmallVector<ReassociationIndices> groups;
    int64_t next = 0;
    for (int64_t i = 0; i < t.getRank(); ++i) {
      if (i == d) {
        shape.push_back(parts);
        shape.push_back(t.getDimSize(i) / parts);
        groups.push_back({next, next + 1});
        next += 2;
      } else {
        shape.push_back(t.getDimSize(i));
        groups.push_back({next++});
      }
    }
    return tensor::ExpandShapeOp::create(b, loc, t.clone(shape), v, groups);
  }

  LogicalResult lowerAllGather(AllGatherOp x) {
    Location loc = x.getLoc();
    auto in = cast<RankedTensorType>(x.getInput().getType());
    int64_t n = groupRanks, axis = x.getGatherAxis().getSExtValue();
    // The runtime stacks rank blocks: [n, in...]; move n next to the
    // gather axis and merge.
    SmallVector<int64_t> stacked = {n};
    stacked.append(in.getShape().begin(), in.getShape().end());
    FailureOr<Value> r = call(x, "all_gather", x.getInput(), stacked, {});
    if (failed(r))
      return failure();
    Value v = merge(loc, moveDim(loc, *r, 0, axis), axis);
    return replace(x, v);
  }

  LogicalResult lowerReduceScatter(ReduceScatterOp x) {
    Location loc = x.getLoc();
    int64_t n = groupRanks, axis = x.getScatterAxis().getSExtValue();
    // Blocks of the scatter axis become leading and contiguous.
    Value v = moveDim(loc, split(loc, x.getInput(), axis, n), axis, 0);
    auto out = cast<RankedTensorType>(x.getResult().getType());
    FailureOr<Value> r =
        call(x, "reduce_scatter", v, out.getShape(), x.getReduction());
    if (failed(r))
      return failure();
    return replace(x, *r);
  }

  LogicalResult lowerAllToAll(AllToAllOp x) {
    Location loc = x.getLoc();
    int64_t n = groupRanks;
    int64_t splitAxis = x.getSplitAxis().getSExtValue();
    int64_t concatAxis = x.getConcatAxis().getSExtValue();
    // Send block p (along the split axis) to rank p; receive block q from
    // rank q and concatenate the blocks along the concat axis.
    Value v = moveDim(loc, split(loc, x.getInput(), splitAxis, n), splitAxis,
                      0);
    auto vt = cast<RankedTensorType>(v.getType());
    FailureOr<Value> r = call(x, "all_to_all", v, vt.getShape(), {});
    if (failed(r))
      return failure();
    // [n, ...] with the split axis at 1 + splitAxis (its block size); the
    // concat axis (an original dim != split axis) sits at 1 + concatAxis.
    Value out = merge(loc, moveDim(loc, *r, 0, concatAxis), concatAxis);
    return replace(x, out);
  }

  LogicalResult lowerAllSlice(AllSliceOp x, GridOp grid) {
    Location loc = x.getLoc();
    auto in = cast<RankedTensorType>(x.getInput().getType());
    auto out = cast<RankedTensorType>(x.getResult().getType());
    int64_t axis = x.getSliceAxis().getSExtValue();
    // This rank's index within the group, row-major over the group's axes.
    Value index = arith::ConstantIndexOp::create(b, loc, 0);
    for (GridAxis a : x.getGridAxes()) {
      index = arith::MulIOp::create(
          b, loc, index,
          arith::ConstantIndexOp::create(b, loc, grid.getShape()[a]));
      index = arith::AddIOp::create(b, loc, index, axisIndex(loc, grid, a));
    }
    SmallVector<OpFoldResult> offsets(in.getRank(), b.getIndexAttr(0)),
        sizes, strides(in.getRank(), b.getIndexAttr(1));
    for (int64_t d : out.getShape())
      sizes.push_back(b.getIndexAttr(d));
    offsets[axis] = arith::MulIOp::create(
                        b, loc, index,
                        arith::ConstantIndexOp::create(b, loc,
                                                       out.getDimSize(axis)))
                        .getResult();
    Value v = tensor::ExtractSliceOp::create(b, loc, out, x.getInput(), offsets,
                                             sizes, strides);
    return replace(x, v);
  }

  ModuleOp module;
  OpBuilder b;
  SymbolTableCollection symbols;
  /// The collective being lowered: its axis bit set and rank count.
  int32_t group = 0;
  int64_t groupRanks = 1;
};

struct KimiLowerCollectives
    : kimi::impl::KimiLowerCollectivesBase<KimiLowerCollectives> {
  void runOnOperation() override {
    if (failed(Lowering(getOperation()).run()))
      signalPassFailure();
  }
};

} // namespace

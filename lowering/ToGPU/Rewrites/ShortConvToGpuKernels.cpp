//===- ShortConvToGpuKernels.cpp - kimi.short_conv -> one kernel ----------===//
//
// kimi-gpu-short-conv-kernels: see lowering/Passes.td.
//
// The kernel works on the extended sequence xpad = state ++ x, [B, K-1+T, C]
// (zeros for a missing state), one thread per (b, tile of rows, four
// channels) of its rows r < T + K - 1. The thread loads its tile's rows and
// the K - 1 after them at once, and the taps once; for each of its rows
// r < T it writes out[b, r] = act(sum_j w[c, j] xpad[b, r + j]), and for
// each of its rows T <= r < T + K - 1 the final state,
// final[b, r - T] = xpad[b, r].
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"
#include "lowering/ToGPU/Rewrites/KernelLaunchSupport.h"

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUSHORTCONVKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using namespace kimi;

namespace {

constexpr int64_t kThreads = 256;
/// Rows of the extended sequence a thread owns in a long sequence: its
/// weights and the K - 1 rows its window shares with the next tile are read
/// once per kLongRows outputs (one thread per row read the weights and K
/// rows each, several times the tensor's bytes through L2). A step of a
/// few tokens (decode: T = 1) keeps one row a thread, for parallelism.
constexpr int64_t kLongRows = 8;
/// Convolutions of one launch at most (a KDA layer has three).
constexpr size_t kMaxMembers = 4;

/// What the convolutions of one launch share.
struct ShortConvSpec {
  int64_t channels = 0, taps = 0;
  Type act, weight;
  bool hasState = false, silu = false;
  /// Rows of the extended sequence a thread takes.
  int64_t rows = kLongRows;

  /// Channels per thread: one 16-byte vector of f32 when they divide.
  int64_t width() const { return channels % 4 == 0 ? 4 : 1; }
  std::string key() const {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << channels << "x" << taps << " " << act << " " << weight << " "
       << hasState << silu << " r" << rows;
    return s;
  }
};

/// A following kimi.l2_norm over groups of `width` channels (one warp's 32
/// threads of four) fused into a convolution: width 0 for none.
struct FusedNorm {
  int64_t width = 0;
  double eps = 0;
};

/// The kernel key of `spec` with one fused norm per member.
std::string kernelKey(const ShortConvSpec &spec, ArrayRef<FusedNorm> norms) {
  std::string s = spec.key();
  llvm::raw_string_ostream os(s);
  for (const FusedNorm &n : norms)
    os << " [" << n.width << " " << n.eps << "]";
  return s;
}

/// One thread's work on one convolution (the kernel's body for the member
/// whose buffers these are): s.rows consecutive outputs of four channels.
void emitConvolution(kimi::gpu::KernelEmitter &e, OpBuilder &b, Location loc,
                     const ShortConvSpec &s, FusedNorm norm, Value x, Value w,
                     Value state, Value out, Value finalState, Value B, Value T) {
  const int64_t C = s.channels, K = s.taps, vw = s.width(), CV = C / vw;
  const int64_t kRows = s.rows;
  OpBuilder::InsertionGuard guard(b);
  Value rows = e.add(T, e.idx(K - 1)); // of the extended sequence
  Value tiles =
      kRows == 1 ? rows : e.divu(e.add(rows, e.idx(kRows - 1)), e.idx(kRows));
  Value total = e.mul(e.mul(B, tiles), e.idx(CV));
  Value i = e.add(e.mul(e.blockId(mlir::gpu::Dimension::x), e.idx(kThreads)),
                  e.threadId());
  auto inRange = scf::IfOp::create(b, loc, e.ult(i, total), false);
  b.setInsertionPointToStart(&inRange.getThenRegion().front());
  Value c0 = e.mul(e.remu(i, e.idx(CV)), e.idx(vw));
  Value rest = e.divu(i, e.idx(CV));
  Value r0 = e.mul(e.remu(rest, tiles), e.idx(kRows));
  Value bi = e.divu(rest, tiles);
  Value lastRow = e.sub(rows, e.idx(1));
  auto vecType = [&](Type t) { return VectorType::get({vw}, t); };
  auto loadVec = [&](Value buf, Value at) -> SmallVector<Value> {
    Type t = cast<MemRefType>(buf.getType()).getElementType();
    Value v = vector::LoadOp::create(
        b, loc, vecType(t), buf, ValueRange{at}, false,
        llvm::MaybeAlign(vw * t.getIntOrFloatBitWidth() / 8));
    SmallVector<Value> out;
    for (int64_t l = 0; l < vw; ++l)
      out.push_back(e.toF32(vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{l})));
    return out;
  };
  auto xRow = [&](Value px) {
    return loadVec(x, e.add(e.mul(e.add(e.mul(bi, T), px), e.idx(C)), c0));
  };
  // Row p of the extended sequence: state rows first (zeros without a
  // state), then x. Rows past the end are read clamped (their values are
  // not used), so every load is unconditional and they all issue at once.
  // Only a tile's first K - 1 rows can come from the state (r0 + j >= K - 1
  // for the others, unless T = 0 clamps them).
  SmallVector<SmallVector<Value>> v;
  for (int64_t j = 0; j < kRows + K - 1; ++j) {
    Value p = e.minu(e.add(r0, e.idx(j)), lastRow);
    Value fromX = e.ule(e.idx(K - 1), p);
    if (j >= K - 1) {
      v.push_back(xRow(e.select(fromX, e.sub(p, e.idx(K - 1)), e.idx(0))));
      continue;
    }
    SmallVector<Value> xv = xRow(e.select(fromX, e.sub(p, e.idx(K - 1)), e.idx(0)));
    SmallVector<Value> sv(vw, e.f32(0.0));
    if (s.hasState) {
      Value ps = e.minu(p, e.idx(K - 2));
      sv = loadVec(state, e.add(e.mul(e.add(e.mul(bi, e.idx(K - 1)), ps),
                                      e.idx(C)),
                                c0));
    }
    SmallVector<Value> row;
    for (int64_t l = 0; l < vw; ++l)
      row.push_back(e.select(fromX, xv[l], sv[l]));
    v.push_back(row);
  }
  SmallVector<SmallVector<Value>> wv(vw);
  for (int64_t l = 0; l < vw; ++l)
    for (int64_t j = 0; j < K; ++j)
      wv[l].push_back(e.toF32(
          e.load(w, e.add(e.mul(e.add(c0, e.idx(l)), e.idx(K)), e.idx(j)))));
  auto storeVec = [&](ArrayRef<Value> vals, Value buf, Value at) {
    Type t = cast<MemRefType>(buf.getType()).getElementType();
    SmallVector<Value> conv;
    for (Value v : vals)
      conv.push_back(e.fromF32(v, t));
    Value vec = vector::FromElementsOp::create(b, loc, vecType(t), conv);
    vector::StoreOp::create(b, loc, vec, buf, ValueRange{at}, false,
                            llvm::MaybeAlign(vw * t.getIntOrFloatBitWidth() / 8));
  };
  for (int64_t o = 0; o < kRows; ++o) {
    Value r = e.add(r0, e.idx(o));
    // out[b, r] = act(sum_j w[c, j] xpad[r + j]), the taps in order (as
    // the linalg decomposition sums them).
    auto isOutput = scf::IfOp::create(b, loc, e.ult(r, T), false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&isOutput.getThenRegion().front());
      SmallVector<Value> acc(vw, e.f32(0.0));
      for (int64_t j = 0; j < K; ++j)
        for (int64_t l = 0; l < vw; ++l)
          acc[l] = e.fadd(acc[l], e.fmul(v[o + j][l], wv[l][j]));
      if (s.silu)
        for (Value &y : acc)
          y = e.fmul(y, e.fdiv(e.f32(1.0),
                               e.fadd(e.f32(1.0), e.exp(e.fneg(y)))));
      if (norm.width) {
        // The fused L2 norm: the warp's 32 threads hold one group (all
        // take this branch: a warp is one tile of one sequence), and the
        // values are rounded to x's type first, as the unfused norm reads
        // them. Sums as the norm kernel takes them: in the thread, then
        // the butterfly.
        Value ss = e.f32(0.0);
        for (Value &y : acc) {
          y = e.toF32(e.fromF32(y, s.act));
          ss = e.fadd(ss, e.fmul(y, y));
        }
        for (int32_t off = 16; off >= 1; off /= 2)
          ss = e.fadd(ss, e.shuffleXor(ss, off));
        Value rs = math::RsqrtOp::create(b, loc, e.fadd(ss, e.f32(norm.eps)));
        for (Value &y : acc)
          y = e.fmul(y, rs);
      }
      storeVec(acc, out, e.add(e.mul(e.add(e.mul(bi, T), r), e.idx(C)), c0));
    }
    // final[b, q] = xpad[T + q] for q < K - 1, written by the tile whose
    // rows hold T + q.
    Value isFinal = e.andI(e.ule(T, r), e.ult(r, rows));
    auto writesFinal = scf::IfOp::create(b, loc, isFinal, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&writesFinal.getThenRegion().front());
    storeVec(v[o], finalState,
             e.add(e.mul(e.add(e.mul(bi, e.idx(K - 1)), e.sub(r, T)), e.idx(C)), c0));
  }
}

/// gpu.func @name(for each member: x, weight, [state], out, final_state;
/// then B, T): grid (ceil(B (T + K - 1) C / (width 256)), members), 256
/// threads; block row y runs member y.
mlir::gpu::GPUFuncOp emitShortConvKernel(OpBuilder &b, Location loc,
                                         mlir::gpu::GPUModuleOp module,
                                         StringRef name, const ShortConvSpec &s,
                                         ArrayRef<FusedNorm> norms) {
  const int64_t C = s.channels, K = s.taps;
  Type f32 = b.getF32Type(), index = b.getIndexType();
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args;
  for (size_t m = 0; m < norms.size(); ++m) {
    args.append({dyn(s.act), kimi::gpu::flatMemRef(s.weight, C * K)});
    if (s.hasState)
      args.push_back(dyn(f32));
    args.append({dyn(s.act), dyn(f32)});
  }
  args.append({index, index});
  kimi::gpu::GPUFuncOpAndEmitter k(b, loc, module, name, args,
                                   {static_cast<int32_t>(kThreads), 1, 1});
  Block &body = k.func.getBody().front();
  Value B = body.getArgument(body.getNumArguments() - 2);
  Value T = body.getArgument(body.getNumArguments() - 1);
  Value member = k.e.blockId(mlir::gpu::Dimension::y);
  unsigned a = 0;
  for (auto [m, norm] : llvm::enumerate(norms)) {
    Value x = body.getArgument(a++), w = body.getArgument(a++);
    Value state = s.hasState ? body.getArgument(a++) : Value();
    Value out = body.getArgument(a++), finalState = body.getArgument(a++);
    OpBuilder::InsertionGuard guard(b);
    if (norms.size() > 1) {
      auto mine = scf::IfOp::create(b, loc, k.e.eq(member, k.e.idx(m)), false);
      b.setInsertionPointToStart(&mine.getThenRegion().front());
    }
    emitConvolution(k.e, b, loc, s, norm, x, w, state, out, finalState, B, T);
  }
  return k.func;
}

/// One convolution of a launch.
struct Member {
  // Op handles are values; their accessors are not const.
  mutable ShortConvOp op;
  ShortConvSpec spec;
  /// The fused norm (width 0: none) and the ops it replaces.
  FusedNorm norm;
  mutable tensor::ExpandShapeOp heads;
  mutable L2NormOp l2;
};

/// The ops of `block` after `first` that `op`'s operands are computed by
/// (in block order), when they may all move before `first`: no memory
/// effects, no regions, none a member of the launch. Failure otherwise.
FailureOr<SmallVector<Operation *>>
hoistableOperands(Operation *first, Operation *op,
                  const DenseSet<Operation *> &members) {
  SetVector<Operation *> slice;
  SmallVector<Value> work(op->getOperands());
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || def->getBlock() != first->getBlock() ||
        def->isBeforeInBlock(first) || slice.contains(def))
      continue;
    if (def == first || members.contains(def) || !isPure(def) ||
        def->getNumRegions() != 0)
      return failure();
    slice.insert(def);
    work.append(def->operand_begin(), def->operand_end());
  }
  SmallVector<Operation *> ops(slice.begin(), slice.end());
  llvm::sort(ops, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  return ops;
}

struct KimiGpuShortConvKernels
    : kimi::impl::KimiGpuShortConvKernelsBase<KimiGpuShortConvKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ShortConvOp> ops;
    module.walk([&](ShortConvOp op) { ops.push_back(op); });
    // Convolutions of one block with the same specialisation and shapes
    // (a KDA layer's q, k and v) share a launch when the later ones'
    // operands can be computed before the first: one launch instead of
    // three per layer.
    SmallVector<SmallVector<Member>> launches;
    for (ShortConvOp op : ops) {
      std::optional<Member> m = analyse(op);
      if (!m)
        continue;
      if (!launches.empty() && joins(launches.back(), *m))
        launches.back().push_back(*m);
      else
        launches.push_back({*m});
    }
    kimi::gpu::GeneratedKernels kernels(module, "kimi_short_conv");
    for (ArrayRef<Member> launch : launches)
      rewrite(kernels, launch);
  }

  /// The convolution's kernel specialisation, or nothing (with a remark)
  /// when the kernel cannot run it.
  std::optional<Member> analyse(ShortConvOp op) {
    auto xType = cast<RankedTensorType>(op.getX().getType());
    auto wType = cast<RankedTensorType>(op.getWeight().getType());
    Member m;
    m.op = op;
    ShortConvSpec &spec = m.spec;
    spec.channels = xType.getDimSize(2);
    spec.taps = wType.getDimSize(2);
    spec.act = xType.getElementType();
    spec.weight = wType.getElementType();
    spec.hasState = bool(op.getState());
    spec.silu = op.getSilu();
    int64_t steps = xType.getDimSize(1);
    spec.rows = !ShapedType::isDynamic(steps) && steps < kLongRows ? 1 : kLongRows;
    auto isFloat = [](Type t) { return t.isF32() || t.isBF16() || t.isF16(); };
    std::string why;
    if (ShapedType::isDynamic(spec.channels) || ShapedType::isDynamic(spec.taps))
      why = "channels and taps must be static";
    else if (spec.taps < 2)
      why = "a kernel of one tap has no state";
    else if (!isFloat(spec.act) || !isFloat(spec.weight) ||
             op.getOut().getType().getElementType() != spec.act)
      why = "the kernel reads and writes f32, bf16 or f16 in x's type";
    if (!why.empty()) {
      op.emitRemark() << "kept for kimi-lower-to-linalg (no GPU short-conv "
                         "kernel): "
                      << why;
      return std::nullopt;
    }
    // An L2 norm of the output's heads (`expand_shape` to [B, T, H, D],
    // then kimi.l2_norm, the output's only use), whose heads are one warp's
    // 32 threads of four channels, runs in the kernel.
    if (op.getOut().hasOneUse())
      m.heads = dyn_cast<tensor::ExpandShapeOp>(*op.getOut().getUsers().begin());
    if (m.heads && m.heads.getResult().hasOneUse())
      m.l2 = dyn_cast<L2NormOp>(*m.heads.getResult().getUsers().begin());
    if (m.l2) {
      RankedTensorType headsType = m.heads.getResultType();
      int64_t D = headsType.getRank() == 4 ? headsType.getDimSize(3) : 0;
      SmallVector<ReassociationIndices> groups = m.heads.getReassociationIndices();
      bool fits = D > 0 && spec.channels % 4 == 0 && D == 32 * spec.width() &&
                  spec.channels % D == 0 && groups.size() == 3 &&
                  groups[2] == ReassociationIndices{2, 3} &&
                  m.l2.getResult().getType() == headsType;
      if (fits)
        m.norm = {D, m.l2.getEps().convertToDouble()};
      else
        m.l2 = nullptr;
    }
    return m;
  }

  /// Whether `m` can share `launch`'s kernel launch.
  bool joins(ArrayRef<Member> launch, const Member &m) {
    const Member &first = launch.front();
    auto xType = cast<RankedTensorType>(m.op.getX().getType());
    if (launch.size() >= kMaxMembers ||
        m.op->getBlock() != first.op->getBlock() ||
        m.spec.key() != first.spec.key() || !xType.hasStaticShape() ||
        xType != first.op.getX().getType())
      return false;
    DenseSet<Operation *> members;
    for (const Member &o : launch)
      members.insert(o.op);
    return succeeded(hoistableOperands(first.op, m.op, members));
  }

  void rewrite(kimi::gpu::GeneratedKernels &kernels, ArrayRef<Member> launch) {
    ShortConvOp first = launch.front().op;
    const ShortConvSpec &spec = launch.front().spec;
    Location loc = first.getLoc();
    // The later members' operands, computed before the first member.
    DenseSet<Operation *> members;
    for (const Member &m : launch)
      members.insert(m.op);
    for (const Member &m : launch.drop_front()) {
      FailureOr<SmallVector<Operation *>> hoisted =
          hoistableOperands(first, m.op, members);
      if (failed(hoisted)) { // joins() found them movable
        m.op.emitError("short convolution's operands cannot move before the "
                       "first convolution of its launch");
        return signalPassFailure();
      }
      for (Operation *op : *hoisted)
        op->moveBefore(first);
    }

    SmallVector<FusedNorm> norms;
    for (const Member &m : launch)
      norms.push_back(m.norm);
    std::string name = "short_conv_" + std::to_string(kernels.size());
    auto fn = kernels.get(kernelKey(spec, norms),
                          [&](OpBuilder &mb, mlir::gpu::GPUModuleOp module) {
                            return emitShortConvKernel(mb, loc, module, name,
                                                       spec, norms);
                          });

    OpBuilder b(first);
    SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, first.getX());
    Value B = getValueOrCreateConstantIndexOp(b, loc, sizes[0]);
    Value T = getValueOrCreateConstantIndexOp(b, loc, sizes[1]);
    auto input = [&](Value t) {
      return kimi::gpu::asDynamicBuffer(b, loc, kimi::gpu::flatInputBuffer(b, loc, t));
    };
    SmallVector<OpFoldResult> stateSizes = {
        sizes[0], b.getIndexAttr(spec.taps - 1), b.getIndexAttr(spec.channels)};
    SmallVector<Value> args, outs, finals;
    for (const Member &m : launch) {
      args.append({input(m.op.getX()),
                   kimi::gpu::flatInputBuffer(b, loc, m.op.getWeight())});
      if (spec.hasState)
        args.push_back(input(m.op.getState()));
      outs.push_back(kimi::gpu::allocFlatBuffer(b, loc, sizes, spec.act));
      finals.push_back(
          kimi::gpu::allocFlatBuffer(b, loc, stateSizes, b.getF32Type()));
      args.append({kimi::gpu::asDynamicBuffer(b, loc, outs.back()),
                   kimi::gpu::asDynamicBuffer(b, loc, finals.back())});
    }
    args.append({B, T});
    auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
    // Threads: B ceil((T + K - 1) / rows) C / width, for each member.
    Value tiles = arith::CeilDivUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, T, c(spec.taps - 1)), c(spec.rows));
    Value threads = arith::MulIOp::create(
        b, loc, arith::MulIOp::create(b, loc, B, tiles),
        c(spec.channels / spec.width()));
    Value blocks = arith::CeilDivUIOp::create(b, loc, threads, c(kThreads));
    mlir::gpu::LaunchFuncOp::create(
        b, loc, fn, mlir::gpu::KernelDim3{blocks, c(int64_t(launch.size())), c(1)},
        mlir::gpu::KernelDim3{c(kThreads), c(1), c(1)}, Value(), args);
    // Every result's tensor first: `b` inserts before the first member.
    SmallVector<std::pair<Value, Value>> results;
    for (auto [m, out, finalState] : llvm::zip(launch, outs, finals))
      results.push_back(
          {kimi::gpu::tensorOfFlatBuffer(b, loc, out, m.op.getOut().getType(), sizes),
           kimi::gpu::tensorOfFlatBuffer(b, loc, finalState,
                                         m.op.getFinalState().getType(),
                                         stateSizes)});
    for (auto [m, result] : llvm::zip(launch, results)) {
      m.op.getOut().replaceAllUsesWith(result.first);
      if (m.l2) {
        // The heads of `out` are normalised already.
        m.l2.getResult().replaceAllUsesWith(m.heads.getResult());
        m.l2.erase();
      }
      m.op.getFinalState().replaceAllUsesWith(result.second);
      m.op.erase();
    }
  }
};

} // namespace

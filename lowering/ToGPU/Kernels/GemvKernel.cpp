//===- GemvKernel.cpp - products of a few rows, read at HBM speed ---------===//
//
// Per warp: rowsPerWarp rows of B and every row of A. Lane l reads the
// 16-byte pieces k = 128 c + 4 l of each, groups of chunks c are unrolled
// so that all their loads are in flight before the FMAs that use them, and
// vector accumulators are summed over the lanes at the end.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/GemvKernel.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/xxhash.h"

#include <cassert>
#include <climits>
#include <cmath>

using namespace mlir;

namespace kimi::gpu {

namespace {
constexpr int64_t kChunk = 128; // k values a warp reads per row and chunk
} // namespace

std::string GemvKernelSpec::key() const {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
         "_" + std::to_string(lda) + "_" + std::to_string(ldb) + "_" +
         std::to_string(ldc) + "_r" + std::to_string(rowsPerWarp) +
         (bf16Weights ? "_bf16" : "") + (bf16Activations ? "_a16" : "") +
         (accumulate ? "_acc" : "") + (weights == 2 ? "_x2" : "") +
         (k1 > 0 ? "_a1k" + std::to_string(k1) + "_" + std::to_string(lda1) +
                       "_" + std::to_string(ldb1)
                 : "") +
         (batch > 1 ? "_b" + std::to_string(batch) + "x" +
                          std::to_string(batchA) + "x" +
                          std::to_string(batchB) + "x" + std::to_string(batchC)
                    : "") +
         (epilogue ? "_e" + llvm::utohexstr(llvm::xxh3_64bits(epilogue->text),
                                            /*LowerCase=*/true)
                   : "");
}

int64_t GemvKernelSpec::bufferArgs() const {
  return 2 * weights + (epilogue ? 1 + int64_t(epilogue->ldExtra.size()) : 0) +
         (k1 > 0 ? 1 : 0);
}

std::string GemvGroupSpec::identity() const {
  std::string id = key();
  for (const GemvKernelSpec &p : products)
    if (p.epilogue)
      id += "|" + p.epilogue->text;
  return id;
}

std::string GemvGroupSpec::key() const {
  std::string k;
  for (const GemvKernelSpec &p : products)
    k += (k.empty() ? "" : "__") + p.key();
  if (prefetchWeights)
    k += "_pf";
  return kSplit > 1 ? k + "_s" + std::to_string(kSplit) : k;
}

int64_t gemvBlocks(const GemvKernelSpec &spec, int64_t kSplit) {
  const int64_t rowsPerBlock = kGemvWarps / kSplit * spec.rowsPerWarp;
  return spec.batch * ((spec.n + rowsPerBlock - 1) / rowsPerBlock);
}

int64_t gemvBlocks(const GemvGroupSpec &group) {
  int64_t blocks = 0;
  for (const GemvKernelSpec &p : group.products)
    blocks += gemvBlocks(p, group.kSplit);
  return blocks;
}

int64_t chooseGemvKSplit(int64_t rows, int64_t k, int64_t rowsPerWarp,
                         int64_t targetWarps) {
  const int64_t warps = (rows + rowsPerWarp - 1) / rowsPerWarp;
  for (int64_t split : {4, 2})
    if (k % (split * kChunk) == 0 && warps * split <= targetWarps)
      return split;
  return 1;
}

LogicalResult verifyGemvGroupSpec(const GemvGroupSpec &group, std::string &why) {
  if (group.products.empty() || group.products.size() > 8) {
    why = std::to_string(group.products.size()) +
          " products in a group (1..8 are supported)";
    return failure();
  }
  const GemvKernelSpec &first = group.products.front();
  if (group.kSplit != 1 && group.kSplit != 2 && group.kSplit != 4) {
    why = "k split " + std::to_string(group.kSplit) + " is not 1, 2 or 4";
    return failure();
  }
  if (first.k % (group.kSplit * 4) != 0) {
    why = "k = " + std::to_string(first.k) + " does not split into " +
          std::to_string(group.kSplit) + " shares of 16-byte pieces";
    return failure();
  }
  for (const GemvKernelSpec &p : group.products)
    if (p.k1 % (group.kSplit * 4) != 0) {
      why = "k1 = " + std::to_string(p.k1) + " does not split into " +
            std::to_string(group.kSplit) + " shares of 16-byte pieces";
      return failure();
    }
  for (size_t i = 0; i < group.products.size(); ++i) {
    const GemvKernelSpec &p = group.products[i];
    if (failed(verifyGemvKernelSpec(p, why))) {
      why = "product " + std::to_string(i) + ": " + why;
      return failure();
    }
    if (p.m != first.m || p.k != first.k || p.lda != first.lda ||
        p.rowsPerWarp != first.rowsPerWarp ||
        p.bf16Activations != first.bf16Activations) {
      why = "product " + std::to_string(i) +
            " differs from product 0 in m, k, lda, rows per warp or A's type";
      return failure();
    }
  }
  return success();
}

LogicalResult verifyGemvKernelSpec(const GemvKernelSpec &spec, std::string &why) {
  if (spec.m < 1 || spec.m > 8)
    why = "m = " + std::to_string(spec.m) + " is outside 1..8";
  else if (spec.n < 1 || spec.k < 1)
    why = "n and k must be positive";
  else if (spec.k % 4 != 0)
    why = "k = " + std::to_string(spec.k) + " is not a multiple of 4 (16-byte loads)";
  else if (spec.lda % 4 != 0 || spec.ldb % 4 != 0)
    why = "row strides of A and B must be multiples of 4 (16-byte loads)";
  else if (spec.rowsPerWarp < 1 || spec.rowsPerWarp > 4)
    why = "rows per warp must be 1..4";
  else if (spec.batch < 1 ||
           (spec.batch > 1 && (spec.batchA % 4 != 0 || spec.batchB % 4 != 0)))
    why = "batch strides of A and B must be multiples of 4 (16-byte loads)";
  else if (spec.weights != 1 && spec.weights != 2)
    why = "weights = " + std::to_string(spec.weights) + " is not 1 or 2";
  else if (spec.k1 < 0 || (spec.k1 > 0 && spec.weights != 2))
    why = "a second vector (k1 = " + std::to_string(spec.k1) +
          ") needs a second weight";
  else if (spec.k1 > 0 && (spec.k1 % 4 != 0 || spec.lda1 % 4 != 0 ||
                           spec.ldb1 % 4 != 0 || spec.batch != 1))
    why = "the second vector's k1, lda1 and ldb1 must be multiples of 4 "
          "(16-byte loads), and a batch has none";
  else if (const std::optional<GemvEpilogue> &ep = spec.epilogue) {
    if (ep->batchExtra.size() != ep->ldExtra.size() ||
        ep->extraTypes.size() != ep->ldExtra.size())
      why = "the epilogue's extra buffers need a row stride, a batch stride "
            "and an element type each";
    else if (!ep->outType)
      why = "the epilogue's output needs an element type";
    else if (!ep->body || ep->args.size() != ep->body->getNumArguments())
      why = "the epilogue binds " + std::to_string(ep->args.size()) +
            " block arguments of a body that has " +
            std::to_string(ep->body ? ep->body->getNumArguments() : 0);
    for (int64_t a : ep->args)
      if (why.empty() &&
          (a < GemvEpilogue::kUnused || a >= int64_t(ep->ldExtra.size()) ||
           (a == GemvEpilogue::kSum1 && spec.weights != 2)))
        why = "epilogue argument " + std::to_string(a) +
              " names no sum or extra buffer";
  }
  return success(why.empty());
}

MemRefType gemvBufferType(MLIRContext *ctx, Type element) {
  return MemRefType::get(
      {ShapedType::kDynamic}, element ? element : Float32Type::get(ctx),
      StridedLayoutAttr::get(ctx, ShapedType::kDynamic, {1}));
}

/// Eight MXFP4 values of one lane as f32: `word` holds their codes (value i
/// in bits 4i..4i+3), `scale` the block's E8M0 byte (i32). A code's
/// magnitude bits e1 e0 m land in f32 bits 24..22, its sign in bit 31: that
/// f32 is the e2m1 value times 2^-126 for every code (e = 0 gives the
/// subnormal m 2^-127), so one exact multiply by 2^126 decodes it; the scale
/// 2^(s - 127) (s = 0: 2^-127, subnormal) multiplies exactly too, except
/// past the f32 range, as on the CPU (Mxfp4Decode.h).
Value decodeMxfp4Word(KernelEmitter &e, Value word, Value scale) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type f32 = b.getF32Type();
  auto shift = [&](Value v, int64_t by) -> Value {
    if (by > 0)
      return arith::ShLIOp::create(b, loc, v, e.i32(by));
    if (by < 0)
      return arith::ShRUIOp::create(b, loc, v, e.i32(-by));
    return v;
  };
  Value sBits = e.select(e.eq(scale, e.i32(0)), e.i32(0x00400000),
                         shift(scale, 23));
  Value scaleF = arith::BitcastOp::create(b, loc, f32, sBits);
  Value two126 = arith::ConstantOp::create(b, loc, f32,
                                           b.getF32FloatAttr(std::ldexp(1.0f, 126)));
  SmallVector<Value> values;
  for (int64_t i = 0; i < 8; ++i) {
    Value mag = e.andI(shift(word, 22 - 4 * i), e.i32(0x7 << 22));
    Value sign = e.andI(shift(word, 28 - 4 * i), e.i32(INT32_MIN));
    Value bits = arith::OrIOp::create(b, loc, mag, sign);
    Value v = arith::BitcastOp::create(b, loc, f32, bits);
    values.push_back(e.fmul(e.fmul(v, two126), scaleF));
  }
  return vector::FromElementsOp::create(b, loc, VectorType::get({8}, f32),
                                        values);
}

SmallVector<Value> emitWarpDotPartials(KernelEmitter &e,
                                       ArrayRef<WarpDotVector> vectors,
                                       ArrayRef<WarpDotRow> rows, int64_t K,
                                       int64_t group) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  // MXFP4 rows: 8 values a lane and chunk (a 4-byte word of codes), else 4
  // (a 16-byte piece of f32, 8 bytes of bf16).
  const bool mx = !rows.empty() && rows.front().scales;
  assert(llvm::all_of(rows,
                      [&](const WarpDotRow &row) {
                        return bool(row.scales) == mx;
                      }) &&
         "MXFP4 rows and dense rows mixed");
  const int64_t V = mx ? 8 : 4, chunkK = 32 * V;
  auto vec = VectorType::get({V}, b.getF32Type());
  Value zeroVec = arith::ConstantOp::create(
      b, loc, vec, DenseElementsAttr::get(vec, b.getF32FloatAttr(0)));
  Value laneK = e.mul(e.laneId(), e.idx(V));
  // Bases are multiples of 4 elements (checked by the callers), so every
  // piece is aligned to its size: 16 bytes of f32, 8 of bf16 (widened to
  // f32 in registers: a bf16 weight is read at its own size). MXFP4 bases
  // are multiples of 32 values: each word of 8 codes is 4-byte aligned.
  auto load = [&](Value buf, Value index) -> Value {
    Type element = cast<MemRefType>(buf.getType()).getElementType();
    if (element.isF32())
      return vector::LoadOp::create(b, loc, vec, buf, ValueRange{index}, false,
                                    llvm::MaybeAlign(16));
    auto narrow = VectorType::get({V}, element);
    Value v = vector::LoadOp::create(
        b, loc, narrow, buf, ValueRange{index}, false,
        llvm::MaybeAlign(4 * element.getIntOrFloatBitWidth() / 8));
    return arith::ExtFOp::create(b, loc, vec, v);
  };
  auto loadMxfp4 = [&](const WarpDotRow &row, Value k) -> Value {
    Value at = e.add(row.base, k);
    Value bytes = vector::LoadOp::create(
        b, loc, VectorType::get({4}, b.getI8Type()), row.buffer,
        ValueRange{e.divu(at, e.idx(2))}, false, llvm::MaybeAlign(4));
    Value word = vector::ExtractOp::create(
        b, loc,
        vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()),
                                  bytes),
        ArrayRef<int64_t>{0});
    Value scale = arith::ExtUIOp::create(
        b, loc, b.getI32Type(),
        memref::LoadOp::create(b, loc, row.scales,
                               ValueRange{e.divu(at, e.idx(32))}));
    return decodeMxfp4Word(e, word, scale);
  };
  // The distinct weight rows, in order of first use.
  SmallVector<const WarpDotRow *> distinct;
  SmallVector<unsigned> loadOf;
  for (const WarpDotRow &row : rows) {
    auto *at = llvm::find_if(distinct, [&](const WarpDotRow *d) {
      return d->buffer == row.buffer && d->base == row.base &&
             d->scales == row.scales;
    });
    loadOf.push_back(at - distinct.begin());
    if (at == distinct.end())
      distinct.push_back(&row);
  }

  // One chunk at k = kBase + V lane: all loads, then the FMAs.
  auto chunk = [&](Value kBase, ArrayRef<Value> acc, bool masked) {
    Value kk = e.add(kBase, laneK), inRange;
    if (masked) {
      inRange = e.ult(kk, e.idx(K));
      kk = e.select(inRange, kk, e.idx(0));
    }
    SmallVector<Value> w, x;
    for (const WarpDotRow *row : distinct)
      w.push_back(mx ? loadMxfp4(*row, kk) : load(row->buffer, e.add(row->base, kk)));
    for (const WarpDotVector &v : vectors)
      x.push_back(load(v.buffer, e.add(v.base, kk)));
    if (masked)
      for (Value &v : w)
        v = e.select(inRange, v, zeroVec);
    SmallVector<Value> out(acc.begin(), acc.end());
    for (auto [i, row] : llvm::enumerate(rows))
      out[i] = vector::FMAOp::create(b, loc, x[row.vector], w[loadOf[i]], out[i]);
    return out;
  };

  const int64_t chunks = (K + chunkK - 1) / chunkK;
  const bool ragged = K % chunkK != 0;
  // The last chunk, when ragged, is unrolled after the loop with its mask.
  const int64_t full = ragged ? chunks - 1 : chunks;
  group = std::max<int64_t>(1, group);
  const int64_t groups = full / group;
  SmallVector<Value> acc(rows.size(), zeroVec);
  if (groups > 0) {
    auto loop = scf::ForOp::create(b, loc, e.idx(0), e.idx(groups), e.idx(1), acc);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> inner(loop.getRegionIterArgs().begin(),
                             loop.getRegionIterArgs().end());
    Value base = e.mul(loop.getInductionVar(), e.idx(group * chunkK));
    for (int64_t i = 0; i < group; ++i)
      inner = chunk(e.add(base, e.idx(i * chunkK)), inner, false);
    scf::YieldOp::create(b, loc, inner);
    b.setInsertionPointAfter(loop);
    acc.assign(loop.getResults().begin(), loop.getResults().end());
  }
  for (int64_t c = groups * group; c < chunks; ++c)
    acc = chunk(e.idx(c * chunkK), acc, ragged && c == chunks - 1);
  return acc;
}

Value emitWarpTotal(KernelEmitter &e, Value partial) {
  Value s = partial;
  if (isa<VectorType>(s.getType()))
    s = vector::ReductionOp::create(e.b, e.loc, vector::CombiningKind::ADD, s);
  for (int32_t off = 16; off >= 1; off /= 2)
    s = e.fadd(s, e.shuffleXor(s, off));
  return s;
}

namespace {
/// The epilogue's value at one output: `body` cloned with its block
/// arguments bound to `sums` and `extras` (see GemvEpilogue::args), and the
/// constants it uses from outside cloned in first.
Value emitEpilogue(OpBuilder &b, const GemvEpilogue &ep, ArrayRef<Value> sums,
                   ArrayRef<Value> extras) {
  IRMapping map;
  for (auto [arg, source] : llvm::zip(ep.body->getArguments(), ep.args)) {
    if (source == GemvEpilogue::kUnused)
      continue;
    map.map(arg, source >= 0 ? extras[source]
                             : sums[source == GemvEpilogue::kSum0 ? 0 : 1]);
  }
  for (Operation &op : ep.body->without_terminator()) {
    for (Value v : op.getOperands())
      if (!map.contains(v))
        if (Operation *def = v.getDefiningOp())
          map.map(v, b.clone(*def)->getResult(0)); // an arith.constant
    b.clone(op, map);
  }
  return map.lookup(ep.body->getTerminator()->getOperand(0));
}
} // namespace

mlir::gpu::GPUFuncOp emitGemvKernel(OpBuilder &b, Location loc,
                                    mlir::gpu::GPUModuleOp module, StringRef name,
                                    const GemvGroupSpec &group) {
  const GemvKernelSpec &shared = group.products.front();
  const int64_t M = shared.m, K = shared.k, R = shared.rowsPerWarp;
  int64_t maxW = 1;
  for (const GemvKernelSpec &p : group.products)
    maxW = std::max(maxW, p.weights);
  // Warp w takes row group w / S of its block and k share w % S.
  const int64_t S = group.kSplit, share = K / S,
                groupsPerBlock = kGemvWarps / S;
  // A, then each product's buffers: its weights at their type, C f32, the
  // epilogue's output and extras at theirs.
  MLIRContext *ctx = b.getContext();
  MemRefType buffer = gemvBufferType(ctx);
  Type bf16 = b.getBF16Type();
  SmallVector<Type> argTypes{
      shared.bf16Activations ? gemvBufferType(ctx, bf16) : buffer};
  for (const GemvKernelSpec &p : group.products) {
    for (int64_t i = 0; i < 2 * p.weights; ++i)
      argTypes.push_back(i % 2 == 0 && p.bf16Weights ? gemvBufferType(ctx, bf16)
                                                     : buffer);
    if (p.epilogue) {
      argTypes.push_back(gemvBufferType(ctx, p.epilogue->outType));
      for (Type t : p.epilogue->extraTypes)
        argTypes.push_back(gemvBufferType(ctx, t));
    }
    if (p.k1 > 0)
      argTypes.push_back(argTypes.front()); // A1, of A's type
  }
  GPUFuncOpAndEmitter k(b, loc, module, name, argTypes,
                        {static_cast<int32_t>(kGemvThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value A = body.getArgument(0);
  Value lane = e.laneId(), warp = e.divu(e.threadId(), e.idx(32));
  Value rowGroup = S > 1 ? e.divu(warp, e.idx(S)) : warp;
  Value kStart = S > 1 ? e.mul(e.remu(warp, e.idx(S)), e.idx(share)) : e.idx(0);
  // The S warps of a row group meet here: one sum per output and warp.
  Value sums = S > 1 ? e.sharedBuffer(module, (name + "_sums").str(),
                                      kGemvWarps * M * maxW * R, b.getF32Type())
                     : Value();

  // One product over the blocks [0, gemvBlocks(spec)) of `blockIndex`;
  // `buffers` are its kernel arguments (GemvKernelSpec::bufferArgs).
  auto product = [&](const GemvKernelSpec &spec, ArrayRef<Value> buffers,
                     Value blockIndex) {
    const int64_t N = spec.n, W = spec.weights, T = M * W * R;
    SmallVector<Value> Bs, Cs;
    for (int64_t j = 0; j < W; ++j) {
      Bs.push_back(buffers[2 * j]);
      Cs.push_back(buffers[2 * j + 1]);
    }
    // A batch's product `item` owns the item-th run of its blocks.
    Value item = e.idx(0);
    if (spec.batch > 1) {
      const int64_t perItem = gemvBlocks(spec, S) / spec.batch;
      item = e.divu(blockIndex, e.idx(perItem));
      blockIndex = e.remu(blockIndex, e.idx(perItem));
    }
    auto itemOffset = [&](int64_t stride) { return e.mul(item, e.idx(stride)); };
    Value firstRow = e.mul(
        e.add(e.mul(blockIndex, e.idx(groupsPerBlock)), rowGroup), e.idx(R));
    // Rows past N read row N - 1 and are not stored.
    SmallVector<WarpDotVector> x;
    for (int64_t m = 0; m < M; ++m)
      x.push_back({A, e.add(e.add(itemOffset(spec.batchA), e.idx(m * spec.lda)),
                            kStart)});
    SmallVector<Value> row(R), rowValid(R), rowRead(R), rowBase(R);
    for (int64_t r = 0; r < R; ++r) {
      row[r] = e.add(firstRow, e.idx(r));
      rowValid[r] = e.ult(row[r], e.idx(N));
    }
    for (int64_t r = 0; r < R; ++r) {
      Value batchB = itemOffset(spec.batchB);
      rowRead[r] = e.minu(row[r], e.idx(N - 1));
      rowBase[r] = e.add(e.add(batchB, e.mul(rowRead[r], e.idx(spec.ldb))), kStart);
    }
    // Every (m, j, r): row r of weight j (loaded once) times row m of A;
    // output index (m W + j) R + r.
    SmallVector<WarpDotRow> dots;
    const int64_t sharedW = spec.k1 > 0 ? 1 : W;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < sharedW; ++j)
        for (int64_t r = 0; r < R; ++r)
          dots.push_back({Bs[j], rowBase[r], static_cast<unsigned>(m)});
    // Loads in flight per lane and group: group * (rows + M) pieces of 16
    // bytes.
    auto chunksInFlight = [&](int64_t rows) { return rows + M <= 3 ? 8 : 4; };
    SmallVector<Value> acc =
        emitWarpDotPartials(e, x, dots, share, chunksInFlight(sharedW * R));
    if (spec.k1 > 0) {
      // Weight 1 against its own vector A1, over its own share of k1; its
      // sums join acc at (m W + 1) R + r.
      const int64_t share1 = spec.k1 / S;
      Value kStart1 =
          S > 1 ? e.mul(e.remu(warp, e.idx(S)), e.idx(share1)) : e.idx(0);
      Value A1 = buffers.back();
      SmallVector<WarpDotVector> x1;
      for (int64_t m = 0; m < M; ++m)
        x1.push_back({A1, e.add(e.idx(m * spec.lda1), kStart1)});
      SmallVector<WarpDotRow> dots1;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < R; ++r)
          dots1.push_back({Bs[1],
                           e.add(e.mul(rowRead[r], e.idx(spec.ldb1)), kStart1),
                           static_cast<unsigned>(m)});
      SmallVector<Value> acc1 =
          emitWarpDotPartials(e, x1, dots1, share1, chunksInFlight(R));
      SmallVector<Value> both;
      for (int64_t m = 0; m < M; ++m) {
        both.append(acc.begin() + m * R, acc.begin() + (m + 1) * R);
        both.append(acc1.begin() + m * R, acc1.begin() + (m + 1) * R);
      }
      acc = std::move(both);
    }
    SmallVector<Value> total;
    for (Value v : acc)
      total.push_back(emitWarpTotal(e, v));
    if (S > 1) {
      // Each warp's sums to shared memory; the row group's first warp adds
      // the S shares in order.
      for (int64_t i = 0; i < T; ++i) {
        auto mine = scf::IfOp::create(b, loc, e.eq(lane, e.idx(i % 32)), false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&mine.getThenRegion().front());
        e.store(total[i], sums, e.add(e.mul(warp, e.idx(T)), e.idx(i)));
      }
      e.barrier();
      Value firstWarp = e.mul(rowGroup, e.idx(S));
      for (int64_t i = 0; i < T; ++i) {
        Value v = e.load(sums, e.add(e.mul(firstWarp, e.idx(T)), e.idx(i)));
        for (int64_t w = 1; w < S; ++w)
          v = e.fadd(v, e.load(sums, e.add(e.mul(e.add(firstWarp, e.idx(w)),
                                                 e.idx(T)),
                                           e.idx(i))));
        total[i] = v;
      }
    }
    // Only the row group's first warp stores.
    Value storer = S > 1 ? e.eq(warp, e.mul(rowGroup, e.idx(S))) : Value();
    const std::optional<GemvEpilogue> &ep = spec.epilogue;
    // Output (m, r) is stored by lane (m R + r) mod 32.
    for (int64_t m = 0; m < M; ++m)
      for (int64_t r = 0; r < R; ++r) {
        Value mine = e.andI(e.eq(lane, e.idx((m * R + r) % 32)), rowValid[r]);
        if (storer)
          mine = e.andI(mine, storer);
        auto guard = scf::IfOp::create(b, loc, mine, false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&guard.getThenRegion().front());
        Value at = e.add(e.add(itemOffset(spec.batchC), e.idx(m * spec.ldc)),
                         row[r]);
        SmallVector<Value> v;
        for (int64_t j = 0; j < W; ++j) {
          v.push_back(total[(m * W + j) * R + r]);
          if (spec.accumulate)
            v[j] = e.fadd(e.load(Cs[j], at), v[j]);
          if (!ep || ep->keepSum[j])
            e.store(v[j], Cs[j], at);
        }
        if (!ep)
          continue;
        SmallVector<Value> extras;
        for (auto [i, ld] : llvm::enumerate(ep->ldExtra))
          extras.push_back(e.load(
              buffers[2 * W + 1 + i],
              e.add(e.add(itemOffset(ep->batchExtra[i]), e.idx(m * ld)), row[r])));
        e.store(emitEpilogue(b, *ep, v, extras), buffers[2 * W],
                e.add(e.add(itemOffset(ep->batchOut), e.idx(m * ep->ldOut)),
                      row[r]));
      }
  };

  // Product p owns blocks [start_p, start_p + gemvBlocks(p)): a chain of
  // ifs on the block index, the last product in the innermost else.
  Value block = e.blockId(mlir::gpu::Dimension::x);
  const size_t P = group.products.size();
  if (group.prefetchWeights) {
    // Thread 0 asks for the block's rows of each weight, then every thread
    // waits for the grids before (nothing else is read before the wait).
    auto first = scf::IfOp::create(b, loc, e.eq(e.threadId(), e.idx(0)), false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&first.getThenRegion().front());
      int64_t start = 0, firstArg = 1;
      for (size_t p = 0; p < P; ++p) {
        const GemvKernelSpec &spec = group.products[p];
        const int64_t end = start + gemvBlocks(spec, S);
        const int64_t rowsPerBlock = groupsPerBlock * R;
        const bool contiguous = spec.batch == 1 && spec.ldb == spec.k &&
                                (spec.k1 == 0 || spec.ldb1 == spec.k1);
        if (contiguous) {
          auto mine = scf::IfOp::create(
              b, loc,
              e.andI(e.ule(e.idx(start), block), e.ult(block, e.idx(end))),
              false);
          OpBuilder::InsertionGuard g2(b);
          b.setInsertionPointToStart(&mine.getThenRegion().front());
          Value row0 = e.mul(e.sub(block, e.idx(start)), e.idx(rowsPerBlock));
          Value rows = e.sub(e.minu(e.add(row0, e.idx(rowsPerBlock)),
                                    e.idx(spec.n)),
                             row0);
          for (int64_t j = 0; j < spec.weights; ++j) {
            const int64_t len = j == 1 && spec.k1 > 0 ? spec.k1 : spec.k;
            const int64_t size = spec.bf16Weights ? 2 : 4;
            if ((len * size) % 16 != 0)
              continue;
            // A bulk prefetch needs a 16-byte-aligned address, which the
            // kernel's own loads (8-byte pieces of bf16) do not: a view
            // at another offset is not prefetched.
            Value buf = body.getArgument(firstArg + 2 * j);
            Value at = e.mul(row0, e.idx(len));
            auto meta = memref::ExtractStridedMetadataOp::create(b, loc, buf);
            Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, buf);
            Value address =
                e.add(base, e.mul(e.add(meta.getOffset(), at), e.idx(size)));
            auto aligned = scf::IfOp::create(
                b, loc, e.eq(e.remu(address, e.idx(16)), e.idx(0)), false);
            OpBuilder::InsertionGuard g3(b);
            b.setInsertionPointToStart(&aligned.getThenRegion().front());
            e.prefetchL2(buf, at, e.toI32(e.mul(rows, e.idx(len * size))));
          }
        }
        firstArg += spec.bufferArgs();
        start = end;
      }
    }
    NVVM::GriddepcontrolOp::create(b, loc, NVVM::GridDepActionKind::wait);
    NVVM::GriddepcontrolOp::create(b, loc,
                                   NVVM::GridDepActionKind::launch_dependents);
  }
  int64_t start = 0, firstArg = 1;
  for (size_t p = 0; p < P; ++p) {
    const GemvKernelSpec &spec = group.products[p];
    SmallVector<Value> buffers;
    for (int64_t i = 0; i < spec.bufferArgs(); ++i)
      buffers.push_back(body.getArgument(firstArg + i));
    firstArg += spec.bufferArgs();
    Value local = start ? e.sub(block, e.idx(start)) : block;
    const int64_t end = start + gemvBlocks(spec, S);
    if (p + 1 == P) {
      product(spec, buffers, local);
      break;
    }
    auto branch = scf::IfOp::create(b, loc, e.ult(block, e.idx(end)),
                                    /*withElseRegion=*/true);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    product(spec, buffers, local);
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    start = end;
  }
  return k.func;
}

} // namespace kimi::gpu

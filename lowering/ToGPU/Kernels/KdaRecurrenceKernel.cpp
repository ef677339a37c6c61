//===- KdaRecurrenceKernel.cpp - the recurrent phase of chunked KDA --------===//
//
// One block per (head, sequence, segment); warp w owns value columns
// [16w, 16w + 16) of the state and keeps its slice of S^T (16 x dk, f32) in
// mma accumulator registers for the whole sequence. Per chunk, with the
// operands of the token-parallel phase in shared memory (double-buffered,
// filled by cp.async while the previous chunk computes):
//
//   X^T    = V^T - S^T Kg^T              (16 x 16, K = dk)
//   Vnew^T = X^T TmB^T                   (= (U - W S)^T, K = 16)
//   O^T    = S^T Qg^T + Vnew^T Aqk^T
//   S^T    = S^T Diag(gl) + Vnew^T Kd    (K = 16)
//
// All products are bf16 `mma.sync m16n8k16` with f32 accumulators; S^T and
// X^T, Vnew^T are reused as A operands straight from their accumulator
// registers, so the state never leaves the registers. Folding U - W S into
// TmB (V - Kg S) saves forming W and U at all.
//
// The same loop summarises a segment for the sequence split: with no values
// and S = I it computes the segment's transition M, with S = 0 its
// contribution E (reference §2: S_out = M S_in + E).
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/KdaKernelSupport.h"
#include "lowering/ToGPU/Kernels/KdaKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace kimi::gpu {
namespace {

constexpr int64_t C = kKdaChunk;
constexpr int64_t kSmallLd = C + 8; // row stride of the 16 x 16 tiles

/// Shared tiles of one recurrence kernel, two buffers each.
struct RecurrenceTiles {
  Value kg, kd, qg, v, tmb, aqk, gl;
  int64_t lds, ldv;
};

struct RecurrenceArgs {
  Value v, cu, qg, kg, kd, aqk, tmb, gl; // inputs (qg/aqk null when no output)
  Value out;                             // o, or null
};

struct Segment {
  SequenceChunks seq;
  Value head;
  Value begin, end; // chunk range inside the sequence
  Value valuesOn;   // i1: V as loaded, else zeros
};

class RecurrenceEmitter {
public:
  RecurrenceEmitter(KernelEmitter &e, mlir::gpu::GPUModuleOp module,
                    StringRef prefix, const KdaPrefillShape &s, int64_t width,
                    bool withOutput)
      : e(e), s(s), W(width), DK(s.dk), cols(width / s.valueSplit),
        withOutput(withOutput) {
    Type bf16 = e.b.getBF16Type();
    t.lds = DK + 8;
    t.ldv = cols + 8;
    std::string p = prefix.str();
    t.kg = e.sharedBuffer(module, p + "_kg", 2 * C * t.lds, bf16);
    t.kd = e.sharedBuffer(module, p + "_kd", 2 * C * t.lds, bf16);
    t.v = e.sharedBuffer(module, p + "_v", 2 * C * t.ldv, bf16);
    t.tmb = e.sharedBuffer(module, p + "_tmb", 2 * C * kSmallLd, bf16);
    t.gl = e.sharedBuffer(module, p + "_gl", 2 * DK, e.b.getF32Type());
    if (withOutput) {
      t.qg = e.sharedBuffer(module, p + "_qg", 2 * C * t.lds, bf16);
      t.aqk = e.sharedBuffer(module, p + "_aqk", 2 * C * kSmallLd, bf16);
    }
    tid = e.threadId();
    lane = e.laneId();
    warp = e.divu(tid, e.idx(32));
    g = e.divu(lane, e.idx(4));
    tq = e.remu(lane, e.idx(4));
    // blockIdx.x = head * valueSplit + part: this block's value columns.
    Value bx = e.blockId(mlir::gpu::Dimension::x);
    head = e.divu(bx, e.idx(s.valueSplit));
    colBase = e.mul(e.remu(bx, e.idx(s.valueSplit)), e.idx(cols));
  }

  /// Accumulator element `el` of tile n: (state row = dk index, column).
  Value stateRow(int64_t n, int el) {
    return e.add(e.mul(tq, e.idx(2)), e.idx(8 * n + el % 2));
  }
  /// The column inside this block's slice, and in the whole state.
  Value localCol(int el) {
    return e.add(e.add(e.mul(warp, e.idx(16)), g), e.idx(8 * (el / 2)));
  }
  Value stateCol(int el) { return e.add(colBase, localCol(el)); }

  /// Initial state: loaded from `buffer` at `base` ([dk][W] f32), or
  /// identity where `identity` holds, else zeros.
  SmallVector<Value> initState(Value buffer, Value base, Value identity) {
    SmallVector<Value> st;
    for (int64_t n = 0; n < DK / 8; ++n)
      for (int el = 0; el < 4; ++el) {
        Value row = stateRow(n, el), col = stateCol(el);
        if (buffer) {
          st.push_back(e.toF32(e.load(buffer, e.add(base, e.add(e.mul(row, e.idx(W)), col)))));
        } else {
          Value one = e.select(e.eq(row, col), e.f32(1.0), e.f32(0.0));
          st.push_back(identity ? e.select(identity, one, e.f32(0.0)) : e.f32(0.0));
        }
      }
    return st;
  }

  void storeState(ArrayRef<Value> st, Value buffer, Value base) {
    Type elt = cast<MemRefType>(buffer.getType()).getElementType();
    for (int64_t n = 0; n < DK / 8; ++n)
      for (int el = 0; el < 4; ++el)
        e.store(e.fromF32(st[n * 4 + el], elt), buffer,
                e.add(base, e.add(e.mul(stateRow(n, el), e.idx(W)), stateCol(el))));
  }

  /// cp.async of chunk `ci` of the segment's sequence into buffer `bsel`;
  /// returns the group token.
  Value issue(const RecurrenceArgs &a, const Segment &sg, Value ci, Value bsel) {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    const int64_t H = s.heads;
    int64_t threads = 2 * cols;
    // Clamp to the sequence's last chunk: prefetches past the end are
    // issued (uniform control flow) but never read.
    Value lastChunk = e.sub(e.maxs(sg.seq.chunks, e.idx(1)), e.idx(1));
    Value cc = e.minu(ci, lastChunk);
    Value chunkHead = e.add(e.mul(e.add(sg.seq.chunkBase, cc), H), sg.head);
    // Tokens of the copies in this block; copies under a guard (the last,
    // partial round of pieces) are committed by the same per-thread
    // cp.async.commit_group without being named.
    SmallVector<Value> tokens;
    Block *issueBlock = b.getInsertionBlock();
    auto copy = [&](Value dst, Value dstIdx, Value src, Value srcIdx, int64_t n,
                    Value srcElems) {
      Value token = nvgpu::DeviceAsyncCopyOp::create(
          b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), dst,
          ValueRange{dstIdx}, src, ValueRange{srcIdx}, b.getIndexAttr(n),
          srcElems, b.getUnitAttr());
      if (b.getInsertionBlock() == issueBlock)
        tokens.push_back(token);
    };
    // Runs `body(v)` for piece indices v = tid + base, guarded only where a
    // round of `threads` pieces is partial.
    auto rounds = [&](int64_t pieces, llvm::function_ref<void(Value)> body) {
      for (int64_t base = 0; base < pieces; base += threads) {
        Value v = e.add(tid, e.idx(base));
        if (base + threads <= pieces) {
          body(v);
          continue;
        }
        auto guard = scf::IfOp::create(b, loc, e.ult(v, e.idx(pieces)), false);
        OpBuilder::InsertionGuard ig(b);
        b.setInsertionPointToStart(&guard.getThenRegion().front());
        body(v);
      }
    };
    // A [16][cols] bf16 tile per chunk-head in global, `cols / 8` 16-byte
    // pieces per row, into rows of stride `ld` in shared memory.
    auto tile = [&](Value dst, int64_t ld, Value src, int64_t cols) {
      rounds(C * cols / 8, [&](Value v) {
        Value row = e.divu(v, e.idx(cols / 8)), col = e.mul(e.remu(v, e.idx(cols / 8)), 8);
        Value srcIdx = e.add(e.mul(e.add(e.mul(chunkHead, C), row), cols), col);
        Value dstIdx = e.add(e.mul(e.add(e.mul(bsel, C), row), ld), col);
        copy(dst, dstIdx, src, srcIdx, 8, Value());
      });
    };
    tile(t.kg, t.lds, a.kg, DK);
    tile(t.kd, t.lds, a.kd, DK);
    tile(t.tmb, kSmallLd, a.tmb, C);
    if (withOutput) {
      tile(t.qg, t.lds, a.qg, DK);
      tile(t.aqk, kSmallLd, a.aqk, C);
    }
    // gl: dk f32 as 16-byte pieces.
    rounds(DK / 4, [&](Value v) {
      copy(t.gl, e.add(e.mul(bsel, e.idx(DK)), e.mul(v, 4)), a.gl,
           e.add(e.mul(chunkHead, DK), e.mul(v, 4)), 4, Value());
    });
    // V rows straight from [T, H, W]; rows past the sequence (or with the
    // values off) are zero-filled by the copy itself.
    rounds(C * cols / 8, [&](Value v) {
      Value row = e.divu(v, e.idx(cols / 8)), col = e.mul(e.remu(v, e.idx(cols / 8)), 8);
      Value inSeq = e.add(e.mul(cc, C), row);
      Value valid = e.andI(e.ult(inSeq, sg.seq.length), sg.valuesOn);
      Value token = e.minu(e.add(sg.seq.start, inSeq), e.idx(s.tokens - 1));
      Value srcIdx =
          e.add(e.mul(e.add(e.mul(token, H), sg.head), W), e.add(colBase, col));
      Value dstIdx = e.add(e.mul(e.add(e.mul(bsel, C), row), t.ldv), col);
      copy(t.v, dstIdx, a.v, srcIdx, 8, e.select(valid, e.idx(8), e.idx(0)));
    });
    return nvgpu::DeviceAsyncCreateGroupOp::create(
        b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), tokens);
  }

  /// One chunk on buffer `bsel`; returns the new state. Writes o rows of
  /// the chunk when the kernel has an output.
  SmallVector<Value> chunk(const RecurrenceArgs &a, const Segment &sg, Value ci,
                           Value bsel, ArrayRef<Value> st) {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    Value rowBase = e.mul(bsel, e.idx(C));
    auto tileOf = [&](int64_t n) {
      return Acc{st[n * 4], st[n * 4 + 1], st[n * 4 + 2], st[n * 4 + 3]};
    };
    std::array<Acc, 2> p = {e.zeroAcc(), e.zeroAcc()};
    std::array<Acc, 2> o = {e.zeroAcc(), e.zeroAcc()};
    for (int64_t kk = 0; kk < DK / 16; ++kk) {
      FragA fa = e.accToFragA(tileOf(2 * kk), tileOf(2 * kk + 1));
      auto bk = e.fragBRows(t.kg, rowBase, t.lds, e.idx(kk * 16));
      p[0] = e.mma(fa, bk[0], p[0]);
      p[1] = e.mma(fa, bk[1], p[1]);
      if (withOutput) {
        auto bq = e.fragBRows(t.qg, rowBase, t.lds, e.idx(kk * 16));
        o[0] = e.mma(fa, bq[0], o[0]);
        o[1] = e.mma(fa, bq[1], o[1]);
      }
    }
    // X^T = V^T - P^T.
    std::array<Acc, 2> x;
    for (int nt = 0; nt < 2; ++nt)
      for (int el = 0; el < 4; ++el) {
        Value token = e.add(e.mul(tq, e.idx(2)), e.idx(8 * nt + el % 2));
        Value vAt = e.add(e.mul(e.add(rowBase, token), e.idx(t.ldv)), localCol(el));
        x[nt][el] = e.fsub(e.toF32(e.load(t.v, vAt)), p[nt][el]);
      }
    FragA fx = e.accToFragA(x[0], x[1]);
    auto bt = e.fragBRows(t.tmb, rowBase, kSmallLd, e.idx(0));
    std::array<Acc, 2> vn = {e.mma(fx, bt[0], e.zeroAcc()),
                             e.mma(fx, bt[1], e.zeroAcc())};
    FragA fv = e.accToFragA(vn[0], vn[1]);
    if (withOutput) {
      auto ba = e.fragBRows(t.aqk, rowBase, kSmallLd, e.idx(0));
      o[0] = e.mma(fv, ba[0], o[0]);
      o[1] = e.mma(fv, ba[1], o[1]);
      const int64_t H = s.heads;
      for (int nt = 0; nt < 2; ++nt)
        for (int el = 0; el < 4; ++el) {
          Value token = e.add(e.mul(tq, e.idx(2)), e.idx(8 * nt + el % 2));
          Value inSeq = e.add(e.mul(ci, C), token);
          auto valid = scf::IfOp::create(b, loc, e.ult(inSeq, sg.seq.length), false);
          OpBuilder::InsertionGuard ig(b);
          b.setInsertionPointToStart(&valid.getThenRegion().front());
          Value at = e.add(
              e.mul(e.add(e.mul(e.add(sg.seq.start, inSeq), H), sg.head), W),
              stateCol(el));
          e.store(e.fromF32(o[nt][el], s.actType), a.out, at);
        }
    }
    // S^T = S^T Diag(gl) + Vnew^T Kd.
    SmallVector<Value> next(st.begin(), st.end());
    Value glBase = e.mul(bsel, e.idx(DK));
    for (int64_t n = 0; n < DK / 8; ++n)
      for (int el = 0; el < 4; ++el)
        next[n * 4 + el] =
            e.fmul(next[n * 4 + el], e.load(t.gl, e.add(glBase, stateRow(n, el))));
    for (int64_t np = 0; np < DK / 16; ++np) {
      auto bd = e.fragBCols(t.kd, rowBase, t.lds, e.idx(np * 16));
      for (int half = 0; half < 2; ++half) {
        int64_t n = 2 * np + half;
        Acc acc = e.mma(fv, bd[half],
                        Acc{next[n * 4], next[n * 4 + 1], next[n * 4 + 2], next[n * 4 + 3]});
        for (int el = 0; el < 4; ++el)
          next[n * 4 + el] = acc[el];
      }
    }
    return next;
  }

  /// The chunk loop of a segment, double-buffered; returns the final state.
  SmallVector<Value> run(const RecurrenceArgs &a, const Segment &sg,
                         SmallVector<Value> st) {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    issue(a, sg, sg.begin, e.idx(0)); // the first chunk's group
    auto loop = scf::ForOp::create(b, loc, sg.begin, sg.end, e.idx(1), st);
    {
      OpBuilder::InsertionGuard ig(b);
      b.setInsertionPointToStart(loop.getBody());
      Value ci = loop.getInductionVar();
      Value rel = e.sub(ci, sg.begin);
      Value bsel = e.remu(rel, e.idx(2));
      Value nsel = e.sub(e.idx(1), bsel);
      Value next = issue(a, sg, e.add(ci, e.idx(1)), nsel);
      nvgpu::DeviceAsyncWaitOp::create(b, loc, next, b.getI32IntegerAttr(1));
      e.barrier();
      SmallVector<Value> cur(loop.getRegionIterArgs().begin(),
                             loop.getRegionIterArgs().end());
      SmallVector<Value> out = chunk(a, sg, ci, bsel, cur);
      e.barrier();
      scf::YieldOp::create(b, loc, out);
    }
    Value drain = nvgpu::DeviceAsyncCreateGroupOp::create(
        b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), ValueRange{});
    nvgpu::DeviceAsyncWaitOp::create(b, loc, drain, b.getI32IntegerAttr(0));
    return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
  }

  KernelEmitter &e;
  const KdaPrefillShape &s;
  int64_t W, DK, cols;
  bool withOutput;
  RecurrenceTiles t;
  Value tid, lane, warp, g, tq, head, colBase;
};

/// Argument types of the chunk operands every recurrence kernel reads, in
/// order: v, cu_seqlens, [Qg], Kg, Kd, [Aqk], TmB, gl ([...] only for a
/// kernel that writes outputs).
SmallVector<Type> chunkOperandTypes(OpBuilder &b, const KdaPrefillShape &s,
                                    bool withOutput) {
  const int64_t H = s.heads, DK = s.dk, slots = s.slots();
  Type bf16 = b.getBF16Type();
  MemRefType tile = flatMemRef(bf16, slots * H * C * DK);
  MemRefType small = flatMemRef(bf16, slots * H * C * C);
  SmallVector<Type> types = {flatMemRef(s.actType, s.tokens * H * s.dv),
                             flatMemRef(b.getI32Type(), s.sequences + 1)};
  if (withOutput)
    types.push_back(tile);
  types.append({tile, tile});
  if (withOutput)
    types.push_back(small);
  types.append({small, flatMemRef(b.getF32Type(), slots * H * DK)});
  return types;
}

/// The chunk operands among `body`'s arguments (chunkOperandTypes' order);
/// `next` is left at the first argument after them.
RecurrenceArgs bindChunkOperands(Block &body, bool withOutput, unsigned &next) {
  RecurrenceArgs a;
  next = 0;
  auto arg = [&] { return body.getArgument(next++); };
  a.v = arg();
  a.cu = arg();
  if (withOutput)
    a.qg = arg();
  a.kg = arg();
  a.kd = arg();
  if (withOutput)
    a.aqk = arg();
  a.tmb = arg();
  a.gl = arg();
  return a;
}

/// Segment p of P of the chunks of sequence `seq`.
Segment segmentOf(KernelEmitter &e, Value cu, const KdaPrefillShape &s, Value seq,
                  Value head, Value p, int64_t P) {
  Segment sg;
  sg.seq = locateSequence(e, cu, s.sequences, seq);
  sg.head = head;
  sg.begin = e.divu(e.mul(p, sg.seq.chunks), e.idx(P));
  sg.end = e.divu(e.mul(e.add(p, e.idx(1)), sg.seq.chunks), e.idx(P));
  return sg;
}

} // namespace

mlir::gpu::GPUFuncOp emitKdaRecurrenceKernel(OpBuilder &b, Location loc,
                                             mlir::gpu::GPUModuleOp module,
                                             const KdaPrefillShape &s) {
  OpBuilder::InsertionGuard guard(b);
  const int64_t T = s.tokens, H = s.heads, DK = s.dk, DV = s.dv, N = s.sequences;
  const int64_t P = s.segments;
  Type f32 = b.getF32Type();
  SmallVector<Type> args = chunkOperandTypes(b, s, /*withOutput=*/true);
  args.append({flatMemRef(P == 1 ? s.stateType : f32, N * H * P * DK * DV),
               flatMemRef(s.actType, T * H * DV), flatMemRef(s.stateType, N * H * DK * DV)});
  GPUFuncOpAndEmitter k(b, loc, module, "kda_recur", args,
                        {static_cast<int32_t>(2 * DV / s.valueSplit), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  unsigned next = 0;
  RecurrenceArgs a = bindChunkOperands(body, /*withOutput=*/true, next);
  Value init = body.getArgument(next);
  a.out = body.getArgument(next + 1);
  Value ht = body.getArgument(next + 2);

  RecurrenceEmitter rec(e, module, "kda_recur", s, DV, /*withOutput=*/true);
  Value head = rec.head;
  Value seq = e.blockId(mlir::gpu::Dimension::y);
  Value p = e.blockId(mlir::gpu::Dimension::z);
  Segment sg = segmentOf(e, a.cu, s, seq, head, p, P);
  sg.valuesOn = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
  Value seqHead = e.add(e.mul(seq, e.idx(H)), head);
  SmallVector<Value> st;
  if (P == 1 && !s.hasInitialState)
    st = rec.initState(Value(), Value(), Value());
  else
    st = rec.initState(init, e.mul(e.add(e.mul(seqHead, e.idx(P)), p), e.idx(DK * DV)),
                       Value());
  SmallVector<Value> fin = rec.run(a, sg, st);
  auto last = scf::IfOp::create(b, loc, e.eq(p, e.idx(P - 1)), false);
  b.setInsertionPointToStart(&last.getThenRegion().front());
  rec.storeState(fin, ht, e.mul(seqHead, e.idx(DK * DV)));
  return k.func;
}

mlir::gpu::GPUFuncOp emitKdaSummarizeKernel(OpBuilder &b, Location loc,
                                            mlir::gpu::GPUModuleOp module,
                                            const KdaPrefillShape &s) {
  OpBuilder::InsertionGuard guard(b);
  const int64_t H = s.heads, DK = s.dk, DV = s.dv, N = s.sequences;
  const int64_t P = s.segments;
  Type f32 = b.getF32Type();
  SmallVector<Type> args = chunkOperandTypes(b, s, /*withOutput=*/false);
  args.append({flatMemRef(f32, N * H * (P - 1) * DK * DK),
               flatMemRef(f32, N * H * (P - 1) * DK * DV)});
  GPUFuncOpAndEmitter k(b, loc, module, "kda_summarize", args,
                        {static_cast<int32_t>(2 * DV / s.valueSplit), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  unsigned next = 0;
  RecurrenceArgs a = bindChunkOperands(body, /*withOutput=*/false, next);
  Value mBuf = body.getArgument(next), eBuf = body.getArgument(next + 1);

  RecurrenceEmitter rec(e, module, "kda_summarize", s, DV, /*withOutput=*/false);
  Value head = rec.head;
  Value seq = e.blockId(mlir::gpu::Dimension::y);
  Value z = e.blockId(mlir::gpu::Dimension::z);
  Value isM = e.ult(z, e.idx(P - 1));
  Value p = e.select(isM, z, e.sub(z, e.idx(P - 1)));
  Segment sg = segmentOf(e, a.cu, s, seq, head, p, P);
  sg.valuesOn = arith::XOrIOp::create(
      b, loc, isM, arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1));
  SmallVector<Value> st = rec.initState(Value(), Value(), isM);
  SmallVector<Value> fin = rec.run(a, sg, st);
  Value out = e.select(isM, mBuf, eBuf);
  Value seqHead = e.add(e.mul(seq, e.idx(H)), head);
  rec.storeState(fin, out,
                 e.mul(e.add(e.mul(seqHead, e.idx(P - 1)), p), e.idx(DK * DV)));
  return k.func;
}

mlir::gpu::GPUFuncOp emitKdaFoldKernel(OpBuilder &b, Location loc,
                                       mlir::gpu::GPUModuleOp module,
                                       const KdaPrefillShape &s) {
  OpBuilder::InsertionGuard guard(b);
  const int64_t H = s.heads, DK = s.dk, W = s.dv, N = s.sequences, P = s.segments;
  constexpr int64_t kThreads = 256;
  Type f32 = b.getF32Type();
  SmallVector<Type> args = {flatMemRef(s.stateType, N * H * DK * W),
                            flatMemRef(f32, N * H * (P - 1) * DK * DK),
                            flatMemRef(f32, N * H * (P - 1) * DK * W),
                            flatMemRef(f32, N * H * P * DK * W)};
  GPUFuncOpAndEmitter k(b, loc, module, "kda_fold", args,
                        {static_cast<int32_t>(kThreads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  Value h0 = body.getArgument(0), mBuf = body.getArgument(1);
  Value eBuf = body.getArgument(2), sIn = body.getArgument(3);
  Value head = e.blockId(mlir::gpu::Dimension::x);
  Value seq = e.blockId(mlir::gpu::Dimension::y);
  Value tid = e.threadId();
  Value seqHead = e.add(e.mul(seq, e.idx(H)), head);
  // blockIdx.z picks 16 state columns (the columns fold independently);
  // thread t takes column t % 16 and rows [(t / 16) rows, +rows).
  constexpr int64_t kCols = 16;
  const int64_t groups = kThreads / kCols, rows = DK / groups;
  Value colBlock = e.blockId(mlir::gpu::Dimension::z);
  Value j = e.add(e.mul(colBlock, e.idx(kCols)), e.remu(tid, e.idx(kCols)));
  Value rowBase = e.mul(e.divu(tid, e.idx(kCols)), e.idx(rows));
  auto sAt = [&](Value p, Value i) {
    return e.add(e.mul(e.add(e.mul(seqHead, e.idx(P)), p), e.idx(DK * W)),
                 e.add(e.mul(i, e.idx(W)), j));
  };
  for (int64_t rr = 0; rr < rows; ++rr) {
    Value i = e.add(rowBase, e.idx(rr));
    Value v = s.hasInitialState
                  ? e.toF32(e.load(h0, e.add(e.mul(seqHead, e.idx(DK * W)),
                                             e.add(e.mul(i, e.idx(W)), j))))
                  : e.f32(0.0);
    e.store(v, sIn, sAt(e.idx(0), i));
  }
  auto steps = scf::ForOp::create(b, loc, e.idx(0), e.idx(P - 1), e.idx(1));
  b.setInsertionPointToStart(steps.getBody());
  Value p = steps.getInductionVar();
  e.barrier();
  Value sumBase = e.mul(e.add(e.mul(seqHead, e.idx(P - 1)), p), e.idx(DK * W));
  SmallVector<Value> acc;
  for (int64_t rr = 0; rr < rows; ++rr) {
    Value i = e.add(rowBase, e.idx(rr));
    acc.push_back(e.load(eBuf, e.add(sumBase, e.add(e.mul(i, e.idx(W)), j))));
  }
  auto dot = scf::ForOp::create(b, loc, e.idx(0), e.idx(DK), e.idx(1), acc);
  {
    OpBuilder::InsertionGuard ig(b);
    b.setInsertionPointToStart(dot.getBody());
    Value m = dot.getInductionVar();
    Value sv = e.load(sIn, sAt(p, m));
    Value mBase = e.mul(e.add(e.mul(seqHead, e.idx(P - 1)), p), e.idx(DK * DK));
    SmallVector<Value> next;
    for (int64_t rr = 0; rr < rows; ++rr) {
      Value i = e.add(rowBase, e.idx(rr));
      Value mv = e.load(mBuf, e.add(mBase, e.add(e.mul(i, e.idx(DK)), m)));
      next.push_back(e.fadd(dot.getRegionIterArgs()[rr], e.fmul(mv, sv)));
    }
    scf::YieldOp::create(b, loc, next);
  }
  for (int64_t rr = 0; rr < rows; ++rr)
    e.store(dot.getResult(rr), sIn,
            sAt(e.add(p, e.idx(1)), e.add(rowBase, e.idx(rr))));
  return k.func;
}

} // namespace kimi::gpu

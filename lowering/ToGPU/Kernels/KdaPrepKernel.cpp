//===- KdaPrepKernel.cpp - the token-parallel phase of chunked KDA ---------===//
//
// One block per (16-token chunk, head), one thread per key channel. With
// G the inclusive cumsum of g inside the chunk (causal anchor at the chunk's
// first token) it writes the chunk's operands of the recurrence:
//
//   Qg = scale exp(G) ⊙ Q      Kg = exp(G) ⊙ K      Kd = exp(G_last - G) ⊙ K
//   gl = exp(G_last)
//   Aqk = tril(Qg (exp(-G) ⊙ K)^T)                 (incl. the diagonal)
//   TmB = (I + Akk)^-1 Diag(beta),  Akk = strict_tril(Diag(beta) Kg (exp(-G) ⊙ K)^T)
//
// Dense diagonal tiles (the decay proof bounds |G| so exp(-G) is finite)
// form Akk and Aqk with bf16 tensor-core products (warp 0 and warp 1); the
// pairwise strategy forms exp(G_i - G_j) per pair in f32 instead and never
// materialises exp(-G). The inverse is a forward substitution in f32, one
// thread per column. Tokens past the end of a sequence are zeros (q, k, v,
// beta and g), which makes them inert in every product.
//
//===----------------------------------------------------------------------===//

#include "lowering/ToGPU/Kernels/KdaKernels.h"
#include "lowering/ToGPU/Kernels/KdaKernelSupport.h"
#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace kimi::gpu {

int64_t kdaPrepThreads(int64_t dk) { return dk >= 128 ? dk / 2 : dk; }

LogicalResult verifyKdaPrefillShape(const KdaPrefillShape &s, std::string &why) {
  auto fail = [&](const std::string &msg) {
    why = msg;
    return failure();
  };
  if (s.tokens <= 0 || s.sequences <= 0 || s.heads <= 0)
    return fail("tokens, sequences and heads must be positive");
  if (s.dk % 16 != 0 || s.dk < 32 || s.dk > 256)
    return fail("dk = " + std::to_string(s.dk) +
                ": the GPU KDA kernels need a multiple of 16 in [32, 256]");
  if (s.dv % 16 != 0 || s.dv < 32 || s.dv > 256)
    return fail("dv = " + std::to_string(s.dv) +
                ": the GPU KDA kernels need a multiple of 16 in [32, 256]");
  if (s.segments < 1)
    return fail("segments must be >= 1");
  if (s.valueSplit < 1 || s.dv % (16 * s.valueSplit) != 0)
    return fail("valueSplit = " + std::to_string(s.valueSplit) +
                ": dv must split into slices of a multiple of 16 columns");
  if (s.segments > 1 && s.dk != s.dv)
    return fail("the sequence split needs dk == dv (the transition M is "
                "carried by the value-width kernel)");
  if (!s.actType || !(s.actType.isBF16() || s.actType.isF16()))
    return fail("q/k/v/beta/o must be bf16 or f16 on the GPU path");
  if (!s.gateType || !(s.gateType.isBF16() || s.gateType.isF32()))
    return fail("g must be bf16 or f32 on the GPU path");
  if (!s.stateType || !(s.stateType.isF32() || s.stateType.isBF16() || s.stateType.isF16()))
    return fail("the state must be stored as f32, bf16 or f16");
  return success();
}

Value emitGate(KernelEmitter &e, const KdaGateFusion &gate, Value z, Value rate,
               Value dtBias) {
  Value x = e.fadd(z, dtBias);
  if (gate.form == KdaGateFusion::Form::LowerBound) {
    Value one = e.f32(1.0);
    Value sig = e.fastRcp(e.fadd(one, e.fastExp(e.fneg(e.fmul(rate, x)))));
    return e.fmul(e.f32(gate.lower), sig);
  }
  // softplus(x) = max(x, 0) + log1p(exp(-|x|)), stable for any x.
  Value sp = e.fadd(e.fmax(x, e.f32(0.0)), e.log1p(e.exp(e.fneg(e.fabs(x)))));
  return e.fneg(e.fmul(rate, sp));
}

SequenceChunks locateSequence(KernelEmitter &e, Value cu, int64_t sequences,
                              Value seq) {
  // Chunks before `seq`: sum of ceil(len / 16) over earlier sequences.
  Value c0 = e.idx(0), c1 = e.idx(1);
  auto loop = scf::ForOp::create(e.b, e.loc, c0, e.idx(sequences), c1,
                                 ValueRange{c0});
  {
    OpBuilder::InsertionGuard g(e.b);
    e.b.setInsertionPointToStart(loop.getBody());
    Value s = loop.getInductionVar();
    Value acc = loop.getRegionIterArgs()[0];
    Value len = e.sub(e.toIndex(e.load(cu, e.add(s, c1))),
                      e.toIndex(e.load(cu, s)));
    Value ncs = e.divu(e.add(len, kKdaChunk - 1), e.idx(kKdaChunk));
    Value next = e.select(e.ult(s, seq), e.add(acc, ncs), acc);
    scf::YieldOp::create(e.b, e.loc, next);
  }
  SequenceChunks out;
  out.chunkBase = loop.getResult(0);
  out.start = e.toIndex(e.load(cu, seq));
  out.length = e.sub(e.toIndex(e.load(cu, e.add(seq, c1))), out.start);
  out.chunks = e.divu(e.add(out.length, kKdaChunk - 1), e.idx(kKdaChunk));
  return out;
}

namespace {

struct PrepBuffers {
  Value q, k, g, beta, cu, qg, kg, kd, aqk, tmb, gl;
};

/// A 16 x 16 product over dk of two [16][lds] bf16 shared tiles,
/// A rows times B rows (A B^T), on tensor cores: two m16n8 accumulators.
std::array<Acc, 2> tileProductABt(KernelEmitter &e, Value aTile, Value bTile,
                                  int64_t dk, int64_t lds) {
  std::array<Acc, 2> acc = {e.zeroAcc(), e.zeroAcc()};
  for (int64_t kk = 0; kk < dk / 16; ++kk) {
    FragA fa = e.fragA(aTile, e.idx(0), lds, e.idx(kk * 16));
    auto bm = e.fragBRows(bTile, e.idx(0), lds, e.idx(kk * 16));
    acc[0] = e.mma(fa, bm[0], acc[0]);
    acc[1] = e.mma(fa, bm[1], acc[1]);
  }
  return acc;
}

} // namespace

mlir::gpu::GPUFuncOp emitKdaPrepKernel(OpBuilder &b, Location loc,
                                       mlir::gpu::GPUModuleOp module,
                                       const KdaPrefillShape &s) {
  OpBuilder::InsertionGuard guard(b);
  const int64_t C = kKdaChunk, T = s.tokens, H = s.heads, DK = s.dk;
  const int64_t slots = s.slots(), lds = DK + 8;
  Type bf16 = b.getBF16Type(), f32 = b.getF32Type(), i32 = b.getI32Type();
  SmallVector<Type> args = {
      flatMemRef(s.actType, T * H * DK),      flatMemRef(s.actType, T * H * DK),
      flatMemRef(s.gateType, T * H * DK),     flatMemRef(s.actType, T * H),
      flatMemRef(i32, s.sequences + 1)};
  const bool fused = s.gate.form != KdaGateFusion::Form::None;
  if (fused) {
    args.push_back(flatMemRef(f32, H));
    args.push_back(flatMemRef(f32, H * DK));
  }
  for (Type t : {flatMemRef(bf16, slots * H * C * DK), flatMemRef(bf16, slots * H * C * DK),
                 flatMemRef(bf16, slots * H * C * DK), flatMemRef(bf16, slots * H * C * C),
                 flatMemRef(bf16, slots * H * C * C), flatMemRef(f32, slots * H * DK)})
    args.push_back(t);
  // Two adjacent channels per thread (4-byte accesses) when that still
  // leaves the two warps the tensor-core Akk/Aqk products need.
  const int64_t threads = kdaPrepThreads(DK), cpt = DK / threads;
  GPUFuncOpAndEmitter k(b, loc, module, "kda_prep", args,
                        {static_cast<int32_t>(threads), 1, 1});
  KernelEmitter &e = k.e;
  Block &body = k.func.getBody().front();
  unsigned o = fused ? 7 : 5;
  PrepBuffers buf{body.getArgument(0), body.getArgument(1), body.getArgument(2),
                  body.getArgument(3), body.getArgument(4), body.getArgument(o),
                  body.getArgument(o + 1), body.getArgument(o + 2),
                  body.getArgument(o + 3), body.getArgument(o + 4),
                  body.getArgument(o + 5)};

  Value qgS = e.sharedBuffer(module, "kda_prep_qg", C * lds, bf16);
  Value kgS = e.sharedBuffer(module, "kda_prep_kg", C * lds, bf16);
  Value kinvS = e.sharedBuffer(module, "kda_prep_kinv", C * lds, bf16);
  Value akkS = e.sharedBuffer(module, "kda_prep_akk", C * C, f32);
  Value betaS = e.sharedBuffer(module, "kda_prep_beta", C, f32);
  Value gS, kS, qS;
  if (!s.denseDiagonal) {
    gS = e.sharedBuffer(module, "kda_prep_g", C * DK, f32);
    kS = e.sharedBuffer(module, "kda_prep_k", C * DK, f32);
    qS = e.sharedBuffer(module, "kda_prep_q", C * DK, f32);
  }

  Value slot = e.blockId(mlir::gpu::Dimension::x);
  Value h = e.blockId(mlir::gpu::Dimension::y);
  Value d = e.threadId();
  Value d0 = e.mul(d, e.idx(cpt)); // first channel of this thread

  // Which sequence and which of its chunks this slot is (slots past the
  // last chunk exit).
  Value c0 = e.idx(0), c1 = e.idx(1);
  Value none = e.idx(s.sequences);
  auto find = scf::ForOp::create(b, loc, c0, e.idx(s.sequences), c1,
                                 ValueRange{c0, none, c0});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(find.getBody());
    Value sq = find.getInductionVar();
    Value acc = find.getRegionIterArgs()[0];
    Value len = e.sub(e.toIndex(e.load(buf.cu, e.add(sq, c1))),
                      e.toIndex(e.load(buf.cu, sq)));
    Value ncs = e.divu(e.add(len, C - 1), e.idx(C));
    Value hit = e.andI(e.ule(acc, slot), e.ult(slot, e.add(acc, ncs)));
    scf::YieldOp::create(
        b, loc,
        ValueRange{e.add(acc, ncs), e.select(hit, sq, find.getRegionIterArgs()[1]),
                   e.select(hit, e.sub(slot, acc), find.getRegionIterArgs()[2])});
  }
  Value seq = find.getResult(1), chunkInSeq = find.getResult(2);
  auto inRange = scf::IfOp::create(b, loc, e.ult(seq, none), false);
  b.setInsertionPointToStart(&inRange.getThenRegion().front());

  Value seqStart = e.toIndex(e.load(buf.cu, seq));
  Value seqLen = e.sub(e.toIndex(e.load(buf.cu, e.add(seq, c1))), seqStart);
  Value t0 = e.add(seqStart, e.mul(chunkInSeq, C));
  Value n = e.minu(e.idx(C), e.sub(seqLen, e.mul(chunkInSeq, C)));
  Value nLast = e.sub(n, c1);
  Value zero = e.f32(0.0);
  // Element (token t of the chunk, head h, channel ch) of a [T, H, D] tensor,
  // zero past the sequence's end.
  // This thread's cpt channels of token t (one vector access).
  auto tokenValues = [&](Value tensor, int64_t t) {
    Value tt = e.add(t0, e.minu(e.idx(t), nLast));
    Value at = e.add(e.mul(e.add(e.mul(tt, H), h), DK), d0);
    Type elt = cast<MemRefType>(tensor.getType()).getElementType();
    // Left at element alignment on purpose: declaring the pair 4-byte
    // aligned (one b32 access instead of two b16) made this kernel 24 %
    // slower on the H200 (docs/perf/kda.md).
    Value vec = vector::LoadOp::create(b, loc, VectorType::get({cpt}, elt), tensor,
                                       ValueRange{at});
    SmallVector<Value> out;
    for (int64_t c = 0; c < cpt; ++c) {
      Value x = e.toF32(vector::ExtractOp::create(b, loc, vec, ArrayRef<int64_t>{c}));
      out.push_back(e.select(e.ult(e.idx(t), n), x, zero));
    }
    return out;
  };
  auto storeValues = [&](ArrayRef<Value> xs, Type elt, Value memref, Value at) {
    SmallVector<Value> conv;
    for (Value x : xs)
      conv.push_back(e.fromF32(x, elt));
    Value vec = vector::FromElementsOp::create(
        b, loc, VectorType::get({static_cast<int64_t>(xs.size())}, elt), conv);
    vector::StoreOp::create(b, loc, vec, memref, ValueRange{at});
  };

  // Inclusive cumsum of g over the chunk, for this thread's channel (g
  // formed from z here when the gate is fused; zero past the end).
  SmallVector<Value> rate(cpt), dtBias(cpt);
  if (fused)
    for (int64_t c = 0; c < cpt; ++c) {
      rate[c] = e.exp(e.load(body.getArgument(5), h));
      dtBias[c] = e.load(body.getArgument(6), e.add(e.mul(h, DK), e.add(d0, e.idx(c))));
    }
  // G[t][c]: cumsum for channel d0 + c.
  SmallVector<SmallVector<Value>> G(C, SmallVector<Value>(cpt));
  SmallVector<Value> run(cpt, zero);
  for (int64_t t = 0; t < C; ++t) {
    SmallVector<Value> gv = tokenValues(buf.g, t);
    for (int64_t c = 0; c < cpt; ++c) {
      if (fused)
        gv[c] = e.select(e.ult(e.idx(t), n),
                         emitGate(e, s.gate, gv[c], rate[c], dtBias[c]), zero);
      run[c] = e.fadd(run[c], gv[c]);
      G[t][c] = run[c];
    }
  }
  Value chunkHead = e.add(e.mul(slot, H), h); // slot * H + h
  SmallVector<Value> gLast(cpt);
  for (int64_t c = 0; c < cpt; ++c)
    gLast[c] = e.fastExp(G[C - 1][c]);
  storeValues(gLast, f32, buf.gl, e.add(e.mul(chunkHead, DK), d0));
  Value sc = e.f32(s.scale);
  for (int64_t t = 0; t < C; ++t) {
    SmallVector<Value> qv = tokenValues(buf.q, t), kv = tokenValues(buf.k, t);
    SmallVector<Value> qg(cpt), kg(cpt), kd(cpt), kinv(cpt);
    for (int64_t c = 0; c < cpt; ++c) {
      Value eg = e.fastExp(G[t][c]);
      qg[c] = e.fmul(e.fmul(qv[c], sc), eg);
      kg[c] = e.fmul(kv[c], eg);
      if (s.denseDiagonal) {
        // The proof bounds |G| (exp(-G) finite), so one exp serves all:
        // exp(-G) = 1 / exp(G), exp(G_last - G) = exp(G_last) exp(-G).
        Value inv = e.fastRcp(eg);
        kinv[c] = e.fmul(kv[c], inv);
        kd[c] = e.fmul(kv[c], e.fmul(gLast[c], inv));
      } else {
        kd[c] = e.fmul(kv[c], e.fastExp(e.fsub(G[C - 1][c], G[t][c])));
      }
    }
    Value at = e.add(e.mul(e.add(e.mul(chunkHead, C), e.idx(t)), DK), d0);
    storeValues(qg, bf16, buf.qg, at);
    storeValues(kg, bf16, buf.kg, at);
    storeValues(kd, bf16, buf.kd, at);
    Value sat = e.add(e.idx(t * lds), d0);
    storeValues(qg, bf16, qgS, sat);
    storeValues(kg, bf16, kgS, sat);
    if (s.denseDiagonal) {
      storeValues(kinv, bf16, kinvS, sat);
    } else {
      Value fat = e.add(e.idx(t * DK), d0);
      SmallVector<Value> gt(cpt), qs(cpt);
      for (int64_t c = 0; c < cpt; ++c) {
        gt[c] = G[t][c];
        qs[c] = e.fmul(qv[c], sc);
      }
      storeValues(gt, f32, gS, fat);
      storeValues(kv, f32, kS, fat);
      storeValues(qs, f32, qS, fat);
    }
  }
  {
    auto first = scf::IfOp::create(b, loc, e.ult(d, e.idx(C)), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&first.getThenRegion().front());
    Value tt = e.add(t0, e.minu(d, nLast));
    Value bv = e.toF32(e.load(buf.beta, e.add(e.mul(tt, H), h)));
    e.store(e.select(e.ult(d, n), bv, zero), betaS, d);
  }
  e.barrier();

  // Akk (strictly lower, rows scaled by beta) into shared f32, Aqk (lower incl.
  // the diagonal) to global bf16.
  auto aqkIndex = [&](Value i, Value j) {
    return e.add(e.mul(e.add(e.mul(chunkHead, C), i), C), j);
  };
  if (s.denseDiagonal) {
    Value warp = e.divu(d, e.idx(32));
    Value lane = e.laneId();
    Value row0 = e.divu(lane, e.idx(4));
    Value col0 = e.mul(e.remu(lane, e.idx(4)), e.idx(2));
    for (int which = 0; which < 2; ++which) {
      auto isWarp = scf::IfOp::create(b, loc, e.eq(warp, e.idx(which)), false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&isWarp.getThenRegion().front());
      auto acc = tileProductABt(e, which == 0 ? kgS : qgS, kinvS, DK, lds);
      for (int nt = 0; nt < 2; ++nt)
        for (int el = 0; el < 4; ++el) {
          Value i = e.add(row0, e.idx(8 * (el / 2)));
          Value j = e.add(col0, e.idx(8 * nt + el % 2));
          Value v = acc[nt][el];
          if (which == 0) {
            Value scaled = e.fmul(v, e.load(betaS, i));
            e.store(e.select(e.ult(j, i), scaled, zero), akkS, e.add(e.mul(i, C), j));
          } else {
            e.store(e.fromF32(e.select(e.ule(j, i), v, zero), bf16), buf.aqk,
                    aqkIndex(i, j));
          }
        }
    }
  } else {
    // Pairwise: exp(G_i - G_j) formed per pair (j <= i, so never above 1).
    for (int64_t base = 0; base < C * C; base += threads) {
      Value p = e.add(d, e.idx(base));
      auto has = scf::IfOp::create(b, loc, e.ult(p, e.idx(C * C)), false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&has.getThenRegion().front());
      Value i = e.divu(p, e.idx(C)), j = e.remu(p, e.idx(C));
      Value lower = e.ule(j, i);
      auto dot = scf::ForOp::create(b, loc, c0, e.idx(DK), c1,
                                    ValueRange{zero, zero});
      {
        OpBuilder::InsertionGuard g2(b);
        b.setInsertionPointToStart(dot.getBody());
        Value m = dot.getInductionVar();
        Value gi = e.load(gS, e.add(e.mul(i, DK), m));
        Value gj = e.load(gS, e.add(e.mul(j, DK), m));
        Value w = e.exp(e.select(lower, e.fsub(gi, gj), zero));
        Value kj = e.fmul(e.load(kS, e.add(e.mul(j, DK), m)), w);
        Value ki = e.load(kS, e.add(e.mul(i, DK), m));
        Value qi = e.load(qS, e.add(e.mul(i, DK), m));
        scf::YieldOp::create(
            b, loc,
            ValueRange{e.fadd(dot.getRegionIterArgs()[0], e.fmul(ki, kj)),
                       e.fadd(dot.getRegionIterArgs()[1], e.fmul(qi, kj))});
      }
      Value akk = e.fmul(dot.getResult(0), e.load(betaS, i));
      e.store(e.select(e.ult(j, i), akk, zero), akkS, p);
      e.store(e.fromF32(e.select(lower, dot.getResult(1), zero), bf16), buf.aqk,
              aqkIndex(i, j));
    }
  }
  e.barrier();

  // Column j of Tm = (I + Akk)^-1 by forward substitution, times beta_j.
  {
    auto cols = scf::IfOp::create(b, loc, e.ult(d, e.idx(C)), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&cols.getThenRegion().front());
    Value j = d;
    SmallVector<Value> col(C);
    for (int64_t m = 0; m < C; ++m)
      col[m] = e.select(e.eq(j, e.idx(m)), e.f32(1.0), zero);
    for (int64_t i = 1; i < C; ++i) {
      Value dotv = zero;
      for (int64_t m = 0; m < i; ++m)
        dotv = e.fadd(dotv, e.fmul(e.load(akkS, e.idx(i * C + m)), col[m]));
      col[i] = e.select(e.ult(j, e.idx(i)), e.fneg(dotv), col[i]);
    }
    Value bj = e.load(betaS, j);
    for (int64_t i = 0; i < C; ++i)
      e.store(e.fromF32(e.fmul(col[i], bj), bf16), buf.tmb, aqkIndex(e.idx(i), j));
  }
  return k.func;
}

} // namespace kimi::gpu

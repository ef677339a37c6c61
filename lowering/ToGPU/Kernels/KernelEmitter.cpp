//===- KernelEmitter.cpp - building gpu.func bodies from C++ ---------------===//

#include "lowering/ToGPU/Kernels/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>
#include <optional>

using namespace mlir;

namespace kimi::gpu {

Value KernelEmitter::idx(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value KernelEmitter::i32(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}
Value KernelEmitter::f32(double v) {
  return arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                        APFloat(static_cast<float>(v)));
}
Value KernelEmitter::constLike(Value like, int64_t v) {
  if (like.getType().isIndex())
    return idx(v);
  return arith::ConstantIntOp::create(b, loc, like.getType(), v);
}

Value KernelEmitter::add(Value a, Value c) { return arith::AddIOp::create(b, loc, a, c); }
Value KernelEmitter::sub(Value a, Value c) { return arith::SubIOp::create(b, loc, a, c); }
Value KernelEmitter::mul(Value a, Value c) { return arith::MulIOp::create(b, loc, a, c); }
Value KernelEmitter::divu(Value a, Value c) { return arith::DivUIOp::create(b, loc, a, c); }
Value KernelEmitter::remu(Value a, Value c) { return arith::RemUIOp::create(b, loc, a, c); }
Value KernelEmitter::minu(Value a, Value c) { return arith::MinUIOp::create(b, loc, a, c); }
Value KernelEmitter::maxs(Value a, Value c) { return arith::MaxSIOp::create(b, loc, a, c); }
Value KernelEmitter::ult(Value a, Value c) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c);
}
Value KernelEmitter::ule(Value a, Value c) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, a, c);
}
Value KernelEmitter::eq(Value a, Value c) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, a, c);
}
Value KernelEmitter::andI(Value a, Value c) { return arith::AndIOp::create(b, loc, a, c); }
Value KernelEmitter::select(Value cond, Value t, Value f) {
  return arith::SelectOp::create(b, loc, cond, t, f);
}
Value KernelEmitter::toI32(Value index) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
}
Value KernelEmitter::toIndex(Value integer) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), integer);
}

Value KernelEmitter::fadd(Value a, Value c) { return arith::AddFOp::create(b, loc, a, c); }
Value KernelEmitter::fsub(Value a, Value c) { return arith::SubFOp::create(b, loc, a, c); }
Value KernelEmitter::fmul(Value a, Value c) { return arith::MulFOp::create(b, loc, a, c); }
Value KernelEmitter::fneg(Value a) { return arith::NegFOp::create(b, loc, a); }
Value KernelEmitter::exp(Value a) { return math::ExpOp::create(b, loc, a); }
Value KernelEmitter::fastExp(Value a) {
  return math::Exp2Op::create(b, loc, fmul(a, f32(1.4426950408889634)));
}
Value KernelEmitter::fastRcp(Value a) {
  return NVVM::RcpApproxFtzF32Op::create(b, loc, b.getF32Type(), a);
}
Value KernelEmitter::fma(Value a, Value c, Value d) {
  return math::FmaOp::create(b, loc, a, c, d);
}
Value KernelEmitter::fastSigmoid(Value a) {
  return fastRcp(fadd(f32(1.0), fastExp(fneg(a))));
}
Value KernelEmitter::fastTanh(Value a) {
  Value a2 = fmul(a, a);
  Value series =
      fmul(a, fma(a2, fma(a2, f32(2.0 / 15.0), f32(-1.0 / 3.0)), f32(1.0)));
  // e^2a overflows to inf for large a: rcp(inf) = 0, so 1; e^2a -> 0: -1.
  Value wide = fma(f32(-2.0), fastRcp(fadd(fastExp(fmul(a, f32(2.0))), f32(1.0))),
                   f32(1.0));
  Value small = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, fabs(a),
                                      f32(1.0 / 16.0));
  return select(small, series, wide);
}
Value KernelEmitter::log1p(Value a) { return math::Log1pOp::create(b, loc, a); }
Value KernelEmitter::fmax(Value a, Value c) {
  return arith::MaximumFOp::create(b, loc, a, c);
}
Value KernelEmitter::fabs(Value a) { return math::AbsFOp::create(b, loc, a); }
Value KernelEmitter::fdiv(Value a, Value c) { return arith::DivFOp::create(b, loc, a, c); }
Value KernelEmitter::toF32(Value v) {
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}
Value KernelEmitter::fromF32(Value v, Type type) {
  if (type.isF32())
    return v;
  return arith::TruncFOp::create(b, loc, type, v);
}

Value KernelEmitter::threadId() {
  return mlir::gpu::ThreadIdOp::create(b, loc, mlir::gpu::Dimension::x);
}
Value KernelEmitter::blockId(mlir::gpu::Dimension dim) {
  return mlir::gpu::BlockIdOp::create(b, loc, dim);
}
Value KernelEmitter::laneId() { return mlir::gpu::LaneIdOp::create(b, loc, nullptr); }
Value KernelEmitter::shuffleXor(Value v, int32_t offset) {
  return mlir::gpu::ShuffleOp::create(b, loc, v, offset, 32,
                                      mlir::gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

Value KernelEmitter::sharedBuffer(mlir::gpu::GPUModuleOp module, StringRef name,
                                  int64_t elements, Type type) {
  auto memrefType = MemRefType::get(
      {elements}, type, MemRefLayoutAttrInterface{},
      mlir::gpu::AddressSpaceAttr::get(b.getContext(),
                                       mlir::gpu::AddressSpace::Workgroup));
  if (!module.lookupSymbol(name)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(module.getBody());
    auto global = memref::GlobalOp::create(
        b, loc, name, b.getStringAttr("private"), memrefType, Attribute{},
        /*constant=*/false, b.getI64IntegerAttr(16));
    (void)global;
  }
  return memref::GetGlobalOp::create(b, loc, memrefType, name);
}

Value KernelEmitter::dynamicSharedBuffer(int64_t byteOffset, int64_t elements,
                                         Type type) {
  auto workgroup = mlir::gpu::AddressSpaceAttr::get(
      b.getContext(), mlir::gpu::AddressSpace::Workgroup);
  Value bytes = mlir::gpu::DynamicSharedMemoryOp::create(
      b, loc,
      MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                      MemRefLayoutAttrInterface{}, workgroup));
  return memref::ViewOp::create(
      b, loc,
      MemRefType::get({elements}, type, MemRefLayoutAttrInterface{}, workgroup),
      bytes, idx(byteOffset), ValueRange{});
}

Value KernelEmitter::sharedPtr(Value memref, Value elementOffset, Type type) {
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
  Value asInt = arith::IndexCastOp::create(b, loc, b.getI64Type(), base);
  auto ptrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
  Value ptr = LLVM::IntToPtrOp::create(b, loc, ptrType, asInt);
  return LLVM::GEPOp::create(b, loc, ptrType, type, ptr,
                             ValueRange{elementOffset});
}

namespace {
/// The `!llvm.ptr<1>` to element `elementOffset` of the global `memref`.
Value globalPtr(OpBuilder &b, Location loc, Value memref, Value elementOffset) {
  auto type = cast<MemRefType>(memref.getType());
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, memref);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
  Value elements = arith::AddIOp::create(b, loc, meta.getOffset(), elementOffset);
  Value bytes = arith::MulIOp::create(
      b, loc, elements,
      arith::ConstantIndexOp::create(b, loc, type.getElementTypeBitWidth() / 8));
  Value address = arith::IndexCastOp::create(
      b, loc, b.getI64Type(), arith::AddIOp::create(b, loc, base, bytes));
  Value generic = LLVM::IntToPtrOp::create(
      b, loc, LLVM::LLVMPointerType::get(b.getContext()), address);
  return LLVM::AddrSpaceCastOp::create(
      b, loc, LLVM::LLVMPointerType::get(b.getContext(), 1), generic);
}
} // namespace

void KernelEmitter::prefetchL1(Value memref, Value elementOffset) {
  NVVM::PrefetchOp::create(
      b, loc, NVVM::PrefetchCacheLevelAttr::get(b.getContext(), NVVM::PrefetchCacheLevel::L1),
      /*evictPriority=*/nullptr, globalPtr(b, loc, memref, elementOffset),
      /*predicate=*/Value());
}

void KernelEmitter::prefetchL2(Value memref, Value elementOffset, Value bytes) {
  NVVM::CpAsyncBulkPrefetchOp::create(
      b, loc, globalPtr(b, loc, memref, elementOffset), bytes, Value());
}

Value KernelEmitter::load(Value memref, Value index) {
  return memref::LoadOp::create(b, loc, memref, ValueRange{index});
}
void KernelEmitter::store(Value value, Value memref, Value index) {
  memref::StoreOp::create(b, loc, value, memref, ValueRange{index});
}

SmallVector<Value, 4> KernelEmitter::ldmatrix(Value ptr, int num, bool transpose) {
  MLIRContext *ctx = b.getContext();
  Type i32Type = b.getI32Type();
  Type resultType = i32Type;
  if (num > 1)
    resultType = LLVM::LLVMStructType::getLiteral(
        ctx, SmallVector<Type>(num, i32Type));
  auto layout = NVVM::MMALayoutAttr::get(
      ctx, transpose ? NVVM::MMALayout::col : NVVM::MMALayout::row);
  auto shape = NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8);
  auto elt = NVVM::LdStMatrixEltTypeAttr::get(ctx, NVVM::LdStMatrixEltType::B16);
  Value res = NVVM::LdMatrixOp::create(b, loc, resultType, ptr,
                                       b.getI32IntegerAttr(num), layout,
                                       shape, elt);
  SmallVector<Value, 4> regs;
  if (num == 1) {
    regs.push_back(res);
    return regs;
  }
  for (int i = 0; i < num; ++i)
    regs.push_back(LLVM::ExtractValueOp::create(b, loc, res, i));
  return regs;
}

Acc KernelEmitter::mma(const FragA &a, const FragB &bFrag, const Acc &c,
                       Type operand) {
  MLIRContext *ctx = b.getContext();
  Type f32Type = b.getF32Type();
  auto resultType =
      LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(4, f32Type));
  std::array<int64_t, 3> shape = {16, 8, 16};
  NVVM::MMATypes t = operand && operand.isF16() ? NVVM::MMATypes::f16
                                                 : NVVM::MMATypes::bf16;
  std::array<NVVM::MMATypes, 2> types = {t, t};
  std::array<NVVM::MMALayout, 2> layouts = {NVVM::MMALayout::row,
                                            NVVM::MMALayout::col};
  // f16 operands are typed vector<2xf16> (bf16 ones packed i32).
  SmallVector<Value, 4> aOps(a.begin(), a.end()), bOps(bFrag.begin(), bFrag.end());
  if (t == NVVM::MMATypes::f16) {
    auto half2 = VectorType::get({2}, b.getF16Type());
    for (Value &v : aOps)
      v = LLVM::BitcastOp::create(b, loc, half2, v);
    for (Value &v : bOps)
      v = LLVM::BitcastOp::create(b, loc, half2, v);
  }
  Value res = NVVM::MmaOp::create(
      b, loc, resultType, ValueRange(aOps), ValueRange(bOps), ValueRange(c),
      shape, std::nullopt, std::nullopt, types, layouts);
  Acc out;
  for (int i = 0; i < 4; ++i)
    out[i] = LLVM::ExtractValueOp::create(b, loc, res, i);
  return out;
}

Value KernelEmitter::packBf16(Value lo, Value hi) {
  return packHalves(lo, hi, b.getBF16Type());
}

Value KernelEmitter::packHalves(Value lo, Value hi, Type type) {
  auto vecType = VectorType::get({2}, type);
  Value l = arith::TruncFOp::create(b, loc, type, lo);
  Value h = arith::TruncFOp::create(b, loc, type, hi);
  Value v = vector::BroadcastOp::create(b, loc, vecType, l);
  v = vector::InsertOp::create(b, loc, h, v, ArrayRef<int64_t>{1});
  Value asInt = vector::BitCastOp::create(
      b, loc, VectorType::get({1}, b.getI32Type()), v);
  return vector::ExtractOp::create(b, loc, asInt, ArrayRef<int64_t>{0});
}

FragA KernelEmitter::accToFragA(const Acc &left, const Acc &right,
                                Type operand) {
  Type t = operand ? operand : b.getBF16Type();
  return {packHalves(left[0], left[1], t), packHalves(left[2], left[3], t),
          packHalves(right[0], right[1], t), packHalves(right[2], right[3], t)};
}

Acc KernelEmitter::zeroAcc() {
  Value z = f32(0.0);
  return {z, z, z, z};
}

FragA KernelEmitter::fragA(Value tile, Value rowBase, int64_t ld,
                           Value colBase) {
  // Lanes 0-15 address rows 0-15 at column 0, lanes 16-31 at column 8.
  Value lane = laneId();
  Value row = add(rowBase, remu(lane, idx(16)));
  Value col = add(colBase, mul(divu(lane, idx(16)), idx(8)));
  auto m = ldmatrix(sharedPtr(tile, toI32(add(mul(row, idx(ld)), col)),
                              b.getBF16Type()),
                    4, false);
  return {m[0], m[1], m[2], m[3]};
}

std::array<FragB, 2> KernelEmitter::fragBRows(Value tile, Value rowBase,
                                              int64_t ld, Value colBase) {
  return fragB(tile, rowBase, ld, colBase, /*kRows=*/false);
}

std::array<FragB, 2> KernelEmitter::fragBCols(Value tile, Value rowBase,
                                              int64_t ld, Value colBase) {
  return fragB(tile, rowBase, ld, colBase, /*kRows=*/true);
}

std::array<FragB, 2> KernelEmitter::fragB(Value tile, Value rowBase, int64_t ld,
                                          Value colBase, bool kRows) {
  // Matrix mi = lane / 8 covers n 8 (mi / 2) .. and k 8 (mi % 2) ..; the
  // tile's rows are n (k contiguous) or, transposed, k.
  Value lane = laneId();
  Value mi = divu(lane, idx(8)), r = remu(lane, idx(8));
  Value n = mul(divu(mi, idx(2)), idx(8)), k = mul(remu(mi, idx(2)), idx(8));
  Value row = add(rowBase, add(kRows ? k : n, r));
  Value col = add(colBase, kRows ? n : k);
  auto m = ldmatrix(sharedPtr(tile, toI32(add(mul(row, idx(ld)), col)),
                              b.getBF16Type()),
                    4, kRows);
  return {FragB{m[0], m[1]}, FragB{m[2], m[3]}};
}

void KernelEmitter::barrier() { mlir::gpu::BarrierOp::create(b, loc); }

RowVectors::RowVectors(KernelEmitter &e, Value t, int64_t group, int64_t width,
                       int64_t vw)
    : e(e), vw(vw) {
  const int64_t vectors = width / vw;
  const int64_t perThread = (vectors + group - 1) / group;
  for (int64_t j = 0; j < perThread; ++j) {
    Value vi = e.add(t, e.idx(j * group));
    valid.push_back(e.ult(vi, e.idx(vectors)));
    col.push_back(e.mul(e.minu(vi, e.idx(vectors - 1)), e.idx(vw)));
  }
}

SmallVector<Value> RowVectors::load(Value buf, Value rowBase, int64_t j) {
  OpBuilder &b = e.b;
  Type elt = cast<MemRefType>(buf.getType()).getElementType();
  Value vec = vector::LoadOp::create(
      b, e.loc, VectorType::get({vw}, elt), buf,
      ValueRange{e.add(rowBase, col[j])}, false,
      llvm::MaybeAlign(vw * elt.getIntOrFloatBitWidth() / 8));
  SmallVector<Value> out;
  for (int64_t c = 0; c < vw; ++c)
    out.push_back(e.select(
        valid[j],
        e.toF32(vector::ExtractOp::create(b, e.loc, vec, ArrayRef<int64_t>{c})),
        e.f32(0.0)));
  return out;
}

SmallVector<Value> RowVectors::loadAll(Value buf, Value rowBase) {
  SmallVector<Value> out;
  for (int64_t j = 0; j < perThread(); ++j)
    llvm::append_range(out, load(buf, rowBase, j));
  return out;
}

void RowVectors::storeAll(ArrayRef<Value> values, Value buf, Value rowBase) {
  OpBuilder &b = e.b;
  Type elt = cast<MemRefType>(buf.getType()).getElementType();
  for (int64_t j = 0; j < perThread(); ++j) {
    auto guard = scf::IfOp::create(b, e.loc, valid[j], false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(&guard.getThenRegion().front());
    SmallVector<Value> conv;
    for (int64_t c = 0; c < vw; ++c)
      conv.push_back(e.fromF32(values[j * vw + c], elt));
    Value vec =
        vector::FromElementsOp::create(b, e.loc, VectorType::get({vw}, elt), conv);
    vector::StoreOp::create(b, e.loc, vec, buf, ValueRange{e.add(rowBase, col[j])},
                            false,
                            llvm::MaybeAlign(vw * elt.getIntOrFloatBitWidth() / 8));
  }
}

mlir::gpu::GPUFuncOp createKernel(OpBuilder &b, Location loc,
                                  mlir::gpu::GPUModuleOp module, StringRef name,
                                  ArrayRef<Type> argTypes,
                                  std::array<int32_t, 3> blockSize) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  auto func = mlir::gpu::GPUFuncOp::create(
      b, loc, name, b.getFunctionType(argTypes, {}));
  func->setAttr(mlir::gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr(blockSize));
  Block &entry = func.getBody().front();
  OpBuilder::InsertionGuard inner(b);
  b.setInsertionPointToEnd(&entry);
  mlir::gpu::ReturnOp::create(b, loc);
  return func;
}

MemRefType flatMemRef(Type type, int64_t elements) {
  return MemRefType::get({elements}, type);
}

void storeStaged(KernelEmitter &e, ArrayRef<StagedPiece> pieces, Value tile,
                 unsigned alignment) {
  for (const StagedPiece &p : pieces) {
    std::optional<OpBuilder::InsertionGuard> guard;
    if (p.inTile) {
      auto inTile = scf::IfOp::create(e.b, e.loc, p.inTile, false);
      guard.emplace(e.b);
      e.b.setInsertionPointToStart(&inTile.getThenRegion().front());
    }
    vector::StoreOp::create(e.b, e.loc, p.value, tile, ValueRange{p.index},
                            /*nontemporal=*/false, llvm::MaybeAlign(alignment));
  }
}

OnlineSoftmaxTile onlineSoftmaxTile(KernelEmitter &e, MutableArrayRef<Acc> scores,
                                    ValueRange carried) {
  OpBuilder &b = e.b;
  const double negInf = -std::numeric_limits<double>::infinity();
  std::array<Value, 2> mNew, alpha, rowSum;
  for (int r = 0; r < 2; ++r) {
    Value v = e.f32(negInf);
    for (const Acc &tile : scores)
      v = e.fmax(v, e.fmax(tile[2 * r], tile[2 * r + 1]));
    for (int32_t off : {1, 2})
      v = e.fmax(v, e.shuffleXor(v, off));
    mNew[r] = e.fmax(carried[r], v);
    alpha[r] = math::Exp2Op::create(b, e.loc, e.fsub(carried[r], mNew[r]));
    rowSum[r] = e.f32(0.0);
  }
  for (Acc &tile : scores)
    for (int el = 0; el < 4; ++el) {
      tile[el] = math::Exp2Op::create(b, e.loc, e.fsub(tile[el], mNew[el / 2]));
      rowSum[el / 2] = e.fadd(rowSum[el / 2], tile[el]);
    }
  OnlineSoftmaxTile out;
  out.next = {mNew[0], mNew[1], e.fadd(e.fmul(carried[2], alpha[0]), rowSum[0]),
              e.fadd(e.fmul(carried[3], alpha[1]), rowSum[1])};
  const size_t oTiles = (carried.size() - 4) / 4;
  out.o.resize(oTiles);
  for (size_t nt = 0; nt < oTiles; ++nt)
    for (int el = 0; el < 4; ++el)
      out.o[nt][el] = e.fmul(carried[4 + nt * 4 + el], alpha[el / 2]);
  return out;
}

GPUFuncOpAndEmitter::GPUFuncOpAndEmitter(OpBuilder &b, Location loc,
                                         mlir::gpu::GPUModuleOp module,
                                         StringRef name, ArrayRef<Type> args,
                                         std::array<int32_t, 3> block)
    : func(createKernel(b, loc, module, name, args, block)), e(b, loc) {
  b.setInsertionPoint(func.getBody().front().getTerminator());
}

} // namespace kimi::gpu

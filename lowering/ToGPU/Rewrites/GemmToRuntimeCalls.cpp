//===- GemmToRuntimeCalls.cpp - contractions -> cuBLASLt through the runtime -===//
//
// kimi-gpu-gemm-calls: see lowering/Passes.td. Products of a few rows go to
// the GEMV kernel (GemvLaunches.cpp); the others become calls of the
// runtime's cuBLASLt (here).
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToGPU/Rewrites/GemmContraction.h"
#include "lowering/ToGPU/Rewrites/GemvLaunches.h"
#include "runtime/abi/kimi_module_abi.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUGEMMCALLS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;
using kimi::gpu::allParallel;
using kimi::gpu::asGemm;
using kimi::gpu::Contraction;
using kimi::gpu::hasUnitStrideAmong;
using kimi::gpu::leavesAllocation;
using kimi::gpu::viewRoot;
using kimi::gpu::zeroFillOf;

namespace {
constexpr llvm::StringLiteral kGemm = "kimi_gpu_gemm_f32";
// One index argument per descriptor word (runtime/abi/kimi_module_abi.h).
constexpr unsigned kGemmArgs = KIMI_GEMM_DESC_WORDS;

struct KimiGpuGemmCalls : kimi::impl::KimiGpuGemmCallsBase<KimiGpuGemmCalls> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Each product's zero fill is found before any product is rewritten
    // (a rewritten one is a call, which the search cannot look past).
    SmallVector<std::tuple<linalg::LinalgOp, Contraction, linalg::FillOp>> gemms;
    module.walk([&](linalg::LinalgOp op) {
      if (op->getParentOfType<gpu::GPUModuleOp>())
        return;
      if (std::optional<Contraction> c = asGemm(op))
        gemms.push_back({op, *c, zeroFillOf(op, op.getDpsInits()[0])});
    });
    if (gemms.empty())
      return;
    if (precision != "f32" && precision != "tf32") {
      module.emitError() << "kimi-gpu-gemm-calls: precision '" << precision
                         << "' is not f32 or tf32";
      return signalPassFailure();
    }
    OpBuilder b(&getContext());
    b.setInsertionPointToEnd(module.getBody());
    Type index = b.getIndexType();
    if (!module.lookupSymbol<func::FuncOp>(kGemm)) {
      auto decl = func::FuncOp::create(
          b, module.getLoc(), kGemm,
          b.getFunctionType(SmallVector<Type>(kGemmArgs, index), {}));
      decl.setPrivate();
    }
    if (gemvMaxGroup < 1 || gemvMaxGroup > 8) {
      module.emitError() << "kimi-gpu-gemm-calls: gemv-max-group "
                         << gemvMaxGroup << " is outside 1..8";
      return signalPassFailure();
    }
    kimi::gpu::GemvLaunchOptions gemvOptions;
    gemvOptions.maxM = gemvMaxM;
    gemvOptions.maxGroup = gemvMaxGroup;
    gemvOptions.epilogues = gemvEpilogues;
    gemvOptions.smCount = smCount;
    gemvOptions.prefetchWeights = gemvWeightPrefetch;
    kimi::gpu::GemvLaunches gemvs(module, gemvOptions);
    for (auto [op, c, fill] : gemms)
      if (!gemvs.take(op, c, fill))
        rewrite(b, op, c, fill);
    gemvs.launch();
  }


  /// The only linalg.generic among `alloc`'s users other than `besides`
  /// and deallocations, or null (none, several, or any other user).
  static linalg::GenericOp onlyGenericUser(memref::AllocOp alloc,
                                           ArrayRef<Operation *> besides) {
    linalg::GenericOp only;
    for (Operation *user : alloc->getUsers()) {
      if (llvm::is_contained(besides, user) || isa<memref::DeallocOp>(user))
        continue;
      auto g = dyn_cast<linalg::GenericOp>(user);
      if (!g || only)
        return {};
      only = g;
    }
    return only;
  }

  /// The elementwise op that writes all of `buffer` for `product` alone,
  /// when it can store its values rounded instead: an allocation whose
  /// only other users are that `linalg.generic` (its one output, identity
  /// map, all loops parallel, the output's old values unread, in `product`'s
  /// block before it) and deallocations.
  static linalg::GenericOp soleProducer(Value buffer, Operation *product) {
    auto alloc = buffer.getDefiningOp<memref::AllocOp>();
    if (!alloc)
      return {};
    linalg::GenericOp producer = onlyGenericUser(alloc, {product});
    if (!producer || producer->getBlock() != product->getBlock() ||
        !producer->isBeforeInBlock(product) ||
        !producer.hasPureBufferSemantics() || producer.getNumDpsInits() != 1 ||
        producer.getDpsInits()[0] != buffer ||
        llvm::is_contained(producer.getDpsInputs(), buffer) ||
        !producer.getMatchingIndexingMap(producer.getDpsInitOperand(0))
             .isIdentity() ||
        !allParallel(producer) ||
        !producer.getMatchingBlockArgument(producer.getDpsInitOperand(0))
             .use_empty())
      return {};
    return producer;
  }

  /// `buffer` at element type `to`, for `product` to read: itself, or a new
  /// buffer of its shape that a generic fills with its values converted (a
  /// bf16 weight widened before an f32 product, exact; f32 activations
  /// rounded to nearest even before a bf16 product), freed after the
  /// product. Where an elementwise op computes the f32 values for the
  /// product alone (SiTU of a routed expert's gate and up), that op stores
  /// them rounded instead, and the f32 buffer goes: the same values, one
  /// pass over memory fewer.
  static Value convertOperand(OpBuilder &b, Location loc, Value buffer,
                              Type to, Operation *product,
                              SmallVector<Value> &temporaries) {
    auto type = cast<MemRefType>(buffer.getType());
    if (type.getElementType() == to)
      return buffer;
    if (linalg::GenericOp producer =
            to.getIntOrFloatBitWidth() < type.getElementTypeBitWidth()
                ? soleProducer(buffer, product)
                : linalg::GenericOp()) {
      auto old = buffer.getDefiningOp<memref::AllocOp>();
      OpBuilder pb(producer);
      auto rounded = memref::AllocOp::create(
          pb, old.getLoc(), MemRefType::get(type.getShape(), to),
          old.getDynamicSizes(), old.getSymbolOperands(),
          old.getAlignmentAttr());
      producer.getDpsInitsMutable()[0].set(rounded.getResult());
      producer.getMatchingBlockArgument(producer.getDpsInitOperand(0))
          .setType(to);
      Operation *yield = producer.getRegion().front().getTerminator();
      pb.setInsertionPoint(yield);
      yield->setOperand(0, arith::TruncFOp::create(pb, loc, to,
                                                   yield->getOperand(0)));
      // The product is the f32 allocation's last user now; rewrite()
      // erases it with the product.
      for (Operation *user : llvm::make_early_inc_range(old->getUsers()))
        if (isa<memref::DeallocOp>(user))
          user->erase();
      temporaries.push_back(rounded);
      return rounded;
    }
    SmallVector<Value> dynamic;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        dynamic.push_back(memref::DimOp::create(b, loc, buffer, d));
    auto wide = memref::AllocOp::create(
        b, loc, MemRefType::get(type.getShape(), to), dynamic);
    AffineMap id = b.getMultiDimIdentityMap(type.getRank());
    linalg::GenericOp::create(
        b, loc, ValueRange{buffer}, ValueRange{wide.getResult()},
        ArrayRef<AffineMap>{id, id},
        SmallVector<utils::IteratorType>(type.getRank(),
                                         utils::IteratorType::parallel),
        [&](OpBuilder &nb, Location nl, ValueRange args) {
          Value v = to.getIntOrFloatBitWidth() >
                            args[0].getType().getIntOrFloatBitWidth()
                        ? Value(arith::ExtFOp::create(nb, nl, to, args[0]))
                        : Value(arith::TruncFOp::create(nb, nl, to, args[0]));
          linalg::YieldOp::create(nb, nl, v);
        });
    temporaries.push_back(wide);
    return wide;
  }

  /// The op that rounds the f32 result of the bf16 product `op` to bf16, if
  /// cuBLASLt can do it at the store instead (docs/runtime-abi.md, flag
  /// bit 2): a `linalg.generic` whose body is one `arith.truncf` of its one
  /// input, `op`'s C, into a bf16 buffer of C's shape, with identity maps
  /// and parallel loops. C must be an allocation that nothing else uses
  /// (its zero fill, `fill`, goes with the rewrite; deallocations may stay),
  /// and the product writing the bf16 buffer earlier than the generic did
  /// must be unobservable: the buffer's view exists at the product, and
  /// every op between the two is side-effect free, an allocation, or leaves
  /// the buffer's allocation alone. Null when any of that does not hold.
  /// The op of `op`'s block after `op` that defines `v`, or null.
  static Operation *definedAfter(Value v, Operation *op) {
    Operation *def = v.getDefiningOp();
    return def && def->getBlock() == op->getBlock() && op->isBeforeInBlock(def)
               ? def
               : nullptr;
  }

  static linalg::GenericOp roundingOf(linalg::LinalgOp op, linalg::FillOp fill,
                                      const Contraction &c) {
    Value out = op.getDpsInits()[0];
    auto alloc = out.getDefiningOp<memref::AllocOp>();
    if (!fill || !alloc)
      return {};
    linalg::GenericOp rounding =
        onlyGenericUser(alloc, {op.getOperation(), fill.getOperation()});
    if (!rounding || rounding->getBlock() != op->getBlock() ||
        !op->isBeforeInBlock(rounding) || !rounding.hasPureBufferSemantics() ||
        rounding.getNumDpsInputs() != 1 || rounding.getNumDpsInits() != 1 ||
        rounding.getDpsInputs()[0] != out || !allParallel(rounding) ||
        !llvm::all_of(rounding.getIndexingMapsArray(),
                      [](AffineMap m) { return m.isIdentity(); }))
      return {};
    Value result = rounding.getDpsInits()[0];
    auto outType = cast<MemRefType>(out.getType());
    auto resultType = dyn_cast<MemRefType>(result.getType());
    if (!resultType || !resultType.getElementType().isBF16() ||
        resultType.getShape() != outType.getShape())
      return {};
    Block &body = rounding.getRegion().front();
    auto trunc = dyn_cast<arith::TruncFOp>(&body.front());
    if (!trunc || trunc->getNextNode() != body.getTerminator() ||
        trunc.getIn() != body.getArgument(0) ||
        body.getTerminator()->getOperand(0) != trunc.getResult())
      return {};
    // cuBLASLt's unit-stride rule for the new C.
    if (!hasUnitStrideAmong(result, op.getIndexingMapsArray()[2], {c.m, c.n}))
      return {};
    // Bufferization allocates the rounding's output after the product: such
    // an allocation moves up to the product (its sizes permitting). Values
    // of enclosing blocks dominate the product already.
    if (Operation *def = definedAfter(result, op))
      if (!isa<memref::AllocOp>(def) ||
          llvm::any_of(def->getOperands(),
                       [&](Value v) { return definedAfter(v, op); }))
        return {};
    Value root = viewRoot(result);
    Value resultAlloc = root.getDefiningOp<memref::AllocOp>() ? root : Value();
    for (Operation *x = op->getNextNode(); x != rounding; x = x->getNextNode())
      if (!isPure(x) && !isa<memref::AllocOp>(x) &&
          !leavesAllocation(x, resultAlloc))
        return {};
    return rounding;
  }

  void rewrite(OpBuilder &b, linalg::LinalgOp op, const Contraction &c,
               linalg::FillOp fill) {
    Location loc = op.getLoc();
    b.setInsertionPoint(op);
    SmallVector<Value> temporaries;
    // The operands at the product's type, C f32. Two bf16 operands run as
    // they are on bf16 tensor cores (their products are exact in f32, the
    // sums f32), and so does a bf16 weight with f32 activations rounded to
    // bf16 under bf16-weight-products; otherwise a bf16 operand is widened
    // and the product is f32 or TF32.
    auto isBf16 = [](Value v) {
      return cast<MemRefType>(v.getType()).getElementType().isBF16();
    };
    const unsigned bf16Operands =
        isBf16(op.getDpsInputs()[0]) + isBf16(op.getDpsInputs()[1]);
    const bool bf16Product =
        bf16Operands == 2 || (bf16Operands == 1 && bf16WeightProducts);
    Type operandType =
        bf16Product ? Type(b.getBF16Type()) : Type(b.getF32Type());
    Value inA = convertOperand(b, loc, op.getDpsInputs()[0], operandType, op,
                               temporaries);
    Value inB = convertOperand(b, loc, op.getDpsInputs()[1], operandType, op,
                               temporaries);
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    // (address, stride per loop dim) of one operand.
    auto describe = [&](Value memref, AffineMap map,
                        SmallVector<Value> &strides) -> Value {
      auto meta = memref::ExtractStridedMetadataOp::create(b, loc, memref);
      Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
      Value elementBytes = arith::ConstantIndexOp::create(
          b, loc,
          cast<MemRefType>(memref.getType()).getElementTypeBitWidth() / 8);
      Value offset = arith::MulIOp::create(b, loc, meta.getOffset(), elementBytes);
      strides.assign(op.getNumLoops(), zero);
      for (unsigned r = 0; r < map.getNumResults(); ++r)
        strides[map.getDimPosition(r)] = meta.getStrides()[r];
      return arith::AddIOp::create(b, loc, base, offset);
    };
    auto maps = op.getIndexingMapsArray();
    SmallVector<Value> sa, sb, sc;
    Value a = describe(inA, maps[0], sa);
    Value bAddr = describe(inB, maps[1], sb);
    // A bf16 product whose f32 result is only rounded to bf16 stores the
    // bf16 values itself: C is the rounding's output, and the f32 buffer,
    // the rounding and their pass over C go.
    linalg::GenericOp rounding =
        bf16Product ? roundingOf(op, fill, c) : linalg::GenericOp();
    if (rounding)
      if (Operation *def = definedAfter(rounding.getDpsInits()[0], op)) {
        def->moveBefore(op);
        b.setInsertionPoint(op);
      }
    Value out = describe(rounding ? rounding.getDpsInits()[0]
                                  : op.getDpsInits()[0],
                         maps[2], sc);
    SmallVector<Range> ranges =
        cast<linalg::LinalgOp>(op.getOperation()).createLoopRanges(b, loc);
    auto size = [&](unsigned d) {
      return getValueOrCreateConstantIndexOp(b, loc, ranges[d].size);
    };
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value batch = c.batch ? size(*c.batch) : one;
    auto batchStride = [&](SmallVector<Value> &s) {
      return c.batch ? s[*c.batch] : zero;
    };
    Value prec = arith::ConstantIndexOp::create(
        b, loc,
        bf16Product            ? KIMI_GEMM_PRECISION_BF16
        : precision == "tf32" ? KIMI_GEMM_PRECISION_TF32
                              : KIMI_GEMM_PRECISION_F32);
    // Flags (docs/runtime-abi.md). Sizes known here recur on every call: the
    // runtime times cuBLASLt's candidates for them once; a size that depends
    // on the data or the cache length would be timed at every new value.
    bool staticShape = llvm::all_of(
        SmallVector<std::optional<unsigned>>{c.m, c.n, c.k, c.batch},
        [&](std::optional<unsigned> d) {
          return !d || getConstantIntValue(ranges[*d].size).has_value();
        });
    int64_t flags = (staticShape ? KIMI_GEMM_FLAG_STATIC_SIZES : 0) |
                    (fill ? KIMI_GEMM_FLAG_OVERWRITE : 0) |
                    (rounding ? KIMI_GEMM_FLAG_C_BF16 : 0);
    if (fill)
      fill->erase();
    Value flagsValue = arith::ConstantIndexOp::create(b, loc, flags);
    SmallVector<Value> args(kGemmArgs);
    args[KIMI_GEMM_A] = a;
    args[KIMI_GEMM_B] = bAddr;
    args[KIMI_GEMM_C] = out;
    args[KIMI_GEMM_M] = size(c.m);
    args[KIMI_GEMM_N] = size(c.n);
    args[KIMI_GEMM_K] = size(c.k);
    args[KIMI_GEMM_BATCH] = batch;
    args[KIMI_GEMM_A_STRIDE_M] = sa[c.m];
    args[KIMI_GEMM_A_STRIDE_K] = sa[c.k];
    args[KIMI_GEMM_A_STRIDE_BATCH] = batchStride(sa);
    args[KIMI_GEMM_B_STRIDE_K] = sb[c.k];
    args[KIMI_GEMM_B_STRIDE_N] = sb[c.n];
    args[KIMI_GEMM_B_STRIDE_BATCH] = batchStride(sb);
    args[KIMI_GEMM_C_STRIDE_M] = sc[c.m];
    args[KIMI_GEMM_C_STRIDE_N] = sc[c.n];
    args[KIMI_GEMM_C_STRIDE_BATCH] = batchStride(sc);
    args[KIMI_GEMM_PRECISION] = prec;
    args[KIMI_GEMM_FLAGS] = flagsValue;
    func::CallOp::create(b, loc, kGemm, TypeRange{}, args);
    for (Value t : temporaries)
      memref::DeallocOp::create(b, loc, t);
    Value f32C = op.getDpsInits()[0];
    SmallVector<Value> inputs(op.getDpsInputs());
    op->erase();
    // An input whose producer now stores rounded values (convertOperand).
    for (Value in : inputs)
      if (auto alloc = in.getDefiningOp<memref::AllocOp>(); alloc && alloc->use_empty())
        alloc->erase();
    if (rounding) {
      rounding->erase();
      Operation *alloc = f32C.getDefiningOp();
      for (Operation *user : llvm::make_early_inc_range(alloc->getUsers()))
        user->erase(); // its deallocations
      alloc->erase();
    }
  }
};
} // namespace

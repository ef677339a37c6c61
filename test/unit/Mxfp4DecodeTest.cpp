//===- Mxfp4DecodeTest.cpp - the CPU's in-loop MXFP4 decode, executed -----===//
//
// The CPU target reads routed experts as the checkpoint's MXFP4 bytes and
// decodes each element inside the expert contractions (mxfp4Element,
// lowering/KimiToLinalg/Mxfp4Decode.h). Here that decode runs alone: a
// function fills [E, N, K] with every element of random packed tables,
// JIT-compiled from the same builder, and each value is checked against the
// float64 value of its code times 2^(s - 127). Every block of 32 holds all
// 16 codes (twice, in a fresh random order) and the blocks' scales cover
// every finite E8M0 byte, 0 (the subnormal 2^-127) to 254 (2^127); the
// decode is exact in f32, so the comparison is bit for bit, with infinity
// where the product exceeds the largest f32 (2 x 2^127 and up). The output
// is poisoned with NaN first. Scale 255 (NaN) never reaches the decode: the
// weight loader refuses it (WeightLoaderTest).
//
//===----------------------------------------------------------------------===//

#include "JitSupport.h"
#include "lowering/KimiToLinalg/Mxfp4Decode.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace mlir;

namespace {

constexpr int64_t E = 2, N = 128, K = 64, kBlock = 32;

/// func @decode(%packed: memref<E x N x K/2 x i8>, %scales: memref<E x N x
/// K/32 x i8>, %out: memref<E x N x K x f32>): out[e, n, k] = the decoded
/// element, through one linalg.generic whose body is mxfp4Element.
OwningOpRef<ModuleOp> decodeModule(MLIRContext &ctx) {
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  Type i8 = b.getI8Type(), f32 = b.getF32Type();
  auto packedM = MemRefType::get({E, N, K / 2}, i8);
  auto scalesM = MemRefType::get({E, N, K / kBlock}, i8);
  auto outM = MemRefType::get({E, N, K}, f32);
  auto fn = func::FuncOp::create(
      b, loc, "decode", b.getFunctionType({packedM, scalesM, outM}, {}));
  fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  auto toTensor = [&](Value m, MemRefType t) -> Value {
    return bufferization::ToTensorOp::create(
        b, loc, RankedTensorType::get(t.getShape(), t.getElementType()), m,
        /*restrict=*/true);
  };
  kimi::lowering::Mxfp4Table table{toTensor(body->getArgument(0), packedM),
                                   toTensor(body->getArgument(1), scalesM)};
  Value empty = tensor::EmptyOp::create(b, loc, outM.getShape(), f32);
  AffineMap id = b.getMultiDimIdentityMap(3);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{empty.getType()}, ValueRange{}, ValueRange{empty},
      ArrayRef<AffineMap>{id},
      SmallVector<utils::IteratorType>(3, utils::IteratorType::parallel),
      [&](OpBuilder &nb, Location nl, ValueRange) {
        Value e = linalg::IndexOp::create(nb, nl, 0);
        Value n = linalg::IndexOp::create(nb, nl, 1);
        Value k = linalg::IndexOp::create(nb, nl, 2);
        linalg::YieldOp::create(
            nb, nl, kimi::lowering::mxfp4Element(nb, nl, table, e, n, k));
      });
  auto store = bufferization::MaterializeInDestinationOp::create(
      b, loc, generic.getResult(0), body->getArgument(2));
  store.setRestrict(true);
  store.setWritable(true);
  func::ReturnOp::create(b, loc);
  return module;
}

template <typename T>
StridedMemRefType<T, 3> view(T *data, std::array<int64_t, 3> sizes) {
  StridedMemRefType<T, 3> m;
  m.basePtr = m.data = data;
  m.offset = 0;
  int64_t stride = 1;
  for (int i = 2; i >= 0; --i) {
    m.sizes[i] = sizes[i];
    m.strides[i] = stride;
    stride *= sizes[i];
  }
  return m;
}

/// The float64 value of e2m1 `code` times 2^(s - 127), as f32 (exact, or
/// infinite above the largest f32).
float reference(unsigned code, unsigned s) {
  static const double magnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double v = (code & 8 ? -1.0 : 1.0) * magnitude[code & 7] *
                   std::ldexp(1.0, int(s) - 127);
  if (std::fabs(v) > double(std::numeric_limits<float>::max()))
    return v < 0 ? -std::numeric_limits<float>::infinity()
                 : std::numeric_limits<float>::infinity();
  return float(v);
}

TEST(Mxfp4Decode, EveryCodeAtEveryFiniteScaleIsExact) {
  DialectRegistry registry;
  registry.insert<arith::ArithDialect, linalg::LinalgDialect,
                  tensor::TensorDialect>();
  kimi::test::registerJitDialects(registry);
  MLIRContext ctx(registry, MLIRContext::Threading::DISABLED);
  ctx.loadAllAvailableDialects();
  std::string diagnostics, error;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = decodeModule(ctx);
  ASSERT_TRUE(succeeded(module->verify())) << diagnostics;
  auto engine = kimi::test::jitModule(*module, diagnostics, error);
  ASSERT_TRUE(engine) << error;
  auto fn = engine->lookup("_mlir_ciface_decode");
  ASSERT_TRUE(bool(fn)) << llvm::toString(fn.takeError());

  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Scales: every finite byte once, the other blocks random finite bytes,
  // in a random order.
  const int64_t blocks = E * N * (K / kBlock);
  std::vector<uint8_t> scales(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i)
    scales[size_t(i)] = uint8_t(i < 255 ? i : rng() % 255);
  std::shuffle(scales.begin(), scales.end(), rng);
  // Codes: each block of 32 holds 0..15 twice, in a random order.
  std::vector<uint8_t> codes(size_t(E * N * K));
  for (int64_t blk = 0; blk < blocks; ++blk) {
    std::vector<uint8_t> c(kBlock);
    std::iota(c.begin(), c.begin() + 16, 0);
    std::iota(c.begin() + 16, c.end(), 0);
    std::shuffle(c.begin(), c.end(), rng);
    std::copy(c.begin(), c.end(), codes.begin() + blk * kBlock);
  }
  // Packed as a checkpoint stores them: the even element in the low nibble.
  std::vector<int8_t> packed(codes.size() / 2);
  for (size_t i = 0; i < packed.size(); ++i)
    packed[i] = int8_t(codes[2 * i] | (codes[2 * i + 1] << 4));
  std::vector<int8_t> scaleBytes(scales.begin(), scales.end());
  std::vector<float> out(codes.size(), std::numeric_limits<float>::quiet_NaN());

  auto p = view(packed.data(), {E, N, K / 2});
  auto s = view(scaleBytes.data(), {E, N, K / kBlock});
  auto o = view(out.data(), {E, N, K});
  using Fn = void (*)(StridedMemRefType<int8_t, 3> *, StridedMemRefType<int8_t, 3> *,
                      StridedMemRefType<float, 3> *);
  reinterpret_cast<Fn>(*fn)(&p, &s, &o);

  size_t bad = 0, infinite = 0, subnormal = 0;
  for (size_t i = 0; i < codes.size(); ++i) {
    const unsigned scale = scales[i / kBlock];
    const float want = reference(codes[i], scale);
    uint32_t gotBits, wantBits;
    std::memcpy(&gotBits, &out[i], 4);
    std::memcpy(&wantBits, &want, 4);
    infinite += std::isinf(want);
    subnormal += std::fpclassify(want) == FP_SUBNORMAL;
    if (gotBits != wantBits && ++bad <= 8)
      ADD_FAILURE() << "element " << i << ": code " << unsigned(codes[i])
                    << ", scale byte " << scale << ": got " << out[i]
                    << ", want " << want;
  }
  EXPECT_EQ(bad, 0u);
  // The extremes were exercised: products past f32 and subnormal values.
  EXPECT_GT(infinite, 0u);
  EXPECT_GT(subnormal, 0u);
}

} // namespace

//===- DialectTest.cpp - building kimi IR through the C++ API -------------===//
//
// Builds a KDA layer core with the generated builders, verifies it, prints it,
// parses the text back and checks the round trip is exact. Also checks that
// a verifier failure names the operand at fault.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

using namespace mlir;

namespace {

class KimiDialectTest : public ::testing::Test {
protected:
  KimiDialectTest() {
    ctx.loadDialect<kimi::KimiDialect, func::FuncDialect>();
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type et) {
    return RankedTensorType::get(shape, et);
  }

  std::string print(Operation *op) {
    std::string text;
    llvm::raw_string_ostream os(text);
    op->print(os);
    return text;
  }

  MLIRContext ctx;
};

TEST_F(KimiDialectTest, BuildVerifyPrintReparseKdaCore) {
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  Type f32 = b.getF32Type(), bf16 = b.getBF16Type();
  const int64_t B = 1, T = 32, H = 2, D = 64;

  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto aLogType = tensor({H}, f32), dtType = tensor({H, D}, f32);
  kimi::WeightOp::create(b, loc, "model.layers.0.self_attn.A_log", aLogType);
  kimi::WeightOp::create(b, loc, "model.layers.0.self_attn.dt_bias", dtType);

  auto act = tensor({B, T, H, D}, bf16), gate = tensor({B, T, H, D}, f32);
  auto betaType = tensor({B, T, H}, bf16), state = tensor({B, H, D, D}, f32);
  auto fnType = b.getFunctionType({act, act, act, act, betaType, state},
                                  {act, state});
  auto fn = func::FuncOp::create(b, loc, "kda_core", fnType);
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  auto args = body->getArguments();

  Value aLog = kimi::WeightRefOp::create(b, loc, aLogType,
                                         "model.layers.0.self_attn.A_log");
  Value dt = kimi::WeightRefOp::create(b, loc, dtType,
                                       "model.layers.0.self_attn.dt_bias");
  auto g = kimi::KdaGateOp::create(
      b, loc, gate,
      kimi::GateForm::lower_bound,
      b.getF64FloatAttr(-5.0), args[3], aLog, dt);
  auto decay =
      kimi::DecayAttr::get(&ctx, -5.0, 16, kimi::DiagStrategy::dense);
  auto kda = kimi::KdaOp::create(b, loc, act, state, args[0], args[1], args[2],
                                 g, args[4], args[5], /*cu_seqlens=*/Value(),
                                 b.getF64FloatAttr(0.125), decay);
  func::ReturnOp::create(b, loc, kda.getResults());

  ASSERT_TRUE(succeeded(verify(*module)));
  std::string text = print(*module);
  EXPECT_NE(text.find("#kimi.decay<lower = -5.000000e+00, chunk = 16, "
                      "diag = dense>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kimi.kda_gate lower_bound"), std::string::npos) << text;

  OwningOpRef<ModuleOp> reparsed = parseSourceString<ModuleOp>(text, &ctx);
  ASSERT_TRUE(reparsed);
  ASSERT_TRUE(succeeded(verify(*reparsed)));
  EXPECT_EQ(print(*reparsed), text);

  // The parsed decay attribute is the same uniqued attribute.
  auto parsedKda = *reparsed->lookupSymbol<func::FuncOp>("kda_core")
                        .getOps<kimi::KdaOp>()
                        .begin();
  EXPECT_EQ(parsedKda.getDecayAttr(), decay);
}

TEST_F(KimiDialectTest, VerifierNamesTheOperandAtFault) {
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  Type f32 = b.getF32Type();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  auto x = tensor({4, 256}, f32), w = tensor({512, 128}, f32);
  auto fn = func::FuncOp::create(b, loc, "bad_linear",
                                 b.getFunctionType({x, w}, {}));
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToStart(body);
  kimi::LinearOp::create(b, loc, tensor({4, 512}, f32), body->getArgument(0),
                         body->getArgument(1), Value());
  func::ReturnOp::create(b, loc);

  std::string message;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_TRUE(failed(verify(*module)));
  EXPECT_NE(message.find("input width K mismatch"), std::string::npos)
      << message;
  EXPECT_NE(message.find("'x'"), std::string::npos) << message;
  EXPECT_NE(message.find("'weight'"), std::string::npos) << message;
}

TEST_F(KimiDialectTest, DecayAttrRejectsBadChunk) {
  std::string message;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  auto attr = kimi::DecayAttr::getChecked(
      [&] { return emitError(UnknownLoc::get(&ctx)); }, &ctx,
      FloatAttr::get(Float64Type::get(&ctx), -5.0), int64_t{24},
      kimi::DiagStrategy::dense);
  EXPECT_FALSE(attr);
  EXPECT_NE(message.find("power of two in [16, 64], got 24"),
            std::string::npos)
      << message;
}

} // namespace

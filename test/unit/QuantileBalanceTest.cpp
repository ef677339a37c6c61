//===- QuantileBalanceTest.cpp - compiled kimi.quantile_balance -----------===//
//
// Compiles a function holding one kimi.quantile_balance through the CPU
// target (kimi-lower-to-linalg, bufferization, LLVM, shared object), runs it
// on fresh random margins and checks it against a direct computation of the
// rule (reference §5): new_bias_j = bias_j - the (q+1)-th largest margin of
// column j, q = floor(N k / E).
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiDialect.h"
#include "lowering/Passes.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"
#include "test/unit/QuantileHistogram.h"
#include <algorithm>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <random>
#include <unistd.h>

namespace {

constexpr int64_t N = 96, E = 8, K = 2;


/// Compiles `source` (one function @qb) and returns its packed entry.
void *compileEntry(const std::string &source, void **handleOut) {
  mlir::DialectRegistry registry;
  registry.insert<kimi::KimiDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect>();
  kimi::registerCpuCodegenDialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &ctx);
  EXPECT_TRUE(module);
  if (!module)
    return nullptr;
  kimi::CpuCodegenOptions options;
  options.frontPipeline = "";
  llvm::Expected<std::string> so = kimi::compileToSharedObject(*module, options);
  EXPECT_TRUE(bool(so)) << llvm::toString(so.takeError());
  if (!so)
    return nullptr;
  std::string path = ::testing::TempDir() + "kimi-qbh-" +
                     std::to_string(getpid()) + ".so";
  std::ofstream(path, std::ios::binary) << *so;
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::remove(path.c_str());
  EXPECT_TRUE(handle) << dlerror();
  *handleOut = handle;
  return handle ? dlsym(handle, "kimi_entry_qb") : nullptr;
}

TEST(QuantileBalance, HistogramFormMatchesTheRuleAndBalances) {
  constexpr int64_t n = 512, e = 16, k = 4, bins = 256;
  void *handle = nullptr;
  auto fn = reinterpret_cast<void (*)(void **)>(compileEntry(
      "func.func @qb(%m: tensor<512x16xf32>, %b: tensor<16xf32>) -> "
      "tensor<16xf32> {\n"
      "  %n = kimi.quantile_balance %m, %b top_k(4) bins(256) : "
      "tensor<512x16xf32>, tensor<16xf32> -> tensor<16xf32>\n"
      "  return %n : tensor<16xf32>\n}\n",
      &handle));
  ASSERT_TRUE(fn);
  unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<float> bias;
  std::vector<float> margins = kimi::test::routerMargins(rng, n, e, k, bias);
  std::vector<int64_t> result(5), dm = kimi::test::descriptor(margins.data(), {n, e}),
                                  db = kimi::test::descriptor(bias.data(), {e});
  std::vector<void *> args = {result.data(), dm.data(), db.data()};
  fn(args.data());
  float *got;
  std::memcpy(&got, &result[1], sizeof(void *));
  kimi::test::HistogramBalance want =
      kimi::test::histogramBalance(margins, bias, n, e, k, bins);
  for (int64_t j = 0; j < e; ++j)
    EXPECT_NEAR(got[j], want.newBias[j], 1e-6f) << "expert " << j;
  kimi::test::HistogramBalance compiled = want;
  compiled.newBias.assign(got, got + e);
  EXPECT_EQ(kimi::test::checkLoads(margins, bias, compiled, n, e, k), "");
  // The check is not vacuous: a threshold below every margin fails it.
  kimi::test::HistogramBalance off = want;
  for (int64_t j = 0; j < e; ++j)
    off.newBias[j] = bias[j] + 10.0f;
  EXPECT_NE(kimi::test::checkLoads(margins, bias, off, n, e, k), "");
  std::free(reinterpret_cast<void *>(result[0]));
  dlclose(handle);
}

TEST(QuantileBalance, CompiledMatchesTheRule) {
  void *handle = nullptr;
  auto fn = reinterpret_cast<void (*)(void **)>(compileEntry(
      "func.func @qb(%m: tensor<96x8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {\n"
      "  %n = kimi.quantile_balance %m, %b top_k(2) : tensor<96x8xf32>, "
      "tensor<8xf32> -> tensor<8xf32>\n"
      "  return %n : tensor<8xf32>\n}\n",
      &handle));
  ASSERT_TRUE(fn);

  unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> margins(N * E), bias(E);
  for (float &m : margins)
    m = normal(rng);
  for (float &b : bias)
    b = 0.1f * normal(rng);

  std::vector<int64_t> result(3 + 2), dm = kimi::test::descriptor(margins.data(), {N, E}),
                                      db = kimi::test::descriptor(bias.data(), {E});
  std::vector<void *> args = {result.data(), dm.data(), db.data()};
  fn(args.data());
  float *got;
  std::memcpy(&got, &result[1], sizeof(void *));

  const int64_t q = N * K / E;
  std::vector<float> newBias(E);
  for (int64_t j = 0; j < E; ++j) {
    std::vector<float> column(N);
    for (int64_t n = 0; n < N; ++n)
      column[n] = margins[n * E + j];
    std::sort(column.begin(), column.end(), std::greater<float>());
    newBias[j] = bias[j] - column[q];
    EXPECT_EQ(got[j], newBias[j]) << "expert " << j;
  }
  std::free(reinterpret_cast<void *>(result[0]));
  dlclose(handle);
}

} // namespace

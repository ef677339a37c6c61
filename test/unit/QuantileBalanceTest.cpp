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
#include <algorithm>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <random>
#include <unistd.h>

namespace {

constexpr int64_t N = 96, E = 8, K = 2;

std::vector<int64_t> descriptor(const void *data, std::vector<int64_t> sizes) {
  std::vector<int64_t> d(3 + 2 * sizes.size());
  std::memcpy(&d[0], &data, sizeof(void *));
  std::memcpy(&d[1], &data, sizeof(void *));
  int64_t stride = 1;
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    d[3 + i] = sizes[i];
    d[3 + sizes.size() + i] = stride;
    stride *= sizes[i];
  }
  return d;
}

TEST(QuantileBalance, CompiledMatchesTheRule) {
  mlir::DialectRegistry registry;
  registry.insert<kimi::KimiDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect>();
  kimi::registerCpuCodegenDialects(registry);
  mlir::MLIRContext ctx(registry);
  std::string source =
      "func.func @qb(%m: tensor<96x8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {\n"
      "  %n = kimi.quantile_balance %m, %b top_k(2) : tensor<96x8xf32>, "
      "tensor<8xf32> -> tensor<8xf32>\n"
      "  return %n : tensor<8xf32>\n}\n";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &ctx);
  ASSERT_TRUE(module);
  kimi::CpuCodegenOptions options;
  options.frontPipeline = "";
  llvm::Expected<std::string> so = kimi::compileToSharedObject(*module, options);
  ASSERT_TRUE(bool(so)) << llvm::toString(so.takeError());
  std::string path = ::testing::TempDir() + "kimi-qb-" +
                     std::to_string(getpid()) + ".so";
  std::ofstream(path, std::ios::binary) << *so;
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::remove(path.c_str());
  ASSERT_TRUE(handle) << dlerror();
  auto fn = reinterpret_cast<void (*)(void **)>(dlsym(handle, "kimi_entry_qb"));
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

  std::vector<int64_t> result(3 + 2), dm = descriptor(margins.data(), {N, E}),
                                      db = descriptor(bias.data(), {E});
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

//===- QuantileBalanceMpiTest.cpp - sharded kimi.quantile_balance ---------===//
//
// Under mpirun: every rank compiles kimi.quantile_balance (histogram form)
// twice, whole and partitioned by tokens over the ranks (shard-partition:
// per-rank counts, one integer all-reduce, the bias from the sums), runs the
// whole one on all margins and the partitioned one on its block of rows
// through the runtime's comm shim and MPI, and checks:
//   * the sharded bias equals the unsharded one, bit for bit;
//   * both follow the rule (test/unit/QuantileHistogram.h);
//   * with it each expert's load is q = N k / E up to one bin and ties.
// Rank 0 picks the seed (argv[1], or random) and prints one line.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kimi/KimiDialect.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "passes/ShardingModels.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/cpu/comm_shim.h"
#include "runtime/cpu/cpu_module.h"
#include "test/unit/QuantileHistogram.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/Transforms/Passes.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include <cstdio>
#include <cstring>
#include <random>

using namespace kimi;

namespace {

constexpr int64_t N = 512, E = 16, K = 4, Bins = 256;

std::string source(int ranks) {
  std::string types = "tensor<512x16xf32>, tensor<16xf32> -> tensor<16xf32>";
  std::string fn =
      "func.func @qb(%m: tensor<512x16xf32>, %b: tensor<16xf32>) -> "
      "tensor<16xf32> {\n";
  if (ranks == 1)
    return fn + "  %n = kimi.quantile_balance %m, %b top_k(4) bins(256) : " +
           types + "\n  return %n : tensor<16xf32>\n}\n";
  return "shard.grid @supernode(shape = " + std::to_string(ranks) + ")\n" +
         fn +
         "  %rows = shard.sharding @supernode split_axes = [[0]] : "
         "!shard.sharding\n"
         "  %all = shard.sharding @supernode split_axes = [[]] : "
         "!shard.sharding\n"
         "  %ms = shard.shard %m to %rows : tensor<512x16xf32>\n"
         "  %bs = shard.shard %b to %all : tensor<16xf32>\n"
         "  %n = kimi.quantile_balance %ms, %bs top_k(4) bins(256) : " +
         types +
         "\n  %r = shard.shard %n to %all annotate_for_users : "
         "tensor<16xf32>\n"
         "  return %r : tensor<16xf32>\n}\n";
}

/// Compiles the function for `ranks` ranks into a loaded module.
rt::StatusOr<std::unique_ptr<rt::CpuModule>> compile(int ranks) {
  mlir::DialectRegistry registry;
  registry.insert<KimiDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect>();
  registerCpuCodegenDialects(registry);
  registerKimiShardingModels(registry);
  mlir::MLIRContext ctx(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source(ranks), &ctx);
  if (!module)
    return rt::invalidArgument("the test IR does not parse");
  if (ranks > 1) {
    mlir::PassManager pm(&ctx);
    mlir::OpPassManager &fn = pm.nest<mlir::func::FuncOp>();
    mlir::shard::ShardingPropagationOptions forward;
    forward.traversal = mlir::shard::TraversalOrder::Forward;
    fn.addPass(mlir::shard::createShardingPropagation(forward));
    fn.addPass(mlir::shard::createPartition());
    if (mlir::failed(pm.run(*module)))
      return rt::invalidArgument("partitioning failed");
  }
  CpuCodegenOptions options;
  options.frontPipeline = "";
  llvm::Expected<std::string> so = compileToSharedObject(*module, options);
  if (!so)
    return rt::invalidArgument(llvm::toString(so.takeError()));
  return rt::CpuModule::load(std::vector<uint8_t>(so->begin(), so->end()),
                             "qb-" + std::to_string(ranks));
}


/// Runs the packed entry on `rows` rows of margins; the new bias.
std::vector<float> run(rt::CpuModule &module, const float *margins,
                       int64_t rows, std::vector<float> &bias) {
  auto fn = reinterpret_cast<void (*)(void **)>(
      module.symbol("kimi_entry_qb").value());
  std::vector<int64_t> result(5), dm = test::descriptor(margins, {rows, E}),
                                  db = test::descriptor(bias.data(), {E});
  std::vector<void *> args = {result.data(), dm.data(), db.data()};
  fn(args.data());
  float *got;
  std::memcpy(&got, &result[1], sizeof(void *));
  std::vector<float> out(got, got + E);
  std::free(reinterpret_cast<void *>(result[0]));
  return out;
}

} // namespace

int main(int argc, char **argv) {
  auto made = rt::MpiCommunicator::create();
  if (!made.isOk()) {
    std::fprintf(stderr, "%s\n", made.status().message().c_str());
    return 1;
  }
  std::unique_ptr<rt::MpiCommunicator> comm = std::move(made.value());
  const int rank = comm->rank(), ranks = comm->size();
  std::vector<int64_t> seed = {argc > 1 ? std::atoll(argv[1])
                                        : int64_t(std::random_device{}())};
  (void)comm->broadcast(seed, 0);

  int failures = 0;
  auto fail = [&](const std::string &what) {
    std::printf("rank %d: FAIL %s\n", rank, what.c_str());
    ++failures;
  };
  if (N % ranks)
    fail(std::to_string(ranks) + " ranks do not divide " + std::to_string(N));

  std::mt19937 rng(static_cast<uint32_t>(seed[0]));
  std::vector<float> bias;
  std::vector<float> margins = test::routerMargins(rng, N, E, K, bias);

  auto whole = compile(1);
  auto sharded = compile(ranks);
  if (!whole.isOk() || !sharded.isOk()) {
    fail("compile: " + (whole.isOk() ? sharded.status() : whole.status()).message());
  } else {
    auto shim = rt::CommShim::install(*sharded.value(), *comm, {comm->size()});
    if (!shim.isOk()) {
      fail("comm shim: " + shim.status().message());
    } else {
      std::vector<float> u = run(*whole.value(), margins.data(), N, bias);
      const int64_t rows = N / ranks;
      std::vector<float> s =
          run(*sharded.value(), margins.data() + rank * rows * E, rows, bias);
      rt::Status collectives = shim.value()->takeStatus();
      if (!collectives.isOk())
        fail(collectives.message());
      test::HistogramBalance want =
          test::histogramBalance(margins, bias, N, E, K, Bins);
      for (int64_t j = 0; j < E; ++j) {
        if (std::memcmp(&s[j], &u[j], sizeof(float)))
          fail("expert " + std::to_string(j) + ": sharded bias " +
               std::to_string(s[j]) + ", unsharded " + std::to_string(u[j]));
        if (std::fabs(u[j] - want.newBias[j]) > 1e-6f)
          fail("expert " + std::to_string(j) + ": compiled " +
               std::to_string(u[j]) + ", rule " +
               std::to_string(want.newBias[j]));
      }
      test::HistogramBalance got = want;
      got.newBias = s;
      std::string loads = test::checkLoads(margins, bias, got, N, E, K);
      if (!loads.empty())
        fail(loads);
    }
  }

  std::vector<int64_t> total = {failures};
  (void)comm->allReduceInPlace(total);
  if (rank == 0)
    std::printf("kimi-quantile-balance-mpi-tests: %d ranks, seed %lld: %s\n",
                ranks, (long long)seed[0], total[0] ? "FAIL" : "PASS");
  comm.reset();
  (void)rt::MpiCommunicator::finalize();
  return total[0] ? 1 : 0;
}

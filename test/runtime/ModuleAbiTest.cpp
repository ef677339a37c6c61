// The module ABI (runtime/abi/kimi_module_abi.h) from both sides: the shims
// of runtime/abi/*.c, compiled as kimi-compile compiles them into a model's
// host object, are loaded the way the runtime loads a model, their tables
// filled by the runtime's own code (installGpuModuleTable, CommShim), and
// every shim function is called as compiled code calls it. A table, a
// descriptor word or a version that one side changes without the other
// fails here.

#include "runtime/abi/kimi_module_abi.h"
#include "runtime/comm/communicator.h"
#include "runtime/cpu/comm_shim.h"
#include "runtime/cpu/cpu_module.h"
#include "runtime/cuda/gpu_module_table.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

using namespace kimi::rt;

namespace {

std::unique_ptr<CpuModule> loadShim(const char *path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  EXPECT_FALSE(image.empty()) << path;
  StatusOr<std::unique_ptr<CpuModule>> m = CpuModule::load(image, path);
  EXPECT_TRUE(m.isOk()) << m.status().message();
  return m.isOk() ? std::move(m.value()) : nullptr;
}

template <typename Fn> Fn fn(const CpuModule &m, const char *name) {
  StatusOr<void *> p = m.symbol(name);
  EXPECT_TRUE(p.isOk()) << name;
  return p.isOk() ? reinterpret_cast<Fn>(p.value()) : nullptr;
}

/// What the fake GPU callbacks saw.
struct GpuCalls {
  int loads = 0, lookups = 0, launches = 0, allocs = 0, releases = 0,
      gemms = 0, reads = 0;
  const void *image = nullptr;
  uint64_t imageSize = 0;
  std::string function;
  int64_t launch[7] = {};
  void **params = nullptr;
  uint64_t allocBytes = 0;
  void *released = nullptr;
  std::vector<int64_t> desc;
  const void *readAddress = nullptr;
  int32_t gemmResult = 0;
};
GpuCalls *calls(void *ctx) { return static_cast<GpuCalls *>(ctx); }

int32_t fakeLoad(void *ctx, const void *image, uint64_t size, void **module) {
  calls(ctx)->loads++;
  calls(ctx)->image = image;
  calls(ctx)->imageSize = size;
  *module = ctx;
  return 0;
}
int32_t fakeFunction(void *ctx, void *module, const char *name, void **f) {
  calls(ctx)->lookups++;
  calls(ctx)->function = name;
  EXPECT_EQ(module, ctx);
  *f = &calls(ctx)->function;
  return 0;
}
int32_t fakeLaunch(void *ctx, void *f, int64_t gx, int64_t gy, int64_t gz,
                   int64_t bx, int64_t by, int64_t bz, int32_t smem,
                   void **params) {
  GpuCalls *c = calls(ctx);
  c->launches++;
  EXPECT_EQ(f, &c->function);
  int64_t got[7] = {gx, gy, gz, bx, by, bz, smem};
  std::copy(got, got + 7, c->launch);
  c->params = params;
  return 0;
}
int32_t fakeAlloc(void *ctx, uint64_t bytes, void **ptr) {
  calls(ctx)->allocs++;
  calls(ctx)->allocBytes = bytes;
  *ptr = &calls(ctx)->allocBytes;
  return 0;
}
int32_t fakeRelease(void *ctx, void *ptr) {
  calls(ctx)->releases++;
  calls(ctx)->released = ptr;
  return 0;
}
int32_t fakeGemm(void *ctx, const int64_t *desc) {
  calls(ctx)->gemms++;
  calls(ctx)->desc.assign(desc, desc + KIMI_GEMM_DESC_WORDS);
  return calls(ctx)->gemmResult;
}
int32_t fakeRead(void *ctx, const void *address, int32_t *value) {
  calls(ctx)->reads++;
  calls(ctx)->readAddress = address;
  *value = 1234567;
  return 0;
}

kimi_rt_gpu_table fakeTable(GpuCalls &c) {
  return {&c,         fakeLoad,    fakeFunction, fakeLaunch,
          fakeAlloc,  fakeRelease, fakeGemm,     fakeRead};
}

using GemmFn = void (*)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
static_assert(KIMI_GEMM_DESC_WORDS == 18,
              "kimi_gpu_gemm_f32 takes one argument per descriptor word");

TEST(ModuleAbi, GpuShimForwardsEveryCallThroughTheRuntimesTable) {
  std::unique_ptr<CpuModule> m = loadShim(KIMI_TEST_GPU_SHIM);
  ASSERT_TRUE(m);
  GpuCalls c;
  StatusOr<int32_t *> status = installGpuModuleTable(*m, fakeTable(c));
  ASSERT_TRUE(status.isOk()) << status.status().message();
  int32_t *word = status.value();
  EXPECT_EQ(*word, 0);

  // Module registration at load time, lookup (cached) at first launch.
  auto load = fn<void *(*)(void *, size_t)>(*m, "mgpuModuleLoad");
  auto lookup = fn<void *(*)(void *, const char *)>(*m, "mgpuModuleGetFunction");
  auto launch = fn<void (*)(void *, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int32_t, void *, void **, void **, size_t)>(
      *m, "mgpuLaunchKernel");
  ASSERT_TRUE(load && lookup && launch);
  char image[] = "an image";
  void *handle = load(image, sizeof image);
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(c.loads, 0) << "images load on first use, after the table is set";
  static const char kName[] = "kernel_a";
  void *f = lookup(handle, kName);
  EXPECT_EQ(lookup(handle, kName), f);
  EXPECT_EQ(c.loads, 1);
  EXPECT_EQ(c.image, image);
  EXPECT_EQ(c.imageSize, sizeof image);
  EXPECT_EQ(c.lookups, 1) << "a function is looked up once";
  EXPECT_EQ(c.function, kName);

  std::mt19937_64 rng(std::random_device{}());
  int64_t dims[7];
  for (int64_t &d : dims)
    d = int64_t(rng() % 1000) + 1;
  void *params[2] = {&c, &c};
  launch(f, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
         int32_t(dims[6]), nullptr, params, nullptr, 2);
  EXPECT_EQ(c.launches, 1);
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ(c.launch[i], dims[i]) << "launch word " << i;
  EXPECT_EQ(c.params, params);
  launch(f, 0, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr, 2);
  EXPECT_EQ(c.launches, 1) << "an empty grid launches nothing";

  // The product descriptor: argument i is word i (the compiler passes the
  // words in the order of kimi_gemm_desc_word).
  auto gemm = fn<GemmFn>(*m, "kimi_gpu_gemm_f32");
  ASSERT_TRUE(gemm);
  int64_t w[KIMI_GEMM_DESC_WORDS];
  for (int64_t &x : w)
    x = int64_t(rng() >> 4);
  gemm(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10],
       w[11], w[12], w[13], w[14], w[15], w[16], w[17]);
  ASSERT_EQ(c.gemms, 1);
  ASSERT_EQ(c.desc.size(), size_t(KIMI_GEMM_DESC_WORDS));
  for (int i = 0; i < KIMI_GEMM_DESC_WORDS; ++i)
    EXPECT_EQ(c.desc[size_t(i)], w[i]) << "descriptor word " << i;

  auto alloc = fn<void *(*)(size_t)>(*m, "_mlir_memref_to_llvm_alloc");
  auto release = fn<void (*)(void *)>(*m, "_mlir_memref_to_llvm_free");
  auto read = fn<int32_t (*)(int64_t)>(*m, "kimi_gpu_read_i32");
  ASSERT_TRUE(alloc && release && read);
  void *p = alloc(4096 + dims[0]);
  EXPECT_EQ(p, &c.allocBytes);
  EXPECT_EQ(c.allocBytes, uint64_t(4096 + dims[0]));
  release(p);
  EXPECT_EQ(c.released, p);
  EXPECT_EQ(read(int64_t(0x1000 + dims[1])), 1234567);
  EXPECT_EQ(c.readAddress, reinterpret_cast<const void *>(0x1000 + dims[1]));
  EXPECT_EQ(*word, 0);

  // The first failure is kept and every later call skipped.
  c.gemmResult = 7;
  gemm(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10],
       w[11], w[12], w[13], w[14], w[15], w[16], w[17]);
  EXPECT_EQ(*word, 7);
  launch(f, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr, 2);
  EXPECT_EQ(alloc(64), nullptr);
  EXPECT_EQ(c.launches, 1);
  EXPECT_EQ(c.allocs, 1);
  EXPECT_EQ(c.gemms, 2);
}

TEST(ModuleAbi, RuntimeRefusesAnotherGpuAbiVersion) {
  std::unique_ptr<CpuModule> m = loadShim(KIMI_TEST_GPU_SHIM_OTHER_VERSION);
  ASSERT_TRUE(m);
  GpuCalls c;
  StatusOr<int32_t *> status = installGpuModuleTable(*m, fakeTable(c));
  ASSERT_FALSE(status.isOk());
  const std::string &msg = status.status().message();
  EXPECT_NE(msg.find("shim ABI version 999"), std::string::npos) << msg;
  EXPECT_NE(msg.find("speaks " + std::to_string(KIMI_GPU_ABI_VERSION)),
            std::string::npos)
      << msg;
  kimi_rt_gpu_table partial = fakeTable(c);
  partial.gemm = nullptr;
  std::unique_ptr<CpuModule> ok = loadShim(KIMI_TEST_GPU_SHIM);
  ASSERT_TRUE(ok);
  EXPECT_FALSE(installGpuModuleTable(*ok, partial).isOk());
}

// Expanded rank-1 memref descriptors, as compiled code passes them.
using CollectiveFn = void (*)(float *, float *, int64_t, int64_t, int64_t,
                              float *, float *, int64_t, int64_t, int64_t,
                              int32_t, int32_t);
using GatherFn = void (*)(float *, float *, int64_t, int64_t, int64_t,
                          float *, float *, int64_t, int64_t, int64_t, int32_t);

TEST(ModuleAbi, CommShimCollectivesReachTheCommunicator) {
  std::unique_ptr<CpuModule> m = loadShim(KIMI_TEST_COMM_SHIM);
  ASSERT_TRUE(m);
  LocalCommunicator comm;
  StatusOr<std::unique_ptr<CommShim>> shim = CommShim::install(*m, comm, {1});
  ASSERT_TRUE(shim.isOk()) << shim.status().message();

  auto rank = fn<int64_t (*)()>(*m, "kimi_rt_rank");
  auto allReduce = fn<CollectiveFn>(*m, "kimi_rt_all_reduce_f32");
  auto allToAll = fn<GatherFn>(*m, "kimi_rt_all_to_all_f32");
  ASSERT_TRUE(rank && allReduce && allToAll);
  EXPECT_EQ(rank(), 0);

  // Offsets and counts come from the descriptors: one rank's all-reduce and
  // all-to-all copy send[s_o .. s_o + n) to recv[r_o .. r_o + n).
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> send(40), recv(40, -999.f);
  for (float &x : send)
    x = u(rng);
  allReduce(send.data(), send.data(), 3, 17, 1, recv.data(), recv.data(), 5, 17,
            1, KIMI_COMM_SUM, /*group=*/1);
  EXPECT_TRUE(shim.value()->takeStatus().isOk());
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(recv[size_t(i)], i >= 5 && i < 22 ? send[size_t(i - 2)] : -999.f)
        << i;
  std::fill(recv.begin(), recv.end(), -999.f);
  allToAll(send.data(), send.data(), 0, 9, 1, recv.data(), recv.data(), 30, 9,
           1, 0);
  EXPECT_TRUE(shim.value()->takeStatus().isOk());
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(recv[size_t(i)], i >= 30 && i < 39 ? send[size_t(i - 30)] : -999.f)
        << i;

  // A group outside the grid's axis sets fails the call, and the status
  // names the collective.
  allReduce(send.data(), send.data(), 0, 4, 1, recv.data(), recv.data(), 0, 4,
            1, KIMI_COMM_MAX, /*group=*/9);
  Status failed = shim.value()->takeStatus();
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.message().find("all_reduce"), std::string::npos)
      << failed.message();
}

} // namespace

//===- CudaTest.cpp - The CUDA device layer, with or without a GPU --------===//
//
// Without an NVIDIA driver (or without a device) the GPU tests skip with the
// reason the loader gives; set KIMI_REQUIRE_GPU=1 to make that a failure (the
// GPU check does). The loader tests run everywhere.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/gpu_model_executable.h"
#include "runtime/cuda/segment_copy.h"
#include "runtime/cuda/device_random.h"
#include "runtime/weights/float_convert.h"
#include "runtime/weights/random_weights.h"
#include "test/runtime/TestGpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace kimi::rt;

namespace {

// Hand-written PTX (checked with `ptxas -arch=sm_90`): saxpy out of place,
// and a kernel that uses dynamic shared memory at a given byte offset.
const char *kPtx = R"PTX(.version 8.0
.target sm_90
.address_size 64

// z[i] = a * x[i] + y[i] for i < n
.visible .entry saxpy(
    .param .u32 saxpy_n,
    .param .f32 saxpy_a,
    .param .u64 saxpy_x,
    .param .u64 saxpy_y,
    .param .u64 saxpy_z)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<10>;

    ld.param.u32 %r1, [saxpy_n];
    ld.param.f32 %f1, [saxpy_a];
    ld.param.u64 %rd1, [saxpy_x];
    ld.param.u64 %rd2, [saxpy_y];
    ld.param.u64 %rd3, [saxpy_z];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.f32 %f2, [%rd8];
    add.s64 %rd8, %rd5, %rd7;
    ld.global.f32 %f3, [%rd8];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    add.s64 %rd9, %rd6, %rd7;
    st.global.f32 [%rd9], %f4;
DONE:
    ret;
}

.extern .shared .align 16 .b8 dyn_smem[];

// One block of 256 threads: thread t stores t at byte offset base + 4t of the
// dynamic shared memory, then out[t] = the value stored by thread 255 - t.
.visible .entry reverse_smem(
    .param .u64 rs_out,
    .param .u32 rs_base)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [rs_out];
    ld.param.u32 %r1, [rs_base];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, dyn_smem;
    add.s32 %r3, %r3, %r1;
    shl.b32 %r4, %r2, 2;
    add.s32 %r5, %r3, %r4;
    st.shared.u32 [%r5], %r2;
    bar.sync 0;
    sub.s32 %r6, 255, %r2;
    shl.b32 %r6, %r6, 2;
    add.s32 %r6, %r3, %r6;
    ld.shared.u32 %r7, [%r6];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r7;
    ret;
}
)PTX";

#define VALUE_OR_FAIL(lhs, expr)                                               \
  auto lhs##_or = (expr);                                                      \
  ASSERT_TRUE(lhs##_or.isOk()) << #expr << ": " << lhs##_or.status().message(); \
  auto lhs = std::move(lhs##_or.value())

#define STATUS_OK(expr)                                                        \
  do {                                                                         \
    ::kimi::rt::Status st_ = (expr);                                           \
    ASSERT_TRUE(st_.isOk()) << #expr << ": " << st_.message();                 \
  } while (0)

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

} // namespace

//===----------------------------------------------------------------------===//
// Loader: runs everywhere
//===----------------------------------------------------------------------===//

TEST(Loader, MissingLibraryIsAClearError) {
  auto driver = CudaDriver::load("/nonexistent/dir/libcuda.so.1");
  ASSERT_FALSE(driver.isOk());
  EXPECT_EQ(driver.status().code(), StatusCode::kModule);
  const std::string &m = driver.status().message();
  EXPECT_NE(m.find("/nonexistent/dir/libcuda.so.1 not found"), std::string::npos) << m;
  EXPECT_NE(m.find("no NVIDIA driver"), std::string::npos) << m;
}

TEST(Loader, LibraryWithoutTheSymbolsIsAClearError) {
  // libdl/libc is a shared library without cuInit.
  auto driver = CudaDriver::load("libc.so.6");
  ASSERT_FALSE(driver.isOk());
  EXPECT_EQ(driver.status().code(), StatusCode::kModule);
  EXPECT_NE(driver.status().message().find("symbol cuInit missing"),
            std::string::npos)
      << driver.status().message();
}

TEST(Loader, SharedDriverOrReason) {
  // Either the real driver loads, or the reason says why; never a crash.
  auto driver = CudaDriver::shared();
  if (driver) {
    EXPECT_EQ(driver.value()->library(), kCudaDriverLibrary);
    EXPECT_NE(driver.value()->cuLaunchKernel, nullptr);
  } else {
    EXPECT_NE(driver.status().message().find("libcuda.so.1"), std::string::npos);
    auto device = CudaDevice::open(0);
    ASSERT_FALSE(device.isOk());
    EXPECT_EQ(device.status().message(), driver.status().message());
  }
}

#ifdef KIMI_CUDA_STUB_LIBRARY
// The toolkit's link stub exports every driver symbol but implements none:
// all names resolve, and cuInit's error comes back as a Status.
TEST(Loader, ToolkitStubResolvesEverySymbol) {
  // The real driver first: once the stub (soname libcuda.so.1) is loaded, a
  // dlopen("libcuda.so.1") in this process would find the stub.
  (void)CudaDriver::shared();
  if (::access(KIMI_CUDA_STUB_LIBRARY, R_OK) != 0)
    GTEST_SKIP() << KIMI_CUDA_STUB_LIBRARY << " is gone";
  auto driver = CudaDriver::load(KIMI_CUDA_STUB_LIBRARY);
  ASSERT_TRUE(driver.isOk()) << driver.status().message();
  auto device = CudaDevice::open(0, driver.value());
  ASSERT_FALSE(device.isOk());
  EXPECT_EQ(device.status().message().rfind("cuInit: ", 0), 0u)
      << device.status().message();
}
#endif

//===----------------------------------------------------------------------===//
// With a GPU
//===----------------------------------------------------------------------===//

TEST(Device, Properties) {
  KIMI_GPU_OR_SKIP(dev);
  EXPECT_FALSE(dev.name().empty());
  EXPECT_GT(dev.smCount(), 0);
  EXPECT_GE(dev.computeMajor(), 3);
  EXPECT_GE(dev.maxSharedMemoryOptin(), 48 * 1024);
  EXPECT_GT(dev.totalMemory(), size_t(0));
  auto bad = CudaDevice::open(1 << 20);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(Memory, RoundTripAndBounds) {
  KIMI_GPU_OR_SKIP(dev);
  std::vector<float> host = randomFloats(1000, 1);
  VALUE_OR_FAIL(buf, DeviceBuffer::allocate(dev, host.size() * sizeof(float)));
  STATUS_OK(buf.upload(host.data(), host.size() * sizeof(float)));
  std::vector<float> back(host.size(), std::nanf(""));
  STATUS_OK(buf.download(back.data(), back.size() * sizeof(float)));
  EXPECT_EQ(back, host);
  // Partial copy at an offset, and one past the end.
  std::vector<float> part(10, 0.0f);
  STATUS_OK(buf.download(part.data(), 10 * sizeof(float), 990 * sizeof(float)));
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(part[i], host[990 + i]);
  Status past = buf.download(part.data(), 10 * sizeof(float), 995 * sizeof(float));
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument) << past.message();
  // Moves keep one owner; an empty buffer is fine.
  DeviceBuffer moved = std::move(buf);
  EXPECT_EQ(buf.address(), 0u);
  EXPECT_NE(moved.address(), 0u);
  STATUS_OK(moved.release());
  VALUE_OR_FAIL(empty, DeviceBuffer::allocate(dev, 0));
  EXPECT_EQ(empty.size(), 0u);
}

// A pool taken over from finished work (a replaced decode graph's) serves
// the new work from its cache; the blocks the new work did not take are
// freed, the ones it took stay, in use or cached for reuse.
TEST(Memory, AllocatorTrimsWhatAReuseLeftUntouched) {
  KIMI_GPU_OR_SKIP(dev);
  DeviceAllocator pool(dev);
  VALUE_OR_FAIL(small, pool.allocate(1000));     // class 1 KiB
  VALUE_OR_FAIL(large, pool.allocate(3 << 20));  // class 4 MiB
  VALUE_OR_FAIL(other, pool.allocate(100000));   // class 128 KiB
  (void)other;
  pool.releaseAll();
  EXPECT_EQ(pool.bytesCached(), size_t(1024 + (4 << 20) + (128 << 10)));
  // Without markReuse() nothing is trimmed.
  pool.trimUntouched();
  EXPECT_EQ(pool.bytesCached(), size_t(1024 + (4 << 20) + (128 << 10)));

  pool.markReuse();
  VALUE_OR_FAIL(again, pool.allocate(900));      // the cached 1 KiB block
  EXPECT_EQ(again, small);
  VALUE_OR_FAIL(taken, pool.allocate(2 << 20));  // class 2 MiB: new
  STATUS_OK(pool.release(taken));                // freed within the work
  pool.trimUntouched();
  // Kept: the 2 MiB block the work freed (cached); in use: the 1 KiB one.
  EXPECT_EQ(pool.bytesCached(), size_t(2 << 20));
  EXPECT_EQ(pool.bytesInUse(), size_t(1024));
  EXPECT_TRUE(pool.isLive(small));
  EXPECT_FALSE(pool.isLive(large));
  // The pool still serves and releases normally.
  VALUE_OR_FAIL(reuse, pool.allocate(2 << 20));
  EXPECT_EQ(reuse, taken);
}

TEST(Module, SaxpyMatchesCpu) {
  KIMI_GPU_OR_SKIP(dev);
  VALUE_OR_FAIL(module, CudaModule::load(dev, std::string(kPtx), "test.ptx"));
  VALUE_OR_FAIL(saxpy, module->kernel("saxpy"));
  VALUE_OR_FAIL(stream, CudaStream::create(dev));

  uint32_t n = 100003; // not a multiple of the block size
  float a = 1.75f;
  const uint32_t seed = std::random_device{}(); // fresh data every run
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<float> x = randomFloats(n, seed), y = randomFloats(n, seed + 1);
  std::vector<float> z(n, std::numeric_limits<float>::quiet_NaN());
  const size_t bytes = n * sizeof(float);
  VALUE_OR_FAIL(dx, DeviceBuffer::allocate(dev, bytes));
  VALUE_OR_FAIL(dy, DeviceBuffer::allocate(dev, bytes));
  VALUE_OR_FAIL(dz, DeviceBuffer::allocate(dev, bytes));
  STATUS_OK(dx.upload(x.data(), bytes, 0, stream.get()));
  STATUS_OK(dy.upload(y.data(), bytes, 0, stream.get()));
  STATUS_OK(dz.upload(z.data(), bytes, 0, stream.get())); // poisoned with NaN

  std::vector<void *> args = {&n, &a, dx.addressSlot(),
                              dy.addressSlot(), dz.addressSlot()};
  const unsigned block = 256;
  STATUS_OK(saxpy.launch({(n + block - 1) / block, 1, 1}, {block, 1, 1}, 0,
                         stream.get(), args));
  std::vector<float> out(n, 0.0f);
  STATUS_OK(dz.download(out.data(), bytes, 0, stream.get()));
  STATUS_OK(stream->synchronize());
  size_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) {
    float want = std::fma(a, x[i], y[i]);
    if (!(out[i] == want) && ++bad <= 5)
      ADD_FAILURE() << "z[" << i << "] = " << out[i] << ", want " << want;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_NE(dev.name(), ""); // the log line above names the device
}

TEST(Module, BrokenPtxReturnsTheJitLog) {
  KIMI_GPU_OR_SKIP(dev);
  std::string broken(kPtx);
  const std::string good = "fma.rn.f32 %f4, %f1, %f2, %f3;";
  size_t at = broken.find(good);
  ASSERT_NE(at, std::string::npos);
  broken.replace(at, good.size(), "fma.rn.f32 %f4, %f1, %f2, %undefined_reg;");
  auto module = CudaModule::load(dev, broken, "broken.ptx");
  ASSERT_FALSE(module.isOk());
  const std::string &m = module.status().message();
  EXPECT_EQ(module.status().code(), StatusCode::kModule);
  EXPECT_NE(m.find("broken.ptx"), std::string::npos) << m;
  EXPECT_NE(m.find("cuModuleLoadDataEx"), std::string::npos) << m;
  EXPECT_NE(m.find("JIT log"), std::string::npos) << m;
  EXPECT_NE(m.find("undefined_reg"), std::string::npos) << m;
}

TEST(Module, MissingKernelIsNamed) {
  KIMI_GPU_OR_SKIP(dev);
  VALUE_OR_FAIL(module, CudaModule::load(dev, std::string(kPtx), "test.ptx"));
  auto k = module->kernel("no_such_kernel");
  ASSERT_FALSE(k.isOk());
  EXPECT_NE(k.status().message().find("no_such_kernel"), std::string::npos);
}

TEST(Events, TimeKernels) {
  KIMI_GPU_OR_SKIP(dev);
  VALUE_OR_FAIL(module, CudaModule::load(dev, std::string(kPtx), "test.ptx"));
  VALUE_OR_FAIL(saxpy, module->kernel("saxpy"));
  VALUE_OR_FAIL(stream, CudaStream::create(dev));
  VALUE_OR_FAIL(start, CudaEvent::create(dev));
  VALUE_OR_FAIL(end, CudaEvent::create(dev));
  uint32_t n = 1u << 24;
  float a = 0.5f;
  const size_t bytes = size_t(n) * sizeof(float);
  VALUE_OR_FAIL(dx, DeviceBuffer::allocate(dev, bytes));
  VALUE_OR_FAIL(dy, DeviceBuffer::allocate(dev, bytes));
  VALUE_OR_FAIL(dz, DeviceBuffer::allocate(dev, bytes));
  std::vector<void *> args = {&n, &a, dx.addressSlot(), dy.addressSlot(),
                              dz.addressSlot()};
  STATUS_OK(start->record(stream.get()));
  for (int i = 0; i < 10; ++i)
    STATUS_OK(saxpy.launch({n / 256, 1, 1}, {256, 1, 1}, 0, stream.get(), args));
  STATUS_OK(end->record(stream.get()));
  VALUE_OR_FAIL(ms, CudaEvent::elapsedMs(*start, *end));
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  std::printf("[ cuda     ] 10 x saxpy over 2^24 floats: %.3f ms (%.0f GB/s)\n",
              ms, 10.0 * 3.0 * double(bytes) / (double(ms) * 1e6));
}

TEST(Kernel, LargeDynamicSharedMemory) {
  KIMI_GPU_OR_SKIP(dev);
  VALUE_OR_FAIL(module, CudaModule::load(dev, std::string(kPtx), "test.ptx"));
  VALUE_OR_FAIL(kernel, module->kernel("reverse_smem"));
  const int shared = dev.maxSharedMemoryOptin(); // 227 KiB on Hopper
  ASSERT_GT(shared, 48 * 1024 + 1024);
  VALUE_OR_FAIL(out, DeviceBuffer::allocate(dev, 256 * sizeof(uint32_t)));
  uint32_t base = uint32_t(shared - 1024); // the last KiB of shared memory
  std::vector<void *> args = {out.addressSlot(), &base};

  // Above 48 KiB the launch fails until the kernel opts in.
  Status refused = kernel.launch({1, 1, 1}, {256, 1, 1}, unsigned(shared), nullptr, args);
  EXPECT_FALSE(refused.isOk());
  if (!refused.isOk()) {
    EXPECT_NE(refused.message().find("cuLaunchKernel"), std::string::npos);
  }
  STATUS_OK(dev.synchronize());

  Status tooMuch = kernel.setMaxDynamicSharedMemory(shared + 1);
  EXPECT_EQ(tooMuch.code(), StatusCode::kInvalidArgument) << tooMuch.message();
  STATUS_OK(kernel.setMaxDynamicSharedMemory(shared));
  STATUS_OK(kernel.launch({1, 1, 1}, {256, 1, 1}, unsigned(shared), nullptr, args));
  std::vector<uint32_t> host(256, 0xffffffffu);
  STATUS_OK(out.download(host.data(), host.size() * sizeof(uint32_t)));
  for (uint32_t t = 0; t < 256; ++t)
    EXPECT_EQ(host[t], 255 - t) << t;
}

// SegmentCopy (runtime/cuda/segment_copy.h): the one launch that copies a
// decode graph's states back. Segments of several sizes (one word, a
// k3-mini convolution window, a KDA state and a size the grid does not
// divide) land exactly where they should, and nothing around them changes.
TEST(SegmentCopy, CopiesEverySegmentAndNothingElse) {
  EXPECT_TRUE(SegmentCopy::fits({256, 512, 48}));
  EXPECT_FALSE(SegmentCopy::fits({256, 512, 40}));  // not whole words
  EXPECT_FALSE(SegmentCopy::fits({260, 512, 48}));  // destination unaligned
  EXPECT_FALSE(SegmentCopy::fits({256, 520, 48}));  // source unaligned
  KIMI_GPU_OR_SKIP(dev);
  VALUE_OR_FAIL(copy, SegmentCopy::load(dev));
  VALUE_OR_FAIL(stream, CudaStream::create(dev));
  const std::vector<size_t> sizes = {16, 3 * 2048 * 4, 16 * 128 * 128 * 4,
                                     16 * 257 * 256 + 48};
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Sources back to back, destinations with a 64-byte guard before and
  // after each, all poisoned with NaN.
  size_t total = 0;
  for (size_t s : sizes)
    total += s;
  const size_t guard = 64, dstBytes = total + guard * (sizes.size() + 1);
  std::vector<float> src = randomFloats(total / 4, seed);
  std::vector<float> dst(dstBytes / 4, std::numeric_limits<float>::quiet_NaN());
  VALUE_OR_FAIL(dsrc, DeviceBuffer::allocate(dev, total));
  VALUE_OR_FAIL(ddst, DeviceBuffer::allocate(dev, dstBytes));
  STATUS_OK(dsrc.upload(src.data(), total));
  STATUS_OK(ddst.upload(dst.data(), dstBytes));
  std::vector<SegmentCopy::Segment> segments;
  size_t from = 0, to = guard, largest = 0;
  for (size_t s : sizes) {
    segments.push_back({ddst.address() + to, dsrc.address() + from, s});
    ASSERT_TRUE(SegmentCopy::fits(segments.back()));
    largest = std::max(largest, s);
    from += s;
    to += s + guard;
  }
  std::vector<uint64_t> table = SegmentCopy::table(segments);
  VALUE_OR_FAIL(dtable, DeviceBuffer::allocate(dev, table.size() * 8));
  STATUS_OK(dtable.upload(table.data(), table.size() * 8));
  STATUS_OK(copy->launch(*stream, dtable.address(), uint32_t(segments.size()),
                         largest));
  STATUS_OK(stream->synchronize());
  std::vector<float> out(dst.size());
  STATUS_OK(ddst.download(out.data(), dstBytes));
  from = 0;
  to = guard;
  size_t bad = 0;
  for (size_t s : sizes) {
    for (size_t i = 0; i < s / 4; ++i)
      if (!(out[to / 4 + i] == src[from / 4 + i]) && ++bad <= 5)
        ADD_FAILURE() << "segment of " << s << " bytes, float " << i;
    for (size_t i = 0; i < guard / 4; ++i)
      if (!std::isnan(out[(to + s) / 4 + i]) && ++bad <= 5)
        ADD_FAILURE() << "guard after the segment of " << s << " bytes written";
    from += s;
    to += s + guard;
  }
  for (size_t i = 0; i < guard / 4; ++i)
    EXPECT_TRUE(std::isnan(out[i])) << "guard before the first segment written";
  EXPECT_EQ(bad, 0u);
}

// DeviceRandomFill (runtime/cuda/device_random.h): weights generated on the
// device are randomWeight()'s values bit for bit, in f32 and rounded to
// bf16, for tensors of each recipe (projection, norm, gate parameters) and a
// size the grid does not divide; the guard after each tensor stays
// untouched. Other dtypes are refused, naming the dtype.
TEST(DeviceRandomFill, EqualsTheHostValuesBitForBit) {
  KIMI_GPU_OR_SKIP(dev);
  VALUE_OR_FAIL(fill, DeviceRandomFill::load(dev));
  VALUE_OR_FAIL(stream, CudaStream::create(dev));
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Case {
    std::string name;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"model.layers.0.self_attn.q_proj.weight", {96, 2048}},
      {"model.layers.0.input_layernorm.weight", {4099}},
      {"model.layers.0.self_attn.dt_bias", {16, 128}},
      {"model.embed_tokens.weight", {1000, 3, 7}}};
  for (const Case &c : cases)
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(c.name + " as " + dtypeName(dtype));
      const std::vector<float> want = randomWeight(c.name, c.shape, seed);
      const int64_t n = int64_t(want.size());
      const size_t elem = dtypeSize(dtype), guard = 64;
      std::vector<uint8_t> poison(size_t(n) * elem + guard, 0xA5);
      VALUE_OR_FAIL(buffer, DeviceBuffer::allocate(dev, poison.size()));
      STATUS_OK(buffer.upload(poison.data(), poison.size()));
      STATUS_OK(fill->fill(*stream, buffer.address(), n, dtype,
                           randomWeightRecipe(c.name, c.shape, seed)));
      STATUS_OK(stream->synchronize());
      std::vector<uint8_t> got(poison.size());
      STATUS_OK(buffer.download(got.data(), got.size()));
      size_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        uint32_t g = 0, w = 0;
        std::memcpy(&g, got.data() + size_t(i) * elem, elem);
        if (dtype == DType::kF32)
          std::memcpy(&w, &want[size_t(i)], 4);
        else
          w = f32ToBf16(want[size_t(i)]);
        if (g != w && ++bad <= 5)
          ADD_FAILURE() << "element " << i << ": device bits " << std::hex << g
                        << ", host bits " << w;
      }
      EXPECT_EQ(bad, 0u);
      for (size_t i = size_t(n) * elem; i < got.size(); ++i)
        ASSERT_EQ(got[i], 0xA5) << "the guard after the tensor was written";
    }
  VALUE_OR_FAIL(any, DeviceBuffer::allocate(dev, 64));
  Status refused = fill->fill(*stream, any.address(), 8, DType::kF16,
                              randomWeightRecipe("w", {8}, seed));
  EXPECT_FALSE(refused.isOk());
  EXPECT_NE(refused.message().find("f16"), std::string::npos) << refused.message();
}

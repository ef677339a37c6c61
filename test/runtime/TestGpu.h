//===- TestGpu.h - the GPU of a test process, or why there is none -*- C++ -*-===//
//
// GPU tests skip with the loader's reason when there is no driver or device;
// KIMI_REQUIRE_GPU=1 turns the skip into a failure (the GPU machine sets it).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_RUNTIME_TESTGPU_H
#define KIMI_TEST_RUNTIME_TESTGPU_H

#include "runtime/cuda/cuda_device.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace kimi::rt::testing {

inline bool gpuRequired() {
  const char *v = std::getenv("KIMI_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

struct Gpu {
  std::unique_ptr<CudaDevice> device;
  std::string reason;
};

/// Device 0, opened once per process and made current on the calling thread.
inline Gpu &gpu() {
  static Gpu g = [] {
    Gpu r;
    auto count = CudaDevice::count();
    if (!count) {
      r.reason = count.status().message();
      return r;
    }
    if (*count == 0) {
      r.reason = "no CUDA device";
      return r;
    }
    auto device = CudaDevice::open(0);
    if (!device) {
      r.reason = "opening device 0 failed: " + device.status().message();
      return r;
    }
    r.device = std::move(device.value());
    std::printf("[ cuda     ] %s\n", r.device->describe().c_str());
    return r;
  }();
  if (g.device)
    (void)g.device->makeCurrent();
  return g;
}

} // namespace kimi::rt::testing

/// Declares `CudaDevice &dev`, or skips (fails with KIMI_REQUIRE_GPU=1).
#define KIMI_GPU_OR_SKIP(dev)                                                  \
  ::kimi::rt::testing::Gpu &gpu_ = ::kimi::rt::testing::gpu();                 \
  if (!gpu_.device) {                                                          \
    if (::kimi::rt::testing::gpuRequired())                                    \
      FAIL() << "KIMI_REQUIRE_GPU=1 but: " << gpu_.reason;                     \
    GTEST_SKIP() << gpu_.reason;                                               \
  }                                                                            \
  ::kimi::rt::CudaDevice &dev = *gpu_.device

#endif

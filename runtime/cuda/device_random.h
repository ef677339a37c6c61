//===- device_random.h - random weights generated on the device -*- C++ -*-===//
//
// Benchmarks of full-size shapes (Kimi-Linear-48B-A3B: 98 GB at its
// release types) cannot go through a host file of random weights. This
// kernel writes randomWeight()'s values (runtime/weights/random_weights.h)
// straight into device memory: element i from the same counter-based
// splitmix64 draw, in double, rounded to f32 and then (for bf16) to
// nearest even, so a tensor filled here equals, bit for bit, the one a
// host file would load. The kernel is PTX text embedded here (the runtime
// links no compiler), JIT-compiled by the driver when first loaded.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_DEVICE_RANDOM_H
#define KIMI_RUNTIME_CUDA_DEVICE_RANDOM_H

#include "runtime/artifact/types.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/support/status.h"
#include "runtime/weights/random_weights.h"

#include <memory>

namespace kimi::rt {

class DeviceRandomFill {
public:
  /// Loads the kernel on `device` (JIT-compiles its PTX).
  static StatusOr<std::unique_ptr<DeviceRandomFill>> load(const CudaDevice &device);

  /// Writes `count` values of `recipe` (elements 0..count-1) at `dst` as
  /// `dtype` (f32 or bf16; others are refused) on `stream`. Asynchronous.
  Status fill(const CudaStream &stream, cuda::CUdeviceptr dst, int64_t count,
              DType dtype, const RandomWeightRecipe &recipe) const;

private:
  DeviceRandomFill() = default;
  std::unique_ptr<CudaModule> module_;
  CudaKernel kernel_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_DEVICE_RANDOM_H

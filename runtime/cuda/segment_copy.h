//===- segment_copy.h - Many device copies in one kernel launch -*- C++ -*-===//
//
// A decode graph that updates donated states in place ends by copying each
// new state over the old one (docs/runtime-abi.md, "Decode graphs"). As
// one memcpy node each, k3-mini's 36 states raised a step's device time
// from 1.35 to 1.47 ms on the H200 (docs/perf/model.md, 2026-12-03); as
// one launch of this kernel they are one node. The kernel is PTX text
// embedded here (the runtime links no compiler), JIT-compiled by the
// driver when first loaded. With it the step took 1.50 ms instead of
// 1.60 ms (same run; KIMI_GPU_STATE_COPY_KERNEL=0 goes back to memcpy
// nodes).
//
// The copies are described by a table in device memory: per segment three
// u64 (destination, source, size in 16-byte words). Block row y copies
// segment y, its blocks striding over the words. Segments must be 16-byte
// aligned at both ends and a multiple of 16 bytes (`fits`); the caller
// copies others another way. Segments must not overlap.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_SEGMENT_COPY_H
#define KIMI_RUNTIME_CUDA_SEGMENT_COPY_H

#include "runtime/cuda/cuda_device.h"
#include "runtime/support/status.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kimi::rt {

class SegmentCopy {
public:
  struct Segment {
    cuda::CUdeviceptr dst = 0, src = 0;
    size_t bytes = 0;
  };
  /// Whether the kernel can copy `s` (16-byte aligned ends, size a multiple
  /// of 16).
  static bool fits(const Segment &s);
  /// The table of `segments` (each must fit), as it goes to device memory.
  static std::vector<uint64_t> table(const std::vector<Segment> &segments);
  static constexpr size_t kTableBytesPerSegment = 3 * sizeof(uint64_t);

  /// Loads the kernel on `device` (JIT-compiles its PTX).
  static StatusOr<std::unique_ptr<SegmentCopy>> load(const CudaDevice &device);

  /// Copies the `count` segments of the table at `table` (device memory)
  /// on `stream`; `largestBytes` sizes the grid. Asynchronous, and may be
  /// captured into a graph (the table is read when the kernel runs).
  Status launch(const CudaStream &stream, cuda::CUdeviceptr table,
                uint32_t count, size_t largestBytes) const;

private:
  SegmentCopy() = default;
  std::unique_ptr<CudaModule> module_;
  CudaKernel kernel_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_SEGMENT_COPY_H

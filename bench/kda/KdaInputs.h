//===- KdaInputs.h - valid random inputs for KDA GPU entries -----*- C++ -*-===//
//
// Fills the input buffers of a KDA entry (by their names, docs/lowering/
// gpu-kda.md) with random data of the ranges the model produces: q and k
// L2-normalised per token and head, beta in (0, 1), the gate input or log
// decay, states. Shared by the GPU tests (which compare against the float64
// reference) and bench/kda (which times).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_BENCH_KDA_KDAINPUTS_H
#define KIMI_BENCH_KDA_KDAINPUTS_H

#include "runtime/artifact/types.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kimi::bench {

struct HostTensor {
  rt::BufferSpec spec;
  std::vector<uint8_t> bytes;   // in spec.dtype
  std::vector<double> values;   // the same values, exactly (after rounding)
};

struct KdaInputOptions {
  uint64_t seed = 1;
  /// Offsets of the packed sequences, for entries with a cu_seqlens input.
  std::vector<int32_t> cuSeqlens;
  /// Tensors above this many elements repeat a random pool of rows (fast
  /// set-up for timing; `values` is then left empty).
  int64_t exactLimit = int64_t(1) << 62;
};

/// One HostTensor per input and inout buffer of `entry`.
std::map<std::string, HostTensor> makeKdaInputs(const rt::EntrySpec &entry,
                                                const KdaInputOptions &options);

/// Decodes `bytes` of `dtype` to doubles.
std::vector<double> decodeValues(rt::DType dtype, const std::vector<uint8_t> &bytes);

} // namespace kimi::bench

#endif

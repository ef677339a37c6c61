//===- KdaInputs.cpp - valid random inputs for KDA GPU entries -------------===//

#include "bench/kda/KdaInputs.h"

#include "runtime/weights/float_convert.h"

#include <cmath>
#include <cstring>
#include <random>

namespace kimi::bench {
namespace {

void put(rt::DType dtype, std::vector<uint8_t> &bytes, size_t i, double v,
         double *exact) {
  switch (dtype) {
  case rt::DType::kBF16: {
    uint16_t b = rt::f32ToBf16(static_cast<float>(v));
    std::memcpy(bytes.data() + 2 * i, &b, 2);
    if (exact)
      *exact = rt::bf16ToF32(b);
    return;
  }
  case rt::DType::kF16: {
    uint16_t b = rt::f32ToF16(static_cast<float>(v));
    std::memcpy(bytes.data() + 2 * i, &b, 2);
    if (exact)
      *exact = rt::f16ToF32(b);
    return;
  }
  case rt::DType::kI32: {
    int32_t x = static_cast<int32_t>(v);
    std::memcpy(bytes.data() + 4 * i, &x, 4);
    if (exact)
      *exact = x;
    return;
  }
  default: {
    float f = static_cast<float>(v);
    std::memcpy(bytes.data() + 4 * i, &f, 4);
    if (exact)
      *exact = f;
  }
  }
}

} // namespace

std::vector<double> decodeValues(rt::DType dtype, const std::vector<uint8_t> &bytes) {
  size_t n = bytes.size() / rt::dtypeSize(dtype);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == rt::DType::kBF16 || dtype == rt::DType::kF16) {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      out[i] = dtype == rt::DType::kBF16 ? rt::bf16ToF32(b) : rt::f16ToF32(b);
    } else if (dtype == rt::DType::kI32) {
      int32_t x;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      out[i] = x;
    } else {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      out[i] = f;
    }
  }
  return out;
}

std::map<std::string, HostTensor> makeKdaInputs(const rt::EntrySpec &entry,
                                                const KdaInputOptions &options) {
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::map<std::string, HostTensor> out;
  for (const rt::BufferSpec &spec : entry.buffers) {
    if (spec.kind != rt::BufferKind::kInput && spec.kind != rt::BufferKind::kInOut)
      continue;
    HostTensor t;
    t.spec = spec;
    size_t n = spec.bytes() / rt::dtypeSize(spec.dtype);
    t.bytes.resize(spec.bytes());
    const std::string &name = spec.name;
    if (name == "cu_seqlens") {
      t.values.resize(n);
      for (size_t i = 0; i < n; ++i)
        put(spec.dtype, t.bytes, i, i < options.cuSeqlens.size() ? options.cuSeqlens[i] : 0,
            &t.values[i]);
      out[name] = std::move(t);
      continue;
    }
    // Rows of the last dimension; q and k rows are unit vectors.
    const size_t row = static_cast<size_t>(spec.shape.back());
    auto draw = [&](std::vector<double> &r) {
      for (double &x : r) {
        if (name == "q" || name == "k" || name == "v")
          x = normal(rng);
        else if (name == "z")
          x = 1.5 * normal(rng);
        else if (name == "g")
          x = -(0.02 + 0.5 * uniform(rng));
        else if (name == "beta")
          x = 1.0 / (1.0 + std::exp(-normal(rng)));
        else if (name == "a_log")
          x = -1.0 + 1.5 * uniform(rng);
        else if (name == "dt_bias")
          x = 0.5 * normal(rng);
        else // states
          x = 0.5 * normal(rng);
      }
      if (name == "q" || name == "k") {
        double ss = 0;
        for (double x : r)
          ss += x * x;
        double inv = 1.0 / std::sqrt(ss + 1e-6);
        for (double &x : r)
          x *= inv;
      }
    };
    const bool exact = static_cast<int64_t>(n) <= options.exactLimit;
    std::vector<double> r(row);
    if (exact) {
      t.values.resize(n);
      for (size_t base = 0; base < n; base += row) {
        draw(r);
        for (size_t i = 0; i < row; ++i)
          put(spec.dtype, t.bytes, base + i, r[i], &t.values[base + i]);
      }
    } else {
      // A pool of 4096 encoded rows, copied to random row positions.
      const size_t pool = 4096, rowBytes = row * rt::dtypeSize(spec.dtype);
      std::vector<uint8_t> rows(pool * rowBytes);
      for (size_t p = 0; p < pool; ++p) {
        draw(r);
        std::vector<uint8_t> one(rowBytes);
        for (size_t i = 0; i < row; ++i)
          put(spec.dtype, one, i, r[i], nullptr);
        std::memcpy(rows.data() + p * rowBytes, one.data(), rowBytes);
      }
      for (size_t base = 0, k = 0; base < n; base += row, ++k)
        std::memcpy(t.bytes.data() + k * rowBytes,
                    rows.data() + (rng() % pool) * rowBytes, rowBytes);
    }
    out[name] = std::move(t);
  }
  return out;
}

} // namespace kimi::bench

//===- QuantileHistogram.h - the histogram rule of Quantile Balancing -----===//
//
// A direct C++ statement of kimi.quantile_balance with `bins` (ops
// kimi.quantile_counts and kimi.quantile_update, reference §5), for the
// tests of the compiled op: per expert column j, margins are binned over
// [b_j - max(b) - 1, b_j - min(b) + 1]; the new bias is b_j minus the upper
// edge of the bin holding the (q+1)-th largest margin, q = floor(N k / E).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TEST_UNIT_QUANTILEHISTOGRAM_H
#define KIMI_TEST_UNIT_QUANTILEHISTOGRAM_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kimi::test {

struct HistogramBalance {
  std::vector<float> newBias; // [E]
  std::vector<float> width;   // [E] bin width of each column
};

/// margins row-major [n, e].
inline HistogramBalance histogramBalance(const std::vector<float> &margins,
                                         const std::vector<float> &bias,
                                         int64_t n, int64_t e, int64_t k,
                                         int64_t bins) {
  float maxB = *std::max_element(bias.begin(), bias.end());
  float minB = *std::min_element(bias.begin(), bias.end());
  const int64_t need = n * k / e + 1;
  HistogramBalance out{std::vector<float>(e), std::vector<float>(e)};
  for (int64_t j = 0; j < e; ++j) {
    float lo = (bias[j] - maxB) - 1.0f, hi = (bias[j] - minB) + 1.0f;
    float w = (hi - lo) / float(bins);
    std::vector<int32_t> counts(bins);
    for (int64_t i = 0; i < n; ++i) {
      float pos = std::floor((margins[i * e + j] - lo) / w);
      pos = std::min(std::max(pos, 0.0f), float(bins - 1));
      ++counts[static_cast<int64_t>(pos)];
    }
    int64_t bin = 0, cum = 0;
    for (int64_t c = bins - 1; c >= 0; --c) {
      if (cum < need && cum + counts[c] >= need)
        bin = c;
      cum += counts[c];
    }
    out.newBias[j] = bias[j] - (lo + float(bin + 1) * w);
    out.width[j] = w;
  }
  return out;
}

/// The balancing property: with threshold t_j = b_j - newBias_j, at most q
/// margins of column j exceed t_j and at least q + 1 exceed t_j - w_j (ties
/// and the bin width are the only slack). Returns "" or what is violated.
inline std::string checkLoads(const std::vector<float> &margins,
                              const std::vector<float> &bias,
                              const HistogramBalance &h, int64_t n, int64_t e,
                              int64_t k) {
  const int64_t q = n * k / e;
  for (int64_t j = 0; j < e; ++j) {
    float t = bias[j] - h.newBias[j];
    int64_t above = 0, nearly = 0;
    for (int64_t i = 0; i < n; ++i) {
      above += margins[i * e + j] > t;
      nearly += margins[i * e + j] > t - 1.001f * h.width[j];
    }
    if (above > q || nearly < q + 1)
      return "expert " + std::to_string(j) + ": " + std::to_string(above) +
             " margins above the threshold, " + std::to_string(nearly) +
             " above it minus one bin; target q = " + std::to_string(q);
  }
  return "";
}

/// Margins of a real sigmoid router, row-major [n, e]: s + b_j - alpha_i
/// with scores s in (0, 1) and alpha_i the (k+1)-th largest biased score of
/// token i; `bias` is drawn too (0.2 N(0, 1)).
inline std::vector<float> routerMargins(std::mt19937 &rng, int64_t n,
                                        int64_t e, int64_t k,
                                        std::vector<float> &bias) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal;
  bias.resize(e);
  for (float &b : bias)
    b = 0.2f * normal(rng);
  std::vector<float> margins(n * e);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> biased(e);
    for (int64_t j = 0; j < e; ++j)
      biased[j] = unit(rng) + bias[j];
    std::vector<float> sorted = biased;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (int64_t j = 0; j < e; ++j)
      margins[i * e + j] = biased[j] - sorted[k];
  }
  return margins;
}

/// A row-major memref descriptor of `data` with `sizes` (MLIR C interface).
inline std::vector<int64_t> descriptor(const void *data,
                                       std::vector<int64_t> sizes) {
  std::vector<int64_t> d(3 + 2 * sizes.size());
  std::memcpy(&d[0], &data, sizeof(void *));
  std::memcpy(&d[1], &data, sizeof(void *));
  int64_t stride = 1;
  for (int64_t i = int64_t(sizes.size()) - 1; i >= 0; --i) {
    d[3 + i] = sizes[i];
    d[3 + sizes.size() + i] = stride;
    stride *= sizes[i];
  }
  return d;
}

} // namespace kimi::test

#endif // KIMI_TEST_UNIT_QUANTILEHISTOGRAM_H

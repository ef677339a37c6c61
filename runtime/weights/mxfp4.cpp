//===- mxfp4.cpp - MXFP4 dequantisation -----------------------------------===//

#include "runtime/weights/mxfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kimi::rt {

float e2m1ToF32(uint8_t code) {
  static const float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                    4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                    -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[code & 0xF];
}

float e8m0ToF32(uint8_t s) {
  if (s == 0xFF)
    return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(s) - 127);
}

void quantizeMxfp4Row(const double *values, int64_t n, uint8_t *packed,
                      uint8_t *scales) {
  std::memset(packed, 0, static_cast<size_t>(n / 2));
  for (int64_t b = 0; b < n / kMxBlock; ++b) {
    const double *x = values + b * kMxBlock;
    double amax = 0;
    for (int i = 0; i < kMxBlock; ++i)
      amax = std::max(amax, std::fabs(x[i]));
    // OCP MX: shared exponent floor(log2 amax) - emax(E2M1), emax = 2.
    int e = amax > 0 ? static_cast<int>(std::floor(std::log2(amax))) - 2 : -127;
    e = std::clamp(e, -127, 127);
    scales[b] = static_cast<uint8_t>(e + 127);
    const double scale = std::ldexp(1.0, e);
    for (int i = 0; i < kMxBlock; ++i) {
      const double v = std::fabs(x[i]) / scale;
      uint8_t best = 0;
      for (uint8_t code = 1; code < 8; ++code) {
        const double dc = std::fabs(v - e2m1ToF32(code));
        const double db = std::fabs(v - e2m1ToF32(best));
        // Nearest; a tie goes to the even code (even mantissa).
        if (dc < db || (dc == db && (code & 1) == 0))
          best = code;
      }
      if (x[i] < 0 && best)
        best |= 8;
      const int64_t at = b * kMxBlock + i;
      packed[at / 2] |= static_cast<uint8_t>(at % 2 ? best << 4 : best);
    }
  }
}

void dequantizeMxfp4(const uint8_t *packed, const uint8_t *scales, int64_t rows,
                     int64_t width, float *out) {
  const int64_t blocks = width / kMxBlock;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t *p = packed + r * (width / 2);
    const uint8_t *s = scales + r * blocks;
    float *o = out + r * width;
    for (int64_t b = 0; b < blocks; ++b) {
      const float scale = e8m0ToF32(s[b]);
      for (int64_t i = 0; i < kMxBlock / 2; ++i) {
        const uint8_t byte = p[b * (kMxBlock / 2) + i];
        o[b * kMxBlock + 2 * i] = e2m1ToF32(byte & 0xF) * scale;
        o[b * kMxBlock + 2 * i + 1] = e2m1ToF32(byte >> 4) * scale;
      }
    }
  }
}

} // namespace kimi::rt

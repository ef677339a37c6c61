//===- mxfp4.cpp - MXFP4 dequantisation -----------------------------------===//

#include "runtime/weights/mxfp4.h"

#include <cmath>
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

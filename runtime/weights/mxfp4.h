//===- mxfp4.h - MXFP4 dequantisation ---------------------------*- C++ -*-===//
//
// OCP Microscaling FP4 (shared/reference/kimi-k3.md §6): blocks of 32 FP4
// E2M1 values sharing one E8M0 scale. Storage (compressed-tensors style):
//   values: U8 [..., W/2], two E2M1 codes per byte, low nibble first
//   scales: U8 or F8_E8M0 [..., W/32], value 2^(s-127) (s = 255 is NaN)
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_WEIGHTS_MXFP4_H
#define KIMI_RUNTIME_WEIGHTS_MXFP4_H

#include <cstdint>

namespace kimi::rt {

inline constexpr int64_t kMxBlock = 32;

/// The value of a 4-bit E2M1 code (bit 3 sign, bits 2-1 exponent, bit 0
/// mantissa): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
float e2m1ToF32(uint8_t code);
/// 2^(s-127); NaN for s = 255.
float e8m0ToF32(uint8_t s);

/// Dequantises `rows` rows of `width` values (width % 32 == 0) into `out`
/// (rows x width floats).
/// MXFP4 of one row of `n` (a multiple of 32) values: packed codes (low
/// nibble = even element) and E8M0 scales by OCP's rule (scale
/// 2^(floor(log2 amax) - 2), codes rounded to nearest, ties to even).
void quantizeMxfp4Row(const double *values, int64_t n, uint8_t *packed,
                      uint8_t *scales);

void dequantizeMxfp4(const uint8_t *packed, const uint8_t *scales, int64_t rows,
                     int64_t width, float *out);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_WEIGHTS_MXFP4_H

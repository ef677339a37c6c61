//===- float_convert.cpp - bf16 / f16 <-> f32 -----------------------------===//

#include "runtime/weights/float_convert.h"

#include <cstring>

namespace kimi::rt {

namespace {
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
} // namespace

float bf16ToF32(uint16_t bits) { return fromBits(uint32_t(bits) << 16); }

float f16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) // inf / nan
    return fromBits(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0)
      return fromBits(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while (!(mant & 0x400));
    mant &= 0x3FF;
    exp = static_cast<uint32_t>(127 - 15 - e);
    return fromBits(sign | (exp << 23) | (mant << 13));
  }
  return fromBits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t f32ToBf16(float value) {
  uint32_t u = bitsOf(value);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu))
    return static_cast<uint16_t>((u >> 16) | 0x40); // quiet NaN
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

uint16_t f32ToF16(float value) {
  uint32_t u = bitsOf(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t absu = u & 0x7FFFFFFFu;
  if (absu >= 0x7F800000u) // inf / nan
    return sign | 0x7C00 | (absu > 0x7F800000u ? 0x200 : 0);
  if (absu >= 0x477FF000u) // rounds to >= 65520: overflow to inf
    return sign | 0x7C00;
  if (absu < 0x38800000u) { // below the smallest normal f16 (2^-14)
    if (absu < 0x33000000u) // below half the smallest subnormal: zero
      return sign;
    // Subnormal: value = mant * 2^-24.
    const uint32_t exp = absu >> 23;
    const uint32_t mant = (absu & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exp; // 14..24 for this range
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t r = absu - (112u << 23); // rebias 127 -> 15
  uint32_t rounding = 0xFFF + ((r >> 13) & 1);
  r += rounding;
  return sign | static_cast<uint16_t>(r >> 13);
}

} // namespace kimi::rt

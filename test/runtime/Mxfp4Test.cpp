//===- Mxfp4Test.cpp - MXFP4 dequantisation and float conversions --------===//

#include "runtime/weights/float_convert.h"
#include "runtime/weights/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace kimi::rt;

namespace {

/// E2M1 from its bit fields, written independently of the table in mxfp4.cpp:
/// sign s, exponent e (bias 1), mantissa m; e = 0 is subnormal (m x 0.5).
double e2m1Reference(unsigned code) {
  const unsigned s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  double magnitude = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, static_cast<int>(e) - 1);
  return s ? -magnitude : magnitude;
}

double e8m0Reference(unsigned s) { return std::pow(2.0, static_cast<double>(s) - 127.0); }

} // namespace

TEST(Mxfp4, E2M1TableMatchesBitFields) {
  const double expected[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (unsigned code = 0; code < 16; ++code) {
    EXPECT_EQ(static_cast<double>(e2m1ToF32(static_cast<uint8_t>(code))),
              e2m1Reference(code))
        << "code " << code;
    EXPECT_EQ(std::fabs(e2m1Reference(code)), expected[code & 7]);
  }
  EXPECT_TRUE(std::signbit(e2m1ToF32(8))); // -0
}

TEST(Mxfp4, AllCodesTimesSeveralScales) {
  const unsigned scales[] = {0, 1, 64, 100, 120, 126, 127, 128, 129, 135, 150, 200, 254};
  for (unsigned s : scales) {
    // One block: codes 0..15 twice, i.e. bytes (2k) | (2k+1) << 4.
    uint8_t packed[16];
    for (int i = 0; i < 16; ++i)
      packed[i] = static_cast<uint8_t>(((2 * i) % 16) | (((2 * i + 1) % 16) << 4));
    const uint8_t scale = static_cast<uint8_t>(s);
    float out[32];
    dequantizeMxfp4(packed, &scale, 1, 32, out);
    for (int i = 0; i < 32; ++i) {
      const double ref = e2m1Reference(static_cast<unsigned>(i % 16)) * e8m0Reference(s);
      EXPECT_EQ(static_cast<double>(out[i]), static_cast<double>(static_cast<float>(ref)))
          << "scale " << s << " element " << i;
    }
    EXPECT_EQ(static_cast<double>(e8m0ToF32(scale)), e8m0Reference(s));
  }
}

TEST(Mxfp4, RowsBlocksAndNibbleOrder) {
  const int64_t rows = 3, width = 96; // 3 blocks per row
  std::mt19937 rng(7);
  std::vector<uint8_t> codes(rows * width), packed(rows * width / 2),
      scales(rows * width / 32);
  for (auto &c : codes)
    c = static_cast<uint8_t>(rng() % 16);
  for (auto &s : scales)
    s = static_cast<uint8_t>(110 + rng() % 30);
  for (int64_t i = 0; i < rows * width; i += 2)
    packed[i / 2] = static_cast<uint8_t>(codes[i] | (codes[i + 1] << 4)); // low first
  std::vector<float> out(rows * width);
  dequantizeMxfp4(packed.data(), scales.data(), rows, width, out.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      const double ref = e2m1Reference(codes[r * width + c]) *
                         e8m0Reference(scales[r * (width / 32) + c / 32]);
      ASSERT_EQ(static_cast<double>(out[r * width + c]), ref) << r << "," << c;
    }
}

TEST(Mxfp4, Scale255IsNaN) { EXPECT_TRUE(std::isnan(e8m0ToF32(255))); }

TEST(FloatConvert, Bf16) {
  EXPECT_EQ(bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(bf16ToF32(0xc040), -3.0f);
  EXPECT_EQ(f32ToBf16(1.0f), 0x3f80);
  // Round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(f32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16ToF32(f32ToBf16(std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16ToF32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32ToBf16(f), h);
    }
  }
}

TEST(FloatConvert, F16) {
  EXPECT_EQ(f16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(f16ToF32(0xc000), -2.0f);
  EXPECT_EQ(f16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(f16ToF32(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(f16ToF32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(f16ToF32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16ToF32(0x7e00)));
  EXPECT_EQ(f32ToF16(65520.0f), 0x7c00); // rounds to infinity
  EXPECT_EQ(f32ToF16(1e-9f), 0x0000);
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -25)), 0x0000); // tie to even (0)
  EXPECT_EQ(f32ToF16(std::ldexp(3.0f, -25)), 0x0002); // tie to even (2)
  // Every finite f16 survives a round trip through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16ToF32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32ToF16(f), h) << std::hex << h;
    }
  }
}

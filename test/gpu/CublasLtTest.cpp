//===- CublasLtTest.cpp - the runtime's cuBLASLt products vs float64 ------===//
//
// GPU models run every plain matrix product through CublasLt::gemm, described
// by element strides (kimi-gpu-gemm-calls). Each case fills A, B and C with
// fresh random values, runs C += A B on the device and compares with a
// float64 product: row- and column-major operands, transposed views through
// strides, a row-major C (computed as C^T = B^T A^T), unit dimensions
// (decode's one token), batches with a broadcast operand. Products of
// compile-time shapes (`tune`) have their algorithm chosen by timing
// cuBLASLt's candidates; they run twice, and C must hold C + 2 A B: the
// timing runs write a scratch C, never the caller's, and the second call
// takes the chosen plan from the cache. `overwrite` products (beta = 0)
// must leave exactly A B, and zeros when k = 0. A bf16 C (`cBf16`, only
// with bf16 operands and overwrite) holds A B rounded to bf16: its C starts
// as NaNs, and the error against float64 is bounded by bf16's rounding.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/cublaslt.h"
#include "runtime/weights/float_convert.h"
#include "test/runtime/TestGpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <random>

using namespace kimi::rt;

namespace {

struct Case {
  const char *name;
  int64_t m, n, k, batch;
  bool aRowMajor, bRowMajor, cRowMajor;
  bool broadcastB; // batch stride 0 for B
  int32_t precision;
  bool tune = false; // time the candidates; run the product twice
  bool overwrite = false; // C = A B (beta = 0): C's old values must not show
  bool cBf16 = false; // C is bf16 (with overwrite and precision 2)
};

class CublasLtGemm : public ::testing::TestWithParam<Case> {};

TEST_P(CublasLtGemm, MatchesFloat64) {
  KIMI_GPU_OR_SKIP(dev);
  const Case &c = GetParam();
  auto blas = CublasLt::load(dev);
  ASSERT_TRUE(blas.isOk()) << blas.status().message();
  auto stream = CudaStream::create(dev);
  ASSERT_TRUE(stream.isOk());

  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t aSize = c.m * c.k, bSize = c.k * c.n, cSize = c.m * c.n;
  const int64_t bBatches = c.broadcastB ? 1 : c.batch;
  std::vector<float> a(aSize * c.batch), b(bSize * bBatches), cv(cSize * c.batch);
  for (float &x : a) x = u(rng);
  for (float &x : b) x = u(rng);
  for (float &x : cv) x = u(rng);
  // Precision 2 reads bf16 A and B: the reference takes the rounded values.
  const bool bf16 = c.precision == 2;
  const size_t operandBytes = bf16 ? 2 : 4;
  auto operandBytesOf = [&](std::vector<float> &v) {
    std::vector<uint8_t> bytes(v.size() * operandBytes);
    for (size_t i = 0; i < v.size(); ++i) {
      if (bf16) {
        uint16_t h = f32ToBf16(v[i]);
        v[i] = bf16ToF32(h);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(bytes.data() + 4 * i, &v[i], 4);
      }
    }
    return bytes;
  };
  const std::vector<uint8_t> aBytes = operandBytesOf(a), bBytes = operandBytesOf(b);

  GemmF32 g;
  g.m = c.m, g.n = c.n, g.k = c.k, g.batch = c.batch;
  g.precision = c.precision;
  g.tune = c.tune;
  g.overwrite = c.overwrite;
  g.cBf16 = c.cBf16;
  const int calls = c.tune ? 2 : 1;
  g.aM = c.aRowMajor ? c.k : 1, g.aK = c.aRowMajor ? 1 : c.m, g.aBatch = aSize;
  g.bK = c.bRowMajor ? c.n : 1, g.bN = c.bRowMajor ? 1 : c.k;
  g.bBatch = c.broadcastB ? 0 : bSize;
  g.cM = c.cRowMajor ? c.n : 1, g.cN = c.cRowMajor ? 1 : c.m, g.cBatch = cSize;

  // k = 0 leaves A and B empty: allocate a word anyway.
  auto da = DeviceBuffer::allocate(dev, std::max<size_t>(aBytes.size(), 4));
  auto db = DeviceBuffer::allocate(dev, std::max<size_t>(bBytes.size(), 4));
  const size_t cBytes = c.cBf16 ? 2 : 4;
  auto dc = DeviceBuffer::allocate(dev, std::max<size_t>(cv.size() * cBytes, 4));
  ASSERT_TRUE(da.isOk() && db.isOk() && dc.isOk());
  if (!a.empty()) {
    ASSERT_TRUE(da->upload(aBytes.data(), aBytes.size()).isOk());
  }
  if (!b.empty()) {
    ASSERT_TRUE(db->upload(bBytes.data(), bBytes.size()).isOk());
  }
  if (c.cBf16) {
    // Poisoned: a NaN survives anywhere the product does not store.
    std::vector<uint16_t> poison(cv.size(), 0x7fc0);
    if (!poison.empty()) {
      ASSERT_TRUE(dc->upload(poison.data(), poison.size() * 2).isOk());
    }
  } else {
    ASSERT_TRUE(dc->upload(cv.data(), cv.size() * 4).isOk());
  }
  g.a = da->address(), g.b = db->address(), g.c = dc->address();
  for (int i = 0; i < calls; ++i) {
    Status st = blas.value()->gemm(g, stream.value()->handle());
    ASSERT_TRUE(st.isOk()) << st.message();
  }
  const char *budget = std::getenv("KIMI_GEMM_TUNING_MS");
  if (c.tune && !(budget && std::string(budget) == "0")) {
    EXPECT_NE(blas.value()->tuningReport(), "") << "no shape was timed";
  }
  ASSERT_TRUE(stream.value()->synchronize().isOk());
  std::vector<float> got(cv.size(), std::nanf(""));
  if (c.cBf16) {
    std::vector<uint16_t> raw(cv.size());
    if (!raw.empty()) {
      ASSERT_TRUE(dc->download(raw.data(), raw.size() * 2).isOk());
    }
    for (size_t i = 0; i < raw.size(); ++i)
      got[i] = bf16ToF32(raw[i]);
  } else {
    ASSERT_TRUE(dc->download(got.data(), got.size() * 4).isOk());
  }

  double num = 0, den = 0;
  for (int64_t p = 0; p < c.batch; ++p)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        const float *ab = a.data() + p * g.aBatch;
        const float *bb = b.data() + p * g.bBatch;
        int64_t ci = p * g.cBatch + i * g.cM + j * g.cN;
        double product = 0;
        for (int64_t l = 0; l < c.k; ++l)
          product += double(ab[i * g.aM + l * g.aK]) * double(bb[l * g.bK + j * g.bN]);
        double want = c.overwrite ? product : cv[ci] + calls * product;
        double d = double(got[ci]) - want;
        ASSERT_TRUE(std::isfinite(got[ci])) << "C[" << p << "," << i << "," << j << "]";
        num += d * d;
        den += want * want;
      }
  // k = 0 with overwrite: every element must be exactly 0.
  double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf("[ error    ] %s: %.3g\n", c.name, err);
  // A bf16 C: rounding to nearest even moves a value by at most 2^-9 of
  // itself, about 1.1e-3 in norm for uniform mantissas.
  EXPECT_LT(err, c.cBf16 ? 3e-3 : c.precision == 1 ? 1e-2 : 1e-5);

}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CublasLtGemm,
    ::testing::Values(
        Case{"row_row_row", 37, 53, 29, 1, true, true, true, false, 0},
        Case{"linear_xWT", 64, 96, 128, 1, true, false, true, false, 0},
        Case{"col_col_col", 33, 17, 65, 1, false, false, false, false, 0},
        Case{"row_col_col", 20, 31, 7, 1, true, false, false, false, 0},
        Case{"decode_m1", 1, 257, 300, 1, true, false, true, false, 0},
        Case{"vector_n1", 45, 1, 64, 1, true, true, true, false, 0},
        Case{"batched", 16, 24, 40, 5, true, true, true, false, 0},
        Case{"batched_broadcast_b", 16, 24, 40, 3, true, false, true, true, 0},
        Case{"tf32", 128, 128, 256, 1, true, false, true, false, 1},
        // bf16 A and B (precision 2), f32 C: exact products, f32 sums.
        Case{"bf16", 128, 96, 256, 1, true, false, true, false, 2},
        Case{"bf16_decode_m1", 1, 2048, 512, 1, true, false, true, false, 2},
        Case{"bf16_tuned_batched", 64, 48, 96, 4, true, true, true, false, 2, true},
        Case{"bf16_col_col_col", 40, 24, 64, 1, false, false, false, false, 2},
        Case{"tuned_f32", 96, 80, 200, 1, true, false, true, false, 0, true},
        Case{"tuned_tf32", 512, 384, 1024, 1, true, false, true, false, 1, true},
        Case{"tuned_decode_m1", 1, 2048, 512, 1, true, false, true, false, 1, true},
        Case{"tuned_batched", 64, 48, 96, 4, true, true, true, false, 1, true},
        Case{"overwrite", 37, 53, 29, 1, true, false, true, false, 0, false, true},
        Case{"overwrite_tuned_batched", 64, 48, 96, 3, true, true, false, false, 1, true, true},
        Case{"overwrite_k0", 5, 7, 0, 2, true, true, true, false, 0, false, true},
        // bf16 C: the f32 sums rounded as they are stored.
        Case{"bf16_c_linear", 256, 192, 512, 1, true, false, true, false, 2, false, true, true},
        Case{"bf16_c_tuned_batched_col", 64, 48, 96, 3, true, true, false, false, 2, true, true, true},
        Case{"bf16_c_decode_m1", 1, 2048, 512, 1, true, false, true, false, 2, true, true, true},
        Case{"bf16_c_k0", 5, 7, 0, 2, true, true, true, false, 2, false, true, true}),
    [](const auto &info) { return std::string(info.param.name); });

} // namespace

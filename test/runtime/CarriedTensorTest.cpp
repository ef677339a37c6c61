//===- CarriedTensorTest.cpp - Appending cache rows -----------------------===//
//
// Session caches grow by appendRows. The properties a session relies on:
// every tensor keeps reading its own rows after later appends (snapshots
// share tensors), two continuations of one prefix do not overwrite each
// other, and several sequences stay interleaved [B, L, ...].
//
//===----------------------------------------------------------------------===//

#include "runtime/session/carried_tensor.h"
#include "runtime/session/executable.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace kimi::rt;

namespace {
/// A host tensor [batch, rows, width] of fresh random floats.
CarriedRef randomRows(int64_t batch, int64_t rows, int64_t width,
                      std::mt19937 &rng, std::vector<float> &values) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  values.resize(size_t(batch * rows * width));
  for (float &v : values)
    v = u(rng);
  HostBuffer b = HostBuffer::allocate(values.size() * 4).value();
  std::memcpy(b.data, values.data(), values.size() * 4);
  return std::make_shared<HostCarriedTensor>(
      HostTensor{DType::kF32, {batch, rows, width}, b});
}

std::vector<float> contents(const CarriedRef &t) {
  HostTensor h = t->toHost().value();
  const float *p = reinterpret_cast<const float *>(h.data());
  return std::vector<float>(p, p + h.bytes() / 4);
}
} // namespace

TEST(CarriedTensor, OneSequenceGrowsAndEveryTensorKeepsItsRows) {
  std::mt19937 rng(std::random_device{}());
  const int64_t width = 5;
  std::vector<float> expected, rows;
  CarriedRef cache;
  std::vector<std::pair<CarriedRef, std::vector<float>>> history;
  for (int step = 0; step < 40; ++step) {
    CarriedRef added = randomRows(1, step == 0 ? 7 : 1, width, rng, rows);
    auto grown = HostCarriedTensor::appendRows(cache, *added, 1);
    ASSERT_TRUE(grown.isOk()) << grown.status().message();
    cache = grown.value();
    expected.insert(expected.end(), rows.begin(), rows.end());
    EXPECT_EQ(cache->shape(), (std::vector<int64_t>{1, int64_t(expected.size()) / width, width}));
    history.emplace_back(cache, expected);
  }
  // Appends wrote past each tensor's end, never into it.
  for (const auto &[t, values] : history)
    EXPECT_EQ(contents(t), values);
}

TEST(CarriedTensor, TwoContinuationsOfOnePrefixStaySeparate) {
  std::mt19937 rng(std::random_device{}());
  std::vector<float> prefix, a, b;
  CarriedRef base = randomRows(1, 3, 4, rng, prefix);
  // Give the prefix room to grow in place first.
  std::vector<float> more;
  base = HostCarriedTensor::appendRows(base, *randomRows(1, 1, 4, rng, more), 1).value();
  prefix.insert(prefix.end(), more.begin(), more.end());
  CarriedRef first =
      HostCarriedTensor::appendRows(base, *randomRows(1, 2, 4, rng, a), 1).value();
  CarriedRef second =
      HostCarriedTensor::appendRows(base, *randomRows(1, 2, 4, rng, b), 1).value();
  std::vector<float> wantFirst = prefix, wantSecond = prefix;
  wantFirst.insert(wantFirst.end(), a.begin(), a.end());
  wantSecond.insert(wantSecond.end(), b.begin(), b.end());
  EXPECT_EQ(contents(base), prefix);
  EXPECT_EQ(contents(first), wantFirst);
  EXPECT_EQ(contents(second), wantSecond);
}

TEST(CarriedTensor, SeveralSequencesStayInterleaved) {
  std::mt19937 rng(std::random_device{}());
  const int64_t batch = 3, width = 2;
  std::vector<std::vector<float>> perSequence(batch);
  std::vector<float> rows;
  CarriedRef cache;
  for (int step = 0; step < 5; ++step) {
    const int64_t n = step == 0 ? 4 : 1;
    CarriedRef added = randomRows(batch, n, width, rng, rows);
    cache = HostCarriedTensor::appendRows(cache, *added, batch).value();
    for (int64_t s = 0; s < batch; ++s)
      perSequence[s].insert(perSequence[s].end(), rows.begin() + s * n * width,
                            rows.begin() + (s + 1) * n * width);
  }
  std::vector<float> want;
  for (const auto &s : perSequence)
    want.insert(want.end(), s.begin(), s.end());
  EXPECT_EQ(cache->shape(), (std::vector<int64_t>{batch, 8, width}));
  EXPECT_EQ(contents(cache), want);
}

TEST(CarriedTensor, MismatchedRowsAreRefusedWithBothShapes) {
  std::mt19937 rng(1);
  std::vector<float> v;
  CarriedRef cache = randomRows(2, 3, 4, rng, v);
  auto wrongWidth = HostCarriedTensor::appendRows(cache, *randomRows(2, 1, 5, rng, v), 2);
  ASSERT_FALSE(wrongWidth.isOk());
  EXPECT_EQ(wrongWidth.status().message(),
            "cache rows f32 [2, 1, 5] cannot extend f32 [2, 3, 4] of 2 sequences");
  auto wrongBatch = HostCarriedTensor::appendRows(cache, *randomRows(1, 1, 4, rng, v), 2);
  EXPECT_FALSE(wrongBatch.isOk());
}

TEST(CarriedTensor, RowsToHostCopiesTheRowsOfTheLastDimension) {
  std::mt19937 rng(std::random_device{}());
  std::vector<float> values;
  // [2, 3, 5]: six rows of five.
  CarriedRef t = randomRows(2, 3, 5, rng, values);
  StatusOr<HostTensor> rows = t->rowsToHost(2, 3);
  ASSERT_TRUE(rows.isOk()) << rows.status().message();
  EXPECT_EQ(rows->shape, (std::vector<int64_t>{3, 5}));
  ASSERT_EQ(rows->bytes(), size_t(15) * 4);
  EXPECT_EQ(std::memcmp(rows->data(), values.data() + 10, 15 * 4), 0);
  EXPECT_TRUE(t->rowsToHost(6, 0).isOk());
  StatusOr<HostTensor> past = t->rowsToHost(5, 2);
  ASSERT_FALSE(past.isOk());
  EXPECT_EQ(past.status().message(),
            "rows [5, 7) of a f32 [2, 3, 5] tensor (6 rows)");
  EXPECT_FALSE(t->rowsToHost(-1, 1).isOk());
}

//===- SafetensorsTest.cpp - safetensors reader/writer and JSON parser ---===//

#include "runtime/weights/json.h"
#include "runtime/weights/safetensors.h"
#include "runtime/weights/safetensors_writer.h"
#include "TestFiles.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <unistd.h>

using namespace kimi::rt;

namespace {

std::vector<uint8_t> fileWithHeader(const std::string &header,
                                    const std::vector<uint8_t> &data = {}) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string parseError(std::vector<uint8_t> bytes) {
  auto file = SafetensorsFile::fromBytes(std::move(bytes), "test.safetensors");
  if (file.isOk())
    return "";
  return file.status().message();
}

std::vector<uint8_t> sampleFile() {
  SafetensorsWriter w;
  w.addMetadata("format", "pt");
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  w.addF32("a.weight", {2, 3}, f32);
  std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x4040, 0x0000};
  w.add("b.bf16", StDType::kBF16, {4}, bf16.data(), bf16.size() * 2);
  std::vector<uint8_t> u8 = {0, 1, 2, 254, 255, 17, 34, 51};
  w.add("c.u8", StDType::kU8, {2, 2, 2}, u8.data(), u8.size());
  std::vector<uint16_t> f16 = {0x3c00, 0xbc00};
  w.add("d.f16", StDType::kF16, {2}, f16.data(), 4);
  std::vector<uint8_t> e8 = {127, 128};
  w.add("d.f16_scale", StDType::kF8E8M0, {2, 1}, e8.data(), 2);
  auto bytes = w.serialize();
  EXPECT_TRUE(bytes.isOk());
  return bytes.value();
}

} // namespace

TEST(Json, ParsesValues) {
  std::string text =
      R"( {"a": [1, 2.5, -3, 1e3, true, false, null], "s": "x\"\\\/\b\f\n\r\tA\u00e9\ud83d\ude00", "o": {}} )";
  auto v = parseJson(text.data(), text.size());
  ASSERT_TRUE(v.isOk()) << v.status().message();
  const JsonValue *a = v->find("a");
  ASSERT_TRUE(a && a->isArray());
  ASSERT_EQ(a->array.size(), 7u);
  EXPECT_TRUE(a->array[0].isUint64);
  EXPECT_EQ(a->array[0].uint64, 1u);
  EXPECT_FALSE(a->array[1].isUint64);
  EXPECT_DOUBLE_EQ(a->array[1].number, 2.5);
  EXPECT_FALSE(a->array[2].isUint64);
  EXPECT_DOUBLE_EQ(a->array[3].number, 1000.0);
  EXPECT_TRUE(a->array[4].boolean);
  EXPECT_EQ(a->array[6].kind, JsonValue::Kind::kNull);
  EXPECT_EQ(v->find("s")->string,
            "x\"\\/\b\f\n\r\tA\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(v->find("o")->isObject());
}

TEST(Json, ExactLargeIntegers) {
  std::string text = "[18446744073709551615, 18446744073709551616]";
  auto v = parseJson(text.data(), text.size());
  ASSERT_TRUE(v.isOk());
  EXPECT_TRUE(v->array[0].isUint64);
  EXPECT_EQ(v->array[0].uint64, UINT64_MAX);
  EXPECT_FALSE(v->array[1].isUint64); // overflow: not an exact integer
}

TEST(Json, RejectsMalformed) {
  const char *bad[] = {"",          "{",          "{\"a\" 1}",  "{\"a\":1,}",
                       "[1 2]",     "[01]",       "-",          "1.",
                       "1e",        "\"abc",      "\"\\x\"",    "\"\\u12\"",
                       "\"\\ud800\"", "\"\\udc00\"", "tru",      "nul",
                       "{1:2}",     "{\"a\":1} x", "\"a\nb\"",   "{\"a\":1,\"a\":2}",
                       "[1]]",      "@"};
  for (const char *text : bad) {
    auto v = parseJson(text, std::strlen(text));
    EXPECT_FALSE(v.isOk()) << "accepted: " << text;
    if (!v.isOk()) {
      EXPECT_NE(v.status().message().find("JSON error at byte"), std::string::npos);
    }
  }
}

TEST(Json, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string deep(100000, '[');
  auto v = parseJson(deep.data(), deep.size());
  ASSERT_FALSE(v.isOk());
  EXPECT_NE(v.status().message().find("nesting deeper than"), std::string::npos);
}

TEST(Safetensors, RoundTripF32Bf16U8) {
  std::vector<uint8_t> bytes = sampleFile();
  EXPECT_EQ(bytes.size() % 8, (6 * 4 + 4 * 2 + 8 + 4 + 2) % 8); // header padded to 8
  auto file = SafetensorsFile::fromBytes(bytes);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  const auto &f = *file.value();
  ASSERT_EQ(f.tensors().size(), 5u);
  ASSERT_EQ(f.metadata().size(), 1u);
  EXPECT_EQ(f.metadata()[0].first, "format");
  EXPECT_EQ(f.metadata()[0].second, "pt");

  const TensorView *a = f.find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  float values[6];
  std::memcpy(values, a->data, sizeof(values));
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[5], -7.0f);

  const TensorView *b = f.find("b.bf16");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, StDType::kBF16);
  EXPECT_EQ(b->nbytes, 8u);
  uint16_t h;
  std::memcpy(&h, b->data + 2, 2);
  EXPECT_EQ(h, 0xc000);

  const TensorView *c = f.find("c.u8");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, StDType::kU8);
  EXPECT_EQ(c->shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(c->data[3], 254);
  EXPECT_EQ(f.find("d.f16_scale")->dtype, StDType::kF8E8M0);
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(Safetensors, OpensMappedFile) {
  std::string path = ::testing::TempDir() + "/roundtrip.safetensors";
  SafetensorsWriter w;
  std::vector<float> v = {1, 2, 3, 4};
  w.addF32("x", {4}, v);
  ASSERT_TRUE(w.write(path).isOk());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  const TensorView *x = file.value()->find("x");
  ASSERT_NE(x, nullptr);
  float got[4];
  std::memcpy(got, x->data, 16);
  EXPECT_EQ(got[3], 4.0f);
  ::unlink(path.c_str());
}

TEST(Safetensors, OpenErrorsNameThePath) {
  auto missing = SafetensorsFile::open("/nonexistent/dir/w.safetensors");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kIo);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/w.safetensors"),
            std::string::npos);
  auto dir = SafetensorsFile::open(::testing::TempDir());
  ASSERT_FALSE(dir.isOk());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);
  std::string empty = ::testing::TempDir() + "/empty.safetensors";
  FILE *f = std::fopen(empty.c_str(), "wb");
  std::fclose(f);
  auto e = SafetensorsFile::open(empty);
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find("shorter than the 8-byte header length"),
            std::string::npos);
  ::unlink(empty.c_str());
}

TEST(Safetensors, WriterRejectsSizeMismatchAndDuplicates) {
  SafetensorsWriter w;
  std::vector<float> v = {1, 2, 3};
  w.addF32("x", {4}, v);
  EXPECT_FALSE(w.serialize().isOk());
  SafetensorsWriter d;
  d.addF32("x", {3}, v);
  d.addF32("x", {3}, v);
  EXPECT_FALSE(d.serialize().isOk());
}

struct MalformedCase {
  const char *what;
  std::vector<uint8_t> bytes;
  const char *message;
};

TEST(Safetensors, MalformedHeadersAreErrors) {
  std::vector<uint8_t> eight(8, 0);
  std::vector<uint8_t> lengthTooLong = fileWithHeader("{}");
  lengthTooLong[0] = 200;
  std::vector<uint8_t> hugeLength(16, ' ');
  for (int i = 0; i < 8; ++i)
    hugeLength[i] = 0xff;
  std::vector<uint8_t> data8(8, 0);
  std::vector<MalformedCase> cases = {
      {"short", {1, 2, 3}, "shorter than the 8-byte header length"},
      {"zero length", eight, "too short for a JSON object"},
      {"length beyond file", lengthTooLong, "exceeds the 2 bytes after the length field"},
      {"huge length", hugeLength, "exceeds the limit"},
      {"bad json", fileWithHeader("{\"a\": "), "JSON error at byte"},
      {"not object", fileWithHeader("[1, 2]"), "header is a JSON array"},
      {"entry not object", fileWithHeader("{\"t\": 3}"), "tensor 't': entry is not an object"},
      {"unknown dtype",
       fileWithHeader(R"({"w.x":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", data8),
       "tensor 'w.x': unknown dtype 'F7'"},
      {"missing dtype", fileWithHeader(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", data8),
       "tensor 't': missing or non-string \"dtype\""},
      {"missing shape", fileWithHeader(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", data8),
       "tensor 't': missing \"shape\""},
      {"missing offsets", fileWithHeader(R"({"t":{"dtype":"F32","shape":[2]}})", data8),
       "tensor 't': missing \"data_offsets\""},
      {"negative dim",
       fileWithHeader(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8),
       "\"shape\" is not an array of non-negative integers"},
      {"fractional dim",
       fileWithHeader(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data8),
       "\"shape\" is not an array"},
      {"offsets not pair",
       fileWithHeader(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8),
       "\"data_offsets\" is not [begin, end]"},
      {"offsets beyond file",
       fileWithHeader(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8),
       "tensor 't': data_offsets [0, 16] extend beyond the data section of 8 bytes"},
      {"end before begin",
       fileWithHeader(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8),
       "end before begin"},
      {"size mismatch",
       fileWithHeader(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
       "tensor 't': data_offsets [0, 8] hold 8 bytes but F32 [3] needs 12"},
      {"overlap",
       fileWithHeader(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
           data8),
       "tensors 'a' and 'b' overlap"},
      {"huge shape",
       fileWithHeader(
           R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
           data8),
       "too large"},
      {"duplicate tensor",
       fileWithHeader(
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
           data8),
       "duplicate key"},
      {"metadata not strings", fileWithHeader(R"({"__metadata__":{"k":1}})"),
       "__metadata__ value of 'k' is not a string"},
  };
  for (const MalformedCase &c : cases) {
    std::string error = parseError(c.bytes);
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.what << ": got \"" << error << "\"";
    EXPECT_NE(error.find("safetensors 'test.safetensors'"), std::string::npos) << c.what;
  }
}

TEST(Safetensors, EveryDataByteBelongsToATensor) {
  // A header padded with spaces (as writers align it), its length then cut
  // into the padding: the JSON still parses, and every tensor would move by
  // the bytes cut. The data no longer ends where the last tensor does.
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  std::string padded = header + std::string(8 - header.size() % 8, ' ');
  std::vector<uint8_t> data = {1, 2, 3, 4};
  ASSERT_EQ(parseError(fileWithHeader(padded, data)), "");
  std::vector<uint8_t> cut = fileWithHeader(padded, data);
  cut[0] = static_cast<uint8_t>(header.size()); // the padding now data
  EXPECT_NE(parseError(cut).find("the data section is " +
                                 std::to_string(4 + padded.size() - header.size()) +
                                 " bytes but its tensors end at byte 4"),
            std::string::npos)
      << parseError(cut);
  // A hole between two tensors, and bytes past the last.
  const std::string holed =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
      R"("b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}})";
  EXPECT_NE(parseError(fileWithHeader(holed, data))
                .find("bytes [2, 3) of the data section belong to no tensor "
                      "(before 'b')"),
            std::string::npos)
      << parseError(fileWithHeader(holed, data));
  std::vector<uint8_t> longer = data;
  longer.push_back(5);
  EXPECT_NE(parseError(fileWithHeader(header, longer))
                .find("the data section is 5 bytes but its tensors end at "
                      "byte 4"),
            std::string::npos);
}

TEST(Safetensors, FifoIsRefusedWithoutWaiting) {
  kimi::test::ScopedFifo fifo("fifo.safetensors");
  ASSERT_TRUE(fifo.made());
  // Without a writer, a blocking open() would wait here forever.
  auto file = SafetensorsFile::open(fifo.path());
  ASSERT_FALSE(file.isOk());
  EXPECT_NE(file.status().message().find("is not a regular file"),
            std::string::npos)
      << file.status().message();
}

TEST(Safetensors, TruncatedFileIsAnError) {
  std::vector<uint8_t> bytes = sampleFile();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    EXPECT_NE(parseError(cut), "") << "truncated to " << n << " bytes";
  }
}

// Random byte flips and truncations of a valid file: each parse either
// succeeds with every tensor inside the buffer or fails with a message.
TEST(Safetensors, FuzzFlipsAndTruncations) {
  const std::vector<uint8_t> original = sampleFile();
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | original[i];
  std::mt19937_64 rng(20261129);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly in the length field and JSON header, where parsing happens.
      size_t limit = (rng() % 5) ? static_cast<size_t>(8 + headerLen) : bytes.size();
      size_t at = rng() % limit;
      if (rng() % 2)
        bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      else
        bytes[at] = static_cast<uint8_t>(rng());
    }
    if (rng() % 4 == 0)
      bytes.resize(rng() % (bytes.size() + 1));
    auto file = SafetensorsFile::fromBytes(bytes, "fuzz");
    if (!file.isOk()) {
      EXPECT_FALSE(file.status().message().empty());
      ++rejected;
      continue;
    }
    ++accepted;
    // Touch every byte of every tensor (AddressSanitizer checks the bounds).
    unsigned sum = 0;
    for (const TensorView &t : file.value()->tensors())
      for (uint64_t i = 0; i < t.nbytes; ++i)
        sum += t.data[i];
    (void)sum;
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0); // flips in the data section keep the file valid
}

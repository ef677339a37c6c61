//===- WeightLoaderTest.cpp - Manifest -> safetensors -> compute dtype ---===//

#include "runtime/weights/float_convert.h"
#include "runtime/weights/safetensors_writer.h"
#include "runtime/weights/weight_loader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <unistd.h>

using namespace kimi::rt;

namespace {

std::unique_ptr<SafetensorsFile> fileOf(const SafetensorsWriter &w,
                                        const std::string &label) {
  auto bytes = w.serialize();
  EXPECT_TRUE(bytes.isOk()) << bytes.status().message();
  auto file = SafetensorsFile::fromBytes(bytes.value(), label);
  EXPECT_TRUE(file.isOk()) << file.status().message();
  return std::move(file.value());
}

std::unique_ptr<WeightLoader> loaderOf(std::vector<const SafetensorsWriter *> writers) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (size_t i = 0; i < writers.size(); ++i)
    files.push_back(fileOf(*writers[i], "shard" + std::to_string(i)));
  auto loader = WeightLoader::fromFiles(std::move(files));
  EXPECT_TRUE(loader.isOk()) << loader.status().message();
  return std::move(loader.value());
}

std::vector<float> iota(size_t n, float start = 0.5f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = start + static_cast<float>(i);
  return v;
}

std::vector<uint16_t> toBf16(const std::vector<float> &v) {
  std::vector<uint16_t> out;
  for (float f : v)
    out.push_back(f32ToBf16(f));
  return out;
}

/// Loads `spec` and returns the f32 values, or the error message.
std::vector<float> load(const WeightLoader &l, const WeightSpec &spec,
                        std::string *error = nullptr) {
  int64_t n = 1;
  for (int64_t d : spec.shape)
    n *= d;
  std::vector<float> out(static_cast<size_t>(n), -99.0f);
  Status s = l.load(spec, out.data(), out.size() * 4);
  if (error)
    *error = s.isOk() ? "" : s.message();
  else
    EXPECT_TRUE(s.isOk()) << s.message();
  return out;
}

WeightSpec spec(std::string name, std::vector<int64_t> shape,
                std::vector<std::string> aliases = {}) {
  return {std::move(name), std::move(aliases), std::move(shape), DType::kF32, "sym"};
}

} // namespace

TEST(WeightLoader, SpellingsCanonicalThenAliasesEachWithPrefix) {
  WeightSpec s = spec("model.layers.1.mlp.experts.{e}.gate_proj.weight", {4, 2, 2},
                      {"model.layers.1.block_sparse_moe.experts.{e}.w1.weight"});
  EXPECT_EQ(WeightLoader::spellings(s, 3),
            (std::vector<std::string>{
                "model.layers.1.mlp.experts.3.gate_proj.weight",
                "language_model.model.layers.1.mlp.experts.3.gate_proj.weight",
                "model.layers.1.block_sparse_moe.experts.3.w1.weight",
                "language_model.model.layers.1.block_sparse_moe.experts.3.w1.weight"}));
  EXPECT_EQ(WeightLoader::spellings(s)[0], s.name); // {e} kept literally
}

TEST(WeightLoader, CanonicalF32) {
  SafetensorsWriter w;
  w.addF32("model.norm.weight", {4}, iota(4));
  auto l = loaderOf({&w});
  EXPECT_EQ(load(*l, spec("model.norm.weight", {4})), iota(4));
}

TEST(WeightLoader, AliasAndLanguageModelPrefix) {
  SafetensorsWriter w;
  w.addF32("language_model.model.layers.0.block_sparse_moe.gate.weight", {2, 3}, iota(6));
  auto l = loaderOf({&w});
  EXPECT_EQ(load(*l, spec("model.layers.0.mlp.gate.weight", {2, 3},
                          {"model.layers.0.block_sparse_moe.gate.weight"})),
            iota(6));
}

TEST(WeightLoader, Bf16AndF16AreConverted) {
  SafetensorsWriter w;
  std::vector<float> values = {1.0f, -2.5f, 0.15625f, 448.0f};
  auto bf = toBf16(values);
  w.add("a", StDType::kBF16, {4}, bf.data(), 8);
  std::vector<uint16_t> h;
  for (float f : values)
    h.push_back(f32ToF16(f));
  w.add("b", StDType::kF16, {2, 2}, h.data(), 8);
  auto l = loaderOf({&w});
  EXPECT_EQ(load(*l, spec("a", {4})), values);
  EXPECT_EQ(load(*l, spec("b", {2, 2})), values);

  // To a bf16 compute dtype.
  WeightSpec toBf = spec("b", {2, 2});
  toBf.dtype = DType::kBF16;
  std::vector<uint16_t> out(4);
  ASSERT_TRUE(l->load(toBf, out.data(), 8).isOk());
  EXPECT_EQ(out, bf);
}

TEST(WeightLoader, ExpertsStackedFromPerExpertTensorsAcrossShards) {
  SafetensorsWriter a, b;
  const int64_t experts = 3;
  for (int64_t e = 0; e < experts; ++e) {
    auto values = toBf16(iota(4, 10.0f * static_cast<float>(e)));
    // Expert 2 lives in the second shard, under the alias spelling.
    if (e < 2)
      a.add("model.layers.2.mlp.experts." + std::to_string(e) + ".up_proj.weight",
            StDType::kBF16, {2, 2}, values.data(), 8);
    else
      b.add("language_model.model.layers.2.block_sparse_moe.experts." +
                std::to_string(e) + ".w3.weight",
            StDType::kBF16, {2, 2}, values.data(), 8);
  }
  auto l = loaderOf({&a, &b});
  std::vector<float> got =
      load(*l, spec("model.layers.2.mlp.experts.{e}.up_proj.weight", {experts, 2, 2},
                    {"model.layers.2.block_sparse_moe.experts.{e}.w3.weight"}));
  std::vector<float> expected;
  for (int64_t e = 0; e < experts; ++e)
    for (float f : iota(4, 10.0f * static_cast<float>(e)))
      expected.push_back(f);
  EXPECT_EQ(got, expected);
}

TEST(WeightLoader, ExpertsAsOneStackedTensor) {
  SafetensorsWriter w;
  w.addF32("model.layers.0.mlp.experts.{e}.down_proj.weight", {2, 3}, iota(6));
  auto l = loaderOf({&w});
  EXPECT_EQ(load(*l, spec("model.layers.0.mlp.experts.{e}.down_proj.weight", {2, 3})),
            iota(6));
}

TEST(WeightLoader, Mxfp4WithU8AndE8M0Scales) {
  // Two rows of 64 values: codes (i % 16), scales 2^-1 and 2^2 per block.
  std::vector<uint8_t> packed, scales = {126, 129, 127, 130};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 64; i += 2)
      packed.push_back(static_cast<uint8_t>((i % 16) | (((i + 1) % 16) << 4)));
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<float> expected;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 64; ++i)
      expected.push_back(e2m1[i % 16] * std::ldexp(1.0f, scales[r * 2 + i / 32] - 127));

  for (StDType scaleType : {StDType::kU8, StDType::kF8E8M0}) {
    SafetensorsWriter w;
    w.add("model.layers.0.mlp.experts.0.gate_proj.weight", StDType::kU8, {2, 32},
          packed.data(), packed.size());
    w.add("model.layers.0.mlp.experts.0.gate_proj.weight_scale", scaleType, {2, 2},
          scales.data(), scales.size());
    auto l = loaderOf({&w});
    EXPECT_EQ(load(*l, spec("model.layers.0.mlp.experts.{e}.gate_proj.weight", {1, 2, 64})),
              expected);
  }
  // compressed-tensors spelling: `<name>_packed` + `<name>_scale`.
  SafetensorsWriter ct;
  ct.add("w.weight_packed", StDType::kU8, {2, 32}, packed.data(), packed.size());
  ct.add("w.weight_scale", StDType::kU8, {2, 2}, scales.data(), scales.size());
  auto l = loaderOf({&ct});
  EXPECT_EQ(load(*l, spec("w.weight", {2, 64})), expected);
}

TEST(WeightLoader, MissingTensorListsSpellings) {
  SafetensorsWriter w;
  w.addF32("other", {1}, iota(1));
  auto l = loaderOf({&w});
  std::string error;
  load(*l, spec("model.norm.weight", {4}, {"norm"}), &error);
  EXPECT_NE(error.find("weight 'model.norm.weight' not found in 1 safetensors file; "
                       "tried 'model.norm.weight', 'language_model.model.norm.weight', "
                       "'norm', 'language_model.norm'"),
            std::string::npos)
      << error;
}

TEST(WeightLoader, MissingExpertIsNamed) {
  SafetensorsWriter w;
  w.addF32("model.layers.0.mlp.experts.0.gate_proj.weight", {2}, iota(2));
  auto l = loaderOf({&w});
  std::string error;
  load(*l, spec("model.layers.0.mlp.experts.{e}.gate_proj.weight", {2, 2}), &error);
  EXPECT_NE(error.find("weight 'model.layers.0.mlp.experts.{e}.gate_proj.weight': "
                       "expert 1 of 2 not found"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("'model.layers.0.mlp.experts.1.gate_proj.weight'"),
            std::string::npos);
}

TEST(WeightLoader, WrongShapeSaysExpectedAndFound) {
  SafetensorsWriter w;
  w.addF32("lm_head.weight", {4, 3}, iota(12));
  auto l = loaderOf({&w});
  std::string error;
  load(*l, spec("lm_head.weight", {3, 4}), &error);
  EXPECT_NE(error.find("weight 'lm_head.weight': tensor 'lm_head.weight' in 'shard0' "
                       "has shape [4, 3], expected [3, 4]"),
            std::string::npos)
      << error;
}

TEST(WeightLoader, UnsupportedDtypeIsNamed) {
  SafetensorsWriter w;
  std::vector<int64_t> ids = {1, 2};
  w.add("model.embed_tokens.weight", StDType::kI64, {2}, ids.data(), 16);
  auto l = loaderOf({&w});
  std::string error;
  load(*l, spec("model.embed_tokens.weight", {2}), &error);
  EXPECT_NE(error.find("tensor 'model.embed_tokens.weight' in 'shard0' has unsupported "
                       "dtype I64"),
            std::string::npos)
      << error;
}

TEST(WeightLoader, Mxfp4Errors) {
  std::vector<uint8_t> packed(32), scales(2, 127);
  {
    SafetensorsWriter w; // no scale tensor
    w.add("x", StDType::kU8, {2, 16}, packed.data(), 32);
    auto l = loaderOf({&w});
    std::string error;
    load(*l, spec("x", {2, 32}), &error);
    EXPECT_NE(error.find("weight 'x': tensor 'x' in 'shard0' is U8 (MXFP4 values) but "
                         "its scale tensor 'x_scale' is missing"),
              std::string::npos)
        << error;
  }
  {
    SafetensorsWriter w; // scale of the wrong shape
    w.add("x", StDType::kU8, {2, 16}, packed.data(), 32);
    w.add("x_scale", StDType::kU8, {1, 2}, scales.data(), 2);
    auto l = loaderOf({&w});
    std::string error;
    load(*l, spec("x", {2, 32}), &error);
    EXPECT_NE(error.find("scale tensor 'x_scale' in 'shard0' has shape [1, 2], "
                         "expected [2, 1]"),
              std::string::npos)
        << error;
  }
  {
    SafetensorsWriter w; // scale of the wrong dtype
    std::vector<float> f(2, 1.0f);
    w.add("x", StDType::kU8, {2, 16}, packed.data(), 32);
    w.addF32("x_scale", {2, 1}, f);
    auto l = loaderOf({&w});
    std::string error;
    load(*l, spec("x", {2, 32}), &error);
    EXPECT_NE(error.find("has unsupported dtype F32 (expected U8 or F8_E8M0)"),
              std::string::npos)
        << error;
  }
  {
    SafetensorsWriter w; // an E8M0 NaN scale (255)
    std::vector<uint8_t> nan = {127, 255};
    w.add("x", StDType::kU8, {2, 16}, packed.data(), 32);
    w.add("x_scale", StDType::kF8E8M0, {2, 1}, nan.data(), 2);
    auto l = loaderOf({&w});
    std::string error;
    load(*l, spec("x", {2, 32}), &error);
    EXPECT_NE(error.find("scale tensor 'x_scale' in 'shard0' holds the E8M0 NaN "
                         "(255) at row 1, block 0"),
              std::string::npos)
        << error;
  }
  {
    SafetensorsWriter w; // U8 values of the wrong width
    w.add("x", StDType::kU8, {2, 8}, packed.data(), 16);
    w.add("x_scale", StDType::kU8, {2, 1}, scales.data(), 2);
    auto l = loaderOf({&w});
    std::string error;
    load(*l, spec("x", {2, 32}), &error);
    EXPECT_NE(error.find("is U8 (MXFP4 values) with shape [2, 8], expected [2, 16] "
                         "for logical [2, 32]"),
              std::string::npos)
        << error;
  }
}

/// Weights the artifact holds as MXFP4 (f4e2m1 values, f8e8m0 scales) are
/// the checkpoint's bytes, copied as they are, per expert or stacked.
TEST(WeightLoader, Mxfp4HeldAsTheCheckpointBytes) {
  std::mt19937 rng(std::random_device{}());
  // Two experts of [2, 64]: 64 packed bytes each, 4 scale bytes each; every
  // code and scales over the whole finite E8M0 range.
  std::vector<uint8_t> packed(128), scales(8);
  for (uint8_t &b : packed)
    b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < scales.size(); ++i)
    scales[i] = static_cast<uint8_t>(i * 254 / 7);
  SafetensorsWriter w;
  for (int e = 0; e < 2; ++e) {
    const std::string base = "m.experts." + std::to_string(e) + ".w1.weight";
    w.add(base + "_packed", StDType::kU8, {2, 32}, packed.data() + 64 * e, 64);
    w.add(base + "_scale", StDType::kF8E8M0, {2, 2}, scales.data() + 4 * e, 4);
  }
  auto l = loaderOf({&w});
  WeightSpec values{"m.experts.{e}.w1.weight", {}, {2, 2, 64}, DType::kF4E2M1, "v"};
  WeightSpec scaleSpec{"m.experts.{e}.w1.weight_scale", {}, {2, 2, 2},
                       DType::kF8E8M0, "s"};
  std::vector<uint8_t> gotValues(128, 0xAA), gotScales(8, 0xAA);
  Status s = l->load(values, gotValues.data(), gotValues.size());
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(gotValues, packed);
  s = l->load(scaleSpec, gotScales.data(), gotScales.size());
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(gotScales, scales);
  // The destination is the packed size: half a byte a value.
  EXPECT_NE(l->load(values, gotValues.data(), 256).message().find(
                "destination holds 256 bytes, f4e2m1 [2, 2, 64] needs 128"),
            std::string::npos);

  // A dense checkpoint for an MXFP4 artifact is refused, saying why.
  SafetensorsWriter dense;
  std::vector<float> f(128, 1.0f);
  dense.addF32("x.weight", {2, 64}, f);
  auto ld = loaderOf({&dense});
  WeightSpec x{"x.weight", {}, {2, 64}, DType::kF4E2M1, "x"};
  std::vector<uint8_t> out(64);
  std::string error = ld->load(x, out.data(), out.size()).message();
  EXPECT_NE(error.find("the artifact holds this weight as MXFP4 and needs its "
                       "packed U8 values [2, 32]"),
            std::string::npos)
      << error;

  // The E8M0 NaN byte is refused with the tensor, row and block named.
  SafetensorsWriter nan;
  std::vector<uint8_t> bad = {127, 127, 255, 127};
  nan.add("x.weight_scale", StDType::kU8, {2, 2}, bad.data(), 4);
  auto ln = loaderOf({&nan});
  WeightSpec xs{"x.weight_scale", {}, {2, 2}, DType::kF8E8M0, "xs"};
  std::vector<uint8_t> sOut(4);
  error = ln->load(xs, sOut.data(), sOut.size()).message();
  EXPECT_NE(error.find("tensor 'x.weight_scale' in 'shard0' holds the E8M0 NaN "
                       "(255) at row 1, block 0"),
            std::string::npos)
      << error;
}

TEST(WeightLoader, DuplicateTensorAcrossFilesIsAnError) {
  SafetensorsWriter a, b;
  a.addF32("x", {1}, iota(1));
  b.addF32("x", {1}, iota(1));
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(fileOf(a, "one"));
  files.push_back(fileOf(b, "two"));
  auto l = WeightLoader::fromFiles(std::move(files));
  ASSERT_FALSE(l.isOk());
  EXPECT_EQ(l.status().message(), "tensor 'x' is in both 'one' and 'two'");
}

TEST(WeightLoader, DestinationSizeIsChecked) {
  SafetensorsWriter w;
  w.addF32("x", {4}, iota(4));
  auto l = loaderOf({&w});
  std::vector<float> out(3);
  Status s = l->load(spec("x", {4}), out.data(), 12);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("destination holds 12 bytes"), std::string::npos);
}

TEST(WeightLoader, OpenNamesTheBadFile) {
  auto l = WeightLoader::open({"/nonexistent.safetensors"});
  ASSERT_FALSE(l.isOk());
  EXPECT_NE(l.status().message().find("/nonexistent.safetensors"), std::string::npos);
}

// A NaN or infinity in a weight makes every logit NaN: refused with the
// tensor, the kind and the element named, in each dense storage type and
// along both the copying and the converting paths; allowed on request.
TEST(WeightLoader, NonFiniteValuesAreNamedUnlessAllowed) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const float bad[] = {std::nanf(""), INFINITY, -INFINITY};
  const char *badName[] = {"NaN", "+inf", "-inf"};
  for (int kind = 0; kind < 3; ++kind)
    for (StDType stored : {StDType::kF32, StDType::kBF16, StDType::kF16})
      for (DType compute : {DType::kF32, DType::kBF16}) {
        std::vector<float> values(6 * 7);
        for (float &v : values)
          v = dist(rng);
        const size_t at = std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng);
        values[at] = bad[kind];
        SafetensorsWriter w;
        std::vector<uint16_t> half;
        for (float f : values)
          half.push_back(stored == StDType::kBF16 ? f32ToBf16(f) : f32ToF16(f));
        if (stored == StDType::kF32)
          w.addF32("w", {6, 7}, values);
        else
          w.add("w", stored, {6, 7}, half.data(), half.size() * 2);
        auto l = loaderOf({&w});
        WeightSpec s = spec("w", {6, 7});
        s.dtype = compute;
        std::vector<uint8_t> out(values.size() * dtypeSize(compute));
        Status st = l->load(s, out.data(), out.size());
        SCOPED_TRACE(std::string(stDTypeName(stored)) + " -> " +
                     (compute == DType::kF32 ? "f32" : "bf16") + ", " + badName[kind]);
        ASSERT_FALSE(st.isOk());
        const std::string expected = "tensor 'w' in 'shard0' holds " +
                                     std::string(badName[kind]) + " at element " +
                                     std::to_string(at) + " (row " +
                                     std::to_string(at / 7) + ", column " +
                                     std::to_string(at % 7) + ")";
        EXPECT_NE(st.message().find(expected), std::string::npos) << st.message();
        l->setAllowNonFinite(true);
        EXPECT_TRUE(l->load(s, out.data(), out.size()).isOk());
      }
}

// A file truncated after it was opened and mapped: the pages past its new
// end raise SIGBUS when read; the load reports the tensor and the file
// instead (and a later tensor still in the file loads).
TEST(WeightLoader, FileTruncatedAfterOpeningIsAnError) {
  std::vector<float> big = iota(1 << 16), small = iota(8);
  SafetensorsWriter w;
  w.addF32("first", {8}, small);
  w.addF32("second", {1 << 16}, big);
  char path[] = "/tmp/kimi-truncated-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_TRUE(w.write(path).isOk());
  auto l = WeightLoader::open({path});
  ASSERT_TRUE(l.isOk()) << l.status().message();
  // Keep the header and the first tensor (within the first page).
  ASSERT_EQ(truncate(path, 4096), 0);
  EXPECT_EQ(load(*l.value(), spec("first", {8})), small);
  std::string error;
  load(*l.value(), spec("second", {1 << 16}), &error);
  unlink(path);
  EXPECT_NE(error.find("weight 'second': tensor 'second' in '" + std::string(path) +
                       "' could not be read: the file is shorter than when it "
                       "was opened"),
            std::string::npos)
      << error;
}

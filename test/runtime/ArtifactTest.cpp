//===- ArtifactTest.cpp - Artifact writer, reader and verification -------===//
//
// Also built with -fsanitize=address (kimi-runtime-asan-tests): the
// truncation and byte-flip loops must end in clean errors, never in a crash
// or an out-of-bounds read.
//
//===----------------------------------------------------------------------===//

#include "runtime/artifact/checksum.h"
#include "runtime/artifact/reader.h"
#include "runtime/artifact/validate.h"
#include "runtime/artifact/writer.h"
#include "TestFiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <unistd.h>

using namespace kimi::rt;

namespace {

/// A small but complete artifact (two layers, a state, a cache, experts).
ArtifactSpec sampleSpec() {
  ArtifactWriter w;
  w.model() = {"kimi_k3", 1000, 64, 2, "KM", 4096, R"({"model_type": "kimi_k3"})"};
  w.target() = {TargetKind::kCpu, 1};
  w.spec().compiler = "kimi-compile test";
  std::vector<uint8_t> elf = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  elf.resize(300, 0xab);
  uint32_t so = w.addKernel(KernelKind::kCpuSharedObject, "model.so", elf);
  TensorSpec state{"layers.0.kda_state", TensorRole::kState, DType::kF32, {1, 2, 16, 16}};
  TensorSpec conv{"layers.0.q_conv_state", TensorRole::kState, DType::kF32, {1, 64, 3}};
  TensorSpec cache{"layers.1.mla_cache", TensorRole::kCache, DType::kF32, {1, -1, 40}};
  w.addEntry({"prefill",
              "kimi_entry_prefill",
              so,
              {{"tokens", TensorRole::kTokens, DType::kI32, {1, -1}}},
              {{"logits", TensorRole::kLogits, DType::kF32, {1, -1, 1000}}, state, conv,
               cache}});
  w.addEntry({"decode",
              "kimi_entry_decode",
              so,
              {{"tokens", TensorRole::kTokens, DType::kI32, {1, 1}}, state, conv, cache},
              {{"logits", TensorRole::kLogits, DType::kF32, {1, 1, 1000}}, state, conv,
               cache}});
  w.addWeight({"model.embed_tokens.weight", {}, {1000, 64}, DType::kF32, "kimi_w_0"});
  w.addWeight({"model.norm.weight", {}, {64}, DType::kF32, "kimi_w_1"});
  w.addWeight({"model.layers.1.mlp.experts.{e}.gate_proj.weight",
               {"model.layers.1.block_sparse_moe.experts.{e}.w1.weight"},
               {8, 32, 64},
               DType::kF32,
               "kimi_w_2"});
  return w.spec();
}

std::vector<uint8_t> sampleBytes() {
  ArtifactWriter w(sampleSpec());
  auto bytes = w.finish();
  EXPECT_TRUE(bytes.isOk()) << bytes.status().message();
  return bytes.value();
}

std::string readError(const std::vector<uint8_t> &bytes) {
  auto spec = ArtifactReader::readBytes(bytes.data(), bytes.size());
  return spec.isOk() ? "" : spec.status().message();
}

void expectSameSpecs(const std::vector<TensorSpec> &a, const std::vector<TensorSpec> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].role, b[i].role);
    EXPECT_EQ(a[i].dtype, b[i].dtype);
    EXPECT_EQ(a[i].shape, b[i].shape);
  }
}

} // namespace

TEST(Artifact, BatchedEntriesValidate) {
  // Every tensor of both entries leads with the batch B = 4 (a model
  // compiled with --batch 4, driven by direct entry calls).
  ArtifactSpec in = sampleSpec();
  for (EntrySpec &e : in.entries)
    for (auto *specs : {&e.inputs, &e.outputs})
      for (TensorSpec &t : *specs)
        t.shape[0] = 4;
  ArtifactWriter w(std::move(in));
  auto bytes = w.finish();
  ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
  auto read = ArtifactReader::readBytes(bytes->data(), bytes->size());
  ASSERT_TRUE(read.isOk()) << read.status().message();
  EXPECT_EQ(read.value().entries[1].inputs[0].shape[0], 4);
}

TEST(Artifact, GridAndDataParallelRoundTrip) {
  // A 2 x 4 grid whose outer axis carries two data-parallel groups.
  ArtifactSpec in = sampleSpec();
  in.target.numRanks = 8;
  in.target.gridShape = {2, 4};
  in.target.dataParallel = 2;
  std::vector<uint8_t> bytes = serializeArtifact(in);
  auto read = ArtifactReader::readBytes(bytes.data(), bytes.size());
  ASSERT_TRUE(read.isOk()) << read.status().message();
  EXPECT_EQ(read.value().target.gridShape, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(read.value().target.grid(), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(read.value().target.dataParallel, 2);
  EXPECT_EQ(read.value().target.dataParallelGroup(3), 0);
  EXPECT_EQ(read.value().target.dataParallelGroup(4), 1);
  // Without a grid shape the grid is one axis of num_ranks.
  EXPECT_EQ(sampleSpec().target.grid(), (std::vector<int32_t>{1}));
}

TEST(Artifact, CacheLengthInputValidates) {
  ArtifactSpec spec = sampleSpec();
  spec.entries[1].inputs.push_back(
      {"cache_length", TensorRole::kCacheLength, DType::kI32, {1}});
  auto bytes = ArtifactWriter(spec).finish();
  ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
  auto back = ArtifactReader::readBytes(bytes.value().data(), bytes.value().size());
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back.value().entries[1].inputs.back().role, TensorRole::kCacheLength);
  EXPECT_STREQ(roleName(TensorRole::kCacheLength), "cache_length");
}

TEST(Artifact, RoundTrip) {
  const ArtifactSpec in = sampleSpec();
  std::vector<uint8_t> bytes = sampleBytes();
  EXPECT_EQ(std::string(bytes.begin() + 8, bytes.begin() + 12), "KIMI");
  auto read = ArtifactReader::readBytes(bytes.data(), bytes.size());
  ASSERT_TRUE(read.isOk()) << read.status().message();
  const ArtifactSpec &out = read.value();
  EXPECT_EQ(out.formatVersion, kArtifactFormatVersion);
  EXPECT_EQ(out.compiler, "kimi-compile test");
  EXPECT_EQ(out.model.configDigest,
            contentDigest(in.model.configJson.data(), in.model.configJson.size()));
  EXPECT_EQ(out.model.modelType, "kimi_k3");
  EXPECT_EQ(out.model.vocabSize, 1000);
  EXPECT_EQ(out.model.hiddenSize, 64);
  EXPECT_EQ(out.model.numLayers, 2);
  EXPECT_EQ(out.model.layerKinds, "KM");
  EXPECT_EQ(out.model.maxPositions, 4096);
  EXPECT_EQ(out.model.configJson, in.model.configJson);
  EXPECT_EQ(out.target.kind, TargetKind::kCpu);
  EXPECT_EQ(out.target.name(), "cpu");
  EXPECT_EQ(out.target.numRanks, 1);
  ASSERT_EQ(out.kernels.size(), 1u);
  EXPECT_EQ(out.kernels[0].name, "model.so");
  EXPECT_EQ(out.kernels[0].kind, KernelKind::kCpuSharedObject);
  EXPECT_EQ(out.kernels[0].image, in.kernels[0].image);
  EXPECT_FALSE(out.kernels[0].waitsGridDependencies); // absent: plain launches
  ASSERT_EQ(out.entries.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out.entries[i].name, in.entries[i].name);
    EXPECT_EQ(out.entries[i].symbol, in.entries[i].symbol);
    EXPECT_EQ(out.entries[i].kernel, 0u);
    expectSameSpecs(out.entries[i].inputs, in.entries[i].inputs);
    expectSameSpecs(out.entries[i].outputs, in.entries[i].outputs);
  }
  ASSERT_EQ(out.weights.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out.weights[i].name, in.weights[i].name);
    EXPECT_EQ(out.weights[i].aliases, in.weights[i].aliases);
    EXPECT_EQ(out.weights[i].shape, in.weights[i].shape);
    EXPECT_EQ(out.weights[i].dtype, DType::kF32);
    EXPECT_EQ(out.weights[i].symbol, in.weights[i].symbol);
  }
  const SessionMemory session = sessionMemory(out);
  EXPECT_EQ(session.stateBytes, (2 * 16 * 16 + 64 * 3) * 4);
  EXPECT_EQ(session.cacheBytesPerToken, 40 * 4);
}

TEST(Artifact, GridDependencyWaitsRoundTrip) {
  // The runtime launches a kernel with programmatic dependent launch only
  // when its image says every kernel waits: the flag must survive.
  ArtifactSpec in = sampleSpec();
  in.kernels[0].waitsGridDependencies = true;
  ArtifactWriter writer(in);
  auto bytes = writer.finish();
  ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
  auto read = ArtifactReader::readBytes(bytes.value().data(), bytes.value().size());
  ASSERT_TRUE(read.isOk()) << read.status().message();
  ASSERT_EQ(read.value().kernels.size(), 1u);
  EXPECT_TRUE(read.value().kernels[0].waitsGridDependencies);
}

TEST(Artifact, FileRoundTripAndIoErrors) {
  std::string path = ::testing::TempDir() + "/sample.kimi";
  ASSERT_TRUE(ArtifactWriter(sampleSpec()).writeFile(path).isOk());
  auto read = ArtifactReader::readFile(path);
  ASSERT_TRUE(read.isOk()) << read.status().message();
  EXPECT_EQ(read->weights.size(), 3u);
  ::unlink(path.c_str());

  auto missing = ArtifactReader::readFile("/nonexistent/model.kimi");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kIo);
  EXPECT_NE(missing.status().message().find("cannot open artifact '/nonexistent/model.kimi'"),
            std::string::npos);
}

TEST(Artifact, FifoIsRefusedWithoutWaiting) {
  kimi::test::ScopedFifo fifo("fifo.kimi");
  ASSERT_TRUE(fifo.made());
  // Without a writer, a blocking open() would wait here forever.
  auto read = ArtifactReader::readFile(fifo.path());
  ASSERT_FALSE(read.isOk());
  EXPECT_NE(read.status().message().find("is not a regular file"), std::string::npos)
      << read.status().message();
}

TEST(Artifact, FramingErrors) {
  std::vector<uint8_t> bytes = sampleBytes();
  EXPECT_EQ(readError({}), "artifact truncated: 0 bytes, shorter than the 12-byte header");
  std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + 1234);
  EXPECT_EQ(readError(cut), "artifact truncated: 1234 of " +
                                std::to_string(bytes.size()) + " bytes");
  std::vector<uint8_t> renamed = bytes;
  renamed[8] = 'X';
  EXPECT_EQ(readError(renamed), "not a kimi artifact: file identifier is 'XIMI', "
                                "expected 'KIMI'");
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_NE(readError(longer).find("1 unexpected bytes after"), std::string::npos);
}

struct SemanticCase {
  const char *what;
  std::function<void(ArtifactSpec &)> mutate;
  const char *message;
};

TEST(Artifact, SemanticChecksNameWhatAndWhere) {
  std::vector<SemanticCase> cases = {
      {"version", [](ArtifactSpec &a) { a.formatVersion = 1; },
       "unsupported format_version 1 (this runtime reads version 3)"},
      {"no kernels", [](ArtifactSpec &a) { a.kernels.clear(); }, "artifact has no kernels"},
      {"empty image", [](ArtifactSpec &a) { a.kernels[0].image.clear(); },
       "kernel 0 'model.so': empty image"},
      {"kernel kind", [](ArtifactSpec &a) { a.kernels[0].kind = static_cast<KernelKind>(7); },
       "kernel 0 'model.so': invalid kind 7"},
      {"ptx on cpu", [](ArtifactSpec &a) { a.kernels[0].kind = KernelKind::kPtx; },
       "kind ptx on target 'cpu'"},
      {"kernel index", [](ArtifactSpec &a) { a.entries[1].kernel = 3; },
       "entry 1 'decode': kernel index 3 out of range (1 kernels)"},
      {"empty symbol", [](ArtifactSpec &a) { a.entries[0].symbol.clear(); },
       "entry 0 'prefill': empty symbol"},
      {"no decode", [](ArtifactSpec &a) { a.entries.pop_back(); },
       "artifact has no 'decode' entry"},
      {"vocab", [](ArtifactSpec &a) { a.model.vocabSize = 0; }, "model: vocab_size 0"},
      {"layer kinds", [](ArtifactSpec &a) { a.model.layerKinds = "KX"; },
       "model: layer_kinds letter 1 is 'X'"},
      {"layer count", [](ArtifactSpec &a) { a.model.numLayers = 3; },
       "model: layer_kinds has 2 letters for 3 layers"},
      {"logits vocab", [](ArtifactSpec &a) { a.entries[0].outputs[0].shape = {1, -1, 999}; },
       "entry 0 'prefill': output 0 'logits': logits must end in the vocab size 1000"},
      {"tokens dtype", [](ArtifactSpec &a) { a.entries[0].inputs[0].dtype = DType::kF32; },
       "entry 0 'prefill': input 0 'tokens': tokens must be i32, got f32"},
      {"dtype enum", [](ArtifactSpec &a) { a.entries[0].outputs[1].dtype = static_cast<DType>(42); },
       "output 1 'layers.0.kda_state': invalid or sub-byte dtype dtype(42)"},
      {"role enum", [](ArtifactSpec &a) { a.entries[0].outputs[1].role = static_cast<TensorRole>(9); },
       "output 1 'layers.0.kda_state': invalid role 9"},
      {"zero dim", [](ArtifactSpec &a) { a.entries[0].outputs[2].shape[1] = 0; },
       "output 2 'layers.0.q_conv_state': dimension 1 is 0"},
      {"dynamic state", [](ArtifactSpec &a) { a.entries[0].outputs[2].shape[1] = -1; },
       "state must have a static shape"},
      {"cache without token dim", [](ArtifactSpec &a) { a.entries[0].outputs[3].shape = {1, 4, 40}; },
       "cache must have exactly one dynamic (token) dimension"},
      {"decode input not from prefill",
       [](ArtifactSpec &a) { a.entries[1].inputs[1].name = "stray"; },
       "entry 'decode': input 1 'stray': state is not an output of 'prefill'"},
      {"decode input shape",
       [](ArtifactSpec &a) { a.entries[1].inputs[2].shape = {1, 64, 4}; },
       "entry 'decode': input 2 'layers.0.q_conv_state': f32 [1, 64, 4] differs from the "
       "'prefill' output f32 [1, 64, 3]"},
      {"state not returned", [](ArtifactSpec &a) { a.entries[1].outputs.pop_back(); },
       "entry 'decode': input 'layers.1.mla_cache' (cache) is not returned"},
      {"duplicate output",
       [](ArtifactSpec &a) { a.entries[0].outputs.push_back(a.entries[0].outputs[1]); },
       "entry 0 'prefill': output 4 'layers.0.kda_state': duplicate output name"},
      {"two logits",
       [](ArtifactSpec &a) {
         a.entries[0].outputs.push_back({"more", TensorRole::kLogits, DType::kF32, {1, -1, 1000}});
       },
       "entry 0 'prefill': needs exactly one logits output, has 2"},
      {"weight empty shape", [](ArtifactSpec &a) { a.weights[1].shape.clear(); },
       "weight 1 'model.norm.weight': empty shape"},
      {"weight negative dim", [](ArtifactSpec &a) { a.weights[0].shape[1] = -64; },
       "weight 0 'model.embed_tokens.weight': dimension 1 is -64 in shape [1000, -64]"},
      {"weight empty symbol", [](ArtifactSpec &a) { a.weights[2].symbol.clear(); },
       "weight 2 'model.layers.1.mlp.experts.{e}.gate_proj.weight': empty symbol"},
      {"weight duplicate symbol", [](ArtifactSpec &a) { a.weights[2].symbol = "kimi_w_0"; },
       "symbol 'kimi_w_0' is used by another weight"},
      {"weight duplicate name", [](ArtifactSpec &a) { a.weights[1].name = a.weights[0].name; },
       "weight 1 'model.embed_tokens.weight': duplicate weight name"},
      {"weight dtype", [](ArtifactSpec &a) { a.weights[0].dtype = DType::kI32; },
       "stored dtype i32 is not f32, bf16, f16, f4e2m1 or f8e8m0"},
      {"weight huge", [](ArtifactSpec &a) { a.weights[0].shape = {1 << 30, 1 << 30, 1 << 30}; },
       "is too large"},
      {"expert rank", [](ArtifactSpec &a) { a.weights[2].shape = {8}; },
       "a stack of experts ({e}) needs rank >= 2"},
      {"no target kind", [](ArtifactSpec &a) { a.target.kind = TargetKind::kInvalid; },
       "target: invalid kind 0"},
      {"unknown target kind", [](ArtifactSpec &a) { a.target.kind = static_cast<TargetKind>(9); },
       "target: invalid kind 9"},
      {"ranks", [](ArtifactSpec &a) { a.target.numRanks = 0; },
       "target: num_ranks 0 must be >= 1"},
      {"grid product", [](ArtifactSpec &a) { a.target.gridShape = {2, 2}; },
       "target: grid_shape [2, 2] does not describe num_ranks 1"},
      {"grid axis", [](ArtifactSpec &a) { a.target.gridShape = {1, 0}; },
       "target: grid_shape [1, 0] has an axis < 1"},
      {"grid axes", [](ArtifactSpec &a) { a.target.gridShape = {1, 1, 1, 1, 1}; },
       "target: grid_shape [1, 1, 1, 1, 1] does not describe num_ranks 1 (at "
       "most 4 axes)"},
      {"data parallel", [](ArtifactSpec &a) { a.target.dataParallel = 2; },
       "target: data_parallel 2 does not divide num_ranks 1"},
      {"batch", [](ArtifactSpec &a) { a.entries[1].inputs[1].shape[0] = 2; },
       "entry 1 'decode': input 1 'layers.0.kda_state': state [2, 2, 16, 16] "
       "does not lead with the batch 1 of the tokens"},
      {"cache batch", [](ArtifactSpec &a) { a.entries[1].inputs[3].shape = {-1, 1, 40}; },
       "cache must have shape [B, L, ...] with a static batch B and the "
       "dynamic length L, got [-1, 1, 40]"},
      {"cache_length dtype",
       [](ArtifactSpec &a) {
         a.entries[1].inputs.push_back({"cache_length", TensorRole::kCacheLength, DType::kI64, {1}});
       },
       "entry 1 'decode': input 4 'cache_length': cache_length must be i32, got i64"},
      {"cache_length shape",
       [](ArtifactSpec &a) {
         a.entries[1].inputs.push_back({"cache_length", TensorRole::kCacheLength, DType::kI32, {1, 1}});
       },
       "cache_length must have shape [B] with a static batch B, got [1, 1]"},
      {"cache_length batch",
       [](ArtifactSpec &a) {
         a.entries[1].inputs.push_back({"cache_length", TensorRole::kCacheLength, DType::kI32, {2}});
       },
       "input 4 'cache_length': cache_length [2] does not lead with the batch 1"},
      {"cache_length output",
       [](ArtifactSpec &a) {
         a.entries[1].outputs.push_back({"cache_length", TensorRole::kCacheLength, DType::kI32, {1}});
       },
       "output 4 'cache_length': cache_length cannot be an output"},
      {"two cache_lengths",
       [](ArtifactSpec &a) {
         a.entries[1].inputs.push_back({"cache_length", TensorRole::kCacheLength, DType::kI32, {1}});
         a.entries[1].inputs.push_back({"cache_length2", TensorRole::kCacheLength, DType::kI32, {1}});
       },
       "input 5 'cache_length2': a second cache_length input"},
  };
  for (const SemanticCase &c : cases) {
    ArtifactSpec spec = sampleSpec();
    c.mutate(spec);
    std::string error = readError(serializeArtifact(spec));
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.what << ": got \"" << error << "\"";
    // The writer refuses the same spec before producing bytes.
    auto written = ArtifactWriter(spec).finish();
    EXPECT_FALSE(written.isOk()) << c.what;
  }
}

TEST(Artifact, TruncatedAtEveryByteIsACleanError) {
  std::vector<uint8_t> bytes = sampleBytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    std::string error = readError(cut);
    ASSERT_NE(error.find("artifact truncated"), std::string::npos)
        << n << " bytes: " << error;
  }
}

TEST(Artifact, RandomByteFlipsAreAllRefused) {
  const std::vector<uint8_t> original = sampleBytes();
  std::mt19937_64 rng(1129);
  int rejected = 0, located = 0;
  for (int iter = 0; iter < 10000; ++iter) {
    std::vector<uint8_t> bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Spare the 12-byte frame most of the time so the verifier gets to work.
      size_t at = (rng() % 8) ? 12 + rng() % (bytes.size() - 12) : rng() % bytes.size();
      if (rng() % 2)
        bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      else
        bytes[at] = static_cast<uint8_t>(rng());
    }
    if (bytes == original)
      continue; // the random bytes happened to be the ones there
    auto spec = ArtifactReader::readBytes(bytes.data(), bytes.size());
    // The checksums refuse every changed file.
    ASSERT_FALSE(spec.isOk()) << "iteration " << iter << ": changed bytes accepted";
    ++rejected;
    const std::string &m = spec.status().message();
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArtifact) << m;
    if (m.find("FlatBuffers verification failed in ") != std::string::npos ||
        m.find("does not match its checksum") != std::string::npos)
      ++located;
  }
  EXPECT_GT(rejected, 9000);
  EXPECT_GT(located, 0); // corruption is reported with its section
}

TEST(Artifact, ChecksumsNameTheSectionAtFault) {
  const std::vector<uint8_t> original = sampleBytes();
  auto clean = ArtifactReader::readBytes(original.data(), original.size());
  ASSERT_TRUE(clean.isOk());
  ASSERT_EQ(clean->kernels.size(), 1u);
  EXPECT_NE(clean->kernels[0].checksum, 0u);
  EXPECT_NE(clean->fileDigest, 0u);
  EXPECT_NE(clean->model.configDigest, 0u);
  // A byte of the fake ELF image (0xab filler, found by content).
  std::vector<uint8_t> image = original;
  const uint8_t elf[] = {0x7f, 'E', 'L', 'F'};
  auto it = std::search(image.begin(), image.end(), std::begin(elf), std::end(elf));
  ASSERT_NE(it, image.end());
  it[100] ^= 1;
  EXPECT_NE(readError(image).find("kernel 0 ('model.so') does not match its "
                                  "checksum"),
            std::string::npos)
      << readError(image);
  // The recorded digest itself.
  std::vector<uint8_t> digest = original;
  digest.back() ^= 1;
  EXPECT_NE(readError(digest).find("do not match the file's checksum"),
            std::string::npos)
      << readError(digest);
  std::vector<uint8_t> magic = original;
  magic[magic.size() - 16] = 'X';
  EXPECT_NE(readError(magic).find("checksum trailer does not begin with"),
            std::string::npos);
  // A file written before the trailer existed.
  std::vector<uint8_t> old(original.begin(), original.end() - 16);
  EXPECT_NE(readError(old).find("checksum trailer missing (cut there, or "
                                "written before format 3"),
            std::string::npos)
      << readError(old);
}

TEST(Artifact, UnalignedInputBytes) {
  std::vector<uint8_t> bytes = sampleBytes();
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  auto spec = ArtifactReader::readBytes(shifted.data() + 1, bytes.size());
  EXPECT_TRUE(spec.isOk()) << spec.status().message();
}

//===----------------------------------------------------------------------===//
// GPU kernel libraries: entries made of buffers and launches
//===----------------------------------------------------------------------===//

namespace {

ArtifactSpec kernelLibrarySpec() {
  ArtifactSpec a;
  a.target.kind = TargetKind::kSm90a;
  std::string ptx = ".version 8.0\n.target sm_90a\n.address_size 64\n";
  a.kernels.push_back({"kda_prefill", KernelKind::kPtx,
                       std::vector<uint8_t>(ptx.begin(), ptx.end())});
  a.kernels.push_back({"kda_prefill", KernelKind::kCubin, {0x7f, 'E', 'L', 'F', 2, 1}});
  EntrySpec e;
  e.name = "prefill";
  e.symbol = "prefill";
  e.kernel = 0;
  BufferSpec cu{"cu_seqlens", BufferKind::kConstant, DType::kI32, {2}, {}};
  cu.data = {0, 0, 0, 0, 64, 0, 0, 0};
  e.buffers = {{"q", BufferKind::kInput, DType::kBF16, {1, 64, 2, 128}, {}},
               {"state", BufferKind::kInOut, DType::kF32, {1, 2, 128, 128}, {}},
               {"out", BufferKind::kOutput, DType::kBF16, {1, 64, 2, 128}, {}},
               {"kda.qg", BufferKind::kTemporary, DType::kBF16, {5, 2, 16, 128}, {}},
               cu};
  LaunchSpec prep;
  prep.kernel = 0;
  prep.function = "kda_prep";
  prep.grid = {5, 2, 1};
  prep.block = {64, 1, 1};
  prep.args = {0, 4, 3};
  LaunchSpec recur = prep;
  recur.function = "kda_recur";
  recur.grid = {2, 1, 1};
  recur.block = {256, 1, 1};
  recur.args = {3, 1, 2};
  e.launches = {prep, recur};
  a.entries.push_back(e);
  return a;
}

} // namespace

TEST(KernelLibrary, RoundTripKeepsBuffersAndLaunches) {
  ArtifactSpec spec = kernelLibrarySpec();
  auto bytes = ArtifactWriter(spec).finish();
  ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
  auto back = ArtifactReader::readBytes(bytes->data(), bytes->size());
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_TRUE(back->isKernelLibrary());
  const EntrySpec &e = back->entries[0];
  ASSERT_EQ(e.buffers.size(), spec.entries[0].buffers.size());
  for (size_t i = 0; i < e.buffers.size(); ++i) {
    EXPECT_EQ(e.buffers[i].name, spec.entries[0].buffers[i].name);
    EXPECT_EQ(e.buffers[i].kind, spec.entries[0].buffers[i].kind);
    EXPECT_EQ(e.buffers[i].dtype, spec.entries[0].buffers[i].dtype);
    EXPECT_EQ(e.buffers[i].shape, spec.entries[0].buffers[i].shape);
    EXPECT_EQ(e.buffers[i].data, spec.entries[0].buffers[i].data);
  }
  ASSERT_EQ(e.launches.size(), 2u);
  EXPECT_EQ(e.launches[1].function, "kda_recur");
  EXPECT_EQ(e.launches[1].grid, (std::array<uint32_t, 3>{2, 1, 1}));
  EXPECT_EQ(e.launches[1].block, (std::array<uint32_t, 3>{256, 1, 1}));
  EXPECT_EQ(e.launches[1].args, (std::vector<uint32_t>{3, 1, 2}));
  EXPECT_EQ(e.findBuffer("state"), 1);
  EXPECT_EQ(e.buffers[3].bytes(), size_t(5 * 2 * 16 * 128 * 2));
}

// A buffer's bytes are its stored bytes: what the runtime allocates and what
// a constant's data must hold. MXFP4 values pack two a byte.
TEST(KernelLibrary, BufferBytesAreStoredBytes) {
  BufferSpec b;
  b.shape = {3, 64};
  b.dtype = DType::kF32;
  EXPECT_EQ(b.bytes(), size_t(3 * 64 * 4));
  b.dtype = DType::kBF16;
  EXPECT_EQ(b.bytes(), size_t(3 * 64 * 2));
  b.dtype = DType::kF4E2M1;
  EXPECT_EQ(b.bytes(), size_t(3 * 64 / 2));
  b.shape = {3, 5}; // an odd count rounds up to whole bytes
  EXPECT_EQ(b.bytes(), size_t(8));
  b.shape = {-1, 5};
  EXPECT_EQ(b.bytes(), size_t(0));
}

TEST(KernelLibrary, SemanticChecksNameWhatAndWhere) {
  std::vector<SemanticCase> cases = {
      {"cpu target", [](ArtifactSpec &a) { a.target.kind = TargetKind::kCpu; },
       "target: a kernel library needs a GPU target, got 'cpu'"},
      {"shared object", [](ArtifactSpec &a) { a.kernels[1].kind = KernelKind::kCpuSharedObject; },
       "kernel 1 'kda_prefill': kind cpu_shared_object in a GPU kernel library"},
      {"empty ptx", [](ArtifactSpec &a) { a.kernels[0].image.clear(); },
       "kernel 0 'kda_prefill': empty image"},
      {"no buffers", [](ArtifactSpec &a) { a.entries[0].buffers.clear(); },
       "entry 0 'prefill': a GPU entry without buffers"},
      {"duplicate buffer", [](ArtifactSpec &a) { a.entries[0].buffers[2].name = "q"; },
       "entry 0 'prefill': buffer 2 'q': duplicate buffer name"},
      {"dynamic buffer", [](ArtifactSpec &a) { a.entries[0].buffers[0].shape[1] = -1; },
       "buffer 0 'q': dimension 1 is -1 (GPU buffers are static)"},
      {"buffer kind", [](ArtifactSpec &a) { a.entries[0].buffers[0].kind = static_cast<BufferKind>(9); },
       "buffer 0 'q': invalid kind 9"},
      {"constant size", [](ArtifactSpec &a) { a.entries[0].buffers[4].data.pop_back(); },
       "buffer 4 'cu_seqlens': constant data holds 7 bytes, the shape needs 8"},
      {"data on temporary", [](ArtifactSpec &a) { a.entries[0].buffers[3].data = {1}; },
       "buffer 3 'kda.qg': a temporary buffer carries data"},
      {"launch kernel", [](ArtifactSpec &a) { a.entries[0].launches[0].kernel = 5; },
       "launch 0 'kda_prep': kernel index 5 out of range (2 kernels)"},
      {"launch grid", [](ArtifactSpec &a) { a.entries[0].launches[1].grid[2] = 0; },
       "launch 1 'kda_recur': grid and block need 3 positive dimensions"},
      {"launch block", [](ArtifactSpec &a) { a.entries[0].launches[1].block = {64, 32, 1}; },
       "launch 1 'kda_recur': block of 2048 threads exceeds 1024"},
      {"launch arg", [](ArtifactSpec &a) { a.entries[0].launches[1].args[2] = 5; },
       "launch 1 'kda_recur': argument 2 names buffer 5 of 5"},
      {"no function", [](ArtifactSpec &a) { a.entries[0].launches[0].function.clear(); },
       "launch 0 '': empty function name"},
      {"weights", [](ArtifactSpec &a) { a.weights.push_back({"w", {}, {4}, DType::kF32, "s"}); },
       "a GPU kernel library carries no weights"},
  };
  for (const SemanticCase &c : cases) {
    ArtifactSpec spec = kernelLibrarySpec();
    c.mutate(spec);
    std::string error = readError(serializeArtifact(spec));
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.what << ": got \"" << error << "\"";
    EXPECT_FALSE(ArtifactWriter(spec).finish().isOk()) << c.what;
  }
}

TEST(KernelLibrary, TruncationsAndByteFlipsAreCleanErrors) {
  auto bytes = ArtifactWriter(kernelLibrarySpec()).finish();
  ASSERT_TRUE(bytes.isOk());
  for (size_t n = 0; n < bytes->size(); ++n) {
    std::vector<uint8_t> cut(bytes->begin(), bytes->begin() + n);
    ASSERT_NE(readError(cut).find("artifact truncated"), std::string::npos) << n;
  }
  std::mt19937_64 rng(2911);
  int rejected = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    std::vector<uint8_t> flipped = *bytes;
    for (int f = 0; f < 1 + static_cast<int>(rng() % 4); ++f)
      flipped[12 + rng() % (flipped.size() - 12)] ^= static_cast<uint8_t>(1u << (rng() % 8));
    if (flipped == *bytes)
      continue; // two flips of one bit
    auto spec = ArtifactReader::readBytes(flipped.data(), flipped.size());
    ASSERT_FALSE(spec.isOk()) << "iteration " << iter << ": changed bytes accepted";
    ++rejected;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArtifact);
  }
  EXPECT_GT(rejected, 900);
}

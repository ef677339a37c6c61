//===- GpuKernelTest.cpp - generated GPU kernels vs the float64 reference -===//
//
// The artifacts are compiled at build time from test/gpu/kda/*.mlir by
// `kimi-compile --target sm_90a`. On a machine with an NVIDIA GPU each entry
// runs through the runtime's GpuEntry on fresh random inputs (outputs
// poisoned with NaN first) and its outputs and final states are compared
// with the float64 recurrence of test/reference (relative L2 error, bf16
// I/O bound 1e-2). Without a GPU those tests skip (KIMI_REQUIRE_GPU=1 makes
// that a failure); the artifact checks run everywhere.
//
//===----------------------------------------------------------------------===//

#include "bench/kda/KdaInputs.h"
#include "runtime/artifact/reader.h"
#include "runtime/cuda/gpu_entry.h"
#include "test/reference/ReferenceOps.h"
#include "test/runtime/TestGpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>

using namespace kimi;
using namespace kimi::rt;

namespace {

enum class Gate { LowerBound, Softplus, Direct };

struct KdaCase {
  const char *entry;
  Gate gate;
  std::vector<int32_t> cuSeqlens; // varlen cases
  double scale = 0.088388347648318; // 1 / sqrt(dk)
};

const KdaCase kCases[] = {
    {"prefill_dense", Gate::LowerBound, {}},
    {"prefill_varlen", Gate::Softplus, {0, 37, 101, 191}},
    {"prefill_split", Gate::LowerBound, {}},
    {"prefill_nostate", Gate::Direct, {}},
    {"decode", Gate::LowerBound, {}},
    {"prefill_bf16state", Gate::LowerBound, {}},
    {"decode_bf16state", Gate::LowerBound, {}},
    // k3-tiny's KDA as the model calls it: 64-wide heads, f32 gate input.
    {"prefill_d64", Gate::LowerBound, {}, 0.125},
    {"decode_d64", Gate::LowerBound, {}, 0.125},
};

// Test names and failure messages show the entry.
void PrintTo(const KdaCase &c, std::ostream *os) { *os << c.entry; }

constexpr double kLowerBound = -5.0;

// The build's artifacts, or KIMI_KDA_ARTIFACT_DIR (the test binary run on
// another machine with the artifacts beside it).
std::string artifactPath(const std::string &entry) {
  const char *dir = std::getenv("KIMI_KDA_ARTIFACT_DIR");
  return std::string(dir ? dir : KIMI_KDA_ARTIFACT_DIR) + "/" + entry + ".kimi";
}

double relErr(const std::vector<double> &got, const std::vector<double> &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

/// The float64 reference of an entry: o and final states.
void reference(const KdaCase &c, std::map<std::string, bench::HostTensor> &in,
               std::vector<double> &o, std::vector<double> &states) {
  const auto &qs = in.at("q").spec.shape;
  const int64_t B = qs[0], T = qs[1], H = qs[2], DK = qs[3];
  const int64_t DV = in.at("v").spec.shape[3];
  std::vector<int64_t> starts;
  if (!c.cuSeqlens.empty())
    starts.assign(c.cuSeqlens.begin(), c.cuSeqlens.end());
  else
    for (int64_t b = 0; b <= B; ++b)
      starts.push_back(b * T);
  const int64_t N = static_cast<int64_t>(starts.size()) - 1;
  const std::vector<double> *init = nullptr;
  if (in.count("initial_state"))
    init = &in.at("initial_state").values;
  o.assign(static_cast<size_t>(B * T * H * DV), 0.0);
  states.assign(static_cast<size_t>(N * H * DK * DV), 0.0);
  const auto &q = in.at("q").values, &k = in.at("k").values, &v = in.at("v").values;
  const auto &beta = in.at("beta").values;
  for (int64_t s = 0; s < N; ++s)
    for (int64_t h = 0; h < H; ++h) {
      int64_t t0 = starts[s], n = starts[s + 1] - starts[s];
      std::vector<double> qq(n * DK), kk(n * DK), gg(n * DK), vv(n * DV), bb(n);
      for (int64_t t = 0; t < n; ++t) {
        int64_t tok = t0 + t;
        bb[t] = beta[tok * H + h];
        for (int64_t d = 0; d < DK; ++d) {
          size_t at = static_cast<size_t>((tok * H + h) * DK + d);
          qq[t * DK + d] = q[at];
          kk[t * DK + d] = k[at];
          if (c.gate == Gate::Direct)
            gg[t * DK + d] = in.at("g").values[at];
          else
            gg[t * DK + d] = reference::ops::kdaGate(
                in.at("z").values[at], in.at("a_log").values[h],
                in.at("dt_bias").values[h * DK + d],
                c.gate == Gate::LowerBound ? std::optional<double>(kLowerBound)
                                           : std::nullopt);
        }
        for (int64_t d = 0; d < DV; ++d)
          vv[t * DV + d] = v[(tok * H + h) * DV + d];
      }
      std::vector<double> S(DK * DV, 0.0);
      size_t base = static_cast<size_t>((s * H + h) * DK * DV);
      if (init)
        std::copy(init->begin() + base, init->begin() + base + DK * DV, S.begin());
      std::vector<double> out = reference::ops::kdaRecurrent(
          qq.data(), kk.data(), vv.data(), gg.data(), bb.data(), n, DK, DV, c.scale, S);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t d = 0; d < DV; ++d)
          o[((t0 + t) * H + h) * DV + d] = out[t * DV + d];
      std::copy(S.begin(), S.end(), states.begin() + base);
    }
}

/// Device memory for every caller buffer of `entry`, bound; inputs uploaded,
/// outputs poisoned with NaN (0xFF bytes in bf16 and f32).
void bindBuffers(GpuEntry &entry, const CudaDevice &dev,
                 std::map<std::string, bench::HostTensor> &inputs,
                 std::map<std::string, DeviceBuffer> &mem) {
  for (const BufferSpec &b : entry.spec().buffers) {
    if (b.kind == BufferKind::kTemporary || b.kind == BufferKind::kConstant)
      continue;
    auto buf = DeviceBuffer::allocate(dev, b.bytes());
    ASSERT_TRUE(buf.isOk()) << buf.status().message();
    if (inputs.count(b.name)) {
      ASSERT_TRUE(buf->upload(inputs[b.name].bytes.data(), b.bytes()).isOk());
    } else {
      std::vector<uint8_t> poison(b.bytes(), 0xFF);
      ASSERT_TRUE(buf->upload(poison.data(), poison.size()).isOk());
    }
    ASSERT_TRUE(entry.bind(b.name, *buf).isOk());
    mem.erase(b.name);
    mem.emplace(b.name, std::move(*buf));
  }
}

class KdaGpu : public ::testing::TestWithParam<KdaCase> {};

TEST_P(KdaGpu, ArtifactIsAValidKernelLibrary) {
  const KdaCase &c = GetParam();
  auto spec = ArtifactReader::readFile(artifactPath(c.entry));
  ASSERT_TRUE(spec.isOk()) << spec.status().message();
  EXPECT_TRUE(spec->isKernelLibrary());
  EXPECT_EQ(spec->target.name, "sm_90a");
  const EntrySpec *e = spec->findEntry(c.entry);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->isGpuEntry());
  bool ptx = false;
  for (const KernelImage &k : spec->kernels)
    if (k.kind == KernelKind::kPtx) {
      std::string text(k.image.begin(), k.image.end());
      ptx = true;
      EXPECT_NE(text.find(".target sm_90a"), std::string::npos);
      if (std::string(c.entry).rfind("decode", 0) != 0) {
        EXPECT_NE(text.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                  std::string::npos);
      }
    }
  EXPECT_TRUE(ptx);
}

TEST_P(KdaGpu, MatchesFloat64Reference) {
  const KdaCase &c = GetParam();
  KIMI_GPU_OR_SKIP(dev);
  auto spec = ArtifactReader::readFile(artifactPath(c.entry));
  ASSERT_TRUE(spec.isOk()) << spec.status().message();
  auto entry = GpuEntry::load(dev, *spec, c.entry);
  ASSERT_TRUE(entry.isOk()) << entry.status().message();
  for (const std::string &src : (*entry)->moduleSources())
    std::printf("[ module   ] %s\n", src.c_str());

  uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  bench::KdaInputOptions opts;
  opts.seed = seed;
  opts.cuSeqlens = c.cuSeqlens;
  auto inputs = bench::makeKdaInputs((*entry)->spec(), opts);

  std::map<std::string, DeviceBuffer> mem;
  ASSERT_NO_FATAL_FAILURE(bindBuffers(**entry, dev, inputs, mem));
  Status run = (*entry)->run();
  ASSERT_TRUE(run.isOk()) << run.message();
  ASSERT_TRUE(dev.synchronize().isOk());

  std::vector<double> wantO, wantS;
  reference(c, inputs, wantO, wantS);
  auto fetch = [&](const std::string &name) {
    const BufferSpec &b = (*entry)->spec().buffers[(*entry)->spec().findBuffer(name)];
    std::vector<uint8_t> bytes(b.bytes());
    EXPECT_TRUE(mem.at(name).download(bytes.data(), bytes.size()).isOk());
    return bench::decodeValues(b.dtype, bytes);
  };
  std::vector<double> gotO = fetch("out");
  std::vector<double> gotS = fetch("final_state");
  for (double x : gotO)
    ASSERT_TRUE(std::isfinite(x)) << "an output element was not written (or is not finite)";
  for (double x : gotS)
    ASSERT_TRUE(std::isfinite(x)) << "a final-state element was not written";
  double eo = relErr(gotO, wantO), es = relErr(gotS, wantS);
  std::printf("[ error    ] %s: out %.3e, final state %.3e\n", c.entry, eo, es);
  EXPECT_LT(eo, 1e-2);
  EXPECT_LT(es, 1e-2);
}

// The entry captured as a CUDA graph (the decode-step mechanism) replays
// bit for bit what direct launches compute.
TEST_P(KdaGpu, GraphReplayMatchesDirectLaunches) {
  const KdaCase &c = GetParam();
  KIMI_GPU_OR_SKIP(dev);
  auto spec = ArtifactReader::readFile(artifactPath(c.entry));
  ASSERT_TRUE(spec.isOk()) << spec.status().message();
  auto entry = GpuEntry::load(dev, *spec, c.entry);
  ASSERT_TRUE(entry.isOk()) << entry.status().message();
  auto stream = CudaStream::create(dev);
  ASSERT_TRUE(stream.isOk()) << stream.status().message();
  bench::KdaInputOptions opts;
  opts.seed = std::random_device{}();
  opts.cuSeqlens = c.cuSeqlens;
  auto inputs = bench::makeKdaInputs((*entry)->spec(), opts);
  std::map<std::string, DeviceBuffer> mem;
  ASSERT_NO_FATAL_FAILURE(bindBuffers(**entry, dev, inputs, mem));
  std::unique_ptr<CudaGraph> graph;
  {
    auto g = CudaGraph::capture(dev, **stream, [&] { return (*entry)->run(stream->get()); });
    ASSERT_TRUE(g.isOk()) << g.status().message();
    graph = std::move(*g);
  }
  // Run from the same inputs (an inout state is reset) and keep the bytes of
  // every written buffer.
  auto runOnce = [&](const std::function<Status()> &enqueue) {
    std::map<std::string, std::vector<uint8_t>> out;
    for (const BufferSpec &b : (*entry)->spec().buffers) {
      if (b.kind == BufferKind::kInput || b.kind == BufferKind::kInOut) {
        EXPECT_TRUE(mem.at(b.name).upload(inputs[b.name].bytes.data(), b.bytes()).isOk());
      }
    }
    EXPECT_TRUE(enqueue().isOk());
    EXPECT_TRUE((*stream)->synchronize().isOk());
    for (const BufferSpec &b : (*entry)->spec().buffers)
      if (b.kind == BufferKind::kOutput || b.kind == BufferKind::kInOut) {
        std::vector<uint8_t> bytes(b.bytes());
        EXPECT_TRUE(mem.at(b.name).download(bytes.data(), bytes.size()).isOk());
        out[b.name] = std::move(bytes);
      }
    return out;
  };
  auto direct = runOnce([&] { return (*entry)->run(stream->get()); });
  auto replay = runOnce([&] { return graph->launch(**stream); });
  ASSERT_EQ(direct.size(), replay.size());
  for (const auto &[name, bytes] : direct)
    EXPECT_TRUE(bytes == replay.at(name)) << name << " differs between graph replay and launches";
}

INSTANTIATE_TEST_SUITE_P(Entries, KdaGpu, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return std::string(info.param.entry); });

} // namespace

//===----------------------------------------------------------------------===//
// AttnRes (+ the following RMSNorm), one fused kernel
//===----------------------------------------------------------------------===//

namespace {

class AttnResGpu : public ::testing::TestWithParam<const char *> {};

TEST_P(AttnResGpu, MatchesFloat64Reference) {
  const std::string name = GetParam();
  KIMI_GPU_OR_SKIP(dev);
  const char *dir = std::getenv("KIMI_ATTNRES_ARTIFACT_DIR");
  auto spec = ArtifactReader::readFile(std::string(dir ? dir : KIMI_ATTNRES_ARTIFACT_DIR) +
                                       "/" + name + ".kimi");
  ASSERT_TRUE(spec.isOk()) << spec.status().message();
  auto entry = GpuEntry::load(dev, *spec, name);
  ASSERT_TRUE(entry.isOk()) << entry.status().message();
  bench::KdaInputOptions opts;
  opts.seed = std::random_device{}();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(opts.seed));
  auto inputs = bench::makeKdaInputs((*entry)->spec(), opts);
  std::map<std::string, DeviceBuffer> mem;
  ASSERT_NO_FATAL_FAILURE(bindBuffers(**entry, dev, inputs, mem));
  ASSERT_TRUE((*entry)->run().isOk());
  ASSERT_TRUE(dev.synchronize().isOk());

  const auto &outSpec = (*entry)->spec().buffers[(*entry)->spec().findBuffer("out")];
  const int64_t D = outSpec.shape.back();
  const int64_t tokens = static_cast<int64_t>(outSpec.bytes() / dtypeSize(outSpec.dtype)) / D;
  std::vector<const std::vector<double> *> sources;
  for (int i = 0; inputs.count("source" + std::to_string(i)); ++i)
    sources.push_back(&inputs.at("source" + std::to_string(i)).values);
  const bool fused = (*entry)->spec().findBuffer("norm_out") >= 0;
  std::vector<double> wantMix, wantNorm;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<const double *> src;
    for (const auto *s : sources)
      src.push_back(s->data() + t * D);
    std::vector<double> mix = reference::ops::attnResMix(
        src, D, inputs.at("norm").values.data(), inputs.at("query").values.data(), 1e-6);
    wantMix.insert(wantMix.end(), mix.begin(), mix.end());
    if (fused) {
      std::vector<double> y = reference::ops::rmsNorm(
          mix.data(), D, inputs.at("norm_weight").values.data(), 1e-5);
      wantNorm.insert(wantNorm.end(), y.begin(), y.end());
    }
  }
  auto fetch = [&](const std::string &b) {
    const BufferSpec &bs = (*entry)->spec().buffers[(*entry)->spec().findBuffer(b)];
    std::vector<uint8_t> bytes(bs.bytes());
    EXPECT_TRUE(mem.at(b).download(bytes.data(), bytes.size()).isOk());
    return bench::decodeValues(bs.dtype, bytes);
  };
  std::vector<double> gotMix = fetch("out");
  for (double x : gotMix)
    ASSERT_TRUE(std::isfinite(x)) << "an output element was not written";
  double eMix = relErr(gotMix, wantMix);
  std::printf("[ error    ] %s: mix %.3e", name.c_str(), eMix);
  EXPECT_LT(eMix, 1e-2);
  if (fused) {
    std::vector<double> gotNorm = fetch("norm_out");
    for (double x : gotNorm)
      ASSERT_TRUE(std::isfinite(x)) << "a normalised element was not written";
    double eNorm = relErr(gotNorm, wantNorm);
    std::printf(", rms_norm %.3e", eNorm);
    EXPECT_LT(eNorm, 1e-2);
  }
  std::printf("\n");
}

INSTANTIATE_TEST_SUITE_P(Entries, AttnResGpu, ::testing::Values("attn_res", "attn_res_norm"),
                         [](const auto &info) { return std::string(info.param); });

} // namespace

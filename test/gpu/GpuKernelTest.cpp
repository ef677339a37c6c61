//===- GpuKernelTest.cpp - generated GPU kernels vs the float64 reference -===//
//
// The artifacts are compiled at build time from test/gpu/{kda,attn_res,moe}/*.mlir by
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
#include "runtime/weights/float_convert.h"
#include "test/reference/ReferenceOps.h"
#include "test/runtime/TestGpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <numeric>
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
  EXPECT_EQ(spec->target.kind, TargetKind::kSm90a);
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

//===----------------------------------------------------------------------===//
// Routed experts (gate_up, then down), dense or MXFP4, one entry each
//===----------------------------------------------------------------------===//

namespace {

/// The e2m1 value of a 4-bit code, from its definition (sign, 2-bit
/// exponent with bias 1, 1-bit mantissa; exponent 0 is subnormal).
double e2m1Value(unsigned code) {
  const unsigned e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, int(e) - 1);
  return (code & 8) ? -mag : mag;
}

/// One table as the entry takes it, with its values in float64.
struct ExpertTable {
  std::vector<uint8_t> codes, scales; // MXFP4
  std::vector<uint8_t> dense;         // bf16
  std::vector<double> values;         // [E, N, K]
};

/// A table of E x N rows of K values. MXFP4: every 32-value block holds all
/// 16 codes (twice, shuffled); scale block b of a row is base(b) + d with d
/// in [-2, 2], where `base` spreads the blocks over [0, 250] when `spread`
/// (else 127 for all), and with `spread` a few blocks of the last column
/// take 253 or 254 with only the codes whose value stays finite in f32
/// there (|v| <= 3 at 253, <= 1.5 at 254). So the scales run from the
/// smallest E8M0 (0, the subnormal 2^-127) to the largest finite (254).
ExpertTable makeTable(std::mt19937_64 &rng, bool mxfp4, int64_t E, int64_t N,
                      int64_t K, bool spread, const std::vector<int> &base) {
  ExpertTable t;
  const int64_t rows = E * N, blocks = K / 32;
  t.values.resize(rows * K);
  std::uniform_int_distribution<int> delta(-2, 2);
  if (!mxfp4) {
    std::normal_distribution<double> normal(0.0, 0.05);
    t.dense.resize(rows * K * 2);
    for (int64_t i = 0; i < rows * K; ++i) {
      uint16_t b = rt::f32ToBf16(static_cast<float>(normal(rng)));
      std::memcpy(t.dense.data() + 2 * i, &b, 2);
      t.values[i] = rt::bf16ToF32(b);
    }
    return t;
  }
  t.codes.assign(rows * K / 2, 0);
  t.scales.resize(rows * blocks);
  std::vector<unsigned> block(32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      int s = std::clamp((spread ? base[b] : 127) + delta(rng), 0, 254);
      std::vector<unsigned> allowed;
      if (spread && b == blocks - 1 && r % 5 == 0)
        s = r % 10 == 0 ? 254 : 253;
      for (unsigned c = 0; c < 16; ++c)
        if (s < 253 || std::fabs(e2m1Value(c)) <= (s == 254 ? 1.5 : 3.0))
          allowed.push_back(c);
      for (int i = 0; i < 32; ++i)
        block[i] = allowed[i % allowed.size()];
      std::shuffle(block.begin(), block.end(), rng);
      t.scales[r * blocks + b] = static_cast<uint8_t>(s);
      const double scale = std::ldexp(1.0, s - 127);
      for (int i = 0; i < 32; ++i) {
        const int64_t k = b * 32 + i, at = r * K + k;
        t.codes[at / 2] |= static_cast<uint8_t>(block[i] << (4 * (k % 2)));
        t.values[at] = e2m1Value(block[i]) * scale;
      }
    }
  return t;
}

bench::HostTensor hostBytes(const BufferSpec &spec, std::vector<uint8_t> bytes) {
  bench::HostTensor h;
  h.spec = spec;
  h.bytes = std::move(bytes);
  return h;
}

struct RoutedExpertsCase {
  const char *entry;
  bool situ; // SiTU (beta 4, linear beta 25) as the entry says, else SiLU
};

class RoutedExpertsGpu : public ::testing::TestWithParam<RoutedExpertsCase> {};

TEST_P(RoutedExpertsGpu, MatchesFloat64Reference) {
  const std::string name = GetParam().entry;
  KIMI_GPU_OR_SKIP(dev);
  const char *dir = std::getenv("KIMI_MOE_ARTIFACT_DIR");
  auto spec = ArtifactReader::readFile(
      std::string(dir ? dir : KIMI_MOE_ARTIFACT_DIR) + "/routed_experts.kimi");
  ASSERT_TRUE(spec.isOk()) << spec.status().message();
  auto entry = GpuEntry::load(dev, *spec, name);
  ASSERT_TRUE(entry.isOk()) << entry.status().message();
  const EntrySpec &es = (*entry)->spec();
  auto bufferSpec = [&](const std::string &b) -> const BufferSpec & {
    int i = es.findBuffer(b);
    EXPECT_GE(i, 0) << "entry " << name << " has no buffer " << b;
    return es.buffers[std::max(i, 0)];
  };
  const bool mxfp4 = es.findBuffer("gate_codes") >= 0;
  const auto &gateShape = bufferSpec(mxfp4 ? "gate_codes" : "gate").shape;
  const int64_t E = gateShape[0], I = gateShape[1];
  const int64_t T = bufferSpec("x").shape[0], W = bufferSpec("x").shape[1];
  const int64_t K = bufferSpec("ids").shape[1];
  const bool situ = GetParam().situ;

  const uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  // Block b of the hidden width has scale base(b) (0 .. 250) in gate and
  // up; x's block b is 2^(127 - base(b) - 6) in size, so every product is
  // of a moderate size and the gate sums stay in SiTU's unsaturated range.
  const int64_t hiddenBlocks = W / 32;
  std::vector<int> base(hiddenBlocks);
  for (int64_t b = 0; b < hiddenBlocks; ++b)
    base[b] = static_cast<int>((250 * b) / std::max<int64_t>(1, hiddenBlocks - 1));
  ExpertTable gate = makeTable(rng, mxfp4, E, I, W, true, base);
  ExpertTable up = makeTable(rng, mxfp4, E, I, W, true, base);
  ExpertTable down = makeTable(rng, mxfp4, E, W, I, false, base);
  std::vector<float> x(T * W), weights(T * K);
  std::vector<int32_t> ids(T * K);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t w = 0; w < W; ++w)
      x[t * W + w] = static_cast<float>(
          uniform(rng) * std::ldexp(1.0, mxfp4 ? 127 - base[w / 32] - 6 : 0));
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t j = 0; j < K; ++j) {
      ids[t * K + j] = order[j];
      weights[t * K + j] = static_cast<float>(0.5 + 0.5 * uniform(rng));
    }
  }
  auto bytesOf = [](const auto &v) {
    std::vector<uint8_t> b(v.size() * sizeof(v[0]));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  std::map<std::string, bench::HostTensor> inputs;
  inputs["x"] = hostBytes(bufferSpec("x"), bytesOf(x));
  inputs["weights"] = hostBytes(bufferSpec("weights"), bytesOf(weights));
  inputs["ids"] = hostBytes(bufferSpec("ids"), bytesOf(ids));
  for (auto [tableName, table] : {std::pair<std::string, ExpertTable *>{"gate", &gate},
                                  {"up", &up}, {"down", &down}}) {
    if (mxfp4) {
      inputs[tableName + "_codes"] = hostBytes(bufferSpec(tableName + "_codes"), table->codes);
      inputs[tableName + "_scales"] = hostBytes(bufferSpec(tableName + "_scales"), table->scales);
    } else {
      inputs[tableName] = hostBytes(bufferSpec(tableName), table->dense);
    }
  }
  std::map<std::string, DeviceBuffer> mem;
  ASSERT_NO_FATAL_FAILURE(bindBuffers(**entry, dev, inputs, mem));
  Status run = (*entry)->run();
  ASSERT_TRUE(run.isOk()) << run.message();
  ASSERT_TRUE(dev.synchronize().isOk());

  // float64: h = act(gate . x, up . x) per slot; out = sum_j w_j down . h.
  std::vector<double> want(T * W, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = ids[t * K + j];
      std::vector<double> h(I);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        const double *gr = &gate.values[(e * I + i) * W], *ur = &up.values[(e * I + i) * W];
        for (int64_t w = 0; w < W; ++w) {
          g += gr[w] * x[t * W + w];
          u += ur[w] * x[t * W + w];
        }
        h[i] = situ ? reference::ops::situ(g, u, 4.0, 25.0)
                    : reference::ops::silu(g) * u;
      }
      for (int64_t d = 0; d < W; ++d) {
        double s = 0;
        const double *dr = &down.values[(e * W + d) * I];
        for (int64_t i = 0; i < I; ++i)
          s += dr[i] * h[i];
        want[t * W + d] += weights[t * K + j] * s;
      }
    }
  std::vector<float> got(T * W);
  ASSERT_TRUE(mem.at("out").download(got.data(), got.size() * 4).isOk());
  std::vector<double> gotD(got.begin(), got.end());
  for (double v : gotD)
    ASSERT_TRUE(std::isfinite(v)) << "an output element was not written (or is not finite)";
  const double err = relErr(gotD, want);
  std::printf("[ error    ] %s: %.3e (%s, %lld tokens, top %lld of %lld)\n", name.c_str(),
              err, mxfp4 ? "MXFP4" : "bf16", (long long)T, (long long)K, (long long)E);
  EXPECT_LT(err, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Entries, RoutedExpertsGpu,
                         ::testing::Values(RoutedExpertsCase{"mxfp4_decode", true},
                                           RoutedExpertsCase{"mxfp4_tokens", false},
                                           RoutedExpertsCase{"bf16_decode", true}),
                         [](const auto &info) { return std::string(info.param.entry); });

} // namespace

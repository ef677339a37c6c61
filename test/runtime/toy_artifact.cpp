//===- toy_artifact.cpp - The toy model's artifact, weights, reference ---===//

#include "toy_artifact.h"
#include "toy_model_config.h"

#include "runtime/artifact/writer.h"
#include "runtime/weights/float_convert.h"
#include "runtime/weights/safetensors_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace kimi::rt;

namespace toy {

namespace {
constexpr int64_t V = TOY_VOCAB, D = TOY_HIDDEN, E = TOY_EXPERTS;

const float kE2M1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

uint8_t lmCode(int64_t v, int64_t d) { return static_cast<uint8_t>((v * 5 + d * 3) % 16); }
int lmScaleExp(int64_t v) { return static_cast<int>(v % 3) - 1; } // 2^-1 .. 2^1
double codeValue(uint8_t c) { return (c & 8 ? -1.0 : 1.0) * kE2M1[c & 7]; }
} // namespace

std::vector<uint8_t> sharedObject() {
  std::ifstream in(KIMI_TOY_MODEL_PATH, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

const Weights &weights() {
  static const Weights w = [] {
    Weights w;
    for (int64_t v = 0; v < V; ++v)
      for (int64_t d = 0; d < D; ++d)
        w.embed.push_back(static_cast<double>((v * 7 + d * 3) % 11 - 5) / 8.0);
    for (int64_t d = 0; d < D; ++d)
      w.decay.push_back(0.5 + static_cast<double>(d % 4) / 8.0);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t d = 0; d < D; ++d)
        w.lmHead.push_back(codeValue(lmCode(v, d)) * std::ldexp(1.0, lmScaleExp(v)));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t d = 0; d < D; ++d)
        w.gate.push_back((1.0 + static_cast<double>(e)) * 0.25 +
                         static_cast<double>(d) / 64.0);
    return w;
  }();
  return w;
}

ArtifactSpec artifact(const std::string &decodeSymbol) {
  ArtifactWriter w;
  w.model() = {"toy", V, D, 2, "KM", 64, "{\"model_type\": \"toy\"}"};
  w.target() = {TargetKind::kCpu, 1};
  uint32_t so = w.addKernel(KernelKind::kCpuSharedObject, "toy_model.so",
                            sharedObject());
  const TensorSpec tokens{"tokens", TensorRole::kTokens, DType::kI32, {1, -1}};
  const TensorSpec state{"layer0.kda_state", TensorRole::kState, DType::kF32, {1, D}};
  const TensorSpec cache{"layer1.mla_cache", TensorRole::kCache, DType::kF32, {1, -1, D}};
  const TensorSpec position{"layer0.position", TensorRole::kState, DType::kF32, {1}};
  w.addEntry({"prefill", "kimi_entry_prefill", so, {tokens},
              {{"logits", TensorRole::kLogits, DType::kF32, {1, -1, V}},
               state, cache, position}});
  w.addEntry({"decode", decodeSymbol, so,
              {{"tokens", TensorRole::kTokens, DType::kI32, {1, 1}}, state, cache,
               position},
              {{"logits", TensorRole::kLogits, DType::kF32, {1, 1, V}}, cache,
               state, position}});
  w.addWeight({"model.embed_tokens.weight", {}, {V, D}, DType::kF32, "kimi_w_0"});
  w.addWeight({"model.layers.0.self_attn.A_log", {}, {D}, DType::kF32, "kimi_w_1"});
  w.addWeight({"lm_head.weight", {}, {V, D}, DType::kF32, "kimi_w_2"});
  w.addWeight({"model.layers.0.mlp.experts.{e}.gate_proj.weight",
               {"model.layers.0.block_sparse_moe.experts.{e}.w1.weight"},
               {E, D},
               DType::kF32,
               "kimi_w_3"});
  return w.spec();
}

Status writeWeights(const std::string &path) {
  const Weights &w = weights();
  SafetensorsWriter st;
  st.addMetadata("format", "pt");
  // Embedding: BF16 under the multimodal prefix.
  std::vector<uint16_t> embed;
  for (double x : w.embed)
    embed.push_back(f32ToBf16(static_cast<float>(x)));
  st.add("language_model.model.embed_tokens.weight", StDType::kBF16, {V, D},
         embed.data(), embed.size() * 2);
  // Decay: F32.
  std::vector<float> decay(w.decay.begin(), w.decay.end());
  st.addF32("model.layers.0.self_attn.A_log", {D}, decay);
  // lm_head: MXFP4 values + E8M0 scales.
  std::vector<uint8_t> packed, scales;
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t d = 0; d < D; d += 2)
      packed.push_back(static_cast<uint8_t>(lmCode(v, d) | (lmCode(v, d + 1) << 4)));
    scales.push_back(static_cast<uint8_t>(127 + lmScaleExp(v)));
  }
  st.add("lm_head.weight", StDType::kU8, {V, D / 2}, packed.data(), packed.size());
  st.add("lm_head.weight_scale", StDType::kF8E8M0, {V, 1}, scales.data(),
         scales.size());
  // Experts: one F16 tensor per expert under the Kimi Linear alias.
  for (int64_t e = 0; e < E; ++e) {
    std::vector<uint16_t> g;
    for (int64_t d = 0; d < D; ++d)
      g.push_back(f32ToF16(static_cast<float>(w.gate[e * D + d])));
    st.add("model.layers.0.block_sparse_moe.experts." + std::to_string(e) +
               ".w1.weight",
           StDType::kF16, {D}, g.data(), g.size() * 2);
  }
  return st.write(path);
}

std::vector<std::vector<double>> referenceLogits(const std::vector<int32_t> &tokens) {
  const Weights &w = weights();
  std::vector<double> s(D, 0.0), sum(D, 0.0);
  std::vector<std::vector<double>> out;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const int64_t x = tokens[p];
    std::vector<double> h(D);
    for (int64_t d = 0; d < D; ++d) {
      const double u = w.embed[x * D + d];
      s[d] = w.decay[d] * s[d] + u;
      sum[d] += u * w.gate[(static_cast<int64_t>(p) % E) * D + d];
      h[d] = s[d] + sum[d] / static_cast<double>(p + 1);
    }
    std::vector<double> logits(V, 0.0);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t d = 0; d < D; ++d)
        logits[v] += w.lmHead[v * D + d] * h[d];
    out.push_back(logits);
  }
  return out;
}

std::vector<int32_t> referenceGreedy(const std::vector<int32_t> &prompt, int steps) {
  std::vector<int32_t> seq = prompt, generated;
  for (int i = 0; i < steps; ++i) {
    std::vector<double> last = referenceLogits(seq).back();
    int32_t best = 0;
    for (int32_t v = 1; v < V; ++v)
      if (last[v] > last[best])
        best = v;
    generated.push_back(best);
    seq.push_back(best);
  }
  return generated;
}

TempDir::TempDir(const std::string &name) {
  const char *base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") +
                        "/kimi-runtime-" + name + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()))
    path_ = buf.data();
}

TempDir::~TempDir() {
  if (path_.empty())
    return;
  if (DIR *d = ::opendir(path_.c_str())) {
    while (struct dirent *e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..")
        ::unlink((path_ + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path_.c_str());
}

} // namespace toy

//===- ReleasedCheckpoint.cpp - checkpoints in the released layouts -------===//

#include "models/checkpoint/ReleasedCheckpoint.h"
#include "runtime/weights/checkpoint.h"
#include "runtime/weights/float_convert.h"
#include "runtime/weights/mxfp4.h"
#include "runtime/weights/safetensors_writer.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include <cmath>
#include <cstring>

using namespace kimi;
using R = WeightRole;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Weights the releases store in f32 (§9); everything else dense is bf16.
bool storedF32(WeightRole role, CheckpointLayout layout) {
  switch (role) {
  case R::KdaALog:
  case R::KdaDtBias:
  case R::RouterBias:
    return true;
  case R::KdaQConv:
  case R::KdaKConv:
  case R::KdaVConv:
  case R::KdaONorm:
    return layout == CheckpointLayout::K3;
  default:
    return false;
  }
}

class TensorList {
public:
  TensorList(const ModelConfig &c) : c(c), prefixed(c.layout == CheckpointLayout::K3) {}

  void add(R role, int64_t layer, std::vector<int64_t> logical,
           std::vector<int64_t> stored = {}) {
    ReleasedTensor t{role, layer, -1, releasedWeightName(role, layer, -1, prefixed),
                     weightName(role, layer), logical,
                     stored.empty() ? logical : stored,
                     storedF32(role, c.layout) ? StoredType::F32 : StoredType::BF16};
    out.push_back(std::move(t));
  }

  /// Routed experts: one tensor per expert (and, MXFP4, two pieces each).
  void addExperts(R role, int64_t layer, int64_t experts, int64_t rows,
                  int64_t width) {
    for (int64_t e = 0; e < experts; ++e) {
      std::string name = releasedWeightName(role, layer, e, prefixed);
      std::vector<int64_t> logical = {experts, rows, width};
      if (!c.quantization.mxfp4Experts) {
        out.push_back({role, layer, e, name, weightName(role, layer), logical,
                       {rows, width}, StoredType::BF16});
        continue;
      }
      out.push_back({role, layer, e, name + "_packed", weightName(role, layer),
                     logical, {rows, width / 2}, StoredType::MXFP4Values});
      out.push_back({role, layer, e, name + "_scale", weightName(role, layer),
                     logical, {rows, width / 32}, StoredType::MXFP4Scales});
    }
  }

  const ModelConfig &c;
  bool prefixed;
  std::vector<ReleasedTensor> out;
};

} // namespace

std::vector<ReleasedTensor> kimi::releasedTensors(const ModelConfig &c) {
  TensorList t(c);
  const int64_t D = c.hidden;
  t.add(R::Embed, -1, {c.vocab, D});
  for (int64_t l = 0; l < c.numLayers; ++l) {
    t.add(R::InputNorm, l, {D});
    t.add(R::PostAttnNorm, l, {D});
    if (c.attnResBlock > 0) {
      // K3 stores layer 0's pre-attention pair although its bank is empty.
      if (l > 0 || c.layout == CheckpointLayout::K3) {
        t.add(R::AttnResNorm, l, {D});
        t.add(R::AttnResProj, l, {1, D});
      }
      t.add(R::MlpResNorm, l, {D});
      t.add(R::MlpResProj, l, {1, D});
    }
    if (c.layers[l] == AttentionKind::Kda) {
      const KdaConfig &k = c.kda;
      const int64_t C = k.numHeads * k.headDim;
      t.add(R::KdaQ, l, {C, D});
      t.add(R::KdaK, l, {C, D});
      t.add(R::KdaV, l, {C, D});
      t.add(R::KdaQConv, l, {C, 1, k.convKernel});
      t.add(R::KdaKConv, l, {C, 1, k.convKernel});
      t.add(R::KdaVConv, l, {C, 1, k.convKernel});
      t.add(R::KdaFA, l, {k.headDim, D});
      t.add(R::KdaFB, l, {C, k.headDim});
      t.add(R::KdaALog, l, {k.numHeads},
            c.layout == CheckpointLayout::K3
                ? std::vector<int64_t>{c.storedALogLength()}
                : std::vector<int64_t>{1, 1, k.numHeads, 1});
      t.add(R::KdaDtBias, l, {C});
      t.add(R::KdaB, l, {k.numHeads, D});
      if (k.fullRankGate) {
        t.add(R::KdaG, l, {C, D});
      } else {
        t.add(R::KdaGA, l, {k.headDim, D});
        t.add(R::KdaGB, l, {C, k.headDim});
      }
      t.add(R::KdaONorm, l, {k.headDim});
      t.add(R::KdaO, l, {D, C});
    } else {
      const MlaConfig &m = c.mla;
      const int64_t qWidth = m.numHeads * (m.nopeDim + m.ropeDim);
      if (m.qLoraRank) {
        t.add(R::MlaQA, l, {m.qLoraRank, D});
        t.add(R::MlaQANorm, l, {m.qLoraRank});
        t.add(R::MlaQB, l, {qWidth, m.qLoraRank});
      } else {
        t.add(R::MlaQ, l, {qWidth, D});
      }
      t.add(R::MlaKvA, l, {m.kvLoraRank + m.ropeDim, D});
      t.add(R::MlaKvANorm, l, {m.kvLoraRank});
      t.add(R::MlaKvB, l, {m.numHeads * (m.nopeDim + m.vDim), m.kvLoraRank});
      if (m.outputGate)
        t.add(R::MlaG, l, {m.numHeads * m.vDim, D});
      t.add(R::MlaO, l, {D, m.numHeads * m.vDim});
    }
    if (!c.isMoeLayer(l)) {
      t.add(R::MlpGate, l, {c.denseIntermediate, D});
      t.add(R::MlpUp, l, {c.denseIntermediate, D});
      t.add(R::MlpDown, l, {D, c.denseIntermediate});
      continue;
    }
    const MoeConfig &m = c.moe;
    const int64_t W = c.expertWidth();
    t.add(R::Router, l, {m.numExperts, D});
    t.add(R::RouterBias, l, {m.numExperts});
    t.addExperts(R::ExpertGate, l, m.numExperts, m.intermediate, W);
    t.addExperts(R::ExpertUp, l, m.numExperts, m.intermediate, W);
    t.addExperts(R::ExpertDown, l, m.numExperts, W, m.intermediate);
    if (m.latent) {
      t.add(R::LatentDown, l, {W, D});
      if (m.latentNorm)
        t.add(R::LatentNorm, l, {W});
      t.add(R::LatentUp, l, {D, W});
    }
    if (m.numShared) {
      const int64_t S = m.numShared * m.intermediate;
      t.add(R::SharedGate, l, {S, D});
      t.add(R::SharedUp, l, {S, D});
      t.add(R::SharedDown, l, {D, S});
    }
  }
  if (c.attnResBlock > 0) {
    t.add(R::OutputResNorm, -1, {D});
    t.add(R::OutputResProj, -1, {1, D});
  }
  t.add(R::FinalNorm, -1, {D});
  if (!c.tieEmbeddings)
    t.add(R::LmHead, -1, {c.vocab, D});
  return std::move(t.out);
}

//===----------------------------------------------------------------------===//
// MXFP4
//===----------------------------------------------------------------------===//

double kimi::e2m1Value(uint8_t c) { return rt::e2m1ToF32(c); }

void kimi::quantizeMxfp4Row(const double *values, int64_t n, uint8_t *packed,
                            uint8_t *scales) {
  rt::quantizeMxfp4Row(values, n, packed, scales);
}

//===----------------------------------------------------------------------===//
// Config text
//===----------------------------------------------------------------------===//

namespace {

void addBoilerplate(llvm::json::Object &o, int64_t vocab) {
  using llvm::json::Value;
  auto def = [&](const char *key, Value v) {
    if (!o.get(key))
      o[key] = std::move(v);
  };
  def("return_dict", true);
  def("output_hidden_states", false);
  def("output_attentions", false);
  def("torchscript", false);
  def("dtype", "bfloat16");
  def("pruned_heads", llvm::json::Object{});
  def("chunk_size_feed_forward", 0);
  def("is_encoder_decoder", false);
  def("is_decoder", false);
  def("cross_attention_hidden_size", nullptr);
  def("add_cross_attention", false);
  def("tie_encoder_decoder", false);
  def("finetuning_task", nullptr);
  def("id2label", llvm::json::Object{{"0", "LABEL_0"}, {"1", "LABEL_1"}});
  def("label2id", llvm::json::Object{{"LABEL_0", 0}, {"LABEL_1", 1}});
  def("task_specific_params", nullptr);
  def("problem_type", nullptr);
  def("tokenizer_class", nullptr);
  def("prefix", nullptr);
  def("sep_token_id", nullptr);
  def("decoder_start_token_id", nullptr);
  def("max_length", 20);
  def("min_length", 0);
  def("do_sample", false);
  def("early_stopping", false);
  def("num_beams", 1);
  def("num_beam_groups", 1);
  def("diversity_penalty", 0.0);
  def("temperature", 1.0);
  def("top_k", 50);
  def("top_p", 1.0);
  def("typical_p", 1.0);
  def("repetition_penalty", 1.0);
  def("length_penalty", 1.0);
  def("no_repeat_ngram_size", 0);
  def("encoder_no_repeat_ngram_size", 0);
  def("bad_words_ids", nullptr);
  def("num_return_sequences", 1);
  def("output_scores", false);
  def("return_dict_in_generate", false);
  def("forced_bos_token_id", nullptr);
  def("forced_eos_token_id", nullptr);
  def("remove_invalid_values", false);
  def("exponential_decay_length_penalty", nullptr);
  def("suppress_tokens", nullptr);
  def("begin_suppress_tokens", nullptr);
  def("_name_or_path", "");
  def("use_cache", true);
  def("initializer_range", 0.02);
  // The release's special tokens, where the vocabulary holds them (a tiny
  // model's embedding would refuse a padding id past its end).
  const bool released = vocab > 163839;
  def("bos_token_id", released ? llvm::json::Value(163584) : nullptr);
  def("eos_token_id", released ? llvm::json::Value(163586) : nullptr);
  def("pad_token_id", released ? llvm::json::Value(163839) : nullptr);
}

/// The compressed-tensors scheme of the K3 release: every nn.Linear but
/// the ignored ones (attention, shared experts, the dense MLP, lm_head and
/// the vision side), i.e. the routed experts, as MXFP4.
llvm::json::Object k3QuantizationConfig() {
  using llvm::json::Array;
  using llvm::json::Object;
  Object weights{{"actorder", nullptr}, {"block_structure", nullptr},
                 {"dynamic", false},    {"group_size", 32},
                 {"num_bits", 4},       {"observer", "minmax"},
                 {"observer_kwargs", Object{}}, {"scale_dtype", "torch.uint8"},
                 {"strategy", "group"}, {"symmetric", true},
                 {"type", "float"},     {"zp_dtype", nullptr}};
  Object group{{"format", "mxfp4-pack-quantized"},
               {"input_activations", nullptr},
               {"output_activations", nullptr},
               {"targets", Array{"Linear"}},
               {"weights", std::move(weights)}};
  return Object{
      {"config_groups", Object{{"group_0", std::move(group)}}},
      {"format", "mxfp4-pack-quantized"},
      {"ignore", Array{"re:.*self_attn.*", "re:.*shared_experts.*",
                       "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                       "re:.*lm_head.*", "re:.*vision_tower.*",
                       "re:.*mm_projector.*"}},
      {"kv_cache_scheme", nullptr},
      {"quant_method", "compressed-tensors"},
      {"quantization_status", "compressed"},
      {"sparsity_config", Object{}},
      {"transform_config", Object{}},
      {"version", "0.12.2"}};
}

} // namespace

llvm::Expected<std::string> kimi::releasedConfigText(llvm::StringRef text,
                                                     bool mxfp4Experts) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json)
    return json.takeError();
  llvm::json::Object *root = json->getAsObject();
  if (!root)
    return fail("the config must be a JSON object");
  llvm::json::Object out;
  if (llvm::json::Object *textConfig = root->getObject("text_config")) {
    llvm::json::Object t = std::move(*textConfig);
    t["model_type"] = "kimi_linear";
    addBoilerplate(t, t.getInteger("vocab_size").value_or(0));
    t["architectures"] = nullptr;
    out["architectures"] = llvm::json::Array{"KimiK3ForConditionalGeneration"};
    out["auto_map"] = llvm::json::Object{
        {"AutoConfig", "configuration_kimi_k3.KimiK3Config"},
        {"AutoModelForCausalLM",
         "modeling_kimi_k3.KimiK3ForConditionalGeneration"}};
    out["model_type"] = "kimi_k3";
    out["media_placeholder_token_id"] = 163605;
    out["ignore_index"] = -100;
    if (mxfp4Experts)
      out["quantization_config"] = k3QuantizationConfig();
    out["text_config"] = std::move(t);
    out["vision_config"] = llvm::json::Object{
        {"model_type", "moonvit"}, {"patch_size", 14},
        {"num_hidden_layers", 27}, {"hidden_size", 1152}};
    out["tie_word_embeddings"] = false;
    out["transformers_version"] = "4.57.1";
  } else {
    if (mxfp4Experts)
      return fail("the Kimi Linear layout is not quantized; MXFP4 experts "
                  "are the K3 release's");
    out = std::move(*root);
    addBoilerplate(out, out.getInteger("vocab_size").value_or(0));
    out["architectures"] = llvm::json::Array{"KimiLinearForCausalLM"};
    out["auto_map"] = llvm::json::Object{
        {"AutoConfig", "configuration_kimi.KimiLinearConfig"},
        {"AutoModelForCausalLM", "modeling_kimi.KimiLinearForCausalLM"}};
    out["model_type"] = "kimi_linear";
    out["transformers_version"] = "4.57.1";
  }
  std::string result;
  llvm::raw_string_ostream os(result);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(out))) << "\n";
  return result;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

double roundTo(double v, StoredType type) {
  float f = static_cast<float>(v);
  if (type == StoredType::BF16)
    return rt::bf16ToF32(rt::f32ToBf16(f));
  return f;
}

struct PendingTensor {
  std::string name;
  rt::StDType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

} // namespace

llvm::Expected<std::map<std::string, std::vector<double>>>
kimi::writeReleasedCheckpoint(const ModelConfig &config, llvm::StringRef configText,
                              const std::string &dir, const WeightValuesFn &values,
                              const CheckpointWriteOptions &options) {
  if (options.shards < 1)
    return fail("shards must be positive");
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return fail("cannot create '" + dir + "': " + ec.message());

  std::map<std::string, std::vector<double>> stored;
  std::vector<PendingTensor> tensors;
  // Logical values, once per weight (experts: once per stacked tensor).
  std::map<std::string, std::vector<double>> logical;
  auto valuesOf = [&](const ReleasedTensor &t) -> std::vector<double> & {
    auto it = logical.find(t.canonical);
    if (it == logical.end())
      it = logical.emplace(t.canonical, values(t.canonical, t.logicalShape)).first;
    return it->second;
  };

  for (const ReleasedTensor &t : releasedTensors(config)) {
    std::vector<double> &v = valuesOf(t);
    int64_t logicalNumel = 1;
    for (int64_t d : t.logicalShape)
      logicalNumel *= d;
    if (static_cast<int64_t>(v.size()) != logicalNumel)
      return fail("values of '" + t.canonical + "': " +
                  llvm::Twine(v.size()) + " for " + llvm::Twine(logicalNumel));
    std::vector<double> &out = stored[t.canonical];
    if (out.empty())
      out.assign(v.size(), 0.0);
    PendingTensor p{t.name, rt::StDType::kBF16, t.shape, {}};

    const int64_t perExpert = t.expert >= 0 ? logicalNumel / t.logicalShape[0] : 0;
    const double *src = v.data() + (t.expert >= 0 ? t.expert * perExpert : 0);
    double *dst = out.data() + (t.expert >= 0 ? t.expert * perExpert : 0);
    const int64_t n = t.expert >= 0 ? perExpert : logicalNumel;

    if (t.type == StoredType::MXFP4Scales)
      continue; // written with its values
    if (t.type == StoredType::MXFP4Values) {
      const int64_t width = t.logicalShape.back(), rows = n / width;
      std::vector<uint8_t> packed(static_cast<size_t>(n / 2)),
          scales(static_cast<size_t>(n / 32));
      for (int64_t r = 0; r < rows; ++r) {
        quantizeMxfp4Row(src + r * width, width, packed.data() + r * width / 2,
                         scales.data() + r * width / 32);
        for (int64_t i = 0; i < width; ++i) {
          uint8_t byte = packed[(r * width + i) / 2];
          uint8_t code = i % 2 ? byte >> 4 : byte & 15;
          dst[r * width + i] =
              e2m1Value(code) * std::ldexp(1.0, int(scales[r * width / 32 + i / 32]) - 127);
        }
      }
      p.dtype = rt::StDType::kU8;
      p.bytes = std::move(packed);
      tensors.push_back(std::move(p));
      std::string scaleName = t.name.substr(0, t.name.size() - 7) + "_scale";
      tensors.push_back({scaleName, rt::StDType::kU8,
                         {t.shape[0], width / 32}, std::move(scales)});
      continue;
    }

    // Dense: the stored tensor may be longer than the weight (A_log pad).
    int64_t storedNumel = 1;
    for (int64_t d : t.shape)
      storedNumel *= d;
    const bool f32 = t.type == StoredType::F32;
    p.dtype = f32 ? rt::StDType::kF32 : rt::StDType::kBF16;
    p.bytes.assign(static_cast<size_t>(storedNumel) * (f32 ? 4 : 2), 0);
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = roundTo(src[i], t.type);
      float f = static_cast<float>(dst[i]);
      if (f32) {
        std::memcpy(p.bytes.data() + 4 * i, &f, 4);
      } else {
        uint16_t h = rt::f32ToBf16(f);
        std::memcpy(p.bytes.data() + 2 * i, &h, 2);
      }
    }
    tensors.push_back(std::move(p));
  }

  if (config.layout == CheckpointLayout::K3 && options.visionTensors) {
    // A token vision side: a loader must skip it, not choke on it.
    auto bf16Tensor = [](std::string name, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      std::vector<uint8_t> bytes(static_cast<size_t>(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = rt::f32ToBf16(0.01f * float(i % 17));
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      return PendingTensor{std::move(name), rt::StDType::kBF16, std::move(shape),
                           std::move(bytes)};
    };
    tensors.push_back(bf16Tensor("vision_tower.patch_embed.proj.weight", {8, 3, 2, 2}));
    tensors.push_back(bf16Tensor("vision_tower.encoder.blocks.0.mlp.fc0.weight", {8, 8}));
    tensors.push_back(bf16Tensor("mm_projector.proj.0.weight", {8, 8}));
  }

  if (options.edit) {
    std::vector<PendingTensor> kept;
    for (PendingTensor &p : tensors)
      if (options.edit(p.name, p.shape, p.bytes))
        kept.push_back(std::move(p));
    tensors = std::move(kept);
  }

  // Shards of about equal size, in module order.
  uint64_t total = 0;
  for (const PendingTensor &p : tensors)
    total += p.bytes.size();
  const int shards = options.shards;
  std::vector<rt::SafetensorsWriter> writers(static_cast<size_t>(shards));
  llvm::json::Object weightMap;
  uint64_t done = 0;
  auto shardName = [&](int s) {
    return llvm::formatv("model-{0:5}-of-{1:5}.safetensors", s + 1, shards).str();
  };
  for (PendingTensor &p : tensors) {
    int s = static_cast<int>(std::min<uint64_t>(shards - 1, done * shards / std::max<uint64_t>(total, 1)));
    done += p.bytes.size();
    std::string name = shardName(s);
    for (char &ch : name)
      if (ch == ' ')
        ch = '0';
    weightMap[p.name] = name;
    writers[static_cast<size_t>(s)].add(p.name, p.dtype, p.shape, p.bytes.data(),
                                        p.bytes.size());
  }
  for (int s = 0; s < shards; ++s) {
    std::string name = shardName(s);
    for (char &ch : name)
      if (ch == ' ')
        ch = '0';
    writers[static_cast<size_t>(s)].addMetadata("format", "pt");
    rt::Status st = writers[static_cast<size_t>(s)].write(dir + "/" + name);
    if (!st.isOk())
      return fail(st.message());
  }
  std::string index;
  llvm::raw_string_ostream os(index);
  os << llvm::formatv(
      "{0:2}",
      llvm::json::Value(llvm::json::Object{
          {"metadata", llvm::json::Object{{"total_size", static_cast<int64_t>(total)}}},
          {"weight_map", std::move(weightMap)}}));
  os << "\n";
  auto writeText = [&](const std::string &path, llvm::StringRef text) -> llvm::Error {
    std::error_code ec;
    llvm::raw_fd_ostream f(path, ec);
    if (ec)
      return fail("cannot write '" + path + "': " + ec.message());
    f << text;
    f.close();
    if (f.has_error())
      return fail("cannot write '" + path + "'");
    return llvm::Error::success();
  };
  if (llvm::Error e = writeText(dir + "/" + rt::kSafetensorsIndexName, index))
    return std::move(e);
  if (llvm::Error e = writeText(dir + "/config.json", configText))
    return std::move(e);
  return stored;
}

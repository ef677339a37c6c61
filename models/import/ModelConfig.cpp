//===- ModelConfig.cpp - reading and validating config.json ---------------===//

#include "models/import/ModelConfig.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include <set>

using namespace kimi;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

int64_t ModelConfig::countLayers(AttentionKind kind) const {
  return llvm::count(layers, kind);
}

namespace {

/// Hugging Face fields that do not change the computation kimi compiles
/// (tokenizer ids, training and serving hints, bookkeeping). `top_k` is HF's
/// sampling default, not the router's top-k (`num_experts_per_token`).
const char *const kIgnoredFields[] = {
    "architectures", "auto_map", "bos_token_id", "eos_token_id",
    "pad_token_id", "torch_dtype", "dtype", "transformers_version",
    "initializer_range", "use_cache", "top_k", "top_p", "temperature",
    "model_max_length", "num_nextn_predict_layers", "rope_theta",
    "rope_scaling", "attention_dropout", "attention_bias", "use_grouped_topk",
    "num_expert_group", "topk_group", "topk_method", "moe_layer_freq",
    "media_placeholder_token_id", "quantization_config", "tokenizer_class",
    "generation_config", "max_window_layers", "use_sliding_window",
    "sliding_window", "name_or_path", "_name_or_path"};

/// Largest accepted value of each size field. The limits keep every product
/// the accounting forms (layers x experts x 3 x intermediate x width) inside
/// int64 and are far above any real model (K3: 93 layers, 896 experts,
/// hidden 7168, intermediate 33792, vocab 163840).
constexpr int64_t kMaxLayers = 1024, kMaxExperts = 4096, kMaxWidth = 65536,
                  kMaxVocab = int64_t(1) << 22, kMaxHeads = 1024,
                  kMaxHeadDim = 1024, kMaxPositions = int64_t(1) << 40;

/// Reads typed fields from one JSON object, remembering which keys were read
/// so that the rest can be reported as unknown. Errors carry the dotted path.
class FieldReader {
public:
  FieldReader(const llvm::json::Object &object, std::string path,
              std::string source)
      : object(object), path(std::move(path)), source(std::move(source)) {}

  std::string name(StringRef key) const {
    return path.empty() ? key.str() : path + "." + key.str();
  }

  Error error(StringRef key, const llvm::Twine &message) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%s: field '%s': %s", source.c_str(),
                                   name(key).c_str(), message.str().c_str());
  }

  const llvm::json::Value *find(StringRef key) {
    seen.insert(key);
    const llvm::json::Value *value = object.get(key);
    if (value && value->kind() == llvm::json::Value::Null)
      return nullptr;
    return value;
  }

  Expected<int64_t> integer(StringRef key) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return error(key, "required field is missing");
    return asInteger(key, *value);
  }

  Expected<int64_t> positive(StringRef key, int64_t max) {
    Expected<int64_t> v = integer(key);
    if (!v)
      return v;
    return inRange(key, *v, 1, max);
  }

  /// Optional positive integer; `fallback` when missing or null.
  Expected<int64_t> positiveOr(StringRef key, int64_t fallback, int64_t max) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return fallback;
    Expected<int64_t> v = asInteger(key, *value);
    if (!v)
      return v;
    return inRange(key, *v, 1, max);
  }

  Expected<int64_t> nonNegativeOr(StringRef key, int64_t fallback,
                                  int64_t max) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return fallback;
    Expected<int64_t> v = asInteger(key, *value);
    if (!v)
      return v;
    return inRange(key, *v, 0, max);
  }

  Expected<int64_t> inRange(StringRef key, int64_t v, int64_t min,
                            int64_t max) {
    if (v < min)
      return error(key, llvm::formatv(min == 0 ? "must not be negative, got {0}"
                                               : "must be positive, got {0}",
                                      v));
    if (v > max)
      return error(key, llvm::formatv("must be at most {0} (the range kimi "
                                      "supports), got {1}",
                                      max, v));
    return v;
  }

  Expected<double> number(StringRef key) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return error(key, "required field is missing");
    return asNumber(key, *value);
  }

  Expected<std::optional<double>> optionalNumber(StringRef key) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return std::optional<double>();
    Expected<double> v = asNumber(key, *value);
    if (!v)
      return v.takeError();
    return std::optional<double>(*v);
  }

  Expected<bool> booleanOr(StringRef key, bool fallback) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return fallback;
    if (std::optional<bool> b = value->getAsBoolean())
      return *b;
    return error(key, "must be true or false");
  }

  Expected<std::string> stringOr(StringRef key, StringRef fallback) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return fallback.str();
    if (std::optional<StringRef> s = value->getAsString())
      return s->str();
    return error(key, "must be a string");
  }

  Expected<std::vector<int64_t>> integerList(StringRef key) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return error(key, "required field is missing");
    const llvm::json::Array *array = value->getAsArray();
    if (!array)
      return error(key, "must be a list of integers");
    std::vector<int64_t> out;
    for (const llvm::json::Value &element : *array) {
      std::optional<int64_t> i = element.getAsInteger();
      if (!i)
        return error(key, "must be a list of integers");
      out.push_back(*i);
    }
    return out;
  }

  Expected<const llvm::json::Object *> objectField(StringRef key) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return error(key, "required field is missing");
    if (const llvm::json::Object *o = value->getAsObject())
      return o;
    return error(key, "must be an object");
  }

  /// Fails on the first key that was neither read nor is known to be
  /// irrelevant (sorted, so the message is deterministic).
  Error checkUnknown(bool allow) const {
    if (allow)
      return Error::success();
    std::set<std::string> unknown;
    for (const auto &entry : object) {
      StringRef key = entry.first;
      if (seen.contains(key) || llvm::is_contained(kIgnoredFields, key))
        continue;
      unknown.insert(key.str());
    }
    if (unknown.empty())
      return Error::success();
    return error(*unknown.begin(),
                 "unknown field (not read by kimi nor known to be irrelevant; "
                 "check its spelling, or pass --allow-unknown-fields)");
  }

private:
  Expected<int64_t> asInteger(StringRef key, const llvm::json::Value &value) {
    if (std::optional<int64_t> i = value.getAsInteger())
      return *i;
    return error(key, "must be an integer");
  }
  Expected<double> asNumber(StringRef key, const llvm::json::Value &value) {
    if (std::optional<double> d = value.getAsNumber())
      return *d;
    return error(key, "must be a number");
  }

  const llvm::json::Object &object;
  std::string path;
  std::string source;
  llvm::StringSet<> seen;
};

#define KIMI_READ(var, expr)                                                   \
  do {                                                                         \
    auto result_ = (expr);                                                     \
    if (!result_)                                                              \
      return result_.takeError();                                              \
    var = std::move(*result_);                                                 \
  } while (false)

Error readKda(FieldReader &top, ModelConfig &cfg, StringRef source,
              bool allowUnknown, std::vector<int64_t> &kdaLayers,
              std::vector<int64_t> &mlaLayers) {
  const llvm::json::Object *object;
  KIMI_READ(object, top.objectField("linear_attn_config"));
  FieldReader r(*object, top.name("linear_attn_config"), source.str());
  KIMI_READ(kdaLayers, r.integerList("kda_layers"));
  KIMI_READ(mlaLayers, r.integerList("full_attn_layers"));
  KIMI_READ(cfg.kda.numHeads, r.positive("num_heads", kMaxHeads));
  KIMI_READ(cfg.kda.headDim, r.positive("head_dim", kMaxHeadDim));
  KIMI_READ(cfg.kda.convKernel, r.positive("short_conv_kernel_size", 64));
  if (cfg.kda.convKernel < 2)
    return r.error("short_conv_kernel_size",
                   llvm::formatv("must be at least 2, got {0}",
                                 cfg.kda.convKernel));
  KIMI_READ(cfg.kda.fullRankGate, r.booleanOr("use_full_rank_gate", false));
  KIMI_READ(cfg.kda.gateLowerBound, r.optionalNumber("gate_lower_bound"));
  if (cfg.kda.gateLowerBound && !(*cfg.kda.gateLowerBound < 0.0))
    return r.error("gate_lower_bound",
                   llvm::formatv("must be negative, got {0}",
                                 *cfg.kda.gateLowerBound));
  return r.checkUnknown(allowUnknown);
}

/// Every 1-based layer must be listed exactly once in kda_layers or
/// full_attn_layers.
Error assignLayers(FieldReader &kdaReader, ModelConfig &cfg,
                   const std::vector<int64_t> &kdaLayers,
                   const std::vector<int64_t> &mlaLayers) {
  std::vector<int> owner(cfg.numLayers, -1);
  auto mark = [&](const std::vector<int64_t> &list, StringRef field,
                  AttentionKind kind) -> Error {
    for (int64_t layer : list) {
      if (layer < 1 || layer > cfg.numLayers)
        return kdaReader.error(
            field, llvm::formatv("layer {0} is outside 1..num_hidden_layers "
                                 "= {1} (layers are 1-based)",
                                 layer, cfg.numLayers));
      if (owner[layer - 1] != -1)
        return kdaReader.error(
            field, llvm::formatv("layer {0} is listed twice across "
                                 "kda_layers and full_attn_layers",
                                 layer));
      owner[layer - 1] = static_cast<int>(kind);
    }
    return Error::success();
  };
  if (Error e = mark(kdaLayers, "kda_layers", AttentionKind::Kda))
    return e;
  if (Error e = mark(mlaLayers, "full_attn_layers", AttentionKind::Mla))
    return e;
  for (int64_t i = 0; i < cfg.numLayers; ++i) {
    if (owner[i] == -1)
      return kdaReader.error(
          "kda_layers",
          llvm::formatv("layer {0} of num_hidden_layers = {1} is in neither "
                        "kda_layers nor full_attn_layers",
                        i + 1, cfg.numLayers));
    cfg.layers.push_back(static_cast<AttentionKind>(owner[i]));
  }
  return Error::success();
}

} // namespace

Expected<ModelConfig> kimi::parseModelConfig(StringRef text, StringRef source,
                                             const ConfigReadOptions &options) {
  Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "%s: not valid JSON: %s",
        source.str().c_str(), llvm::toString(json.takeError()).c_str());
  const llvm::json::Object *root = json->getAsObject();
  if (!root)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%s: the config must be a JSON object",
                                   source.str().c_str());

  ModelConfig cfg;
  // K3 nests the language model under `text_config`; the outer object then
  // describes the multimodal wrapper, which kimi does not compile.
  std::string path;
  const llvm::json::Object *textObject = root;
  if (const llvm::json::Value *nested = root->get("text_config")) {
    textObject = nested->getAsObject();
    if (!textObject)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "%s: field 'text_config': must be an "
                                     "object",
                                     source.str().c_str());
    path = "text_config";
  }
  FieldReader r(*textObject, path, source.str());

  KIMI_READ(cfg.modelType, r.stringOr("model_type", ""));
  if (cfg.modelType.empty())
    if (std::optional<StringRef> outer = root->getString("model_type"))
      cfg.modelType = outer->str();
  KIMI_READ(cfg.hidden, r.positive("hidden_size", kMaxWidth));
  KIMI_READ(cfg.numLayers, r.positive("num_hidden_layers", kMaxLayers));
  KIMI_READ(cfg.vocab, r.positive("vocab_size", kMaxVocab));
  KIMI_READ(cfg.denseIntermediate, r.positive("intermediate_size", kMaxWidth));
  KIMI_READ(cfg.maxPositions, r.positiveOr("max_position_embeddings", 0, kMaxPositions));
  KIMI_READ(cfg.rmsNormEps, r.number("rms_norm_eps"));
  if (!(cfg.rmsNormEps > 0.0))
    return r.error("rms_norm_eps", "must be positive");
  KIMI_READ(cfg.tieEmbeddings, r.booleanOr("tie_word_embeddings", false));
  KIMI_READ(cfg.attnResBlock, r.nonNegativeOr("attn_res_block_size", 0, kMaxLayers));

  std::string act;
  KIMI_READ(act, r.stringOr("hidden_act", "silu"));
  if (act == "silu") {
    cfg.activation = MlpActivation::Silu;
  } else if (act == "situ") {
    cfg.activation = MlpActivation::Situ;
    KIMI_READ(cfg.situBeta, r.number("activation_situ_beta"));
    KIMI_READ(cfg.situLinearBeta, r.number("activation_situ_linear_beta"));
    if (!(cfg.situBeta > 0.0))
      return r.error("activation_situ_beta", "must be positive");
    if (!(cfg.situLinearBeta > 0.0))
      return r.error("activation_situ_linear_beta", "must be positive");
  } else {
    return r.error("hidden_act",
                   "must be \"silu\" or \"situ\", got \"" + act + "\"");
  }

  // MLA.
  int64_t kvHeads;
  KIMI_READ(cfg.mla.numHeads, r.positive("num_attention_heads", kMaxHeads));
  KIMI_READ(kvHeads, r.positiveOr("num_key_value_heads", cfg.mla.numHeads, kMaxHeads));
  if (kvHeads != cfg.mla.numHeads)
    return r.error("num_key_value_heads",
                   llvm::formatv("MLA has one latent shared by all heads; "
                                 "must equal num_attention_heads = {0}, got "
                                 "{1}",
                                 cfg.mla.numHeads, kvHeads));
  int64_t headDim;
  KIMI_READ(headDim, r.positiveOr("head_dim", 0, kMaxWidth));
  if (headDim && headDim * cfg.mla.numHeads != cfg.hidden)
    return r.error("head_dim",
                   llvm::formatv("num_attention_heads x head_dim = {0} x {1} "
                                 "= {2} does not equal hidden_size = {3}",
                                 cfg.mla.numHeads, headDim,
                                 cfg.mla.numHeads * headDim, cfg.hidden));
  KIMI_READ(cfg.mla.qLoraRank, r.nonNegativeOr("q_lora_rank", 0, kMaxWidth));
  KIMI_READ(cfg.mla.kvLoraRank, r.positive("kv_lora_rank", kMaxWidth));
  KIMI_READ(cfg.mla.nopeDim, r.positive("qk_nope_head_dim", kMaxHeadDim));
  KIMI_READ(cfg.mla.ropeDim, r.positive("qk_rope_head_dim", kMaxHeadDim));
  KIMI_READ(cfg.mla.vDim, r.positive("v_head_dim", kMaxHeadDim));
  bool nope;
  KIMI_READ(nope, r.booleanOr("mla_use_nope", false));
  if (!nope)
    return r.error("mla_use_nope",
                   "must be true: kimi compiles MLA without positional "
                   "encoding (NoPE) only");
  KIMI_READ(cfg.mla.outputGate, r.booleanOr("mla_use_output_gate", false));

  // KDA and the layer pattern.
  std::vector<int64_t> kdaLayers, mlaLayers;
  if (Error e = readKda(r, cfg, source, options.allowUnknownFields, kdaLayers,
                        mlaLayers))
    return std::move(e);
  FieldReader layerErrors(*textObject, r.name("linear_attn_config"),
                          source.str());
  if (Error e = assignLayers(layerErrors, cfg, kdaLayers, mlaLayers))
    return std::move(e);

  // MoE.
  KIMI_READ(cfg.moe.numExperts, r.positive("num_experts", kMaxExperts));
  KIMI_READ(cfg.moe.topK, r.positive("num_experts_per_token", kMaxExperts));
  if (cfg.moe.topK > cfg.moe.numExperts)
    return r.error("num_experts_per_token",
                   llvm::formatv("top-k = {0} exceeds num_experts = {1}",
                                 cfg.moe.topK, cfg.moe.numExperts));
  KIMI_READ(cfg.moe.numShared, r.nonNegativeOr("num_shared_experts", 0, 64));
  KIMI_READ(cfg.moe.intermediate, r.positive("moe_intermediate_size", kMaxWidth));
  KIMI_READ(cfg.moe.latent, r.nonNegativeOr("routed_expert_hidden_size", 0, kMaxWidth));
  KIMI_READ(cfg.moe.latentNorm, r.booleanOr("latent_moe_use_norm", false));
  if (cfg.moe.latentNorm && !cfg.moe.latent)
    return r.error("latent_moe_use_norm",
                   "needs routed_expert_hidden_size (the latent width)");
  KIMI_READ(cfg.moe.renormalize, r.booleanOr("moe_renormalize", true));
  std::optional<double> scaling;
  KIMI_READ(scaling, r.optionalNumber("routed_scaling_factor"));
  cfg.moe.scaling = scaling.value_or(1.0);
  if (!(cfg.moe.scaling > 0.0))
    return r.error("routed_scaling_factor", "must be positive");
  KIMI_READ(cfg.moe.firstDense, r.nonNegativeOr("first_k_dense_replace", 0, kMaxLayers));
  if (cfg.moe.firstDense > cfg.numLayers)
    return r.error("first_k_dense_replace",
                   llvm::formatv("exceeds num_hidden_layers = {0}",
                                 cfg.numLayers));
  std::string router;
  KIMI_READ(router, r.stringOr("moe_router_activation_func", "sigmoid"));
  if (router != "sigmoid")
    return r.error("moe_router_activation_func",
                   "must be \"sigmoid\", got \"" + router + "\"");

  if (Error e = r.checkUnknown(options.allowUnknownFields))
    return std::move(e);
  return cfg;
}

Expected<ModelConfig> kimi::readModelConfig(StringRef path,
                                            const ConfigReadOptions &options) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(buffer.getError(), "%s: cannot read: %s",
                                   path.str().c_str(),
                                   buffer.getError().message().c_str());
  return parseModelConfig((*buffer)->getBuffer(), path, options);
}

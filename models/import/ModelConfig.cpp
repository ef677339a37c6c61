//===- ModelConfig.cpp - reading and validating config.json ---------------===//

#include "models/import/ModelConfig.h"
#include "models/import/WeightNames.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"
#include "runtime/support/file_io.h"

#include <cmath>
#include <cstring>
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
/// `rope_*` are inert: kimi compiles MLA without positional encoding only
/// (`mla_use_nope` must be true). `sliding_window` and `max_window_layers`
/// mean nothing unless `use_sliding_window` is true, which is refused.
const char *const kIgnoredFields[] = {
    "architectures", "auto_map", "bos_token_id", "eos_token_id",
    "pad_token_id", "torch_dtype", "dtype", "transformers_version",
    "initializer_range", "use_cache", "top_k", "top_p", "temperature",
    "model_max_length", "rope_theta", "rope_scaling", "attention_dropout",
    "media_placeholder_token_id", "tokenizer_class", "generation_config",
    "max_window_layers", "sliding_window", "name_or_path", "_name_or_path",
    "router_aux_loss_coef", "output_router_logits", "pretraining_tp"};

/// The keys every `PretrainedConfig.to_dict()` writes (generation defaults,
/// label maps, encoder-decoder switches, output flags): boilerplate that a
/// verbatim released `text_config` carries and that has no model semantics.
const char *const kPretrainedConfigFields[] = {
    "return_dict", "output_hidden_states", "output_attentions", "torchscript",
    "use_bfloat16", "tf_legacy_loss", "pruned_heads",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
    "cross_attention_hidden_size", "add_cross_attention",
    "tie_encoder_decoder", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate",
    "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "finetuning_task", "id2label", "label2id",
    "prefix", "sep_token_id", "decoder_start_token_id",
    "task_specific_params", "problem_type", "_attn_implementation_autoset",
    "_commit_hash", "num_labels"};

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

  Expected<std::vector<std::string>> stringListOr(StringRef key) {
    const llvm::json::Value *value = find(key);
    std::vector<std::string> out;
    if (!value)
      return out;
    const llvm::json::Array *array = value->getAsArray();
    if (!array)
      return error(key, "must be a list of strings");
    for (const llvm::json::Value &element : *array) {
      std::optional<StringRef> s = element.getAsString();
      if (!s)
        return error(key, "must be a list of strings");
      out.push_back(s->str());
    }
    return out;
  }

  /// An object, or nullptr when the field is missing or null.
  Expected<const llvm::json::Object *> optionalObject(StringRef key) {
    const llvm::json::Value *value = find(key);
    if (!value)
      return nullptr;
    if (const llvm::json::Object *o = value->getAsObject())
      return o;
    return error(key, "must be an object or null");
  }

  const llvm::json::Object &fields() const { return object; }

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
      if (seen.contains(key) || llvm::is_contained(kIgnoredFields, key) ||
          llvm::is_contained(kPretrainedConfigFields, key))
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
    // An integer literal past int64 (llvm::json keeps it as uint64, or as a
    // double past that) is out of range, not a non-integer.
    if (value.getAsUINT64())
      return error(key, "is out of range (an integer of at most 2^63 - 1)");
    if (std::optional<double> d = value.getAsNumber())
      if (std::isfinite(*d) && *d == std::floor(*d))
        return error(key, "is out of range (an integer of at most 2^63 - 1)");
    return error(key, "must be an integer");
  }
  Expected<double> asNumber(StringRef key, const llvm::json::Value &value) {
    if (std::optional<double> d = value.getAsNumber()) {
      // 1e400 parses as infinity: a range check written !(x > 0) would let
      // it through.
      if (!std::isfinite(*d))
        return error(key, "must be a finite number (a literal this large "
                          "overflows a double)");
      return *d;
    }
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


/// One compressed-tensors target or ignore entry against a module name:
/// `Linear` selects nn.Linear modules, `re:<regex>` is Python's `re.match`
/// (anchored at the start), anything else is an exact module name.
bool matchesModule(StringRef entry, StringRef module, bool linear) {
  if (entry == "Linear")
    return linear;
  if (entry.consume_front("re:"))
    return llvm::Regex(("^(" + entry + ")").str()).match(module);
  return entry == module;
}

/// The weights a quantization scheme group must have for kimi to read it:
/// MXFP4 as OCP defines it (E2M1 values, one E8M0 scale per 32).
Error readMxfp4Weights(FieldReader &group, StringRef source) {
  const llvm::json::Object *weights;
  KIMI_READ(weights, group.objectField("weights"));
  FieldReader w(*weights, group.name("weights"), source.str());
  int64_t bits, groupSize;
  KIMI_READ(bits, w.integer("num_bits"));
  if (bits != 4)
    return w.error("num_bits", llvm::formatv("must be 4 (MXFP4), got {0}", bits));
  std::string type, strategy;
  KIMI_READ(type, w.stringOr("type", ""));
  if (type != "float")
    return w.error("type", "must be \"float\" (E2M1 values), got \"" + type + "\"");
  KIMI_READ(groupSize, w.integer("group_size"));
  if (groupSize != 32)
    return w.error("group_size",
                   llvm::formatv("must be 32 (the MX block), got {0}", groupSize));
  KIMI_READ(strategy, w.stringOr("strategy", "group"));
  if (strategy != "group")
    return w.error("strategy", "must be \"group\", got \"" + strategy + "\"");
  bool symmetric, dynamic;
  KIMI_READ(symmetric, w.booleanOr("symmetric", true));
  if (!symmetric)
    return w.error("symmetric", "must be true (MXFP4 has no zero point)");
  KIMI_READ(dynamic, w.booleanOr("dynamic", false));
  if (dynamic)
    return w.error("dynamic", "must be false: the checkpoint stores the weights");
  std::string scaleType;
  KIMI_READ(scaleType, w.stringOr("scale_dtype", "torch.uint8"));
  if (scaleType != "torch.uint8")
    return w.error("scale_dtype", "must be \"torch.uint8\" (E8M0 bytes), got \"" +
                                      scaleType + "\"");
  for (StringRef key : {"actorder", "block_structure", "zp_dtype"})
    if (w.find(key))
      return w.error(key, "must be null for MXFP4");
  w.find("observer");
  w.find("observer_kwargs");
  return w.checkUnknown(false);
}

/// Whether the weight of `role` exists at 0-based `layer` (-1: model level).
bool roleAt(const ModelConfig &cfg, WeightRole role, int64_t layer) {
  using R = WeightRole;
  if (role == R::LmHead)
    return layer < 0 && !cfg.tieEmbeddings;
  if (layer < 0)
    return false;
  bool kda = cfg.layers[layer] == AttentionKind::Kda;
  switch (role) {
  case R::KdaQ: case R::KdaK: case R::KdaV: case R::KdaFA: case R::KdaFB:
  case R::KdaB: case R::KdaO:
    return kda;
  case R::KdaG:
    return kda && cfg.kda.fullRankGate;
  case R::KdaGA: case R::KdaGB:
    return kda && !cfg.kda.fullRankGate;
  case R::MlaKvA: case R::MlaKvB: case R::MlaO:
    return !kda;
  case R::MlaQ:
    return !kda && !cfg.mla.qLoraRank;
  case R::MlaQA: case R::MlaQB:
    return !kda && cfg.mla.qLoraRank;
  case R::MlaG:
    return !kda && cfg.mla.outputGate;
  case R::MlpGate: case R::MlpUp: case R::MlpDown:
    return !cfg.isMoeLayer(layer);
  case R::ExpertGate: case R::ExpertUp: case R::ExpertDown:
    return cfg.isMoeLayer(layer);
  case R::SharedGate: case R::SharedUp: case R::SharedDown:
    return cfg.isMoeLayer(layer) && cfg.moe.numShared;
  default:
    return false;
  }
}

/// Reads a compressed-tensors `quantization_config` and decides, module by
/// module under the release's names, which weights it stores as MXFP4.
/// kimi reads MXFP4 for routed experts; a scheme that would quantize any
/// other weight, or only some expert projections, is refused by name.
Error readQuantization(FieldReader &parent, ModelConfig &cfg, StringRef source) {
  const llvm::json::Object *object;
  KIMI_READ(object, parent.optionalObject("quantization_config"));
  if (!object)
    return Error::success();
  FieldReader q(*object, parent.name("quantization_config"), source.str());
  std::string method, format, status;
  KIMI_READ(method, q.stringOr("quant_method", ""));
  if (method != "compressed-tensors")
    return q.error("quant_method",
                   "must be \"compressed-tensors\" (the scheme of the Kimi "
                   "releases), got \"" + method + "\"");
  KIMI_READ(format, q.stringOr("format", ""));
  if (format != "mxfp4-pack-quantized")
    return q.error("format", "must be \"mxfp4-pack-quantized\", got \"" +
                                 format + "\"");
  KIMI_READ(status, q.stringOr("quantization_status", "compressed"));
  if (status != "compressed")
    return q.error("quantization_status",
                   "must be \"compressed\" (packed values in the checkpoint), "
                   "got \"" + status + "\"");
  if (q.find("kv_cache_scheme"))
    return q.error("kv_cache_scheme",
                   "must be null: kimi keeps the MLA latent cache unquantized");
  for (StringRef key : {"sparsity_config", "transform_config"})
    if (const llvm::json::Value *v = q.find(key))
      if (!v->getAsObject() || !v->getAsObject()->empty())
        return q.error(key, "must be null or empty: kimi implements no "
                            "sparsity or transform scheme");
  q.find("version");
  q.find("global_compression_ratio");
  std::vector<std::string> ignore;
  KIMI_READ(ignore, q.stringListOr("ignore"));

  const llvm::json::Object *groups;
  KIMI_READ(groups, q.objectField("config_groups"));
  FieldReader groupsReader(*groups, q.name("config_groups"), source.str());
  struct Group {
    std::string name;
    std::vector<std::string> targets;
  };
  std::vector<Group> parsed;
  for (const auto &entry : *groups) {
    StringRef key = entry.first;
    const llvm::json::Object *groupObject;
    KIMI_READ(groupObject, groupsReader.objectField(key));
    FieldReader g(*groupObject, groupsReader.name(key), source.str());
    std::string groupFormat;
    KIMI_READ(groupFormat, g.stringOr("format", format));
    if (groupFormat != "mxfp4-pack-quantized")
      return g.error("format", "must be \"mxfp4-pack-quantized\", got \"" +
                                   groupFormat + "\"");
    Group group{key.str(), {}};
    KIMI_READ(group.targets, g.stringListOr("targets"));
    if (group.targets.empty())
      return g.error("targets", "must list at least one module");
    if (Error e = readMxfp4Weights(g, source))
      return e;
    for (StringRef key : {"input_activations", "output_activations"})
      if (g.find(key))
        return g.error(key, "must be null: kimi reads MXFP4 weights with "
                            "bf16/f32 activations (W4A16) and implements no "
                            "activation quantization");
    if (Error e = g.checkUnknown(false))
      return e;
    parsed.push_back(std::move(group));
  }
  if (Error e = q.checkUnknown(false))
    return e;

  const bool prefixed = cfg.layout == CheckpointLayout::K3;
  std::optional<std::pair<std::string, bool>> expertDecision;
  for (int64_t layer = -1; layer < cfg.numLayers; ++layer) {
    for (const WeightNameRule &rule : weightNameTable()) {
      if (!isLinearModule(rule.role) || !roleAt(cfg, rule.role, layer))
        continue;
      std::string module =
          releasedWeightName(rule.role, layer, /*expert=*/0, prefixed);
      if (StringRef(module).ends_with(".weight"))
        module.resize(module.size() - 7);
      bool linear = true;
      const Group *by = nullptr;
      for (const Group &g : parsed)
        for (const std::string &t : g.targets)
          if (!by && matchesModule(t, module, linear))
            by = &g;
      bool quantized = by && llvm::none_of(ignore, [&](const std::string &i) {
        return matchesModule(i, module, linear);
      });
      bool expert = rule.role == WeightRole::ExpertGate ||
                    rule.role == WeightRole::ExpertUp ||
                    rule.role == WeightRole::ExpertDown;
      if (!expert) {
        if (quantized)
          return q.error(
              "config_groups",
              "group '" + by->name + "' quantizes '" + module +
                  "', which kimi does not read as MXFP4 (only routed "
                  "experts are; add it to 'ignore')");
        continue;
      }
      if (!expertDecision)
        expertDecision = {module, quantized};
      else if (expertDecision->second != quantized)
        return q.error(
            "ignore",
            "quantizes '" + (quantized ? module : expertDecision->first) +
                "' but not '" + (quantized ? expertDecision->first : module) +
                "': kimi reads all routed experts as MXFP4, or none");
    }
  }
  if (cfg.quantization.present &&
      cfg.quantization.mxfp4Experts !=
          (expertDecision && expertDecision->second))
    return q.error("config_groups",
                   "disagrees with the other quantization_config of this "
                   "file on whether routed experts are MXFP4");
  cfg.quantization.present = true;
  cfg.quantization.mxfp4Experts = expertDecision && expertDecision->second;
  return Error::success();
}

/// A config nests a few levels (text_config, linear_attn_config,
/// quantization_config's lists): 64 is far past any real one.
constexpr int kMaxJsonDepth = 64;

/// The largest config file read (a released config.json is a few KiB; the
/// bound keeps a mistaken path to a checkpoint shard from being read whole).
constexpr uint64_t kMaxConfigBytes = 16u << 20;

/// Scans `text` as JSON tokens (strings with their escapes, brackets,
/// colons) without building anything: refuses nesting deeper than
/// kMaxJsonDepth and an object that repeats a key (compared as written),
/// naming the line. Anything else malformed is left to llvm::json::parse.
Error checkJsonShape(StringRef text, StringRef source) {
  struct Level {
    bool object;
    bool expectKey; // in an object, the next string is a key
    llvm::StringSet<> keys;
  };
  std::vector<Level> stack;
  int line = 1;
  auto fail = [&](const llvm::Twine &what) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "%s: line %d: %s", source.str().c_str(),
                                   line, what.str().c_str());
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '{' || c == '[') {
      if (static_cast<int>(stack.size()) >= kMaxJsonDepth)
        return fail("nested more than " + llvm::Twine(kMaxJsonDepth) +
                    " levels deep");
      stack.push_back({c == '{', c == '{', {}});
    } else if (c == '}' || c == ']') {
      if (!stack.empty())
        stack.pop_back();
    } else if (c == ',') {
      if (!stack.empty() && stack.back().object)
        stack.back().expectKey = true;
    } else if (c == '"') {
      size_t end = i + 1;
      while (end < text.size() && text[end] != '"') {
        if (text[end] == '\\')
          ++end;
        if (end < text.size() && text[end] == '\n')
          ++line;
        ++end;
      }
      if (end >= text.size())
        return Error::success(); // unterminated: the parser says so
      if (!stack.empty() && stack.back().object && stack.back().expectKey) {
        StringRef key = text.slice(i + 1, end);
        if (!stack.back().keys.insert(key).second)
          return fail("key '" + key + "' appears twice in one object");
        stack.back().expectKey = false;
      }
      i = end;
    }
  }
  return Error::success();
}

} // namespace

Expected<ModelConfig> kimi::parseModelConfig(StringRef text, StringRef source,
                                             const ConfigReadOptions &options) {
  // Depth and duplicate keys first: llvm::json::parse recurses once a level
  // (10^5 levels overflow the stack) and keeps the last of duplicate keys.
  if (Error e = checkJsonShape(text, source))
    return std::move(e);
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
    std::optional<StringRef> wrapper = root->getString("model_type");
    if (wrapper && *wrapper == "kimi_k3")
      cfg.layout = CheckpointLayout::K3;
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
  KIMI_READ(cfg.mla.qLoraRank, r.nonNegativeOr("q_lora_rank", 0, kMaxWidth));
  KIMI_READ(cfg.mla.kvLoraRank, r.positive("kv_lora_rank", kMaxWidth));
  KIMI_READ(cfg.mla.nopeDim, r.positive("qk_nope_head_dim", kMaxHeadDim));
  KIMI_READ(cfg.mla.ropeDim, r.positive("qk_rope_head_dim", kMaxHeadDim));
  KIMI_READ(cfg.mla.vDim, r.positive("v_head_dim", kMaxHeadDim));
  // `head_dim` is derived, never read: releases write hidden / heads (Kimi
  // Linear: 72), and Hugging Face's save_pretrained writes qk_rope_head_dim.
  // Any other value means the config is not what kimi compiles.
  if (headDim && headDim * cfg.mla.numHeads != cfg.hidden &&
      headDim != cfg.mla.ropeDim &&
      headDim != cfg.mla.nopeDim + cfg.mla.ropeDim)
    return r.error("head_dim",
                   llvm::formatv("is derived and must be hidden_size / "
                                 "num_attention_heads = {0} / {1}, "
                                 "qk_rope_head_dim = {2} or qk_nope_head_dim "
                                 "+ qk_rope_head_dim = {3}; got {4}",
                                 cfg.hidden, cfg.mla.numHeads, cfg.mla.ropeDim,
                                 cfg.mla.nopeDim + cfg.mla.ropeDim, headDim));
  bool attentionBias;
  KIMI_READ(attentionBias, r.booleanOr("attention_bias", false));
  if (attentionBias)
    return r.error("attention_bias",
                   "must be false: kimi compiles projections without biases");
  bool slidingWindow;
  KIMI_READ(slidingWindow, r.booleanOr("use_sliding_window", false));
  if (slidingWindow)
    return r.error("use_sliding_window",
                   "must be false: kimi compiles full causal MLA attention");
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
  int64_t layerFreq;
  KIMI_READ(layerFreq, r.positiveOr("moe_layer_freq", 1, kMaxLayers));
  if (layerFreq != 1)
    return r.error("moe_layer_freq",
                   llvm::formatv("must be 1: kimi compiles every layer from "
                                 "first_k_dense_replace on as MoE, got {0}",
                                 layerFreq));
  std::string topkMethod;
  KIMI_READ(topkMethod, r.stringOr("topk_method", "noaux_tc"));
  if (topkMethod != "noaux_tc")
    return r.error("topk_method",
                   "must be \"noaux_tc\" (top-k of the bias-corrected "
                   "scores, weights from the uncorrected ones), got \"" +
                       topkMethod + "\"");
  // Grouped top-k keeps the experts of the best `topk_group` of
  // `num_expert_group` groups; with one group it is the plain top-k.
  bool grouped;
  int64_t expertGroups, topkGroup;
  KIMI_READ(grouped, r.booleanOr("use_grouped_topk", false));
  KIMI_READ(expertGroups, r.positiveOr("num_expert_group", 1, kMaxExperts));
  KIMI_READ(topkGroup, r.positiveOr("topk_group", 1, kMaxExperts));
  if (grouped && expertGroups != 1)
    return r.error("num_expert_group",
                   llvm::formatv("must be 1 with use_grouped_topk: kimi "
                                 "implements ungrouped top-k only, got {0}",
                                 expertGroups));
  if (grouped && topkGroup != 1)
    return r.error("topk_group",
                   llvm::formatv("must be 1 with use_grouped_topk and one "
                                 "expert group, got {0}",
                                 topkGroup));
  int64_t mtp;
  KIMI_READ(mtp, r.nonNegativeOr("num_nextn_predict_layers", 0, kMaxLayers));
  if (mtp != 0)
    return r.error("num_nextn_predict_layers",
                   llvm::formatv("must be 0: kimi does not compile "
                                 "multi-token-prediction layers, got {0}",
                                 mtp));

  // Quantization: under text_config, or beside it on the wrapper.
  if (Error e = readQuantization(r, cfg, source))
    return std::move(e);
  if (textObject != root) {
    FieldReader outer(*root, "", source.str());
    if (Error e = readQuantization(outer, cfg, source))
      return std::move(e);
  }

  if (Error e = r.checkUnknown(options.allowUnknownFields))
    return std::move(e);
  return cfg;
}

Expected<ModelConfig> kimi::readModelConfig(StringRef path,
                                            const ConfigReadOptions &options) {
  // Only a regular file of at most kMaxConfigBytes is read (released
  // configs hold a few KiB).
  kimi::rt::StatusOr<std::string> text = kimi::rt::readRegularFile(
      path.str(), "config '" + path.str() + "'", kMaxConfigBytes);
  if (!text)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                   text.status().message().c_str());
  return parseModelConfig(*text, path, options);
}

//===- WeightNames.cpp - Hugging Face parameter names ---------------------===//

#include "models/import/WeightNames.h"
#include "llvm/ADT/STLExtras.h"
#include <cassert>
#include <optional>

using namespace kimi;

namespace {
std::string substitute(llvm::StringRef pattern, llvm::StringRef key,
                       int64_t value) {
  std::string out = pattern.str();
  if (value < 0)
    return out;
  size_t at = out.find(key.str());
  if (at != std::string::npos)
    out.replace(at, key.size(), std::to_string(value));
  return out;
}
} // namespace

llvm::ArrayRef<WeightNameRule> kimi::weightNameTable() {
  using R = WeightRole;
  static const std::vector<WeightNameRule> table = {
      {R::Embed, "model.embed_tokens.weight", {}},
      {R::FinalNorm, "model.norm.weight", {}},
      {R::LmHead, "lm_head.weight", {}},
      {R::OutputResNorm, "model.output_attn_res_norm.weight", {}},
      {R::OutputResProj, "model.output_attn_res_proj.weight", {}},

      {R::InputNorm, "model.layers.{l}.input_layernorm.weight", {}},
      {R::PostAttnNorm, "model.layers.{l}.post_attention_layernorm.weight", {}},
      {R::AttnResNorm, "model.layers.{l}.self_attention_res_norm.weight", {}},
      {R::AttnResProj, "model.layers.{l}.self_attention_res_proj.weight", {}},
      {R::MlpResNorm, "model.layers.{l}.mlp_res_norm.weight", {}},
      {R::MlpResProj, "model.layers.{l}.mlp_res_proj.weight", {}},

      {R::KdaQ, "model.layers.{l}.self_attn.q_proj.weight", {}},
      {R::KdaK, "model.layers.{l}.self_attn.k_proj.weight", {}},
      {R::KdaV, "model.layers.{l}.self_attn.v_proj.weight", {}},
      {R::KdaQConv, "model.layers.{l}.self_attn.q_conv1d.weight", {}},
      {R::KdaKConv, "model.layers.{l}.self_attn.k_conv1d.weight", {}},
      {R::KdaVConv, "model.layers.{l}.self_attn.v_conv1d.weight", {}},
      {R::KdaFA, "model.layers.{l}.self_attn.f_a_proj.weight", {}},
      {R::KdaFB, "model.layers.{l}.self_attn.f_b_proj.weight", {}},
      {R::KdaALog, "model.layers.{l}.self_attn.A_log", {}},
      {R::KdaDtBias, "model.layers.{l}.self_attn.dt_bias", {}},
      {R::KdaB, "model.layers.{l}.self_attn.b_proj.weight", {}},
      {R::KdaG, "model.layers.{l}.self_attn.g_proj.weight", {}},
      {R::KdaGA, "model.layers.{l}.self_attn.g_a_proj.weight", {}},
      {R::KdaGB, "model.layers.{l}.self_attn.g_b_proj.weight", {}},
      {R::KdaONorm, "model.layers.{l}.self_attn.o_norm.weight", {}},
      {R::KdaO, "model.layers.{l}.self_attn.o_proj.weight", {}},

      {R::MlaQ, "model.layers.{l}.self_attn.q_proj.weight", {}},
      {R::MlaQA, "model.layers.{l}.self_attn.q_a_proj.weight", {}},
      {R::MlaQANorm, "model.layers.{l}.self_attn.q_a_layernorm.weight", {}},
      {R::MlaQB, "model.layers.{l}.self_attn.q_b_proj.weight", {}},
      {R::MlaKvA, "model.layers.{l}.self_attn.kv_a_proj_with_mqa.weight", {}},
      {R::MlaKvANorm, "model.layers.{l}.self_attn.kv_a_layernorm.weight", {}},
      {R::MlaKvB, "model.layers.{l}.self_attn.kv_b_proj.weight", {}},
      {R::MlaG, "model.layers.{l}.self_attn.g_proj.weight", {}},
      {R::MlaO, "model.layers.{l}.self_attn.o_proj.weight", {}},

      {R::MlpGate, "model.layers.{l}.mlp.gate_proj.weight", {}},
      {R::MlpUp, "model.layers.{l}.mlp.up_proj.weight", {}},
      {R::MlpDown, "model.layers.{l}.mlp.down_proj.weight", {}},

      {R::Router, "model.layers.{l}.mlp.gate.weight",
       {"model.layers.{l}.block_sparse_moe.gate.weight"}},
      {R::RouterBias, "model.layers.{l}.mlp.gate.e_score_correction_bias",
       {"model.layers.{l}.block_sparse_moe.gate.e_score_correction_bias"}},
      {R::ExpertGate, "model.layers.{l}.mlp.experts.{e}.gate_proj.weight",
       {"model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight"}},
      {R::ExpertUp, "model.layers.{l}.mlp.experts.{e}.up_proj.weight",
       {"model.layers.{l}.block_sparse_moe.experts.{e}.w3.weight"}},
      {R::ExpertDown, "model.layers.{l}.mlp.experts.{e}.down_proj.weight",
       {"model.layers.{l}.block_sparse_moe.experts.{e}.w2.weight"}},
      {R::ExpertGateScale,
       "model.layers.{l}.mlp.experts.{e}.gate_proj.weight_scale",
       {"model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight_scale"}},
      {R::ExpertUpScale, "model.layers.{l}.mlp.experts.{e}.up_proj.weight_scale",
       {"model.layers.{l}.block_sparse_moe.experts.{e}.w3.weight_scale"}},
      {R::ExpertDownScale,
       "model.layers.{l}.mlp.experts.{e}.down_proj.weight_scale",
       {"model.layers.{l}.block_sparse_moe.experts.{e}.w2.weight_scale"}},
      {R::LatentDown, "model.layers.{l}.mlp.routed_expert_down_proj.weight",
       {"model.layers.{l}.block_sparse_moe.routed_expert_down_proj.weight"}},
      {R::LatentNorm, "model.layers.{l}.mlp.routed_expert_norm.weight",
       {"model.layers.{l}.block_sparse_moe.routed_expert_norm.weight"}},
      {R::LatentUp, "model.layers.{l}.mlp.routed_expert_up_proj.weight",
       {"model.layers.{l}.block_sparse_moe.routed_expert_up_proj.weight"}},
      {R::SharedGate, "model.layers.{l}.mlp.shared_experts.gate_proj.weight",
       {"model.layers.{l}.block_sparse_moe.shared_experts.gate_proj.weight"}},
      {R::SharedUp, "model.layers.{l}.mlp.shared_experts.up_proj.weight",
       {"model.layers.{l}.block_sparse_moe.shared_experts.up_proj.weight"}},
      {R::SharedDown, "model.layers.{l}.mlp.shared_experts.down_proj.weight",
       {"model.layers.{l}.block_sparse_moe.shared_experts.down_proj.weight"}},
  };
  return table;
}

static const WeightNameRule &ruleFor(WeightRole role) {
  for (const WeightNameRule &rule : weightNameTable())
    if (rule.role == role)
      return rule;
  assert(false && "every role has a row in the weight name table");
  llvm_unreachable("role without a name");
}

std::string kimi::weightName(WeightRole role, int64_t layer) {
  return substitute(ruleFor(role).canonical, "{l}", layer);
}

std::vector<std::string> kimi::weightNameSpellings(WeightRole role,
                                                   int64_t layer,
                                                   int64_t expert) {
  const WeightNameRule &rule = ruleFor(role);
  std::vector<std::string> names;
  auto add = [&](llvm::StringRef pattern) {
    std::string name = substitute(substitute(pattern, "{l}", layer), "{e}",
                                  expert);
    names.push_back(name);
    names.push_back("language_model." + name);
  };
  add(rule.canonical);
  for (llvm::StringRef alias : rule.aliases)
    add(alias);
  return names;
}

std::string kimi::releasedWeightName(WeightRole role, int64_t layer,
                                     int64_t expert, bool prefixed) {
  const WeightNameRule &rule = ruleFor(role);
  // The release spells MoE tensors under `block_sparse_moe.`; that is the
  // one alias a row has when it has any.
  llvm::StringRef pattern =
      rule.aliases.empty() ? rule.canonical : rule.aliases.front();
  std::string name =
      substitute(substitute(pattern, "{l}", layer), "{e}", expert);
  return prefixed ? "language_model." + name : name;
}

bool kimi::isLinearModule(WeightRole role) {
  using R = WeightRole;
  switch (role) {
  case R::LmHead:
  case R::KdaQ: case R::KdaK: case R::KdaV: case R::KdaFA: case R::KdaFB:
  case R::KdaB: case R::KdaG: case R::KdaGA: case R::KdaGB: case R::KdaO:
  case R::MlaQ: case R::MlaQA: case R::MlaQB: case R::MlaKvA: case R::MlaKvB:
  case R::MlaG: case R::MlaO:
  case R::MlpGate: case R::MlpUp: case R::MlpDown:
  case R::ExpertGate: case R::ExpertUp: case R::ExpertDown:
  case R::SharedGate: case R::SharedUp: case R::SharedDown:
    return true;
  default:
    return false;
  }
}

/// Matches `name` against `pattern` with `{l}` standing for a decimal layer
/// number; returns the layer (-1 when the pattern has no `{l}`), or nullopt.
static std::optional<int64_t> matchLayer(llvm::StringRef pattern,
                                         llvm::StringRef name) {
  size_t at = pattern.find("{l}");
  if (at == llvm::StringRef::npos)
    return pattern == name ? std::optional<int64_t>(-1) : std::nullopt;
  llvm::StringRef prefix = pattern.take_front(at);
  llvm::StringRef suffix = pattern.drop_front(at + 3);
  if (!name.starts_with(prefix) || !name.ends_with(suffix) ||
      name.size() <= prefix.size() + suffix.size())
    return std::nullopt;
  llvm::StringRef digits =
      name.drop_front(prefix.size()).drop_back(suffix.size());
  int64_t layer;
  if (digits.getAsInteger(10, layer))
    return std::nullopt;
  return layer;
}

bool kimi::weightHasPaddedForms(llvm::StringRef name) {
  return matchLayer(ruleFor(WeightRole::KdaALog).canonical, name).has_value();
}

std::vector<std::string> kimi::weightNameAliases(llvm::StringRef name) {
  for (const WeightNameRule &rule : weightNameTable()) {
    std::optional<int64_t> layer = matchLayer(rule.canonical, name);
    if (!layer)
      continue;
    std::vector<std::string> aliases;
    for (llvm::StringRef alias : rule.aliases)
      aliases.push_back(substitute(alias, "{l}", *layer));
    return aliases;
  }
  return {};
}

//===- generate.h - The generation loop of one sequence ---------*- C++ -*-===//
//
// Prefill a prompt, then sample and decode token by token until a stop
// token (EOS, <|im_end|>), a stop string, the token limit, or the caller
// says stop; the text shown so far arrives through a callback as it
// becomes final (whole characters, never part of a stop string).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_TEXT_GENERATE_H
#define KIMI_RUNTIME_TEXT_GENERATE_H

#include "runtime/artifact/types.h"
#include "runtime/session/session.h"
#include "runtime/text/sampler.h"
#include "runtime/text/tokenizer.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kimi::rt {

enum class StopReason { kMaxTokens, kStopToken, kStopString, kCallback };
const char *stopReasonName(StopReason reason);

struct GenerateOptions {
  SamplingParams sampling;
  int64_t maxNewTokens = 256;
  /// Tokens that end generation (kept in the tokens, not shown as text).
  std::vector<int32_t> stopTokens;
  /// Texts that end generation (needs a tokenizer; not shown).
  std::vector<std::string> stopStrings;
  /// Whether special tokens (<|im_middle|>, reserved ids) appear in the
  /// text; off by default, as in vLLM's skip_special_tokens.
  bool showSpecialTokens = false;
  /// Which prefill rows reach onLogits (kLast: only the one sampled from).
  PrefillLogits prefillRows = PrefillLogits::kLast;
  /// Sees every logits view, prefill's and each step's (optional).
  std::function<void(const LogitsView &)> onLogits;
};

struct GenerateResult {
  std::vector<int32_t> tokens; // generated, a stop token included
  std::string text;            // the text shown (stop strings excluded)
  StopReason reason = StopReason::kMaxTokens;
  std::string stopString;      // the one matched, for kStopString
};

/// Called for each generated token with the text that became final with
/// it (often empty: an unfinished character, a possible stop string), and
/// once more at the end with token -1 and the rest. Returning false stops.
using TokenCallback = std::function<bool(int32_t token, std::string_view text)>;

/// The model's end-of-sequence ids: `eos_token_id` (a number or a list) of
/// the config the artifact was compiled from, at its top or under
/// text_config; none when the config has none.
std::vector<int32_t> modelEosTokens(const ModelInfo &model);

/// Generates from `prompt` on a one-sequence session (batch 1). Without a
/// tokenizer no text is made and stop strings are refused. `result` keeps
/// what was generated before an error.
Status generate(Session &session, const Tokenizer *tokenizer,
                const std::vector<int32_t> &prompt, const GenerateOptions &options,
                const TokenCallback &onToken, GenerateResult &result);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_TEXT_GENERATE_H

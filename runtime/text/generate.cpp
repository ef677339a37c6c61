//===- generate.cpp - The generation loop of one sequence -----------------===//

#include "runtime/text/generate.h"
#include "runtime/text/text_stream.h"
#include "runtime/weights/json.h"

#include <algorithm>
#include <climits>

namespace kimi::rt {

const char *stopReasonName(StopReason reason) {
  switch (reason) {
  case StopReason::kMaxTokens:
    return "length";
  case StopReason::kStopToken:
    return "stop_token";
  case StopReason::kStopString:
    return "stop_string";
  case StopReason::kCallback:
    return "callback";
  }
  return "?";
}

std::vector<int32_t> modelEosTokens(const ModelInfo &model) {
  std::vector<int32_t> ids;
  StatusOr<JsonValue> json = parseJson(model.configJson.data(), model.configJson.size());
  if (!json || !json->isObject())
    return ids;
  const JsonValue *eos = json->find("eos_token_id");
  if (!eos)
    if (const JsonValue *inner = json->find("text_config"))
      eos = inner->isObject() ? inner->find("eos_token_id") : nullptr;
  auto add = [&](const JsonValue &v) {
    if (v.isUint64 && v.uint64 <= static_cast<uint64_t>(INT32_MAX))
      ids.push_back(static_cast<int32_t>(v.uint64));
  };
  if (eos && eos->isArray())
    for (const JsonValue &v : eos->array)
      add(v);
  else if (eos)
    add(*eos);
  return ids;
}

Status generate(Session &session, const Tokenizer *tokenizer,
                const std::vector<int32_t> &prompt, const GenerateOptions &options,
                const TokenCallback &onToken, GenerateResult &result) {
  result = GenerateResult();
  if (session.batch() != 1)
    return invalidArgument("generate steps one sequence; the session steps " +
                           std::to_string(session.batch()));
  if (!tokenizer && !options.stopStrings.empty())
    return invalidArgument("stop strings need a tokenizer");
  if (options.maxNewTokens < 0)
    return invalidArgument("a negative token limit");
  KIMI_RETURN_IF_ERROR(validateSamplingParams(options.sampling));
  Sampler sampler(options.sampling);
  Utf8Stream utf8;
  StopStrings stops(options.stopStrings);
  auto emit = [&](int32_t token, const std::string &text) {
    result.text += text;
    return !onToken || onToken(token, text);
  };

  KIMI_ASSIGN_OR_RETURN(LogitsView logits, session.prefill(prompt, options.prefillRows));
  if (options.onLogits)
    options.onLogits(logits);
  bool ended = false;
  while (static_cast<int64_t>(result.tokens.size()) < options.maxNewTokens) {
    const float *row = logits.data + (logits.rows - 1) * logits.vocab;
    KIMI_ASSIGN_OR_RETURN(int32_t token, sampler.sample(row, logits.vocab));
    sampler.accept(token);
    result.tokens.push_back(token);
    if (std::find(options.stopTokens.begin(), options.stopTokens.end(), token) !=
        options.stopTokens.end()) {
      result.reason = StopReason::kStopToken;
      break;
    }
    std::string shown;
    bool stopped = false;
    if (tokenizer) {
      StatusOr<std::string_view> bytes = tokenizer->tokenBytes(token);
      if (!bytes)
        return bytes.takeStatus().addContext("the model generated a token the tokenizer lacks");
      if (options.showSpecialTokens || !tokenizer->isSpecial(token))
        shown = stops.push(utf8.push(*bytes), &stopped);
    }
    if (stopped) {
      result.reason = StopReason::kStopString;
      result.stopString = stops.matched();
      emit(token, shown);
      ended = true;
      break;
    }
    if (!emit(token, shown)) {
      result.reason = StopReason::kCallback;
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) == options.maxNewTokens)
      break;
    KIMI_ASSIGN_OR_RETURN(logits, session.decodeStep(token));
    if (options.onLogits)
      options.onLogits(logits);
  }
  std::string rest;
  if (!ended && tokenizer) {
    bool stopped = false;
    rest = stops.push(utf8.finish(), &stopped);
    if (stopped) {
      result.reason = StopReason::kStopString;
      result.stopString = stops.matched();
    } else {
      rest += stops.flush();
    }
  }
  emit(-1, rest);
  return Status::ok();
}

} // namespace kimi::rt

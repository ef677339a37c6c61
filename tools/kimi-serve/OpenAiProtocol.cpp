//===- OpenAiProtocol.cpp - OpenAI-style requests and responses -----------===//

#include "OpenAiProtocol.h"

#include "runtime/support/text.h"
#include "runtime/weights/json.h"

#include <algorithm>
#include <cmath>

using namespace kimi::rt;

namespace kimi::serve {

namespace {

constexpr size_t kMaxStops = 4, kMaxStopBytes = 256;
constexpr size_t kMaxMessages = 4096;

std::string kindName(const JsonValue &v) { return jsonKindName(v.kind); }

struct Reader {
  ApiError &error;
  bool fail(const std::string &param, const std::string &message, int status = 400) {
    error.status = status;
    error.param = param;
    error.message = message;
    return false;
  }
  bool number(const JsonValue &v, const std::string &name, double &out) {
    if (v.kind != JsonValue::Kind::kNumber || !std::isfinite(v.number))
      return fail(name, "'" + name + "' must be a finite number, not " + kindName(v));
    out = v.number;
    return true;
  }
  bool integer(const JsonValue &v, const std::string &name, int64_t lo, int64_t hi,
               int64_t &out) {
    if (v.kind != JsonValue::Kind::kNumber || v.number != std::floor(v.number) ||
        !(v.number >= double(lo) && v.number <= double(hi)))
      return fail(name, "'" + name + "' must be an integer in [" + std::to_string(lo) +
                            ", " + std::to_string(hi) + "]");
    out = static_cast<int64_t>(v.number);
    return true;
  }
  bool boolean(const JsonValue &v, const std::string &name, bool &out) {
    if (v.kind != JsonValue::Kind::kBool)
      return fail(name, "'" + name + "' must be a boolean, not " + kindName(v));
    out = v.boolean;
    return true;
  }
};

} // namespace

std::string ApiError::body() const {
  return "{\"error\": {\"message\": " + jsonQuoted(message) + ", \"type\": " +
         jsonQuoted(type) + ", \"param\": " + (param.empty() ? "null" : jsonQuoted(param)) +
         ", \"code\": " + (status == 429 ? "\"rate_limit_exceeded\"" : "null") + "}}";
}

bool parseRequest(Endpoint endpoint, const std::string &body, const ServedModel &model,
                  ApiRequest &out, ApiError &error) {
  Reader r{error};
  out = ApiRequest();
  out.endpoint = endpoint;
  StatusOr<JsonValue> parsed = parseJson(body.data(), body.size(), 32);
  if (!parsed)
    return r.fail("", "the body is not valid JSON: " + parsed.status().message());
  const JsonValue &json = *parsed;
  if (!json.isObject())
    return r.fail("", "the body must be a JSON object, not " + kindName(json));

  // OpenAI's defaults: temperature 1, top_p 1, 16 tokens for completions.
  SamplingParams &s = out.options.sampling;
  s.temperature = 1.0;
  int64_t maxTokens = endpoint == Endpoint::kCompletions ? 16 : -1;
  bool ignoreEos = false, havePrompt = false;
  std::vector<ChatMessage> messages;
  for (const auto &[key, v] : json.object) {
    if (key == "model") {
      if (!v.isString())
        return r.fail(key, "'model' must be a string");
      if (v.string != model.name)
        return r.fail(key, "the model '" + v.string + "' does not exist; this server serves '" +
                               model.name + "'", 404);
    } else if (key == "prompt" && endpoint == Endpoint::kCompletions) {
      havePrompt = true;
      if (v.isString()) {
        Status st = model.tokenizer->encode(v.string, SpecialText::kRecognize, out.prompt);
        if (!st.isOk())
          return r.fail(key, "'prompt': " + st.message());
      } else if (v.isArray() && !v.array.empty() &&
                 v.array[0].kind == JsonValue::Kind::kNumber) {
        for (const JsonValue &t : v.array) {
          int64_t id = 0;
          if (!r.integer(t, "prompt", 0, model.vocab - 1, id))
            return r.fail(key, "'prompt': token ids must be integers in [0, " +
                                   std::to_string(model.vocab) + ")");
          out.prompt.push_back(static_cast<int32_t>(id));
        }
      } else if (v.isArray() && v.array.size() == 1 && v.array[0].isString()) {
        Status st = model.tokenizer->encode(v.array[0].string, SpecialText::kRecognize,
                                            out.prompt);
        if (!st.isOk())
          return r.fail(key, "'prompt': " + st.message());
      } else {
        return r.fail(key, "'prompt' must be a string, a list of one string or a list "
                           "of token ids (one prompt a request)");
      }
    } else if (key == "messages" && endpoint == Endpoint::kChatCompletions) {
      if (!v.isArray() || v.array.empty() || v.array.size() > kMaxMessages)
        return r.fail(key, "'messages' must be a non-empty list (at most " +
                               std::to_string(kMaxMessages) + ")");
      for (size_t i = 0; i < v.array.size(); ++i) {
        const JsonValue &m = v.array[i];
        const std::string at = "messages[" + std::to_string(i) + "]";
        const JsonValue *role = m.isObject() ? m.find("role") : nullptr;
        const JsonValue *content = m.isObject() ? m.find("content") : nullptr;
        if (!role || !role->isString())
          return r.fail(at + ".role", "'" + at + ".role' must be a string");
        if (!content || !content->isString())
          return r.fail(at + ".content", "'" + at + ".content' must be a string");
        const JsonValue *name = m.find("name");
        if (name && !name->isString())
          return r.fail(at + ".name", "'" + at + ".name' must be a string");
        messages.push_back({role->string, content->string, name ? name->string : ""});
      }
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      if (v.kind == JsonValue::Kind::kNull)
        continue;
      if (!r.integer(v, key, 1, 1 << 24, maxTokens))
        return false;
    } else if (key == "temperature") {
      if (!r.number(v, key, s.temperature))
        return false;
    } else if (key == "top_p") {
      if (!r.number(v, key, s.topP))
        return false;
    } else if (key == "min_p") {
      if (!r.number(v, key, s.minP))
        return false;
    } else if (key == "top_k") {
      int64_t k = 0;
      if (!r.integer(v, key, -1, 1 << 24, k))
        return false;
      s.topK = k < 0 ? 0 : k; // vLLM: -1 is "all"
    } else if (key == "presence_penalty") {
      if (!r.number(v, key, s.presencePenalty))
        return false;
    } else if (key == "frequency_penalty") {
      if (!r.number(v, key, s.frequencyPenalty))
        return false;
    } else if (key == "seed") {
      if (v.kind == JsonValue::Kind::kNull)
        continue;
      int64_t seed = 0;
      if (!r.integer(v, key, INT64_MIN / 2, INT64_MAX / 2, seed))
        return false;
      s.seed = static_cast<uint64_t>(seed);
    } else if (key == "stop") {
      std::vector<std::string> stops;
      if (v.isString())
        stops.push_back(v.string);
      else if (v.isArray())
        for (const JsonValue &x : v.array) {
          if (!x.isString())
            return r.fail(key, "'stop' must be a string or a list of strings");
          stops.push_back(x.string);
        }
      else if (v.kind != JsonValue::Kind::kNull)
        return r.fail(key, "'stop' must be a string or a list of strings");
      if (stops.size() > kMaxStops)
        return r.fail(key, "'stop' holds at most " + std::to_string(kMaxStops) + " strings");
      for (const std::string &x : stops)
        if (x.empty() || x.size() > kMaxStopBytes)
          return r.fail(key, "each stop string must have 1 to " +
                                 std::to_string(kMaxStopBytes) + " bytes");
      out.options.stopStrings = stops;
    } else if (key == "stream") {
      if (!r.boolean(v, key, out.stream))
        return false;
    } else if (key == "stream_options") {
      if (v.kind == JsonValue::Kind::kNull)
        continue;
      const JsonValue *usage = v.isObject() ? v.find("include_usage") : nullptr;
      if (!v.isObject() || (usage && !r.boolean(*usage, "stream_options.include_usage",
                                                out.includeUsage)))
        return r.fail(key, "'stream_options' must be an object with a boolean "
                           "'include_usage'");
    } else if (key == "n") {
      int64_t n = 0;
      if (!r.integer(v, key, 1, 1, n))
        return r.fail(key, "'n': one choice a request is supported");
    } else if (key == "ignore_eos") {
      if (!r.boolean(v, key, ignoreEos))
        return false;
    } else if (key == "skip_special_tokens") {
      bool skip = true;
      if (!r.boolean(v, key, skip))
        return false;
      out.options.showSpecialTokens = !skip;
    } else if (key == "user") {
      // Accepted and unused, as an identifier for abuse monitoring.
    } else if (key == "logprobs" || key == "top_logprobs" || key == "echo" ||
               key == "logit_bias" || key == "best_of" || key == "suffix" ||
               key == "tools" || key == "tool_choice" || key == "response_format" ||
               key == "functions" || key == "function_call") {
      if (v.kind == JsonValue::Kind::kNull || (v.kind == JsonValue::Kind::kBool && !v.boolean))
        continue;
      return r.fail(key, "'" + key + "' is not supported by kimi-serve");
    } else {
      return r.fail(key, "unknown field '" + key + "'");
    }
  }
  if (endpoint == Endpoint::kCompletions && !havePrompt)
    return r.fail("prompt", "'prompt' is required");
  if (endpoint == Endpoint::kChatCompletions) {
    if (messages.empty())
      return r.fail("messages", "'messages' is required");
    Status st = encodeChat(*model.tokenizer, messages, ChatOptions(), out.prompt);
    if (!st.isOk())
      return r.fail("messages", st.message());
    out.options.stopTokens.push_back(*chatEndToken(*model.tokenizer));
  }
  if (out.prompt.empty())
    return r.fail("prompt", "the prompt is empty");
  for (int32_t id : out.prompt)
    if (id < 0 || id >= model.vocab)
      return r.fail("prompt", "the prompt holds token " + std::to_string(id) +
                                  ", outside the model's " + std::to_string(model.vocab) +
                                  " ids");
  const int64_t room = model.maxPositions > 0
                           ? model.maxPositions - static_cast<int64_t>(out.prompt.size())
                           : (1 << 24);
  if (room <= 0)
    return r.fail("prompt", "the prompt has " + std::to_string(out.prompt.size()) +
                                " tokens; the model takes at most " +
                                std::to_string(model.maxPositions));
  if (maxTokens < 0) // chat without max_tokens: the room left, at most 4096
    maxTokens = std::min<int64_t>(room, 4096);
  if (maxTokens > room)
    return r.fail("max_tokens", "the prompt (" + std::to_string(out.prompt.size()) +
                                    " tokens) and max_tokens (" + std::to_string(maxTokens) +
                                    ") exceed the model's " +
                                    std::to_string(model.maxPositions) + " positions");
  out.options.maxNewTokens = maxTokens;
  if (!ignoreEos)
    for (int32_t id : model.eosTokens)
      out.options.stopTokens.push_back(id);
  Status valid = validateSamplingParams(s);
  if (!valid.isOk())
    return r.fail("", valid.message());
  return true;
}

const char *finishReason(StopReason reason) {
  return reason == StopReason::kMaxTokens ? "length" : "stop";
}

namespace {

std::string idsJson(const std::vector<int32_t> &ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i)
    out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

std::string usageJson(const ApiRequest &request, const GenerateResult &result) {
  const size_t p = request.prompt.size(), c = result.tokens.size();
  return "{\"prompt_tokens\": " + std::to_string(p) + ", \"completion_tokens\": " +
         std::to_string(c) + ", \"total_tokens\": " + std::to_string(p + c) + "}";
}

std::string head(const ApiRequest &request, const ServedModel &model, const std::string &id,
                 int64_t created, bool chunk) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  return "{\"id\": " + jsonQuoted(id) + ", \"object\": \"" +
         (chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion") +
         "\", \"created\": " + std::to_string(created) + ", \"model\": " +
         jsonQuoted(model.name);
}

} // namespace

std::string responseJson(const ApiRequest &request, const ServedModel &model,
                         const std::string &id, int64_t created,
                         const GenerateResult &result) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  std::string choice = "{\"index\": 0, ";
  if (chat)
    choice += "\"message\": {\"role\": \"assistant\", \"content\": " +
              jsonQuoted(result.text) + "}, ";
  else
    choice += "\"text\": " + jsonQuoted(result.text) + ", \"logprobs\": null, ";
  choice += "\"finish_reason\": \"" + std::string(finishReason(result.reason)) +
            "\", \"token_ids\": " + idsJson(result.tokens) + "}";
  return head(request, model, id, created, false) + ", \"choices\": [" + choice +
         "], \"usage\": " + usageJson(request, result) + "}";
}

std::string streamChunk(const ApiRequest &request, const ServedModel &model,
                        const std::string &id, int64_t created, const std::string &text,
                        const std::vector<int32_t> &tokens, const char *finish, bool first,
                        const GenerateResult *usage) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  std::string choice = "{\"index\": 0, ";
  if (chat) {
    std::string delta;
    if (first)
      delta += "\"role\": \"assistant\"";
    if (!text.empty() || (first && !finish))
      delta += std::string(delta.empty() ? "" : ", ") + "\"content\": " + jsonQuoted(text);
    choice += "\"delta\": {" + delta + "}, ";
  } else {
    choice += "\"text\": " + jsonQuoted(text) + ", \"logprobs\": null, ";
  }
  choice += "\"finish_reason\": " +
            (finish ? "\"" + std::string(finish) + "\"" : std::string("null")) +
            ", \"token_ids\": " + idsJson(tokens) + "}";
  std::string out = head(request, model, id, created, true) + ", \"choices\": [" + choice + "]";
  if (request.includeUsage)
    out += ", \"usage\": " + (usage ? usageJson(request, *usage) : std::string("null"));
  return "data: " + out + "}\n\n";
}

std::string modelsJson(const ServedModel &model) {
  return "{\"object\": \"list\", \"data\": [{\"id\": " + jsonQuoted(model.name) +
         ", \"object\": \"model\", \"created\": " + std::to_string(model.created) +
         ", \"owned_by\": \"kimi\", \"max_model_len\": " +
         std::to_string(model.maxPositions) + "}]}";
}

} // namespace kimi::serve

//===- OpenAiProtocol.h - OpenAI-style requests and responses ---*- C++ -*-===//
//
// The JSON of `POST /v1/completions` and `POST /v1/chat/completions`, read
// into a generation request or refused with an OpenAI-style error (the
// status code, a message naming the field, and the field), and the
// responses and server-sent-event chunks written back. No HTTP here: the
// server (kimi-serve.cpp) and the fuzz target both call these.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TOOLS_KIMI_SERVE_OPENAIPROTOCOL_H
#define KIMI_TOOLS_KIMI_SERVE_OPENAIPROTOCOL_H

#include "runtime/text/chat_format.h"
#include "runtime/text/generate.h"
#include "runtime/text/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kimi::serve {

/// What the endpoints need to know of the model they serve.
struct ServedModel {
  std::string name;               // the `model` a request must name
  const rt::Tokenizer *tokenizer = nullptr;
  int64_t vocab = 0;
  int64_t maxPositions = 0;       // prompt + max_tokens at most (0: no limit)
  std::vector<int32_t> eosTokens; // the model's eos_token_id
  int64_t created = 0;            // seconds since the epoch, for /v1/models
};

enum class Endpoint { kCompletions, kChatCompletions };

/// A request refused: HTTP status and the OpenAI error body's fields.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param; // the field at fault, or empty
  std::string body() const;
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<int32_t> prompt;
  rt::GenerateOptions options;
  bool stream = false;
  bool includeUsage = false; // stream_options.include_usage
};

/// Reads a request body; on error fills `error` and returns false. Limits:
/// one choice (n = 1), stop strings at most 4 of at most 256 bytes, the
/// prompt and max_tokens within the model's positions, token ids within
/// the vocabulary, messages with string contents.
bool parseRequest(Endpoint endpoint, const std::string &body, const ServedModel &model,
                  ApiRequest &out, ApiError &error);

/// "length" or "stop" (a stop token or string).
const char *finishReason(rt::StopReason reason);

/// The whole response of a finished request.
std::string responseJson(const ApiRequest &request, const ServedModel &model,
                         const std::string &id, int64_t created,
                         const rt::GenerateResult &result);
/// One `data: {...}\n\n` event of a streamed response: text so far not yet
/// sent and the tokens generated since the last event (`token_ids`, a kimi
/// extension; first: the assistant role for chat), or the final one with
/// finish_reason (and usage when asked for).
std::string streamChunk(const ApiRequest &request, const ServedModel &model,
                        const std::string &id, int64_t created, const std::string &text,
                        const std::vector<int32_t> &tokens, const char *finish, bool first,
                        const rt::GenerateResult *usage);

/// GET /v1/models.
std::string modelsJson(const ServedModel &model);

} // namespace kimi::serve

#endif // KIMI_TOOLS_KIMI_SERVE_OPENAIPROTOCOL_H

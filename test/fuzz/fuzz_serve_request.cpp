//===- fuzz_serve_request.cpp - libFuzzer target: kimi-serve's requests ---===//
//
// The body of POST /v1/completions (first byte even) or
// /v1/chat/completions (odd), after that byte: any bytes are a request or
// an OpenAI-style error with a 4xx status. An accepted request must be
// within the model (ids in the vocabulary, prompt + max_tokens within the
// positions), and the responses and stream chunks written for it must be
// valid JSON. A failed property aborts.
//
//===----------------------------------------------------------------------===//

#include "tools/kimi-serve/OpenAiProtocol.h"
#include "runtime/weights/json.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

using namespace kimi::rt;
using namespace kimi::serve;

namespace {

const Tokenizer &tinyTokenizer() {
  static std::unique_ptr<Tokenizer> t = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b)
      tokens.push_back(std::string(1, static_cast<char>(b)));
    tokens.push_back("he");
    std::vector<SpecialToken> specials;
    const char *names[] = {"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>",
                           "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"};
    for (int i = 0; i < 7; ++i)
      specials.push_back({257 + i, names[i]});
    TokenizerOptions o;
    o.reservedSpecialTokens = 0;
    StatusOr<BpeVocab> v = BpeVocab::fromTokens(tokens);
    StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::create(*v, specials, o);
    if (!tok)
      abort();
    return std::move(*tok);
  }();
  return *t;
}

bool validJson(const std::string &s) { return parseJson(s.data(), s.size()).isOk(); }

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  ServedModel model;
  model.name = "m";
  model.tokenizer = &tinyTokenizer();
  model.vocab = 264;
  model.maxPositions = 512;
  model.eosTokens = {258};
  const Endpoint endpoint = data[0] % 2 ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  const std::string body(reinterpret_cast<const char *>(data) + 1, size - 1);
  ApiRequest request;
  ApiError error;
  if (!parseRequest(endpoint, body, model, request, error)) {
    if (error.status < 400 || error.status > 499 || error.message.empty() ||
        !validJson(error.body()))
      abort();
    return 0;
  }
  if (request.prompt.empty() || request.options.maxNewTokens < 1 ||
      static_cast<int64_t>(request.prompt.size()) + request.options.maxNewTokens >
          model.maxPositions)
    abort();
  for (int32_t id : request.prompt)
    if (id < 0 || id >= model.vocab)
      abort();
  GenerateResult result;
  result.tokens = {104, 258};
  result.text = std::string(body.substr(0, 16));
  result.reason = StopReason::kStopToken;
  const std::string whole = responseJson(request, model, "id\"1", 7, result);
  const std::string chunk = streamChunk(request, model, "id", 7, result.text, {104}, nullptr, true, nullptr);
  const std::string last = streamChunk(request, model, "id", 7, "", {}, "stop", false, &result);
  if (!validJson(whole) || chunk.compare(0, 6, "data: ") != 0 ||
      !validJson(chunk.substr(6)) || !validJson(last.substr(6)))
    abort();
  return 0;
}

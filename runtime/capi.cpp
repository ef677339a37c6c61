//===- capi.cpp - C API of the kimi runtime -------------------------------===//

#include "kimi_runtime.h"

#include "runtime/artifact/reader.h"
#include "runtime/comm/rank_connection.h"
#include "runtime/session/executable.h"
#include "runtime/session/session.h"
#include "runtime/text/chat_format.h"
#include "runtime/text/generate.h"
#include "runtime/text/sampler.h"
#include "runtime/text/tokenizer.h"
#include "runtime/weights/weight_loader.h"

#include <memory>
#include <string>

using namespace kimi::rt;

struct kimi_artifact {
  std::shared_ptr<const ArtifactSpec> spec;
};

struct kimi_session {
  RankConnection ranks; // first: the executable goes before its communicator
  std::shared_ptr<const Executable> executable;
  std::unique_ptr<Session> session;
};

struct kimi_state {
  SessionSnapshot snapshot;
};

struct kimi_tokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
};

struct kimi_sampler {
  Sampler sampler;
};

namespace {

thread_local std::string lastError;

kimi_status toC(StatusCode code) {
  switch (code) {
  case StatusCode::kOk: return KIMI_OK;
  case StatusCode::kInvalidArgument: return KIMI_ERROR_INVALID_ARGUMENT;
  case StatusCode::kIo: return KIMI_ERROR_IO;
  case StatusCode::kInvalidArtifact: return KIMI_ERROR_INVALID_ARTIFACT;
  case StatusCode::kInvalidWeights: return KIMI_ERROR_INVALID_WEIGHTS;
  case StatusCode::kModule: return KIMI_ERROR_MODULE;
  case StatusCode::kExecution: return KIMI_ERROR_EXECUTION;
  case StatusCode::kFailedPrecondition: return KIMI_ERROR_FAILED_PRECONDITION;
  }
  return KIMI_ERROR_EXECUTION;
}

kimi_status report(const Status &s) {
  if (s.isOk())
    return KIMI_OK;
  lastError = s.message();
  return toC(s.code());
}

kimi_status nullArgument(const char *function, const char *argument) {
  return report(invalidArgument(std::string(function) + ": " + argument +
                                " is NULL"));
}

} // namespace

extern "C" {

const char *kimi_last_error(void) { return lastError.c_str(); }

const char *kimi_status_name(kimi_status status) {
  switch (status) {
  case KIMI_OK: return "KIMI_OK";
  case KIMI_ERROR_INVALID_ARGUMENT: return "KIMI_ERROR_INVALID_ARGUMENT";
  case KIMI_ERROR_IO: return "KIMI_ERROR_IO";
  case KIMI_ERROR_INVALID_ARTIFACT: return "KIMI_ERROR_INVALID_ARTIFACT";
  case KIMI_ERROR_INVALID_WEIGHTS: return "KIMI_ERROR_INVALID_WEIGHTS";
  case KIMI_ERROR_MODULE: return "KIMI_ERROR_MODULE";
  case KIMI_ERROR_EXECUTION: return "KIMI_ERROR_EXECUTION";
  case KIMI_ERROR_FAILED_PRECONDITION: return "KIMI_ERROR_FAILED_PRECONDITION";
  }
  return "KIMI_ERROR_UNKNOWN";
}

static kimi_status openSpec(StatusOr<ArtifactSpec> spec, kimi_artifact **out) {
  if (!spec.isOk())
    return report(spec.status());
  *out = new kimi_artifact{
      std::make_shared<const ArtifactSpec>(std::move(spec.value()))};
  return KIMI_OK;
}

kimi_status kimi_artifact_open(const char *path, kimi_artifact **out) {
  if (!path)
    return nullArgument("kimi_artifact_open", "path");
  if (!out)
    return nullArgument("kimi_artifact_open", "out");
  return openSpec(ArtifactReader::readFile(path), out);
}

kimi_status kimi_artifact_open_bytes(const void *data, size_t size,
                                     kimi_artifact **out) {
  if (!data)
    return nullArgument("kimi_artifact_open_bytes", "data");
  if (!out)
    return nullArgument("kimi_artifact_open_bytes", "out");
  return openSpec(ArtifactReader::readBytes(data, size), out);
}

void kimi_artifact_close(kimi_artifact *artifact) { delete artifact; }

int64_t kimi_artifact_vocab_size(const kimi_artifact *artifact) {
  return artifact ? artifact->spec->model.vocabSize : 0;
}
const char *kimi_artifact_model_type(const kimi_artifact *artifact) {
  return artifact ? artifact->spec->model.modelType.c_str() : "";
}
const char *kimi_artifact_layer_kinds(const kimi_artifact *artifact) {
  return artifact ? artifact->spec->model.layerKinds.c_str() : "";
}
const char *kimi_artifact_config_json(const kimi_artifact *artifact) {
  return artifact ? artifact->spec->model.configJson.c_str() : "";
}

int32_t kimi_artifact_num_ranks(const kimi_artifact *artifact) {
  return artifact ? artifact->spec->target.numRanks : 0;
}

namespace {
kimi_status createSession(const char *function, const kimi_artifact *artifact,
                          const char *const *weight_paths, size_t num_paths,
                          const RankOptions &rankOptions, kimi_session **out) {
  if (!artifact)
    return nullArgument(function, "artifact");
  if (!out)
    return nullArgument(function, "out");
  if (!weight_paths && num_paths)
    return nullArgument(function, "weight_paths");
  std::vector<std::string> paths;
  for (size_t i = 0; i < num_paths; ++i) {
    if (!weight_paths[i])
      return report(invalidArgument(std::string(function) + ": weight_paths[" +
                                    std::to_string(i) + "] is NULL"));
    paths.push_back(weight_paths[i]);
  }
  if (artifact->spec->target.numRanks > 1 && rankOptions.rank < 0)
    return report(invalidArgument(
        std::string(function) + ": the artifact is partitioned over " +
        std::to_string(artifact->spec->target.numRanks) +
        " ranks: create each rank's session with kimi_session_create_rank"));
  StatusOr<RankConnection> ranks = connectRanks(*artifact->spec, rankOptions);
  if (!ranks.isOk()) {
    Status e = ranks.takeStatus();
    return report(e.addContext(function));
  }
  StatusOr<std::unique_ptr<WeightLoader>> loader = WeightLoader::open(paths);
  if (!loader.isOk())
    return report(loader.status());
  StatusOr<std::shared_ptr<Executable>> exe =
      createExecutable(artifact->spec, *loader.value(), ranks->comm.get(),
                       ranks->deviceOrdinal);
  if (!exe.isOk())
    return report(exe.status());
  StatusOr<std::unique_ptr<Session>> session = Session::create(exe.value());
  if (!session.isOk())
    return report(session.status());
  *out = new kimi_session{std::move(ranks.value()), std::move(exe.value()),
                          std::move(session.value())};
  return KIMI_OK;
}
} // namespace

kimi_status kimi_session_create(const kimi_artifact *artifact,
                                const char *const *weight_paths,
                                size_t num_paths, kimi_session **out) {
  return createSession("kimi_session_create", artifact, weight_paths,
                       num_paths, RankOptions(), out);
}

kimi_status kimi_session_create_rank(const kimi_artifact *artifact,
                                     const char *const *weight_paths,
                                     size_t num_paths, int32_t rank,
                                     const char *store_path, int32_t device,
                                     kimi_session **out) {
  if (rank < 0)
    return report(invalidArgument("kimi_session_create_rank: rank " +
                                  std::to_string(rank) + " is negative"));
  RankOptions o;
  o.rank = rank;
  o.store = store_path ? store_path : "";
  o.device = device;
  return createSession("kimi_session_create_rank", artifact, weight_paths,
                       num_paths, o, out);
}

void kimi_session_destroy(kimi_session *session) { delete session; }

namespace {
kimi_status prefillWith(const char *function, kimi_session *session,
                        const int32_t *tokens, size_t count,
                        PrefillLogits which) {
  if (!session)
    return nullArgument(function, "session");
  if (!tokens && count)
    return nullArgument(function, "tokens");
  StatusOr<LogitsView> r = session->session->prefill(tokens, count, which);
  return report(r.isOk() ? Status::ok() : r.status());
}
} // namespace

kimi_status kimi_session_prefill(kimi_session *session, const int32_t *tokens,
                                 size_t count) {
  return prefillWith("kimi_session_prefill", session, tokens, count,
                     PrefillLogits::kAll);
}

kimi_status kimi_session_prefill_last(kimi_session *session,
                                      const int32_t *tokens, size_t count) {
  return prefillWith("kimi_session_prefill_last", session, tokens, count,
                     PrefillLogits::kLast);
}

int64_t kimi_session_batch(const kimi_session *session) {
  return session ? session->session->batch() : 0;
}

kimi_status kimi_session_decode(kimi_session *session, const int32_t *tokens,
                                size_t count) {
  if (!session)
    return nullArgument("kimi_session_decode", "session");
  if (!tokens)
    return nullArgument("kimi_session_decode", "tokens");
  StatusOr<LogitsView> r = session->session->decode(tokens, count);
  return report(r.isOk() ? Status::ok() : r.status());
}

kimi_status kimi_session_decode_step(kimi_session *session, int32_t token) {
  if (!session)
    return nullArgument("kimi_session_decode_step", "session");
  StatusOr<LogitsView> r = session->session->decodeStep(token);
  return report(r.isOk() ? Status::ok() : r.status());
}

kimi_status kimi_session_logits(const kimi_session *session, const float **logits,
                                size_t *rows, size_t *vocab) {
  if (!session)
    return nullArgument("kimi_session_logits", "session");
  if (!logits)
    return nullArgument("kimi_session_logits", "logits");
  LogitsView v = session->session->logits();
  *logits = v.data;
  if (rows)
    *rows = static_cast<size_t>(v.rows);
  if (vocab)
    *vocab = static_cast<size_t>(v.vocab);
  return KIMI_OK;
}

int64_t kimi_session_vocab_size(const kimi_session *session) {
  return session ? session->session->vocabSize() : 0;
}

int64_t kimi_session_length(const kimi_session *session) {
  return session ? session->session->length() : 0;
}

kimi_status kimi_session_save_state(const kimi_session *session,
                                    kimi_state **out) {
  if (!session)
    return nullArgument("kimi_session_save_state", "session");
  if (!out)
    return nullArgument("kimi_session_save_state", "out");
  StatusOr<SessionSnapshot> snap = session->session->saveState();
  if (!snap.isOk())
    return report(snap.status());
  *out = new kimi_state{std::move(snap.value())};
  return KIMI_OK;
}

kimi_status kimi_session_restore_state(kimi_session *session,
                                       const kimi_state *state) {
  if (!session)
    return nullArgument("kimi_session_restore_state", "session");
  if (!state)
    return nullArgument("kimi_session_restore_state", "state");
  return report(session->session->restoreState(state->snapshot));
}

void kimi_state_free(kimi_state *state) { delete state; }

int64_t kimi_state_bytes(const kimi_state *state) {
  return state ? state->snapshot.bytes() : 0;
}

kimi_status kimi_session_counters(const kimi_session *session,
                                  kimi_counters *out) {
  if (!session)
    return nullArgument("kimi_session_counters", "session");
  if (!out)
    return nullArgument("kimi_session_counters", "out");
  const SessionCounters &c = session->session->counters();
  out->prefill_calls = c.prefillCalls;
  out->decode_calls = c.decodeCalls;
  out->prefill_tokens = c.prefillTokens;
  out->decode_tokens = c.decodeTokens;
  out->prefill_seconds = c.prefillSeconds;
  out->decode_seconds = c.decodeSeconds;
  out->current_bytes = c.currentBytes;
  out->peak_bytes = c.peakBytes;
  out->weight_bytes = session->executable->weightBytes();
  out->weight_load_seconds = session->executable->weightLoadSeconds();
  return KIMI_OK;
}

/*--- Text ---------------------------------------------------------------*/

namespace {

SamplingParams fromC(const kimi_sampling_params &p) {
  SamplingParams q;
  q.temperature = p.temperature;
  q.topK = p.top_k;
  q.topP = p.top_p;
  q.minP = p.min_p;
  q.presencePenalty = p.presence_penalty;
  q.frequencyPenalty = p.frequency_penalty;
  q.seed = p.seed;
  return q;
}

/// Copies `ids` out when they fit; *count always says how many there are.
kimi_status copyIds(const char *function, const std::vector<int32_t> &ids,
                    int32_t *out, size_t capacity, size_t *count) {
  *count = ids.size();
  if (ids.size() > capacity)
    return report(invalidArgument(std::string(function) + ": " +
                                  std::to_string(ids.size()) +
                                  " ids do not fit a capacity of " +
                                  std::to_string(capacity)));
  std::copy(ids.begin(), ids.end(), out);
  return KIMI_OK;
}

} // namespace

kimi_status kimi_tokenizer_open(const char *dir, kimi_tokenizer **out) {
  if (!dir)
    return nullArgument("kimi_tokenizer_open", "dir");
  if (!out)
    return nullArgument("kimi_tokenizer_open", "out");
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::load(dir);
  if (!t)
    return report(t.status());
  *out = new kimi_tokenizer{std::move(*t)};
  return KIMI_OK;
}

void kimi_tokenizer_close(kimi_tokenizer *tokenizer) { delete tokenizer; }

int32_t kimi_tokenizer_size(const kimi_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->tokenizer->size() : 0;
}

int32_t kimi_tokenizer_special_id(const kimi_tokenizer *tokenizer, const char *text) {
  return tokenizer && text ? tokenizer->tokenizer->specialId(text) : -1;
}

kimi_status kimi_tokenize(const kimi_tokenizer *tokenizer, const char *text, size_t length,
                          int parse_special, int32_t *ids, size_t capacity,
                          size_t *count) {
  if (!tokenizer)
    return nullArgument("kimi_tokenize", "tokenizer");
  if (!text && length)
    return nullArgument("kimi_tokenize", "text");
  if (!count)
    return nullArgument("kimi_tokenize", "count");
  if (!ids && capacity)
    return nullArgument("kimi_tokenize", "ids");
  std::vector<int32_t> out;
  Status s = tokenizer->tokenizer->encode(
      std::string_view(text ? text : "", length),
      parse_special ? SpecialText::kRecognize : SpecialText::kAsText, out);
  if (!s.isOk())
    return report(s);
  return copyIds("kimi_tokenize", out, ids, capacity, count);
}

kimi_status kimi_detokenize(const kimi_tokenizer *tokenizer, const int32_t *ids,
                            size_t count, char *text, size_t capacity, size_t *length) {
  if (!tokenizer)
    return nullArgument("kimi_detokenize", "tokenizer");
  if (!ids && count)
    return nullArgument("kimi_detokenize", "ids");
  if (!length)
    return nullArgument("kimi_detokenize", "length");
  if (!text && capacity)
    return nullArgument("kimi_detokenize", "text");
  std::string bytes;
  Status s = tokenizer->tokenizer->decode(ids, count, bytes);
  if (!s.isOk())
    return report(s);
  *length = bytes.size();
  if (bytes.size() > capacity)
    return report(invalidArgument("kimi_detokenize: " + std::to_string(bytes.size()) +
                                  " bytes do not fit a capacity of " +
                                  std::to_string(capacity)));
  std::copy(bytes.begin(), bytes.end(), text);
  return KIMI_OK;
}

kimi_status kimi_chat_encode(const kimi_tokenizer *tokenizer,
                             const kimi_chat_message *messages, size_t num_messages,
                             const char *system_prompt, int add_generation_prompt,
                             int32_t *ids, size_t capacity, size_t *count) {
  if (!tokenizer)
    return nullArgument("kimi_chat_encode", "tokenizer");
  if (!messages && num_messages)
    return nullArgument("kimi_chat_encode", "messages");
  if (!count)
    return nullArgument("kimi_chat_encode", "count");
  if (!ids && capacity)
    return nullArgument("kimi_chat_encode", "ids");
  std::vector<ChatMessage> list;
  for (size_t i = 0; i < num_messages; ++i) {
    if (!messages[i].role || !messages[i].content)
      return report(invalidArgument("kimi_chat_encode: message " + std::to_string(i) +
                                    " has a NULL role or content"));
    list.push_back({messages[i].role, messages[i].content, ""});
  }
  ChatOptions options;
  options.addGenerationPrompt = add_generation_prompt != 0;
  if (system_prompt)
    options.defaultSystemPrompt = system_prompt;
  std::vector<int32_t> out;
  Status s = encodeChat(*tokenizer->tokenizer, list, options, out);
  if (!s.isOk())
    return report(s);
  return copyIds("kimi_chat_encode", out, ids, capacity, count);
}

void kimi_sampling_params_default(kimi_sampling_params *params) {
  if (!params)
    return;
  SamplingParams d;
  *params = {d.temperature, d.topK, d.topP, d.minP, d.presencePenalty,
             d.frequencyPenalty, d.seed};
}

kimi_status kimi_sampler_create(const kimi_sampling_params *params, kimi_sampler **out) {
  if (!params)
    return nullArgument("kimi_sampler_create", "params");
  if (!out)
    return nullArgument("kimi_sampler_create", "out");
  SamplingParams p = fromC(*params);
  Status s = validateSamplingParams(p);
  if (!s.isOk())
    return report(s);
  *out = new kimi_sampler{Sampler(p)};
  return KIMI_OK;
}

void kimi_sampler_destroy(kimi_sampler *sampler) { delete sampler; }

kimi_status kimi_sampler_sample(kimi_sampler *sampler, const float *logits, int64_t vocab,
                                int32_t *token) {
  if (!sampler)
    return nullArgument("kimi_sampler_sample", "sampler");
  if (!logits)
    return nullArgument("kimi_sampler_sample", "logits");
  if (!token)
    return nullArgument("kimi_sampler_sample", "token");
  StatusOr<int32_t> t = sampler->sampler.sample(logits, vocab);
  if (!t)
    return report(t.status());
  sampler->sampler.accept(*t);
  *token = *t;
  return KIMI_OK;
}

void kimi_generate_options_default(kimi_generate_options *options) {
  if (!options)
    return;
  *options = kimi_generate_options();
  kimi_sampling_params_default(&options->sampling);
  options->max_new_tokens = GenerateOptions().maxNewTokens;
}

kimi_status kimi_generate(kimi_session *session, const kimi_tokenizer *tokenizer,
                          const int32_t *prompt, size_t prompt_length,
                          const kimi_generate_options *options,
                          kimi_token_callback callback, void *user,
                          kimi_stop_reason *reason, size_t *generated) {
  if (!session)
    return nullArgument("kimi_generate", "session");
  if (!prompt && prompt_length)
    return nullArgument("kimi_generate", "prompt");
  if (!options)
    return nullArgument("kimi_generate", "options");
  if (options->num_stop_tokens && !options->stop_tokens)
    return nullArgument("kimi_generate", "options->stop_tokens");
  if (options->num_stop_strings && !options->stop_strings)
    return nullArgument("kimi_generate", "options->stop_strings");
  GenerateOptions o;
  o.sampling = fromC(options->sampling);
  o.maxNewTokens = options->max_new_tokens;
  o.showSpecialTokens = options->show_special_tokens != 0;
  o.stopTokens.assign(options->stop_tokens,
                      options->stop_tokens + options->num_stop_tokens);
  for (size_t i = 0; i < options->num_stop_strings; ++i) {
    if (!options->stop_strings[i])
      return report(invalidArgument("kimi_generate: stop string " + std::to_string(i) +
                                    " is NULL"));
    o.stopStrings.push_back(options->stop_strings[i]);
  }
  GenerateResult result;
  TokenCallback onToken;
  if (callback)
    onToken = [&](int32_t token, std::string_view text) {
      return callback(token, text.data(), text.size(), user) != 0;
    };
  Status s = generate(*session->session, tokenizer ? tokenizer->tokenizer.get() : nullptr,
                      std::vector<int32_t>(prompt, prompt + prompt_length), o, onToken,
                      result);
  if (generated)
    *generated = result.tokens.size();
  if (!s.isOk())
    return report(s);
  if (reason)
    *reason = static_cast<kimi_stop_reason>(result.reason);
  return KIMI_OK;
}

} // extern "C"

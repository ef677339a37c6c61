/*===- kimi_runtime.h - C API of the kimi runtime ---------------------------===
 *
 * Embeds the kimi runtime in any C or C++ program: open a compiled artifact
 * (`.kimi`), create sessions with the model's safetensors weights, prefill a
 * prompt, decode token by token, read logits, save and restore the sequence
 * state for prefix reuse, read timing counters; turn text into token ids and
 * back (the released tiktoken.model format), encode a chat, sample, and run
 * a generation loop that streams text through a callback.
 *
 * Conventions
 *  - Every function that can fail returns a kimi_status; KIMI_OK is 0. On
 *    failure kimi_last_error() returns a message that says what is wrong and
 *    where; it is per thread and valid until the next failing call on that
 *    thread. Output parameters are written only on success.
 *  - Handles are opaque. An artifact is immutable and may be shared by
 *    threads; a session (and a state) must be used by one thread at a time.
 *    Different sessions may run concurrently.
 *  - A session keeps its artifact alive: kimi_artifact_close() may be called
 *    while sessions created from it still exist.
 *  - Destroy/close/free functions accept NULL.
 *
 * See docs/runtime-api.md.
 *===------------------------------------------------------------------------===*/

#ifndef KIMI_RUNTIME_H
#define KIMI_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KIMI_API __attribute__((visibility("default")))
#else
#define KIMI_API
#endif

#define KIMI_RUNTIME_VERSION_MAJOR 0
#define KIMI_RUNTIME_VERSION_MINOR 1

typedef enum kimi_status {
  KIMI_OK = 0,
  KIMI_ERROR_INVALID_ARGUMENT = 1,  /* bad token id, null pointer, ... */
  KIMI_ERROR_IO = 2,                /* file cannot be opened / read / mapped */
  KIMI_ERROR_INVALID_ARTIFACT = 3,  /* artifact corrupt or inconsistent */
  KIMI_ERROR_INVALID_WEIGHTS = 4,   /* safetensors malformed, tensor missing/mismatched */
  KIMI_ERROR_MODULE = 5,            /* shared object cannot load, symbol missing */
  KIMI_ERROR_EXECUTION = 6,         /* compiled code returned something inconsistent */
  KIMI_ERROR_FAILED_PRECONDITION = 7 /* call out of order, e.g. decode before prefill */
} kimi_status;

typedef struct kimi_artifact kimi_artifact;
typedef struct kimi_session kimi_session;
typedef struct kimi_state kimi_state;

typedef struct kimi_counters {
  int64_t prefill_calls;
  int64_t decode_calls;
  int64_t prefill_tokens;
  int64_t decode_tokens;
  double prefill_seconds;
  double decode_seconds;
  int64_t current_bytes; /* states + caches + logits held by the session now */
  int64_t peak_bytes;    /* the most it held so far */
  int64_t weight_bytes;  /* bytes of weights loaded for the session */
  double weight_load_seconds;
} kimi_counters;

/* The message of the last failing call on this thread ("" if none). */
KIMI_API const char *kimi_last_error(void);
/* "KIMI_OK", "KIMI_ERROR_IO", ... */
KIMI_API const char *kimi_status_name(kimi_status status);

/* Opens and verifies an artifact file / bytes (copied). */
KIMI_API kimi_status kimi_artifact_open(const char *path, kimi_artifact **out);
KIMI_API kimi_status kimi_artifact_open_bytes(const void *data, size_t size,
                                              kimi_artifact **out);
KIMI_API void kimi_artifact_close(kimi_artifact *artifact);
KIMI_API int64_t kimi_artifact_vocab_size(const kimi_artifact *artifact);
/* Model type, layer kinds ("KKKM..."), config JSON; owned by the artifact. */
KIMI_API const char *kimi_artifact_model_type(const kimi_artifact *artifact);
KIMI_API const char *kimi_artifact_layer_kinds(const kimi_artifact *artifact);
KIMI_API const char *kimi_artifact_config_json(const kimi_artifact *artifact);
/* Ranks the artifact is partitioned over (1 unless compiled with --grid). */
KIMI_API int32_t kimi_artifact_num_ranks(const kimi_artifact *artifact);

/* Loads the model code and fills every weight from the safetensors files
 * (`num_paths` of them; a sharded checkpoint lists all shards). */
KIMI_API kimi_status kimi_session_create(const kimi_artifact *artifact,
                                         const char *const *weight_paths,
                                         size_t num_paths, kimi_session **out);
/* One rank of a partitioned GPU artifact (kimi-compile --grid): one process
 * per rank, each passing its `rank` (0 .. kimi_artifact_num_ranks - 1), the
 * same `store_path` (a file every rank can see: rank 0 writes NCCL's id
 * there) and its CUDA `device` (-1: the rank's ordinal). The call returns
 * once every rank has joined. An artifact of one rank takes rank 0 and a
 * NULL store, like kimi_session_create on `device`. Partitioned CPU
 * artifacts run their ranks under MPI (kimi-run) and are refused here. */
KIMI_API kimi_status kimi_session_create_rank(const kimi_artifact *artifact,
                                              const char *const *weight_paths,
                                              size_t num_paths, int32_t rank,
                                              const char *store_path,
                                              int32_t device,
                                              kimi_session **out);
KIMI_API void kimi_session_destroy(kimi_session *session);

/* Sequences the session steps together: the artifact's batch B
 * (kimi-compile --batch B; 1 by default). */
KIMI_API int64_t kimi_session_batch(const kimi_session *session);
/* Starts B new sequences from `count` = B * T tokens (T >= 1; sequence b is
 * tokens[b*T .. (b+1)*T)); logits become [B * T, V], sequence-major. */
KIMI_API kimi_status kimi_session_prefill(kimi_session *session,
                                          const int32_t *tokens, size_t count);
/* kimi_session_prefill, but the logits become [B, V]: the last row of each
 * sequence, all that generation needs. The model computes every row either
 * way; only the last ones are copied out (for a GPU model, 1 of T rows
 * crosses PCIe). */
KIMI_API kimi_status kimi_session_prefill_last(kimi_session *session,
                                               const int32_t *tokens,
                                               size_t count);
/* Appends one token to every sequence (`count` = B); logits become [B, V].
 * Needs a prefill (or restore) first. */
KIMI_API kimi_status kimi_session_decode(kimi_session *session,
                                         const int32_t *tokens, size_t count);
/* kimi_session_decode of a one-sequence session (B = 1). */
KIMI_API kimi_status kimi_session_decode_step(kimi_session *session,
                                              int32_t token);
/* The logits of the last prefill/decode (row-major [rows, vocab]); owned by
 * the session, valid until its next call. rows = 0 before any call. */
KIMI_API kimi_status kimi_session_logits(const kimi_session *session,
                                         const float **logits, size_t *rows,
                                         size_t *vocab);
KIMI_API int64_t kimi_session_vocab_size(const kimi_session *session);
/* Tokens in each current sequence. */
KIMI_API int64_t kimi_session_length(const kimi_session *session);

/* A copy of the sequence state (states, caches, last logits row). It can be
 * restored into any session of the same artifact; free it with
 * kimi_state_free. */
KIMI_API kimi_status kimi_session_save_state(const kimi_session *session,
                                             kimi_state **out);
KIMI_API kimi_status kimi_session_restore_state(kimi_session *session,
                                                const kimi_state *state);
KIMI_API void kimi_state_free(kimi_state *state);
KIMI_API int64_t kimi_state_bytes(const kimi_state *state);

KIMI_API kimi_status kimi_session_counters(const kimi_session *session,
                                           kimi_counters *out);

/*--- Text ----------------------------------------------------------------*/

typedef struct kimi_tokenizer kimi_tokenizer;
typedef struct kimi_sampler kimi_sampler;

/* Opens a tokenizer directory: tiktoken.model (`base64(token) rank` lines)
 * and, when present, tokenizer_config.json (special tokens); the released
 * Kimi pre-tokenizer expression. Immutable: may be shared by threads. */
KIMI_API kimi_status kimi_tokenizer_open(const char *dir, kimi_tokenizer **out);
KIMI_API void kimi_tokenizer_close(kimi_tokenizer *tokenizer);
/* One past the largest token id (vocabulary and special tokens). */
KIMI_API int32_t kimi_tokenizer_size(const kimi_tokenizer *tokenizer);
/* The id of a special token's text ("<|im_end|>"), or -1. */
KIMI_API int32_t kimi_tokenizer_special_id(const kimi_tokenizer *tokenizer,
                                           const char *text);
/* The ids of `length` bytes of UTF-8 text (invalid UTF-8 is an error naming
 * the offset). parse_special != 0: special-token text becomes its id; 0: it
 * is ordinary text. *count is set to the number of ids; they are written to
 * `ids` only if they fit in `capacity` (else KIMI_ERROR_INVALID_ARGUMENT, and
 * *count says how many to allow). */
KIMI_API kimi_status kimi_tokenize(const kimi_tokenizer *tokenizer, const char *text,
                                   size_t length, int parse_special, int32_t *ids,
                                   size_t capacity, size_t *count);
/* The bytes of `count` ids (not NUL-terminated); *length and `capacity` as
 * for kimi_tokenize. An id outside the vocabulary is an error. */
KIMI_API kimi_status kimi_detokenize(const kimi_tokenizer *tokenizer, const int32_t *ids,
                                     size_t count, char *text, size_t capacity,
                                     size_t *length);

typedef struct kimi_chat_message {
  const char *role;    /* "system", "user", "assistant" or "tool" */
  const char *content; /* UTF-8, encoded as plain text */
} kimi_chat_message;
/* The ids of a conversation in the released Kimi chat format (see
 * docs/text.md); system_prompt is used when the first message is not a
 * system message (NULL: the released default, "": none). With
 * add_generation_prompt the ids end with the assistant's turn opening.
 * *count and `capacity` as for kimi_tokenize. */
KIMI_API kimi_status kimi_chat_encode(const kimi_tokenizer *tokenizer,
                                      const kimi_chat_message *messages, size_t num_messages,
                                      const char *system_prompt, int add_generation_prompt,
                                      int32_t *ids, size_t capacity, size_t *count);

typedef struct kimi_sampling_params {
  double temperature;       /* 0: greedy (the default) */
  int64_t top_k;            /* 0: no limit */
  double top_p;             /* 1: no limit */
  double min_p;             /* 0: no limit */
  double presence_penalty;  /* -2 .. 2 */
  double frequency_penalty; /* -2 .. 2 */
  uint64_t seed;            /* the same seed and logits give the same tokens */
} kimi_sampling_params;
KIMI_API void kimi_sampling_params_default(kimi_sampling_params *params);
KIMI_API kimi_status kimi_sampler_create(const kimi_sampling_params *params,
                                         kimi_sampler **out);
KIMI_API void kimi_sampler_destroy(kimi_sampler *sampler);
/* The next token from one logits row; the token is counted for the
 * penalties. A NaN or +inf logit is an error. */
KIMI_API kimi_status kimi_sampler_sample(kimi_sampler *sampler, const float *logits,
                                         int64_t vocab, int32_t *token);

typedef enum kimi_stop_reason {
  KIMI_STOP_LENGTH = 0,   /* max_new_tokens generated */
  KIMI_STOP_TOKEN = 1,    /* a stop token (EOS, <|im_end|>) was generated */
  KIMI_STOP_STRING = 2,   /* a stop string appeared in the text */
  KIMI_STOP_CALLBACK = 3  /* the callback returned 0 */
} kimi_stop_reason;

typedef struct kimi_generate_options {
  kimi_sampling_params sampling;
  int64_t max_new_tokens;          /* default 256 */
  const int32_t *stop_tokens;      /* generated, they end the text unshown */
  size_t num_stop_tokens;
  const char *const *stop_strings; /* need a tokenizer; never shown */
  size_t num_stop_strings;
  int show_special_tokens;         /* 0 (default): special tokens make no text */
} kimi_generate_options;
KIMI_API void kimi_generate_options_default(kimi_generate_options *options);

/* Called for each generated token with the text that became final with it
 * (whole UTF-8 characters; often empty), and once more at the end with
 * token -1 and the rest. Return 0 to stop. */
typedef int (*kimi_token_callback)(int32_t token, const char *text, size_t length,
                                   void *user);

/* Prefills `prompt` on a one-sequence session and generates until a stop
 * token, a stop string, max_new_tokens or the callback says stop. Without a
 * tokenizer (NULL) no text is made. `reason` and `generated` (tokens, a stop
 * token included) may be NULL. */
KIMI_API kimi_status kimi_generate(kimi_session *session, const kimi_tokenizer *tokenizer,
                                   const int32_t *prompt, size_t prompt_length,
                                   const kimi_generate_options *options,
                                   kimi_token_callback callback, void *user,
                                   kimi_stop_reason *reason, size_t *generated);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KIMI_RUNTIME_H */

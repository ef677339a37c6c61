/*===- chat.c - A chat answer as text through the kimi C API -------------===*
 *
 * usage: kimi-chat-embed -t TOKENIZER_DIR [-n max_tokens] [-T temperature]
 *                        [-s seed] model.kimi weights.safetensors... "message"
 *
 * Opens a compiled artifact and its tokenizer, encodes the message in the
 * released Kimi chat format, and generates the assistant's answer, printing
 * its text as it comes (the runtime's generation loop: sampling, stop at
 * <|im_end|>, whole UTF-8 characters only). Pure C99; links only the runtime.
 *===----------------------------------------------------------------------===*/

#include <kimi_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, kimi_status status) {
  fprintf(stderr, "kimi-chat-embed: %s failed (%s): %s\n", what,
          kimi_status_name(status), kimi_last_error());
  return 1;
}

/* Prints each piece of text as soon as the runtime has it. */
static int printText(int32_t token, const char *text, size_t length, void *user) {
  (void)token;
  (void)user;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 1; /* go on */
}

int main(int argc, char **argv) {
  const char *tokenizerDir = NULL;
  kimi_generate_options options;
  kimi_generate_options_default(&options);
  options.max_new_tokens = 32;
  int arg = 1;
  while (arg + 1 < argc && argv[arg][0] == '-') {
    if (strcmp(argv[arg], "-t") == 0)
      tokenizerDir = argv[arg + 1];
    else if (strcmp(argv[arg], "-n") == 0)
      options.max_new_tokens = atoi(argv[arg + 1]);
    else if (strcmp(argv[arg], "-T") == 0)
      options.sampling.temperature = atof(argv[arg + 1]);
    else if (strcmp(argv[arg], "-s") == 0)
      options.sampling.seed = (uint64_t)strtoull(argv[arg + 1], NULL, 10);
    else
      break;
    arg += 2;
  }
  if (!tokenizerDir || argc - arg < 3) {
    fprintf(stderr,
            "usage: %s -t TOKENIZER_DIR [-n max_tokens] [-T temperature] [-s seed]\n"
            "          model.kimi weights.safetensors... \"message\"\n",
            argv[0]);
    return 2;
  }
  const char *message = argv[argc - 1];

  kimi_tokenizer *tokenizer = NULL;
  kimi_status s = kimi_tokenizer_open(tokenizerDir, &tokenizer);
  if (s != KIMI_OK)
    return fail("kimi_tokenizer_open", s);

  /* The conversation: one user message, the released default system prompt
   * (NULL), and the assistant's turn opened. First ask for the length. */
  kimi_chat_message chat[1] = {{"user", message}};
  size_t count = 0;
  kimi_chat_encode(tokenizer, chat, 1, NULL, 1, NULL, 0, &count);
  int32_t *prompt = (int32_t *)malloc((count ? count : 1) * sizeof(int32_t));
  s = kimi_chat_encode(tokenizer, chat, 1, NULL, 1, prompt, count, &count);
  if (s != KIMI_OK) {
    free(prompt);
    kimi_tokenizer_close(tokenizer);
    return fail("kimi_chat_encode", s);
  }

  kimi_artifact *artifact = NULL;
  kimi_session *session = NULL;
  s = kimi_artifact_open(argv[arg], &artifact);
  if (s == KIMI_OK) {
    s = kimi_session_create(artifact, (const char *const *)(argv + arg + 1),
                            (size_t)(argc - arg - 2), &session);
    kimi_artifact_close(artifact);
  }
  int rc = 0;
  if (s != KIMI_OK) {
    rc = fail(session ? "kimi_session_create" : "kimi_artifact_open", s);
  } else {
    /* The answer ends at <|im_end|>. */
    int32_t end = kimi_tokenizer_special_id(tokenizer, "<|im_end|>");
    options.stop_tokens = &end;
    options.num_stop_tokens = end >= 0 ? 1 : 0;
    printf("user: %s\nassistant: ", message);
    kimi_stop_reason reason = KIMI_STOP_LENGTH;
    size_t generated = 0;
    s = kimi_generate(session, tokenizer, prompt, count, &options, printText, NULL,
                      &reason, &generated);
    printf("\n");
    if (s != KIMI_OK)
      rc = fail("kimi_generate", s);
    else
      fprintf(stderr, "%zu tokens, stopped by %s\n", generated,
              reason == KIMI_STOP_TOKEN    ? "a stop token"
              : reason == KIMI_STOP_LENGTH ? "the token limit"
                                           : "a stop string or the callback");
  }
  kimi_session_destroy(session);
  kimi_tokenizer_close(tokenizer);
  free(prompt);
  return rc;
}

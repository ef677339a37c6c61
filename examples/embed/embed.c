/*===- embed.c - Greedy generation through the kimi C API -----------------===*
 *
 * usage: kimi-embed [-p 1,2,3] [-n 8] model.kimi weights.safetensors...
 *
 * Opens a compiled artifact, creates a session with the model's weights,
 * prefills the prompt token ids, then picks the most likely next token and
 * decodes it, `n` times. Prints the prompt and the generated ids on stdout
 * and the timing counters on stderr. Pure C99; links only the runtime.
 *===----------------------------------------------------------------------===*/

#include <kimi_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, kimi_status status) {
  fprintf(stderr, "kimi-embed: %s failed (%s): %s\n", what,
          kimi_status_name(status), kimi_last_error());
  return 1;
}

/* Index of the largest of the last row of the session's logits. */
static int32_t argmaxLast(const kimi_session *session, int32_t *out) {
  const float *logits = NULL;
  size_t rows = 0, vocab = 0;
  kimi_status s = kimi_session_logits(session, &logits, &rows, &vocab);
  if (s != KIMI_OK)
    return fail("kimi_session_logits", s);
  if (rows == 0 || vocab == 0) {
    fprintf(stderr, "kimi-embed: no logits\n");
    return 1;
  }
  const float *last = logits + (rows - 1) * vocab;
  size_t best = 0;
  for (size_t v = 1; v < vocab; ++v)
    if (last[v] > last[best])
      best = v;
  *out = (int32_t)best;
  return 0;
}

static int parsePrompt(const char *text, int32_t **tokens, size_t *count) {
  size_t cap = 16, n = 0;
  int32_t *t = (int32_t *)malloc(cap * sizeof(int32_t));
  const char *p = text;
  while (t && *p) {
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p) {
      free(t);
      return 1;
    }
    if (n == cap) {
      int32_t *bigger = (int32_t *)realloc(t, 2 * cap * sizeof(int32_t));
      if (!bigger) {
        free(t);
        return 1;
      }
      t = bigger;
      cap *= 2;
    }
    t[n++] = (int32_t)v;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') {
      free(t);
      return 1;
    }
  }
  *tokens = t;
  *count = n;
  return t && n ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *promptText = "1";
  int steps = 8;
  int arg = 1;
  while (arg + 1 < argc && argv[arg][0] == '-') {
    if (strcmp(argv[arg], "-p") == 0)
      promptText = argv[arg + 1];
    else if (strcmp(argv[arg], "-n") == 0)
      steps = atoi(argv[arg + 1]);
    else
      break;
    arg += 2;
  }
  if (argc - arg < 2 || steps < 0) {
    fprintf(stderr,
            "usage: %s [-p 1,2,3] [-n steps] model.kimi weights.safetensors...\n",
            argv[0]);
    return 2;
  }
  int32_t *prompt = NULL;
  size_t promptLen = 0;
  if (parsePrompt(promptText, &prompt, &promptLen)) {
    fprintf(stderr, "kimi-embed: bad prompt '%s' (comma-separated ids)\n",
            promptText);
    return 2;
  }

  kimi_artifact *artifact = NULL;
  kimi_status s = kimi_artifact_open(argv[arg], &artifact);
  if (s != KIMI_OK) {
    free(prompt);
    return fail("kimi_artifact_open", s);
  }

  kimi_session *session = NULL;
  s = kimi_session_create(artifact, (const char *const *)(argv + arg + 1),
                          (size_t)(argc - arg - 1), &session);
  /* The session keeps what it needs of the artifact. */
  kimi_artifact_close(artifact);
  if (s != KIMI_OK) {
    free(prompt);
    return fail("kimi_session_create", s);
  }

  int rc = 0;
  s = kimi_session_prefill(session, prompt, promptLen);
  if (s != KIMI_OK) {
    rc = fail("kimi_session_prefill", s);
    goto done;
  }
  printf("prompt:");
  for (size_t i = 0; i < promptLen; ++i)
    printf(" %d", (int)prompt[i]);
  printf("\ngenerated:");
  for (int i = 0; i < steps; ++i) {
    int32_t next = 0;
    if ((rc = argmaxLast(session, &next)) != 0)
      goto done;
    printf(" %d", (int)next);
    s = kimi_session_decode_step(session, next);
    if (s != KIMI_OK) {
      printf("\n");
      rc = fail("kimi_session_decode_step", s);
      goto done;
    }
  }
  printf("\n");

  kimi_counters c;
  if (kimi_session_counters(session, &c) == KIMI_OK)
    fprintf(stderr,
            "prefill: %lld tokens in %.6f s; decode: %lld tokens in %.6f s; "
            "peak session memory %lld bytes; weights %lld bytes\n",
            (long long)c.prefill_tokens, c.prefill_seconds,
            (long long)c.decode_tokens, c.decode_seconds,
            (long long)c.peak_bytes, (long long)c.weight_bytes);
done:
  kimi_session_destroy(session);
  free(prompt);
  return rc;
}

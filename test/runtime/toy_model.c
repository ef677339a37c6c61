/*===- toy_model.c - A hand-written "compiled model" for runtime tests ----===*
 *
 * Implements the CPU shared-object ABI of docs/runtime-abi.md exactly as a
 * compiled kimi model would, for a toy recurrence the tests recompute
 * independently. For token x at position p (0-based):
 *
 *   u   = embed[x]                              (D)
 *   s   = a * s_prev + u                        state "layer0.kda_state" [1, D]
 *   c_p = u * g[p % E]                          cache "layer1.mla_cache" [1, T, D]
 *   h   = s + (c_0 + ... + c_p) / (p + 1)
 *   logits[v] = sum_d lm_head[v, d] * h[d]      logits [1, T, V]
 *   position  = p + 1                           state "layer0.position" [1]
 *
 * Weights are exported, uninitialised, 64-byte aligned globals the runtime
 * fills. Outputs are malloc'ed here and freed by the runtime with
 * free(allocated); to exercise the descriptor handling the logits carry an
 * offset and the cache rows an aligned pointer different from `allocated`.
 *===----------------------------------------------------------------------===*/

#include "toy_model_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define V TOY_VOCAB
#define D TOY_HIDDEN
#define E TOY_EXPERTS
#define EXPORT __attribute__((visibility("default")))
#define ALIGN64 __attribute__((aligned(64)))

EXPORT ALIGN64 float kimi_w_0[V * D]; /* model.embed_tokens.weight [V, D] */
EXPORT ALIGN64 float kimi_w_1[D];     /* model.layers.0.self_attn.A_log [D] (decay) */
EXPORT ALIGN64 float kimi_w_2[V * D]; /* lm_head.weight [V, D] */
EXPORT ALIGN64 float kimi_w_3[E * D]; /* model.layers.0.mlp.experts.{e}.gate_proj.weight [E, D] */

typedef struct { int32_t *allocated, *aligned; int64_t offset, sizes[2], strides[2]; } MemRef2i;
typedef struct { float *allocated, *aligned; int64_t offset, sizes[1], strides[1]; } MemRef1f;
typedef struct { float *allocated, *aligned; int64_t offset, sizes[2], strides[2]; } MemRef2f;
typedef struct { float *allocated, *aligned; int64_t offset, sizes[3], strides[3]; } MemRef3f;

typedef struct { MemRef3f logits; MemRef2f state; MemRef3f cache; MemRef1f position; } PrefillResults;
typedef struct { MemRef3f logits; MemRef3f cache; MemRef2f state; MemRef1f position; } DecodeResults;

static void set1(MemRef1f *m, float *p, int64_t n) {
  m->allocated = m->aligned = p;
  m->offset = 0;
  m->sizes[0] = n;
  m->strides[0] = 1;
}
static void set2(MemRef2f *m, float *p, int64_t a, int64_t b) {
  m->allocated = m->aligned = p;
  m->offset = 0;
  m->sizes[0] = a; m->sizes[1] = b;
  m->strides[0] = b; m->strides[1] = 1;
}
/* Logits: allocated == aligned, offset 3 floats. */
static float *newLogits(MemRef3f *m, int64_t t) {
  float *p = (float *)malloc(sizeof(float) * (size_t)(3 + t * V));
  m->allocated = m->aligned = p;
  m->offset = 3;
  m->sizes[0] = 1; m->sizes[1] = t; m->sizes[2] = V;
  m->strides[0] = t * V; m->strides[1] = V; m->strides[2] = 1;
  return p + 3;
}
/* Cache rows: aligned to 64 bytes inside a larger allocation. */
static float *newRows(MemRef3f *m, int64_t t) {
  char *raw = (char *)malloc(sizeof(float) * (size_t)(t * D) + 64);
  float *aligned = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
  m->allocated = (float *)raw;
  m->aligned = aligned;
  m->offset = 0;
  m->sizes[0] = 1; m->sizes[1] = t; m->sizes[2] = D;
  m->strides[0] = t * D; m->strides[1] = D; m->strides[2] = 1;
  return aligned;
}

/* One token: updates s (in place), writes its cache row, its logits, and adds
 * the row to `sum` (sum of all rows so far). */
static void step(int32_t x, int64_t pos, float *s, float *row, float *sum,
                 float *logits) {
  const float *u = kimi_w_0 + (int64_t)x * D;
  const float *g = kimi_w_3 + (pos % E) * D;
  float h[D];
  for (int d = 0; d < D; ++d) {
    s[d] = kimi_w_1[d] * s[d] + u[d];
    row[d] = u[d] * g[d];
    sum[d] += row[d];
    h[d] = s[d] + sum[d] / (float)(pos + 1);
  }
  for (int v = 0; v < V; ++v) {
    float acc = 0.0f;
    for (int d = 0; d < D; ++d)
      acc += kimi_w_2[v * D + d] * h[d];
    logits[v] = acc;
  }
}

static void ciface_prefill(PrefillResults *out, MemRef2i *tokens) {
  const int64_t t = tokens->sizes[1];
  const int32_t *tok = tokens->aligned + tokens->offset;
  float *logits = newLogits(&out->logits, t);
  float *s = (float *)calloc(D, sizeof(float));
  set2(&out->state, s, 1, D);
  float *rows = newRows(&out->cache, t);
  float *position = (float *)malloc(sizeof(float));
  set1(&out->position, position, 1);
  float sum[D];
  memset(sum, 0, sizeof(sum));
  for (int64_t i = 0; i < t; ++i)
    step(tok[i * tokens->strides[1]], i, s, rows + i * D, sum, logits + i * V);
  position[0] = (float)t;
}

static void ciface_decode(DecodeResults *out, MemRef2i *tokens,
                                MemRef2f *state, MemRef3f *cache,
                                MemRef1f *position) {
  const int32_t x = tokens->aligned[tokens->offset];
  const int64_t past = cache->sizes[1];
  const float *oldState = state->aligned + state->offset;
  const float *oldRows = cache->aligned + cache->offset;
  const int64_t pos = (int64_t)position->aligned[position->offset];
  float *logits = newLogits(&out->logits, 1);
  float *s = (float *)malloc(sizeof(float) * D);
  memcpy(s, oldState, sizeof(float) * D);
  set2(&out->state, s, 1, D);
  float *row = newRows(&out->cache, 1);
  float *newPosition = (float *)malloc(sizeof(float));
  set1(&out->position, newPosition, 1);
  float sum[D];
  memset(sum, 0, sizeof(sum));
  for (int64_t j = 0; j < past; ++j)
    for (int d = 0; d < D; ++d)
      sum[d] += oldRows[j * cache->strides[1] + d];
  step(x, pos, s, row, sum, logits);
  newPosition[0] = (float)(pos + 1);
}

/* A broken decode for error tests: returns logits of the wrong shape. */
static void ciface_decode_bad_shape(DecodeResults *out, MemRef2i *tokens,
                                          MemRef2f *state, MemRef3f *cache,
                                          MemRef1f *position) {
  ciface_decode(out, tokens, state, cache, position);
  out->logits.sizes[2] = V + 1;
}

/* A decode that returns its state input as the state output (aliasing an
 * input: the runtime must copy it and never free it). */
static void ciface_decode_alias_state(DecodeResults *out, MemRef2i *tokens,
                                            MemRef2f *state, MemRef3f *cache,
                                            MemRef1f *position) {
  ciface_decode(out, tokens, state, cache, position);
  free(out->state.allocated);
  out->state = *state;
}

/* The packed entry points the runtime calls (docs/runtime-abi.md). */
EXPORT void kimi_entry_prefill(void **a) {
  ciface_prefill((PrefillResults *)a[0], (MemRef2i *)a[1]);
}
EXPORT void kimi_entry_decode(void **a) {
  ciface_decode((DecodeResults *)a[0], (MemRef2i *)a[1], (MemRef2f *)a[2],
                (MemRef3f *)a[3], (MemRef1f *)a[4]);
}
EXPORT void kimi_entry_decode_bad_shape(void **a) {
  ciface_decode_bad_shape((DecodeResults *)a[0], (MemRef2i *)a[1],
                          (MemRef2f *)a[2], (MemRef3f *)a[3], (MemRef1f *)a[4]);
}
EXPORT void kimi_entry_decode_alias_state(void **a) {
  ciface_decode_alias_state((DecodeResults *)a[0], (MemRef2i *)a[1],
                            (MemRef2f *)a[2], (MemRef3f *)a[3],
                            (MemRef1f *)a[4]);
}

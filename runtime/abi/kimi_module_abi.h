/*===- kimi_module_abi.h - What a compiled model's host object and the runtime share ===*
 *
 * A compiled model is a host shared object (the artifact's kernel 0) that the
 * runtime dlopens. Besides its entry points (docs/runtime-abi.md) it carries
 * shims, written in C next to this header and compiled into the object by
 * kimi-compile:
 *   gpu_module_shim.c   GPU models: module loading, kernel launches, device
 *                       allocation, matrix products (cuBLASLt) and device
 *                       reads go through the table `kimi_rt_gpu`;
 *   comm_module_shim.c  partitioned models: collectives go through the table
 *                       `kimi_rt_comm`.
 * The runtime fills a table after dlopen and before the first entry call,
 * checking the module's exported version first; the shim records the first
 * failing call in the module's status word and skips every later call, and
 * the runtime reads (and clears) that word after each entry call.
 *
 * This header is the one definition of those tables: the runtime includes it,
 * the compiler embeds it with the shims at build time. Any change to a table,
 * to a descriptor word or to a shim's behaviour bumps the version it belongs
 * to, so a runtime refuses modules compiled against another layout.
 *
 * Plain C99, no includes beyond <stdint.h>.
 *===----------------------------------------------------------------------===*/

#ifndef KIMI_MODULE_ABI_H
#define KIMI_MODULE_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*===-------------------------------------------------------------------===*
 * GPU models
 *===-------------------------------------------------------------------===*/

/* 4: the product descriptor's flags word (KIMI_GEMM_FLAGS). */
#define KIMI_GPU_ABI_VERSION 4

/* Exported by the module: `const int32_t` version, the table, the status. */
#define KIMI_GPU_ABI_VERSION_SYMBOL "kimi_rt_gpu_abi_version"
#define KIMI_GPU_TABLE_SYMBOL "kimi_rt_gpu"
#define KIMI_GPU_STATUS_SYMBOL "kimi_rt_gpu_status"

/* Every callback returns 0 on success; anything else becomes the module's
   status word. `ctx` is the table's own `ctx`. */
typedef struct kimi_rt_gpu_table {
  void *ctx;
  /* A kernel image (cubin or PTX; size 0: NUL-terminated PTX) into a module. */
  int32_t (*load_module)(void *ctx, const void *image, uint64_t size,
                         void **module);
  int32_t (*get_function)(void *ctx, void *module, const char *name,
                          void **function);
  /* On the runtime's stream; `params` as cuLaunchKernel's kernelParams. */
  int32_t (*launch)(void *ctx, void *function, int64_t gx, int64_t gy,
                    int64_t gz, int64_t bx, int64_t by, int64_t bz,
                    int32_t smem, void **params);
  int32_t (*alloc)(void *ctx, uint64_t bytes, void **ptr);
  int32_t (*release)(void *ctx, void *ptr);
  /* A matrix product: `desc` holds KIMI_GEMM_DESC_WORDS words. */
  int32_t (*gemm)(void *ctx, const int64_t *desc);
  /* A device i32 after the work queued before it. */
  int32_t (*read_i32)(void *ctx, const void *address, int32_t *value);
} kimi_rt_gpu_table;

/* The words of a matrix product descriptor (kimi_gpu_gemm_f32):
   C[batch, m, n] (+)= A[batch, m, k] B[batch, k, n], every operand given by
   its device address and element strides along each of its dimensions. */
enum kimi_gemm_desc_word {
  KIMI_GEMM_A = 0,
  KIMI_GEMM_B,
  KIMI_GEMM_C,
  KIMI_GEMM_M,
  KIMI_GEMM_N,
  KIMI_GEMM_K,
  KIMI_GEMM_BATCH,
  KIMI_GEMM_A_STRIDE_M,
  KIMI_GEMM_A_STRIDE_K,
  KIMI_GEMM_A_STRIDE_BATCH,
  KIMI_GEMM_B_STRIDE_K,
  KIMI_GEMM_B_STRIDE_N,
  KIMI_GEMM_B_STRIDE_BATCH,
  KIMI_GEMM_C_STRIDE_M,
  KIMI_GEMM_C_STRIDE_N,
  KIMI_GEMM_C_STRIDE_BATCH,
  KIMI_GEMM_PRECISION, /* KIMI_GEMM_PRECISION_* */
  KIMI_GEMM_FLAGS,     /* KIMI_GEMM_FLAG_* */
  KIMI_GEMM_DESC_WORDS
};

/* The operands' types and the products' arithmetic (accumulation in f32). */
enum kimi_gemm_precision {
  KIMI_GEMM_PRECISION_F32 = 0,  /* f32 A, B: exact f32 products */
  KIMI_GEMM_PRECISION_TF32 = 1, /* f32 A, B: TF32 tensor cores */
  KIMI_GEMM_PRECISION_BF16 = 2  /* bf16 A, B: tensor cores */
};

/* The sizes are compile-time constants: the runtime may time candidates. */
#define KIMI_GEMM_FLAG_STATIC_SIZES 1
/* C = A B (beta = 0): the zero fill before the product was dropped. */
#define KIMI_GEMM_FLAG_OVERWRITE 2
/* C is bf16 (the rounding after the product was folded in). */
#define KIMI_GEMM_FLAG_C_BF16 4
#define KIMI_GEMM_FLAGS_KNOWN 7

/*===-------------------------------------------------------------------===*
 * Collectives of partitioned models
 *===-------------------------------------------------------------------===*/

#define KIMI_COMM_ABI_VERSION 2

#define KIMI_COMM_ABI_VERSION_SYMBOL "kimi_rt_comm_abi_version"
#define KIMI_COMM_TABLE_SYMBOL "kimi_rt_comm"
#define KIMI_COMM_STATUS_SYMBOL "kimi_rt_comm_status"

/* Element types and reductions of the collectives. */
enum kimi_comm_dtype { KIMI_COMM_F32 = 0, KIMI_COMM_I32 = 1, KIMI_COMM_I64 = 2 };
enum kimi_comm_op { KIMI_COMM_SUM = 0, KIMI_COMM_MAX = 1 };

/* Counts are elements. `group` is a bit set of grid axes: the collective
   runs among the ranks that share every other grid coordinate. */
typedef struct kimi_rt_comm_table {
  void *ctx;
  int32_t (*rank)(void *ctx);
  int32_t (*all_reduce)(void *ctx, const void *send, void *recv, int64_t count,
                        int32_t dtype, int32_t op, int32_t group);
  /* `send_count` elements from each rank. */
  int32_t (*all_gather)(void *ctx, const void *send, void *recv,
                        int64_t send_count, int32_t dtype, int32_t group);
  /* `recv_count` elements to each rank. */
  int32_t (*reduce_scatter)(void *ctx, const void *send, void *recv,
                            int64_t recv_count, int32_t dtype, int32_t op,
                            int32_t group);
  /* `count` elements sent in all, an equal block to each rank, and as many
     received. */
  int32_t (*all_to_all)(void *ctx, const void *send, void *recv, int64_t count,
                        int32_t dtype, int32_t group);
} kimi_rt_comm_table;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KIMI_MODULE_ABI_H */

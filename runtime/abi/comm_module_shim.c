/*===- comm_module_shim.c - Collectives of a partitioned compiled model ---===*
 *
 * Compiled into every partitioned model's host object by kimi-compile
 * (embedded at build time, lowering/ToCPU/ModuleShims.h) when the model
 * calls a kimi_rt_* function (kimi-lower-collectives). Each collective
 * forwards to the table the runtime fills (kimi_module_abi.h); the first
 * failure sets kimi_rt_comm_status and later collectives return at once.
 * Buffers arrive as expanded rank-1 memref descriptors (allocated, aligned,
 * offset, size, stride).
 *===----------------------------------------------------------------------===*/
#include <stdint.h>

#include "kimi_module_abi.h"

const int32_t kimi_rt_comm_abi_version = KIMI_COMM_ABI_VERSION;
kimi_rt_comm_table kimi_rt_comm;
int32_t kimi_rt_comm_status;
int64_t kimi_rt_rank(void) {
  if (!kimi_rt_comm.rank) {
    kimi_rt_comm_status = -1;
    return 0;
  }
  return kimi_rt_comm.rank(kimi_rt_comm.ctx);
}
#define MR(T, p) T *p##_a, T *p, int64_t p##_o, int64_t p##_n, int64_t p##_s
#define CALL(fn, ...)                                                          \
  do {                                                                         \
    if (kimi_rt_comm_status)                                                   \
      return;                                                                  \
    kimi_rt_comm_status =                                                      \
        kimi_rt_comm.fn ? kimi_rt_comm.fn(kimi_rt_comm.ctx, __VA_ARGS__) : -1; \
  } while (0)
/* The four collectives of one element type N (C type T, kimi_comm_dtype C). */
#define SHIM(N, T, C)                                                          \
  void kimi_rt_all_reduce_##N(MR(T, s), MR(T, r), int32_t op, int32_t g) {     \
    CALL(all_reduce, s + s_o, r + r_o, r_n, C, op, g);                         \
  }                                                                            \
  void kimi_rt_all_gather_##N(MR(T, s), MR(T, r), int32_t g) {                 \
    CALL(all_gather, s + s_o, r + r_o, s_n, C, g);                             \
  }                                                                            \
  void kimi_rt_reduce_scatter_##N(MR(T, s), MR(T, r), int32_t op,              \
                                  int32_t g) {                                 \
    CALL(reduce_scatter, s + s_o, r + r_o, r_n, C, op, g);                     \
  }                                                                            \
  void kimi_rt_all_to_all_##N(MR(T, s), MR(T, r), int32_t g) {                 \
    CALL(all_to_all, s + s_o, r + r_o, s_n, C, g);                             \
  }
SHIM(f32, float, KIMI_COMM_F32)
SHIM(i32, int32_t, KIMI_COMM_I32)
SHIM(i64, int64_t, KIMI_COMM_I64)

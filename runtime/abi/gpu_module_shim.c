/*===- gpu_module_shim.c - The host side of a compiled GPU model ----------===*
 *
 * Compiled into every GPU model's host object by kimi-compile (embedded at
 * build time, lowering/ToCPU/ModuleShims.h). MLIR's GPU-to-LLVM lowering
 * calls the mgpu* functions of its CUDA runtime wrappers; here they forward
 * to the table the runtime fills (kimi_module_abi.h), as do the matrix
 * products of kimi-gpu-gemm-calls, kimi.host_read and the host code's
 * memref allocations. The first failing call sets kimi_rt_gpu_status and
 * every later call returns at once; the runtime reads the word after each
 * entry call.
 *===----------------------------------------------------------------------===*/
#include <stddef.h>
#include <stdint.h>

#include "kimi_module_abi.h"
#ifndef KIMI_SHIM_GPU_ABI_VERSION /* tests build a mismatched module */
#define KIMI_SHIM_GPU_ABI_VERSION KIMI_GPU_ABI_VERSION
#endif
const int32_t kimi_rt_gpu_abi_version = KIMI_SHIM_GPU_ABI_VERSION;
kimi_rt_gpu_table kimi_rt_gpu;
int32_t kimi_rt_gpu_status;

typedef struct {
  const void *image;
  uint64_t size;
  void *module;
} kimi_gpu_image;
#define KIMI_MAX_IMAGES 16
static kimi_gpu_image kimi_images[KIMI_MAX_IMAGES];
static int kimi_num_images;

/* Called by the load constructors at dlopen, before the runtime has filled
   the table: the image is only recorded; it is loaded on first use. */
static void *kimi_register(const void *image, uint64_t size) {
  if (kimi_num_images == KIMI_MAX_IMAGES) {
    kimi_rt_gpu_status = -2;
    return 0;
  }
  kimi_gpu_image *r = &kimi_images[kimi_num_images++];
  r->image = image;
  r->size = size;
  r->module = 0;
  return r;
}
void *mgpuModuleLoad(void *data, size_t size) { return kimi_register(data, size); }
void *mgpuModuleLoadJIT(void *data, int32_t opt) {
  (void)opt;
  return kimi_register(data, 0);
}
void mgpuModuleUnload(void *m) { (void)m; }

/* Functions by the address of their name (a constant of this object). */
#define KIMI_FN_SLOTS 16384
static struct {
  const char *name;
  void *image;
  void *fn;
} kimi_fns[KIMI_FN_SLOTS];

void *mgpuModuleGetFunction(void *m, const char *name) {
  kimi_gpu_image *r = (kimi_gpu_image *)m;
  if (kimi_rt_gpu_status || !r)
    return 0;
  uintptr_t h = ((uintptr_t)name >> 3) % KIMI_FN_SLOTS;
  for (int probe = 0; probe < KIMI_FN_SLOTS; ++probe) {
    if (!kimi_fns[h].name)
      break;
    if (kimi_fns[h].name == name && kimi_fns[h].image == m)
      return kimi_fns[h].fn;
    h = (h + 1) % KIMI_FN_SLOTS;
  }
  if (!kimi_rt_gpu.load_module || !kimi_rt_gpu.get_function) {
    kimi_rt_gpu_status = -1;
    return 0;
  }
  if (!r->module &&
      (kimi_rt_gpu_status = kimi_rt_gpu.load_module(kimi_rt_gpu.ctx, r->image,
                                                    r->size, &r->module)))
    return 0;
  void *fn = 0;
  if ((kimi_rt_gpu_status =
           kimi_rt_gpu.get_function(kimi_rt_gpu.ctx, r->module, name, &fn)))
    return 0;
  if (!kimi_fns[h].name) {
    kimi_fns[h].name = name;
    kimi_fns[h].image = m;
    kimi_fns[h].fn = fn;
  }
  return fn;
}

/* One stream, the runtime's: every launch is ordered after the previous
   one, and the runtime synchronises once after the entry returns. */
void *mgpuStreamCreate(void) { return &kimi_rt_gpu; }
void mgpuStreamDestroy(void *s) { (void)s; }
void mgpuStreamSynchronize(void *s) { (void)s; }

void mgpuLaunchKernel(void *fn, int64_t gx, int64_t gy, int64_t gz,
                      int64_t bx, int64_t by, int64_t bz, int32_t smem,
                      void *stream, void **params, void **extra,
                      size_t nparams) {
  (void)stream;
  (void)extra;
  (void)nparams;
  if (kimi_rt_gpu_status || !fn)
    return;
  if (gx <= 0 || gy <= 0 || gz <= 0)
    return; /* an empty iteration space */
  kimi_rt_gpu_status =
      kimi_rt_gpu.launch(kimi_rt_gpu.ctx, fn, gx, gy, gz, bx, by, bz, smem, params);
}

/* kimi-gpu-gemm-calls: C += A B through the runtime's cuBLASLt. */
void kimi_gpu_gemm_f32(int64_t a, int64_t b, int64_t c, int64_t m, int64_t n,
                       int64_t k, int64_t batch, int64_t am, int64_t ak,
                       int64_t ab, int64_t bk, int64_t bn, int64_t bb,
                       int64_t cm, int64_t cn, int64_t cb, int64_t precision,
                       int64_t flags) {
  if (kimi_rt_gpu_status)
    return;
  if (!kimi_rt_gpu.gemm) {
    kimi_rt_gpu_status = -1;
    return;
  }
  const int64_t desc[KIMI_GEMM_DESC_WORDS] = {a,  b,  c,  m,  n,  k,     batch,     am, ak,
                            ab, bk, bn, bb, cm, cn, cb, precision, flags};
  kimi_rt_gpu_status = kimi_rt_gpu.gemm(kimi_rt_gpu.ctx, desc);
}

/* kimi.host_read (kimi-gpu-serial-kernels): a device i32 the host needs,
   after the work queued before it (the runtime synchronises the stream). */
int32_t kimi_gpu_read_i32(int64_t address) {
  int32_t value = 0;
  if (kimi_rt_gpu_status)
    return 0;
  if (!kimi_rt_gpu.read_i32) {
    kimi_rt_gpu_status = -1;
    return 0;
  }
  kimi_rt_gpu_status =
      kimi_rt_gpu.read_i32(kimi_rt_gpu.ctx, (const void *)address, &value);
  return value;
}

/* memref.alloc / dealloc of the host code: device memory. */
void *_mlir_memref_to_llvm_alloc(size_t bytes) {
  void *p = 0;
  if (kimi_rt_gpu_status)
    return 0;
  if (!kimi_rt_gpu.alloc) {
    kimi_rt_gpu_status = -1;
    return 0;
  }
  kimi_rt_gpu_status = kimi_rt_gpu.alloc(kimi_rt_gpu.ctx, bytes, &p);
  return p;
}
void _mlir_memref_to_llvm_free(void *p) {
  if (p && kimi_rt_gpu.release)
    kimi_rt_gpu.release(kimi_rt_gpu.ctx, p);
}

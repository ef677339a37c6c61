//===- ModelGpuCodegen.cpp - kimi model -> GPU host program + kernels -----===//

#include "lowering/ToGPU/ModelGpuCodegen.h"
#include "lowering/Passes.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "lowering/ToGPU/GpuSerialize.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUCommon/GPUCommonPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/FileSystem.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <limits>

using namespace mlir;

namespace kimi::gpu {

namespace {


/// Outlining gives every kernel its own gpu.module, i.e. its own binary,
/// ptxas run and module load; one module holds them all instead. Kernel
/// names repeat across outlined modules (@f_kernel in @f_kernel and in
/// @f_kernel_0), so each kernel takes its module's unique name.
void mergeGpuModules(ModuleOp module) {
  SmallVector<mlir::gpu::GPUModuleOp> modules(
      module.getOps<mlir::gpu::GPUModuleOp>());
  if (modules.empty())
    return;
  llvm::DenseMap<std::pair<StringAttr, StringAttr>, StringAttr> renamed;
  OpBuilder b(modules.front());
  auto merged =
      mlir::gpu::GPUModuleOp::create(b, module.getLoc(), "kimi_kernels");
  Block &body = merged.getBodyRegion().front();
  for (mlir::gpu::GPUModuleOp m : modules) {
    SmallVector<Operation *> ops;
    for (Operation &op : m.getBodyRegion().front().getOperations())
      ops.push_back(&op);
    size_t kernels = llvm::count_if(
        ops, [](Operation *op) { return isa<mlir::gpu::GPUFuncOp>(op); });
    // Other symbols (shared-memory globals of the generated kernels) get
    // the module's name as a prefix, their uses inside the module too.
    for (Operation *op : ops) {
      if (isa<mlir::gpu::GPUFuncOp>(op))
        continue;
      auto name = op->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName());
      if (!name)
        continue;
      StringAttr renamedSymbol =
          b.getStringAttr(m.getSymName() + "_" + name.getValue());
      if (failed(SymbolTable::replaceAllSymbolUses(op, renamedSymbol, m)))
        continue;
      SymbolTable::setSymbolName(op, renamedSymbol);
    }
    for (Operation *op : ops) {
      if (auto fn = dyn_cast<mlir::gpu::GPUFuncOp>(op)) {
        // Outlined kernels (@f_kernel in @f_kernel_3) take the module's
        // name; generated ones keep theirs after it (@kimi_kda_0_kda_prep).
        std::string name = m.getSymName().str();
        if (kernels > 1 || !m.getSymName().starts_with(fn.getName()))
          name += "_" + fn.getName().str();
        StringAttr newName = b.getStringAttr(name);
        renamed[{m.getSymNameAttr(), fn.getNameAttr()}] = newName;
        SymbolTable::setSymbolName(fn, newName);
      }
      op->moveBefore(&body, body.end());
    }
    m.erase();
  }
  module.walk([&](mlir::gpu::LaunchFuncOp launch) {
    SymbolRefAttr kernel = launch.getKernel();
    auto it = renamed.find({kernel.getRootReference(),
                            kernel.getLeafReference()});
    if (it == renamed.end())
      return;
    launch.setKernelAttr(SymbolRefAttr::get(
        merged.getSymNameAttr(), {FlatSymbolRefAttr::get(it->second)}));
  });
}

const char *kGpuShim = R"c(
#include <stddef.h>
#include <stdint.h>
typedef struct {
  void *ctx;
  int32_t (*load_module)(void *ctx, const void *image, uint64_t size,
                         void **module);
  int32_t (*get_function)(void *ctx, void *module, const char *name,
                          void **function);
  int32_t (*launch)(void *ctx, void *function, int64_t gx, int64_t gy,
                    int64_t gz, int64_t bx, int64_t by, int64_t bz,
                    int32_t smem, void **params);
  int32_t (*alloc)(void *ctx, uint64_t bytes, void **ptr);
  int32_t (*release)(void *ctx, void *ptr);
  int32_t (*gemm)(void *ctx, const int64_t *desc);
  int32_t (*read_i32)(void *ctx, const void *address, int32_t *value);
} kimi_rt_gpu_table;
const int32_t kimi_rt_gpu_abi_version = 4;
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
  const int64_t desc[18] = {a,  b,  c,  m,  n,  k,     batch,     am, ak,
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
)c";


/// gpu.launch_func reads and writes its buffer operands: what ownership-based
/// deallocation needs to know about the KDA launches that
/// kimi-gpu-kda-kernels inserts before bufferization. Buffers are memrefs
/// before the LLVM lowering and descriptors or pointers after it; every
/// non-scalar operand is written, so a launch is never dead code (a model
/// with only reads would let the canonicalizer erase it).
struct LaunchFuncMemoryEffects
    : MemoryEffectOpInterface::ExternalModel<LaunchFuncMemoryEffects,
                                             mlir::gpu::LaunchFuncOp> {
  void getEffects(Operation *op,
                  SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
                      &effects) const {
    for (OpOperand &operand : op->getOpOperands()) {
      Type t = operand.get().getType();
      if (t.isIntOrIndexOrFloat() || isa<mlir::gpu::AsyncTokenType>(t))
        continue;
      effects.emplace_back(MemoryEffects::Read::get(), &operand);
      effects.emplace_back(MemoryEffects::Write::get(), &operand);
    }
  }
};

} // namespace

void registerModelGpuExtensions(DialectRegistry &registry) {
  registerGpuCodegenDialects(registry);
  registry.addExtension(+[](MLIRContext *ctx, mlir::gpu::GPUDialect *) {
    mlir::gpu::LaunchFuncOp::attachInterface<LaunchFuncMemoryEffects>(*ctx);
  });
}

llvm::Expected<std::string>
compileModelForGpu(ModuleOp module, const ModelGpuCodegenOptions &options) {
  std::string toolkit = cudaToolkitPath();
  if (toolkit.empty())
    return kimi::codegenError("finding the CUDA toolkit",
                   "the GPU model target links CUDA's libdevice and runs "
                   "ptxas: put ptxas on PATH or set CUDA_HOME");
  if (!llvm::sys::fs::exists(toolkit + "/nvvm/libdevice/libdevice.10.bc"))
    return kimi::codegenError(
        "finding CUDA's libdevice",
        "the toolkit at '" + toolkit +
            "' has ptxas but no nvvm/libdevice/libdevice.10.bc, which the GPU "
            "model target links: install the full toolkit or set CUDA_HOME");
  // KDA through the generated kernels, before kimi-lower-kda sees it.
  std::string front = options.frontPipeline;
  if (options.kdaKernels)
    front += std::string(front.empty() ? "" : ",") +
             "kimi-gpu-kda-kernels{sm-count=" + std::to_string(options.smCount) +
             "}";
  if (options.mlaKernels)
    front += std::string(front.empty() ? "" : ",") +
             "kimi-gpu-mla-kernels{decode-kernels=" +
             (options.mlaDecodeKernels ? "true" : "false") +
             " sm-count=" + std::to_string(options.smCount) + "}";
  // AttnRes and the short convolutions first: they fuse the norm of each
  // mix and the L2 norms of the convolved heads; the norm pass takes the
  // rest.
  if (options.tokenwiseKernels)
    front += std::string(front.empty() ? "" : ",") +
             "kimi-gpu-attn-res-kernels,kimi-decompose-latent-moe,"
             "kimi-gpu-short-conv-kernels,kimi-gpu-norm-kernels,"
             "kimi-gpu-router-kernels,"
             "kimi-gpu-routed-experts-kernels{max-tokens=" +
             std::to_string(options.sortedExpertsMinTokens > 0
                                ? options.sortedExpertsMinTokens - 1
                                : std::numeric_limits<int64_t>::max()) +
             " bf16-products=" + (options.bf16WeightProducts ? "true" : "false") +
             "}";
  if (llvm::Error e = lowerToBufferizedMemRefs(
          module, front, options.sortedExpertsMinTokens,
          /*splatsAsFills=*/true,
          options.fuseElementwise ? "kimi-gpu-fuse-elementwise" : "",
          /*emptyPerWriter=*/true))
    return std::move(e);
  MLIRContext *ctx = module.getContext();
  CodegenDiagnostics diagnostics(ctx);

  // 1. Weights from the table; loop nests to kernels.
  {
    PassManager pm(ctx);
    pm.addPass(kimi::createKimiGpuWeightTable());
    if (options.gemmCalls) {
      kimi::KimiGpuGemmCallsOptions gemm;
      gemm.precision = options.matmulPrecision;
      gemm.bf16WeightProducts = options.bf16WeightProducts;
      gemm.gemvMaxM = options.gemvMaxM;
      gemm.gemvMaxGroup = options.gemvMaxGroup;
      gemm.gemvEpilogues = options.gemvEpilogues;
      gemm.gemvWeightPrefetch =
          options.gemvWeightPrefetch && options.gridDependencies;
      gemm.smCount = options.smCount;
      pm.addPass(kimi::createKimiGpuGemmCalls(gemm));
    }
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
    kimi::KimiGpuWarpReductionsOptions reductions;
    reductions.unroll = options.reductionUnroll;
    pm.addNestedPass<func::FuncOp>(kimi::createKimiGpuWarpReductions(reductions));
    pm.addNestedPass<func::FuncOp>(kimi::createKimiGpuRegisterAccumulators());
    kimi::KimiGpuMapLoopsOptions map;
    map.blockSize = options.blockSize;
    pm.addNestedPass<func::FuncOp>(kimi::createKimiGpuMapLoops(map));
    pm.addPass(createConvertParallelLoopToGpuPass());
    pm.addPass(kimi::createKimiGpuSerialKernels());
    // Constants and dims used by a launch body (loop bounds, the divisors
    // that delinearise a collapsed index) move into it before outlining:
    // as kernel arguments they were opaque, and every thread of every
    // generic kernel ran 64-bit divisions by run-time values.
    pm.addPass(createGpuLaunchSinkIndexComputationsPass());
    pm.addPass(createGpuKernelOutliningPass());
    if (failed(pm.run(module)))
      return diagnostics.fail("mapping loops to kernels (GPU)");
  }
  mergeGpuModules(module);
  if (options.gridDependencies) {
    PassManager pm(ctx);
    pm.addPass(kimi::createKimiGpuGridDependencies());
    if (failed(pm.run(module)))
      return diagnostics.fail("adding grid dependency waits (GPU)");
  }
  if (options.waitsGridDependencies) {
    auto modules = module.getOps<mlir::gpu::GPUModuleOp>();
    *options.waitsGridDependencies =
        !modules.empty() && llvm::all_of(modules, [](mlir::gpu::GPUModuleOp m) {
          return m->hasAttr(kimi::kWaitsGridDependenciesAttr);
        });
  }
  if (options.gpuIR) {
    llvm::raw_string_ostream os(*options.gpuIR);
    module.print(os);
    return std::string();
  }

  // 2. Kernels to NVVM, host to LLVM, kernels to a binary.
  {
    PassManager pm(ctx);
    // As upstream's buildLowerToNVVMPassPipeline (the generated KDA kernels
    // use nvgpu and vector ops), with the host's allocations on the device.
    pm.addPass(createConvertNVGPUToNVVMPass());
    pm.addPass(createConvertVectorToSCFPass());
    pm.addPass(createSCFToControlFlowPass());
    pm.addPass(createConvertNVVMToLLVMPass());
    pm.addPass(memref::createExpandStridedMetadataPass());
    GpuNVVMAttachTargetOptions target;
    target.chip = options.chip;
    target.features = options.features;
    target.optLevel = options.kernelOptLevel;
    pm.addPass(createGpuNVVMAttachTarget(target));
    pm.addPass(createLowerAffinePass());
    pm.addPass(createArithToLLVMConversionPass());
    pm.addPass(createConvertIndexToLLVMPass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    OpPassManager &kernels = pm.nest<mlir::gpu::GPUModuleOp>();
    kernels.addPass(createStripDebugInfoPass());
    kernels.addPass(createConvertGpuOpsToNVVMOps());
    kernels.addPass(LLVM::createNVVMOptimizeForTargetPass());
    kernels.addPass(createCanonicalizerPass());
    kernels.addPass(createCSEPass());
    kernels.addPass(createReconcileUnrealizedCastsPass());
    // Host: memref.alloc goes through _mlir_memref_to_llvm_alloc, which the
    // GPU shim serves with device memory.
    FinalizeMemRefToLLVMConversionPassOptions memref;
    memref.useGenericFunctions = true;
    pm.addPass(createFinalizeMemRefToLLVMConversionPass(memref));
    pm.addPass(createConvertMathToLLVMPass());
    pm.addPass(createConvertMathToLibmPass());
    pm.addPass(createConvertFuncToLLVMPass());
    pm.addPass(createConvertControlFlowToLLVMPass());
    pm.addPass(createGpuToLLVMConversionPass());
    GpuModuleToBinaryPassOptions binary;
    binary.toolkitPath = toolkit;
    binary.compilationTarget = options.cubin ? "bin" : "isa";
    pm.addPass(createGpuModuleToBinaryPass(binary));
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createReconcileUnrealizedCastsPass());
    if (failed(pm.run(module)))
      return diagnostics.fail("lowering to NVVM and the LLVM dialect (GPU)");
  }
  if (options.kernelImages) {
    options.kernelImages->clear();
    module.walk([&](mlir::gpu::BinaryOp binary) {
      for (Attribute object : binary.getObjects())
        options.kernelImages->push_back(
            cast<mlir::gpu::ObjectAttr>(object).getObject().getValue().str());
    });
    return std::string();
  }
  return emitSharedObject(module, options.hostOptLevel, options.llvmIR,
                          {kGpuShim});
}

} // namespace kimi::gpu

//===- GpuSerialize.cpp - gpu.module -> PTX and cubin ----------------------===//

#include "lowering/ToGPU/GpuSerialize.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Pipelines/Passes.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstdlib>
#include <vector>

using namespace mlir;

namespace kimi::gpu {

void registerGpuCodegenDialects(DialectRegistry &registry) {
  registry.insert<affine::AffineDialect, arith::ArithDialect,
                  cf::ControlFlowDialect, func::FuncDialect,
                  mlir::gpu::GPUDialect, index::IndexDialect,
                  LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect,
                  nvgpu::NVGPUDialect, NVVM::NVVMDialect, scf::SCFDialect,
                  ub::UBDialect, vector::VectorDialect>();
  arith::registerConvertArithToLLVMInterface(registry);
  cf::registerConvertControlFlowToLLVMInterface(registry);
  registerConvertFuncToLLVMInterface(registry);
  index::registerConvertIndexToLLVMInterface(registry);
  registerConvertMathToLLVMInterface(registry);
  registerConvertMemRefToLLVMInterface(registry);
  registerConvertNVVMToLLVMInterface(registry);
  ub::registerConvertUBToLLVMInterface(registry);
  vector::registerConvertVectorToLLVMInterface(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerAllGPUToLLVMIRTranslations(registry);
}

namespace {

/// The CUDA toolkit: candidates are the ptxas on PATH (through symlinks, so
/// a /usr/local/bin/ptxas link names /usr/local/cuda-13.0 and not
/// /usr/local), CUDA_ROOT / CUDA_HOME / CUDA_PATH, then /usr/local/cuda. The
/// first that holds both bin/ptxas and nvvm/libdevice/libdevice.10.bc wins
/// (GPU models link libdevice); else the first with ptxas alone (kernels
/// without libm calls still serialise). Empty when none has ptxas.
std::string findPtxasToolkit() {
  std::vector<std::string> candidates;
  if (auto onPath = llvm::sys::findProgramByName("ptxas")) {
    llvm::SmallString<256> real;
    if (!llvm::sys::fs::real_path(*onPath, real))
      candidates.push_back(
          llvm::sys::path::parent_path(llvm::sys::path::parent_path(real)).str());
    // <toolkit>/bin/ptxas -> <toolkit>
    candidates.push_back(
        llvm::sys::path::parent_path(llvm::sys::path::parent_path(*onPath)).str());
  }
  for (const char *var : {"CUDA_ROOT", "CUDA_HOME", "CUDA_PATH"})
    if (const char *dir = std::getenv(var))
      candidates.push_back(dir);
  candidates.push_back("/usr/local/cuda");
  auto has = [](const std::string &dir, llvm::StringRef relative) {
    return llvm::sys::fs::exists(dir + "/" + relative);
  };
  std::string ptxasOnly;
  for (const std::string &dir : candidates) {
    if (dir.empty() || !has(dir, "bin/ptxas"))
      continue;
    if (has(dir, "nvvm/libdevice/libdevice.10.bc"))
      return dir;
    if (ptxasOnly.empty())
      ptxasOnly = dir;
  }
  return ptxasOnly;
}

llvm::Expected<std::string> runPipeline(ModuleOp module, const GpuTargetOptions &o,
                                        const std::string &format) {
  OwningOpRef<ModuleOp> clone = module.clone();
  PassManager pm(module.getContext());
  mlir::gpu::GPUToNVVMPipelineOptions options;
  options.cubinChip = o.chip;
  options.cubinFeatures = o.features;
  options.cubinFormat = format;
  options.optLevel = o.optLevel;
  options.kernelUseBarePtrCallConv = true;
  mlir::gpu::buildLowerToNVVMPassPipeline(pm, options);
  std::string diagnostics;
  {
    llvm::raw_string_ostream os(diagnostics);
    ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
      os << d.getLocation() << ": " << d << "\n";
      return success();
    });
    if (failed(pm.run(*clone)))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "GPU lowering to %s failed:\n%s",
                                     format.c_str(), diagnostics.c_str());
  }
  std::string bytes;
  clone->walk([&](mlir::gpu::BinaryOp binary) {
    for (Attribute object : binary.getObjects())
      if (auto obj = dyn_cast<mlir::gpu::ObjectAttr>(object))
        bytes = obj.getObject().getValue().str();
  });
  if (bytes.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "GPU lowering to %s produced no binary",
                                   format.c_str());
  return bytes;
}

} // namespace

bool ptxasAvailable() { return !findPtxasToolkit().empty(); }

std::string cudaToolkitPath() { return findPtxasToolkit(); }

llvm::Expected<GpuBinary> serializeGpuModule(ModuleOp module,
                                             const GpuTargetOptions &options) {
  GpuBinary out;
  auto ptx = runPipeline(module, options, "isa");
  if (!ptx)
    return ptx.takeError();
  out.ptx = std::move(*ptx);
  if (!options.cubin) {
    out.cubinSkipped = "not requested";
    return out;
  }
  std::string toolkit = findPtxasToolkit();
  if (toolkit.empty()) {
    out.cubinSkipped = "no ptxas found (PATH, CUDA_HOME, /usr/local/cuda)";
    return out;
  }
  // The NVVM target looks for <toolkit>/bin/ptxas through these variables.
  if (!std::getenv("CUDA_HOME") && !std::getenv("CUDA_ROOT") &&
      !std::getenv("CUDA_PATH"))
    ::setenv("CUDA_HOME", toolkit.c_str(), 0);
  auto cubin = runPipeline(module, options, "bin");
  if (!cubin)
    return cubin.takeError();
  out.cubin = std::move(*cubin);
  return out;
}

} // namespace kimi::gpu

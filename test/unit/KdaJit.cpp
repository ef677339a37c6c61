//===- KdaJit.cpp - compile and run the lowered kimi.kda ------------------===//

#include "KdaJit.h"
#include "JitSupport.h"

#include "dialects/Kimi/KimiDialect.h"
#include "lowering/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <sstream>

using namespace mlir;

namespace kimi::test {

namespace {

std::string tensorType(const char *kind, std::initializer_list<int64_t> dims) {
  std::ostringstream os;
  os << kind << "<";
  for (int64_t d : dims)
    os << d << "x";
  os << "f32>";
  return os.str();
}

using Memref4 = StridedMemRefType<float, 4>;
using Memref3 = StridedMemRefType<float, 3>;
using FnWithState = void (*)(Memref4 *, Memref4 *, Memref4 *, Memref4 *,
                             Memref3 *, Memref4 *, Memref4 *, Memref4 *);
using FnNoState = void (*)(Memref4 *, Memref4 *, Memref4 *, Memref4 *,
                           Memref3 *, Memref4 *, Memref4 *);

template <int N>
StridedMemRefType<float, N> descriptor(const float *data,
                                       std::array<int64_t, N> sizes) {
  StridedMemRefType<float, N> m;
  m.basePtr = m.data = const_cast<float *>(data);
  m.offset = 0;
  int64_t stride = 1;
  for (int i = N - 1; i >= 0; --i) {
    m.sizes[i] = sizes[i];
    m.strides[i] = stride;
    stride *= sizes[i];
  }
  return m;
}

} // namespace

struct KdaKernel::Impl {
  MLIRContext context;
  std::unique_ptr<ExecutionEngine> engine;
  void *fn = nullptr;

  explicit Impl(const DialectRegistry &registry)
      : context(registry, MLIRContext::Threading::DISABLED) {}
};

KdaKernel::~KdaKernel() = default;

std::string kdaFunctionSource(const KdaConfig &c) {
  const KdaShape &s = c.shape;
  std::string mq = tensorType("memref", {s.B, s.T, s.H, s.dk});
  std::string mv = tensorType("memref", {s.B, s.T, s.H, s.dv});
  std::string mb = tensorType("memref", {s.B, s.T, s.H});
  std::string ms = tensorType("memref", {s.B, s.H, s.dk, s.dv});
  std::string tq = tensorType("tensor", {s.B, s.T, s.H, s.dk});
  std::string tv = tensorType("tensor", {s.B, s.T, s.H, s.dv});
  std::string tb = tensorType("tensor", {s.B, s.T, s.H});
  std::string ts = tensorType("tensor", {s.B, s.H, s.dk, s.dv});
  std::ostringstream os;
  os.precision(17);
  os << "func.func @kda(%q: " << mq << ", %k: " << mq << ", %v: " << mv
     << ", %g: " << mq << ", %beta: " << mb;
  if (c.initialState)
    os << ", %s0: " << ms;
  os << ", %o: " << mv << ", %fs: " << ms
     << ") attributes {llvm.emit_c_interface} {\n";
  auto toTensor = [&](const char *name, const std::string &m,
                      const std::string &t) {
    os << "  %t" << name << " = bufferization.to_tensor %" << name
       << " restrict : " << m << " to " << t << "\n";
  };
  toTensor("q", mq, tq);
  toTensor("k", mq, tq);
  toTensor("v", mv, tv);
  toTensor("g", mq, tq);
  toTensor("beta", mb, tb);
  if (c.initialState)
    toTensor("s0", ms, ts);
  os << "  %r:2 = kimi.kda %tq, %tk, %tv, %tg, %tbeta";
  if (c.initialState)
    os << " initial_state %ts0";
  os << " scale(" << c.scale << ") {decay = #kimi.decay<chunk = " << c.chunk
     << ", diag = " << (c.diag == Diag::dense ? "dense" : "pairwise")
     << ">} : (" << tq << ", " << tq << ", " << tv << ", " << tq << ", " << tb;
  if (c.initialState)
    os << ", " << ts;
  os << ") -> (" << tv << ", " << ts << ")\n";
  os << "  bufferization.materialize_in_destination %r#0 in restrict "
        "writable %o : ("
     << tv << ", " << mv << ") -> ()\n";
  os << "  bufferization.materialize_in_destination %r#1 in restrict "
        "writable %fs : ("
     << ts << ", " << ms << ") -> ()\n";
  os << "  return\n}\n";
  return os.str();
}

std::unique_ptr<KdaKernel> KdaKernel::compile(const KdaConfig &config,
                                              std::string &error) {
  DialectRegistry registry;
  registry.insert<KimiDialect>();
  registerJitDialects(registry);

  std::unique_ptr<KdaKernel> kernel(new KdaKernel());
  kernel->config = config;
  kernel->impl = std::make_unique<Impl>(registry);
  MLIRContext &ctx = kernel->impl->context;

  std::string diagnostics;
  llvm::raw_string_ostream diagStream(diagnostics);
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diagStream << d << "\n";
    return success();
  });

  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kdaFunctionSource(config), &ctx);
  if (!module) {
    error = "parse failed: " + diagnostics;
    return nullptr;
  }

  PassManager lower(&ctx);
  lower.addPass(createKimiLowerKda());
  if (failed(lower.run(*module))) {
    error = "kimi-lower-kda failed: " + diagnostics;
    return nullptr;
  }
  llvm::raw_string_ostream(kernel->lowered) << *module;

  auto engine = jitModule(*module, diagnostics, error);
  if (!engine)
    return nullptr;
  kernel->impl->engine = std::move(engine);
  auto fn = kernel->impl->engine->lookup("_mlir_ciface_kda");
  if (!fn) {
    error = "lookup failed: " + llvm::toString(fn.takeError());
    return nullptr;
  }
  kernel->impl->fn = *fn;
  return kernel;
}

void KdaKernel::run(const float *q, const float *k, const float *v,
                    const float *g, const float *beta,
                    const float *initialState, float *out,
                    float *finalState) const {
  const KdaShape &s = config.shape;
  auto mq = descriptor<4>(q, {s.B, s.T, s.H, s.dk});
  auto mk = descriptor<4>(k, {s.B, s.T, s.H, s.dk});
  auto mv = descriptor<4>(v, {s.B, s.T, s.H, s.dv});
  auto mg = descriptor<4>(g, {s.B, s.T, s.H, s.dk});
  auto mb = descriptor<3>(beta, {s.B, s.T, s.H});
  auto mo = descriptor<4>(out, {s.B, s.T, s.H, s.dv});
  auto mfs = descriptor<4>(finalState, {s.B, s.H, s.dk, s.dv});
  if (config.initialState) {
    auto ms = descriptor<4>(initialState, {s.B, s.H, s.dk, s.dv});
    reinterpret_cast<FnWithState>(impl->fn)(&mq, &mk, &mv, &mg, &mb, &ms, &mo,
                                            &mfs);
  } else {
    reinterpret_cast<FnNoState>(impl->fn)(&mq, &mk, &mv, &mg, &mb, &mo, &mfs);
  }
}

} // namespace kimi::test

//===- SerialKernels.cpp - host element accesses -> one-thread kernels ----===//
//
// kimi-gpu-serial-kernels: see lowering/Passes.td. Works on runs of
// consecutive ops in each host block: a run is made of element accesses,
// pure ops, and scf.for/scf.if whose bodies hold neither launches nor
// allocations nor calls. A run that touches memory becomes the body of a
// 1x1x1 gpu.launch; pure ops whose results the host still needs are hoisted
// in front of it.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUSERIALKERNELS
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {

/// The buffer a memref views (through subviews, reshapes and casts).
Value rootBuffer(Value memref) {
  while (auto view = memref.getDefiningOp<ViewLikeOpInterface>())
    memref = view.getViewSource();
  return memref;
}

/// Whether a kernel reads or writes `memref` or a view of it.
bool usedByKernels(Value memref) {
  for (OpOperand &use : memref.getUses()) {
    Operation *user = use.getOwner();
    if (isa<gpu::LaunchFuncOp>(user) || user->getParentOfType<gpu::LaunchOp>())
      return true;
    if (auto view = dyn_cast<ViewLikeOpInterface>(user))
      if (view.getViewSource() == memref &&
          llvm::any_of(user->getResults(), usedByKernels))
        return true;
  }
  return false;
}

/// Ownership-based deallocation keeps its bookkeeping (pointers as index,
/// ownership flags as i1) in small host buffers. Model data can have these
/// element types too (expert masks are i1): a buffer that a kernel uses is
/// device data whatever its element type.
bool isHostBookkeeping(Value memref) {
  Type element = cast<MemRefType>(memref.getType()).getElementType();
  if (!element.isIndex() && !element.isInteger(1))
    return false;
  Value root = rootBuffer(memref);
  return !isa_and_nonnull<memref::AllocOp, memref::AllocaOp>(
             root.getDefiningOp()) ||
         !usedByKernels(root);
}

bool isAccess(Operation *op) {
  if (auto load = dyn_cast<memref::LoadOp>(op))
    return !isHostBookkeeping(load.getMemRef());
  if (auto store = dyn_cast<memref::StoreOp>(op))
    return !isHostBookkeeping(store.getMemRef());
  return false;
}

bool touchesMemory(Operation *op) {
  bool found = false;
  op->walk([&](Operation *inner) {
    if (isAccess(inner))
      found = true;
  });
  return found;
}

/// Ops that must stay on the host (or cannot be part of a kernel).
bool hostOnly(Operation *op) {
  bool found = false;
  op->walk([&](Operation *inner) {
    if (isa<gpu::LaunchOp, gpu::LaunchFuncOp, memref::AllocOp,
            memref::AllocaOp, memref::DeallocOp, func::CallOp>(inner) ||
        isa<LLVM::LLVMDialect>(inner->getDialect()))
      found = true;
  });
  return found;
}

bool kernelable(Operation *op) {
  if (op->hasTrait<OpTrait::IsTerminator>())
    return false;
  if (isAccess(op))
    return true;
  if (isa<memref::LoadOp, memref::StoreOp>(op))
    return false; // bookkeeping: stays on the host
  if (isa<scf::ForOp, scf::IfOp>(op))
    return !hostOnly(op);
  return op->getNumRegions() == 0 && isPure(op);
}

constexpr llvm::StringLiteral kReadI32 = "kimi_gpu_read_i32";

/// The body of kimi::kHostReadFn -> kimi_gpu_read_i32(the element's
/// address): the runtime waits for the stream and copies it to the host.
LogicalResult lowerHostReads(ModuleOp module) {
  auto fn = module.lookupSymbol<func::FuncOp>(kimi::kHostReadFn);
  if (!fn || fn.isExternal())
    return success();
  auto argType = fn.getNumArguments() == 1
                     ? dyn_cast<MemRefType>(fn.getArgumentTypes().front())
                     : MemRefType();
  if (!argType || argType.getRank() != 0 ||
      !argType.getElementType().isInteger(32) || fn.getNumResults() != 1)
    return fn.emitError() << "'" << kimi::kHostReadFn
                          << "' must take a memref<i32> and return its value";
  OpBuilder b(module.getContext());
  Type i32 = b.getI32Type(), index = b.getIndexType();
  if (!module.lookupSymbol<func::FuncOp>(kReadI32)) {
    b.setInsertionPointToEnd(module.getBody());
    func::FuncOp::create(b, module.getLoc(), kReadI32,
                         b.getFunctionType({index}, {i32}))
        .setPrivate();
  }
  Block &body = fn.getBody().front();
  while (!body.empty())
    body.back().erase();
  b.setInsertionPointToStart(&body);
  Location loc = fn.getLoc();
  Value buffer = body.getArgument(0);
  // aligned pointer + 4 * offset.
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, buffer);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, buffer);
  Value address = arith::AddIOp::create(
      b, loc, base,
      arith::MulIOp::create(b, loc, meta.getOffset(),
                            arith::ConstantIndexOp::create(b, loc, 4)));
  Value value = func::CallOp::create(b, loc, kReadI32, TypeRange{i32},
                                     ValueRange{address})
                    .getResult(0);
  func::ReturnOp::create(b, loc, value);
  return success();
}

struct KimiGpuSerialKernels
    : kimi::impl::KimiGpuSerialKernelsBase<KimiGpuSerialKernels> {
  LogicalResult wrap(ArrayRef<Operation *> run) {
    llvm::SetVector<Operation *> inRun(run.begin(), run.end());
    auto usedAfter = [&](Operation *op) {
      for (Operation *user : op->getUsers()) {
        Operation *top = user;
        while (top && !inRun.contains(top) && top->getBlock() != run.front()->getBlock())
          top = top->getParentOp();
        if (!top || !inRun.contains(top))
          return true;
      }
      return false;
    };
    // Hoist pure ops the host needs (their operands come from outside).
    Operation *first = run.front();
    for (Operation *op : run) {
      if (isAccess(op) || op->getNumRegions() || !usedAfter(op))
        continue;
      bool operandsOutside = llvm::all_of(op->getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || !inRun.contains(def);
      });
      if (!operandsOutside)
        continue;
      op->moveBefore(first);
      inRun.remove(op);
    }
    for (Operation *op : inRun)
      if (usedAfter(op))
        return op->emitError()
               << "'" << op->getName()
               << "': host code of the GPU model needs this value after a "
                  "one-thread kernel computed it from device memory (it "
                  "would need a device-to-host copy in the middle of an "
                  "entry)";
    if (inRun.empty())
      return success();
    OpBuilder b(inRun.front());
    Location loc = inRun.front()->getLoc();
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    auto launch = gpu::LaunchOp::create(b, loc, one, one, one, one, one, one);
    Block &body = launch.getBody().front();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(&body);
    auto term = gpu::TerminatorOp::create(b, loc);
    for (Operation *op : inRun)
      op->moveBefore(term);
    return success();
  }

  LogicalResult processBlock(Block &block) {
    SmallVector<Operation *> run;
    auto flush = [&]() -> LogicalResult {
      bool touches = llvm::any_of(run, touchesMemory);
      SmallVector<Operation *> ops = std::move(run);
      run.clear();
      return touches ? wrap(ops) : success();
    };
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (isa<gpu::LaunchOp>(op)) {
        if (failed(flush()))
          return failure();
        continue;
      }
      if (kernelable(&op)) {
        run.push_back(&op);
        continue;
      }
      if (failed(flush()))
        return failure();
      for (Region &region : op.getRegions())
        for (Block &inner : region)
          if (failed(processBlock(inner)))
            return failure();
    }
    return flush();
  }

  void runOnOperation() override {
    if (failed(lowerHostReads(getOperation())))
      return signalPassFailure();
    // Bookkeeping buffers live on the host stack (memref.alloc is device
    // memory in this target).
    SmallVector<memref::AllocOp> bookkeeping;
    getOperation().walk([&](memref::AllocOp alloc) {
      if (isHostBookkeeping(alloc.getResult()) &&
          !alloc->getParentOfType<gpu::LaunchOp>())
        bookkeeping.push_back(alloc);
    });
    for (memref::AllocOp alloc : bookkeeping) {
      OpBuilder b(alloc);
      auto stack = memref::AllocaOp::create(b, alloc.getLoc(), alloc.getType(),
                                            alloc.getDynamicSizes(),
                                            alloc.getSymbolOperands(),
                                            alloc.getAlignmentAttr());
      for (Operation *user : llvm::make_early_inc_range(alloc->getUsers()))
        if (isa<memref::DeallocOp>(user))
          user->erase();
      alloc.replaceAllUsesWith(stack.getResult());
      alloc.erase();
    }
    for (auto fn : getOperation().getOps<func::FuncOp>())
      for (Block &block : fn.getBody())
        if (failed(processBlock(block)))
          return signalPassFailure();
  }
};
} // namespace

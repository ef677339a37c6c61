//===- GpuWeightTable.cpp - weights through a table of device pointers ----===//
//
// kimi-gpu-weight-table: see lowering/Passes.td. The descriptor is built in
// the LLVM dialect and cast to the memref type; finalize-memref-to-llvm folds
// the cast pair, so users of the weight see an ordinary memref.
//
//===----------------------------------------------------------------------===//

#include "lowering/Passes.h"
#include "lowering/ToCPU/CpuCodegen.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/ADT/StringMap.h"

namespace kimi {
#define GEN_PASS_DEF_KIMIGPUWEIGHTTABLE
#include "lowering/Passes.h.inc"
} // namespace kimi

using namespace mlir;

namespace {
constexpr llvm::StringLiteral kTable = kimi::kGpuWeightTable;

struct KimiGpuWeightTable
    : kimi::impl::KimiGpuWeightTableBase<KimiGpuWeightTable> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    // Slots by global name: kimi_w_<slot>.
    llvm::StringMap<int64_t> slots;
    SmallVector<memref::GlobalOp> globals;
    for (auto global : module.getOps<memref::GlobalOp>()) {
      StringRef name = global.getSymName();
      int64_t slot;
      if (!name.consume_front("kimi_w_") || name.getAsInteger(10, slot))
        continue;
      if (!global.getType().hasStaticShape()) {
        global.emitError() << "weight global @" << global.getSymName()
                           << " must have a static shape";
        return signalPassFailure();
      }
      slots[global.getSymName()] = slot;
      globals.push_back(global);
    }
    int64_t count = 0;
    for (auto &entry : slots)
      count = std::max(count, entry.second + 1);

    OpBuilder b(ctx);
    b.setInsertionPointToStart(module.getBody());
    auto ptrType = LLVM::LLVMPointerType::get(ctx);
    auto tableType = LLVM::LLVMArrayType::get(ptrType, std::max<int64_t>(count, 1));
    auto table = LLVM::GlobalOp::create(
        b, module.getLoc(), tableType, /*isConstant=*/false,
        LLVM::Linkage::External, kTable, Attribute(), /*alignment=*/64);
    // Zero-initialised (a definition, not a declaration): an empty region
    // returning llvm.mlir.zero.
    {
      Block *body = b.createBlock(&table.getInitializerRegion());
      b.setInsertionPointToStart(body);
      Value zero = LLVM::ZeroOp::create(b, module.getLoc(), tableType);
      LLVM::ReturnOp::create(b, module.getLoc(), zero);
    }

    auto i64 = b.getI64Type();
    WalkResult walk = module.walk([&](memref::GetGlobalOp get) {
      auto it = slots.find(get.getName());
      if (it == slots.end())
        return WalkResult::advance();
      MemRefType type = get.getType();
      Location loc = get.getLoc();
      b.setInsertionPoint(get);
      Value base = LLVM::AddressOfOp::create(b, loc, ptrType, kTable);
      Value slotPtr = LLVM::GEPOp::create(
          b, loc, ptrType, tableType, base,
          ArrayRef<LLVM::GEPArg>{0, static_cast<int32_t>(it->second)});
      Value data = LLVM::LoadOp::create(b, loc, ptrType, slotPtr);
      int64_t rank = type.getRank();
      SmallVector<Type> fields = {ptrType, ptrType, i64};
      if (rank > 0) {
        fields.push_back(LLVM::LLVMArrayType::get(i64, rank));
        fields.push_back(LLVM::LLVMArrayType::get(i64, rank));
      }
      auto descType = LLVM::LLVMStructType::getLiteral(ctx, fields);
      Value desc = LLVM::UndefOp::create(b, loc, descType);
      auto constant = [&](int64_t v) -> Value {
        return LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(v));
      };
      desc = LLVM::InsertValueOp::create(b, loc, desc, data, ArrayRef<int64_t>{0});
      desc = LLVM::InsertValueOp::create(b, loc, desc, data, ArrayRef<int64_t>{1});
      desc = LLVM::InsertValueOp::create(b, loc, desc, constant(0),
                                         ArrayRef<int64_t>{2});
      int64_t stride = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        desc = LLVM::InsertValueOp::create(b, loc, desc,
                                           constant(type.getDimSize(d)),
                                           ArrayRef<int64_t>{3, d});
        desc = LLVM::InsertValueOp::create(b, loc, desc, constant(stride),
                                           ArrayRef<int64_t>{4, d});
        stride *= type.getDimSize(d);
      }
      Value memref =
          UnrealizedConversionCastOp::create(b, loc, type, desc).getResult(0);
      get.replaceAllUsesWith(memref);
      get.erase();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    for (memref::GlobalOp global : globals)
      global.erase();
    // Any other global (a bufferized constant) is host memory: no kernel
    // may read it.
    WalkResult host = module.walk([&](memref::GetGlobalOp get) {
      if (get->getParentOfType<mlir::gpu::GPUModuleOp>())
        return WalkResult::advance();
      auto global = SymbolTable::lookupNearestSymbolFrom<memref::GlobalOp>(
          get, get.getNameAttr());
      auto diag = get.emitError() << "global @" << get.getName();
      if (global && global.getInitialValue())
        if (auto dense = dyn_cast<DenseElementsAttr>(*global.getInitialValue()))
          if (dense.isSplat())
            diag << " (splat " << dense.getSplatValue<Attribute>() << ")";
      diag << " would be host memory in the GPU model (constants must be "
              "computed on the device)";
      return WalkResult::interrupt();
    });
    if (host.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace

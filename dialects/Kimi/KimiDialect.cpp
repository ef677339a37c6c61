//===- KimiDialect.cpp - the kimi graph dialect ---------------------------===//
#include "dialects/Kimi/KimiDialect.h"
#include "dialects/Kimi/KimiAttrs.h"
#include "dialects/Kimi/KimiOps.h"
#include "mlir/Transforms/InliningUtils.h"

using namespace mlir;
using namespace kimi;

#include "dialects/Kimi/KimiDialect.cpp.inc"

namespace {
/// Every kimi op is pure value semantics with no region: inlining a layer
/// function into the entry (before kimi-shard) is always legal.
struct KimiInlinerInterface : DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;
  bool isLegalToInline(Operation *, Region *, bool, IRMapping &) const final {
    return true;
  }
};
} // namespace

void KimiDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Kimi/KimiOps.cpp.inc"
      >();
  registerAttributes();
  addInterfaces<KimiInlinerInterface>();
}

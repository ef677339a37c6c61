//===- KimiDialect.cpp - the kimi graph dialect ---------------------------===//
#include "dialects/Kimi/KimiDialect.h"
#include "dialects/Kimi/KimiAttrs.h"
#include "dialects/Kimi/KimiOps.h"

using namespace mlir;
using namespace kimi;

#include "dialects/Kimi/KimiDialect.cpp.inc"

void KimiDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Kimi/KimiOps.cpp.inc"
      >();
  registerAttributes();
}

//===- KimiAttrs.h - attributes and enums of kimi ---------------*- C++ -*-===//
#ifndef KIMI_DIALECTS_KIMI_KIMIATTRS_H
#define KIMI_DIALECTS_KIMI_KIMIATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include <optional>

#include "dialects/Kimi/KimiEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Kimi/KimiAttrs.h.inc"

#endif

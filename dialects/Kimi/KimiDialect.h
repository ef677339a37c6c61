//===- KimiDialect.h - the kimi graph dialect -------------------*- C++ -*-===//
#ifndef KIMI_DIALECTS_KIMI_KIMIDIALECT_H
#define KIMI_DIALECTS_KIMI_KIMIDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/Kimi/KimiDialect.h.inc"

#endif

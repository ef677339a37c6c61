//===- KimiOps.h - ops of the kimi dialect ----------------------*- C++ -*-===//
#ifndef KIMI_DIALECTS_KIMI_KIMIOPS_H
#define KIMI_DIALECTS_KIMI_KIMIOPS_H

#include "dialects/Kimi/KimiAttrs.h"
#include "dialects/Kimi/KimiDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/Kimi/KimiOps.h.inc"

#endif

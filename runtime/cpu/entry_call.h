//===- entry_call.h - Calls a packed entry point ----------------*- C++ -*-===//
//
// Compiled entries are `void kimi_entry_<name>(void **args)` with
// `args[0]` the results struct and `args[1 + i]` input i's memref
// descriptor (docs/runtime-abi.md): one C signature for every model, however
// many state tensors it has.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CPU_ENTRY_CALL_H
#define KIMI_RUNTIME_CPU_ENTRY_CALL_H

#include "runtime/support/status.h"

#include <cstddef>
#include <vector>

namespace kimi::rt {

/// Calls `fn({results, args[0], ..., args[n-1]})`.
Status callEntry(void *fn, void *results, const std::vector<void *> &args);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CPU_ENTRY_CALL_H

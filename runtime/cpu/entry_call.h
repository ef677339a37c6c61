//===- entry_call.h - Calls a C-interface entry point -----------*- C++ -*-===//
//
// `_mlir_ciface_<entry>(Results *out, MemRef *arg0, ..., MemRef *argN-1)`:
// every parameter is a pointer, their number is known only from the
// artifact. Calls with up to kExactArity arguments use a function type of the
// exact arity. Larger calls (a 93-layer K3 decode passes several hundred
// states) use the next multiple of kPadArity, passing null for the extra
// trailing pointers: in the x86-64 System V and AArch64 procedure call
// standards the caller owns the argument area, so a callee ignores trailing
// arguments it does not declare. Up to kMaxArity arguments are supported.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CPU_ENTRY_CALL_H
#define KIMI_RUNTIME_CPU_ENTRY_CALL_H

#include "runtime/support/status.h"

#include <cstddef>
#include <vector>

namespace kimi::rt {

inline constexpr size_t kExactArity = 128;
inline constexpr size_t kPadArity = 64;
inline constexpr size_t kMaxArity = 1024;

/// Calls `fn(results, args[0], ..., args[n-1])`.
Status callEntry(void *fn, void *results, const std::vector<void *> &args);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CPU_ENTRY_CALL_H

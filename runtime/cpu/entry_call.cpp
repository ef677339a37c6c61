//===- entry_call.cpp - Calls a packed entry point ------------------------===//

#include "runtime/cpu/entry_call.h"

namespace kimi::rt {

Status callEntry(void *fn, void *results, const std::vector<void *> &args) {
  if (!fn)
    return invalidArgument("entry call: null function");
  std::vector<void *> packed;
  packed.reserve(args.size() + 1);
  packed.push_back(results);
  packed.insert(packed.end(), args.begin(), args.end());
  reinterpret_cast<void (*)(void **)>(fn)(packed.data());
  return Status::ok();
}

} // namespace kimi::rt

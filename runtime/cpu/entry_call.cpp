//===- entry_call.cpp - Calls a C-interface entry point -------------------===//

#include "runtime/cpu/entry_call.h"

#include <array>
#include <utility>

namespace kimi::rt {
namespace {

template <size_t> using VoidPtr = void *;
using Caller = void (*)(void *fn, void *results, void *const *args);

template <size_t... Is>
void callWith(void *fn, void *results, void *const *args,
              std::index_sequence<Is...>) {
  reinterpret_cast<void (*)(void *, VoidPtr<Is>...)>(fn)(results, args[Is]...);
}

template <size_t N> void callArity(void *fn, void *results, void *const *args) {
  callWith(fn, results, args, std::make_index_sequence<N>{});
}

template <size_t... Ns>
constexpr std::array<Caller, sizeof...(Ns)> exactTable(std::index_sequence<Ns...>) {
  return {&callArity<Ns>...};
}

template <size_t... Ks>
constexpr std::array<Caller, sizeof...(Ks)> paddedTable(std::index_sequence<Ks...>) {
  // Entry k calls with kExactArity + (k + 1) * kPadArity arguments.
  return {&callArity<kExactArity + (Ks + 1) * kPadArity>...};
}

constexpr auto kExact = exactTable(std::make_index_sequence<kExactArity + 1>{});
constexpr auto kPadded =
    paddedTable(std::make_index_sequence<(kMaxArity - kExactArity) / kPadArity>{});

} // namespace

Status callEntry(void *fn, void *results, const std::vector<void *> &args) {
  if (!fn)
    return invalidArgument("entry call: null function");
  const size_t n = args.size();
  if (n <= kExactArity) {
    kExact[n](fn, results, args.data());
    return Status::ok();
  }
  if (n > kMaxArity)
    return executionError("entry call: " + std::to_string(n) +
                          " arguments exceed the supported " +
                          std::to_string(kMaxArity));
  const size_t k = (n - kExactArity + kPadArity - 1) / kPadArity - 1;
  const size_t arity = kExactArity + (k + 1) * kPadArity;
  std::vector<void *> padded(args);
  padded.resize(arity, nullptr);
  kPadded[k](fn, results, padded.data());
  return Status::ok();
}

} // namespace kimi::rt

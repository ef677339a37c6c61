//===- IrNesting.h - Bounding the nesting of textual IR ---------*- C++ -*-===//
//
// MLIR's parser recurses once per nested attribute, type, region or
// operand list: IR nested some 10^4 levels deep overflows the stack and
// kills the tool with SIGSEGV. The tools that parse IR (kimi-opt, and
// kimi-compile on .mlir input) first measure how deep the text nests and
// refuse it past a bound with an error at the place it goes too deep.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TOOLS_COMMON_IRNESTING_H
#define KIMI_TOOLS_COMMON_IRNESTING_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kimi {

/// Deeper than any IR kimi writes or reads (a model nests some 10 levels)
/// and far from the depth that overflows an 8 MiB stack.
inline constexpr int64_t kMaxIrNesting = 256;

/// Where the text first nests deeper than the bound.
struct IrNestingExcess {
  int64_t line = 0, column = 0; // 1-based
  int64_t limit = 0;
  std::string message() const;
};

/// The first place `text` nests deeper than `limit` levels of (), [], {}
/// and <> (outside string literals and // comments; `->` and `>=` are no
/// brackets), or nothing.
std::optional<IrNestingExcess> findIrNestingExcess(std::string_view text,
                                                   int64_t limit = kMaxIrNesting);

} // namespace kimi

#endif // KIMI_TOOLS_COMMON_IRNESTING_H

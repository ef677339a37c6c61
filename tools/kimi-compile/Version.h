//===- Version.h - what kimi-compile calls itself -------------*- C++ -*-===//
//
// The name and version every artifact records as its compiler
// (ArtifactSpec::compiler) and `--version` prints.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_TOOLS_KIMI_COMPILE_VERSION_H
#define KIMI_TOOLS_KIMI_COMPILE_VERSION_H

#ifndef KIMI_VERSION
#define KIMI_VERSION "unknown"
#endif

namespace kimi {
inline constexpr const char *kCompilerName = "kimi-compile " KIMI_VERSION;
} // namespace kimi

#endif

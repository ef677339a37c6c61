//===- file_io.h - Whole-file writes ----------------------------*- C++ -*-===//

#ifndef KIMI_RUNTIME_SUPPORT_FILE_IO_H
#define KIMI_RUNTIME_SUPPORT_FILE_IO_H

#include "runtime/support/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kimi::rt {

/// Writes `bytes` to `path` (created or replaced).
Status writeBytesToFile(const std::string &path, const std::vector<uint8_t> &bytes);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SUPPORT_FILE_IO_H

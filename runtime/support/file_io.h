//===- file_io.h - Output files written whole or not at all -----*- C++ -*-===//
//
// An output of a kimi tool (an artifact, saved weights, dumped logits) is
// written to a temporary file beside it and renamed over it only when every
// write succeeded: a failed or interrupted run leaves the old file as it
// was, and a process that has the old file mapped keeps reading the old
// bytes (the rename gives the path a new inode; rewriting in place turned
// such reads into SIGBUS). A path that exists and is no regular file (a
// device such as /dev/null or /dev/full, a FIFO) is written directly.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_SUPPORT_FILE_IO_H
#define KIMI_RUNTIME_SUPPORT_FILE_IO_H

#include "runtime/support/status.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

class OutputFile {
public:
  /// Opens the temporary file for `path` (or `path` itself, see above).
  static StatusOr<std::unique_ptr<OutputFile>> create(const std::string &path);
  /// Removes the temporary file unless commit() succeeded.
  ~OutputFile();
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;

  /// Appends `bytes` bytes; the first failed write is kept and reported.
  Status write(const void *data, size_t bytes);
  /// Closes (every buffered write checked) and renames into place.
  Status commit();
  const std::string &path() const { return path_; }

private:
  OutputFile() = default;
  std::string path_, temporary_; // temporary_ empty: writing path_ directly
  std::FILE *file_ = nullptr;
  bool committed_ = false;
};

/// Writes `bytes` to `path` (created or replaced, through an OutputFile).
Status writeBytesToFile(const std::string &path, const std::vector<uint8_t> &bytes);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SUPPORT_FILE_IO_H

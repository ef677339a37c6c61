//===- file_io.h - Input files checked, output files whole -----*- C++ -*-===//
//
// An input is opened only when it is a regular file: opened with O_NONBLOCK
// (a FIFO must not wait for a writer) and refused after fstat unless
// S_ISREG, so a FIFO, a device or a directory where a file is expected is one
// error naming it, never a hang or a read of something endless.
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

/// An open regular file: its descriptor (owned; closed by the destructor)
/// and its size when opened.
class RegularFile {
public:
  /// Opens `path` for reading; errors name it as `label` (e.g. "artifact
  /// 'x.kimi'").
  static StatusOr<RegularFile> open(const std::string &path,
                                    const std::string &label);
  RegularFile(RegularFile &&other) noexcept
      : fd_(other.fd_), size_(other.size_) {
    other.fd_ = -1;
  }
  RegularFile &operator=(RegularFile &&) = delete;
  RegularFile(const RegularFile &) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  /// Reads the whole file (size() bytes; a file that shrank since open is an
  /// error naming `label`).
  Status readAll(std::vector<uint8_t> &out, const std::string &label) const;

private:
  RegularFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// The bytes of the regular file `path`, refused past `maxBytes`.
StatusOr<std::string> readRegularFile(const std::string &path,
                                      const std::string &label,
                                      uint64_t maxBytes);

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

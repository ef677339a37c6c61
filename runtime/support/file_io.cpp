//===- file_io.cpp - Output files written whole or not at all -------------===//

#include "runtime/support/file_io.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kimi::rt {

StatusOr<std::unique_ptr<OutputFile>> OutputFile::create(const std::string &path) {
  if (path.empty())
    return invalidArgument("an output file needs a path");
  std::unique_ptr<OutputFile> out(new OutputFile());
  out->path_ = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      return ioError("cannot write '" + path + "': it is a directory");
    // A device or FIFO: written as it is (nothing to rename over).
    out->file_ = std::fopen(path.c_str(), "wb");
    if (!out->file_)
      return ioError("cannot write '" + path + "': " + std::strerror(errno));
    return out;
  }
  std::string pattern = path + ".tmp-XXXXXX";
  int fd = ::mkstemp(pattern.data());
  if (fd < 0)
    return ioError("cannot create a temporary file beside '" + path +
                   "': " + std::strerror(errno));
  // mkstemp makes it 0600; an output gets the usual mode (umask applied).
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  out->temporary_ = pattern;
  out->file_ = ::fdopen(fd, "wb");
  if (!out->file_) {
    int err = errno;
    ::close(fd);
    return ioError("cannot write '" + pattern + "': " + std::strerror(err));
  }
  return out;
}

OutputFile::~OutputFile() {
  if (file_)
    std::fclose(file_);
  if (!committed_ && !temporary_.empty())
    ::unlink(temporary_.c_str());
}

Status OutputFile::write(const void *data, size_t bytes) {
  if (!file_)
    return failedPrecondition("'" + path_ + "' is closed");
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes)
    return ioError("cannot write '" + path_ + "': " +
                   std::strerror(errno ? errno : EIO));
  return Status::ok();
}

Status OutputFile::commit() {
  if (!file_)
    return failedPrecondition("'" + path_ + "' is closed");
  std::FILE *f = file_;
  file_ = nullptr;
  // Buffered writes fail here at the latest (a full disk, /dev/full).
  bool failed = std::fflush(f) != 0;
  int err = failed ? errno : 0;
  if (std::fclose(f) != 0 && !failed) {
    failed = true;
    err = errno;
  }
  if (failed)
    return ioError("cannot write '" + path_ + "': " + std::strerror(err ? err : EIO));
  if (!temporary_.empty() && ::rename(temporary_.c_str(), path_.c_str()) != 0)
    return ioError("cannot rename '" + temporary_ + "' to '" + path_ + "': " +
                   std::strerror(errno));
  committed_ = true;
  return Status::ok();
}

Status writeBytesToFile(const std::string &path,
                        const std::vector<uint8_t> &bytes) {
  KIMI_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::create(path));
  KIMI_RETURN_IF_ERROR(out->write(bytes.data(), bytes.size()));
  return out->commit();
}

} // namespace kimi::rt

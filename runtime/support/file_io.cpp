//===- file_io.cpp - Output files written whole or not at all -------------===//

#include "runtime/support/file_io.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kimi::rt {

namespace {

/// The process's umask. Read from /proc (Linux 4.7+), since umask() can only
/// be read by setting it, which races with other threads creating files;
/// that way only where /proc has no Umask line.
mode_t processUmask() {
  if (std::FILE *f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned mask = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f))
      found = std::sscanf(line, "Umask: %o", &mask) == 1;
    std::fclose(f);
    if (found)
      return static_cast<mode_t>(mask);
  }
  mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

} // namespace

StatusOr<RegularFile> RegularFile::open(const std::string &path,
                                        const std::string &label) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
  // below as not a regular file (for which the flag changes nothing).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return ioError("cannot open " + label + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ioError("cannot stat " + label + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return ioError(label + " is not a regular file");
  }
  return RegularFile(fd, static_cast<uint64_t>(st.st_size));
}

RegularFile::~RegularFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

Status RegularFile::readAll(std::vector<uint8_t> &out,
                            const std::string &label) const {
  out.resize(size_);
  size_t done = 0;
  while (done < size_) {
    ssize_t n = ::pread(fd_, out.data() + done, size_ - done,
                        static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return ioError("cannot read " + label + ": " +
                     (n < 0 ? std::strerror(errno)
                            : "the file shrank while it was read"));
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

StatusOr<std::string> readRegularFile(const std::string &path,
                                      const std::string &label,
                                      uint64_t maxBytes) {
  KIMI_ASSIGN_OR_RETURN(RegularFile file, RegularFile::open(path, label));
  if (file.size() > maxBytes)
    return invalidArgument(label + ": " + std::to_string(file.size()) +
                           " bytes exceed the limit of " +
                           std::to_string(maxBytes));
  std::vector<uint8_t> bytes;
  KIMI_RETURN_IF_ERROR(file.readAll(bytes, label));
  return std::string(bytes.begin(), bytes.end());
}

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
  ::fchmod(fd, 0666 & ~processUmask());
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

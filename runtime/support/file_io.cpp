//===- file_io.cpp - Whole-file writes ------------------------------------===//

#include "runtime/support/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kimi::rt {

Status writeBytesToFile(const std::string &path,
                        const std::vector<uint8_t> &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return ioError("cannot create '" + path + "': " + std::strerror(errno));
  size_t n = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  int err = n == bytes.size() ? 0 : errno;
  if (std::fclose(f) != 0 && !err)
    err = errno;
  if (n != bytes.size() || err)
    return ioError("cannot write '" + path + "': " +
                   std::strerror(err ? err : EIO));
  return Status::ok();
}

} // namespace kimi::rt

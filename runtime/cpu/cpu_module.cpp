//===- cpu_module.cpp - A shared object loaded from artifact bytes --------===//

#include "runtime/cpu/cpu_module.h"
#include "runtime/support/text.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

namespace kimi::rt {
namespace {

bool writeAll(int fd, const std::vector<uint8_t> &bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string dlError() {
  const char *e = ::dlerror();
  return e ? e : "unknown dlopen error";
}

} // namespace

StatusOr<std::unique_ptr<CpuModule>>
CpuModule::load(const std::vector<uint8_t> &image, const std::string &name) {
  const std::string label = "shared object " + quoted(name);
  static const uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (image.size() < 64 || std::memcmp(image.data(), kElfMagic, 4) != 0)
    return moduleError(label + " is not an ELF file (" +
                       std::to_string(image.size()) + " bytes)");

  std::unique_ptr<CpuModule> module(new CpuModule());
  module->name_ = name;
  std::string firstError;

#ifdef MFD_CLOEXEC
  // The memfd stays open while the module is loaded: dlopen() identifies an
  // object by the path it was opened with, and "/proc/self/fd/N" is unique
  // only while fd N is ours. A path still registered by an object that was
  // not unloaded (RTLD_NOLOAD finds it) is not used.
  {
    int fd = ::memfd_create("kimi-module", MFD_CLOEXEC);
    if (fd >= 0) {
      std::string path = "/proc/self/fd/" + std::to_string(fd);
      if (void *stale = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
        ::dlclose(stale);
        firstError = "path " + path + " is taken by a loaded object";
      } else if (!writeAll(fd, image)) {
        firstError = std::string("memfd write: ") + std::strerror(errno);
      } else {
        module->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!module->handle_)
          firstError = dlError();
      }
      if (module->handle_)
        module->fd_ = fd;
      else
        ::close(fd);
    }
  }
#endif
  if (!module->handle_) {
    // A file name never used before in this process (pid + counter), so
    // dlopen() cannot mistake it for an object loaded earlier.
    static std::atomic<uint64_t> counter{0};
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") +
                          "/kimi-module-" + std::to_string(::getpid()) + "-" +
                          std::to_string(counter++) + "-XXXXXX";
    std::vector<char> path(pattern.begin(), pattern.end());
    path.push_back('\0');
    int fd = ::mkstemp(path.data());
    if (fd < 0)
      return moduleError("cannot load " + label + ": " +
                         (firstError.empty() ? "" : firstError + "; ") +
                         "mkstemp(" + pattern + "): " + std::strerror(errno));
    bool ok = writeAll(fd, image);
    int err = errno;
    ::close(fd);
    if (ok)
      module->handle_ = ::dlopen(path.data(), RTLD_NOW | RTLD_LOCAL);
    std::string error = ok ? (module->handle_ ? "" : dlError())
                           : std::string("write: ") + std::strerror(err);
    ::unlink(path.data());
    if (!module->handle_)
      return moduleError("cannot load " + label + ": " +
                         (firstError.empty() || firstError == error
                              ? error
                              : firstError + "; " + error));
  }
  return module;
}

CpuModule::~CpuModule() {
  if (handle_)
    ::dlclose(handle_);
  if (fd_ >= 0)
    ::close(fd_);
}

StatusOr<void *> CpuModule::symbol(const std::string &symbol) const {
  ::dlerror();
  void *address = ::dlsym(handle_, symbol.c_str());
  if (!address)
    return moduleError("symbol " + quoted(symbol) + " not found in shared object " +
                       quoted(name_));
  return address;
}

int64_t CpuModule::symbolSize(void *address) const {
#if defined(__GLIBC__)
  Dl_info info;
  void *entry = nullptr;
  if (::dladdr1(address, &info, &entry, RTLD_DL_SYMENT) && entry &&
      info.dli_saddr == address)
    return static_cast<int64_t>(static_cast<const ElfW(Sym) *>(entry)->st_size);
#endif
  (void)address;
  return -1;
}

} // namespace kimi::rt

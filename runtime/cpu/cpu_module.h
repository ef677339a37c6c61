//===- cpu_module.h - A shared object loaded from artifact bytes -*- C++ -*-===//
//
// Writes the ELF image of a `cpu_shared_object` kernel to an anonymous file
// (memfd_create; a deleted mkstemp file where that is unavailable) and
// dlopen()s it with RTLD_NOW | RTLD_LOCAL. Every load is a fresh copy with
// its own globals, so two modules from the same artifact never share weights:
// the path handed to dlopen() is unique among loaded objects (dlopen()
// returns an already loaded object for a path it has seen).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CPU_CPU_MODULE_H
#define KIMI_RUNTIME_CPU_CPU_MODULE_H

#include "runtime/support/status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

class CpuModule {
public:
  /// Loads `image`; `name` labels the module in messages.
  static StatusOr<std::unique_ptr<CpuModule>> load(const std::vector<uint8_t> &image,
                                                   const std::string &name);
  ~CpuModule();
  CpuModule(const CpuModule &) = delete;
  CpuModule &operator=(const CpuModule &) = delete;

  /// The address of `symbol`; an error naming it when it is absent.
  StatusOr<void *> symbol(const std::string &symbol) const;
  /// Size in bytes of the ELF symbol at `address` (from its symbol table
  /// entry), or -1 when unknown.
  int64_t symbolSize(void *address) const;

  const std::string &name() const { return name_; }

private:
  CpuModule() = default;
  void *handle_ = nullptr;
  int fd_ = -1; // the memfd holding the image, open while loaded
  std::string name_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CPU_CPU_MODULE_H

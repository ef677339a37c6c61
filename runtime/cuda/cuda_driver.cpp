//===- cuda_driver.cpp - The CUDA driver API, loaded at run time ----------===//

#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>
#include <mutex>

namespace kimi::rt {

namespace {
std::string dlErrorText() {
  const char *e = ::dlerror();
  return e ? e : "unknown dlopen error";
}

// Resolves the first of `names` the library exports into `slot`.
template <typename Fn, typename... Names>
bool resolve(void *handle, Fn &slot, std::string &missing, Names... names) {
  const char *list[] = {names...};
  for (const char *name : list) {
    ::dlerror();
    if (void *address = ::dlsym(handle, name)) {
      slot = reinterpret_cast<Fn>(address);
      return true;
    }
  }
  missing = list[0];
  return false;
}
} // namespace

StatusOr<std::shared_ptr<const CudaDriver>>
CudaDriver::load(const std::string &library) {
  void *handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return moduleError(library + " not found: no NVIDIA driver on this machine (" +
                       dlErrorText() + ")");
  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  driver->handle_ = handle;
  driver->library_ = library;
  std::string missing;
#define KIMI_CUDA_DRIVER_RESOLVE(name, type, ...)                              \
  if (!resolve(handle, driver->name, missing, __VA_ARGS__))                    \
    return moduleError(library + ": symbol " + missing +                       \
                       " missing (driver too old?)");
  KIMI_CUDA_DRIVER_FUNCTIONS(KIMI_CUDA_DRIVER_RESOLVE)
#undef KIMI_CUDA_DRIVER_RESOLVE
  return std::shared_ptr<const CudaDriver>(std::move(driver));
}

StatusOr<std::shared_ptr<const CudaDriver>> CudaDriver::shared() {
  static std::once_flag once;
  static std::shared_ptr<const CudaDriver> driver;
  static Status error;
  std::call_once(once, [] {
    auto loaded = load(kCudaDriverLibrary);
    if (loaded)
      driver = std::move(loaded.value());
    else
      error = loaded.takeStatus();
  });
  if (!driver)
    return error;
  return driver;
}

CudaDriver::~CudaDriver() {
  // A driver library is not unloaded: contexts and threads it started may
  // outlive this table, and dlclose() of libcuda is not supported.
  (void)handle_;
}

std::string CudaDriver::describe(cuda::CUresult result) const {
  const char *name = nullptr;
  const char *text = nullptr;
  if (!cuGetErrorName || cuGetErrorName(result, &name) != cuda::CUDA_SUCCESS ||
      !name)
    name = nullptr;
  if (!cuGetErrorString ||
      cuGetErrorString(result, &text) != cuda::CUDA_SUCCESS || !text)
    text = nullptr;
  std::string out = name ? name : "CUresult " + std::to_string(result);
  if (text)
    out += std::string(" (") + text + ")";
  else if (name)
    out += " (" + std::to_string(result) + ")";
  return out;
}

Status CudaDriver::check(cuda::CUresult result, const char *call) const {
  if (result == cuda::CUDA_SUCCESS)
    return Status::ok();
  return executionError(std::string(call) + ": " + describe(result));
}

} // namespace kimi::rt

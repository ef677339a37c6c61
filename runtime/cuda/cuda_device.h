//===- cuda_device.h - Device, memory, streams, events, modules -*- C++ -*-===//
//
// Thin RAII wrappers over the CUDA driver API (loaded at run time through
// `CudaDriver`). Every failing driver call becomes a Status naming the call
// and the driver's error name and description; nothing throws.
//
// Contexts: `CudaDevice::open` retains the device's primary context and makes
// it current on the calling thread. Other threads call `makeCurrent()` before
// using objects of that device. Buffers, streams, events and modules keep a
// pointer to their `CudaDevice`, which must outlive them.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_CUDA_DEVICE_H
#define KIMI_RUNTIME_CUDA_CUDA_DEVICE_H

#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/support/status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

class CudaStream;

/// One GPU with its primary context.
class CudaDevice {
public:
  /// cuInit, device `ordinal`, primary context retained and made current.
  /// `driver` defaults to `CudaDriver::shared()`.
  static StatusOr<std::unique_ptr<CudaDevice>>
  open(int ordinal = 0, std::shared_ptr<const CudaDriver> driver = nullptr);
  /// The number of devices (cuInit first); an error without a driver.
  static StatusOr<int> count(std::shared_ptr<const CudaDriver> driver = nullptr);

  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  /// Makes the primary context current on the calling thread.
  Status makeCurrent() const;
  /// Waits for all work of the context.
  Status synchronize() const;

  const CudaDriver &driver() const { return *driver_; }
  int ordinal() const { return ordinal_; }
  const std::string &name() const { return name_; }
  int smCount() const { return smCount_; }
  int computeMajor() const { return ccMajor_; }
  int computeMinor() const { return ccMinor_; }
  /// Largest dynamic shared memory a kernel may opt in to, in bytes.
  int maxSharedMemoryOptin() const { return maxSharedOptin_; }
  /// Allows `function` (named `what` in errors) launches with up to `bytes`
  /// of dynamic shared memory (cuFuncSetAttribute
  /// MAX_DYNAMIC_SHARED_SIZE_BYTES; needed above 48 KiB). kInvalidArgument
  /// above maxSharedMemoryOptin().
  Status allowDynamicSharedMemory(cuda::CUfunction function, int bytes,
                                  const std::string &what) const;
  size_t totalMemory() const { return totalMemory_; }
  int driverVersion() const { return driverVersion_; } // e.g. 13000
  /// "NVIDIA H200 (sm_90, 132 SMs, 140 GiB, driver 13.0)"
  std::string describe() const;

private:
  CudaDevice() = default;
  std::shared_ptr<const CudaDriver> driver_;
  int ordinal_ = 0;
  cuda::CUdevice device_ = 0;
  cuda::CUcontext context_ = nullptr;
  std::string name_;
  int smCount_ = 0, ccMajor_ = 0, ccMinor_ = 0, maxSharedOptin_ = 0;
  int driverVersion_ = 0;
  size_t totalMemory_ = 0;
};

/// Device memory, freed on destruction.
class DeviceBuffer {
public:
  /// `bytes` of uninitialised device memory (0 gives an empty buffer).
  static StatusOr<DeviceBuffer> allocate(const CudaDevice &device, size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer();

  /// Copies `bytes` from host `src` to offset `offset`; synchronous, or
  /// ordered on `stream` (then `src` must stay valid until it has run).
  Status upload(const void *src, size_t bytes, size_t offset = 0,
                const CudaStream *stream = nullptr);
  /// Copies `bytes` at offset `offset` to host `dst`; as `upload`.
  Status download(void *dst, size_t bytes, size_t offset = 0,
                  const CudaStream *stream = nullptr) const;
  /// Copies `bytes` from `src` (device to device), ordered on `stream`
  /// (nullptr: the default stream).
  Status copyFrom(const DeviceBuffer &src, size_t bytes,
                  const CudaStream *stream = nullptr);
  /// Frees now; the error of cuMemFree, if any.
  Status release();

  cuda::CUdeviceptr address() const { return address_; }
  size_t size() const { return bytes_; }
  /// A pointer-sized argument slot holding the address, for kernel launches.
  cuda::CUdeviceptr *addressSlot() { return &address_; }

private:
  Status checkRange(const char *what, size_t bytes, size_t offset) const;
  const CudaDevice *device_ = nullptr;
  cuda::CUdeviceptr address_ = 0;
  size_t bytes_ = 0;
};

/// A stream (non-blocking with respect to the legacy default stream unless
/// asked otherwise), destroyed on destruction.
class CudaStream {
public:
  static StatusOr<std::unique_ptr<CudaStream>> create(const CudaDevice &device,
                                                      bool nonBlocking = true);
  ~CudaStream();
  CudaStream(const CudaStream &) = delete;
  CudaStream &operator=(const CudaStream &) = delete;
  Status synchronize() const;
  cuda::CUstream handle() const { return stream_; }

private:
  CudaStream() = default;
  const CudaDevice *device_ = nullptr;
  cuda::CUstream stream_ = nullptr;
};

/// An event for ordering and timing.
class CudaEvent {
public:
  static StatusOr<std::unique_ptr<CudaEvent>> create(const CudaDevice &device);
  ~CudaEvent();
  CudaEvent(const CudaEvent &) = delete;
  CudaEvent &operator=(const CudaEvent &) = delete;
  /// Records on `stream` (nullptr: the default stream). `inGraph`: while
  /// `stream` is captured, as an event-record node of the graph
  /// (CU_EVENT_RECORD_EXTERNAL), so that each replay records it.
  Status record(const CudaStream *stream = nullptr, bool inGraph = false);
  Status synchronize() const;
  /// Milliseconds between two recorded events (waits for `end`).
  static StatusOr<float> elapsedMs(const CudaEvent &start, const CudaEvent &end);
  cuda::CUevent handle() const { return event_; }

private:
  CudaEvent() = default;
  const CudaDevice *device_ = nullptr;
  cuda::CUevent event_ = nullptr;
};

/// An instantiated CUDA graph: work captured from a stream once, replayed
/// with one launch (what the decode step of a model wants: many small
/// kernels, no per-kernel launch gaps). Device addresses and kernel
/// arguments are baked in at capture.
class CudaGraph {
public:
  /// Captures the work `enqueue` puts on `stream` (a created stream, not the
  /// legacy default one) and instantiates it. Nothing runs during capture.
  /// `relaxed`: CU_STREAM_CAPTURE_MODE_RELAXED, which lets `enqueue`
  /// allocate device memory (cuMemAlloc) while capturing.
  /// `previous`: a graph this capture replaces. When the two have the same
  /// topology, its executable is updated to the new capture's parameters
  /// (cuGraphExecUpdate, far cheaper than instantiating) and moves into the
  /// result (updated() is true); `previous` is then left without one and
  /// must not be launched.
  static StatusOr<std::unique_ptr<CudaGraph>>
  capture(const CudaDevice &device, const CudaStream &stream,
          const std::function<Status()> &enqueue, bool relaxed = false,
          CudaGraph *previous = nullptr);
  ~CudaGraph();
  CudaGraph(const CudaGraph &) = delete;
  CudaGraph &operator=(const CudaGraph &) = delete;
  /// Replays the graph on `stream` (asynchronous).
  Status launch(const CudaStream &stream) const;
  /// Whether the executable is `previous`'s, updated.
  bool updated() const { return updated_; }
  /// Host time of the capture (the enqueued work) and of instantiating or
  /// updating the executable.
  double captureMs() const { return captureMs_; }
  double instantiateMs() const { return instantiateMs_; }

private:
  CudaGraph() = default;
  const CudaDevice *device_ = nullptr;
  cuda::CUgraph graph_ = nullptr;
  cuda::CUgraphExec exec_ = nullptr;
  bool updated_ = false;
  double captureMs_ = 0, instantiateMs_ = 0;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

class CudaModule;

/// A `__global__` function of a loaded module (valid while the module is).
class CudaKernel {
public:
  /// Allows launches with up to `bytes` of dynamic shared memory
  /// (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES; needed above 48 KiB).
  /// kInvalidArgument above the device's opt-in limit.
  Status setMaxDynamicSharedMemory(int bytes);
  /// cuLaunchKernel: `args` holds one pointer per kernel parameter, pointing
  /// at its value (for a device pointer parameter: at a CUdeviceptr, e.g.
  /// `buffer.addressSlot()`). A memref parameter of MLIR-generated code
  /// expands to its descriptor fields (allocated, aligned, offset, sizes,
  /// strides), each one entry here. Asynchronous; errors of the kernel itself
  /// surface at the next synchronisation.
  Status launch(Dim3 grid, Dim3 block, unsigned sharedBytes,
                const CudaStream *stream, const std::vector<void *> &args) const;

  const std::string &name() const { return name_; }
  cuda::CUfunction handle() const { return function_; }

private:
  friend class CudaModule;
  const CudaDevice *device_ = nullptr;
  cuda::CUfunction function_ = nullptr;
  std::string name_;
};

/// A module from PTX text or a cubin/fatbin image (cuModuleLoadDataEx; PTX is
/// JIT-compiled for the device by the driver).
class CudaModule {
public:
  /// Loads `image` (PTX text, NUL-terminated or not, or an ELF cubin /
  /// fatbin). `name` labels it in messages. On failure the Status carries the
  /// JIT error log ("... JIT log:\n<ptxas messages>").
  static StatusOr<std::unique_ptr<CudaModule>>
  load(const CudaDevice &device, const std::vector<uint8_t> &image,
       const std::string &name);
  static StatusOr<std::unique_ptr<CudaModule>>
  load(const CudaDevice &device, const std::string &image, const std::string &name);
  ~CudaModule();
  CudaModule(const CudaModule &) = delete;
  CudaModule &operator=(const CudaModule &) = delete;

  /// The kernel `name`; an error naming it when the module lacks it.
  StatusOr<CudaKernel> kernel(const std::string &kernelName) const;
  /// The JIT info log of the load (may be empty).
  const std::string &infoLog() const { return infoLog_; }
  const std::string &name() const { return name_; }

private:
  CudaModule() = default;
  const CudaDevice *device_ = nullptr;
  cuda::CUmodule module_ = nullptr;
  std::string name_;
  std::string infoLog_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_CUDA_DEVICE_H

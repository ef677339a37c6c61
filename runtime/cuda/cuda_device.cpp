//===- cuda_device.cpp - Device, memory, streams, events, modules ---------===//

#include "runtime/cuda/cuda_device.h"

#include <chrono>
#include <cstring>
#include <utility>

namespace kimi::rt {

using namespace cuda;

#define KIMI_CU(device, call, ...)                                             \
  KIMI_RETURN_IF_ERROR((device).driver().check(                                \
      (device).driver().call(__VA_ARGS__), #call))

//===----------------------------------------------------------------------===//
// CudaDevice
//===----------------------------------------------------------------------===//

namespace {
StatusOr<std::shared_ptr<const CudaDriver>>
driverOrShared(std::shared_ptr<const CudaDriver> driver) {
  if (driver)
    return driver;
  return CudaDriver::shared();
}

Status initDriver(const CudaDriver &driver) {
  return driver.check(driver.cuInit(0), "cuInit");
}
} // namespace

StatusOr<int> CudaDevice::count(std::shared_ptr<const CudaDriver> driver) {
  KIMI_ASSIGN_OR_RETURN(auto d, driverOrShared(std::move(driver)));
  KIMI_RETURN_IF_ERROR(initDriver(*d));
  int n = 0;
  KIMI_RETURN_IF_ERROR(d->check(d->cuDeviceGetCount(&n), "cuDeviceGetCount"));
  return n;
}

StatusOr<std::unique_ptr<CudaDevice>>
CudaDevice::open(int ordinal, std::shared_ptr<const CudaDriver> driver) {
  KIMI_ASSIGN_OR_RETURN(auto d, driverOrShared(std::move(driver)));
  KIMI_RETURN_IF_ERROR(initDriver(*d));
  int n = 0;
  KIMI_RETURN_IF_ERROR(d->check(d->cuDeviceGetCount(&n), "cuDeviceGetCount"));
  if (ordinal < 0 || ordinal >= n)
    return invalidArgument("CUDA device " + std::to_string(ordinal) +
                           " requested, " + std::to_string(n) +
                           " device(s) present");
  std::unique_ptr<CudaDevice> dev(new CudaDevice());
  dev->driver_ = d;
  dev->ordinal_ = ordinal;
  KIMI_CU(*dev, cuDeviceGet, &dev->device_, ordinal);
  KIMI_CU(*dev, cuDevicePrimaryCtxRetain, &dev->context_, dev->device_);
  KIMI_RETURN_IF_ERROR(dev->makeCurrent());
  char name[256] = {};
  KIMI_CU(*dev, cuDeviceGetName, name, int(sizeof(name) - 1), dev->device_);
  dev->name_ = name;
  KIMI_CU(*dev, cuDeviceGetAttribute, &dev->smCount_,
          CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev->device_);
  KIMI_CU(*dev, cuDeviceGetAttribute, &dev->ccMajor_,
          CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev->device_);
  KIMI_CU(*dev, cuDeviceGetAttribute, &dev->ccMinor_,
          CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev->device_);
  KIMI_CU(*dev, cuDeviceGetAttribute, &dev->maxSharedOptin_,
          CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev->device_);
  KIMI_CU(*dev, cuDeviceTotalMem, &dev->totalMemory_, dev->device_);
  KIMI_CU(*dev, cuDriverGetVersion, &dev->driverVersion_);
  return dev;
}

CudaDevice::~CudaDevice() {
  if (context_)
    (void)driver_->cuDevicePrimaryCtxRelease(device_);
}

Status CudaDevice::makeCurrent() const {
  return driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

Status CudaDevice::synchronize() const {
  return driver_->check(driver_->cuCtxSynchronize(), "cuCtxSynchronize");
}

std::string CudaDevice::describe() const {
  return name_ + " (sm_" + std::to_string(ccMajor_) + std::to_string(ccMinor_) +
         ", " + std::to_string(smCount_) + " SMs, " +
         std::to_string(totalMemory_ >> 30) + " GiB, driver " +
         std::to_string(driverVersion_ / 1000) + "." +
         std::to_string(driverVersion_ % 1000 / 10) + ")";
}

//===----------------------------------------------------------------------===//
// DeviceBuffer
//===----------------------------------------------------------------------===//

StatusOr<DeviceBuffer> DeviceBuffer::allocate(const CudaDevice &device,
                                              size_t bytes) {
  DeviceBuffer buffer;
  buffer.device_ = &device;
  if (bytes > 0) {
    KIMI_RETURN_IF_ERROR(device.driver()
                             .check(device.driver().cuMemAlloc(&buffer.address_, bytes),
                                    "cuMemAlloc")
                             .addContext("allocating " + std::to_string(bytes) +
                                         " bytes"));
    buffer.bytes_ = bytes;
  }
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : device_(other.device_), address_(other.address_), bytes_(other.bytes_) {
  other.address_ = 0;
  other.bytes_ = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    (void)release();
    device_ = other.device_;
    address_ = other.address_;
    bytes_ = other.bytes_;
    other.address_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { (void)release(); }

Status DeviceBuffer::release() {
  if (!address_)
    return Status::ok();
  CUdeviceptr address = address_;
  address_ = 0;
  bytes_ = 0;
  return device_->driver().check(device_->driver().cuMemFree(address), "cuMemFree");
}

Status DeviceBuffer::checkRange(const char *what, size_t bytes,
                                size_t offset) const {
  if (offset > bytes_ || bytes > bytes_ - offset)
    return invalidArgument(std::string(what) + " of " + std::to_string(bytes) +
                           " bytes at offset " + std::to_string(offset) +
                           " exceeds the device buffer of " +
                           std::to_string(bytes_) + " bytes");
  return Status::ok();
}

Status DeviceBuffer::upload(const void *src, size_t bytes, size_t offset,
                            const CudaStream *stream) {
  KIMI_RETURN_IF_ERROR(checkRange("upload", bytes, offset));
  if (bytes == 0)
    return Status::ok();
  if (stream) {
    KIMI_CU(*device_, cuMemcpyHtoDAsync, address_ + offset, src, bytes,
            stream->handle());
  } else {
    KIMI_CU(*device_, cuMemcpyHtoD, address_ + offset, src, bytes);
  }
  return Status::ok();
}

Status DeviceBuffer::download(void *dst, size_t bytes, size_t offset,
                              const CudaStream *stream) const {
  KIMI_RETURN_IF_ERROR(checkRange("download", bytes, offset));
  if (bytes == 0)
    return Status::ok();
  if (stream) {
    KIMI_CU(*device_, cuMemcpyDtoHAsync, dst, address_ + offset, bytes,
            stream->handle());
  } else {
    KIMI_CU(*device_, cuMemcpyDtoH, dst, address_ + offset, bytes);
  }
  return Status::ok();
}

Status DeviceBuffer::copyFrom(const DeviceBuffer &src, size_t bytes,
                              const CudaStream *stream) {
  KIMI_RETURN_IF_ERROR(checkRange("copyFrom (destination)", bytes, 0));
  KIMI_RETURN_IF_ERROR(src.checkRange("copyFrom (source)", bytes, 0));
  if (bytes == 0)
    return Status::ok();
  KIMI_CU(*device_, cuMemcpyDtoDAsync, address_, src.address_, bytes,
          stream ? stream->handle() : nullptr);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// CudaStream, CudaEvent
//===----------------------------------------------------------------------===//

StatusOr<std::unique_ptr<CudaStream>> CudaStream::create(const CudaDevice &device,
                                                         bool nonBlocking) {
  std::unique_ptr<CudaStream> stream(new CudaStream());
  stream->device_ = &device;
  KIMI_CU(device, cuStreamCreate, &stream->stream_,
          nonBlocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT);
  return stream;
}

CudaStream::~CudaStream() {
  if (stream_)
    (void)device_->driver().cuStreamDestroy(stream_);
}

Status CudaStream::synchronize() const {
  KIMI_CU(*device_, cuStreamSynchronize, stream_);
  return Status::ok();
}

StatusOr<std::unique_ptr<CudaEvent>> CudaEvent::create(const CudaDevice &device) {
  std::unique_ptr<CudaEvent> event(new CudaEvent());
  event->device_ = &device;
  KIMI_CU(device, cuEventCreate, &event->event_, CU_EVENT_DEFAULT);
  return event;
}

CudaEvent::~CudaEvent() {
  if (event_)
    (void)device_->driver().cuEventDestroy(event_);
}

Status CudaEvent::record(const CudaStream *stream, bool inGraph) {
  if (inGraph) {
    KIMI_CU(*device_, cuEventRecordWithFlags, event_,
            stream ? stream->handle() : nullptr, 1u /*CU_EVENT_RECORD_EXTERNAL*/);
    return Status::ok();
  }
  KIMI_CU(*device_, cuEventRecord, event_, stream ? stream->handle() : nullptr);
  return Status::ok();
}

Status CudaEvent::synchronize() const {
  KIMI_CU(*device_, cuEventSynchronize, event_);
  return Status::ok();
}

StatusOr<float> CudaEvent::elapsedMs(const CudaEvent &start, const CudaEvent &end) {
  KIMI_RETURN_IF_ERROR(end.synchronize());
  float ms = 0.0f;
  KIMI_CU(*end.device_, cuEventElapsedTime, &ms, start.event_, end.event_);
  return ms;
}

//===----------------------------------------------------------------------===//
// CudaGraph
//===----------------------------------------------------------------------===//

StatusOr<std::unique_ptr<CudaGraph>>
CudaGraph::capture(const CudaDevice &device, const CudaStream &stream,
                   const std::function<Status()> &enqueue, bool relaxed,
                   CudaGraph *previous) {
  using Ms = std::chrono::duration<double, std::milli>;
  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<CudaGraph> graph(new CudaGraph());
  graph->device_ = &device;
  KIMI_CU(device, cuStreamBeginCapture, stream.handle(),
          relaxed ? cuda::CU_STREAM_CAPTURE_MODE_RELAXED
                  : cuda::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  Status enqueued = enqueue();
  // End the capture whatever happened, so the stream is usable again.
  Status ended = device.driver().check(
      device.driver().cuStreamEndCapture(stream.handle(), &graph->graph_),
      "cuStreamEndCapture");
  KIMI_RETURN_IF_ERROR(enqueued);
  KIMI_RETURN_IF_ERROR(ended);
  const auto captured = std::chrono::steady_clock::now();
  graph->captureMs_ = Ms(captured - started).count();
  if (previous && previous->exec_) {
    // Same topology: the previous executable takes the new parameters
    // (addresses, grids) in place of a new instantiation. A refusal
    // (topology or node kinds changed) leaves it to be destroyed.
    cuda::CudaGraphExecUpdateResultInfo info;
    cuda::CUresult r = device.driver().cuGraphExecUpdate(previous->exec_,
                                                         graph->graph_, &info);
    if (r == cuda::CUDA_SUCCESS) {
      graph->exec_ = std::exchange(previous->exec_, nullptr);
      graph->updated_ = true;
    } else if (r != cuda::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
      return device.driver().check(r, "cuGraphExecUpdate");
    }
  }
  if (!graph->exec_)
    KIMI_CU(device, cuGraphInstantiateWithFlags, &graph->exec_, graph->graph_, 0);
  graph->instantiateMs_ = Ms(std::chrono::steady_clock::now() - captured).count();
  return graph;
}

CudaGraph::~CudaGraph() {
  if (exec_)
    (void)device_->driver().cuGraphExecDestroy(exec_);
  if (graph_)
    (void)device_->driver().cuGraphDestroy(graph_);
}

Status CudaGraph::launch(const CudaStream &stream) const {
  if (!exec_)
    return failedPrecondition("launching a CUDA graph whose executable was given "
                         "to a newer capture");
  KIMI_CU(*device_, cuGraphLaunch, exec_, stream.handle());
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// CudaModule, CudaKernel
//===----------------------------------------------------------------------===//

StatusOr<std::unique_ptr<CudaModule>>
CudaModule::load(const CudaDevice &device, const std::string &image,
                 const std::string &name) {
  return load(device, std::vector<uint8_t>(image.begin(), image.end()), name);
}

StatusOr<std::unique_ptr<CudaModule>>
CudaModule::load(const CudaDevice &device, const std::vector<uint8_t> &image,
                 const std::string &name) {
  if (image.empty())
    return invalidArgument("CUDA module '" + name + "' is empty");
  // PTX must be NUL-terminated; a trailing NUL after a cubin/fatbin is
  // ignored (their headers carry their size).
  std::vector<uint8_t> bytes(image);
  if (bytes.back() != 0)
    bytes.push_back(0);

  constexpr size_t kLogBytes = 64 * 1024;
  std::vector<char> infoLog(kLogBytes, 0), errorLog(kLogBytes, 0);
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER,
                            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_LOG_VERBOSE};
  void *values[] = {infoLog.data(),
                    reinterpret_cast<void *>(uintptr_t(kLogBytes - 1)),
                    errorLog.data(),
                    reinterpret_cast<void *>(uintptr_t(kLogBytes - 1)),
                    reinterpret_cast<void *>(uintptr_t(1))};
  std::unique_ptr<CudaModule> module(new CudaModule());
  module->device_ = &device;
  module->name_ = name;
  CUresult result = device.driver().cuModuleLoadDataEx(
      &module->module_, bytes.data(), unsigned(sizeof(options) / sizeof(options[0])),
      options, values);
  // The driver writes the bytes it used back into the size slots; the logs
  // are NUL-terminated within them (and within the zeroed buffers anyway).
  infoLog.back() = 0;
  errorLog.back() = 0;
  module->infoLog_ = infoLog.data();
  if (result != CUDA_SUCCESS) {
    module->module_ = nullptr;
    std::string message = "loading CUDA module '" + name +
                          "': cuModuleLoadDataEx: " +
                          device.driver().describe(result);
    std::string log = errorLog.data();
    if (log.empty())
      log = infoLog.data();
    message += log.empty() ? " (empty JIT log)" : "; JIT log:\n" + log;
    return moduleError(message);
  }
  return module;
}

CudaModule::~CudaModule() {
  if (module_)
    (void)device_->driver().cuModuleUnload(module_);
}

StatusOr<CudaKernel> CudaModule::kernel(const std::string &kernelName) const {
  CudaKernel kernel;
  kernel.device_ = device_;
  kernel.name_ = kernelName;
  CUresult result = device_->driver().cuModuleGetFunction(
      &kernel.function_, module_, kernelName.c_str());
  if (result != CUDA_SUCCESS)
    return moduleError("CUDA module '" + name_ + "' has no kernel '" +
                       kernelName + "': cuModuleGetFunction: " +
                       device_->driver().describe(result));
  return kernel;
}

Status CudaDevice::allowDynamicSharedMemory(cuda::CUfunction function,
                                            int bytes,
                                            const std::string &what) const {
  if (bytes < 0 || bytes > maxSharedOptin_)
    return invalidArgument(what + ": " + std::to_string(bytes) +
                           " bytes of dynamic shared memory requested, the "
                           "device allows at most " +
                           std::to_string(maxSharedOptin_));
  return driver_
      ->check(driver_->cuFuncSetAttribute(
                  function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
      .addContext(what);
}

Status CudaKernel::setMaxDynamicSharedMemory(int bytes) {
  return device_->allowDynamicSharedMemory(function_, bytes,
                                           "kernel '" + name_ + "'");
}

Status CudaKernel::launch(Dim3 grid, Dim3 block, unsigned sharedBytes,
                          const CudaStream *stream,
                          const std::vector<void *> &args) const {
  return device_->driver()
      .check(device_->driver().cuLaunchKernel(
                 function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                 sharedBytes, stream ? stream->handle() : nullptr,
                 args.empty() ? nullptr : const_cast<void **>(args.data()),
                 nullptr),
             "cuLaunchKernel")
      .addContext("kernel '" + name_ + "' (grid " + std::to_string(grid.x) +
                  "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) +
                  ", block " + std::to_string(block.x) + "x" +
                  std::to_string(block.y) + "x" + std::to_string(block.z) +
                  ", " + std::to_string(sharedBytes) + " B shared)");
}

} // namespace kimi::rt

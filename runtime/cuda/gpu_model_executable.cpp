//===- gpu_model_executable.cpp - A GPU model artifact ready to run -------===//

#include "runtime/cuda/gpu_model_executable.h"
#include "runtime/artifact/validate.h"
#include "runtime/comm/communicator.h"
#include "runtime/cpu/entry_call.h"
#include "runtime/cpu/memref.h"
#include "runtime/cuda/captured_call.h"
#include "runtime/cuda/device_carried_tensor.h"
#include "runtime/cuda/device_random.h"
#include "runtime/cuda/gpu_module_table.h"
#include "runtime/cuda/gpu_shim.h"
#include "runtime/cuda/segment_copy.h"
#include "runtime/support/text.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

namespace kimi::rt {

//===----------------------------------------------------------------------===//
// GpuModelExecutable
//===----------------------------------------------------------------------===//

StatusOr<std::shared_ptr<GpuModelExecutable>>
GpuModelExecutable::create(std::shared_ptr<const ArtifactSpec> artifact,
                           const WeightLoader &weights, int device,
                           Communicator *comm) {
  return createImpl(std::move(artifact), &weights, nullptr, device, comm);
}

StatusOr<std::shared_ptr<GpuModelExecutable>>
GpuModelExecutable::createWithRandomWeights(
    std::shared_ptr<const ArtifactSpec> artifact, uint64_t seed, int device) {
  return createImpl(std::move(artifact), nullptr, &seed, device, nullptr);
}

StatusOr<std::shared_ptr<GpuModelExecutable>> GpuModelExecutable::createImpl(
    std::shared_ptr<const ArtifactSpec> artifact, const WeightLoader *weights,
    const uint64_t *randomSeed, int device, Communicator *comm) {
  if (!artifact)
    return invalidArgument("GPU executable: null artifact");
  const ArtifactSpec &a = *artifact;
  KIMI_RETURN_IF_ERROR(validateArtifact(a));
  if (a.target.kind != TargetKind::kSm90a || a.isKernelLibrary())
    return invalidArtifact("artifact target " + quoted(a.target.name()) +
                           " is not a GPU model");
  const int32_t commSize = comm ? comm->size() : 1;
  if (a.target.numRanks != commSize)
    return invalidArgument(
        "the artifact is partitioned over " +
        std::to_string(a.target.numRanks) + " ranks but runs on " +
        std::to_string(commSize) +
        (a.target.numRanks > 1 && !comm
             ? " (no communicator; start one process per rank, see kimi-run "
               "--help)"
             : ""));
  const int32_t rank = comm ? comm->rank() : 0;
  if (a.kernels.size() != 1 ||
      a.kernels[0].kind != KernelKind::kCpuSharedObject)
    return invalidArtifact("a GPU model holds one host shared object, the "
                           "artifact has " +
                           std::to_string(a.kernels.size()) + " kernels");

  std::shared_ptr<GpuModelExecutable> exe(new GpuModelExecutable());
  exe->artifact_ = artifact;
  KIMI_ASSIGN_OR_RETURN(exe->device_, CudaDevice::open(device));
  if (exe->device_->computeMajor() != 9)
    return invalidArgument("the artifact is compiled for sm_90a; " +
                           exe->device_->describe() + " is not a Hopper GPU");
  KIMI_ASSIGN_OR_RETURN(exe->stream_, CudaStream::create(*exe->device_));
  exe->allocator_ = std::make_unique<DeviceAllocator>(*exe->device_);
  exe->shim_ = std::make_unique<GpuShim>();
  exe->shim_->device = exe->device_.get();
  exe->shim_->stream = exe->stream_.get();
  exe->shim_->allocator = exe->allocator_.get();
  if (const char *env = std::getenv("KIMI_GPU_PROFILE"))
    exe->shim_->profile.on = std::string(env) == "1";
  exe->shim_->programmaticLaunch = a.kernels[0].waitsGridDependencies;
  if (const char *env = std::getenv("KIMI_GPU_PDL"))
    exe->shim_->programmaticLaunch &= std::string(env) != "0";
  {
    bool on = true;
    int64_t bucket = 256, kept = 4;
    if (const char *env = std::getenv("KIMI_GPU_GRAPHS"))
      on = std::string(env) != "0";
    if (const char *env = std::getenv("KIMI_GPU_GRAPH_BUCKET"))
      bucket = std::atoll(env);
    if (const char *env = std::getenv("KIMI_GPU_GRAPHS_KEPT"))
      kept = std::atoll(env);
    if (bucket < 1 || kept < 1)
      return invalidArgument("KIMI_GPU_GRAPH_BUCKET and KIMI_GPU_GRAPHS_KEPT "
                             "must be positive integers");
    exe->setGraphs(on, bucket, size_t(kept));
    if (const char *env = std::getenv("KIMI_GPU_STATES_IN_PLACE"))
      exe->statesInPlace_ = std::string(env) != "0";
    if (const char *env = std::getenv("KIMI_GPU_STATE_COPY_KERNEL"))
      exe->stateCopyKernel_ = std::string(env) != "0";
  }

  // cuBLASLt is needed only by models with matrix products (all real ones);
  // its absence is reported by the first product.
  StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::load(*exe->device_);
  if (blas.isOk()) {
    exe->blas_ = std::move(blas.value());
    exe->shim_->blas = exe->blas_.get();
  } else {
    exe->shim_->blasError = blas.status().message();
  }

  const KernelImage &kernel = a.kernels[0];
  KIMI_ASSIGN_OR_RETURN(exe->module_,
                        CpuModule::load(kernel.image, kernel.name.empty()
                                                          ? "kernel 0"
                                                          : kernel.name));
  CpuModule &m = *exe->module_;
  KIMI_ASSIGN_OR_RETURN(exe->status_,
                        installGpuModuleTable(m, exe->shim_->table()));

  // Collectives: after the kernels before them (one stream), on the
  // communicator's own stream.
  if (a.target.numRanks > 1 && m.symbol(KIMI_COMM_ABI_VERSION_SYMBOL).isOk()) {
    CudaStream *stream = exe->stream_.get();
    StatusOr<std::unique_ptr<CommShim>> shim = CommShim::install(
        m, *comm, a.target.grid(), [stream] { return stream->synchronize(); });
    if (!shim.isOk())
      return shim.takeStatus();
    exe->comm_ = std::move(shim.value());
  }

  for (const EntrySpec &e : a.entries) {
    StatusOr<void *> fn = m.symbol(e.symbol);
    if (!fn.isOk()) {
      Status s = fn.takeStatus();
      return s.addContext("entry " + quoted(e.name));
    }
    exe->entries_[e.name] = fn.value();
    // Each state input's output of the same name, dtype and shape: where a
    // donated state may be updated in place.
    bool cache = false, lengths = false;
    for (const TensorSpec &t : e.inputs) {
      cache |= t.role == TensorRole::kCache;
      lengths |= t.role == TensorRole::kCacheLength;
    }
    exe->paddedCaches_ &= !cache || lengths;
    std::vector<size_t> &pairs = exe->stateOutputs_[e.name];
    pairs.assign(e.inputs.size(), kNoOutput);
    for (size_t i = 0; i < e.inputs.size(); ++i)
      for (size_t o = 0;
           o < e.outputs.size() && e.inputs[i].role == TensorRole::kState; ++o)
        if (e.outputs[o].role == TensorRole::kState &&
            e.outputs[o].name == e.inputs[i].name &&
            e.outputs[o].dtype == e.inputs[i].dtype &&
            e.outputs[o].shape == e.inputs[i].shape)
          pairs[i] = o;
  }

  KIMI_RETURN_IF_ERROR(exe->uploadWeights(weights, randomSeed, rank));
  return exe;
}

Status GpuModelExecutable::uploadWeights(const WeightLoader *weights,
                                         const uint64_t *randomSeed,
                                         int32_t rank) {
  const ArtifactSpec &a = *artifact_;
  CpuModule &m = *module_;
  // Weights: device buffers, their addresses in kimi_gpu_weights[slot].
  auto start = std::chrono::steady_clock::now();
  KIMI_ASSIGN_OR_RETURN(void *tableAddress, m.symbol("kimi_gpu_weights"));
  const int64_t tableBytes = m.symbolSize(tableAddress);
  if (tableBytes >= 0 &&
      tableBytes < static_cast<int64_t>(a.weights.size() * sizeof(void *)))
    return moduleError("GPU model: kimi_gpu_weights holds " +
                       std::to_string(tableBytes / sizeof(void *)) +
                       " entries for " + std::to_string(a.weights.size()) +
                       " weights");
  auto *weightTable = static_cast<cuda::CUdeviceptr *>(tableAddress);
  // The driver's free memory around the uploads: what the weights really
  // take on the device (the manifest's bytes plus allocation granularity),
  // reported so that benchmarks can show no hidden copy is made.
  const CudaDriver &driver = device_->driver();
  size_t freeBefore = 0, freeAfter = 0, total = 0;
  const bool measured =
      driver.cuMemGetInfo && driver.cuMemGetInfo(&freeBefore, &total) == 0;
  std::unique_ptr<DeviceRandomFill> random;
  if (randomSeed) {
    if (a.target.numRanks != 1)
      return invalidArgument("random weights on the device: the artifact is "
                             "partitioned over " +
                             std::to_string(a.target.numRanks) +
                             " ranks (one rank only)");
    KIMI_ASSIGN_OR_RETURN(random, DeviceRandomFill::load(*device_));
  }
  std::vector<uint8_t> staging;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const WeightSpec &w = a.weights[i];
    const size_t bytes =
        static_cast<size_t>(storedBytes(w.dtype, w.blockNumel()));
    KIMI_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                          DeviceBuffer::allocate(*device_, bytes));
    if (random) {
      Status filled =
          random->fill(*stream_, buffer.address(), w.blockNumel(), w.dtype,
                       randomWeightRecipe(w.name, w.shape, *randomSeed));
      if (!filled.isOk())
        return filled.addContext("weight " + std::to_string(i) + " " +
                                 quoted(w.name));
    } else {
      staging.resize(bytes);
      Status loaded = weights->loadBlock(w, rank, staging.data(), bytes);
      if (!loaded.isOk())
        return loaded.addContext("weight " + std::to_string(i) + " " +
                                 quoted(w.name));
      KIMI_RETURN_IF_ERROR(buffer.upload(staging.data(), bytes));
    }
    weightTable[i] = buffer.address();
    weightBytes_ += static_cast<int64_t>(bytes);
    weights_.push_back(std::move(buffer));
  }
  if (random)
    KIMI_RETURN_IF_ERROR(stream_->synchronize());
  if (measured && driver.cuMemGetInfo(&freeAfter, &total) == 0)
    weightDeviceBytes_ = int64_t(freeBefore) - int64_t(freeAfter);
  weightSeconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return Status::ok();
}

GpuModelExecutable::~GpuModelExecutable() {
  if (stream_)
    (void)stream_->synchronize();
  if (shim_ && device_)
    for (cuda::CUmodule mod : shim_->modules)
      (void)device_->driver().cuModuleUnload(mod);
  // Members release the weights, the allocator's blocks, the stream and the
  // device in reverse order; the module (dlclose) goes first.
  module_.reset();
}

int64_t GpuModelExecutable::deviceBytesInUse() const {
  const CudaDriver &d = device_->driver();
  size_t free = 0, total = 0;
  if (!d.cuMemGetInfo || !device_->makeCurrent().isOk() ||
      d.cuMemGetInfo(&free, &total) != 0)
    return -1;
  return int64_t(total) - int64_t(free);
}

void GpuModelExecutable::setProfiling(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  shim_->profile.on = on;
}

void GpuModelExecutable::clearProfile() {
  std::lock_guard<std::mutex> lock(mutex_);
  shim_->profile.clear();
}

Executable::CallTimes GpuModelExecutable::callTimes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shim_->profile.times;
}

std::string GpuModelExecutable::profileReport(size_t top) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = shim_->profile.report(top);
  if (!out.empty() && blas_) {
    std::string tuned = blas_->tuningReport();
    if (!tuned.empty())
      out += "cuBLASLt algorithms chosen by timing (not in the device time "
             "above):\n" +
             tuned;
  }
  return out;
}

void GpuModelExecutable::setPoison(bool poison) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocator_->setPoison(poison ? stream_.get() : nullptr);
  captured_.clear(); // their temporaries were filled (or not) at capture
}

void GpuModelExecutable::setGraphs(bool on, int64_t bucketRows,
                                   size_t maxGraphs) {
  std::lock_guard<std::mutex> lock(mutex_);
  graphs_ = on;
  graphBucket_ = std::max<int64_t>(1, bucketRows);
  maxGraphs_ = std::max<size_t>(1, maxGraphs);
  captured_.clear();
  uncapturable_.clear();
  graphFailure_.clear();
}

std::string GpuModelExecutable::graphFailure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return graphFailure_;
}

//===----------------------------------------------------------------------===//
// Carried tensors in device memory
//===----------------------------------------------------------------------===//

StatusOr<std::shared_ptr<GpuModelExecutable::DeviceBlock>>
GpuModelExecutable::allocateBlock(size_t bytes) const {
  KIMI_ASSIGN_OR_RETURN(cuda::CUdeviceptr p, allocator_->allocate(bytes));
  const size_t size = allocator_->retain(p);
  return std::make_shared<DeviceBlock>(shared_from_this(), p, size);
}

StatusOr<HostTensor>
GpuModelExecutable::download(cuda::CUdeviceptr address, DType dtype,
                             const std::vector<int64_t> &shape,
                             int64_t rowPitch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t numel = 0;
  checkedNumel(shape, numel);
  const size_t bytes = size_t(numel) * dtypeSize(dtype);
  KIMI_ASSIGN_OR_RETURN(HostBuffer host, HostBuffer::allocate(bytes));
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  KIMI_RETURN_IF_ERROR(stream_->synchronize());
  const CudaDriver &d = device_->driver();
  if (bytes && rowPitch) {
    // [B, L, ...] out of sequences rowPitch rows apart.
    const size_t b = size_t(shape[0]), perSequence = bytes / b;
    const size_t rowBytes = perSequence / size_t(shape[1]);
    cuda::CudaMemcpy2D m;
    m.srcMemoryType = cuda::CU_MEMORYTYPE_DEVICE;
    m.srcDevice = address;
    m.srcPitch = size_t(rowPitch) * rowBytes;
    m.dstMemoryType = cuda::CU_MEMORYTYPE_HOST;
    m.dstHost = host.data;
    m.dstPitch = perSequence;
    m.WidthInBytes = perSequence;
    m.Height = b;
    KIMI_RETURN_IF_ERROR(
        d.check(d.cuMemcpy2DAsync(&m, stream_->handle()), "cuMemcpy2DAsync"));
    KIMI_RETURN_IF_ERROR(stream_->synchronize());
  } else if (bytes) {
    KIMI_RETURN_IF_ERROR(
        d.check(d.cuMemcpyDtoH(host.data, address, bytes), "cuMemcpyDtoH"));
  }
  return HostTensor{dtype, shape, std::move(host)};
}

StatusOr<CarriedRef> GpuModelExecutable::carry(const HostTensor &t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block,
                        allocateBlock(t.bytes()));
  const CudaDriver &d = device_->driver();
  if (t.bytes()) {
    // After the allocator's poison fill; the host bytes are read before the
    // synchronisation returns.
    KIMI_RETURN_IF_ERROR(
        d.check(d.cuMemcpyHtoDAsync(block->base, t.data(), t.bytes(),
                                    stream_->handle()),
                "cuMemcpyHtoDAsync"));
    KIMI_RETURN_IF_ERROR(stream_->synchronize());
  }
  const cuda::CUdeviceptr base = block->base;
  return CarriedRef(std::make_shared<DeviceCarriedTensor>(
      t.dtype, t.shape, std::move(block), base));
}

StatusOr<CarriedRef>
GpuModelExecutable::carryZeros(DType dtype,
                               const std::vector<int64_t> &shape) const {
  int64_t numel = 0;
  if (!checkedNumel(shape, numel))
    return invalidArgument("zeros of shape " + shapeToString(shape) +
                           ": too many elements");
  const size_t bytes = size_t(numel) * dtypeSize(dtype);
  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block,
                        allocateBlock(bytes));
  const CudaDriver &d = device_->driver();
  if (bytes)
    KIMI_RETURN_IF_ERROR(
        d.check(d.cuMemsetD8Async(block->base, 0, bytes, stream_->handle()),
                "cuMemsetD8Async"));
  const cuda::CUdeviceptr base = block->base;
  return CarriedRef(std::make_shared<DeviceCarriedTensor>(
      dtype, shape, std::move(block), base));
}

StatusOr<CarriedRef> GpuModelExecutable::appendRows(const CarriedRef &cache,
                                                    const CarriedRef &rowsIn,
                                                    int64_t batch) const {
  if (!rowsIn)
    return invalidArgument("append of null cache rows");
  KIMI_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                        grownCacheShape(cache.get(), *rowsIn, batch));
  CarriedRef rows = rowsIn;
  if (rows->residence() != this) {
    KIMI_ASSIGN_OR_RETURN(HostTensor host, rows->toHost());
    KIMI_ASSIGN_OR_RETURN(rows, carry(host));
  }
  if (!cache)
    return rows;
  if (cache->residence() != this)
    return invalidArgument("cache of shape " + shapeToString(cache->shape()) +
                           " is not in this GPU model's memory");
  const auto &old = static_cast<const DeviceCarriedTensor &>(*cache);
  const auto &add = static_cast<const DeviceCarriedTensor &>(*rows);
  const size_t oldBytes = old.bytes(), addBytes = add.bytes();
  const size_t newBytes = oldBytes + addBytes;

  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  const CudaDriver &d = device_->driver();
  cuda::CUstream stream = stream_->handle();
  auto copy = [&](cuda::CUdeviceptr dst, cuda::CUdeviceptr src, size_t bytes) {
    return bytes ? d.check(d.cuMemcpyDtoDAsync(dst, src, bytes, stream),
                           "cuMemcpyDtoDAsync")
                 : Status::ok();
  };
  // One sequence: after the old rows, when nothing else was put there. With
  // graphs, only into zeroed storage (below): decode reads it padded.
  if (batch == 1 && old.storage() && (old.storage()->zeroTail || !graphs_) &&
      old.storage()->claim(oldBytes, newBytes)) {
    KIMI_RETURN_IF_ERROR(copy(old.data() + oldBytes, add.data(), addBytes));
    return CarriedRef(std::make_shared<DeviceCarriedTensor>(
        cache->dtype(), std::move(shape), old.block(), old.data(),
        old.storage()));
  }
  const size_t b = size_t(batch);
  auto pitchedCopy = [&](cuda::CUdeviceptr dst, size_t dstPitch,
                         cuda::CUdeviceptr src, size_t srcPitch,
                         size_t width) -> Status {
    if (!width)
      return Status::ok();
    cuda::CudaMemcpy2D m;
    m.srcMemoryType = m.dstMemoryType = cuda::CU_MEMORYTYPE_DEVICE;
    m.srcDevice = src;
    m.srcPitch = srcPitch;
    m.dstDevice = dst;
    m.dstPitch = dstPitch;
    m.WidthInBytes = width;
    m.Height = b;
    return d.check(d.cuMemcpy2DAsync(&m, stream), "cuMemcpy2DAsync");
  };
  // Several sequences, read padded (graphs and cache_length entries): each
  // sequence gets a whole number of buckets of rows, zeroed past its
  // length, and appends write into them in place (the newest tensor of the
  // storage only: an older one's continuation copies). The pitch stays
  // until a sequence outgrows it, so one graph serves a bucket of steps.
  const int64_t oldRows = cache->shape()[1], newRows = shape[1];
  if (batch > 1 && graphs_ && paddedCaches_ && newRows > 0 && newBytes) {
    const size_t rowBytes = newBytes / (b * size_t(newRows));
    const size_t oldWidth = size_t(oldRows) * rowBytes;
    const size_t addWidth = size_t(newRows - oldRows) * rowBytes;
    if (old.rowPitch() && old.storage() &&
        old.storage()->claim(oldBytes, newBytes)) {
      const size_t pitch = size_t(old.rowPitch()) * rowBytes;
      KIMI_RETURN_IF_ERROR(pitchedCopy(old.data() + oldWidth, pitch, add.data(),
                                       addWidth, addWidth));
      return CarriedRef(std::make_shared<DeviceCarriedTensor>(
          cache->dtype(), std::move(shape), old.block(), old.data(),
          old.storage(), old.rowPitch()));
    }
    const int64_t bucket = graphBucket_;
    const int64_t pitchRows = (newRows + bucket - 1) / bucket * bucket;
    const size_t pitch = size_t(pitchRows) * rowBytes;
    KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block,
                          allocateBlock(b * pitch));
    const cuda::CUdeviceptr base = block->base;
    KIMI_RETURN_IF_ERROR(d.check(d.cuMemsetD8Async(base, 0, b * pitch, stream),
                                 "cuMemsetD8Async (cache)"));
    const size_t oldPitch =
        size_t(old.rowPitch() ? old.rowPitch() : oldRows) * rowBytes;
    KIMI_RETURN_IF_ERROR(
        pitchedCopy(base, pitch, old.data(), oldPitch, oldWidth));
    KIMI_RETURN_IF_ERROR(
        pitchedCopy(base + oldWidth, pitch, add.data(), addWidth, addWidth));
    auto storage = std::make_shared<GrowableStorage>();
    storage->capacity = b * pitch; // claims count [B, L] rows: L <= pitchRows
    storage->filled = newBytes;
    storage->zeroTail = true;
    return CarriedRef(std::make_shared<DeviceCarriedTensor>(
        cache->dtype(), std::move(shape), std::move(block), base,
        std::move(storage), pitchRows));
  }
  // A new block: room to double for one sequence; several sequences are
  // interleaved [B, L + n, ...] by two pitched copies. With graphs, one
  // sequence's block holds whole buckets of rows and its tail is zeroed,
  // so that decode may read it padded to the next bucket.
  size_t capacity = batch == 1 ? std::max(newBytes, 2 * oldBytes) : newBytes;
  const size_t rowBytes = newRows > 0 ? newBytes / size_t(newRows) : 0;
  if (batch == 1 && graphs_ && rowBytes) {
    const size_t bucket = size_t(graphBucket_);
    const size_t rows = (capacity / rowBytes + bucket - 1) / bucket * bucket;
    capacity = std::max(rows, bucket) * rowBytes;
  }
  KIMI_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> block,
                        allocateBlock(capacity));
  const cuda::CUdeviceptr base = block->base;
  if (batch == 1) {
    KIMI_RETURN_IF_ERROR(copy(base, old.data(), oldBytes));
    KIMI_RETURN_IF_ERROR(copy(base + oldBytes, add.data(), addBytes));
    std::shared_ptr<GrowableStorage> storage = growable(*block, base, newBytes);
    if (graphs_ && block->size > newBytes) {
      KIMI_RETURN_IF_ERROR(d.check(
          d.cuMemsetD8Async(base + newBytes, 0, block->size - newBytes, stream),
          "cuMemsetD8Async (cache tail)"));
      storage->zeroTail = true;
    }
    return CarriedRef(std::make_shared<DeviceCarriedTensor>(
        cache->dtype(), std::move(shape), std::move(block), base,
        std::move(storage)));
  }
  const size_t oldPer = oldBytes / b, addPer = addBytes / b;
  const size_t oldPitch =
      old.rowPitch() && oldRows
          ? size_t(old.rowPitch()) * (oldPer / size_t(oldRows))
          : oldPer;
  KIMI_RETURN_IF_ERROR(
      pitchedCopy(base, oldPer + addPer, old.data(), oldPitch, oldPer));
  KIMI_RETURN_IF_ERROR(
      pitchedCopy(base + oldPer, oldPer + addPer, add.data(), addPer, addPer));
  return CarriedRef(std::make_shared<DeviceCarriedTensor>(
      cache->dtype(), std::move(shape), std::move(block), base));
}

//===----------------------------------------------------------------------===//
// Entry calls
//===----------------------------------------------------------------------===//

Status GpuModelExecutable::run(const std::string &entryName,
                               const std::vector<const HostTensor *> &inputs,
                               int64_t tokens,
                               std::vector<HostTensor> &outputs) const {
  std::vector<std::unique_ptr<HostCarriedTensor>> wrapped;
  std::vector<const CarriedTensor *> carried;
  for (const HostTensor *t : inputs) {
    wrapped.push_back(t ? std::make_unique<HostCarriedTensor>(*t) : nullptr);
    carried.push_back(wrapped.back().get());
  }
  std::vector<CarriedRef> out;
  KIMI_RETURN_IF_ERROR(runCarried(entryName, carried, tokens, {}, {}, out));
  outputs.clear();
  for (const CarriedRef &t : out)
    outputs.push_back(*t->host()); // nothing kept: all on the host
  return Status::ok();
}

/// One direct call's device buffers: every buffer it allocated (released on
/// all paths) and the blocks of its carried inputs, by base address (an
/// output that is one of them shares it).
struct GpuModelExecutable::DirectCall {
  explicit DirectCall(const EntrySpec &entry)
      : args(ranksOf(entry.inputs)), results(ranksOf(entry.outputs)) {}
  std::set<cuda::CUdeviceptr> owned, inputBuffers;
  std::map<cuda::CUdeviceptr, std::shared_ptr<DeviceBlock>> blocks;
  MemRefStruct args, results;
  std::vector<void *> argPointers;
};

Status GpuModelExecutable::stageInputs(
    const EntrySpec &entry, const std::string &label,
    const std::vector<const CarriedTensor *> &inputs, DirectCall &call) const {
  const CudaDriver &d = device_->driver();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec &spec = entry.inputs[i];
    const CarriedTensor *t = inputs[i];
    const std::string where =
        label + ": input " + std::to_string(i) + " " + quoted(spec.name);
    KIMI_RETURN_IF_ERROR(checkEntryInput(spec, t, where));
    if (t->residence() == this) {
      const auto &dt = static_cast<const DeviceCarriedTensor &>(*t);
      call.blocks.emplace(dt.block()->base, dt.block());
      // A padded cache (its sequences a pitch apart) is read padded: the
      // entry's cache_length masks the zero rows past each length.
      call.args.setContiguous(i, reinterpret_cast<void *>(dt.data()),
                              dt.readShape());
      call.argPointers.push_back(call.args.pointer(i));
      continue;
    }
    const HostTensor *h = t->host();
    if (!h)
      return invalidArgument(where + ": device memory of another executable");
    StatusOr<cuda::CUdeviceptr> p = allocator_->allocate(h->bytes());
    if (!p.isOk()) {
      Status s = p.takeStatus();
      return s.addContext(where);
    }
    call.owned.insert(p.value());
    call.inputBuffers.insert(p.value());
    if (h->bytes()) {
      // On the model's stream: ordered after the allocator's poison fill.
      Status up = d.check(d.cuMemcpyHtoDAsync(p.value(), h->data(), h->bytes(),
                                              stream_->handle()),
                          "cuMemcpyHtoDAsync");
      if (!up.isOk())
        return up.addContext(where);
    }
    call.args.setContiguous(i, reinterpret_cast<void *>(p.value()), h->shape);
    call.argPointers.push_back(call.args.pointer(i));
  }
  return Status::ok();
}

Status GpuModelExecutable::takeOutputs(const EntrySpec &entry,
                                       const std::string &label, int64_t tokens,
                                       const std::vector<bool> &keep,
                                       DirectCall &call,
                                       std::vector<CarriedRef> &out) const {
  const CudaDriver &d = device_->driver();
  // Every allocation the entry returned is this call's to release (input
  // buffers and weights are never among them), unless it is kept.
  std::map<cuda::CUdeviceptr, int> uses; // outputs per allocation
  for (size_t i = 0; i < entry.outputs.size(); ++i) {
    auto p =
        reinterpret_cast<cuda::CUdeviceptr>(call.results.view(i).allocated());
    uses[p] += 1;
    if (p && !call.inputBuffers.count(p) && allocator_->isLive(p))
      call.owned.insert(p);
  }
  out.assign(entry.outputs.size(), nullptr);
  for (size_t i = 0; i < entry.outputs.size(); ++i) {
    const TensorSpec &spec = entry.outputs[i];
    const std::string where =
        label + ": output " + std::to_string(i) + " " + quoted(spec.name);
    MemRefView v = call.results.view(i);
    const std::vector<int64_t> expected = callShape(spec, tokens);
    if (v.sizes() != expected)
      return executionError(where + ": returned shape " +
                            shapeToString(v.sizes()) + ", expected " +
                            shapeToString(expected));
    int64_t numel = 0;
    checkedNumel(expected, numel);
    const size_t elem = dtypeSize(spec.dtype);
    const size_t bytes = static_cast<size_t>(numel) * elem;
    if (numel > 0 && (!v.aligned() || !v.isContiguous() || v.offset() < 0))
      return executionError(where + ": returned a null, negative-offset or "
                                    "non-contiguous device buffer");
    auto p = reinterpret_cast<cuda::CUdeviceptr>(v.allocated());
    const cuda::CUdeviceptr src =
        reinterpret_cast<cuda::CUdeviceptr>(v.aligned()) +
        static_cast<cuda::CUdeviceptr>(v.offset()) * elem;

    if (i < keep.size() && keep[i]) {
      // Stays on the device: the entry's own block, a carried input's block
      // it returned, or (an uploaded input, a weight) a copy.
      std::shared_ptr<DeviceBlock> block;
      bool fresh = false;
      if (auto it = call.blocks.find(p); it != call.blocks.end()) {
        block = it->second;
      } else if (call.owned.count(p)) {
        call.owned.erase(p);
        block = std::make_shared<DeviceBlock>(shared_from_this(), p,
                                              allocator_->retain(p));
        call.blocks.emplace(p, block);
        fresh = true;
      }
      cuda::CUdeviceptr data = src;
      if (!block) {
        StatusOr<std::shared_ptr<DeviceBlock>> copy = allocateBlock(bytes);
        if (!copy.isOk())
          return copy.takeStatus().addContext(where);
        block = std::move(copy.value());
        data = block->base;
        fresh = true;
        if (bytes)
          KIMI_RETURN_IF_ERROR(
              d.check(d.cuMemcpyDtoDAsync(data, src, bytes, stream_->handle()),
                      "cuMemcpyDtoDAsync")
                  .addContext(where));
        p = 0; // its own block
      }
      // A block that holds only this output may grow in place.
      std::shared_ptr<GrowableStorage> storage;
      if (fresh && (p == 0 || uses[p] == 1))
        storage = growable(*block, data, bytes);
      out[i] = std::make_shared<DeviceCarriedTensor>(
          spec.dtype, expected, std::move(block), data, std::move(storage));
      continue;
    }

    KIMI_ASSIGN_OR_RETURN(HostBuffer host, HostBuffer::allocate(bytes));
    if (bytes)
      KIMI_RETURN_IF_ERROR(
          d.check(d.cuMemcpyDtoH(host.data, src, bytes), "cuMemcpyDtoH")
              .addContext(where));
    out[i] = std::make_shared<HostCarriedTensor>(
        HostTensor{spec.dtype, expected, std::move(host)});
  }
  return Status::ok();
}

Status
GpuModelExecutable::runCarried(const std::string &entryName,
                               const std::vector<const CarriedTensor *> &inputs,
                               int64_t tokens, const std::vector<bool> &keep,
                               const std::vector<bool> &donated,
                               std::vector<CarriedRef> &outputs) const {
  std::lock_guard<std::mutex> lock(mutex_);
  KIMI_ASSIGN_OR_RETURN(const EntrySpec *entry,
                        entryForCall(*artifact_, entryName, inputs.size()));
  auto fn = entries_.find(entryName); // every entry was resolved at load
  const std::string label = "entry " + quoted(entryName);
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  {
    StatusOr<bool> replayed =
        runAsGraph(*entry, fn->second, inputs, tokens, keep, donated, outputs);
    if (!replayed.isOk())
      return replayed.takeStatus().addContext(label);
    if (replayed.value())
      return Status::ok();
  }

  DirectCall call(*entry);
  auto releaseAll = [&] {
    for (cuda::CUdeviceptr p : call.owned)
      (void)allocator_->release(p);
    // Nothing else the call allocated outlives it (a buffer the code did
    // not free is returned to the cache here).
    allocator_->releaseAll();
  };
  if (Status staged = stageInputs(*entry, label, inputs, call);
      !staged.isOk()) {
    releaseAll();
    return staged;
  }

  // Call; the kernels run on the stream, then one synchronisation.
  *status_ = 0;
  shim_->error = Status::ok();
  auto started = std::chrono::steady_clock::now();
  Status status =
      callEntry(fn->second, call.results.structPointer(), call.argPointers);
  auto issued = std::chrono::steady_clock::now();
  Status synced = stream_->synchronize();
  {
    using Ms = std::chrono::duration<double, std::milli>;
    KernelProfile &profile = shim_->profile;
    profile.times.calls += 1;
    profile.times.issueMs += Ms(issued - started).count();
    profile.times.waitMs +=
        Ms(std::chrono::steady_clock::now() - issued).count();
    if (profile.on) {
      profile.collect();
      profile.entryMs += Ms(std::chrono::steady_clock::now() - started).count();
      profile.entryCalls += 1;
    }
  }
  if (status.isOk() && !shim_->error.isOk())
    status = shim_->error;
  if (status.isOk() && *status_ != 0)
    status = executionError("the model's GPU shim failed (status " +
                            std::to_string(*status_) +
                            "; the runtime table was incomplete)");
  if (status.isOk())
    status = synced;
  if (comm_) {
    Status collectives = comm_->takeStatus();
    if (status.isOk())
      status = std::move(collectives);
  }
  std::vector<CarriedRef> out;
  if (status.isOk())
    status = takeOutputs(*entry, label, tokens, keep, call, out);
  releaseAll();
  if (!status.isOk())
    return status.addContext(label);
  outputs = std::move(out);
  directCalls_[entryName] += 1;
  return Status::ok();
}

} // namespace kimi::rt

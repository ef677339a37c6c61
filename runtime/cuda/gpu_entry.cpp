//===- gpu_entry.cpp - run a GPU entry of an artifact ---------------------===//

#include "runtime/cuda/gpu_entry.h"

namespace kimi::rt {

StatusOr<std::unique_ptr<GpuEntry>> GpuEntry::load(const CudaDevice &device,
                                                   const ArtifactSpec &artifact,
                                                   const std::string &entryName) {
  const EntrySpec *spec = artifact.findEntry(entryName);
  if (!spec)
    return Status(StatusCode::kInvalidArgument,
                  "artifact has no entry " + entryName);
  if (!spec->isGpuEntry())
    return Status(StatusCode::kInvalidArgument,
                  "entry " + entryName + " is not a GPU entry");
  std::unique_ptr<GpuEntry> entry(new GpuEntry());
  entry->device_ = &device;
  entry->spec_ = *spec;

  // Modules: per PTX image, prefer a cubin of the same name (built for one
  // architecture; it fails to load elsewhere, then the PTX is JIT-compiled).
  for (const LaunchSpec &l : spec->launches) {
    if (entry->moduleOfImage_.count(l.kernel))
      continue;
    const KernelImage &image = artifact.kernels[l.kernel];
    std::unique_ptr<CudaModule> module;
    std::string source;
    for (const KernelImage &alt : artifact.kernels)
      if (alt.name == image.name && alt.kind == KernelKind::kCubin) {
        auto m = CudaModule::load(device, alt.image, alt.name);
        if (m.isOk()) {
          module = std::move(*m);
          source = "cubin";
        }
        break;
      }
    if (!module) {
      const KernelImage *ptx = &image;
      for (const KernelImage &alt : artifact.kernels)
        if (alt.name == image.name && alt.kind == KernelKind::kPtx)
          ptx = &alt;
      if (ptx->kind != KernelKind::kPtx)
        return Status(StatusCode::kExecution,
                      "kernel image " + image.name +
                          ": the cubin does not load on this device and there "
                          "is no PTX");
      auto m = CudaModule::load(device, ptx->image, ptx->name);
      if (!m.isOk())
        return m.status();
      module = std::move(*m);
      source = "ptx";
    }
    entry->sources_.push_back(image.name + ": " + source);
    entry->moduleOfImage_[l.kernel] = module.get();
    entry->modules_.push_back(std::move(module));
  }
  for (const LaunchSpec &l : spec->launches) {
    auto k = entry->moduleOfImage_[l.kernel]->kernel(l.function);
    if (!k.isOk())
      return k.status();
    if (l.sharedBytes > 48 * 1024)
      KIMI_RETURN_IF_ERROR(k->setMaxDynamicSharedMemory(static_cast<int>(l.sharedBytes)));
    entry->kernels_.push_back(*k);
  }

  entry->addresses_.assign(spec->buffers.size(), 0);
  entry->bound_.assign(spec->buffers.size(), false);
  for (size_t i = 0; i < spec->buffers.size(); ++i) {
    const BufferSpec &b = spec->buffers[i];
    if (b.kind != BufferKind::kTemporary && b.kind != BufferKind::kConstant)
      continue;
    auto mem = DeviceBuffer::allocate(device, b.bytes());
    if (!mem.isOk())
      return Status(mem.status().code(),
                    "buffer " + b.name + ": " + mem.status().message());
    if (b.kind == BufferKind::kConstant)
      KIMI_RETURN_IF_ERROR(mem->upload(b.data.data(), b.data.size()));
    entry->addresses_[i] = mem->address();
    entry->bound_[i] = true;
    entry->owned_.push_back(std::move(*mem));
  }
  return entry;
}

Status GpuEntry::bind(const std::string &name, cuda::CUdeviceptr address,
                      size_t bytes) {
  int i = spec_.findBuffer(name);
  if (i < 0)
    return Status(StatusCode::kInvalidArgument,
                  "entry " + spec_.name + " has no buffer " + name);
  const BufferSpec &b = spec_.buffers[static_cast<size_t>(i)];
  if (b.kind == BufferKind::kTemporary || b.kind == BufferKind::kConstant)
    return Status(StatusCode::kInvalidArgument,
                  "buffer " + name + " is " + bufferKindName(b.kind) +
                      ", owned by the entry");
  if (bytes != b.bytes())
    return Status(StatusCode::kInvalidArgument,
                  "buffer " + name + " (" + dtypeName(b.dtype) + " " +
                      shapeToString(b.shape) + ") needs " +
                      std::to_string(b.bytes()) + " bytes, got " +
                      std::to_string(bytes));
  addresses_[static_cast<size_t>(i)] = address;
  bound_[static_cast<size_t>(i)] = true;
  return Status::ok();
}

Status GpuEntry::run(const CudaStream *stream) {
  return runLaunches(0, spec_.launches.size(), stream);
}

Status GpuEntry::runLaunches(size_t first, size_t count, const CudaStream *stream) {
  if (first + count > spec_.launches.size())
    return Status(StatusCode::kInvalidArgument,
                  "entry " + spec_.name + " has " +
                      std::to_string(spec_.launches.size()) + " launches");
  for (size_t i = 0; i < bound_.size(); ++i)
    if (!bound_[i])
      return Status(StatusCode::kInvalidArgument,
                    "entry " + spec_.name + ": buffer " + spec_.buffers[i].name +
                        " (" + bufferKindName(spec_.buffers[i].kind) +
                        ") is not bound");
  std::vector<void *> args;
  for (size_t i = first; i < first + count; ++i) {
    const LaunchSpec &l = spec_.launches[i];
    args.clear();
    for (uint32_t a : l.args)
      args.push_back(&addresses_[a]);
    Status s = kernels_[i].launch({l.grid[0], l.grid[1], l.grid[2]},
                                  {l.block[0], l.block[1], l.block[2]},
                                  l.sharedBytes, stream, args);
    if (!s.isOk())
      return Status(s.code(), "launch " + std::to_string(i) + " (" + l.function +
                                  "): " + s.message());
  }
  return Status::ok();
}

} // namespace kimi::rt

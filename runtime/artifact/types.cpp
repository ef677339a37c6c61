//===- types.cpp - Names and sizes of artifact enums ----------------------===//

#include "runtime/artifact/types.h"

namespace kimi::rt {

std::string dtypeName(DType dtype) {
  switch (dtype) {
  case DType::kInvalid: return "invalid";
  case DType::kF32: return "f32";
  case DType::kF16: return "f16";
  case DType::kBF16: return "bf16";
  case DType::kI32: return "i32";
  case DType::kI64: return "i64";
  case DType::kU8: return "u8";
  case DType::kI8: return "i8";
  case DType::kF8E8M0: return "f8e8m0";
  case DType::kF4E2M1: return "f4e2m1";
  }
  return "dtype(" + std::to_string(static_cast<unsigned>(dtype)) + ")";
}

int64_t storedBytes(DType dtype, int64_t numel) {
  if (dtype == DType::kF4E2M1)
    return (numel + 1) / 2;
  return numel * static_cast<int64_t>(dtypeSize(dtype));
}

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::kF32: case DType::kI32: return 4;
  case DType::kF16: case DType::kBF16: return 2;
  case DType::kI64: return 8;
  case DType::kU8: case DType::kI8: case DType::kF8E8M0: return 1;
  case DType::kInvalid: case DType::kF4E2M1: return 0;
  }
  return 0;
}

const char *roleName(TensorRole role) {
  switch (role) {
  case TensorRole::kTokens: return "tokens";
  case TensorRole::kLogits: return "logits";
  case TensorRole::kState: return "state";
  case TensorRole::kCache: return "cache";
  case TensorRole::kCacheLength: return "cache_length";
  }
  return "role(?)";
}

const char *kernelKindName(KernelKind kind) {
  switch (kind) {
  case KernelKind::kCpuSharedObject: return "cpu_shared_object";
  case KernelKind::kPtx: return "ptx";
  case KernelKind::kCubin: return "cubin";
  }
  return "kernel_kind(?)";
}

std::string targetName(TargetKind kind) {
  switch (kind) {
  case TargetKind::kCpu: return "cpu";
  case TargetKind::kSm90a: return "sm_90a";
  case TargetKind::kInvalid: break;
  }
  return "target(" + std::to_string(static_cast<unsigned>(kind)) + ")";
}

const char *bufferKindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::kInput: return "input";
  case BufferKind::kOutput: return "output";
  case BufferKind::kInOut: return "inout";
  case BufferKind::kTemporary: return "temporary";
  case BufferKind::kConstant: return "constant";
  }
  return "buffer_kind(?)";
}

size_t BufferSpec::bytes() const {
  int64_t numel = 0;
  if (!checkedNumel(shape, numel))
    return 0;
  return static_cast<size_t>(storedBytes(dtype, numel));
}

int EntrySpec::findBuffer(const std::string &bufferName) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == bufferName)
      return static_cast<int>(i);
  return -1;
}

bool ArtifactSpec::isKernelLibrary() const {
  if (!model.modelType.empty() || entries.empty())
    return false;
  for (const EntrySpec &e : entries)
    if (!e.isGpuEntry())
      return false;
  return true;
}

std::string shapeToString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool checkedNumel(const std::vector<int64_t> &shape, int64_t &numel) {
  constexpr int64_t kLimit = int64_t(1) << 53;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return false;
    if (d != 0 && n > kLimit / d)
      return false;
    n *= d;
  }
  numel = n;
  return true;
}

int64_t WeightSpec::blockNumel() const {
  int64_t numel = 0;
  checkedNumel(shape, numel);
  return shardParts > 1 ? numel / shardParts : numel;
}

const EntrySpec *ArtifactSpec::findEntry(const std::string &name) const {
  for (const EntrySpec &e : entries)
    if (e.name == name)
      return &e;
  return nullptr;
}

} // namespace kimi::rt

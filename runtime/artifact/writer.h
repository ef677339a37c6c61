//===- writer.h - Builds a kimi artifact file -------------------*- C++ -*-===//
//
// The builder the compiler calls to produce a `.kimi` file. It depends only
// on FlatBuffers. Typical use:
//
//   kimi::rt::ArtifactWriter w;
//   w.model() = {...};
//   uint32_t so = w.addKernel(KernelKind::kCpuSharedObject, "model.so", bytes);
//   w.addEntry({"prefill", "kimi_entry_prefill", so, inputs, outputs});
//   w.addWeight({"model.norm.weight", {}, {7168}, DType::kF32, "kimi_w_0"});
//   Status s = w.writeFile("model.kimi");
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_ARTIFACT_WRITER_H
#define KIMI_RUNTIME_ARTIFACT_WRITER_H

#include "runtime/artifact/types.h"
#include "runtime/support/file_io.h"
#include "runtime/support/status.h"

namespace kimi::rt {

class ArtifactWriter {
public:
  ArtifactWriter() = default;
  explicit ArtifactWriter(ArtifactSpec spec) : spec_(std::move(spec)) {}

  ModelInfo &model() { return spec_.model; }
  TargetInfo &target() { return spec_.target; }
  ArtifactSpec &spec() { return spec_; }
  const ArtifactSpec &spec() const { return spec_; }

  /// Returns the kernel's index (for `EntrySpec::kernel`).
  uint32_t addKernel(KernelKind kind, std::string name,
                     std::vector<uint8_t> image);
  void addEntry(EntrySpec entry) { spec_.entries.push_back(std::move(entry)); }
  void addWeight(WeightSpec weight) { spec_.weights.push_back(std::move(weight)); }

  /// Validates (validateArtifact) and serialises.
  StatusOr<std::vector<uint8_t>> finish() const;
  /// finish() and write the bytes to `path`.
  Status writeFile(const std::string &path) const;

private:
  ArtifactSpec spec_;
};

/// Serialises without any check: a size-prefixed FlatBuffer with identifier
/// "KIMI" and the checksum trailer (checksum.h), each kernel image's
/// checksum and the config's digest computed here. Tests use it to produce
/// artifacts the reader must refuse.
std::vector<uint8_t> serializeArtifact(const ArtifactSpec &spec);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_ARTIFACT_WRITER_H

//===- executable.cpp - Target dispatch for loaded artifacts --------------===//

#include "runtime/session/executable.h"
#include "runtime/comm/communicator.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/cuda/gpu_model_executable.h"
#include "runtime/support/text.h"

namespace kimi::rt {

StatusOr<const EntrySpec *> entryForCall(const ArtifactSpec &artifact,
                                         const std::string &entry,
                                         size_t inputCount) {
  const EntrySpec *spec = artifact.findEntry(entry);
  if (!spec)
    return invalidArgument("no entry " + quoted(entry) + " in the artifact");
  if (inputCount != spec->inputs.size())
    return invalidArgument("entry " + quoted(entry) + ": " +
                           std::to_string(inputCount) +
                           " inputs given, signature has " +
                           std::to_string(spec->inputs.size()));
  return spec;
}

Status checkEntryInput(const TensorSpec &spec, const HostTensor *t,
                       const std::string &where) {
  if (!t)
    return invalidArgument(where + ": null tensor");
  bool shapeOk = t->shape.size() == spec.shape.size() && t->dtype == spec.dtype;
  for (size_t d = 0; shapeOk && d < spec.shape.size(); ++d)
    shapeOk = spec.shape[d] == -1 ? t->shape[d] >= 0 : t->shape[d] == spec.shape[d];
  int64_t numel = 0;
  if (!shapeOk || !checkedNumel(t->shape, numel) ||
      static_cast<uint64_t>(numel) * dtypeSize(t->dtype) != t->bytes())
    return invalidArgument(where + ": given " + dtypeName(t->dtype) + " " +
                           shapeToString(t->shape) + " (" +
                           std::to_string(t->bytes()) + " bytes), signature " +
                           dtypeName(spec.dtype) + " " + shapeToString(spec.shape));
  return Status::ok();
}

StatusOr<std::shared_ptr<Executable>>
createExecutable(std::shared_ptr<const ArtifactSpec> artifact,
                 const WeightLoader &weights, Communicator *comm,
                 int device) {
  if (!artifact)
    return invalidArgument("executable: null artifact");
  if (artifact->target.name == "cpu") {
    KIMI_ASSIGN_OR_RETURN(std::shared_ptr<CpuExecutable> exe,
                          CpuExecutable::create(artifact, weights, comm));
    return std::shared_ptr<Executable>(std::move(exe));
  }
  if (artifact->target.name == "sm_90a" && !artifact->isKernelLibrary()) {
    KIMI_ASSIGN_OR_RETURN(std::shared_ptr<GpuModelExecutable> exe,
                          GpuModelExecutable::create(artifact, weights, device,
                                                     comm));
    return std::shared_ptr<Executable>(std::move(exe));
  }
  return invalidArtifact("artifact target " + quoted(artifact->target.name) +
                         (artifact->isKernelLibrary()
                              ? " holds a GPU kernel library, not a model"
                              : " is not supported by this runtime"));
}

} // namespace kimi::rt

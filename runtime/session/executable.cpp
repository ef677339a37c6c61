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

namespace {
Status checkInput(const TensorSpec &spec, DType dtype,
                  const std::vector<int64_t> &shape, size_t bytes,
                  const std::string &where) {
  bool shapeOk = shape.size() == spec.shape.size() && dtype == spec.dtype;
  for (size_t d = 0; shapeOk && d < spec.shape.size(); ++d)
    shapeOk = spec.shape[d] == -1 ? shape[d] >= 0 : shape[d] == spec.shape[d];
  int64_t numel = 0;
  if (!shapeOk || !checkedNumel(shape, numel) ||
      static_cast<uint64_t>(numel) * dtypeSize(dtype) != bytes)
    return invalidArgument(where + ": given " + dtypeName(dtype) + " " +
                           shapeToString(shape) + " (" + std::to_string(bytes) +
                           " bytes), signature " + dtypeName(spec.dtype) + " " +
                           shapeToString(spec.shape));
  return Status::ok();
}
} // namespace

Status checkEntryInput(const TensorSpec &spec, const HostTensor *t,
                       const std::string &where) {
  if (!t)
    return invalidArgument(where + ": null tensor");
  return checkInput(spec, t->dtype, t->shape, t->bytes(), where);
}

std::vector<size_t> ranksOf(const std::vector<TensorSpec> &specs) {
  std::vector<size_t> ranks;
  for (const TensorSpec &s : specs)
    ranks.push_back(s.shape.size());
  return ranks;
}

std::vector<int64_t> callShape(const TensorSpec &spec, int64_t tokens) {
  std::vector<int64_t> shape = spec.shape;
  for (int64_t &d : shape)
    if (d == -1)
      d = tokens;
  return shape;
}

Status checkEntryInput(const TensorSpec &spec, const CarriedTensor *t,
                       const std::string &where) {
  if (!t)
    return invalidArgument(where + ": null tensor");
  return checkInput(spec, t->dtype(), t->shape(), t->bytes(), where);
}

Status Executable::runCarried(const std::string &entry,
                              const std::vector<const CarriedTensor *> &inputs,
                              int64_t tokens, const std::vector<bool> &keep,
                              const std::vector<bool> &donated,
                              std::vector<CarriedRef> &outputs) const {
  (void)keep;    // host tensors are kept where they are
  (void)donated; // and never updated in place
  std::vector<const HostTensor *> hostInputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] && !inputs[i]->host())
      return invalidArgument("entry " + quoted(entry) + ": input " +
                             std::to_string(i) +
                             " is device memory, and this executable runs "
                             "on the host");
    hostInputs.push_back(inputs[i] ? inputs[i]->host() : nullptr);
  }
  std::vector<HostTensor> out;
  KIMI_RETURN_IF_ERROR(run(entry, hostInputs, tokens, out));
  outputs.clear();
  for (HostTensor &t : out)
    outputs.push_back(std::make_shared<HostCarriedTensor>(std::move(t)));
  return Status::ok();
}

StatusOr<CarriedRef> Executable::carry(const HostTensor &t) const {
  return CarriedRef(std::make_shared<HostCarriedTensor>(t));
}

StatusOr<CarriedRef> Executable::carryZeros(DType dtype,
                                            const std::vector<int64_t> &shape) const {
  int64_t numel = 0;
  if (!checkedNumel(shape, numel))
    return invalidArgument("zeros of shape " + shapeToString(shape) +
                           ": too many elements");
  KIMI_ASSIGN_OR_RETURN(HostBuffer zero,
                        HostBuffer::allocate(size_t(numel) * dtypeSize(dtype)));
  return CarriedRef(std::make_shared<HostCarriedTensor>(
      HostTensor{dtype, shape, std::move(zero)}));
}

StatusOr<CarriedRef> Executable::appendRows(const CarriedRef &cache,
                                            const CarriedRef &rows,
                                            int64_t batch) const {
  if (!rows)
    return invalidArgument("append of null cache rows");
  return HostCarriedTensor::appendRows(cache, *rows, batch);
}

StatusOr<std::shared_ptr<Executable>>
createExecutable(std::shared_ptr<const ArtifactSpec> artifact,
                 const WeightLoader &weights, Communicator *comm,
                 int device) {
  if (!artifact)
    return invalidArgument("executable: null artifact");
  if (artifact->target.kind == TargetKind::kCpu) {
    KIMI_ASSIGN_OR_RETURN(std::shared_ptr<CpuExecutable> exe,
                          CpuExecutable::create(artifact, weights, comm));
    return std::shared_ptr<Executable>(std::move(exe));
  }
  if (artifact->target.kind == TargetKind::kSm90a &&
      !artifact->isKernelLibrary()) {
    KIMI_ASSIGN_OR_RETURN(std::shared_ptr<GpuModelExecutable> exe,
                          GpuModelExecutable::create(artifact, weights, device,
                                                     comm));
    return std::shared_ptr<Executable>(std::move(exe));
  }
  return invalidArtifact("artifact target " + quoted(artifact->target.name()) +
                         (artifact->isKernelLibrary()
                              ? " holds a GPU kernel library, not a model"
                              : " is not supported by this runtime"));
}

} // namespace kimi::rt

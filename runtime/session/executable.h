//===- executable.h - A loaded model artifact, on any target ----*- C++ -*-===//
//
// What a Session needs from a loaded artifact: its description and a way to
// run an entry on host tensors. CpuExecutable runs the CPU target's shared
// object; GpuModelExecutable runs the GPU target's host program, whose
// kernels and buffers live on the device. createExecutable picks by the
// artifact's target.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_SESSION_EXECUTABLE_H
#define KIMI_RUNTIME_SESSION_EXECUTABLE_H

#include "runtime/artifact/types.h"
#include "runtime/cpu/host_tensor.h"
#include "runtime/support/status.h"

#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

class Communicator;
class WeightLoader;

class Executable {
public:
  virtual ~Executable() = default;
  virtual const ArtifactSpec &artifact() const = 0;
  /// Runs entry `entry` with `inputs` in signature order (concrete shapes,
  /// checked against the signature); every dynamic dimension of an output
  /// must equal `tokens`. Outputs are host tensors.
  virtual Status run(const std::string &entry,
                     const std::vector<const HostTensor *> &inputs,
                     int64_t tokens, std::vector<HostTensor> &outputs) const = 0;
  /// Bytes of all weights loaded, and the seconds loading took.
  virtual int64_t weightBytes() const = 0;
  virtual double weightLoadSeconds() const = 0;
  /// "cpu" or the GPU's description.
  virtual std::string deviceName() const = 0;
  /// Per-kernel device times (GPU models; KIMI_GPU_PROFILE=1 turns it on at
  /// load). Targets without kernels to time ignore it and report nothing.
  virtual void setProfiling(bool) {}
  /// The profile since the last clearProfile(), most expensive kernels
  /// first (at most `top`), or empty.
  virtual std::string profileReport(size_t top = 40) const { (void)top; return {}; }
  virtual void clearProfile() {}
};

/// The signature of entry `entry` for a call with `inputCount` inputs; an
/// invalid-argument error naming the entry when it does not exist or takes
/// another number of inputs.
StatusOr<const EntrySpec *> entryForCall(const ArtifactSpec &artifact,
                                         const std::string &entry,
                                         size_t inputCount);

/// Checks input `t` against its signature `spec` (dtype, rank, static
/// dims, byte size); `where` names it in the error.
Status checkEntryInput(const TensorSpec &spec, const HostTensor *t,
                       const std::string &where);

/// Loads `artifact` for its target: "cpu" or "sm_90a" models (CUDA device
/// `device`; needs libcuda at run time). Partitioned artifacts need `comm`:
/// MPI (host buffers) for CPU ranks, NCCL on `device` for GPU ranks.
StatusOr<std::shared_ptr<Executable>>
createExecutable(std::shared_ptr<const ArtifactSpec> artifact,
                 const WeightLoader &weights, Communicator *comm = nullptr,
                 int device = 0);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_SESSION_EXECUTABLE_H

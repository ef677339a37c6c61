//===- executable.h - A loaded model artifact, on any target ----*- C++ -*-===//
//
// What a Session needs from a loaded artifact: its description and a way to
// run an entry on host tensors. CpuExecutable runs the CPU target's shared
// object; GpuModelExecutable runs the GPU target's host program, whose
// kernels and buffers live on the device. createExecutable picks by the
// artifact's target.
//
// A Session keeps states and caches as CarriedTensors (carried_tensor.h)
// that the executable makes: runCarried takes them as inputs and returns
// them as outputs where they live, so GPU models keep them in device memory.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_SESSION_EXECUTABLE_H
#define KIMI_RUNTIME_SESSION_EXECUTABLE_H

#include "runtime/artifact/types.h"
#include "runtime/cpu/host_tensor.h"
#include "runtime/session/carried_tensor.h"
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
  /// run() with carried inputs (in host memory, or this executable's own).
  /// Output i stays where the executable computes when `keep[i]`, and is a
  /// host tensor otherwise. The default runs run() on host tensors only.
  ///
  /// `donated[i]` (may be empty: nothing donated): the caller holds the only
  /// reference to input i and drops it after the call, so the executable
  /// may reuse its memory for the output of the same name (a state updated
  /// in place). A donated input's contents are unspecified after the call,
  /// also after a failed one when the device itself failed.
  virtual Status runCarried(const std::string &entry,
                            const std::vector<const CarriedTensor *> &inputs,
                            int64_t tokens, const std::vector<bool> &keep,
                            const std::vector<bool> &donated,
                            std::vector<CarriedRef> &outputs) const;
  /// Where the tensors this executable keeps live (CarriedTensor::residence):
  /// null for host memory.
  virtual const void *residence() const { return nullptr; }
  /// `t` where this executable keeps tensors (host: the same bytes).
  virtual StatusOr<CarriedRef> carry(const HostTensor &t) const;
  /// Zeros of `dtype` and `shape`, kept by this executable.
  virtual StatusOr<CarriedRef> carryZeros(DType dtype,
                                          const std::vector<int64_t> &shape) const;
  /// `cache` [B, L, ...] (null: no rows yet) with `rows` [B, n, ...]
  /// appended to each of the B = `batch` sequences; `cache` is unchanged.
  virtual StatusOr<CarriedRef> appendRows(const CarriedRef &cache,
                                          const CarriedRef &rows,
                                          int64_t batch) const;
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
  /// Host time of the entry calls since the last clearProfile(), measured
  /// with or without profiling: issuing the work (the compiled host code)
  /// and then waiting for the device. A step whose wait is near zero is
  /// bound by the host issuing launches. GPU models; zero elsewhere.
  struct CallTimes {
    int64_t calls = 0;
    double issueMs = 0, waitMs = 0;
    /// Calls replayed as a CUDA graph, and graphs captured (GPU models).
    int64_t graphReplays = 0, graphCaptures = 0;
    /// Captures that updated the executable of a graph they replace (same
    /// kernels, new addresses or grids) instead of instantiating one.
    int64_t graphUpdates = 0;
    /// Host time of the captures: enqueueing the call's work, and
    /// instantiating or updating the executables.
    double graphCaptureMs = 0, graphInstantiateMs = 0;
    /// Replays that updated donated states in place (no state copied in or
    /// out by the host).
    int64_t statesInPlace = 0;
  };
  virtual CallTimes callTimes() const { return {}; }
};

/// The signature of entry `entry` for a call with `inputCount` inputs; an
/// invalid-argument error naming the entry when it does not exist or takes
/// another number of inputs.
StatusOr<const EntrySpec *> entryForCall(const ArtifactSpec &artifact,
                                         const std::string &entry,
                                         size_t inputCount);

/// The rank of each tensor of a signature (the memref descriptors' layout).
std::vector<size_t> ranksOf(const std::vector<TensorSpec> &specs);
/// The shape an output must have for a call of `tokens` tokens (its
/// dynamic dimension is the token count).
std::vector<int64_t> callShape(const TensorSpec &spec, int64_t tokens);

/// Checks input `t` against its signature `spec` (dtype, rank, static
/// dims, byte size); `where` names it in the error.
Status checkEntryInput(const TensorSpec &spec, const HostTensor *t,
                       const std::string &where);
/// The same for a carried input (dtype and shape; its bytes follow).
Status checkEntryInput(const TensorSpec &spec, const CarriedTensor *t,
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

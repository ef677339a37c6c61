//===- cpu_executable.h - A CPU artifact ready to run -----------*- C++ -*-===//
//
// Loads the artifact's shared object, fills every weight global of the
// manifest from safetensors (WeightLoader), resolves the entry symbols, and
// runs an entry: builds the input descriptors from the signature, calls
// `kimi_entry_<entry>(void **args)`, checks every returned descriptor against the
// signature (rank, static dims, dynamic dims = tokens of the call, non-null
// data) and takes ownership of the outputs (free(allocated), once per
// allocation). An output that points into an input or a weight is copied and
// never freed. Outputs are released even when the call is reported as an
// error.
//
// After creation the object is immutable: several sessions may share it and
// run concurrently (the compiled code only reads the weights).
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CPU_CPU_EXECUTABLE_H
#define KIMI_RUNTIME_CPU_CPU_EXECUTABLE_H

#include "runtime/artifact/types.h"
#include "runtime/cpu/comm_shim.h"
#include "runtime/cpu/cpu_module.h"
#include "runtime/cpu/host_tensor.h"
#include "runtime/support/status.h"
#include "runtime/session/executable.h"
#include "runtime/weights/weight_loader.h"

#include <map>
#include <memory>

namespace kimi::rt {

class Communicator;

class CpuExecutable final : public Executable {
public:
  /// `artifact` must come from ArtifactReader (or have passed
  /// validateArtifact); `weights` supplies every manifest entry.
  /// A partitioned artifact (target.num_ranks = N > 1) needs `comm` with
  /// size() == N: this process is rank comm->rank(); it loads its block of
  /// every split weight and runs the model's collectives on `comm`, which
  /// must outlive the executable. Such an executable runs one call at a time.
  static StatusOr<std::shared_ptr<CpuExecutable>>
  create(std::shared_ptr<const ArtifactSpec> artifact, const WeightLoader &weights,
         Communicator *comm = nullptr);

  const ArtifactSpec &artifact() const override { return *artifact_; }
  std::shared_ptr<const ArtifactSpec> artifactPtr() const { return artifact_; }

  /// Runs entry `entry` with `inputs` in signature order (their shapes are
  /// the concrete shapes; checked against the signature). Every dynamic
  /// dimension of an output must equal `tokens`.
  Status run(const std::string &entry, const std::vector<const HostTensor *> &inputs,
             int64_t tokens, std::vector<HostTensor> &outputs) const override;

  /// Bytes of all weights written into the module.
  int64_t weightBytes() const override { return weightBytes_; }
  /// Seconds spent loading the weights.
  double weightLoadSeconds() const override { return weightSeconds_; }
  std::string deviceName() const override { return "cpu"; }

private:
  CpuExecutable() = default;

  struct Range {
    const uint8_t *begin;
    const uint8_t *end;
  };
  bool insideWeights(const void *p) const;

  std::shared_ptr<const ArtifactSpec> artifact_;
  std::unique_ptr<CpuModule> module_;
  std::unique_ptr<CommShim> comm_;
  std::map<std::string, void *> entries_;
  std::vector<Range> weightRanges_; // sorted by begin
  int64_t weightBytes_ = 0;
  double weightSeconds_ = 0;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CPU_CPU_EXECUTABLE_H

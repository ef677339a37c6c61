//===- comm_shim.h - Collectives of a partitioned model ---------*- C++ -*-===//
//
// A model compiled for N ranks (kimi-compile --grid N --strategy ...) calls
// `kimi_rt_*` functions of its own comm shim for every collective
// (docs/runtime-abi.md, "Collectives"). The shim forwards to a table of
// callbacks, `kimi_rt_comm`, that CommShim::install fills after the shared
// object is loaded; each callback runs the collective on a Communicator
// (MPI for CPU ranks on host buffers, NCCL for GPU models on device
// buffers). The compiled code cannot return errors, so the shim
// records the first failure in `kimi_rt_comm_status` and skips later
// collectives; the executable reads it after every entry call.
//
// Every collective names its group as a bit set of grid axes; install()
// splits the world communicator once per axis set (the ranks sharing every
// other grid coordinate, ordered row-major over the set's axes), so a 2-D
// grid's tensor-parallel all-reduce runs among the T ranks of its group.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CPU_COMM_SHIM_H
#define KIMI_RUNTIME_CPU_COMM_SHIM_H

#include "runtime/support/status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

class Communicator;
class CpuModule;

class CommShim {
public:
  /// Fills the module's `kimi_rt_comm` table; the module must export it with
  /// this runtime's KIMI_COMM_ABI_VERSION (runtime/abi/kimi_module_abi.h). `grid` is the artifact's
  /// grid shape (its product is comm.size()); the group communicators are
  /// made here, collectively. `comm` must outlive the shim.
  /// `beforeEach`, when given, runs before every collective: a GPU model
  /// waits there for the kernels that produce the collective's input.
  static StatusOr<std::unique_ptr<CommShim>>
  install(CpuModule &module, Communicator &comm,
          const std::vector<int32_t> &grid,
          std::function<Status()> beforeEach = {});

  /// The first collective failure since the last call (then cleared).
  Status takeStatus();

  // Used by the C callbacks.
  Communicator &comm() { return *comm_; }
  /// The communicator of axis set `group`, or null when out of range.
  Communicator *group(int32_t group);
  void fail(const Status &status);
  /// Runs `beforeEach` (ok when there is none).
  Status prepare() { return beforeEach_ ? beforeEach_() : Status::ok(); }

private:
  CommShim() = default;
  Communicator *comm_ = nullptr;
  /// Indexed by axis bit set: [0] this rank alone, [all] the world.
  std::vector<Communicator *> groups_;
  std::vector<std::unique_ptr<Communicator>> owned_;
  int32_t *status_ = nullptr;
  std::string error_;
  std::function<Status()> beforeEach_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CPU_COMM_SHIM_H

//===- kernel_profile.h - Device time per kernel of a GPU model -*- C++ -*-===//
//
// GpuModelExecutable::setProfiling: every launch and matrix product of an
// entry call is bracketed by two CUDA events on the model's stream, and the
// times summed by kernel name. Inside a graph capture the events become
// event-record nodes of the graph, so a replay times its kernels without the
// host's gaps between launches.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_CUDA_KERNEL_PROFILE_H
#define KIMI_RUNTIME_CUDA_KERNEL_PROFILE_H

#include "runtime/cuda/cuda_device.h"
#include "runtime/session/executable.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

struct KernelProfile {
  struct Stat {
    int64_t calls = 0;
    double ms = 0;
    std::string shape; // of the last launch
  };
  struct Pending {
    std::string label, shape;
    size_t event; // events[event] and events[event + 1]
  };
  bool on = false;
  std::map<void *, std::string> names;            // CUfunction -> kernel name
  std::vector<std::unique_ptr<CudaEvent>> events; // reused across calls
  std::vector<Pending> pending;
  size_t used = 0;
  std::map<std::string, Stat> stats;
  double entryMs = 0;
  int64_t entryCalls = 0;
  int64_t hostReads = 0;       // synchronising reads (kimi.host_read)
  int64_t graphReplays = 0;    // entry calls replayed as graphs
  Executable::CallTimes times; // kept with profiling off as well
  bool inGraph = false;        // the events become nodes of the graph captured

  /// Two recorded events bracket `launch`.
  template <typename Launch>
  Status time(const CudaDevice &device, const CudaStream &stream,
              std::string label, std::string shape, Launch &&launch) {
    while (events.size() < used + 2) {
      KIMI_ASSIGN_OR_RETURN(std::unique_ptr<CudaEvent> e,
                            CudaEvent::create(device));
      events.push_back(std::move(e));
    }
    KIMI_RETURN_IF_ERROR(events[used]->record(&stream, inGraph));
    KIMI_RETURN_IF_ERROR(launch());
    KIMI_RETURN_IF_ERROR(events[used + 1]->record(&stream, inGraph));
    pending.push_back({std::move(label), std::move(shape), used});
    used += 2;
    return Status::ok();
  }
  /// After the stream was synchronised: the pending times into the stats.
  void collect();
  /// The times of `recorded` (pairs of `in`) into the stats.
  void add(const std::vector<std::unique_ptr<CudaEvent>> &in,
           const std::vector<Pending> &recorded);
  /// Forgets every time and count (not the kernel names).
  void clear();
  /// One line per kernel (calls, total and mean device time, the last
  /// launch shape), the most expensive first, at most `top` lines, then the
  /// totals. Empty when profiling is off and nothing was recorded.
  std::string report(size_t top) const;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_CUDA_KERNEL_PROFILE_H

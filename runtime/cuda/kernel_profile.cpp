//===- kernel_profile.cpp - Device time per kernel of a GPU model ---------===//

#include "runtime/cuda/kernel_profile.h"

#include <algorithm>
#include <cstdio>

namespace kimi::rt {

void KernelProfile::collect() {
  add(events, pending);
  pending.clear();
  used = 0;
}

void KernelProfile::add(const std::vector<std::unique_ptr<CudaEvent>> &in,
                        const std::vector<Pending> &recorded) {
  for (const Pending &p : recorded) {
    StatusOr<float> ms = CudaEvent::elapsedMs(*in[p.event], *in[p.event + 1]);
    Stat &st = stats[p.label];
    st.calls += 1;
    st.ms += ms.isOk() ? ms.value() : 0.0;
    st.shape = p.shape;
  }
}

void KernelProfile::clear() {
  stats.clear();
  entryMs = 0;
  entryCalls = 0;
  hostReads = 0;
  graphReplays = 0;
  times = {};
}

std::string KernelProfile::report(size_t top) const {
  if (!on && stats.empty())
    return std::string();
  std::vector<std::pair<std::string, Stat>> rows(stats.begin(), stats.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.ms > b.second.ms;
  });
  double total = 0;
  int64_t calls = 0;
  for (const auto &r : rows) {
    total += r.second.ms;
    calls += r.second.calls;
  }
  std::string out =
      "kernel profile (device time, CUDA events around each launch" +
      std::string(graphReplays ? "; " + std::to_string(graphReplays) +
                                     " calls replayed as graphs, their "
                                     "events graph nodes"
                               : "") +
      ")\n";
  char line[512];
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const auto &[name, st] = rows[i];
    std::snprintf(line, sizeof line,
                  "%9.3f ms %5.1f %% %8lld calls %9.2f us  %s  [%s]\n", st.ms,
                  total > 0 ? 100.0 * st.ms / total : 0.0, (long long)st.calls,
                  st.calls ? 1e3 * st.ms / st.calls : 0.0, name.c_str(),
                  st.shape.c_str());
    out += line;
  }
  std::snprintf(
      line, sizeof line,
      "total: %.3f ms of device time in %lld launches of %zu kernels; "
      "entry calls: %lld taking %.3f ms of wall time; %lld host "
      "reads\n",
      total, (long long)calls, rows.size(), (long long)entryCalls, entryMs,
      (long long)hostReads);
  out += line;
  return out;
}

} // namespace kimi::rt

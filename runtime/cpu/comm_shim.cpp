//===- comm_shim.cpp - Collectives of a partitioned CPU model -------------===//

#include "runtime/cpu/comm_shim.h"
#include "runtime/abi/kimi_module_abi.h"
#include "runtime/comm/communicator.h"
#include "runtime/cpu/cpu_module.h"
#include "runtime/artifact/types.h"

namespace kimi::rt {
namespace {


static_assert(int(CommDType::kF32) == KIMI_COMM_F32 &&
                  int(CommDType::kI32) == KIMI_COMM_I32 &&
                  int(CommDType::kI64) == KIMI_COMM_I64 &&
                  int(ReduceOp::kSum) == KIMI_COMM_SUM &&
                  int(ReduceOp::kMax) == KIMI_COMM_MAX,
              "the comm ABI's element types and reductions are the "
              "communicator's");

CommShim &shim(void *ctx) { return *static_cast<CommShim *>(ctx); }

/// 0 on success; otherwise records the status and returns 1.
int32_t report(void *ctx, const Status &s) {
  if (s.isOk())
    return 0;
  shim(ctx).fail(s);
  return 1;
}

/// Checks the arguments every collective has; on success `*comm` is the
/// group's communicator.
bool checkCall(void *ctx, const char *what, int64_t count, int32_t dtype,
               int32_t op, int32_t group, Communicator **comm) {
  *comm = shim(ctx).group(group);
  if (Status ready = shim(ctx).prepare(); !ready.isOk()) {
    report(ctx, ready.addContext(std::string("comm shim: before ") + what));
    return false;
  }
  if (dtype >= 0 && dtype <= 2 && op >= 0 && op <= 1 && count >= 0 && *comm)
    return true;
  report(ctx, invalidArgument(std::string("comm shim: ") + what +
                              " with dtype " + std::to_string(dtype) +
                              ", op " + std::to_string(op) + ", count " +
                              std::to_string(count) + ", group " +
                              std::to_string(group)));
  return false;
}

int32_t rankOf(void *ctx) { return shim(ctx).comm().rank(); }

int32_t allReduce(void *ctx, const void *send, void *recv, int64_t count,
                  int32_t dtype, int32_t op, int32_t group) {
  Communicator *c;
  if (!checkCall(ctx, "all_reduce", count, dtype, op, group, &c))
    return 1;
  auto t = static_cast<CommDType>(dtype);
  return report(ctx, c->allReduce(ConstCommBuffer(send, size_t(count), t),
                                  CommBuffer{recv, size_t(count), t},
                                  static_cast<ReduceOp>(op)));
}

int32_t allGather(void *ctx, const void *send, void *recv, int64_t count,
                  int32_t dtype, int32_t group) {
  Communicator *c;
  if (!checkCall(ctx, "all_gather", count, dtype, 0, group, &c))
    return 1;
  auto t = static_cast<CommDType>(dtype);
  size_t n = size_t(count) * size_t(c->size());
  return report(ctx, c->allGather(ConstCommBuffer(send, size_t(count), t),
                                  CommBuffer{recv, n, t}));
}

int32_t reduceScatter(void *ctx, const void *send, void *recv, int64_t count,
                      int32_t dtype, int32_t op, int32_t group) {
  Communicator *c;
  if (!checkCall(ctx, "reduce_scatter", count, dtype, op, group, &c))
    return 1;
  auto t = static_cast<CommDType>(dtype);
  size_t n = size_t(count) * size_t(c->size());
  return report(ctx, c->reduceScatter(ConstCommBuffer(send, n, t),
                                      CommBuffer{recv, size_t(count), t},
                                      static_cast<ReduceOp>(op)));
}

int32_t allToAll(void *ctx, const void *send, void *recv, int64_t count,
                 int32_t dtype, int32_t group) {
  Communicator *c;
  if (!checkCall(ctx, "all_to_all", count, dtype, 0, group, &c))
    return 1;
  auto t = static_cast<CommDType>(dtype);
  return report(ctx, c->allToAll(ConstCommBuffer(send, size_t(count), t),
                                 CommBuffer{recv, size_t(count), t}));
}

} // namespace

StatusOr<std::unique_ptr<CommShim>>
CommShim::install(CpuModule &module, Communicator &comm,
                  const std::vector<int32_t> &grid,
                  std::function<Status()> beforeEach) {
  KIMI_ASSIGN_OR_RETURN(void *version,
                        module.symbol(KIMI_COMM_ABI_VERSION_SYMBOL));
  if (*static_cast<const int32_t *>(version) != KIMI_COMM_ABI_VERSION)
    return invalidArtifact(
        "the model's comm shim has ABI version " +
        std::to_string(*static_cast<const int32_t *>(version)) +
        ", the runtime speaks " + std::to_string(KIMI_COMM_ABI_VERSION));
  KIMI_ASSIGN_OR_RETURN(void *table, module.symbol(KIMI_COMM_TABLE_SYMBOL));
  KIMI_ASSIGN_OR_RETURN(void *status, module.symbol(KIMI_COMM_STATUS_SYMBOL));
  int64_t ranks = 1;
  for (int32_t n : grid)
    ranks *= n;
  if (grid.empty() || grid.size() > kMaxGridAxes || ranks != comm.size())
    return invalidArgument("comm shim: a grid of " +
                           std::to_string(grid.size()) + " axes and " +
                           std::to_string(ranks) + " ranks on a communicator "
                           "of " + std::to_string(comm.size()));
  std::unique_ptr<CommShim> s(new CommShim());
  s->comm_ = &comm;
  s->beforeEach_ = std::move(beforeEach);
  // One communicator per axis set: color = the rank's coordinates outside
  // the set, key = its coordinates inside (both row-major). Every rank
  // splits for the same sets in the same order, as a collective must.
  const size_t axes = grid.size(), sets = size_t(1) << axes;
  std::vector<int32_t> coord(axes);
  for (size_t a = axes, r = size_t(comm.rank()); a-- > 0;) {
    coord[a] = static_cast<int32_t>(r % size_t(grid[a]));
    r /= size_t(grid[a]);
  }
  s->groups_.assign(sets, nullptr);
  for (size_t set = 0; set < sets; ++set) {
    int64_t color = 0, key = 0, size = 1;
    for (size_t a = 0; a < axes; ++a) {
      if (set >> a & 1) {
        key = key * grid[a] + coord[a];
        size *= grid[a];
      } else {
        color = color * grid[a] + coord[a];
      }
    }
    if (size == comm.size()) {
      s->groups_[set] = &comm;
      continue;
    }
    std::unique_ptr<Communicator> group;
    if (size == 1) {
      group = std::make_unique<LocalCommunicator>();
    } else {
      StatusOr<std::unique_ptr<Communicator>> split =
          comm.split(static_cast<int>(color), static_cast<int>(key));
      if (!split.isOk()) {
        Status e = split.takeStatus();
        return e.addContext("grid axis set " + std::to_string(set));
      }
      group = std::move(split.value());
    }
    s->groups_[set] = group.get();
    s->owned_.push_back(std::move(group));
  }
  s->status_ = static_cast<int32_t *>(status);
  *s->status_ = 0;
  *static_cast<kimi_rt_comm_table *>(table) = kimi_rt_comm_table{
      s.get(), rankOf, allReduce, allGather, reduceScatter, allToAll};
  return s;
}

Communicator *CommShim::group(int32_t group) {
  if (group < 0 || size_t(group) >= groups_.size())
    return nullptr;
  return groups_[size_t(group)];
}

void CommShim::fail(const Status &status) {
  if (error_.empty())
    error_ = status.message();
}

Status CommShim::takeStatus() {
  int32_t code = *status_;
  *status_ = 0;
  std::string error = std::move(error_);
  error_.clear();
  if (code == 0)
    return Status::ok();
  return Status(StatusCode::kExecution,
                "collective failed: " +
                    (error.empty() ? "no communicator installed" : error));
}

} // namespace kimi::rt

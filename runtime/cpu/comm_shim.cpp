//===- comm_shim.cpp - Collectives of a partitioned CPU model -------------===//

#include "runtime/cpu/comm_shim.h"
#include "runtime/comm/communicator.h"
#include "runtime/cpu/cpu_module.h"

namespace kimi::rt {
namespace {

/// Must match the table in the shim that kimi-compile links into the model
/// (lowering/ToCPU/CpuCodegen.cpp, kCommShim).
struct CommTable {
  void *ctx;
  int32_t (*rank)(void *ctx);
  int32_t (*allReduce)(void *ctx, const void *send, void *recv, int64_t count,
                       int32_t dtype, int32_t op);
  int32_t (*allGather)(void *ctx, const void *send, void *recv,
                       int64_t sendCount, int32_t dtype);
  int32_t (*reduceScatter)(void *ctx, const void *send, void *recv,
                           int64_t recvCount, int32_t dtype, int32_t op);
  int32_t (*allToAll)(void *ctx, const void *send, void *recv, int64_t count,
                      int32_t dtype);
};
constexpr int32_t kAbiVersion = 1;

CommShim &shim(void *ctx) { return *static_cast<CommShim *>(ctx); }

/// 0 on success; otherwise records the status and returns 1.
int32_t report(void *ctx, const Status &s) {
  if (s.isOk())
    return 0;
  shim(ctx).fail(s);
  return 1;
}

bool validDtype(int32_t d) { return d >= 0 && d <= 2; }

int32_t rankOf(void *ctx) { return shim(ctx).comm().rank(); }

int32_t allReduce(void *ctx, const void *send, void *recv, int64_t count,
                  int32_t dtype, int32_t op) {
  if (!validDtype(dtype) || op < 0 || op > 1 || count < 0)
    return report(ctx, invalidArgument("comm shim: all_reduce with dtype " +
                                       std::to_string(dtype) + ", op " +
                                       std::to_string(op)));
  auto t = static_cast<CommDType>(dtype);
  return report(ctx, shim(ctx).comm().allReduce(
                         ConstCommBuffer(send, size_t(count), t),
                         CommBuffer{recv, size_t(count), t},
                         static_cast<ReduceOp>(op)));
}

int32_t allGather(void *ctx, const void *send, void *recv, int64_t count,
                  int32_t dtype) {
  if (!validDtype(dtype) || count < 0)
    return report(ctx, invalidArgument("comm shim: all_gather with dtype " +
                                       std::to_string(dtype)));
  auto t = static_cast<CommDType>(dtype);
  size_t n = size_t(count) * size_t(shim(ctx).comm().size());
  return report(ctx, shim(ctx).comm().allGather(
                         ConstCommBuffer(send, size_t(count), t),
                         CommBuffer{recv, n, t}));
}

int32_t reduceScatter(void *ctx, const void *send, void *recv, int64_t count,
                      int32_t dtype, int32_t op) {
  if (!validDtype(dtype) || op < 0 || op > 1 || count < 0)
    return report(ctx, invalidArgument("comm shim: reduce_scatter with dtype " +
                                       std::to_string(dtype)));
  auto t = static_cast<CommDType>(dtype);
  size_t n = size_t(count) * size_t(shim(ctx).comm().size());
  return report(ctx, shim(ctx).comm().reduceScatter(
                         ConstCommBuffer(send, n, t),
                         CommBuffer{recv, size_t(count), t},
                         static_cast<ReduceOp>(op)));
}

int32_t allToAll(void *ctx, const void *send, void *recv, int64_t count,
                 int32_t dtype) {
  if (!validDtype(dtype) || count < 0)
    return report(ctx, invalidArgument("comm shim: all_to_all with dtype " +
                                       std::to_string(dtype)));
  auto t = static_cast<CommDType>(dtype);
  return report(ctx, shim(ctx).comm().allToAll(
                         ConstCommBuffer(send, size_t(count), t),
                         CommBuffer{recv, size_t(count), t}));
}

} // namespace

StatusOr<std::unique_ptr<CommShim>> CommShim::install(CpuModule &module,
                                                      Communicator &comm) {
  KIMI_ASSIGN_OR_RETURN(void *version, module.symbol("kimi_rt_comm_abi_version"));
  if (*static_cast<const int32_t *>(version) != kAbiVersion)
    return invalidArtifact(
        "the model's comm shim has ABI version " +
        std::to_string(*static_cast<const int32_t *>(version)) +
        ", the runtime speaks " + std::to_string(kAbiVersion));
  KIMI_ASSIGN_OR_RETURN(void *table, module.symbol("kimi_rt_comm"));
  KIMI_ASSIGN_OR_RETURN(void *status, module.symbol("kimi_rt_comm_status"));
  std::unique_ptr<CommShim> s(new CommShim());
  s->comm_ = &comm;
  s->status_ = static_cast<int32_t *>(status);
  *s->status_ = 0;
  auto *t = static_cast<CommTable *>(table);
  *t = CommTable{s.get(), rankOf, allReduce, allGather, reduceScatter, allToAll};
  return s;
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

//===- rank_connection.cpp - This process's place among ranks -------------===//

#include "runtime/comm/rank_connection.h"
#include "runtime/comm/nccl_communicator.h"

namespace kimi::rt {

StatusOr<RankConnection> connectRanks(const ArtifactSpec &spec,
                                      const RankOptions &o) {
  RankConnection c;
  const int32_t ranks = spec.target.numRanks;
  const bool gpu = spec.target.kind == TargetKind::kSm90a;
  c.deviceOrdinal = o.device >= 0 ? o.device : o.rank >= 0 ? int(o.rank) : 0;
  if (ranks == 1) {
    if (o.rank > 0)
      return invalidArgument("rank " + std::to_string(o.rank) +
                             ": the artifact is not partitioned (1 rank)");
    return c;
  }
  if (gpu) {
    if (o.rank < 0 || o.store.empty())
      return invalidArgument(
          "the GPU artifact is partitioned over " + std::to_string(ranks) +
          " ranks: each process needs its rank and a store file every rank "
          "can see");
    if (o.rank >= ranks)
      return invalidArgument("rank " + std::to_string(o.rank) +
                             ": the artifact has " + std::to_string(ranks) +
                             " ranks");
    KIMI_ASSIGN_OR_RETURN(c.device, CudaDevice::open(c.deviceOrdinal));
    StatusOr<std::unique_ptr<NcclCommunicator>> nccl =
        NcclCommunicator::create(*c.device, int(o.rank), ranks, o.store);
    if (!nccl.isOk()) {
      Status e = nccl.takeStatus();
      return e.addContext("rank " + std::to_string(o.rank));
    }
    c.comm = std::move(nccl.value());
    return c;
  }
  if (o.rank >= 0 || !o.store.empty())
    return invalidArgument("a rank and a store apply to GPU models; the CPU "
                           "artifact's ranks come from its host communicator "
                           "(MPI)");
  if (!o.hostCommunicator)
    return invalidArgument("the CPU artifact is partitioned over " +
                           std::to_string(ranks) +
                           " ranks, and no host communicator (MPI) was given");
  KIMI_ASSIGN_OR_RETURN(c.comm, o.hostCommunicator());
  if (c.comm->size() != ranks)
    return invalidArgument("the CPU artifact is partitioned over " +
                           std::to_string(ranks) + " ranks but runs on " +
                           std::to_string(c.comm->size()));
  return c;
}

} // namespace kimi::rt

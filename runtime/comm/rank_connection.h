//===- rank_connection.h - This process's place among ranks -----*- C++ -*-===//
//
// A partitioned artifact runs as one process per rank (docs/runtime-comm.md).
// connectRanks makes the communicator the artifact needs, so that every
// program that runs one (kimi-run, the C API's kimi_session_create_rank, an
// embedding program) joins the ranks the same way: NCCL on the rank's GPU for
// GPU models, the ranks meeting through a store file; for CPU ranks, the host
// communicator the caller supplies (MPI, in the separate kimi_comm_mpi
// library). An artifact of one rank needs nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_COMM_RANK_CONNECTION_H
#define KIMI_RUNTIME_COMM_RANK_CONNECTION_H

#include "runtime/artifact/types.h"
#include "runtime/comm/communicator.h"
#include "runtime/cuda/cuda_device.h"

#include <functional>
#include <memory>
#include <string>

namespace kimi::rt {

struct RankOptions {
  /// This process's rank, 0 .. ranks - 1 (GPU models; -1: not given).
  int32_t rank = -1;
  /// A file path every rank can see: rank 0 writes NCCL's unique id there.
  std::string store;
  /// The CUDA device (-1: the rank's ordinal).
  int device = -1;
  /// CPU ranks: makes the host communicator (e.g. MpiCommunicator::create);
  /// unset, a partitioned CPU artifact is refused.
  std::function<StatusOr<std::unique_ptr<Communicator>>()> hostCommunicator;
};

/// The communicator of a partitioned artifact and, for NCCL, the device it
/// runs on. Destroy the executable first: it uses both.
struct RankConnection {
  std::unique_ptr<CudaDevice> device;
  std::unique_ptr<Communicator> comm;
  /// The device the executable runs on.
  int deviceOrdinal = 0;
};

/// Joins the ranks `spec` is partitioned over (nothing for one rank). Errors
/// name the option at fault (rank out of range, no store, no host
/// communicator) and, for NCCL, the rank.
StatusOr<RankConnection> connectRanks(const ArtifactSpec &spec,
                                      const RankOptions &options);

} // namespace kimi::rt

#endif // KIMI_RUNTIME_COMM_RANK_CONNECTION_H

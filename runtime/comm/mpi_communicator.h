//===- mpi_communicator.h - Communicator over MPI ---------------*- C++ -*-===//
//
// The CPU-rank backend: a duplicate of MPI_COMM_WORLD with the
// MPI_ERRORS_RETURN error handler, so every failing MPI call becomes a
// Status "<collective>: <MPI call>: <MPI_Error_string>". Uses the MPI C
// bindings only. Built as the static library kimi_comm_mpi, only where CMake
// finds MPI; the runtime library itself never needs MPI.
//
// This header does not include <mpi.h>.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_COMM_MPI_COMMUNICATOR_H
#define KIMI_RUNTIME_COMM_MPI_COMMUNICATOR_H

#include "runtime/comm/communicator.h"

#include <memory>

namespace kimi::rt {

class MpiCommunicator final : public Communicator {
public:
  /// MPI_Init_thread (MPI_THREAD_SERIALIZED requested) unless MPI is already
  /// initialised, then MPI_Comm_dup(MPI_COMM_WORLD) with MPI_ERRORS_RETURN.
  static StatusOr<std::unique_ptr<MpiCommunicator>> create();
  /// MPI_Finalize when MPI is initialised and not finalised yet. Destroy
  /// every MpiCommunicator first.
  static Status finalize();

  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator &) = delete;
  MpiCommunicator &operator=(const MpiCommunicator &) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "mpi"; }

protected:
  Status doAllReduce(ConstCommBuffer send, CommBuffer recv,
                     ReduceOp op) override;
  Status doAllGather(ConstCommBuffer send, CommBuffer recv) override;
  Status doReduceScatter(ConstCommBuffer send, CommBuffer recv,
                         ReduceOp op) override;
  Status doAllToAll(ConstCommBuffer send, CommBuffer recv) override;
  Status doAllToAllV(ConstCommBuffer send,
                     const std::vector<int64_t> &sendCounts,
                     const std::vector<int64_t> &sendDispls, CommBuffer recv,
                     const std::vector<int64_t> &recvCounts,
                     const std::vector<int64_t> &recvDispls) override;
  Status doBroadcast(CommBuffer buffer, int root) override;
  Status doSend(ConstCommBuffer buffer, int peer, int tag) override;
  Status doRecv(CommBuffer buffer, int peer, int tag) override;
  Status doBarrier() override;
  /// MPI_Comm_split; the new communicator also returns errors as Status.
  StatusOr<std::unique_ptr<Communicator>> doSplit(int color,
                                                  int key) override;

private:
  struct Impl;
  explicit MpiCommunicator(std::unique_ptr<Impl> impl, int rank, int size);
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_COMM_MPI_COMMUNICATOR_H

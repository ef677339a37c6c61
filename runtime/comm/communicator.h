//===- communicator.h - Collectives over ranks ------------------*- C++ -*-===//
//
// The runtime's communicator: the operations a partitioned artifact's comm
// steps lower to (DESIGN.md "Partitioning over a supernode"), on host buffers
// of f32, i32 or i64. Backends: `LocalCommunicator` (one rank, every
// collective is a copy; here, no dependencies) and `MpiCommunicator`
// (mpi_communicator.h, library kimi_comm_mpi, only built where MPI is found).
// NCCL for GPU ranks comes later behind the same interface.
//
// The public methods are non-virtual: they check the arguments (element types
// agree, buffer sizes against size() and the counts, peers and roots in
// range) and return an invalid-argument Status naming the collective and the
// sizes at fault, before a backend sees the call. The checks depend only on
// arguments every rank passes alike, so a bad call fails on all ranks instead
// of hanging. Backend failures come back as Status values too.
//
// Collectives are blocking and must be called by every rank in the same
// order. Send and receive buffers may be the same memory for allReduce (in
// place); elsewhere they must not overlap.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_COMM_COMMUNICATOR_H
#define KIMI_RUNTIME_COMM_COMMUNICATOR_H

#include "runtime/support/status.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace kimi::rt {

/// Element types the collectives move.
enum class CommDType : uint8_t { kF32 = 0, kI32 = 1, kI64 = 2 };
const char *commDTypeName(CommDType dtype);
size_t commDTypeSize(CommDType dtype);

template <typename T> struct CommDTypeOf;
template <> struct CommDTypeOf<float> {
  static constexpr CommDType value = CommDType::kF32;
};
template <> struct CommDTypeOf<int32_t> {
  static constexpr CommDType value = CommDType::kI32;
};
template <> struct CommDTypeOf<int64_t> {
  static constexpr CommDType value = CommDType::kI64;
};

/// Reductions of allReduce and reduceScatter.
enum class ReduceOp : uint8_t { kSum = 0, kMax = 1 };
const char *reduceOpName(ReduceOp op);

/// A writable host buffer: `count` elements of `dtype`.
struct CommBuffer {
  void *data = nullptr;
  size_t count = 0;
  CommDType dtype = CommDType::kF32;
};
/// A read-only host buffer; any CommBuffer converts to one.
struct ConstCommBuffer {
  ConstCommBuffer() = default;
  ConstCommBuffer(const void *data, size_t count, CommDType dtype)
      : data(data), count(count), dtype(dtype) {}
  ConstCommBuffer(CommBuffer b)
      : data(b.data), count(b.count), dtype(b.dtype) {}
  const void *data = nullptr;
  size_t count = 0;
  CommDType dtype = CommDType::kF32;
};

template <typename T> ConstCommBuffer commBuffer(const T *data, size_t count) {
  return {data, count, CommDTypeOf<T>::value};
}
template <typename T> CommBuffer commBuffer(T *data, size_t count) {
  return {data, count, CommDTypeOf<T>::value};
}
template <typename T> ConstCommBuffer commBuffer(const std::vector<T> &v) {
  return {v.data(), v.size(), CommDTypeOf<T>::value};
}
template <typename T> CommBuffer commBuffer(std::vector<T> &v) {
  return {v.data(), v.size(), CommDTypeOf<T>::value};
}

class Communicator {
public:
  Communicator();
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "local", "mpi", ...
  virtual const char *backendName() const = 0;

  /// recv[i] = op over ranks of send[i]; send.count == recv.count. `send`
  /// and `recv` may be the same buffer.
  Status allReduce(ConstCommBuffer send, CommBuffer recv,
                   ReduceOp op = ReduceOp::kSum);
  /// recv = concat over ranks r of send(r); recv.count == size() * send.count.
  Status allGather(ConstCommBuffer send, CommBuffer recv);
  /// recv = block rank() of (op over ranks of send);
  /// send.count == size() * recv.count.
  Status reduceScatter(ConstCommBuffer send, CommBuffer recv,
                       ReduceOp op = ReduceOp::kSum);
  /// Equal blocks: send.count == recv.count == size() * block; block p of
  /// send goes to rank p, block q of recv came from rank q.
  Status allToAll(ConstCommBuffer send, CommBuffer recv);
  /// Per-peer counts (MoE dispatch/combine): send holds sendCounts[p]
  /// elements for rank p, packed in rank order; recv receives recvCounts[q]
  /// from rank q, packed in rank order. Both count vectors have size()
  /// entries (>= 0), their sums fit the buffers, and sendCounts[p] on this
  /// rank equals recvCounts[rank()] on rank p (the caller's contract,
  /// usually met by an allToAll of the counts first).
  Status allToAllV(ConstCommBuffer send, const std::vector<int64_t> &sendCounts,
                   CommBuffer recv, const std::vector<int64_t> &recvCounts);
  /// buffer on every rank = buffer on `root`.
  Status broadcast(CommBuffer buffer, int root);
  /// Blocking point to point. recv expects exactly buffer.count elements
  /// from `peer` with `tag` (>= 0); anything else is an error.
  Status send(ConstCommBuffer buffer, int peer, int tag = 0);
  Status recv(CommBuffer buffer, int peer, int tag = 0);
  Status barrier();
  /// Collective over this communicator: ranks passing the same `color`
  /// (>= 0) form one new communicator, ordered by `key` (ties by rank()).
  /// Used for the groups of a 2-D grid (the ranks sharing every other grid
  /// coordinate). Backends without sub-communicators (NCCL so far) fail
  /// with kFailedPrecondition.
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key);

  /// Dead or stopped ranks: a collective, send or receive that has not
  /// completed after `seconds` (> 0; 0, the default: wait forever) ends the
  /// process. A watchdog thread prints "rank R: OP has not completed after
  /// S s ..." on stderr and exits with status 1, without another MPI call
  /// (mpirun then ends the other ranks); otherwise a rank that died
  /// without mpirun noticing, or stopped, leaves the others blocked
  /// forever. Sub-communicators from split() inherit it.
  /// `label` is the rank the message names (default rank(); a split()
  /// sub-communicator gets its parent's, the rank mpirun knows).
  void setTimeout(double seconds, int label = -1);
  double timeout() const { return timeoutSeconds_; }

  /// Typed conveniences over std::vector.
  template <typename T>
  Status allReduce(const std::vector<T> &send, std::vector<T> &recv,
                   ReduceOp op = ReduceOp::kSum) {
    return allReduce(commBuffer(send), commBuffer(recv), op);
  }
  template <typename T>
  Status allReduceInPlace(std::vector<T> &buffer,
                          ReduceOp op = ReduceOp::kSum) {
    return allReduce(commBuffer(static_cast<const std::vector<T> &>(buffer)),
                     commBuffer(buffer), op);
  }
  template <typename T>
  Status allGather(const std::vector<T> &send, std::vector<T> &recv) {
    return allGather(commBuffer(send), commBuffer(recv));
  }
  template <typename T>
  Status reduceScatter(const std::vector<T> &send, std::vector<T> &recv,
                       ReduceOp op = ReduceOp::kSum) {
    return reduceScatter(commBuffer(send), commBuffer(recv), op);
  }
  template <typename T>
  Status allToAll(const std::vector<T> &send, std::vector<T> &recv) {
    return allToAll(commBuffer(send), commBuffer(recv));
  }
  template <typename T>
  Status allToAllV(const std::vector<T> &send,
                   const std::vector<int64_t> &sendCounts, std::vector<T> &recv,
                   const std::vector<int64_t> &recvCounts) {
    return allToAllV(commBuffer(send), sendCounts, commBuffer(recv),
                     recvCounts);
  }
  template <typename T> Status broadcast(std::vector<T> &buffer, int root) {
    return broadcast(commBuffer(buffer), root);
  }
  template <typename T>
  Status send(const std::vector<T> &buffer, int peer, int tag = 0) {
    return send(commBuffer(buffer), peer, tag);
  }
  template <typename T>
  Status recv(std::vector<T> &buffer, int peer, int tag = 0) {
    return recv(commBuffer(buffer), peer, tag);
  }

protected:
  // Called with checked arguments. Displacements of allToAllV are the
  // exclusive prefix sums of the counts.
  virtual Status doAllReduce(ConstCommBuffer send, CommBuffer recv,
                             ReduceOp op) = 0;
  virtual Status doAllGather(ConstCommBuffer send, CommBuffer recv) = 0;
  virtual Status doReduceScatter(ConstCommBuffer send, CommBuffer recv,
                                 ReduceOp op) = 0;
  virtual Status doAllToAll(ConstCommBuffer send, CommBuffer recv) = 0;
  virtual Status doAllToAllV(ConstCommBuffer send,
                             const std::vector<int64_t> &sendCounts,
                             const std::vector<int64_t> &sendDispls,
                             CommBuffer recv,
                             const std::vector<int64_t> &recvCounts,
                             const std::vector<int64_t> &recvDispls) = 0;
  virtual Status doBroadcast(CommBuffer buffer, int root) = 0;
  virtual Status doSend(ConstCommBuffer buffer, int peer, int tag) = 0;
  virtual Status doRecv(CommBuffer buffer, int peer, int tag) = 0;
  virtual Status doBarrier() = 0;
  virtual StatusOr<std::unique_ptr<Communicator>> doSplit(int color, int key);

private:
  class Watchdog;
  /// Marks one operation as waiting for the watchdog (no-op without one).
  class Watch {
  public:
    Watch(Watchdog *dog, const char *op);
    ~Watch();

  private:
    Watchdog *dog_;
  };
  double timeoutSeconds_ = 0;
  int timeoutLabel_ = -1;
  std::unique_ptr<Watchdog> watchdog_;
};

/// One rank: every collective copies send to recv (a reduction over one
/// rank is the identity). send to rank 0 queues a copy that a later recv
/// with the same tag takes, so single-rank code paths need no MPI.
class LocalCommunicator final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char *backendName() const override { return "local"; }
  /// Messages sent and not received yet.
  size_t pendingMessages() const { return pending_.size(); }

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
  Status doBarrier() override { return Status::ok(); }
  StatusOr<std::unique_ptr<Communicator>> doSplit(int color,
                                                  int key) override;

private:
  struct Message {
    int tag;
    CommDType dtype;
    size_t count;
    std::vector<unsigned char> bytes;
  };
  std::deque<Message> pending_;
};

} // namespace kimi::rt

#endif // KIMI_RUNTIME_COMM_COMMUNICATOR_H

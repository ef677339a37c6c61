#include "runtime/comm/mpi_communicator.h"

// C bindings only.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>

namespace kimi::rt {

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
};

namespace {

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len)) + " (MPI error " +
         std::to_string(code) + ")";
}

Status check(int code, const char *what, const char *call) {
  if (code == MPI_SUCCESS)
    return Status::ok();
  return executionError(std::string(what) + ": " + call + ": " +
                        mpiErrorText(code));
}

MPI_Datatype mpiType(CommDType d) {
  switch (d) {
  case CommDType::kF32:
    return MPI_FLOAT;
  case CommDType::kI32:
    return MPI_INT32_T;
  case CommDType::kI64:
    return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpiOp(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }

// MPI counts are int.
Status toInt(const char *what, const char *name, int64_t v, int &out) {
  if (v < 0 || v > INT_MAX)
    return invalidArgument(std::string(what) + ": " + name + " = " +
                           std::to_string(v) +
                           " does not fit an MPI count (int)");
  out = static_cast<int>(v);
  return Status::ok();
}

Status toInts(const char *what, const char *name, const std::vector<int64_t> &v,
              std::vector<int> &out) {
  out.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    KIMI_RETURN_IF_ERROR(toInt(what, name, v[i], out[i]));
  return Status::ok();
}

} // namespace

StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::create() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    return failedPrecondition("MpiCommunicator::create: MPI is finalised");
  if (!initialized) {
    int provided = 0;
    int rc =
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    KIMI_RETURN_IF_ERROR(
        check(rc, "MpiCommunicator::create", "MPI_Init_thread"));
  }
  auto impl = std::make_unique<Impl>();
  KIMI_RETURN_IF_ERROR(check(MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm),
                             "MpiCommunicator::create", "MPI_Comm_dup"));
  KIMI_RETURN_IF_ERROR(
      check(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN),
            "MpiCommunicator::create", "MPI_Comm_set_errhandler"));
  int rank = 0, size = 1;
  KIMI_RETURN_IF_ERROR(check(MPI_Comm_rank(impl->comm, &rank),
                             "MpiCommunicator::create", "MPI_Comm_rank"));
  KIMI_RETURN_IF_ERROR(check(MPI_Comm_size(impl->comm, &size),
                             "MpiCommunicator::create", "MPI_Comm_size"));
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(std::move(impl), rank, size));
}

Status MpiCommunicator::finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return Status::ok();
  return check(MPI_Finalize(), "MpiCommunicator::finalize", "MPI_Finalize");
}

StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::doSplit(int color,
                                                                 int key) {
  auto impl = std::make_unique<Impl>();
  KIMI_RETURN_IF_ERROR(check(MPI_Comm_split(impl_->comm, color, key, &impl->comm),
                             "split", "MPI_Comm_split"));
  KIMI_RETURN_IF_ERROR(check(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN),
                             "split", "MPI_Comm_set_errhandler"));
  int rank = 0, size = 1;
  KIMI_RETURN_IF_ERROR(
      check(MPI_Comm_rank(impl->comm, &rank), "split", "MPI_Comm_rank"));
  KIMI_RETURN_IF_ERROR(
      check(MPI_Comm_size(impl->comm, &size), "split", "MPI_Comm_size"));
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(std::move(impl), rank, size));
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl, int rank, int size)
    : impl_(std::move(impl)), rank_(rank), size_(size) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && impl_ && impl_->comm != MPI_COMM_NULL)
    MPI_Comm_free(&impl_->comm);
}

Status MpiCommunicator::doAllReduce(ConstCommBuffer send, CommBuffer recv,
                                    ReduceOp op) {
  int count = 0;
  KIMI_RETURN_IF_ERROR(
      toInt("allReduce", "count", static_cast<int64_t>(send.count), count));
  const void *src = send.data == recv.data ? MPI_IN_PLACE : send.data;
  return check(MPI_Allreduce(src, recv.data, count, mpiType(send.dtype),
                             mpiOp(op), impl_->comm),
               "allReduce", "MPI_Allreduce");
}

Status MpiCommunicator::doAllGather(ConstCommBuffer send, CommBuffer recv) {
  int count = 0;
  KIMI_RETURN_IF_ERROR(toInt("allGather", "send count",
                             static_cast<int64_t>(send.count), count));
  return check(MPI_Allgather(send.data, count, mpiType(send.dtype), recv.data,
                             count, mpiType(recv.dtype), impl_->comm),
               "allGather", "MPI_Allgather");
}

Status MpiCommunicator::doReduceScatter(ConstCommBuffer send, CommBuffer recv,
                                        ReduceOp op) {
  int count = 0;
  KIMI_RETURN_IF_ERROR(toInt("reduceScatter", "recv count",
                             static_cast<int64_t>(recv.count), count));
  return check(MPI_Reduce_scatter_block(send.data, recv.data, count,
                                        mpiType(send.dtype), mpiOp(op),
                                        impl_->comm),
               "reduceScatter", "MPI_Reduce_scatter_block");
}

Status MpiCommunicator::doAllToAll(ConstCommBuffer send, CommBuffer recv) {
  int block = 0;
  KIMI_RETURN_IF_ERROR(toInt(
      "allToAll", "block",
      static_cast<int64_t>(send.count / static_cast<size_t>(size_)), block));
  return check(MPI_Alltoall(send.data, block, mpiType(send.dtype), recv.data,
                            block, mpiType(recv.dtype), impl_->comm),
               "allToAll", "MPI_Alltoall");
}

Status MpiCommunicator::doAllToAllV(ConstCommBuffer send,
                                    const std::vector<int64_t> &sendCounts,
                                    const std::vector<int64_t> &sendDispls,
                                    CommBuffer recv,
                                    const std::vector<int64_t> &recvCounts,
                                    const std::vector<int64_t> &recvDispls) {
  std::vector<int> sc, sd, rc, rd;
  KIMI_RETURN_IF_ERROR(toInts("allToAllV", "sendCounts", sendCounts, sc));
  KIMI_RETURN_IF_ERROR(
      toInts("allToAllV", "send displacement", sendDispls, sd));
  KIMI_RETURN_IF_ERROR(toInts("allToAllV", "recvCounts", recvCounts, rc));
  KIMI_RETURN_IF_ERROR(
      toInts("allToAllV", "recv displacement", recvDispls, rd));
  return check(MPI_Alltoallv(send.data, sc.data(), sd.data(),
                             mpiType(send.dtype), recv.data, rc.data(),
                             rd.data(), mpiType(recv.dtype), impl_->comm),
               "allToAllV", "MPI_Alltoallv");
}

Status MpiCommunicator::doBroadcast(CommBuffer buffer, int root) {
  int count = 0;
  KIMI_RETURN_IF_ERROR(
      toInt("broadcast", "count", static_cast<int64_t>(buffer.count), count));
  return check(
      MPI_Bcast(buffer.data, count, mpiType(buffer.dtype), root, impl_->comm),
      "broadcast", "MPI_Bcast");
}

Status MpiCommunicator::doSend(ConstCommBuffer buffer, int peer, int tag) {
  int count = 0;
  KIMI_RETURN_IF_ERROR(
      toInt("send", "count", static_cast<int64_t>(buffer.count), count));
  return check(MPI_Send(buffer.data, count, mpiType(buffer.dtype), peer, tag,
                        impl_->comm),
               "send", "MPI_Send");
}

Status MpiCommunicator::doRecv(CommBuffer buffer, int peer, int tag) {
  int count = 0;
  KIMI_RETURN_IF_ERROR(
      toInt("recv", "count", static_cast<int64_t>(buffer.count), count));
  MPI_Status st;
  KIMI_RETURN_IF_ERROR(check(MPI_Recv(buffer.data, count, mpiType(buffer.dtype),
                                      peer, tag, impl_->comm, &st),
                             "recv", "MPI_Recv"));
  int got = 0;
  KIMI_RETURN_IF_ERROR(check(MPI_Get_count(&st, mpiType(buffer.dtype), &got),
                             "recv", "MPI_Get_count"));
  if (got != count)
    return executionError("recv: from rank " + std::to_string(peer) +
                          " with tag " + std::to_string(tag) + ": got " +
                          std::to_string(got) + " " +
                          commDTypeName(buffer.dtype) + " elements, expected " +
                          std::to_string(count));
  return Status::ok();
}

Status MpiCommunicator::doBarrier() {
  return check(MPI_Barrier(impl_->comm), "barrier", "MPI_Barrier");
}

} // namespace kimi::rt

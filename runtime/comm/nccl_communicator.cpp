//===- nccl_communicator.cpp - Communicator over NCCL (GPUs) --------------===//

#include "runtime/comm/nccl_communicator.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include <dlfcn.h>

namespace kimi::rt {

namespace {
constexpr size_t kUniqueIdBytes = 128; // NCCL_UNIQUE_ID_BYTES
struct UniqueId {
  char internal[kUniqueIdBytes];
};
using Comm = void *;
using Stream = cuda::CUstream;
// ncclDataType_t / ncclRedOp_t values of nccl.h.
constexpr int kNcclInt32 = 2, kNcclInt64 = 4, kNcclFloat32 = 7;
constexpr int kNcclSum = 0, kNcclMax = 2;

int ncclType(CommDType t) {
  switch (t) {
  case CommDType::kF32: return kNcclFloat32;
  case CommDType::kI32: return kNcclInt32;
  case CommDType::kI64: return kNcclInt64;
  }
  return kNcclFloat32;
}
size_t elemBytes(CommDType t) { return t == CommDType::kI64 ? 8 : 4; }
} // namespace

/// libnccl's entry points, resolved once.
struct NcclCommunicator::Api {
  void *handle = nullptr;
  int (*getUniqueId)(UniqueId *) = nullptr;
  int (*commInitRank)(Comm *, int, UniqueId, int) = nullptr;
  int (*commDestroy)(Comm) = nullptr;
  const char *(*getErrorString)(int) = nullptr;
  int (*getVersion)(int *) = nullptr;
  int (*allReduce)(const void *, void *, size_t, int, int, Comm, Stream) = nullptr;
  int (*allGather)(const void *, void *, size_t, int, Comm, Stream) = nullptr;
  int (*reduceScatter)(const void *, void *, size_t, int, int, Comm, Stream) = nullptr;
  int (*broadcast)(const void *, void *, size_t, int, int, Comm, Stream) = nullptr;
  int (*send)(const void *, size_t, int, int, Comm, Stream) = nullptr;
  int (*recv)(void *, size_t, int, int, Comm, Stream) = nullptr;
  int (*groupStart)() = nullptr;
  int (*groupEnd)() = nullptr;
  // Optional (NCCL 2.18+): sub-communicators for grids of several axes.
  int (*commSplit)(Comm, int, int, Comm *, void *) = nullptr;
  int (*commCount)(Comm, int *) = nullptr;
  int (*commUserRank)(Comm, int *) = nullptr;

  static StatusOr<std::shared_ptr<const Api>> load() {
    auto api = std::make_shared<Api>();
    const char *lib = std::getenv("KIMI_NCCL_LIBRARY");
    api->handle = ::dlopen(lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!api->handle) {
      const char *e = ::dlerror();
      return Status(StatusCode::kModule,
                    std::string("cannot load NCCL (libnccl.so.2): ") + (e ? e : "?"));
    }
    bool ok = true;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->handle, name));
      ok = ok && fn;
      return fn != nullptr;
    };
    std::string missing;
    for (auto [found, name] :
         {std::pair{sym(api->getUniqueId, "ncclGetUniqueId"), "ncclGetUniqueId"},
          {sym(api->commInitRank, "ncclCommInitRank"), "ncclCommInitRank"},
          {sym(api->commDestroy, "ncclCommDestroy"), "ncclCommDestroy"},
          {sym(api->getErrorString, "ncclGetErrorString"), "ncclGetErrorString"},
          {sym(api->getVersion, "ncclGetVersion"), "ncclGetVersion"},
          {sym(api->allReduce, "ncclAllReduce"), "ncclAllReduce"},
          {sym(api->allGather, "ncclAllGather"), "ncclAllGather"},
          {sym(api->reduceScatter, "ncclReduceScatter"), "ncclReduceScatter"},
          {sym(api->broadcast, "ncclBroadcast"), "ncclBroadcast"},
          {sym(api->send, "ncclSend"), "ncclSend"},
          {sym(api->recv, "ncclRecv"), "ncclRecv"},
          {sym(api->groupStart, "ncclGroupStart"), "ncclGroupStart"},
          {sym(api->groupEnd, "ncclGroupEnd"), "ncclGroupEnd"}})
      if (!found)
        missing += std::string(missing.empty() ? "" : ", ") + name;
    if (!ok)
      return Status(StatusCode::kModule, "libnccl.so.2 lacks " + missing);
    sym(api->commSplit, "ncclCommSplit");
    sym(api->commCount, "ncclCommCount");
    sym(api->commUserRank, "ncclCommUserRank");
    return std::shared_ptr<const Api>(api);
  }
};

Status NcclCommunicator::check(int result, const char *call) const {
  if (result == 0)
    return Status::ok();
  return Status(StatusCode::kExecution, std::string(call) + ": " +
                                            api_->getErrorString(result) +
                                            " (NCCL error " + std::to_string(result) + ")");
}

Status NcclCommunicator::finish(const char *what) {
  Status s = stream_->synchronize();
  if (!s.isOk())
    return Status(s.code(), std::string(what) + ": " + s.message());
  return Status::ok();
}

StatusOr<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(const CudaDevice &device, int rank, int size,
                         const std::string &storePath, double timeoutSeconds) {
  if (size < 1 || rank < 0 || rank >= size)
    return Status(StatusCode::kInvalidArgument,
                  "nccl: rank " + std::to_string(rank) + " of " + std::to_string(size));
  auto api = Api::load();
  if (!api.isOk())
    return api.status();
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->api_ = *api;
  c->device_ = &device;
  c->rank_ = rank;
  c->size_ = size;
  KIMI_RETURN_IF_ERROR(device.makeCurrent());
  auto stream = CudaStream::create(device);
  if (!stream.isOk())
    return stream.status();
  c->stream_ = std::move(*stream);
  auto scratch = DeviceBuffer::allocate(device, 4);
  if (!scratch.isOk())
    return scratch.status();
  c->barrierScratch_ = std::move(*scratch);

  // The file store: rank 0 publishes the id atomically (write, rename).
  UniqueId id;
  if (rank == 0) {
    KIMI_RETURN_IF_ERROR(c->check(c->api_->getUniqueId(&id), "ncclGetUniqueId"));
    std::string tmp = storePath + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.internal, kUniqueIdBytes);
      if (!out)
        return Status(StatusCode::kIo, "nccl: cannot write the store " + tmp);
    }
    if (std::rename(tmp.c_str(), storePath.c_str()) != 0)
      return Status(StatusCode::kIo, "nccl: cannot publish the store " + storePath);
  } else {
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration<double>(timeoutSeconds);
    for (;;) {
      std::ifstream in(storePath, std::ios::binary);
      if (in.read(id.internal, kUniqueIdBytes) && in.gcount() == kUniqueIdBytes)
        break;
      if (std::chrono::steady_clock::now() > deadline)
        return Status(StatusCode::kIo, "nccl: rank " + std::to_string(rank) +
                                           " found no id in " + storePath +
                                           " within the timeout");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  KIMI_RETURN_IF_ERROR(c->check(c->api_->commInitRank(&c->comm_, size, id, rank),
                                "ncclCommInitRank"));
  return c;
}

StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::doSplit(int color,
                                                                  int key) {
  if (!api_->commSplit || !api_->commCount || !api_->commUserRank)
    return failedPrecondition("split: this NCCL has no ncclCommSplit "
                              "(NCCL 2.18 or newer splits communicators)");
  KIMI_RETURN_IF_ERROR(device_->makeCurrent());
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->api_ = api_;
  c->device_ = device_;
  KIMI_ASSIGN_OR_RETURN(c->stream_, CudaStream::create(*device_));
  KIMI_ASSIGN_OR_RETURN(c->barrierScratch_, DeviceBuffer::allocate(*device_, 4));
  KIMI_RETURN_IF_ERROR(check(api_->commSplit(comm_, color, key, &c->comm_, nullptr),
                             "ncclCommSplit"));
  KIMI_RETURN_IF_ERROR(check(api_->commUserRank(c->comm_, &c->rank_),
                             "ncclCommUserRank"));
  KIMI_RETURN_IF_ERROR(check(api_->commCount(c->comm_, &c->size_), "ncclCommCount"));
  return std::unique_ptr<Communicator>(std::move(c));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_)
    (void)api_->commDestroy(comm_);
}

std::string NcclCommunicator::version() const {
  int v = 0;
  if (api_->getVersion(&v) != 0)
    return "NCCL ?";
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
         "." + std::to_string(v % 100);
}

Status NcclCommunicator::doAllReduce(ConstCommBuffer send, CommBuffer recv, ReduceOp op) {
  KIMI_RETURN_IF_ERROR(check(api_->allReduce(send.data, recv.data, recv.count,
                                             ncclType(recv.dtype),
                                             op == ReduceOp::kSum ? kNcclSum : kNcclMax,
                                             comm_, stream_->handle()),
                             "allReduce: ncclAllReduce"));
  return finish("allReduce");
}

Status NcclCommunicator::doAllGather(ConstCommBuffer send, CommBuffer recv) {
  KIMI_RETURN_IF_ERROR(check(api_->allGather(send.data, recv.data, send.count,
                                             ncclType(send.dtype), comm_,
                                             stream_->handle()),
                             "allGather: ncclAllGather"));
  return finish("allGather");
}

Status NcclCommunicator::doReduceScatter(ConstCommBuffer send, CommBuffer recv,
                                         ReduceOp op) {
  KIMI_RETURN_IF_ERROR(check(api_->reduceScatter(send.data, recv.data, recv.count,
                                                 ncclType(recv.dtype),
                                                 op == ReduceOp::kSum ? kNcclSum : kNcclMax,
                                                 comm_, stream_->handle()),
                             "reduceScatter: ncclReduceScatter"));
  return finish("reduceScatter");
}

Status NcclCommunicator::doAllToAll(ConstCommBuffer send, CommBuffer recv) {
  const size_t block = recv.count / static_cast<size_t>(size_);
  std::vector<int64_t> counts(size_, static_cast<int64_t>(block)), displs(size_);
  for (int p = 0; p < size_; ++p)
    displs[p] = static_cast<int64_t>(block) * p;
  return doAllToAllV(send, counts, displs, recv, counts, displs);
}

Status NcclCommunicator::doAllToAllV(ConstCommBuffer send,
                                     const std::vector<int64_t> &sendCounts,
                                     const std::vector<int64_t> &sendDispls,
                                     CommBuffer recv,
                                     const std::vector<int64_t> &recvCounts,
                                     const std::vector<int64_t> &recvDispls) {
  const int type = ncclType(send.dtype);
  const size_t eb = elemBytes(send.dtype);
  auto *sendBase = static_cast<const char *>(send.data);
  auto *recvBase = static_cast<char *>(recv.data);
  KIMI_RETURN_IF_ERROR(check(api_->groupStart(), "allToAllV: ncclGroupStart"));
  Status s = Status::ok();
  for (int p = 0; p < size_ && s.isOk(); ++p) {
    if (sendCounts[p] > 0)
      s = check(api_->send(sendBase + sendDispls[p] * eb, sendCounts[p], type, p, comm_,
                           stream_->handle()),
                "allToAllV: ncclSend");
    if (s.isOk() && recvCounts[p] > 0)
      s = check(api_->recv(recvBase + recvDispls[p] * eb, recvCounts[p], type, p, comm_,
                           stream_->handle()),
                "allToAllV: ncclRecv");
  }
  Status ended = check(api_->groupEnd(), "allToAllV: ncclGroupEnd");
  KIMI_RETURN_IF_ERROR(s);
  KIMI_RETURN_IF_ERROR(ended);
  return finish("allToAllV");
}

Status NcclCommunicator::doBroadcast(CommBuffer buffer, int root) {
  KIMI_RETURN_IF_ERROR(check(api_->broadcast(buffer.data, buffer.data, buffer.count,
                                             ncclType(buffer.dtype), root, comm_,
                                             stream_->handle()),
                             "broadcast: ncclBroadcast"));
  return finish("broadcast");
}

Status NcclCommunicator::doSend(ConstCommBuffer buffer, int peer, int) {
  KIMI_RETURN_IF_ERROR(check(api_->send(buffer.data, buffer.count, ncclType(buffer.dtype),
                                        peer, comm_, stream_->handle()),
                             "send: ncclSend"));
  return finish("send");
}

Status NcclCommunicator::doRecv(CommBuffer buffer, int peer, int) {
  KIMI_RETURN_IF_ERROR(check(api_->recv(buffer.data, buffer.count, ncclType(buffer.dtype),
                                        peer, comm_, stream_->handle()),
                             "recv: ncclRecv"));
  return finish("recv");
}

Status NcclCommunicator::doBarrier() {
  void *p = reinterpret_cast<void *>(barrierScratch_.address());
  KIMI_RETURN_IF_ERROR(check(api_->allReduce(p, p, 1, kNcclInt32, kNcclSum, comm_,
                                             stream_->handle()),
                             "barrier: ncclAllReduce"));
  return finish("barrier");
}

} // namespace kimi::rt

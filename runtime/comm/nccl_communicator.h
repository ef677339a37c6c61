//===- nccl_communicator.h - Communicator over NCCL (GPUs) ------*- C++ -*-===//
//
// The GPU backend of `Communicator`: NCCL, loaded at run time from
// libnccl.so.2 (like libcuda), so the runtime builds and runs without it.
// Buffers are **device memory** of the communicator's GPU (the pointers in
// CommBuffer are CUdeviceptr values); each call enqueues on the
// communicator's stream and waits for it, keeping the interface's blocking
// contract. Ranks meet through a file store: rank 0 writes NCCL's unique id
// to a path every rank was given, the others read it (NCCL_NVLS_ENABLE=0 is
// the caller's business on machines where NVLink multicast must stay off).
//
// NCCL has no message tags: send/recv with the same peer match in order and
// `tag` is ignored.
//
//===----------------------------------------------------------------------===//

#ifndef KIMI_RUNTIME_COMM_NCCL_COMMUNICATOR_H
#define KIMI_RUNTIME_COMM_NCCL_COMMUNICATOR_H

#include "runtime/comm/communicator.h"
#include "runtime/cuda/cuda_device.h"

#include <memory>
#include <string>

namespace kimi::rt {

class NcclCommunicator final : public Communicator {
public:
  /// Joins `size` ranks as `rank` on `device` (which must outlive the
  /// communicator). `storePath` is a file path every rank can see; rank 0
  /// creates it, the others wait for it up to `timeoutSeconds`.
  static StatusOr<std::unique_ptr<NcclCommunicator>>
  create(const CudaDevice &device, int rank, int size, const std::string &storePath,
         double timeoutSeconds = 120.0);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "nccl"; }
  /// "NCCL 2.28.9"
  std::string version() const;

protected:
  Status doAllReduce(ConstCommBuffer send, CommBuffer recv, ReduceOp op) override;
  Status doAllGather(ConstCommBuffer send, CommBuffer recv) override;
  Status doReduceScatter(ConstCommBuffer send, CommBuffer recv, ReduceOp op) override;
  Status doAllToAll(ConstCommBuffer send, CommBuffer recv) override;
  Status doAllToAllV(ConstCommBuffer send, const std::vector<int64_t> &sendCounts,
                     const std::vector<int64_t> &sendDispls, CommBuffer recv,
                     const std::vector<int64_t> &recvCounts,
                     const std::vector<int64_t> &recvDispls) override;
  Status doBroadcast(CommBuffer buffer, int root) override;
  Status doSend(ConstCommBuffer buffer, int peer, int tag) override;
  Status doRecv(CommBuffer buffer, int peer, int tag) override;
  Status doBarrier() override;
  /// ncclCommSplit (color >= 0; every rank of the parent calls it).
  StatusOr<std::unique_ptr<Communicator>> doSplit(int color, int key) override;

private:
  struct Api;
  NcclCommunicator() = default;
  Status check(int result, const char *call) const;
  Status finish(const char *what);
  std::shared_ptr<const Api> api_;
  const CudaDevice *device_ = nullptr;
  std::unique_ptr<CudaStream> stream_;
  void *comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  DeviceBuffer barrierScratch_;
};

} // namespace kimi::rt

#endif

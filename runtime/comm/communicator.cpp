#include "runtime/comm/communicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace kimi::rt {

const char *commDTypeName(CommDType dtype) {
  switch (dtype) {
  case CommDType::kF32:
    return "f32";
  case CommDType::kI32:
    return "i32";
  case CommDType::kI64:
    return "i64";
  }
  return "dtype(?)";
}

size_t commDTypeSize(CommDType dtype) {
  switch (dtype) {
  case CommDType::kF32:
  case CommDType::kI32:
    return 4;
  case CommDType::kI64:
    return 8;
  }
  return 0;
}

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::kSum:
    return "sum";
  case ReduceOp::kMax:
    return "max";
  }
  return "op(?)";
}

namespace {

std::string num(size_t v) { return std::to_string(v); }

Status checkDType(const char *what, CommDType d) {
  if (d != CommDType::kF32 && d != CommDType::kI32 && d != CommDType::kI64)
    return invalidArgument(std::string(what) + ": unknown element type " +
                           std::to_string(static_cast<int>(d)));
  return Status::ok();
}

Status checkPair(const char *what, ConstCommBuffer send, CommBuffer recv) {
  KIMI_RETURN_IF_ERROR(checkDType(what, send.dtype));
  KIMI_RETURN_IF_ERROR(checkDType(what, recv.dtype));
  if (send.dtype != recv.dtype)
    return invalidArgument(std::string(what) + ": send buffer is " +
                           commDTypeName(send.dtype) + " but recv buffer is " +
                           commDTypeName(recv.dtype));
  if ((send.count && !send.data) || (recv.count && !recv.data))
    return invalidArgument(std::string(what) + ": null buffer with " +
                           num(send.data ? recv.count : send.count) +
                           " elements");
  return Status::ok();
}

Status checkOp(const char *what, ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kMax)
    return invalidArgument(std::string(what) + ": unknown reduction " +
                           std::to_string(static_cast<int>(op)));
  return Status::ok();
}

Status checkPeer(const char *what, const char *role, int peer, int size) {
  if (peer < 0 || peer >= size)
    return invalidArgument(std::string(what) + ": " + role + " " +
                           std::to_string(peer) + " out of range [0, " +
                           std::to_string(size) + ")");
  return Status::ok();
}

// Counts: size() non-negative entries; displacements are prefix sums, whose
// total must fit `capacity`.
Status countsToDispls(const char *what, const char *side,
                      const std::vector<int64_t> &counts, int size,
                      size_t capacity, std::vector<int64_t> &displs) {
  if (counts.size() != static_cast<size_t>(size))
    return invalidArgument(
        std::string(what) + ": " + side + " has " + num(counts.size()) +
        " entries, expected size() = " + std::to_string(size));
  displs.assign(counts.size(), 0);
  int64_t total = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] < 0)
      return invalidArgument(std::string(what) + ": " + side + "[" + num(p) +
                             "] = " + std::to_string(counts[p]) +
                             " is negative");
    displs[p] = total;
    total += counts[p];
    if (total < 0 || static_cast<uint64_t>(total) > capacity)
      return invalidArgument(std::string(what) + ": " + side + " sum to " +
                             std::to_string(total) + " (after entry " + num(p) +
                             ") but the buffer holds " + num(capacity) +
                             " elements");
  }
  return Status::ok();
}

void copyElems(void *dst, const void *src, size_t count, CommDType d) {
  if (count && dst != src)
    std::memmove(dst, src, count * commDTypeSize(d));
}

} // namespace

/// The thread behind setTimeout: every 100 ms it looks at the operation in
/// progress (its name and start, set by Watch) and ends the process when it
/// has waited longer than the timeout.
class Communicator::Watchdog {
public:
  Watchdog(const Communicator &comm, double seconds, int label)
      : comm_(comm), label_(label), limitNs_(static_cast<int64_t>(seconds * 1e9)),
        thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void begin(const char *op) {
    op_.store(op);
    startNs_.store(nowNs());
  }
  void end() { startNs_.store(0); }

private:
  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; })) {
      const int64_t start = startNs_.load();
      if (start == 0 || nowNs() - start <= limitNs_)
        continue;
      std::fprintf(stderr,
                   "kimi: error: rank %d: %s over %d ranks has not completed "
                   "after %.0f s (--comm-timeout): another rank has died or "
                   "stopped; ending this rank\n",
                   label_, op_.load(), comm_.size(), limitNs_ / 1e9);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  const Communicator &comm_;
  const int label_;
  const int64_t limitNs_;
  std::atomic<const char *> op_{""};
  std::atomic<int64_t> startNs_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_; // last: started once the members above exist
};

Communicator::Watch::Watch(Watchdog *dog, const char *op) : dog_(dog) {
  if (dog_)
    dog_->begin(op);
}
Communicator::Watch::~Watch() {
  if (dog_)
    dog_->end();
}

// Out of line: the constructor and destructor need Watchdog complete.
Communicator::Communicator() = default;
Communicator::~Communicator() = default;

void Communicator::setTimeout(double seconds, int label) {
  watchdog_.reset();
  timeoutSeconds_ = seconds > 0 ? seconds : 0;
  timeoutLabel_ = label >= 0 ? label : rank();
  if (timeoutSeconds_ > 0)
    watchdog_ = std::make_unique<Watchdog>(*this, timeoutSeconds_, timeoutLabel_);
}

Status Communicator::allReduce(ConstCommBuffer send, CommBuffer recv,
                               ReduceOp op) {
  KIMI_RETURN_IF_ERROR(checkPair("allReduce", send, recv));
  KIMI_RETURN_IF_ERROR(checkOp("allReduce", op));
  if (send.count != recv.count)
    return invalidArgument("allReduce: send buffer holds " + num(send.count) +
                           " elements but recv buffer holds " +
                           num(recv.count));
  Watch watch(watchdog_.get(), "allReduce");
  return doAllReduce(send, recv, op);
}

Status Communicator::allGather(ConstCommBuffer send, CommBuffer recv) {
  KIMI_RETURN_IF_ERROR(checkPair("allGather", send, recv));
  size_t n = static_cast<size_t>(size());
  if (recv.count != n * send.count)
    return invalidArgument(
        "allGather: recv buffer holds " + num(recv.count) +
        " elements, expected size() * send count = " + num(n) + " * " +
        num(send.count) + " = " + num(n * send.count));
  Watch watch(watchdog_.get(), "allGather");
  return doAllGather(send, recv);
}

Status Communicator::reduceScatter(ConstCommBuffer send, CommBuffer recv,
                                   ReduceOp op) {
  KIMI_RETURN_IF_ERROR(checkPair("reduceScatter", send, recv));
  KIMI_RETURN_IF_ERROR(checkOp("reduceScatter", op));
  size_t n = static_cast<size_t>(size());
  if (send.count != n * recv.count)
    return invalidArgument(
        "reduceScatter: send buffer holds " + num(send.count) +
        " elements, expected size() * recv count = " + num(n) + " * " +
        num(recv.count) + " = " + num(n * recv.count));
  Watch watch(watchdog_.get(), "reduceScatter");
  return doReduceScatter(send, recv, op);
}

Status Communicator::allToAll(ConstCommBuffer send, CommBuffer recv) {
  KIMI_RETURN_IF_ERROR(checkPair("allToAll", send, recv));
  size_t n = static_cast<size_t>(size());
  if (send.count != recv.count)
    return invalidArgument("allToAll: send buffer holds " + num(send.count) +
                           " elements but recv buffer holds " +
                           num(recv.count));
  if (send.count % n != 0)
    return invalidArgument("allToAll: " + num(send.count) +
                           " elements do not split into size() = " + num(n) +
                           " equal blocks");
  Watch watch(watchdog_.get(), "allToAll");
  return doAllToAll(send, recv);
}

Status Communicator::allToAllV(ConstCommBuffer send,
                               const std::vector<int64_t> &sendCounts,
                               CommBuffer recv,
                               const std::vector<int64_t> &recvCounts) {
  KIMI_RETURN_IF_ERROR(checkPair("allToAllV", send, recv));
  std::vector<int64_t> sendDispls, recvDispls;
  KIMI_RETURN_IF_ERROR(countsToDispls("allToAllV", "sendCounts", sendCounts,
                                      size(), send.count, sendDispls));
  KIMI_RETURN_IF_ERROR(countsToDispls("allToAllV", "recvCounts", recvCounts,
                                      size(), recv.count, recvDispls));
  Watch watch(watchdog_.get(), "allToAllV");
  return doAllToAllV(send, sendCounts, sendDispls, recv, recvCounts,
                     recvDispls);
}

Status Communicator::broadcast(CommBuffer buffer, int root) {
  KIMI_RETURN_IF_ERROR(checkDType("broadcast", buffer.dtype));
  if (buffer.count && !buffer.data)
    return invalidArgument("broadcast: null buffer with " + num(buffer.count) +
                           " elements");
  KIMI_RETURN_IF_ERROR(checkPeer("broadcast", "root", root, size()));
  Watch watch(watchdog_.get(), "broadcast");
  return doBroadcast(buffer, root);
}

Status Communicator::send(ConstCommBuffer buffer, int peer, int tag) {
  KIMI_RETURN_IF_ERROR(checkDType("send", buffer.dtype));
  if (buffer.count && !buffer.data)
    return invalidArgument("send: null buffer with " + num(buffer.count) +
                           " elements");
  KIMI_RETURN_IF_ERROR(checkPeer("send", "peer", peer, size()));
  if (tag < 0)
    return invalidArgument("send: tag " + std::to_string(tag) + " is negative");
  Watch watch(watchdog_.get(), "send");
  return doSend(buffer, peer, tag);
}

Status Communicator::recv(CommBuffer buffer, int peer, int tag) {
  KIMI_RETURN_IF_ERROR(checkDType("recv", buffer.dtype));
  if (buffer.count && !buffer.data)
    return invalidArgument("recv: null buffer with " + num(buffer.count) +
                           " elements");
  KIMI_RETURN_IF_ERROR(checkPeer("recv", "peer", peer, size()));
  if (tag < 0)
    return invalidArgument("recv: tag " + std::to_string(tag) + " is negative");
  Watch watch(watchdog_.get(), "recv");
  return doRecv(buffer, peer, tag);
}

Status Communicator::barrier() {
  Watch watch(watchdog_.get(), "barrier");
  return doBarrier();
}

StatusOr<std::unique_ptr<Communicator>> Communicator::split(int color,
                                                            int key) {
  if (color < 0)
    return invalidArgument("split: color " + std::to_string(color) +
                           " must be >= 0");
  StatusOr<std::unique_ptr<Communicator>> sub = [&] {
    Watch watch(watchdog_.get(), "split");
    return doSplit(color, key);
  }();
  if (sub.isOk() && timeoutSeconds_ > 0)
    sub.value()->setTimeout(timeoutSeconds_, timeoutLabel_);
  return sub;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::doSplit(int, int) {
  return failedPrecondition(std::string("split: the ") + backendName() +
                            " communicator has no sub-communicators");
}

//===----------------------------------------------------------------------===//
// LocalCommunicator
//===----------------------------------------------------------------------===//

Status LocalCommunicator::doAllReduce(ConstCommBuffer send, CommBuffer recv,
                                      ReduceOp) {
  copyElems(recv.data, send.data, send.count, send.dtype);
  return Status::ok();
}

Status LocalCommunicator::doAllGather(ConstCommBuffer send, CommBuffer recv) {
  copyElems(recv.data, send.data, send.count, send.dtype);
  return Status::ok();
}

Status LocalCommunicator::doReduceScatter(ConstCommBuffer send, CommBuffer recv,
                                          ReduceOp) {
  copyElems(recv.data, send.data, send.count, send.dtype);
  return Status::ok();
}

Status LocalCommunicator::doAllToAll(ConstCommBuffer send, CommBuffer recv) {
  copyElems(recv.data, send.data, send.count, send.dtype);
  return Status::ok();
}

Status LocalCommunicator::doAllToAllV(ConstCommBuffer send,
                                      const std::vector<int64_t> &sendCounts,
                                      const std::vector<int64_t> &,
                                      CommBuffer recv,
                                      const std::vector<int64_t> &recvCounts,
                                      const std::vector<int64_t> &) {
  if (sendCounts[0] != recvCounts[0])
    return invalidArgument(
        "allToAllV: sendCounts[0] = " + std::to_string(sendCounts[0]) +
        " but recvCounts[0] = " + std::to_string(recvCounts[0]) +
        " (one rank sends to itself)");
  copyElems(recv.data, send.data, static_cast<size_t>(sendCounts[0]),
            send.dtype);
  return Status::ok();
}

Status LocalCommunicator::doBroadcast(CommBuffer, int) { return Status::ok(); }

StatusOr<std::unique_ptr<Communicator>> LocalCommunicator::doSplit(int, int) {
  return std::unique_ptr<Communicator>(new LocalCommunicator());
}

Status LocalCommunicator::doSend(ConstCommBuffer buffer, int, int tag) {
  Message m{tag, buffer.dtype, buffer.count, {}};
  size_t bytes = buffer.count * commDTypeSize(buffer.dtype);
  m.bytes.resize(bytes);
  if (bytes)
    std::memcpy(m.bytes.data(), buffer.data, bytes);
  pending_.push_back(std::move(m));
  return Status::ok();
}

Status LocalCommunicator::doRecv(CommBuffer buffer, int, int tag) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->tag != tag)
      continue;
    if (it->dtype != buffer.dtype || it->count != buffer.count)
      return invalidArgument(
          "recv: message with tag " + std::to_string(tag) + " holds " +
          num(it->count) + " " + commDTypeName(it->dtype) +
          " elements but the buffer holds " + num(buffer.count) + " " +
          commDTypeName(buffer.dtype));
    if (!it->bytes.empty())
      std::memcpy(buffer.data, it->bytes.data(), it->bytes.size());
    pending_.erase(it);
    return Status::ok();
  }
  return failedPrecondition("recv: no message with tag " + std::to_string(tag) +
                            " was sent (a single rank would wait forever)");
}

} // namespace kimi::rt

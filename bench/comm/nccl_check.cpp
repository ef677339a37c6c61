//===- nccl_check.cpp - NCCL communicator: checks and bandwidth -----------===//
//
//   kimi-nccl-check --rank R --size N --store /tmp/id [--mib 256]
//
// One process per GPU (rank R uses device R % count). Every collective of
// the Communicator runs on device buffers filled from per-rank seeds, and
// each rank compares the result with what it computes on the host from all
// ranks' seeds (exact for integers, f32 sums of integer-valued floats are
// exact too). Then the all-to-all (MoE dispatch/combine) and all-reduce
// bandwidth over `--mib` MiB per rank, median of 20, as JSON. Exit code 0:
// all checks passed; 1: a check or call failed; 77: no GPU or no NCCL (the
// test is skipped).
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/nccl_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace kimi::rt;

namespace {

int failures = 0;
void expect(bool ok, const std::string &what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}
void expectOk(const Status &s, const std::string &what) {
  expect(s.isOk(), what + ": " + s.message());
}

/// Integer-valued floats so every f32 reduction is exact.
std::vector<float> values(int rank, size_t n, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 7 + rank * 131 + salt * 17) % 251) - 125);
  return v;
}

struct Dev {
  const CudaDevice &dev;
  DeviceBuffer put(const std::vector<float> &v) {
    auto b = DeviceBuffer::allocate(dev, v.size() * 4);
    if (!b.isOk()) {
      std::fprintf(stderr, "alloc: %s\n", b.status().message().c_str());
      std::exit(1);
    }
    expectOk(b->upload(v.data(), v.size() * 4), "upload");
    return std::move(*b);
  }
  std::vector<float> get(const DeviceBuffer &b, size_t n) {
    std::vector<float> v(n);
    expectOk(b.download(v.data(), n * 4), "download");
    return v;
  }
};

ConstCommBuffer cbuf(const DeviceBuffer &b, size_t n) {
  return {reinterpret_cast<const void *>(b.address()), n, CommDType::kF32};
}
CommBuffer mbuf(DeviceBuffer &b, size_t n) {
  return {reinterpret_cast<void *>(b.address()), n, CommDType::kF32};
}

} // namespace

int main(int argc, char **argv) {
  int rank = -1, size = -1;
  std::string store;
  size_t mib = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rank")
      rank = std::atoi(argv[i + 1]);
    else if (a == "--size")
      size = std::atoi(argv[i + 1]);
    else if (a == "--store")
      store = argv[i + 1];
    else if (a == "--mib")
      mib = static_cast<size_t>(std::atoi(argv[i + 1]));
  }
  if (rank < 0 || size < 1 || store.empty()) {
    std::fprintf(stderr, "usage: kimi-nccl-check --rank R --size N --store PATH [--mib M]\n");
    return 1;
  }
  auto count = CudaDevice::count();
  if (!count.isOk() || *count == 0) {
    std::printf("SKIP: %s\n", count.isOk() ? "no CUDA device" : count.status().message().c_str());
    return 77;
  }
  auto device = CudaDevice::open(rank % *count);
  if (!device.isOk()) {
    std::printf("SKIP: %s\n", device.status().message().c_str());
    return 77;
  }
  auto comm = NcclCommunicator::create(**device, rank, size, store);
  if (!comm.isOk()) {
    std::printf("%s: %s\n", comm.status().code() == StatusCode::kModule ? "SKIP" : "FAIL",
                comm.status().message().c_str());
    return comm.status().code() == StatusCode::kModule ? 77 : 1;
  }
  Communicator &c = **comm;
  Dev d{**device};
  const size_t n = 1000 * static_cast<size_t>(size); // divisible by size
  const size_t N = static_cast<size_t>(size);

  { // all-reduce, sum and max
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      auto mine = values(rank, n, 1);
      DeviceBuffer in = d.put(mine), out = d.put(std::vector<float>(n, -999));
      expectOk(c.allReduce(cbuf(in, n), mbuf(out, n), op), "allReduce");
      std::vector<float> want = values(0, n, 1);
      for (int r = 1; r < size; ++r) {
        auto v = values(r, n, 1);
        for (size_t i = 0; i < n; ++i)
          want[i] = op == ReduceOp::kSum ? want[i] + v[i] : std::max(want[i], v[i]);
      }
      expect(d.get(out, n) == want, op == ReduceOp::kSum ? "allReduce sum" : "allReduce max");
    }
  }
  { // all-gather
    auto mine = values(rank, n / N, 2);
    DeviceBuffer in = d.put(mine), out = d.put(std::vector<float>(n, -999));
    expectOk(c.allGather(cbuf(in, n / N), mbuf(out, n)), "allGather");
    std::vector<float> want;
    for (int r = 0; r < size; ++r) {
      auto v = values(r, n / N, 2);
      want.insert(want.end(), v.begin(), v.end());
    }
    expect(d.get(out, n) == want, "allGather");
  }
  { // reduce-scatter
    DeviceBuffer in = d.put(values(rank, n, 3)), out = d.put(std::vector<float>(n / N, -999));
    expectOk(c.reduceScatter(cbuf(in, n), mbuf(out, n / N)), "reduceScatter");
    std::vector<float> want(n / N, 0.0f);
    for (int r = 0; r < size; ++r) {
      auto v = values(r, n, 3);
      for (size_t i = 0; i < n / N; ++i)
        want[i] += v[rank * (n / N) + i];
    }
    expect(d.get(out, n / N) == want, "reduceScatter");
  }
  { // all-to-all: block p of rank r's send lands as block r of rank p's recv
    DeviceBuffer in = d.put(values(rank, n, 4)), out = d.put(std::vector<float>(n, -999));
    expectOk(c.allToAll(cbuf(in, n), mbuf(out, n)), "allToAll");
    std::vector<float> want;
    for (int r = 0; r < size; ++r) {
      auto v = values(r, n, 4);
      want.insert(want.end(), v.begin() + rank * (n / N), v.begin() + (rank + 1) * (n / N));
    }
    expect(d.get(out, n) == want, "allToAll");
  }
  { // all-to-all with counts: rank r sends (r + p + 1) elements to rank p
    std::vector<int64_t> sendCounts(size), recvCounts(size);
    size_t sendTotal = 0, recvTotal = 0;
    for (int p = 0; p < size; ++p) {
      sendCounts[p] = rank + p + 1;
      recvCounts[p] = p + rank + 1;
      sendTotal += sendCounts[p];
      recvTotal += recvCounts[p];
    }
    auto mine = values(rank, sendTotal, 5);
    DeviceBuffer in = d.put(mine), out = d.put(std::vector<float>(recvTotal, -999));
    expectOk(c.allToAllV(cbuf(in, sendTotal), sendCounts, mbuf(out, recvTotal), recvCounts),
             "allToAllV");
    std::vector<float> want;
    for (int q = 0; q < size; ++q) {
      size_t qTotal = 0, offset = 0;
      for (int p = 0; p < size; ++p) {
        if (p == rank)
          offset = qTotal;
        qTotal += q + p + 1;
      }
      auto v = values(q, qTotal, 5);
      want.insert(want.end(), v.begin() + offset, v.begin() + offset + q + rank + 1);
    }
    expect(d.get(out, recvTotal) == want, "allToAllV");
  }
  { // broadcast from the last rank, then send/recv around a ring
    int root = size - 1;
    DeviceBuffer b = d.put(values(rank, n, 6));
    expectOk(c.broadcast(mbuf(b, n), root), "broadcast");
    expect(d.get(b, n) == values(root, n, 6), "broadcast");
    if (size > 1) {
      DeviceBuffer s = d.put(values(rank, 64, 7)), r = d.put(std::vector<float>(64, -999));
      int next = (rank + 1) % size, prev = (rank + size - 1) % size;
      if (rank % 2 == 0) {
        expectOk(c.send(cbuf(s, 64), next), "send");
        expectOk(c.recv(mbuf(r, 64), prev), "recv");
      } else {
        expectOk(c.recv(mbuf(r, 64), prev), "recv");
        expectOk(c.send(cbuf(s, 64), next), "send");
      }
      expect(d.get(r, 64) == values(prev, 64, 7), "send/recv ring");
    }
    expectOk(c.barrier(), "barrier");
  }
  { // split: ranks of equal parity, keyed in reverse rank order; an
    // all-reduce and an all-gather inside each half
    StatusOr<std::unique_ptr<Communicator>> half = c.split(rank % 2, size - rank);
    expectOk(half.isOk() ? Status::ok() : half.status(), "split");
    if (half.isOk()) {
      Communicator &h = **half;
      std::vector<int> members; // the half's ranks in key order
      for (int r = size - 1; r >= 0; --r)
        if (r % 2 == rank % 2)
          members.push_back(r);
      expect(h.size() == int(members.size()), "split size");
      expect(members[h.rank()] == rank, "split rank (reverse key order)");
      const size_t m = 256;
      DeviceBuffer in = d.put(values(rank, m, 8)),
                   out = d.put(std::vector<float>(m * members.size(), -999));
      expectOk(h.allGather(cbuf(in, m), mbuf(out, m * members.size())),
               "split allGather");
      std::vector<float> want;
      for (int r : members) {
        auto v = values(r, m, 8);
        want.insert(want.end(), v.begin(), v.end());
      }
      expect(d.get(out, m * members.size()) == want, "split allGather");
    }
  }

  // Bandwidth: all-to-all and all-reduce over `mib` MiB per rank.
  const size_t big = (mib << 20) / 4 / N * N;
  auto bigIn = DeviceBuffer::allocate(**device, big * 4);
  auto bigOut = DeviceBuffer::allocate(**device, big * 4);
  if (!bigIn.isOk() || !bigOut.isOk())
    return 1;
  auto e0 = CudaEvent::create(**device), e1 = CudaEvent::create(**device);
  auto timeIt = [&](auto &&call) {
    std::vector<double> ms;
    for (int i = 0; i < 21; ++i) {
      expectOk(c.barrier(), "barrier");
      (void)(*e0)->record();
      expectOk(call(), "timed collective");
      (void)(*e1)->record();
      auto t = CudaEvent::elapsedMs(**e0, **e1);
      if (i > 0 && t.isOk())
        ms.push_back(*t);
    }
    std::sort(ms.begin(), ms.end());
    return ms.empty() ? 0.0 : ms[ms.size() / 2];
  };
  double a2a = timeIt([&] { return c.allToAll(cbuf(*bigIn, big), mbuf(*bigOut, big)); });
  double ar = timeIt([&] { return c.allReduce(cbuf(*bigIn, big), mbuf(*bigOut, big)); });
  const double bytes = double(big) * 4;
  // all-to-all: each rank sends (N-1)/N of its buffer off-GPU; all-reduce
  // bus bandwidth: 2 (N-1)/N of the buffer (NCCL's convention).
  const double frac = double(N - 1) / double(N);
  std::printf("{\"rank\": %d, \"size\": %d, \"nccl\": \"%s\", \"device\": \"%s\", "
              "\"mib\": %zu, \"all_to_all_ms\": %.4f, \"all_to_all_gbps\": %.1f, "
              "\"all_reduce_ms\": %.4f, \"all_reduce_bus_gbps\": %.1f, \"checks\": \"%s\"}\n",
              rank, size, (*comm)->version().c_str(), (*device)->describe().c_str(), mib, a2a,
              a2a > 0 ? bytes * frac / (a2a * 1e-3) / 1e9 : 0.0, ar,
              ar > 0 ? 2 * bytes * frac / (ar * 1e-3) / 1e9 : 0.0,
              failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}

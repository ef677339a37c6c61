//===- CommMpiTests.cpp - MpiCommunicator under mpirun -------------------===//
//
// Run as `mpirun -np N kimi-comm-mpi-tests [seed]`. Every collective on f32,
// i32 and i64 with sizes drawn from a seed that rank 0 picks (argument,
// KIMI_COMM_SEED, or the clock) and broadcasts, checked against values each
// rank computes on its own; then the error paths. Each rank prints its own
// failures to stderr ("rank r: ..."); the failure counts are summed over the
// ranks and rank 0 prints one line. Exit status 0 when every rank passed.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace kimi::rt;

namespace {

int gRank = 0;
int gFailures = 0;
int gChecks = 0;

void fail(const std::string &what) {
  ++gFailures;
  std::fprintf(stderr, "rank %d: FAIL %s\n", gRank, what.c_str());
}

void expectOk(const Status &s, const std::string &what) {
  ++gChecks;
  if (!s.isOk())
    fail(what + ": " + s.message());
}

// The call must fail and its message must name the collective and contain
// each of `needles` (e.g. the sizes at fault).
void expectError(const Status &s, const std::string &what,
                 const std::vector<std::string> &needles) {
  ++gChecks;
  if (s.isOk()) {
    fail(what + ": succeeded, expected an error");
    return;
  }
  for (const std::string &n : needles)
    if (s.message().find(n) == std::string::npos)
      fail(what + ": message \"" + s.message() + "\" lacks \"" + n + "\"");
}

template <typename T> const char *tname();
template <> const char *tname<float>() { return "f32"; }
template <> const char *tname<int32_t>() { return "i32"; }
template <> const char *tname<int64_t>() { return "i64"; }

// Values stay below 2^24 so f32 sums over 64 ranks are exact.
template <typename T> T v(int r, size_t i) {
  return static_cast<T>(r * 1000 + static_cast<int64_t>(i % 100000));
}
// A value that peaks on different ranks for different i (for max).
template <typename T> T vmax(int r, int n, size_t i) {
  return static_cast<T>(((r + static_cast<int64_t>(i) * 7) % n) * 100 -
                        static_cast<int64_t>(i % 50));
}
// Element i of the block rank `from` sends to rank `to`.
template <typename T> T v2(int from, int to, size_t i) {
  return static_cast<T>((from * 131 + to * 31 + static_cast<int64_t>(i) * 7) %
                        100000);
}

template <typename T>
void compare(const std::vector<T> &got, const std::vector<T> &want,
             const std::string &what) {
  ++gChecks;
  if (got.size() != want.size()) {
    fail(what + ": " + std::to_string(got.size()) + " elements, expected " +
         std::to_string(want.size()));
    return;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) {
      fail(what + ": element " + std::to_string(i) + " is " +
           std::to_string(got[i]) + ", expected " + std::to_string(want[i]));
      return;
    }
}

// allToAllV counts: what rank `from` sends to rank `to`, 0..max-1, the same
// function on every rank.
int64_t v_count(uint64_t seed, int from, int to, int64_t max) {
  uint64_t h = seed ^ (uint64_t(from) * 0x9E3779B97F4A7C15ull) ^
               (uint64_t(to) * 0xC2B2AE3D27D4EB4Full);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<int64_t>(h % uint64_t(max));
}

template <typename T>
void checkCollectives(Communicator &c, std::mt19937_64 &rng, uint64_t seed) {
  const int n = c.size(), r = c.rank();
  const std::string ty = tname<T>();
  // Sizes from the shared generator: identical on every rank.
  std::uniform_int_distribution<size_t> countDist(0, 3000);
  const size_t count = countDist(rng);
  const size_t block = countDist(rng) / 8;
  const int root = static_cast<int>(rng() % uint64_t(n));
  const std::string at = " (" + ty + ", count " + std::to_string(count) + ")";

  { // allReduce sum, out of place and in place.
    std::vector<T> send(count), recv(count), want(count);
    for (size_t i = 0; i < count; ++i) {
      send[i] = v<T>(r, i);
      T s = 0;
      for (int q = 0; q < n; ++q)
        s += v<T>(q, i);
      want[i] = s;
    }
    expectOk(c.allReduce(send, recv), "allReduce sum" + at);
    compare(recv, want, "allReduce sum" + at);
    expectOk(c.allReduceInPlace(send), "allReduce sum in place" + at);
    compare(send, want, "allReduce sum in place" + at);
  }
  { // allReduce max.
    std::vector<T> send(count), recv(count), want(count);
    for (size_t i = 0; i < count; ++i) {
      send[i] = vmax<T>(r, n, i);
      T m = vmax<T>(0, n, i);
      for (int q = 1; q < n; ++q)
        m = std::max(m, vmax<T>(q, n, i));
      want[i] = m;
    }
    expectOk(c.allReduce(send, recv, ReduceOp::kMax), "allReduce max" + at);
    compare(recv, want, "allReduce max" + at);
  }
  { // allGather.
    std::vector<T> send(count), recv(count * n), want(count * n);
    for (size_t i = 0; i < count; ++i)
      send[i] = v<T>(r, i);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i)
        want[q * count + i] = v<T>(q, i);
    expectOk(c.allGather(send, recv), "allGather" + at);
    compare(recv, want, "allGather" + at);
  }
  { // reduceScatter sum and max: block `block` per rank.
    std::vector<T> send(block * n), recv(block), want(block), wantMax(block);
    for (size_t j = 0; j < send.size(); ++j)
      send[j] = v<T>(r, j);
    for (size_t i = 0; i < block; ++i) {
      size_t j = size_t(r) * block + i;
      T s = 0;
      for (int q = 0; q < n; ++q)
        s += v<T>(q, j);
      want[i] = s;
      wantMax[i] = v<T>(n - 1, j);
    }
    std::string bt = " (" + ty + ", block " + std::to_string(block) + ")";
    expectOk(c.reduceScatter(send, recv), "reduceScatter sum" + bt);
    compare(recv, want, "reduceScatter sum" + bt);
    expectOk(c.reduceScatter(send, recv, ReduceOp::kMax),
             "reduceScatter max" + bt);
    compare(recv, wantMax, "reduceScatter max" + bt);
  }
  { // allToAll: block p of send goes to rank p.
    std::vector<T> send(block * n), recv(block * n), want(block * n);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < block; ++i) {
        send[p * block + i] = v2<T>(r, p, i);
        want[p * block + i] = v2<T>(p, r, i);
      }
    std::string bt = " (" + ty + ", block " + std::to_string(block) + ")";
    expectOk(c.allToAll(send, recv), "allToAll" + bt);
    compare(recv, want, "allToAll" + bt);
  }
  { // allToAllV: per-peer counts (zeros included), with spare room at the end.
    const int64_t maxCount = 1 + static_cast<int64_t>(rng() % 200);
    std::vector<int64_t> sc(n), rc(n);
    size_t sTotal = 0, rTotal = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = v_count(seed, r, p, maxCount);
      rc[p] = v_count(seed, p, r, maxCount);
      sTotal += sc[p];
      rTotal += rc[p];
    }
    std::vector<T> send(sTotal + 3), recv(rTotal + 5, T(-7)),
        want(rTotal + 5, T(-7));
    size_t off = 0;
    for (int p = 0; p < n; ++p)
      for (int64_t i = 0; i < sc[p]; ++i)
        send[off++] = v2<T>(r, p, i);
    off = 0;
    for (int p = 0; p < n; ++p)
      for (int64_t i = 0; i < rc[p]; ++i)
        want[off++] = v2<T>(p, r, i);
    std::string vt = " (" + ty + ", counts < " + std::to_string(maxCount) + ")";
    expectOk(c.allToAllV(send, sc, recv, rc), "allToAllV" + vt);
    compare(recv, want, "allToAllV" + vt);
  }
  { // broadcast from a drawn root.
    std::vector<T> buf(count, T(-1)), want(count);
    for (size_t i = 0; i < count; ++i)
      want[i] = v<T>(root, i);
    if (r == root)
      buf = want;
    std::string bt = at + " root " + std::to_string(root);
    expectOk(c.broadcast(buf, root), "broadcast" + bt);
    compare(buf, want, "broadcast" + bt);
  }
  if (n > 1) { // send/recv around a ring; even ranks send first.
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<T> out(count), in(count, T(-1)), want(count);
    for (size_t i = 0; i < count; ++i) {
      out[i] = v2<T>(r, next, i);
      want[i] = v2<T>(prev, r, i);
    }
    if (r % 2 == 0) {
      expectOk(c.send(out, next, 5), "send" + at);
      expectOk(c.recv(in, prev, 5), "recv" + at);
    } else {
      expectOk(c.recv(in, prev, 5), "recv" + at);
      expectOk(c.send(out, next, 5), "send" + at);
    }
    compare(in, want, "send/recv ring" + at);
  }
  expectOk(c.barrier(), "barrier");
}

void checkErrors(Communicator &c) {
  const int n = c.size();
  const std::string N = std::to_string(n);
  std::vector<float> f4(4), f3(3), fn(4 * n + 1);
  std::vector<int32_t> i4(4);
  expectError(c.allReduce(commBuffer(f4), commBuffer(f3)), "allReduce 4 vs 3",
              {"allReduce", "4", "3"});
  expectError(c.allReduce(commBuffer(f4), commBuffer(i4)),
              "allReduce f32 vs i32", {"allReduce", "f32", "i32"});
  expectError(c.allGather(f4, fn), "allGather wrong recv",
              {"allGather", std::to_string(4 * n + 1),
               N + " * 4 = " + std::to_string(4 * n)});
  expectError(c.reduceScatter(fn, f4), "reduceScatter wrong send",
              {"reduceScatter", std::to_string(4 * n + 1), N + " * 4"});
  if (n > 1)
    expectError(c.allToAll(fn, fn), "allToAll indivisible",
                {"allToAll", std::to_string(4 * n + 1), "size() = " + N});
  std::vector<int64_t> shortCounts(n + 1, 0), tooMany(n, 100);
  expectError(c.allToAllV(f4, shortCounts, f4, std::vector<int64_t>(n, 0)),
              "allToAllV counts length",
              {"allToAllV", "sendCounts", std::to_string(n + 1)});
  expectError(c.allToAllV(f4, std::vector<int64_t>(n, 0), f4, tooMany),
              "allToAllV counts overflow",
              {"allToAllV", "recvCounts", "100", "4"});
  expectError(c.broadcast(f4, n), "broadcast root out of range",
              {"broadcast", "root " + N, "[0, " + N + ")"});
  expectError(c.send(f4, -1), "send bad peer", {"send", "peer -1"});
  expectError(c.recv(f4, n), "recv bad peer", {"recv", "peer " + N});
  // An MPI-level error through MPI_ERRORS_RETURN: rank 0 sends 8 elements,
  // rank 1 posts a receive for 4 (truncation).
  if (n > 1) {
    std::vector<int64_t> eight(8, 1), four(4);
    if (c.rank() == 0)
      expectOk(c.send(eight, 1, 77), "send for truncation");
    else if (c.rank() == 1)
      expectError(c.recv(four, 0, 77), "recv truncated",
                  {"recv", "MPI_Recv", "MPI"});
  }
  expectOk(c.barrier(), "barrier after errors");
}

/// Sub-communicators: the ranks as a G x T grid (T = 2 when the size is
/// even), split into rows (same g, ordered by t) and columns (same t,
/// ordered by g, with the key reversed to check that keys order ranks). Each
/// group's rank and size follow from the grid alone, an all-gather of world
/// ranks over the group must list exactly the group's members in key order,
/// and the whole collective suite runs on the row group.
void checkSplit(Communicator &c, std::mt19937_64 &rng, uint64_t seed) {
  const int n = c.size(), r = c.rank();
  const int t = n % 2 == 0 ? 2 : 1, g = n / t;
  const int myG = r / t, myT = r % t;
  auto row = c.split(myG, myT);
  auto column = c.split(myT, g - 1 - myG);
  expectOk(row.status(), "split into rows");
  expectOk(column.status(), "split into columns");
  if (!row.isOk() || !column.isOk())
    return;
  Communicator &rc = *row.value(), &cc = *column.value();
  if (rc.size() != t || rc.rank() != myT)
    fail("row group: rank " + std::to_string(rc.rank()) + " of " +
         std::to_string(rc.size()) + ", expected " + std::to_string(myT) +
         " of " + std::to_string(t));
  if (cc.size() != g || cc.rank() != g - 1 - myG)
    fail("column group: rank " + std::to_string(cc.rank()) + " of " +
         std::to_string(cc.size()) + ", expected " +
         std::to_string(g - 1 - myG) + " of " + std::to_string(g));
  std::vector<int32_t> me(1, r), rowMembers(t), columnMembers(g);
  expectOk(rc.allGather(me, rowMembers), "row all-gather");
  expectOk(cc.allGather(me, columnMembers), "column all-gather");
  for (int i = 0; i < t; ++i)
    if (rowMembers[i] != myG * t + i)
      fail("row group member " + std::to_string(i) + " is world rank " +
           std::to_string(rowMembers[i]) + ", expected " +
           std::to_string(myG * t + i));
  for (int i = 0; i < g; ++i)
    if (columnMembers[i] != (g - 1 - i) * t + myT)
      fail("column group member " + std::to_string(i) + " is world rank " +
           std::to_string(columnMembers[i]) + ", expected " +
           std::to_string((g - 1 - i) * t + myT));
  checkCollectives<float>(rc, rng, seed);
  expectError(c.split(-1, 0).status(), "split with a negative color",
              {"split", "color -1"});
}

} // namespace

int main(int argc, char **argv) {
  auto created = MpiCommunicator::create();
  if (!created) {
    std::fprintf(stderr, "kimi-comm-mpi-tests: %s\n",
                 created.status().message().c_str());
    return 1;
  }
  auto comm = std::move(created.value());
  gRank = comm->rank();
  auto start = std::chrono::steady_clock::now();

  std::vector<int64_t> seedBuf(1, 0);
  if (gRank == 0) {
    const char *env = std::getenv("KIMI_COMM_SEED");
    if (argc > 1)
      seedBuf[0] = std::strtoll(argv[1], nullptr, 10);
    else if (env && *env)
      seedBuf[0] = std::strtoll(env, nullptr, 10);
    else
      seedBuf[0] = static_cast<int64_t>(std::random_device{}() & 0x7fffffff);
  }
  expectOk(comm->broadcast(seedBuf, 0), "broadcast seed");
  const uint64_t seed = static_cast<uint64_t>(seedBuf[0]);
  std::mt19937_64 rng(seed);

  for (int round = 0; round < 2; ++round) {
    checkCollectives<float>(*comm, rng, seed + round);
    checkCollectives<int32_t>(*comm, rng, seed + round);
    checkCollectives<int64_t>(*comm, rng, seed + round);
  }
  checkErrors(*comm);
  checkSplit(*comm, rng, seed + 7);

  std::vector<int32_t> failures(1, gFailures), total(1, 0);
  Status s = comm->allReduce(failures, total);
  if (!s.isOk()) {
    std::fprintf(stderr, "rank %d: reducing the failure count: %s\n", gRank,
                 s.message().c_str());
    total[0] = gFailures + 1;
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (gRank == 0)
    std::printf("kimi-comm-mpi-tests: %d ranks, seed %lld: %s (%d checks per "
                "rank, %.2f s)\n",
                comm->size(), static_cast<long long>(seed),
                total[0] == 0
                    ? "PASS"
                    : (std::to_string(total[0]) + " failures, FAIL").c_str(),
                gChecks, secs);
  int rc = total[0] == 0 ? 0 : 1;
  comm.reset();
  Status fin = MpiCommunicator::finalize();
  if (!fin.isOk()) {
    std::fprintf(stderr, "rank %d: %s\n", gRank, fin.message().c_str());
    rc = 1;
  }
  return rc;
}

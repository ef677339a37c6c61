// LocalCommunicator (runtime/comm/communicator.h) and the argument checks
// every backend shares. The MPI backend is tested by kimi-comm-mpi-tests
// under mpirun (CommMpiTests.cpp).

#include "runtime/comm/communicator.h"
#include "runtime/comm/rank_connection.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace kimi::rt;

namespace {

template <typename T> std::vector<T> iota(size_t n, T start) {
  std::vector<T> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

void expectError(const Status &s, std::initializer_list<const char *> needles) {
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char *n : needles)
    EXPECT_NE(s.message().find(n), std::string::npos)
        << "message \"" << s.message() << "\" lacks \"" << n << "\"";
}

TEST(CommLocal, RankAndSize) {
  LocalCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_STREQ(c.backendName(), "local");
  EXPECT_TRUE(c.barrier().isOk());
}

TEST(CommLocal, CollectivesCopy) {
  LocalCommunicator c;
  auto f = iota<float>(17, 1.5f);
  std::vector<float> out(17, -1.f);
  ASSERT_TRUE(c.allReduce(f, out).isOk());
  EXPECT_EQ(out, f);
  std::fill(out.begin(), out.end(), -1.f);
  ASSERT_TRUE(c.allReduce(f, out, ReduceOp::kMax).isOk());
  EXPECT_EQ(out, f);
  auto inPlace = f;
  ASSERT_TRUE(c.allReduceInPlace(inPlace).isOk());
  EXPECT_EQ(inPlace, f);

  auto i = iota<int32_t>(9, -4);
  std::vector<int32_t> io(9, 0);
  ASSERT_TRUE(c.allGather(i, io).isOk());
  EXPECT_EQ(io, i);
  std::fill(io.begin(), io.end(), 0);
  ASSERT_TRUE(c.reduceScatter(i, io).isOk());
  EXPECT_EQ(io, i);

  auto l = iota<int64_t>(6, int64_t(1) << 40);
  std::vector<int64_t> lo(6, 0);
  ASSERT_TRUE(c.allToAll(l, lo).isOk());
  EXPECT_EQ(lo, l);
  std::vector<int64_t> b = l;
  ASSERT_TRUE(c.broadcast(b, 0).isOk());
  EXPECT_EQ(b, l);

  // allToAllV: the first 4 elements to self; spare room stays untouched.
  std::vector<int64_t> vo(8, -7);
  ASSERT_TRUE(c.allToAllV(l, {4}, vo, {4}).isOk());
  EXPECT_EQ(std::vector<int64_t>(vo.begin(), vo.begin() + 4),
            std::vector<int64_t>(l.begin(), l.begin() + 4));
  EXPECT_EQ(vo[4], -7);

  // Empty buffers are fine.
  std::vector<float> e0, e1;
  EXPECT_TRUE(c.allReduce(e0, e1).isOk());
  EXPECT_TRUE(c.allGather(e0, e1).isOk());
}

TEST(CommLocal, SendRecvToSelf) {
  LocalCommunicator c;
  std::vector<int32_t> a = {1, 2, 3}, b = {4, 5};
  ASSERT_TRUE(c.send(a, 0, 1).isOk());
  ASSERT_TRUE(c.send(b, 0, 2).isOk());
  EXPECT_EQ(c.pendingMessages(), 2u);
  std::vector<int32_t> rb(2), ra(3);
  ASSERT_TRUE(c.recv(rb, 0, 2).isOk());
  ASSERT_TRUE(c.recv(ra, 0, 1).isOk());
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
  EXPECT_EQ(c.pendingMessages(), 0u);

  Status none = c.recv(ra, 0, 1);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.message().find("no message with tag 1"), std::string::npos);

  ASSERT_TRUE(c.send(a, 0, 3).isOk());
  std::vector<int32_t> small(2);
  Status wrong = c.recv(small, 0, 3);
  ASSERT_FALSE(wrong.isOk());
  EXPECT_NE(wrong.message().find("holds 3 i32 elements but the buffer holds 2"),
            std::string::npos)
      << wrong.message();
}

TEST(CommLocal, ArgumentErrorsNameTheCollective) {
  LocalCommunicator c;
  std::vector<float> f4(4), f3(3), f5(5);
  std::vector<int32_t> i4(4);
  expectError(c.allReduce(f4, f3), {"allReduce", "4", "3"});
  expectError(c.allReduce(commBuffer(f4), commBuffer(i4)),
              {"allReduce", "f32", "i32"});
  expectError(c.allGather(f4, f5),
              {"allGather", "recv buffer holds 5", "1 * 4 = 4"});
  expectError(c.reduceScatter(f5, f4),
              {"reduceScatter", "send buffer holds 5", "1 * 4 = 4"});
  expectError(c.allToAll(f4, f3), {"allToAll", "4", "3"});
  expectError(c.allToAllV(f4, {1, 2}, f4, {1}),
              {"allToAllV", "sendCounts has 2 entries", "size() = 1"});
  expectError(c.allToAllV(f4, {-1}, f4, {1}),
              {"allToAllV", "sendCounts[0] = -1"});
  expectError(c.allToAllV(f4, {4}, f3, {5}),
              {"allToAllV", "recvCounts sum to 5", "holds 3"});
  expectError(c.allToAllV(f4, {2}, f4, {3}),
              {"allToAllV", "sendCounts[0] = 2", "recvCounts[0] = 3"});
  expectError(c.broadcast(f4, 1), {"broadcast", "root 1", "[0, 1)"});
  expectError(c.send(f4, 1), {"send", "peer 1"});
  expectError(c.recv(f4, -2), {"recv", "peer -2"});
  expectError(c.send(f4, 0, -1), {"send", "tag -1"});
  expectError(
      c.allReduce(ConstCommBuffer(nullptr, 3, CommDType::kF32), commBuffer(f3)),
      {"allReduce", "null buffer"});
  expectError(c.allReduce(f4, f4, static_cast<ReduceOp>(9)),
              {"allReduce", "unknown reduction 9"});
}

TEST(CommLocal, DTypeNames) {
  EXPECT_STREQ(commDTypeName(CommDType::kF32), "f32");
  EXPECT_STREQ(commDTypeName(CommDType::kI64), "i64");
  EXPECT_EQ(commDTypeSize(CommDType::kI32), 4u);
  EXPECT_EQ(commDTypeSize(CommDType::kI64), 8u);
  EXPECT_STREQ(reduceOpName(ReduceOp::kMax), "max");
}

} // namespace

// connectRanks refuses what cannot join, naming the option at fault, before
// it opens a device or a store.
TEST(RankConnection, RefusesWhatCannotJoin) {
  using namespace kimi::rt;
  auto message = [](const ArtifactSpec &spec, const RankOptions &o) {
    StatusOr<RankConnection> c = connectRanks(spec, o);
    return c.isOk() ? std::string("ok") : c.status().message();
  };
  ArtifactSpec one;
  one.target.kind = TargetKind::kSm90a;
  RankOptions none;
  EXPECT_EQ(message(one, none), "ok");
  EXPECT_EQ(connectRanks(one, none).value().deviceOrdinal, 0);
  RankOptions rank1;
  rank1.rank = 1;
  EXPECT_EQ(message(one, rank1), "rank 1: the artifact is not partitioned (1 rank)");

  ArtifactSpec gpu = one;
  gpu.target.numRanks = 2;
  EXPECT_EQ(message(gpu, none),
            "the GPU artifact is partitioned over 2 ranks: each process needs "
            "its rank and a store file every rank can see");
  RankOptions rank2;
  rank2.rank = 2;
  rank2.store = "/nonexistent/store";
  EXPECT_EQ(message(gpu, rank2), "rank 2: the artifact has 2 ranks");

  ArtifactSpec cpu;
  cpu.target.kind = TargetKind::kCpu;
  cpu.target.numRanks = 2;
  EXPECT_EQ(message(cpu, none), "the CPU artifact is partitioned over 2 ranks, "
                                "and no host communicator (MPI) was given");
  RankOptions local;
  local.hostCommunicator = []() -> StatusOr<std::unique_ptr<Communicator>> {
    return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());
  };
  EXPECT_EQ(message(cpu, local),
            "the CPU artifact is partitioned over 2 ranks but runs on 1");
  local.store = "/tmp/store";
  EXPECT_NE(message(cpu, local).find("apply to GPU models"), std::string::npos);
}

//===- CommunicatorTest.cpp - The in-process communicator -----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Communicator.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/TcpStore.h"

#include "FreePort.h"

#include "gtest/gtest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using namespace weft::rt;

namespace {

HostTensor vector(std::vector<float> values) {
  HostTensor t(DType::F32, {int64_t(values.size())});
  t.floats = std::move(values);
  return t;
}

/// Runs `body(rank)` on `n` threads.
template <typename Body> void onRanks(int n, Body body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] { body(rank); });
  for (std::thread &t : threads)
    t.join();
}

TEST(Communicator, CollectivesFollowNcclSemantics) {
  InProcessCommunicator comm(4);
  std::vector<int> group = {0, 1, 2, 3};
  std::vector<HostTensor> reduced(4), gathered(4), scattered(4), shifted(4),
      exchanged(4);
  onRanks(4, [&](int rank) {
    float r = float(rank);
    reduced[rank] = *comm.allReduce(rank, group, vector({r, 1}), ReduceOp::Sum);
    gathered[rank] = *comm.allGather(rank, group, vector({r}), 0);
    scattered[rank] = *comm.reduceScatter(
        rank, group, vector({r, r, 2 * r, 2 * r}), 0, ReduceOp::Sum);
    shifted[rank] = *comm.permute(rank, group, vector({r}), 1);
    exchanged[rank] = *comm.allToAll(rank, group,
                                     vector({10 * r, 10 * r + 1, 10 * r + 2,
                                             10 * r + 3}),
                                     0, 0);
  });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(reduced[rank].floats, (std::vector<float>{6, 4}));
    EXPECT_EQ(gathered[rank].floats, (std::vector<float>{0, 1, 2, 3}));
    float expected = rank < 2 ? 6 : 12;
    EXPECT_EQ(scattered[rank].floats, (std::vector<float>{expected}));
    // Rank i receives from i - 1.
    EXPECT_EQ(shifted[rank].floats, (std::vector<float>{float((rank + 3) % 4)}));
    // Rank i gets piece i of every rank, in rank order.
    EXPECT_EQ(exchanged[rank].floats,
              (std::vector<float>{float(rank), float(10 + rank),
                                  float(20 + rank), float(30 + rank)}));
  }
  // Ring counts: all-reduce 2(n-1)/n * 8, all-gather 3 * 4, reduce-scatter
  // 3/4 * 16, permute 4, all-to-all 3/4 * 16.
  EXPECT_EQ(comm.bytesSent(0), 12 + 12 + 12 + 4 + 12);
}

TEST(Communicator, RankThatNeverJoinsTimesOut) {
  InProcessCommunicator comm(3, std::chrono::milliseconds(200));
  std::vector<absl::Status> status(3);
  auto start = std::chrono::steady_clock::now();
  onRanks(3, [&](int rank) {
    if (rank == 2)
      return; // never joins
    status[rank] =
        comm.allReduce(rank, {0, 1, 2}, vector({1}), ReduceOp::Sum).status();
  });
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(status[rank].ok());
    EXPECT_NE(std::string(status[rank].message()).find("all_reduce"),
              std::string::npos)
        << status[rank];
  }
  // The first rank to time out names the missing rank.
  bool named = false;
  for (int rank = 0; rank < 2; ++rank)
    named |= std::string(status[rank].message()).find("waiting for rank(s) 2") !=
             std::string::npos;
  EXPECT_TRUE(named);
}

TEST(Communicator, PointToPointKeepsOrderAndCountsBytes) {
  InProcessCommunicator comm(2);
  std::vector<HostTensor> got;
  onRanks(2, [&](int rank) {
    if (rank == 0) {
      // Sends return at once: the receiver need not be waiting.
      ASSERT_TRUE(comm.send(0, 1, vector({1, 2})).ok());
      ASSERT_TRUE(comm.send(0, 1, vector({3})).ok());
      return;
    }
    got.push_back(*comm.recv(1, 0));
    got.push_back(*comm.recv(1, 0));
  });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].floats, (std::vector<float>{1, 2}));
  EXPECT_EQ(got[1].floats, (std::vector<float>{3}));
  EXPECT_EQ(comm.bytesSent(0), 12);
  EXPECT_EQ(comm.bytesSent(1), 0);
  EXPECT_FALSE(comm.send(0, 0, vector({1})).ok()); // not to itself
  EXPECT_FALSE(comm.recv(1, 5).ok());              // no such rank
}

TEST(Communicator, ReceiveFromADeadStageTimesOutNamingIt) {
  InProcessCommunicator comm(3, std::chrono::milliseconds(200));
  auto start = std::chrono::steady_clock::now();
  // Rank 0, the stage that died, never sends.
  absl::Status waited = comm.recv(1, 0).status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(waited.message())
                .find("recv on rank 1 from rank 0 timed out after 200 ms: "
                      "rank 0 never sent"),
            std::string::npos)
      << waited;
  // The next stage, waiting on rank 1, is aborted with the same account
  // rather than left waiting for its own timeout.
  absl::Status next = comm.recv(2, 1).status();
  EXPECT_EQ(next.code(), absl::StatusCode::kAborted);
  EXPECT_NE(std::string(next.message()).find("rank 0 never sent"),
            std::string::npos)
      << next;
}

TEST(Communicator, ZigzagLayoutRoundTrips) {
  HostTensor seq(DType::F32, {8});
  seq.floats = {0, 1, 2, 3, 4, 5, 6, 7};
  // Two ring ranks x two more: rank (i, j) holds chunks i and 3 - i, split.
  std::vector<HostTensor> blocks;
  for (int index = 0; index < 4; ++index)
    blocks.push_back(zigzagSlice(seq, 0, index, 2, 4));
  EXPECT_EQ(blocks[0].floats, (std::vector<float>{0, 1}));
  EXPECT_EQ(blocks[1].floats, (std::vector<float>{6, 7}));
  EXPECT_EQ(blocks[2].floats, (std::vector<float>{2, 3}));
  EXPECT_EQ(blocks[3].floats, (std::vector<float>{4, 5}));
  std::vector<const HostTensor *> all;
  for (const HostTensor &b : blocks)
    all.push_back(&b);
  HostTensor gathered = concat(all, 0);
  EXPECT_EQ(zigzagUnshuffle(gathered, 0, 2, 4).floats, seq.floats);
}

} // namespace

#include "weft/runtime/Launch.h"

#include <map>

namespace {
std::function<const char *(const char *)>
environment(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(vars);
  return [shared](const char *name) -> const char * {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(Launch, ReadsTorchrunMpiAndSlurm) {
  auto torchrun = launchFromEnvironment(environment(
      {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"},
       {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
       {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  ASSERT_TRUE(torchrun.ok()) << torchrun.status();
  EXPECT_EQ(torchrun->launcher, "torchrun");
  EXPECT_EQ(torchrun->rank, 3);
  EXPECT_EQ(torchrun->worldSize, 8);
  EXPECT_EQ(torchrun->masterAddr, "node0");
  EXPECT_EQ(torchrun->masterPort, 29500);
  EXPECT_EQ(torchrun->storeSecret, "");
  // The store's secret and port: WEFT_STORE_SECRET, else torchrun's run id
  // (not "none"); WEFT_STORE_PORT where MASTER_PORT is taken.
  auto secured =
      launchFromEnvironment(environment({{"RANK", "0"},
                                         {"WORLD_SIZE", "2"},
                                         {"MASTER_PORT", "29500"},
                                         {"WEFT_STORE_PORT", "29600"},
                                         {"TORCHELASTIC_RUN_ID", "a1b2"}}));
  ASSERT_TRUE(secured.ok()) << secured.status();
  EXPECT_EQ(secured->masterPort, 29600);
  EXPECT_EQ(secured->storeSecret, "a1b2");
  auto explicitSecret =
      launchFromEnvironment(environment({{"RANK", "0"},
                                         {"WORLD_SIZE", "2"},
                                         {"TORCHELASTIC_RUN_ID", "none"},
                                         {"WEFT_STORE_SECRET", "s"}}));
  EXPECT_EQ(explicitSecret->storeSecret, "s");
  auto noSecret = launchFromEnvironment(environment(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "none"}}));
  EXPECT_EQ(noSecret->storeSecret, "");
  auto mpi = launchFromEnvironment(environment(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  ASSERT_TRUE(mpi.ok());
  EXPECT_EQ(mpi->launcher, "mpirun");
  EXPECT_EQ(mpi->worldSize, 4);
  auto slurm = launchFromEnvironment(
      environment({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"},
                   {"SLURM_LOCALID", "1"}}));
  ASSERT_TRUE(slurm.ok());
  EXPECT_EQ(slurm->launcher, "slurm");
  EXPECT_EQ(slurm->localRank, 1);
  auto single = launchFromEnvironment(environment({}));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->launcher, "single");
  EXPECT_EQ(single->worldSize, 1);
}

TEST(Launch, BadEnvironmentsAreClearErrors) {
  auto notNumber = launchFromEnvironment(
      environment({{"RANK", "zero"}, {"WORLD_SIZE", "2"}}));
  EXPECT_FALSE(notNumber.ok());
  EXPECT_NE(notNumber.status().message().find("RANK='zero' is not a number"),
            std::string::npos);
  auto outside = launchFromEnvironment(
      environment({{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
  EXPECT_NE(outside.status().message().find("rank 4 is outside a world of 4"),
            std::string::npos);
  auto half = launchFromEnvironment(environment({{"RANK", "1"}}));
  EXPECT_NE(half.status().message().find("sets RANK but not WORLD_SIZE"),
            std::string::npos);
  LaunchInfo info;
  info.worldSize = 2;
  info.launcher = "mpirun";
  absl::Status wrong = checkWorldSize(info, 4);
  EXPECT_NE(std::string(wrong.message())
                .find("partitioned for 4 ranks, but mpirun started 2"),
            std::string::npos);
  EXPECT_TRUE(checkWorldSize(info, 2).ok());
}
} // namespace

namespace {

using weft::test::freeLoopbackPort;

} // namespace

TEST(TcpStore, SetGetEraseAndTimeout) {
  LaunchInfo launch;
  launch.launcher = "torchrun";
  launch.masterAddr = "127.0.0.1";
  launch.masterPort = freeLoopbackPort();
  auto store = TcpStore::connect(launch, std::chrono::seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->set("key", std::string("v\0alue", 6)).ok());
  auto value = (*store)->get("key", std::chrono::seconds(1));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("v\0alue", 6));
  ASSERT_TRUE((*store)->erase("key").ok());
  auto missing = (*store)->get("key", std::chrono::milliseconds(50));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(missing.status().message()).find("'key'"),
            std::string::npos);
  // No port is an error naming the variable.
  launch.masterPort = 0;
  EXPECT_NE(std::string(TcpStore::connect(launch, std::chrono::seconds(1))
                            .status()
                            .message())
                .find("MASTER_PORT"),
            std::string::npos);
}

TEST(TcpStore, TensorsRoundTripAndMalformedMessagesAreErrors) {
  HostTensor f(DType::BF16, {2, 3});
  f.floats = {1, 2, 3, 4, 5, 6.5f};
  HostTensor i(DType::I64, {4});
  i.ints = {1, -2, 3, 1LL << 40};
  for (const HostTensor &t : {f, i}) {
    auto back = deserializeTensor(serializeTensor(t));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype, t.dtype);
    EXPECT_EQ(back->shape, t.shape);
    EXPECT_EQ(back->floats, t.floats);
    EXPECT_EQ(back->ints, t.ints);
  }
  std::string bytes = serializeTensor(f);
  EXPECT_FALSE(deserializeTensor(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(deserializeTensor("").ok());
  bytes[0] = char(100);
  EXPECT_FALSE(deserializeTensor(bytes).ok());
}

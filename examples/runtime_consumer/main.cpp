//===- main.cpp - A program linked against the installed WeftRuntime ------===//
//
// Four ranks as threads: each computes a column-parallel linear shard and the
// shards are all-gathered, the pattern of a tensor-parallel layer.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Communicator.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/Launch.h"

#include <iostream>
#include <thread>
#include <vector>

using namespace weft::rt;

int main() {
  auto launch = launchFromEnvironment();
  if (!launch.ok()) {
    std::cerr << launch.status().message() << "\n";
    return 1;
  }
  const int ranks = 4;
  InProcessCommunicator comm(ranks);
  std::vector<HostTensor> results(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      HostTensor x(DType::F32, {1, 2});
      x.floats = {1, 2};
      HostTensor w(DType::F32, {2, 1}); // this rank's column
      w.floats = {float(rank), 1};
      HostTensor y = linear(x, w, nullptr, false);
      results[rank] = *comm.allGather(rank, {0, 1, 2, 3}, y, 1);
    });
  for (std::thread &t : threads)
    t.join();
  std::cout << "launcher " << launch->launcher << ", rank 0 has";
  for (float v : results[0].floats)
    std::cout << ' ' << v;
  std::cout << ", sent " << comm.bytesSent(0) << " bytes\n";
  return results[0].floats == std::vector<float>{2, 3, 4, 5} ? 0 : 1;
}

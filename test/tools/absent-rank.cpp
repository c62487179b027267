//===- absent-rank.cpp - A rank program whose rank may never join ---------===//
//
// Part of the Weft project.
//
// For the runtime's failure tests: a program on a mesh of 4 ranks that
// all-reduces a small tensor over all of them, through the same driver as a
// generated program (rt::programMain: threads alone, processes under
// mpirun). The rank named by WEFT_TEST_ABSENT_RANK stalls for ten minutes
// before the collective, as a rank stuck in a kernel or a lost node would;
// the others must fail within --collective-timeout and exit non-zero. The
// rank named by WEFT_TEST_KILLED_RANK kills itself with SIGKILL instead (no
// handler runs, no message is sent): under torchrun the others must notice
// at once, through the store, not at the timeout.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Program.h"

#include <csignal>
#include <cstdlib>
#include <thread>

using namespace weft::rt;

int main(int argc, char **argv) {
  const char *absentText = std::getenv("WEFT_TEST_ABSENT_RANK");
  int absent = absentText ? std::atoi(absentText) : -1;
  const char *killedText = std::getenv("WEFT_TEST_KILLED_RANK");
  int killed = killedText ? std::atoi(killedText) : -1;
  ProgramSpec spec;
  spec.mesh = Mesh{{"tp"}, {4}, ""};
  spec.outputs = {Layout{{}}};
  spec.function = [absent, killed](RankContext &ctx,
                                   const std::vector<HostTensor> &) {
    if (ctx.rank == absent)
      std::this_thread::sleep_for(std::chrono::minutes(10));
    HostTensor x(DType::F32, {2});
    x.floats = {1.0f, float(ctx.rank)};
    HostTensor sum = allReduce(ctx, x, ReduceOp::Sum, {"tp"});
    // Killed after the first collective, when every rank has joined: the
    // others wait for it in the second.
    if (killed >= 0) {
      if (ctx.rank == killed)
        std::raise(SIGKILL);
      sum = allReduce(ctx, sum, ReduceOp::Sum, {"tp"});
    }
    return std::vector<HostTensor>{sum};
  };
  return programMain(argc, argv, spec);
}

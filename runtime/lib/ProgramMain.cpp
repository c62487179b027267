//===- ProgramMain.cpp - The main of a generated rank program -------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/Launch.h"
#include "weft/runtime/MpiCommunicator.h"
#include "weft/runtime/NpyFile.h"
#include "weft/runtime/Program.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <cstring>
#include <iostream>

using namespace weft::rt;

namespace {

struct Arguments {
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  std::string weightsDir, outputDir;
  std::vector<std::string> inputs;
};

void usage(const char *program, const ProgramSpec &spec) {
  std::cerr << "usage: " << program
            << " [--collective-timeout SECONDS] WEIGHTS_DIR OUTPUT_DIR";
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    std::cerr << " INPUT_" << i << ".npy";
  std::cerr << "\n";
}

bool parse(int argc, char **argv, const ProgramSpec &spec, Arguments &args) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (arg == "--collective-timeout" && i + 1 < argc)
      value = argv[++i];
    else if (arg.rfind("--collective-timeout=", 0) == 0)
      value = arg.substr(std::strlen("--collective-timeout="));
    else if (arg.rfind("--", 0) == 0) {
      std::cerr << "error: unknown option '" << arg << "'\n";
      return false;
    } else {
      positional.push_back(arg);
      continue;
    }
    double seconds = 0;
    if (!absl::SimpleAtod(value, &seconds) || !(seconds > 0)) {
      std::cerr << "error: --collective-timeout needs a positive number of "
                   "seconds, not '"
                << value << "'\n";
      return false;
    }
    args.timeout = std::chrono::milliseconds(int64_t(seconds * 1000));
  }
  if (positional.size() != 2 + spec.inputs.size())
    return false;
  args.weightsDir = positional[0];
  args.outputDir = positional[1];
  args.inputs.assign(positional.begin() + 2, positional.end());
  return true;
}

absl::Status writeOutputs(const std::string &dir,
                          const std::vector<HostTensor> &outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    absl::Status status =
        writeNpy(absl::StrCat(dir, "/output_", i, ".npy"), outputs[i]);
    if (!status.ok())
      return status;
  }
  return absl::OkStatus();
}

void printBytes(int64_t ranks, const std::vector<int64_t> &bytes) {
  std::cout << ranks << " ranks; bytes sent per rank:";
  for (int64_t b : bytes)
    std::cout << ' ' << b;
  std::cout << "\n";
}

/// One rank per process: runs this process's rank, then gathers the bytes
/// sent and every rank's output blocks to rank 0, which writes them.
int runAsProcess(const ProgramSpec &spec, const Arguments &args,
                 const std::vector<HostTensor> &inputs) {
  int n = int(spec.mesh.size());
  auto created = MpiCommunicator::create(n, args.timeout);
  if (!created.ok()) {
    std::cerr << "error: " << created.status().message() << "\n";
    return 1;
  }
  MpiCommunicator &comm = **created;
  int rank = comm.rank();
  std::vector<int> world(n);
  for (int r = 0; r < n; ++r)
    world[r] = r;
  try {
    RankContext ctx{rank, spec.mesh, &comm, args.weightsDir};
    std::vector<HostTensor> mine;
    for (size_t i = 0; i < inputs.size(); ++i)
      mine.push_back(scatterBlock(inputs[i], spec.inputs[i], spec.mesh, rank));
    std::vector<HostTensor> results = spec.function(ctx, mine);
    HostTensor sent(DType::I64, {1});
    sent.ints = {comm.bytesSent(rank)};
    HostTensor allSent = valueOrThrow(comm.allGather(rank, world, sent, 0));
    std::vector<HostTensor> outputs;
    for (size_t o = 0; o < spec.outputs.size(); ++o) {
      const HostTensor &block = results[o];
      HostTensor rows = valueOrThrow(
          comm.allGather(rank, world, reshape(block, {1, block.numel()}), 0));
      std::vector<HostTensor> blocks;
      for (int r = 0; r < n; ++r)
        blocks.push_back(reshape(sliceForRank(rows, 0, r, n), block.shape));
      outputs.push_back(gatherBlocks(blocks, spec.outputs[o], spec.mesh));
    }
    if (rank == 0) {
      absl::Status status = writeOutputs(args.outputDir, outputs);
      if (!status.ok())
        throw std::runtime_error(std::string(status.message()));
      printBytes(n, allSent.ints);
    }
  } catch (const std::exception &e) {
    std::cerr << "error: rank " << rank << ": " << e.what() << std::endl;
    comm.abortJob(1);
  }
  return 0;
}

} // namespace

int weft::rt::programMain(int argc, char **argv, const ProgramSpec &spec) {
  Arguments args;
  if (!parse(argc, argv, spec, args)) {
    usage(argv[0], spec);
    return 2;
  }
  absl::StatusOr<LaunchInfo> launch = launchFromEnvironment();
  if (!launch.ok()) {
    std::cerr << "error: " << launch.status().message() << "\n";
    return 2;
  }
  bool processes = launch->worldSize > 1;
  if (processes) {
    absl::Status status = checkWorldSize(*launch, int(spec.mesh.size()));
    if (!status.ok()) {
      std::cerr << "error: " << status.message() << "\n";
      return 2;
    }
    if (launch->launcher == "torchrun") {
      std::cerr << "error: started by torchrun: the CPU runtime runs ranks as "
                   "processes over MPI only; start it with mpirun -np "
                << spec.mesh.size()
                << ", or with no launcher to run the ranks as threads\n";
      return 2;
    }
  }
  std::vector<HostTensor> inputs;
  for (const std::string &path : args.inputs) {
    absl::StatusOr<HostTensor> tensor = readNpy(path);
    if (!tensor.ok()) {
      std::cerr << "error: " << tensor.status().message() << "\n";
      return 1;
    }
    inputs.push_back(std::move(*tensor));
  }
  if (processes)
    return runAsProcess(spec, args, inputs);
  std::vector<int64_t> bytes;
  absl::StatusOr<std::vector<HostTensor>> outputs =
      runOnMesh(spec.function, spec.mesh, args.weightsDir, inputs, spec.inputs,
                spec.outputs, &bytes, args.timeout);
  if (!outputs.ok()) {
    std::cerr << "error: " << outputs.status().message() << "\n";
    return 1;
  }
  absl::Status status = writeOutputs(args.outputDir, *outputs);
  if (!status.ok()) {
    std::cerr << "error: " << status.message() << "\n";
    return 1;
  }
  printBytes(spec.mesh.size(), bytes);
  return 0;
}

//===- ProgramMain.cpp - The main of a generated rank program -------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/FileWrite.h"
#include "weft/runtime/Launch.h"
#include "weft/runtime/MpiCommunicator.h"
#include "weft/runtime/NpyFile.h"
#include "weft/runtime/Pipeline.h"
#include "weft/runtime/Profile.h"
#include "weft/runtime/Program.h"
#include "weft/runtime/TcpStore.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

using namespace weft::rt;

absl::StatusOr<ProgramArguments>
weft::rt::parseProgramArguments(int argc, char **argv, size_t inputCount,
                                int *exitCode) {
  *exitCode = 2;
  auto usage = [&](const std::string &error) {
    if (!error.empty())
      std::cerr << "error: " << error << "\n";
    std::cerr << "usage: " << argv[0]
              << " [--collective-timeout SECONDS] WEIGHTS_DIR OUTPUT_DIR";
    for (size_t i = 0; i < inputCount; ++i)
      std::cerr << " INPUT_" << i << ".npy";
    std::cerr << "\n";
    return absl::InvalidArgumentError(error.empty() ? "usage" : error);
  };
  ProgramArguments args;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (arg == "--collective-timeout" && i + 1 < argc)
      value = argv[++i];
    else if (arg.rfind("--collective-timeout=", 0) == 0)
      value = arg.substr(std::strlen("--collective-timeout="));
    else if (arg.rfind("--", 0) == 0)
      return usage("unknown option '" + arg + "'");
    else {
      positional.push_back(arg);
      continue;
    }
    double seconds = 0;
    if (!absl::SimpleAtod(value, &seconds) || !(seconds > 0))
      return usage("--collective-timeout needs a positive number of seconds, "
                   "not '" + value + "'");
    args.timeout = std::chrono::milliseconds(int64_t(seconds * 1000));
  }
  if (positional.size() != 2 + inputCount)
    return usage("");
  args.weightsDir = positional[0];
  args.outputDir = positional[1];
  *exitCode = 1;
  for (size_t i = 2; i < positional.size(); ++i) {
    absl::StatusOr<HostTensor> tensor = readNpy(positional[i]);
    if (!tensor.ok()) {
      std::cerr << "error: " << tensor.status().message() << "\n";
      return tensor.status();
    }
    args.inputPaths.push_back(positional[i]);
    args.inputs.push_back(std::move(*tensor));
  }
  *exitCode = 0;
  return args;
}

std::vector<HostTensor> weft::rt::gatherFromProcesses(
    Communicator &comm, int rank, const Mesh &mesh,
    const std::vector<Layout> &layouts, const std::vector<HostTensor> &blocks,
    int64_t bytesSent, std::vector<int64_t> &allBytesSent,
    const std::vector<int> &holders) {
  int n = int(mesh.size());
  std::vector<int> world;
  for (int r = 0; r < n; ++r)
    world.push_back(r);
  HostTensor sent(DType::I64, {1});
  sent.ints = {bytesSent};
  allBytesSent =
      valueOrThrow(comm.allGather(rank, world, sent, 0)).ints.toVector();
  std::vector<HostTensor> outputs;
  for (size_t o = 0; o < layouts.size(); ++o) {
    const HostTensor &block = blocks[o];
    HostTensor rows = valueOrThrow(
        comm.allGather(rank, world, reshape(block, {1, block.numel()}), 0));
    std::vector<HostTensor> parts;
    for (int r = 0; r < n; ++r)
      parts.push_back(reshape(sliceForRank(rows, 0, r, n), block.shape));
    if (o < holders.size())
      parts = blocksOfHolder(std::move(parts), mesh, holders[o]);
    outputs.push_back(gatherBlocks(parts, layouts[o], mesh));
  }
  return outputs;
}

std::vector<HostTensor> weft::rt::blocksOfHolder(std::vector<HostTensor> blocks,
                                                 const Mesh &mesh, int holder) {
  const size_t perHolder = mesh.shape.empty()
                               ? blocks.size()
                               : blocks.size() / size_t(mesh.shape[0]);
  std::vector<HostTensor> out;
  for (size_t r = 0; r < blocks.size(); ++r)
    out.push_back(blocks[size_t(holder) * perHolder + r % perHolder]);
  return out;
}

bool weft::rt::createOutputDirectory(const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    std::cerr << "error: cannot create the output directory " << dir << ": "
              << ec.message() << "\n";
  return !ec;
}

int weft::rt::writeProgramOutputs(const std::string &dir,
                                  const std::vector<HostTensor> &outputs,
                                  int64_t ranks,
                                  const std::vector<int64_t> &bytesSent) {
  if (!createOutputDirectory(dir))
    return 1;
  for (size_t i = 0; i < outputs.size(); ++i) {
    absl::Status status =
        writeNpy(absl::StrCat(dir, "/output_", i, ".npy"), outputs[i]);
    if (!status.ok()) {
      std::cerr << "error: " << status.message() << "\n";
      return 1;
    }
  }
  if (absl::Status status = removeStaleOutputs(dir, outputs.size(), ".npy");
      !status.ok()) {
    std::cerr << "error: " << status.message() << "\n";
    return 1;
  }
  std::cout << ranks << " ranks; bytes sent per rank:";
  for (int64_t b : bytesSent)
    std::cout << ' ' << b;
  std::cout << "\n";
  return 0;
}

absl::StatusOr<std::unique_ptr<ProcessGroup>>
ProcessGroup::join(const LaunchInfo &launch, int worldSize,
                   std::chrono::milliseconds timeout) {
  std::unique_ptr<ProcessGroup> group(new ProcessGroup());
  group->size = worldSize;
  group->timeout = timeout;
  if (launch.launcher == "torchrun") {
    auto store = TcpStore::connect(launch, timeout);
    if (!store.ok())
      return store.status();
    group->store = std::move(*store);
    group->myRank = launch.rank;
    group->comm = std::make_unique<StoreCommunicator>(
        *group->store, worldSize, launch.rank, timeout);
    return group;
  }
  auto mpi = MpiCommunicator::create(worldSize, timeout);
  if (!mpi.ok())
    return mpi.status();
  group->mpi = mpi->get();
  group->myRank = (*mpi)->rank();
  group->comm = std::move(*mpi);
  return group;
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::abort(const std::string &why) {
  // One write, so that the lines of several ranks do not interleave.
  std::cerr << absl::StrCat("error: rank ", myRank, ": ", why, "\n")
            << std::flush;
  if (mpi)
    mpi->abortJob(1);
  std::string earlier;
  if (store && !store->tryGet("abort", earlier).value_or(true))
    (void)store->set("abort", absl::StrCat("rank ", myRank, " failed: ", why));
  // Rank 0 serves the store: it stays a moment, so that the others (some
  // perhaps still joining) read the abort instead of finding no store.
  if (store && myRank == 0)
    std::this_thread::sleep_for(
        std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2)));
  std::exit(1);
}

void ProcessGroup::finish() {
  if (!store)
    return;
  (void)store->set(absl::StrCat("done/", myRank), "");
  if (myRank != 0)
    return;
  // Rank 0 serves the store until every rank is done, or one is lost (the
  // store's abort, which its get reports at once).
  for (int r = 1; r < size; ++r)
    if (!store->get(absl::StrCat("done/", r), timeout).ok())
      break;
}

namespace {

/// Fault injection for checking the failure paths of a real program: the
/// rank named by WEFT_STALL_RANK sleeps WEFT_STALL_SECONDS (600 unless set)
/// before it runs, as a rank stuck in a kernel or on a lost node would. The
/// other ranks must then fail within --collective-timeout, naming it.
void stallIfAsked(int rank) {
  const char *stallRank = std::getenv("WEFT_STALL_RANK");
  int which = -1;
  if (!stallRank || !absl::SimpleAtoi(stallRank, &which) || which != rank)
    return;
  double seconds = 600;
  if (const char *text = std::getenv("WEFT_STALL_SECONDS"))
    (void)absl::SimpleAtod(text, &seconds);
  std::cerr << absl::StrCat("rank ", rank, ": stalling for ", seconds,
                            " s (WEFT_STALL_RANK)\n")
            << std::flush;
  std::this_thread::sleep_for(
      std::chrono::milliseconds(int64_t(seconds * 1000)));
}

/// One rank per process: over MPI or the TCP store.
int runAsProcess(const Mesh &mesh, const std::vector<Layout> &inputLayouts,
                 const std::vector<Layout> &outputLayouts,
                 const RankRunner &runner, const ProgramArguments &args,
                 const LaunchInfo &launch) {
  auto joined = ProcessGroup::join(launch, int(mesh.size()), args.timeout);
  if (!joined.ok()) {
    std::cerr << absl::StrCat("error: rank ", launch.rank, ": ",
                              joined.status().message(), "\n");
    return 1;
  }
  ProcessGroup &group = **joined;
  ExchangeCommunicator &comm = group.communicator();
  int rank = group.rank();
  try {
    RankContext ctx{rank, mesh, &comm, args.weightsDir, args.timeout};
    std::vector<HostTensor> mine;
    for (size_t i = 0; i < args.inputs.size(); ++i)
      mine.push_back(scatterBlock(args.inputs[i], inputLayouts[i], mesh, rank));
    int64_t sent = -1;
    stallIfAsked(rank);
    std::vector<HostTensor> results;
    {
      RankProfile profile;
      results = runner(ctx, launch, true, mine, sent);
    }
    if (sent < 0)
      sent = comm.bytesSent(rank);
    std::vector<int64_t> bytes;
    std::vector<HostTensor> outputs = gatherFromProcesses(
        comm, rank, mesh, outputLayouts, results, sent, bytes);
    if (rank == 0 &&
        writeProgramOutputs(args.outputDir, outputs, mesh.size(), bytes) != 0)
      group.abort("cannot write the outputs");
    if (Profiler::get().enabled())
      Profiler::get().print(std::cerr << "rank " << rank << ": ");
  } catch (const std::exception &e) {
    group.abort(e.what());
  }
  group.finish();
  return 0;
}

/// A pipelined program, one rank per process: each runs its schedule; the
/// stages' outputs then go to rank 0 point-to-point (after the bytes sent
/// were counted), which assembles and writes them.
int runPipelineAsProcess(const PipelineProgram &program,
                         const ProgramArguments &args,
                         const LaunchInfo &launch) {
  auto joined =
      ProcessGroup::join(launch, int(program.mesh.size()), args.timeout);
  if (!joined.ok()) {
    std::cerr << absl::StrCat("error: rank ", launch.rank, ": ",
                              joined.status().message(), "\n");
    return 1;
  }
  ProcessGroup &group = **joined;
  ExchangeCommunicator &comm = group.communicator();
  const int rank = group.rank(), n = int(program.mesh.size());
  try {
    RankContext ctx{rank, program.mesh, &comm, args.weightsDir, args.timeout};
    auto micro = splitMicroBatches(args.inputs, program.microBatches);
    if (!micro.ok())
      throw std::runtime_error(std::string(micro.status().message()));
    std::vector<HostTensor> results;
    {
      RankProfile profile;
      results = runPipelineRank(ctx, program, *micro);
    }
    std::vector<int> world;
    for (int r = 0; r < n; ++r)
      world.push_back(r);
    HostTensor sent(DType::I64, {1});
    sent.ints = {comm.bytesSent(rank) +
                 (ctx.backend ? ctx.backend->bytesSent() : 0)};
    std::vector<int64_t> bytes =
        valueOrThrow(comm.allGather(rank, world, sent, 0)).ints.toVector();
    if (rank != 0) {
      HostTensor count(DType::I64, {1});
      count.ints = {int64_t(results.size())};
      if (absl::Status status = comm.send(rank, 0, count); !status.ok())
        throw std::runtime_error(std::string(status.message()));
      for (const HostTensor &result : results)
        if (absl::Status status = comm.send(rank, 0, result); !status.ok())
          throw std::runtime_error(std::string(status.message()));
    } else {
      std::vector<std::vector<HostTensor>> perRank(static_cast<size_t>(n));
      perRank[0] = std::move(results);
      for (int r = 1; r < n; ++r) {
        HostTensor count = valueOrThrow(comm.recv(0, r));
        for (int64_t i = 0; i < (count.numel() ? count.ints[0] : 0); ++i)
          perRank[size_t(r)].push_back(valueOrThrow(comm.recv(0, r)));
      }
      auto outputs = assemblePipelineOutputs(program, perRank);
      if (!outputs.ok())
        throw std::runtime_error(std::string(outputs.status().message()));
      if (writeProgramOutputs(args.outputDir, *outputs, n, bytes) != 0)
        group.abort("cannot write the outputs");
    }
    if (Profiler::get().enabled())
      Profiler::get().print(std::cerr << "rank " << rank << ": ");
  } catch (const std::exception &e) {
    group.abort(e.what());
  }
  group.finish();
  return 0;
}

} // namespace

std::optional<LaunchInfo> weft::rt::programLaunch(const Mesh &mesh,
                                                  int *exitCode) {
  absl::StatusOr<LaunchInfo> launch = launchFromEnvironment();
  if (!launch.ok()) {
    std::cerr << "error: " << launch.status().message() << "\n";
    *exitCode = 2;
    return std::nullopt;
  }
  if (launch->worldSize > 1)
    if (absl::Status status = checkWorldSize(*launch, int(mesh.size()));
        !status.ok()) {
      std::cerr << "error: " << status.message() << "\n";
      *exitCode = 2;
      return std::nullopt;
    }
  return *launch;
}

int weft::rt::runProgram(int argc, char **argv, const Mesh &mesh,
                         const std::vector<Layout> &inputs,
                         const std::vector<Layout> &outputs,
                         const RankRunner &runner,
                         const std::vector<TensorType> &inputTypes) {
  int exitCode = 0;
  Profiler::get().enableFromEnvironment();
  std::optional<LaunchInfo> launch = programLaunch(mesh, &exitCode);
  if (!launch)
    return exitCode;
  bool processes = launch->worldSize > 1;
  absl::StatusOr<ProgramArguments> args =
      parseProgramArguments(argc, argv, inputs.size(), &exitCode);
  if (!args.ok())
    return exitCode;
  for (size_t i = 0; i < inputTypes.size() && i < args->inputs.size(); ++i)
    if (absl::Status status =
            checkInput(args->inputs[i], inputTypes[i], inputs[i], mesh,
                       absl::StrCat(args->inputPaths[i], " (input #", i, ")"));
        !status.ok()) {
      std::cerr << "error: " << status.message() << "\n";
      return 1;
    }
  if (processes)
    return runAsProcess(mesh, inputs, outputs, runner, *args, *launch);
  RankFunction function = [&](RankContext &ctx,
                              const std::vector<HostTensor> &mine) {
    int64_t unused = -1;
    stallIfAsked(ctx.rank);
    return runner(ctx, *launch, false, mine, unused);
  };
  std::vector<int64_t> bytes;
  absl::StatusOr<std::vector<HostTensor>> results =
      runOnMesh(function, mesh, args->weightsDir, args->inputs, inputs,
                outputs, &bytes, args->timeout);
  if (!results.ok()) {
    std::cerr << "error: " << results.status().message() << "\n";
    return 1;
  }
  int written =
      writeProgramOutputs(args->outputDir, *results, mesh.size(), bytes);
  if (Profiler::get().enabled())
    Profiler::get().print(std::cerr);
  return written;
}

int weft::rt::programMain(int argc, char **argv, const ProgramSpec &spec) {
  return runProgram(
      argc, argv, spec.mesh, spec.inputs, spec.outputs,
      [&](RankContext &ctx, const LaunchInfo &, bool,
          const std::vector<HostTensor> &inputs,
          int64_t &) { return spec.function(ctx, inputs); },
      spec.inputTypes);
}

int weft::rt::pipelineProgramMain(int argc, char **argv,
                                  const PipelineProgram &program) {
  int exitCode = 0;
  Profiler::get().enableFromEnvironment();
  std::optional<LaunchInfo> launch = programLaunch(program.mesh, &exitCode);
  if (!launch)
    return exitCode;
  const size_t inputCount = program.numInputs();
  absl::StatusOr<ProgramArguments> args =
      parseProgramArguments(argc, argv, inputCount, &exitCode);
  if (!args.ok())
    return exitCode;
  if (absl::Status status = checkPipelineProgram(program, inputCount);
      !status.ok()) {
    std::cerr << "error: " << status.message() << "\n";
    return 1;
  }
  // Each input against one micro-batch's block on the first stage that
  // reads it, times the micro-batches along the batch.
  for (size_t i = 0; i < program.inputTypes.size() && i < inputCount; ++i) {
    TensorType whole = program.inputTypes[i];
    Layout layout;
    for (const PipelineStage &stage : program.virtualStages)
      for (size_t a = 0; a < stage.modelInput.size() && layout.empty(); ++a)
        if (stage.modelInput[a] == int(i))
          layout = stage.argLayouts[a];
    if (!whole.shape.empty())
      whole.shape[0] *= program.microBatches;
    if (absl::Status status =
            checkInput(args->inputs[i], whole, layout, program.mesh,
                       absl::StrCat(args->inputPaths[i], " (input #", i, ")"));
        !status.ok()) {
      std::cerr << "error: " << status.message() << "\n";
      return 1;
    }
  }
  PipelineProgram faulty = withInjectedFaults(program, launch->worldSize > 1);
  if (launch->worldSize > 1)
    return runPipelineAsProcess(faulty, *args, *launch);
  std::vector<int64_t> bytes;
  auto outputs = runPipelineOnMesh(faulty, args->weightsDir, args->inputs,
                                   &bytes, args->timeout);
  if (!outputs.ok()) {
    std::cerr << "error: " << outputs.status().message() << "\n";
    return 1;
  }
  int written = writeProgramOutputs(args->outputDir, *outputs,
                                    program.mesh.size(), bytes);
  if (Profiler::get().enabled())
    Profiler::get().print(std::cerr);
  return written;
}

PipelineProgram weft::rt::withInjectedFaults(const PipelineProgram &program,
                                             bool processes) {
  int kill = -1;
  if (const char *text = std::getenv("WEFT_KILL_RANK"); text && processes)
    (void)absl::SimpleAtoi(text, &kill);
  PipelineProgram faulty = program;
  for (PipelineStage &stage : faulty.virtualStages)
    stage.function = [function = stage.function,
                      kill](RankContext &ctx,
                            const std::vector<HostTensor> &inputs) {
      thread_local bool started = false;
      if (!started) {
        started = true;
        stallIfAsked(ctx.rank);
        if (ctx.rank == kill) {
          std::cerr << absl::StrCat("rank ", ctx.rank,
                                    ": killing itself (WEFT_KILL_RANK)\n")
                    << std::flush;
          std::raise(SIGKILL);
        }
      }
      return function(ctx, inputs);
    };
  return faulty;
}

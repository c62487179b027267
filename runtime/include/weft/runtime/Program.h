//===- Program.h - What a partitioned rank program needs --------*- C++ -*-===//
//
// Part of the Weft project.
//
// The services a rank program calls, whether the interpreter runs it or
// `weft compile` generated it: its place on the mesh, collectives by mesh
// axes, weights from files, and the driver that scatters inputs to N ranks,
// runs them as threads over the in-process communicator and gathers outputs.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_PROGRAM_H
#define WEFT_RUNTIME_PROGRAM_H

#include "weft/runtime/Communicator.h"
#include "weft/runtime/HostTensor.h"
#include "weft/runtime/Launch.h"

#include <memory>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace weft::rt {

/// Mesh axes splitting each dimension of a tensor (major to minor).
using Layout = std::vector<std::vector<std::string>>;

struct Mesh {
  std::vector<std::string> axes;
  std::vector<int64_t> shape;
  /// Sequences split over this axis use the load-balanced (zigzag) layout.
  std::string zigzagAxis;
  int64_t size() const;
  int64_t axisSize(const std::string &axis) const;
  /// Index of `rank` in its group over `axes` (coordinates linearized, the
  /// first axis major) and the group's global ranks in group order.
  int64_t indexIn(int rank, const std::vector<std::string> &axes) const;
  std::vector<int> group(int rank, const std::vector<std::string> &axes) const;
};

/// How long a collective waits for the rest of its group by default.
constexpr std::chrono::milliseconds kDefaultCollectiveTimeout =
    std::chrono::seconds(300);

/// What a backend keeps for one rank beyond the host's context: a GPU's
/// streams, arena and communicators (the CUDA runtime's pipelined programs).
class RankBackend {
public:
  virtual ~RankBackend() = default;
  /// Bytes this rank sent over the backend's own communicators (not
  /// counted by the host communicator).
  virtual int64_t bytesSent() const { return 0; }
  /// A pipelined step ended (the pipeline executor calls it): what the
  /// backend kept over its blocks of micro-batches (heldAllGather's device
  /// copies) is freed, as the host context's `held` is. Must not throw.
  virtual void endPipelinedStep() noexcept {}
};

struct RankContext {
  int rank = 0;
  Mesh mesh;
  Communicator *comm = nullptr;
  std::string weightsDir;
  /// How long a collective may wait (for communicators a program creates).
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  /// The rank's backend state, set up before it runs (PipelineProgram::
  /// rankSetup); null on the CPU.
  std::shared_ptr<RankBackend> backend = nullptr;
  /// In a pipelined step (runPipelineRank): the micro-batch of the step
  /// running (-1 outside one) and how many pipelined steps the rank has
  /// begun, which date what heldAllGather keeps.
  int microBatch = -1;
  int64_t pipelineSteps = 0;
  /// What heldAllGather keeps, by gather: the pipelined step and block it
  /// was gathered in, and the value.
  struct HeldGather {
    int64_t step = -1, block = -1;
    HostTensor value;
  };
  std::map<int64_t, HeldGather> held = {};
};

/// The block of micro-batches whose gathers `held` keeps for a gather held
/// over blocks of `block` (weft.all_gather ... hold N), or -1 outside a
/// pipelined step (then nothing is kept).
int64_t heldBlock(const RankContext &ctx, int64_t block);

/// Rank `rank`'s block of a global tensor laid out as `layout`.
HostTensor scatterBlock(const HostTensor &global, const Layout &layout,
                        const Mesh &mesh, int rank);
/// The global tensor from every rank's block.
HostTensor gatherBlocks(const std::vector<HostTensor> &blocks,
                        const Layout &layout, const Mesh &mesh);

// Collectives by mesh axes; they throw std::runtime_error on failure. A
// `codec` compresses what the collective sends (Codec.h).
/// With `members`, over the sub-group of the one axis in `axes` whose
/// coordinates are listed (weft.all_reduce ... members [...]); this rank
/// must be one of them.
HostTensor allReduce(RankContext &ctx, const HostTensor &x, ReduceOp op,
                     const std::vector<std::string> &axes,
                     Codec codec = Codec::None,
                     const std::vector<int64_t> &members = {});
/// The global ranks of `rank`'s group over `axes`, in group order; with
/// `members`, those whose coordinates along the one axis are listed.
std::vector<int> groupOf(const Mesh &mesh, int rank,
                         const std::vector<std::string> &axes,
                         const std::vector<int64_t> &members);
HostTensor allGather(RankContext &ctx, const HostTensor &x,
                     const std::vector<std::string> &axes, int64_t dim,
                     bool zigzag, Codec codec = Codec::None);
/// An all-gather of a weight held over blocks of `block` micro-batches
/// (weft.all_gather ... hold N: ZeroPP's blockwise schedule): the first
/// call of a pipelined step in a block gathers and keeps the value under
/// `key` (the gather's), the block's later calls return it without
/// communicating. Outside a pipelined step it gathers every time.
HostTensor heldAllGather(RankContext &ctx, int64_t key, int64_t block,
                         const HostTensor &x,
                         const std::vector<std::string> &axes, int64_t dim,
                         bool zigzag, Codec codec = Codec::None);
/// With `zigzag`, rank r gets the reduced block rt::zigzagSlice gives it.
HostTensor reduceScatter(RankContext &ctx, const HostTensor &x, ReduceOp op,
                         const std::vector<std::string> &axes, int64_t dim,
                         bool zigzag, Codec codec = Codec::None);
HostTensor allToAll(RankContext &ctx, const HostTensor &x,
                    const std::vector<std::string> &axes, int64_t splitDim,
                    int64_t concatDim, Codec codec = Codec::None);
HostTensor allSlice(RankContext &ctx, const HostTensor &x,
                    const std::vector<std::string> &axes, int64_t dim,
                    bool zigzag);
HostTensor permute(RankContext &ctx, const HostTensor &x,
                   const std::vector<std::string> &axes, int64_t shift,
                   Codec codec = Codec::None);
/// A weight or constant written next to the program (`<weightsDir>/<name>`),
/// as `dtype` (a bf16 weight is stored as f32 in the file, which numpy
/// lacks bf16 for).
HostTensor loadWeight(const RankContext &ctx, const std::string &name,
                      DType dtype, const Shape &shape);
/// This rank's block, along `dim` over mesh `axes`, of a weight written next
/// to the program, reading only that block from the file (what
/// allSlice(loadWeight(...)) computes).
HostTensor loadWeightShard(const RankContext &ctx, const std::string &name,
                           const std::vector<std::string> &axes, int64_t dim,
                           DType dtype, const Shape &shape);
/// Checks a weight file's contents against what the program was compiled
/// for: the shape (of the block read) and the element type `weft compile`
/// wrote (bf16 is stored as f32, which numpy has).
absl::Status checkWeight(const HostTensor &read, DType dtype,
                         const Shape &shape, const std::string &path);
/// `x` as `dtype` (an input read from a file in another type).
HostTensor asType(const HostTensor &x, DType dtype);
/// The shard's index and count for `rank` over `axes`.
std::pair<int64_t, int64_t> shardOf(const Mesh &mesh, int rank,
                                    const std::vector<std::string> &axes);
/// The value of a kernel that may fail; throws its message.
HostTensor valueOrThrow(absl::StatusOr<HostTensor> value);

using RankFunction = std::function<std::vector<HostTensor>(
    RankContext &, const std::vector<HostTensor> &)>;

/// What one rank does, given its context; it throws std::runtime_error on
/// failure.
using RankBody = std::function<std::vector<HostTensor>(RankContext &)>;

/// Runs `body` on every rank of `mesh` as threads over one in-process
/// communicator and returns each rank's results (indexed by rank). Fails
/// (with the first rank's error, the others aborted) if any rank fails.
absl::StatusOr<std::vector<std::vector<HostTensor>>>
runRanks(const RankBody &body, const Mesh &mesh, const std::string &weightsDir,
         std::vector<int64_t> *bytesSent = nullptr,
         std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

/// Runs `function` on every rank of `mesh` as threads: scatters `inputs` by
/// `inputLayouts`, gathers outputs by `outputLayouts`. Fails (with the first
/// rank's error, the others aborted) if any rank fails; a collective that
/// waits longer than `timeout` for its group fails naming the missing ranks.
absl::StatusOr<std::vector<HostTensor>>
runOnMesh(const RankFunction &function, const Mesh &mesh,
          const std::string &weightsDir, const std::vector<HostTensor> &inputs,
          const std::vector<Layout> &inputLayouts,
          const std::vector<Layout> &outputLayouts,
          std::vector<int64_t> *bytesSent = nullptr,
          std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

/// The element type and one rank's block shape of a program argument, as
/// compiled: every input file is checked against it before it is scattered.
struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
};

/// Checks a global input read from `what` against the block type each rank
/// was compiled for (the global shape is the block's times the mesh axes of
/// its layout): the same shape, and an element type of the same kind (any
/// float for a float input; i32 or i64 for an integer one, as GPT token
/// files come; bool for bool), so that nothing is read out of bounds or
/// silently truncated.
absl::Status checkInput(const HostTensor &input, const TensorType &block,
                        const Layout &layout, const Mesh &mesh,
                        const std::string &what);

/// A generated program: its rank function, how its arguments and results
/// sit on the mesh, and the argument types it was compiled for.
struct ProgramSpec {
  RankFunction function;
  Mesh mesh;
  std::vector<Layout> inputs;
  std::vector<Layout> outputs;
  std::vector<TensorType> inputTypes;
};

/// The `main` of a generated program:
///   program [--collective-timeout SECONDS] WEIGHTS_DIR OUTPUT_DIR IN_0.npy ...
/// Started alone, it runs every rank as a thread over the in-process
/// communicator. Started by mpirun or srun with one process per rank, each
/// process runs its rank over MPI. Either way it writes
/// OUTPUT_DIR/output_<i>.npy (the global tensors, from rank 0) and prints the
/// bytes each rank sent. Any failure prints `error: rank R: ...` and exits
/// non-zero; a process job is aborted so that no rank is left waiting.
int programMain(int argc, char **argv, const ProgramSpec &spec);

/// How a driver runs one rank. `ctx.comm` is the host communicator: the
/// in-process one when the ranks are threads (`ownProcess` false), the
/// process group's when each rank is a process. A runner whose collectives
/// move their bytes elsewhere (NCCL) sets `bytesSent`; otherwise the host
/// communicator's count is reported.
using RankRunner = std::function<std::vector<HostTensor>(
    RankContext &ctx, const LaunchInfo &launch, bool ownProcess,
    const std::vector<HostTensor> &inputs, int64_t &bytesSent)>;

/// The driver of every generated program (CPU, CUDA, CUDA emulated): the
/// command line, the launcher's world, threads or processes, the outputs.
int runProgram(int argc, char **argv, const Mesh &mesh,
               const std::vector<Layout> &inputs,
               const std::vector<Layout> &outputs, const RankRunner &runner,
               const std::vector<TensorType> &inputTypes = {});

// The pieces of the driver.

/// A generated program's command line.
struct ProgramArguments {
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  std::string weightsDir, outputDir;
  std::vector<std::string> inputPaths;
  std::vector<HostTensor> inputs;
};
/// Parses the command line and reads the inputs; prints the error (and the
/// usage) and returns the exit code on failure.
absl::StatusOr<ProgramArguments> parseProgramArguments(int argc, char **argv,
                                                       size_t inputCount,
                                                       int *exitCode);
/// The host-side communicator of a job with one rank per process: MPI under
/// mpirun or srun, a TCP store on rank 0 under torchrun.
class ProcessGroup {
public:
  static absl::StatusOr<std::unique_ptr<ProcessGroup>>
  join(const LaunchInfo &launch, int worldSize,
       std::chrono::milliseconds timeout);
  ~ProcessGroup();
  ExchangeCommunicator &communicator() { return *comm; }
  int rank() const { return myRank; }
  /// Prints "error: rank R: why" and ends the job with a non-zero exit:
  /// MPI_Abort, or an "abort" key that fails the others' next wait.
  [[noreturn]] void abort(const std::string &why);
  /// The last step of every rank: with the store, rank 0 keeps serving
  /// until every rank has said it is done.
  void finish();

private:
  ProcessGroup() = default;
  std::unique_ptr<class TcpStore> store;
  std::unique_ptr<ExchangeCommunicator> comm;
  class MpiCommunicator *mpi = nullptr;
  int myRank = 0, size = 1;
  std::chrono::milliseconds timeout{0};
};

/// The launcher's world (torchrun, Open MPI, Slurm, or none), checked
/// against the program's ranks; nullopt (with the error printed and the exit
/// code in `exitCode`) if it does not fit.
std::optional<LaunchInfo> programLaunch(const Mesh &mesh, int *exitCode);

/// One rank per process: every rank's output blocks and bytes sent, gathered
/// over `comm` to the global outputs (on every rank). With `holders`, per
/// output the coordinate on the mesh's first axis (a pipeline rank) whose
/// ranks' blocks stand for every rank's: the others give a block of the same
/// shape that is not read. Throws on failure.
std::vector<HostTensor>
gatherFromProcesses(Communicator &comm, int rank, const Mesh &mesh,
                    const std::vector<Layout> &layouts,
                    const std::vector<HostTensor> &blocks, int64_t bytesSent,
                    std::vector<int64_t> &allBytesSent,
                    const std::vector<int> &holders = {});

/// `blocks` (one per rank) with each rank's replaced by the block of the
/// rank with the same coordinates but `holder` on the mesh's first axis.
std::vector<HostTensor> blocksOfHolder(std::vector<HostTensor> blocks,
                                       const Mesh &mesh, int holder);
/// Creates a program's output directory with its parents (as `weft run -o`
/// does); prints the error and returns false if it cannot.
bool createOutputDirectory(const std::string &dir);
/// Writes OUTPUT_DIR/output_<i>.npy and prints the bytes each rank sent;
/// returns the exit code.
int writeProgramOutputs(const std::string &dir,
                        const std::vector<HostTensor> &outputs, int64_t ranks,
                        const std::vector<int64_t> &bytesSent);

} // namespace weft::rt

#endif // WEFT_RUNTIME_PROGRAM_H

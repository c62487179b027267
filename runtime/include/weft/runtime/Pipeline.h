//===- Pipeline.h - Pipeline stages executed from a schedule ----*- C++ -*-===//
//
// Part of the Weft project.
//
// A program cut into pipeline stages: one rank function per virtual stage,
// how each stage's arguments and results connect (model inputs, values
// received from the previous stage, values sent to the next, model
// outputs), and per pipeline rank the ordered list of steps it runs (the
// schedule -weft-schedule-pipeline wrote into the IR). The executor runs a
// rank's list: a forward step calls the stage's function on one
// micro-batch, a send posts its results for the next stage, a receive waits
// for the previous stage's. `weft run` (stage functions interpreted) and
// the programs `weft compile` writes (stage functions compiled) both run
// through it.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_PIPELINE_H
#define WEFT_RUNTIME_PIPELINE_H

#include "weft/runtime/Program.h"

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace weft::rt {

/// One step of a pipeline rank's schedule.
struct PipelineStep {
  enum Kind { Forward, Backward, WeightGrad, Send, Recv };
  Kind kind = Forward;
  int microBatch = 0;
  /// The model chunk on this rank: virtual stage chunk * stages + rank.
  int chunk = 0;
  /// Send and Recv: the pipeline rank at the other end.
  int peer = -1;
  /// The step as the schedule names it (`F0`, `>a1:0`, ...), for traces.
  std::string name;
};

/// One virtual stage.
struct PipelineStage {
  RankFunction function;
  /// Per argument: the model input it is (>= 0), or -1 for a value received
  /// from the previous stage (in order).
  std::vector<int> modelInput;
  /// Per result: the model output it is (>= 0), or -1 for a value sent to
  /// the next stage (in order).
  std::vector<int> modelOutput;
  std::vector<Layout> argLayouts, resultLayouts;
};

struct PipelineProgram {
  /// The mesh, its first axis `pp` (the pipeline ranks).
  Mesh mesh;
  int stages = 1, chunks = 1, microBatches = 1;
  /// By virtual stage (chunk * stages + pipeline rank).
  std::vector<PipelineStage> virtualStages;
  /// By pipeline rank: its steps in order.
  std::vector<std::vector<PipelineStep>> steps;
  /// Per model input, as one micro-batch's block on the stage that reads it
  /// first (checked against the input files); may be empty.
  std::vector<TensorType> inputTypes;

  size_t numInputs() const;
  size_t numOutputs() const;
};

/// Whether the stages fit together (each stage sends what the next
/// receives, the steps name existing chunks and peers, every output has a
/// stage) for `inputs` model inputs.
absl::Status checkPipelineProgram(const PipelineProgram &program,
                                  size_t inputs);

/// Each model input as `m` micro-batches along its first dimension (a scalar
/// is given to every micro-batch as it is).
absl::StatusOr<std::vector<std::vector<HostTensor>>>
splitMicroBatches(const std::vector<HostTensor> &inputs, int m);

/// Called after every step a rank ran, with its start and end in
/// microseconds since the run started.
using StepObserver = std::function<void(int rank, const PipelineStep &step,
                                        double start, double end)>;

/// Runs rank `ctx.rank`'s steps. Returns, for each model output its stage
/// holds, the blocks of the m micro-batches, in (output, micro-batch) order.
/// Throws std::runtime_error naming the stage, step and peer on failure.
std::vector<HostTensor>
runPipelineRank(RankContext &ctx, const PipelineProgram &program,
                const std::vector<std::vector<HostTensor>> &microInputs,
                const StepObserver *observer = nullptr,
                std::chrono::steady_clock::time_point started =
                    std::chrono::steady_clock::now());

/// The global model outputs from every rank's runPipelineRank results: per
/// micro-batch the blocks of the owning stage's ranks gathered, then the
/// micro-batches joined along the first dimension.
absl::StatusOr<std::vector<HostTensor>>
assemblePipelineOutputs(const PipelineProgram &program,
                        const std::vector<std::vector<HostTensor>> &perRank);

/// Every rank as a thread over the in-process communicator.
absl::StatusOr<std::vector<HostTensor>>
runPipelineOnMesh(const PipelineProgram &program, const std::string &weightsDir,
                  const std::vector<HostTensor> &inputs,
                  std::vector<int64_t> *bytesSent = nullptr,
                  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout,
                  const StepObserver *observer = nullptr);

/// The `main` of a generated pipelined program, with programMain's command
/// line, threads or processes (mpirun, srun, torchrun), outputs and bytes.
int pipelineProgramMain(int argc, char **argv, const PipelineProgram &program);

} // namespace weft::rt

#endif // WEFT_RUNTIME_PIPELINE_H

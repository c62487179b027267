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

#include "weft/runtime/Codec.h"
#include "weft/runtime/Program.h"

#include <chrono>
#include <functional>
#include <memory>
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
  /// Send and Recv: the tensors are gradients (after a backward), not
  /// activations.
  bool gradient = false;
};

/// Where an argument of a backward or weight-gradient step's function comes
/// from, or where one of its results goes.
struct PipelineRef {
  enum Kind {
    /// Argument: model input #index (this micro-batch's block).
    Input,
    /// Argument: the gradient of the stage's index-th sent value, received
    /// back from the next stage.
    Cotangent,
    /// Argument or result: the value kept in slot #index for this
    /// micro-batch between the stage's steps.
    Saved,
    /// Result: the gradient of parameter #index (PipelineProgram::
    /// gradientNames), summed over the micro-batches.
    Gradient,
    /// Result: the gradient of the stage's index-th received value, sent
    /// back to the previous stage.
    GradientSent,
  };
  Kind kind = Input;
  int index = 0;
};

/// The function of a backward or weight-gradient step of one stage.
struct PipelineStepFunction {
  /// Empty: the step has nothing to compute on this stage (the first
  /// stage's input-gradient step when weight gradients have their own).
  RankFunction function;
  std::vector<PipelineRef> args, results;
  std::vector<Layout> argLayouts, resultLayouts;
  /// The gradients the step returns as partial sums (positions in
  /// `results`; -weft-defer-gradient-reduction): the executor sums them over
  /// the micro-batches and calls `reduce` on those sums once, after the
  /// rank's last step, which returns them reduced in the same order; with
  /// `everyMicroBatch` (ZeRO-2 and 3), it calls `reduce` after each step on
  /// that micro-batch's partial gradients and sums the reduced blocks; with
  /// `reduceBlock` B > 1 as well (ZeroPP's blockwise schedule,
  /// weft.micro_batch_block), it sums the partial gradients of each block of
  /// B micro-batches and reduces them after the block's last.
  std::vector<int> partial;
  RankFunction reduce;
  bool everyMicroBatch = false;
  int reduceBlock = 1;
};

/// One virtual stage.
struct PipelineStage {
  RankFunction function;
  /// Per argument: the model input it is (>= 0), or -1 for a value received
  /// from the previous stage (in order).
  std::vector<int> modelInput;
  /// Per result: the model output it is (>= 0), -1 for a value sent to
  /// the next stage (in order), or -2 - j for a value kept in slot j for
  /// this micro-batch's backward.
  std::vector<int> modelOutput;
  std::vector<Layout> argLayouts, resultLayouts;
  /// A training step's: the backward (input gradients, and the weight
  /// gradients unless `weight` computes them) and weight-gradient steps.
  PipelineStepFunction backward, weight;
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
  /// A training step's: the parameters whose gradients the stages return.
  std::vector<std::string> gradientNames;
  /// The codec of every send (activations and their gradients; floats only,
  /// Codec.h): the receiver gets what it decodes, the bytes counted are the
  /// encoded ones.
  Codec codec = Codec::None;
  /// Called by each rank before its first step (every rank reaches it, so
  /// it may join collectives over the world): the state its stage functions
  /// find in RankContext::backend (a GPU program's device, arena and
  /// communicators). Empty on the CPU.
  std::function<std::shared_ptr<RankBackend>(RankContext &)> rankSetup;

  size_t numInputs() const;
  size_t numOutputs() const;
  bool training() const { return !gradientNames.empty(); }
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

/// `into` += `add`, element by element: a gradient summed over micro-batches
/// (float tensors of one shape; throws std::runtime_error otherwise).
void accumulateInto(HostTensor &into, const HostTensor &add);

/// Runs rank `ctx.rank`'s steps. Returns, for each model output its stage
/// holds, the blocks of the m micro-batches, in (output, micro-batch) order;
/// then, in a training step, the gradient blocks of the parameters its
/// stages have (by gradient index, each summed over the micro-batches).
/// Throws std::runtime_error naming the stage, step and peer on failure.
/// `heldGradientBytes`, if given, gets the bytes of summed gradients the
/// rank holds between micro-batches (its accumulators of reduced blocks at
/// the end, and the most bytes of partial sums it held at once);
/// `peakSavedBytes` the most bytes of saved activations it held at once, after
/// each step of the schedule: per micro-batch and chunk in flight (forward run,
/// last backward step not yet), what its forward kept for its backward and
/// weight-gradient steps and the model inputs those read (token ids, labels).
/// Counted at each tensor's element type (bf16 2 bytes, f32 4, i64 8), as a GPU
/// holds them and the cost model counts them, not as the CPU runtime allocates
/// them (f32, i64).
std::vector<HostTensor>
runPipelineRank(RankContext &ctx, const PipelineProgram &program,
                const std::vector<std::vector<HostTensor>> &microInputs,
                const StepObserver *observer = nullptr,
                std::chrono::steady_clock::time_point started =
                    std::chrono::steady_clock::now(),
                int64_t *heldGradientBytes = nullptr,
                int64_t *peakSavedBytes = nullptr);

/// The global model outputs from every rank's runPipelineRank results: per
/// micro-batch the blocks of the owning stage's ranks gathered, then the
/// micro-batches joined along the first dimension.
absl::StatusOr<std::vector<HostTensor>>
assemblePipelineOutputs(const PipelineProgram &program,
                        const std::vector<std::vector<HostTensor>> &perRank);

/// The same, each micro-batch's outputs apart: [output][micro-batch].
absl::StatusOr<std::vector<std::vector<HostTensor>>>
assemblePipelineMicroOutputs(
    const PipelineProgram &program,
    const std::vector<std::vector<HostTensor>> &perRank);

/// The gradients pipeline rank `rank`'s steps return (by gradient index,
/// ascending: the order of runPipelineRank's gradient results).
std::vector<int> pipelineRankGradients(const PipelineProgram &program,
                                       int rank);

/// The optimizer step of one pipeline rank
/// (-weft-build-optimizer=rank-local=true on a module cut into stages, its
/// weft.pipeline_rank): each rank of that pipeline rank runs it after its
/// steps, on its blocks.
struct PipelineOptimizerStep {
  RankFunction function;
  std::vector<Layout> argLayouts, resultLayouts;
  /// Per argument: the gradient (by PipelineProgram::gradientNames) of the
  /// rank's steps that it takes, as they return it (reduced, or with ZeRO
  /// reduce-scattered); -1 for an argument cut from `inputs`.
  std::vector<int> gradientOf;
  /// The other arguments whole (the rank's block is cut by its layout).
  std::vector<HostTensor> inputs;
  /// Per argument: 1 for a parameter's block, 2 for its optimizer state
  /// (moments, momentum), 0 otherwise; what PipelineHeld counts. Empty:
  /// nothing counted.
  std::vector<int> held;
};

/// What a rank held of the training state in a step: the bytes of its
/// summed gradients between micro-batches, and of its optimizer step's
/// parameters and optimizer state (its blocks); and the peak bytes of the
/// activations its schedule kept in flight (runPipelineRank's
/// peakSavedBytes).
struct PipelineHeld {
  int64_t gradients = 0, parameters = 0, optimizer = 0;
  int64_t activations = 0;
};

/// Every rank of a training step as a thread, each followed by its pipeline
/// rank's optimizer step (`optimizers`, one per pipeline rank): per
/// micro-batch the model outputs ([output][micro-batch]), and per pipeline
/// rank its optimizer step's results, whole (gathered from the blocks of its
/// ranks).
struct PipelineTrainingResult {
  std::vector<std::vector<HostTensor>> outputs;
  std::vector<std::vector<HostTensor>> updated;
  /// By rank.
  std::vector<PipelineHeld> held;
};
absl::StatusOr<PipelineTrainingResult> runPipelineTrainingOnMesh(
    const PipelineProgram &program, const std::string &weightsDir,
    const std::vector<HostTensor> &inputs, std::vector<int64_t> *bytesSent,
    std::chrono::milliseconds timeout, const StepObserver *observer,
    const std::vector<PipelineOptimizerStep> &optimizers);

/// Every rank as a thread over the in-process communicator.
absl::StatusOr<std::vector<HostTensor>>
runPipelineOnMesh(const PipelineProgram &program, const std::string &weightsDir,
                  const std::vector<HostTensor> &inputs,
                  std::vector<int64_t> *bytesSent = nullptr,
                  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout,
                  const StepObserver *observer = nullptr);

/// `program` with the fault injection of a real program in its stage
/// functions: the rank named by WEFT_STALL_RANK stalls WEFT_STALL_SECONDS
/// (600 unless set) and the one named by WEFT_KILL_RANK kills itself with
/// SIGKILL (no handler runs, no message is sent; ranks as `processes`
/// only), each in its first forward step, after the schedule has started:
/// the others must fail naming the step and the rank they miss.
PipelineProgram withInjectedFaults(const PipelineProgram &program,
                                   bool processes);

/// The `main` of a generated pipelined program, with programMain's command
/// line, threads or processes (mpirun, srun, torchrun), outputs and bytes.
int pipelineProgramMain(int argc, char **argv, const PipelineProgram &program);

} // namespace weft::rt

#endif // WEFT_RUNTIME_PIPELINE_H

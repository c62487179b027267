//===- Driver.h - Plan, run and compile as library calls --------*- C++ -*-===//
//
// Part of the Weft project.
//
// What `weft plan`, `weft run` and `weft compile` do, as functions that take
// a request and return a result or an error: the command line and the Python
// package are two front ends over these, so that both give the same answer
// for the same request. Nothing here prints (except CMake's own output when
// compileModel builds); errors are returned, and the diagnostics MLIR
// reported while the call ran are gathered by a DiagnosticCollector on the
// context.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DRIVER_DRIVER_H
#define WEFT_DRIVER_DRIVER_H

#include "weft/Codegen/CpuEmitter.h"
#include "weft/Codegen/PipelineProgram.h"
#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/Training.h"
#include "weft/Import/OnnxImporter.h"
#include "weft/Planner/CostModel.h"
#include "weft/Planner/PipelineSchedule.h"
#include "weft/Planner/Risk.h"
#include "weft/plan.pb.h"
#include "weft/runtime/HostTensor.h"
#include "weft/runtime/Pipeline.h"
#include "weft/runtime/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace weft {
struct InterpreterOptions;
namespace driver {

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

/// "path: node 'name'" for an importer location, "path:line:col" for a
/// source location: where a diagnostic points, as the command line prints it.
std::string describeLocation(mlir::Location loc);

/// Collects the diagnostics reported on `context` while it lives, one
/// "where: error: message" line each (notes attached to a diagnostic
/// follow it), instead of printing them.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &context);
  /// Every line collected so far.
  const std::string &text() const { return collected; }
  /// `error`'s message after what was collected: the whole account of a
  /// failed call.
  std::string message(llvm::Error error) const;

private:
  std::string collected;
  mlir::ScopedDiagnosticHandler handler;
};

/// An error whose account is in the diagnostics already reported on the
/// context: a front end that prints diagnostics as they come adds nothing;
/// one that collects them shows them, or this summary when there were none.
class DiagnosedError : public llvm::ErrorInfo<DiagnosedError> {
public:
  static char ID;
  explicit DiagnosedError(std::string summary) : summary(std::move(summary)) {}
  void log(llvm::raw_ostream &os) const override { os << summary; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string summary;
};

/// Makes a DiagnosedError.
llvm::Error diagnosed(const llvm::Twine &summary);

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

/// How a model file becomes a weft module for running or compiling.
struct ModelOptions {
  /// NAME=DxDx... for inputs whose shapes the file leaves dynamic.
  std::vector<std::string> inputShapes;
  /// Binds dynamic batch / sequence dimensions (-1: not given).
  int64_t batchSize = -1;
  int64_t seqLen = -1;
  /// Forget the model's input shapes (bind them from the inputs).
  bool dynamicInputs = false;
  /// Fold and raise (-weft-canonicalize, -cse, -weft-raise, mark layers).
  bool raise = true;
  /// Remarks on each softmax not raised to weft.attention.
  bool explainRaise = false;
  /// f32, bf16 or f16: every f32 tensor of the model in this type.
  std::string dtype = "f32";
  /// Replace the logits by the per-token loss against labels.
  bool loss = false;
  /// Fixed position buffers become constants (OnnxImportOptions).
  bool fixedBuffers = true;
};

/// The importer's options for `options` (an error for a malformed
/// --input-shape).
llvm::Expected<OnnxImportOptions> importOptions(const ModelOptions &options);

/// Imports `path` (ONNX) and, when `raise`, folds and raises it. Null on
/// failure (the diagnostics say why).
mlir::OwningOpRef<mlir::ModuleOp> importModel(llvm::StringRef path,
                                              const OnnxImportOptions &options,
                                              mlir::MLIRContext &context,
                                              bool raise = true,
                                              bool explainRaise = false);

/// A model for the planner: an ONNX file imported without weights at
/// `batch` and `sequenceLength`, or weft IR, both raised and with their
/// layers marked. Null on failure.
mlir::OwningOpRef<mlir::ModuleOp>
loadModelForPlanning(llvm::StringRef path, mlir::MLIRContext &context,
                     int64_t sequenceLength, int64_t batch = 1,
                     llvm::ArrayRef<std::string> shapes = {},
                     bool fixedBuffers = true);

/// Converts the float type (`dtype`: f32 leaves it) and appends the loss
/// (`loss`) as ModelOptions say.
llvm::Error prepareModule(mlir::MLIRContext &context, mlir::ModuleOp module,
                          const ModelOptions &options);

/// The function a module runs: `main`, or its first function.
mlir::func::FuncOp entryFunction(mlir::ModuleOp module);

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

/// What `weft plan` is asked: a model (a file, a preset, or the builder
/// fields), a cluster and a training setup; and either a search or the
/// costing of one plan (`evaluate` / `evaluateJson`).
struct PlanRequest {
  std::string modelFile; ///< .onnx or .mlir
  /// A preset name, a Hugging Face config.json (or its directory), or
  /// "gpt" / "llama" (builder).
  std::string preset;
  /// Builder fields; 0 / empty keep the preset's or the builder's default.
  int64_t layers = 0, hidden = 0, heads = 0, kvHeads = 0, ffn = 0, vocab = 0;
  /// Each head's query/key/value width where it is not hidden / heads
  /// (Megatron-LM's --kv-channels); 0 keeps the model's.
  int64_t headDim = 0;
  /// A causal sliding window (keys per query); 0 keeps the model's.
  int64_t slidingWindow = 0;
  /// With slidingWindow: every globalEvery-th layer attends globally (full
  /// causal), the others through the window (Gemma 2: 2, Gemma 3: 6); 0 for
  /// the window on every layer.
  int64_t globalEvery = 0;
  std::string ffnKind; ///< gelu or swiglu
  std::string tied;    ///< yes / no
  std::vector<std::string> inputShapes;
  std::string cluster; ///< GPU:PERNODExNODES or a cluster file
  int64_t globalBatch = 0;
  int64_t seqLen = 0; ///< 0: the model's
  /// bf16 or fp16; empty: bf16, or fp16 on a GPU without bf16 tensor cores.
  std::string dtype;
  double memoryReserveGib = 2.0;
  bool flashAttention = true;
  /// flashAttention is the default, not the user's: off where the GPU
  /// predates Ampere (FlashAttention-2 needs sm80; planner/Cluster.h).
  bool flashAttentionDefault = true;
  bool dropout = false;
  bool gradReduce16bit = false;
  /// Kernels launched synchronously (CUDA_LAUNCH_BLOCKING=1).
  bool launchBlocking = false;
  /// Parameters not trained (a regular expression over their names).
  std::string freeze;
  /// Fixed position buffers are constants (off: --no-fixed-buffers).
  bool fixedBuffers = true;
  int top = 5;
  /// Plans predicted within this fraction of the fastest count as equal,
  /// and the one with the fewest risks goes first (planner/Risk.h); < 0:
  /// the model's measured spread on published runs; 0: fastest first.
  double riskTolerance = -1;
  bool tpAcrossNodes = false;
  /// Also search AxoNN's 3-D tensor parallelism (planner::SearchOptions).
  bool tensor3d = true;
  /// Largest micro-batch size searched, with or without pipeline stages;
  /// 0: planner::SearchOptions' defaults (16 with, 64 without).
  int maxMicroBatch = 0;
  bool boundFromRelatives = true;
  /// The model's error band for the expected-step range and the spread
  /// between plans; rows == 0: planner::validationErrorBand(), the published
  /// runs' (weft plan --band-from gives the user's own).
  planner::ErrorBand band;
  /// Cost this plan ("tp=8,pp=8,...") instead of searching.
  std::string evaluate;
  /// Cost the first plan of this `weft plan --json` file instead.
  std::string evaluateJson;
  /// With evaluate: a plan that does not fit is not an error.
  bool allowOom = false;
  /// Compressed collectives: a policy every plan is costed under
  /// ("dp:int8,tp:fp8"), or "auto": the search also tries dp:bf16, dp:int8
  /// and dp:int8 with fp8 activations, and says what compression gains.
  std::string compress;
  /// Search only what this framework runs (megatron, deepspeed,
  /// torchtitan).
  std::string exportFramework;
  /// Called with the fraction of the search done.
  std::function<void(double)> progress;
};

/// What `weft plan` answers: the plans (with model, cluster and training,
/// as `--json` writes them) and the cost model that costed them, for
/// explanations, schedules, exports and reports.
struct PlanOutcome {
  plan::PlanSet set;
  std::unique_ptr<planner::CostModel> costModel;
  /// The model and cluster lines `weft plan` prints first.
  std::string header;
  /// True when one plan was costed (evaluate) rather than searched.
  bool evaluated = false;
  /// With evaluate: GiB by which the plan exceeds the memory available (0
  /// when it fits or allowOom).
  double overMemoryGib = 0;
  /// With compress=auto: what compression changes (the best uncompressed
  /// plan and its time against the answer), for the output and --explain.
  std::string compression;
  /// When the answer is a 3-D tensor-parallel grid: what it gains over the
  /// answer with Megatron's tensor parallelism (a second search without
  /// grids), for the output and --explain.
  std::string tensor3d;
  /// The model's error band and, after a search, which near-equal plan was
  /// preferred for its lower risk (chosen == 0: the fastest).
  planner::ErrorBand band;
  planner::RobustChoice robust;
};

/// Plans as `weft plan` does. `context` holds the IR the cost model builds;
/// it must outlive the outcome's cost model.
llvm::Expected<PlanOutcome> planModel(mlir::MLIRContext &context,
                                      const PlanRequest &request);

/// The model a request names (a file, or --model with the builder fields),
/// as `weft plan` reads it; an error says what is missing or wrong.
llvm::Expected<plan::ModelSpec> resolveModelSpec(mlir::MLIRContext &context,
                                                 const PlanRequest &request);

/// A built-in model as the module an import gives it (`@main`: tokens
/// [batch, seq] i64 -> logits [batch, seq, vocab], each block a weft.layer),
/// with its weights drawn from `seed` as GPT-2 initialises them (N(0, 0.02)
/// for matrices and the embedding, 1 for norm scales, 0 for biases) and
/// written as raw little-endian f32 to `weightsPath`, one parameter after
/// another; each parameter names its byte range there as external data
/// relative to the module's directory (the file's name only). With an
/// empty `weightsPath`, the module alone: its parameters have names, shapes
/// and dtypes and no data (for planning, as import --no-weights). With a
/// `checkpoint` (a Hugging Face safetensors checkpoint of a model read from
/// its config.json), every parameter's values are the checkpoint's, laid out
/// as the builder lays them; a tensor missing, of another shape, or left
/// over is an error naming it.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildModelWithWeights(mlir::MLIRContext &context, const plan::ModelSpec &model,
                      int64_t batch, int64_t seq, uint64_t seed,
                      llvm::StringRef weightsPath,
                      llvm::StringRef checkpoint = "");

/// The error for an evaluated plan that does not fit (overMemoryGib > 0).
std::string overMemoryMessage(const PlanOutcome &outcome);

/// The plan from a JSON file or the short form (exactly one of them given):
/// what --plan and --plan-spec take. Without mbs in the short form, the
/// micro-batch is left to the model's batch over dp.
llvm::Expected<plan::Plan> resolvePlan(llvm::StringRef planFile,
                                       llvm::StringRef planSpec);

/// Partitions `module` under `plan`: every field of the plan is applied, or
/// the error names the fields a forward program cannot apply. With
/// `pipelined` (the caller runs pipeline stages: runPipelineOnMeshDevices),
/// a plan with pp > 1 first cuts the model into its stages
/// (-weft-split-stages) and every stage is partitioned.
llvm::Error partitionModule(mlir::MLIRContext &context, mlir::ModuleOp module,
                            const plan::Plan &plan, bool pipelined = false);

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

/// Runs the partitioned `func` of `module` on the devices of its weft.mesh
/// (threads): each rank interprets it; the inputs are split and the outputs
/// assembled by their local shardings. `bytes` gets the bytes each rank
/// sent. `expectedDevices` (> 0) must be the mesh's size.
llvm::Expected<std::vector<rt::HostTensor>>
runOnMeshDevices(mlir::ModuleOp module, mlir::func::FuncOp func,
                 const std::vector<rt::HostTensor> &inputs,
                 const InterpreterOptions &base, int expectedDevices,
                 double timeoutSeconds, std::vector<int64_t> &bytes);

/// A partitioned training step's deferred gradient reduction
/// (weft::readGradientReduction); an error if the step returns partial sums
/// that no named function reduces.
using weft::GradientReduction;
llvm::Expected<GradientReduction> gradientReductionOf(mlir::func::FuncOp step);

/// Runs one training step of the partitioned `func` on the devices of its
/// weft.mesh (threads): each rank runs `func` on each micro-batch's inputs
/// and sums its results; the gradients the step returns as partial sums are
/// then reduced once by the function its weft.gradient_reduction names
/// (-weft-defer-gradient-reduction; with weft.reduce_every_micro_batch,
/// ZeRO-2 and 3, after each micro-batch, and the reduced blocks are summed).
/// Returns the summed results (loss and
/// gradients), assembled by their local shardings. `bytes` gets the bytes
/// each rank sent in the step.
///
/// With `optimizer`, each rank then runs the rank-local optimizer step
/// (-weft-build-optimizer=rank-local=true) on its blocks: an argument whose
/// `gradientOf` is >= 0 is the rank's (reduced, or with ZeRO scattered)
/// block of that result of the step, which is then not returned (an empty
/// tensor in its place); every other argument is cut from the whole value
/// in `inputs` by its weft.local_sharding. The optimizer step's results,
/// assembled by theirs, follow the step's.
struct MeshOptimizerStep {
  mlir::func::FuncOp function;
  std::vector<rt::HostTensor> inputs;
  std::vector<int> gradientOf;
};
/// What each rank held of the training state in a step, as the CPU runtime
/// allocates it (f32): the summed gradients (the accumulators the
/// micro-batches add into, before the step's reduction; under ZeRO-2 and 3
/// the reduced blocks), the parameters the optimizer step updates (its
/// blocks of the f32 weights) and their state (AdamW's exp_avg and
/// exp_avg_sq, SGD's momentum): the memory the cost model predicts as
/// gradients and optimizer (f32 master weights and moments).
struct HeldTrainingState {
  std::vector<int64_t> gradients, parameters, optimizer;
};
llvm::Expected<std::vector<rt::HostTensor>> runTrainingStepOnMeshDevices(
    mlir::ModuleOp module, mlir::func::FuncOp func,
    const std::vector<std::vector<rt::HostTensor>> &microBatches,
    const InterpreterOptions &base, int expectedDevices, double timeoutSeconds,
    std::vector<int64_t> &bytes, const MeshOptimizerStep *optimizer = nullptr,
    HeldTrainingState *held = nullptr);

/// One step a rank ran, in microseconds from the run's start.
struct TraceEvent {
  int rank;
  std::string name;     ///< the step as PipelineSchedule::str prints it
  std::string category; ///< compute or p2p
  double start, end;
};

/// Events as a Chrome-trace / Perfetto JSON timeline, one track per rank.
std::string chromeTrace(const std::vector<TraceEvent> &events, int ranks,
                        int stages);

/// Runs a module cut into pipeline stages, scheduled, and partitioned over a
/// mesh whose first axis is pp: the inputs (whole batches) are cut into the
/// module's m micro-batches, every rank runs its pipeline rank's steps
/// from the module's schedule (the plan's pp, v and m must be the
/// module's), stages
/// pass their values by point-to-point send and receive, and the outputs
/// are gathered from the stages that return them and joined. `bytes` gets
/// the bytes each rank sent (collectives and sends); `trace`, when given,
/// every step each rank ran.
llvm::Expected<std::vector<rt::HostTensor>>
runPipelineOnMeshDevices(mlir::ModuleOp module, const plan::Plan &plan,
                         const std::vector<rt::HostTensor> &inputs,
                         const InterpreterOptions &base, int expectedDevices,
                         double timeoutSeconds, std::vector<int64_t> &bytes,
                         std::vector<TraceEvent> *trace = nullptr);

/// The runtime's description of a pipelined module (everything but the
/// stage functions, which the caller provides: interpreted or compiled).
using codegen::pipelineProgram;
/// Gives `program`'s stage functions (forward, backward and weight-gradient
/// steps) as `info`'s functions interpreted on the rank that runs them.
void interpretStages(rt::PipelineProgram &program, const PipelineInfo &info,
                     const InterpreterOptions &base);

/// A pipelined module's optimizer steps, one per pipeline rank
/// (-weft-build-optimizer=rank-local=true: the functions with
/// weft.pipeline_rank), returned by pipeline rank, and in `steps` as the
/// runtime runs them, interpreted: each gradient argument names the
/// program's gradient it takes; the caller fills the other inputs. No
/// functions (and no steps) when the module has none.
llvm::Expected<std::vector<mlir::func::FuncOp>>
pipelineOptimizers(mlir::ModuleOp module, const rt::PipelineProgram &program,
                   const InterpreterOptions &base,
                   std::vector<rt::PipelineOptimizerStep> &steps);

/// The layout (mesh axes per dimension) of a partitioned function's
/// argument or result from its `weft.local_sharding` (replicated when null).
using codegen::layoutOf;

/// What `weft run` is asked.
struct RunRequest {
  std::string model; ///< .onnx, .onnxtxt or .mlir
  ModelOptions options;
  /// In the function's argument order; with options.loss, the labels last.
  std::vector<rt::HostTensor> inputs;
  /// Where each input came from, for errors (defaults to "input #N").
  std::vector<std::string> inputNames;
  /// Integer inputs of at most 64 elements, and scalars, become constants.
  bool foldSmallInputs = false;
  /// Partition under this plan and run on its devices.
  std::optional<plan::Plan> plan;
  /// > 0: the plan's device count, checked.
  int devices = 0;
  double collectiveTimeoutSeconds = 300;
  /// Write the partitioned module here.
  std::string dumpPartitioned;
  /// Count time and bytes per kernel kind (rt::Profiler; the caller prints).
  bool profile = false;
  /// Write each rank's steps here as a Chrome-trace JSON timeline (plans
  /// with pipeline stages).
  std::string tracePath;
};

struct RunOutcome {
  std::vector<rt::HostTensor> outputs;
  /// Bytes each rank sent (empty when unpartitioned).
  std::vector<int64_t> bytesSent;
  /// Seconds spent importing (or parsing) and preparing the module, and
  /// partitioning it under the plan: what precedes the run.
  double importSeconds = 0;
};

/// Imports (or parses), partitions when a plan is given, and runs.
llvm::Expected<RunOutcome> runModel(mlir::MLIRContext &context,
                                    const RunRequest &request);

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

/// What `weft compile` is asked.
struct CompileRequest {
  std::string model;
  ModelOptions options;
  plan::Plan plan;
  /// How the plan was given, for the generated source's header.
  std::string planOrigin;
  std::string target = "cpu"; ///< cpu or cuda
  std::string outputDir;
  /// Write into a non-empty directory that weft compile did not write.
  bool force = false;
  /// Configure and build the project with CMake.
  bool build = false;
  std::string runtimePrefix;
  /// The generated project's CMAKE_BUILD_TYPE for `build`.
  std::string buildType = "Release";
  std::string dumpPartitioned, dumpEmitted;
  /// A training program (weft compile --train): builds the training step,
  /// its gradient reduction and its optimizer step in the imported module,
  /// in place of partitioning it for a forward program, and completes the
  /// program's defaults from the model (what its labels are).
  std::function<llvm::Error(mlir::MLIRContext &, mlir::ModuleOp,
                            weft::TrainingProgramDefaults &)>
      buildTrainingStep;
  /// The training program's defaults and optimizer constants.
  weft::TrainingProgramDefaults training;
};

struct CompileOutcome {
  /// What was written (and built), as `weft compile` prints it.
  std::string summary;
  /// The built program (with build), else empty.
  std::string program;
};

llvm::Expected<CompileOutcome> compileModel(mlir::MLIRContext &context,
                                            const CompileRequest &request);

} // namespace driver
} // namespace weft

#endif // WEFT_DRIVER_DRIVER_H

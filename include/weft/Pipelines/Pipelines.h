//===- Pipelines.h - The pass pipelines Weft runs ---------------*- C++ -*-===//
//
// Part of the Weft project.
//
// The one definition of each pipeline: `weft import`/`run`/`compile`, the
// planner, weft-opt (as registered pipelines) and the C++ API all build their
// pass managers from these, so that the program the planner costs is built
// by the same passes as the program `weft compile` emits.
//
//   weft-prepare-model        fold, raise and mark layers (after import)
//   weft-partition-with-plan  apply a plan's degrees, propagate, partition
//   weft-prepare-cpu          what the CPU emitter needs (layers inlined)
//   weft-cuda-kernels         the kernels the GPU runs (fusions); the planner
//                             costs the program after this
//   weft-prepare-cuda         what the CUDA emitter needs (layers inlined,
//                             waits for collectives, buffers in an arena)
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PIPELINES_PIPELINES_H
#define WEFT_PIPELINES_PIPELINES_H

#include "weft/Passes/Passes.h"
#include "weft/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace weft {

/// The partition pipeline's options: the plan's degrees (also a plan written
/// out, `plan=dp=2,tp=2,sp=1`, or a plan file).
struct PartitionPipelineOptions
    : public mlir::PassPipelineOptions<PartitionPipelineOptions> {
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("Data-parallel degree"),
                     llvm::cl::init(1)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel degree"),
                     llvm::cl::init(1)};
  Option<int64_t> cp{*this, "cp",
                     llvm::cl::desc("Ring-attention (context) degree"),
                     llvm::cl::init(1)};
  Option<int64_t> ulysses{*this, "ulysses", llvm::cl::desc("Ulysses degree"),
                          llvm::cl::init(1)};
  Option<bool> sp{*this, "sp", llvm::cl::desc("Megatron sequence parallelism"),
                  llvm::cl::init(false)};
  Option<int64_t> gx{*this, "gx",
                     llvm::cl::desc("3-D tensor parallelism: the gx axis"),
                     llvm::cl::init(1)};
  Option<int64_t> gy{*this, "gy",
                     llvm::cl::desc("3-D tensor parallelism: the gy axis"),
                     llvm::cl::init(1)};
  Option<int64_t> gz{
      *this, "gz",
      llvm::cl::desc("3-D tensor parallelism: the gz (depth) axis"),
      llvm::cl::init(1)};
  Option<bool> loadBalance{
      *this, "load-balance",
      llvm::cl::desc("Ring attention with mirrored sequence chunks"),
      llvm::cl::init(true)};
  Option<std::string> cpComm{
      *this, "cp-comm",
      llvm::cl::desc("How cp exchanges K and V: ring or all-gather"),
      llvm::cl::init("ring")};
  Option<std::string> planFile{
      *this, "plan-file",
      llvm::cl::desc("A weft plan --json file (its first plan) or a Plan"),
      llvm::cl::init("")};
  Option<std::string> compress{
      *this, "compress",
      llvm::cl::desc("Compression policy, axis:codec pairs (dp:int8,tp:bf16)"),
      llvm::cl::init("")};
  Option<int64_t> zero{
      *this, "zero",
      llvm::cl::desc("ZeRO stage: 1, 2 and 3 reduce-scatter the gradients "
                     "(-weft-defer-gradient-reduction=scatter=true), 2 and 3 "
                     "after every micro-batch (every-micro-batch=true), 3 "
                     "stores the weights in blocks (-weft-shard-parameters)"),
      llvm::cl::init(0)};
};

/// The apply-plan options that carry `plan`'s degrees.
WeftApplyPlanOptions applyPlanOptions(const plan::Plan &plan);

/// -weft-split-stages's options for a plan's pipeline: its stages, chunks
/// per stage and layers per stage.
WeftSplitStagesOptions splitStagesOptions(const plan::Plan &plan);

/// After import: fold what exporters leave, raise decomposed forms to weft
/// ops, mark repeated layers.
/// With `explainRaise`, each softmax left unraised gets a remark naming the
/// op that stopped the attention match (`weft import --explain-raise`).
void buildPrepareModelPipeline(mlir::OpPassManager &pm,
                               bool explainRaise = false);

/// Applies a plan's degrees and partitions: unfuse fused projections, apply
/// the plan, propagate shardings, partition into the rank program (layers
/// kept), clean up collectives, canonicalize; with a compression policy
/// (plan::Plan::compress), set the collectives' codecs last.
void buildPartitionPipeline(mlir::OpPassManager &pm,
                            const WeftApplyPlanOptions &options,
                            llvm::StringRef compress = "", int zeroStage = 0);

/// What the CPU emitter prints: one flat function.
/// How a training step is built: weft train, weft compile --train and the
/// planner's count of a step's communication build it alike.
struct TrainingStepOptions {
  /// The compute type: f32, or bf16 / f16 from f32 weights
  /// (-weft-mixed-precision).
  std::string dtype = "f32";
  /// The loss's gradient is seeded with the step's last argument.
  bool scaleLoss = false;
  /// What backward recomputes of each layer: full, selective, op or none.
  std::string recompute = "full";
  /// A label that counts no loss.
  int64_t ignoreIndex = std::numeric_limits<int64_t>::min();
  /// Whether to record how a run fills the inputs (-weft-assign-feeds),
  /// and NAME=FILL for those whose names do not say. The planner, which
  /// counts a step but feeds it nothing, skips it.
  bool assignFeeds = true;
  std::vector<std::string> feeds;
  /// Each token attends within its packed document (-weft-document-mask,
  /// after the feeds: the model takes the document ids as one more input).
  bool documentMask = false;
  /// The optimizer step's rule (its rankLocal, storedOver and
  /// skipNonFinite follow the plan and scaleLoss). Its `freeze` also keeps
  /// the frozen parameters out of the backward (-weft-differentiate).
  WeftBuildOptimizerOptions optimizer;
  /// Whether the IR is verified after each pass (MLIR's default) or only
  /// by the caller, at the end: the planner builds a step for each plan it
  /// counts and verifies the result once.
  bool verifyEachPass = true;
};

/// The forward and its loss as a training step computes them, before the
/// backward: the model's own loss taken out (-weft-lift-model-loss), the
/// inputs' fills recorded, the compute type applied, and the mean
/// cross-entropy against the labels (a last argument) as the first result.
/// weft train evaluates held-out data with it.
mlir::LogicalResult buildEvaluationStep(mlir::MLIRContext &context,
                                        mlir::ModuleOp module,
                                        const TrainingStepOptions &options);

/// The loss (buildEvaluationStep), then (with pp > 1) the stages, the
/// backward, and the pipeline's schedule. `type` gets the model's function type
/// with the loss (its inputs: the model's, then the labels).
mlir::LogicalResult buildTrainingStep(mlir::MLIRContext &context,
                                      mlir::ModuleOp module,
                                      const plan::Plan &plan,
                                      const TrainingStepOptions &options,
                                      mlir::FunctionType &type);

/// The step partitioned under `plan` (when `partitioned`), its gradient
/// reduction, and the optimizer step: each rank's on its blocks when
/// partitioned, else one on whole tensors.
mlir::LogicalResult buildPartitionedStep(mlir::MLIRContext &context,
                                         mlir::ModuleOp module,
                                         const plan::Plan &plan,
                                         bool partitioned,
                                         const TrainingStepOptions &options);

void buildCpuTargetPipeline(mlir::OpPassManager &pm);

/// The kernels the CUDA backend runs: GEMM epilogues and elementwise chains
/// as weft.fusion ops (layers kept). The planner costs this program.
void buildCudaKernelPipeline(mlir::OpPassManager &pm);

/// What the CUDA emitter prints, after buildCudaKernelPipeline: one flat
/// function, a weft.wait where the computation waits for each collective,
/// and every tensor's place in the arena.
void buildCudaTargetPipeline(mlir::OpPassManager &pm);

/// Registers the pipelines with MLIR (weft-opt's -weft-partition-with-plan
/// and the others).
void registerWeftPipelines();

} // namespace weft

#endif // WEFT_PIPELINES_PIPELINES_H

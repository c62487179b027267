//===- TrainingProgram.h - What the training emitters share -----*- C++ -*-===//
//
// Part of the Weft project.
//
// A training module's three functions (the step, its gradient reduction, the
// optimizer step) and the parameters each rank holds, read once for both
// targets; where a step reads a held parameter; and the runtime's
// TrainingProgram literal (weft/runtime/Training.h) that the CPU and CUDA
// training programs print around their functions.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_LIB_CODEGEN_TRAININGPROGRAM_H
#define WEFT_LIB_CODEGEN_TRAININGPROGRAM_H

#include "weft/Codegen/CpuEmitter.h"
#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/Sharding.h"
#include "weft/runtime/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

#include <string>
#include <vector>

namespace weft::codegen {

/// A parameter the optimizer step updates: its position among the held
/// parameters, the block each rank holds (the optimizer step's layout), and
/// the file its initial value is written to (set when a step first reads
/// it).
struct HeldParameter {
  int index = 0;
  TensorSharding held;
  std::string file;
};

/// A training module's functions and its held parameters.
struct TrainingFunctions {
  mlir::func::FuncOp step, reduce, optimizer;
  /// The step's evaluation step (-weft-extract-evaluation), if any: the
  /// forward to the loss, with the step's arguments.
  mlir::func::FuncOp evaluate;
  /// The step's results that `reduce` takes as partial sums.
  std::vector<int> partial;
  llvm::StringMap<HeldParameter> held;
  /// The held parameters by index.
  std::vector<std::string> order;
  /// Per held parameter: the step's result that is its gradient.
  std::vector<int> gradientOf;
};

/// The module's training step, gradient reduction (if any) and optimizer
/// step, checked (one block, layers inlined, weights present), and the
/// parameters the optimizer step holds. Errors are diagnostics.
mlir::FailureOr<TrainingFunctions>
readTrainingFunctions(mlir::ModuleOp module, llvm::StringRef externalDir);

/// Where a function reads a held parameter: the weft.parameter and the
/// all_slices that cut it to the block the rank holds (`chain`, in order),
/// and that block (`value`, the chain's last result).
struct HeldRead {
  llvm::SmallVector<mlir::Operation *> chain;
  mlir::Value value;
  int index = 0;
};

/// The reads of held parameters in `body`. A parameter read first gets its
/// initial value written to `weightsDir` (numbered by `weightCounter`). A
/// read in another layout than the held block is an error at the parameter.
mlir::FailureOr<llvm::SmallVector<HeldRead>>
findHeldReads(mlir::Block &body, llvm::StringMap<HeldParameter> &held,
              llvm::StringRef weightsDir, llvm::StringRef externalDir,
              int &weightCounter);

/// Checks that the functions emitted read every held parameter (`order`);
/// the error is at `at`.
mlir::LogicalResult checkHeldRead(mlir::Operation *at,
                                  const std::vector<std::string> &order,
                                  const llvm::StringMap<HeldParameter> &held);
inline mlir::LogicalResult checkHeldRead(const TrainingFunctions &f) {
  return checkHeldRead(f.step, f.order, f.held);
}

/// `TrainingProgram makeProgram() {...}`: the three functions as
/// `function("trainingStep")`, `function("reduceGradients")` and
/// `function("optimizerStep")` print them, their layouts, the optimizer's
/// slots, the held parameters and the run's defaults.
std::string trainingProgramLiteral(
    mlir::ModuleOp module, const TrainingFunctions &functions,
    const TrainingProgramDefaults &defaults,
    llvm::function_ref<std::string(llvm::StringRef)> function);

/// A training module cut into pipeline stages: the pipeline as the runtime
/// runs it (read from the IR; its functions are the ones below, compiled),
/// per virtual stage its forward, backward and weight-gradient functions and
/// the gradient reductions of the last two, per pipeline rank its optimizer
/// step (-weft-build-optimizer=rank-local=true), and the parameters the
/// optimizer steps hold (a tied one by every pipeline rank whose stages read
/// it, in one layout).
struct PipelineTrainingFunctions {
  PipelineInfo info;
  rt::PipelineProgram pipeline;
  struct Stage {
    mlir::func::FuncOp forward, backward, weight, backwardReduce, weightReduce;
    /// -weft-extract-evaluation's: the forward in eval mode; null without.
    mlir::func::FuncOp evaluation;
  };
  std::vector<Stage> stages;
  /// The pipeline that evaluates held-out tokens (evaluationPipeline), if
  /// the module has one.
  std::optional<PipelineInfo> evaluation;
  std::vector<mlir::func::FuncOp> optimizers;
  llvm::StringMap<HeldParameter> held;
  std::vector<std::string> order;
  /// Per held parameter: its gradient's index in pipeline.gradientNames.
  std::vector<int> gradientOf;
};

/// Reads and checks a pipelined training module's functions. Errors are
/// diagnostics.
mlir::FailureOr<PipelineTrainingFunctions>
readPipelineTrainingFunctions(mlir::ModuleOp module, const PipelineInfo &info,
                              llvm::StringRef externalDir);

/// A function of a pipelined training module as the emitters print it: its
/// name in the program, and whether it reads the held parameters (a stage's
/// forward, backward and weight-gradient steps) or not (the reductions, the
/// optimizer steps).
struct PipelineFunction {
  mlir::func::FuncOp func;
  std::string name;
  bool readsHeld = false;
};
/// Every function of `functions`, in the order the emitters print them.
std::vector<PipelineFunction>
pipelineFunctions(const PipelineTrainingFunctions &functions);
/// The name of stage `k`'s reduction of its backward (`weight`: its
/// weight-gradient) step's partial gradients; empty without one.
std::string pipelineReduceName(const PipelineTrainingFunctions &functions,
                               size_t k, bool weight);

/// The name of virtual stage `k`'s function `piece` ("", "backward",
/// "weight", "backward_reduce", "weight_reduce") in a generated program.
std::string stageFunctionName(size_t k, llvm::StringRef piece = "");
/// The name of pipeline rank `s`'s optimizer step.
std::string pipelineOptimizerName(size_t s);

/// `PipelineProgram makePipeline()` (pipelineLiteral), with the module's
/// evaluation `PipelineProgram makeEvaluationPipeline()`, and
/// `TrainingProgram makeProgram() {...}` of a pipelined module: the stages'
/// functions as `function(name)` prints the names above, the optimizer
/// steps, the held parameters and the run's defaults.
std::string pipelineTrainingProgramLiteral(
    mlir::ModuleOp module, const PipelineTrainingFunctions &functions,
    const TrainingProgramDefaults &defaults,
    llvm::function_ref<std::string(llvm::StringRef)> function);

} // namespace weft::codegen

#endif // WEFT_LIB_CODEGEN_TRAININGPROGRAM_H

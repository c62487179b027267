//===- Pipeline.h - A module cut into pipeline stages, as read --*- C++ -*-===//
//
// Part of the Weft project.
//
// What a consumer of a pipelined module (-weft-split-stages, then
// -weft-schedule-pipeline) needs, read from its attributes once: the stage
// functions by virtual stage, how their arguments and results connect, and
// every pipeline rank's steps. The runner and the emitters read it here, so
// they run and print the same thing.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_PIPELINE_H
#define WEFT_DIALECT_PIPELINE_H

#include "weft/Planner/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>
#include <vector>

namespace weft {

struct PipelineStageInfo {
  mlir::func::FuncOp func;
  /// Per argument: the model input it is (>= 0) or -1 for a received value.
  std::vector<int> modelInput;
  /// Per result: the model output it is (>= 0), -1 for a sent value, or
  /// -2 - j for a value kept in slot j (weft.saved) for a later step.
  std::vector<int> modelOutput;
  /// A training step's (-weft-split-backward): the functions of the
  /// stage's backward and weight-gradient steps; null when absent.
  mlir::func::FuncOp backward, weight;
  /// -weft-extract-evaluation's: the forward in eval mode, which returns
  /// the non-saved results of `func`; null when absent.
  mlir::func::FuncOp evaluation;
};

struct PipelineInfo {
  int stages = 1, chunks = 1, microBatches = 1;
  std::string schedule;
  /// The codec of the stages' sends ("none", "bf16", "fp8", "int8").
  std::string codec = "none";
  /// By virtual stage.
  std::vector<PipelineStageInfo> virtualStages;
  /// By pipeline rank: each step and its name in the IR.
  std::vector<std::vector<std::pair<planner::PipelineStep, std::string>>> steps;
  /// -weft-extract-evaluation's: by pipeline rank, the forward steps an
  /// evaluation runs; empty when absent.
  std::vector<std::vector<std::pair<planner::PipelineStep, std::string>>>
      evaluationSteps;
};

/// The pipeline of `module`; nullopt if it is not cut into stages. A module
/// that is cut but not scheduled, or whose stages do not fit together, is
/// an error reported at the module (failure).
mlir::FailureOr<std::optional<PipelineInfo>>
readPipeline(mlir::ModuleOp module);

/// The pipeline that evaluates (-weft-extract-evaluation): `info` with the
/// stages' evaluation functions as its stages and its evaluation steps as
/// its schedule, and no backward; nullopt if `info` has none.
std::optional<PipelineInfo> evaluationPipeline(const PipelineInfo &info);

/// The dimension of a rank's block of a value passed between pipeline stages
/// that -weft-split-stage-sends cuts over `ways` tensor-parallel ranks: the
/// first of the inner dimensions (the sequence, then the hidden size), then
/// the batch, that `ways` divides; -1 to send it whole. The cost model asks
/// the same of the residual stream's [micro-batch, sequence, hidden] block.
int64_t stageSendCutDimension(llvm::ArrayRef<int64_t> shape, int64_t ways);

} // namespace weft

#endif // WEFT_DIALECT_PIPELINE_H

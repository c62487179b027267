//===- Pipeline.cpp - A module cut into pipeline stages, as read ----------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Pipeline.h"

#include "weft/Dialect/WeftDialect.h"

using namespace mlir;
using namespace weft;

static int64_t intEntry(DictionaryAttr dict, StringRef key) {
  auto value = dict ? dict.getAs<IntegerAttr>(key) : IntegerAttr();
  return value ? value.getInt() : -1;
}

/// The model inputs and outputs, sends, receives and kept values of
/// `stage.func`'s arguments and results.
static void connect(PipelineStageInfo &stage) {
  func::FuncOp func = stage.func;
  stage.modelInput.clear();
  stage.modelOutput.clear();
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto input = func.getArgAttrOfType<IntegerAttr>(
        i, WeftDialect::getModelInputAttrName());
    stage.modelInput.push_back(input ? int(input.getInt()) : -1);
  }
  for (unsigned o = 0; o < func.getNumResults(); ++o) {
    auto output = func.getResultAttrOfType<IntegerAttr>(
        o, WeftDialect::getModelOutputAttrName());
    auto saved = func.getResultAttrOfType<IntegerAttr>(
        o, WeftDialect::getSavedAttrName());
    stage.modelOutput.push_back(output  ? int(output.getInt())
                                : saved ? int(-2 - saved.getInt())
                                        : -1);
  }
}

std::optional<PipelineInfo> weft::evaluationPipeline(const PipelineInfo &info) {
  if (info.evaluationSteps.size() != info.steps.size())
    return std::nullopt;
  PipelineInfo evaluation = info;
  evaluation.steps = info.evaluationSteps;
  evaluation.evaluationSteps.clear();
  for (PipelineStageInfo &stage : evaluation.virtualStages) {
    if (!stage.evaluation)
      return std::nullopt;
    stage =
        PipelineStageInfo{stage.evaluation, {}, {}, nullptr, nullptr, nullptr};
    connect(stage);
  }
  return evaluation;
}

FailureOr<std::optional<PipelineInfo>> weft::readPipeline(ModuleOp module) {
  auto pipeline =
      module->getAttrOfType<DictionaryAttr>(WeftDialect::getPipelineAttrName());
  if (!pipeline)
    return std::optional<PipelineInfo>();
  PipelineInfo info;
  info.stages = int(intEntry(pipeline, "stages"));
  info.chunks = int(intEntry(pipeline, "chunks"));
  info.microBatches = int(intEntry(pipeline, "micro_batches"));
  auto steps = pipeline.getAs<ArrayAttr>("steps");
  auto schedule = pipeline.getAs<StringAttr>("schedule");
  if (info.stages < 1 || info.chunks < 1 || info.microBatches < 1 || !steps ||
      !schedule || int64_t(steps.size()) != info.stages)
    return module.emitError(
        "the module is cut into pipeline stages but has no schedule; run "
        "-weft-schedule-pipeline");
  info.schedule = schedule.str();
  if (auto codec = pipeline.getAs<StringAttr>("codec"))
    info.codec = codec.str();
  auto evaluationSteps = pipeline.getAs<ArrayAttr>("evaluation_steps");
  for (auto [lists, to] :
       {std::make_pair(steps, &info.steps),
        std::make_pair(evaluationSteps, &info.evaluationSteps)}) {
    if (!lists)
      continue;
    for (Attribute list : lists) {
      auto &mine = to->emplace_back();
      for (Attribute entry : cast<ArrayAttr>(list)) {
        std::string name = cast<StringAttr>(entry).str();
        std::optional<planner::PipelineStep> step =
            planner::parseStepName(name);
        if (!step)
          return module.emitError(
                     "the pipeline schedule has a malformed step '")
                 << name << "'";
        mine.emplace_back(*step, name);
      }
    }
  }
  info.virtualStages.resize(size_t(info.stages) * info.chunks);
  for (auto func : module.getOps<func::FuncOp>()) {
    auto at = func->getAttrOfType<DictionaryAttr>(
        WeftDialect::getPipelineStageAttrName());
    int64_t k = intEntry(at, "stage");
    if (!at)
      continue;
    if (k < 0 || k >= int64_t(info.virtualStages.size()))
      return func.emitError("pipeline stage ")
             << k << " is outside the module's " << info.virtualStages.size()
             << " virtual stages";
    PipelineStageInfo &stage = info.virtualStages[size_t(k)];
    auto role = at.getAs<StringAttr>("role");
    if (role && role.getValue() == "evaluation") {
      stage.evaluation = func;
      continue;
    }
    if (role && role.getValue() != "forward") {
      (role.getValue() == "backward" ? stage.backward : stage.weight) = func;
      continue;
    }
    stage.func = func;
    connect(stage);
  }
  for (size_t k = 0; k < info.virtualStages.size(); ++k)
    if (!info.virtualStages[k].func)
      return module.emitError("the module has no function for pipeline "
                              "stage ")
             << k;
  return std::optional<PipelineInfo>(std::move(info));
}

int64_t weft::stageSendCutDimension(llvm::ArrayRef<int64_t> shape,
                                    int64_t ways) {
  if (shape.size() < 2 || ways <= 1)
    return -1;
  for (size_t d = 1; d <= shape.size(); ++d) {
    size_t dim = d % shape.size(); // 1, 2, ..., then 0
    if (shape[dim] > 0 && shape[dim] % ways == 0)
      return int64_t(dim);
  }
  return -1;
}

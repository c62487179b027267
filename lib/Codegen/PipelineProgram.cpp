//===- PipelineProgram.cpp - A pipelined module as the runtime runs it ----===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Codegen/PipelineProgram.h"

#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

using namespace mlir;
using namespace weft;

rt::Layout codegen::layoutOf(Attribute localSharding, int64_t rank) {
  rt::Layout layout(rank);
  auto attr = dyn_cast_or_null<ShardingAttr>(localSharding);
  if (!attr)
    return layout;
  TensorSharding s = fromAttr(attr);
  for (size_t d = 0; d < s.dims.size() && d < layout.size(); ++d)
    layout[d].assign(s.dims[d].begin(), s.dims[d].end());
  return layout;
}

/// Where each argument and result of a partitioned function sits on the
/// mesh.
void codegen::layoutsOf(func::FuncOp func, std::vector<rt::Layout> &args,
                        std::vector<rt::Layout> &results) {
  FunctionType type = func.getFunctionType();
  for (unsigned i = 0; i < type.getNumInputs(); ++i)
    args.push_back(codegen::layoutOf(
        func.getArgAttr(i, WeftDialect::getLocalShardingAttrName()),
        cast<RankedTensorType>(type.getInput(i)).getRank()));
  for (unsigned o = 0; o < type.getNumResults(); ++o)
    results.push_back(codegen::layoutOf(
        func.getResultAttr(o, WeftDialect::getLocalShardingAttrName()),
        cast<RankedTensorType>(type.getResult(o)).getRank()));
}

llvm::Expected<rt::PipelineProgram>
codegen::pipelineProgram(ModuleOp module, const PipelineInfo &info) {
  std::optional<MeshInfo> meshInfo = getMeshInfo(module);
  if (!meshInfo || meshInfo->axes.empty() || meshInfo->axes.front() != "pp" ||
      meshInfo->sizes.front() != info.stages)
    return llvm::createStringError(
        "a pipelined module's mesh must have its pp axis first");
  rt::PipelineProgram program;
  program.mesh.axes.assign(meshInfo->axes.begin(), meshInfo->axes.end());
  program.mesh.shape.assign(meshInfo->sizes.begin(), meshInfo->sizes.end());
  program.stages = info.stages;
  program.chunks = info.chunks;
  program.microBatches = info.microBatches;
  program.codec = rt::parseCodec(info.codec).value_or(rt::Codec::None);
  llvm::StringMap<int> gradientIndex;
  for (const PipelineStageInfo &from : info.virtualStages) {
    func::FuncOp func = from.func;
    if (func->hasAttr(WeftDialect::getLoadBalancedAttrName()))
      program.mesh.zigzagAxis = "cp";
    rt::PipelineStage &stage = program.virtualStages.emplace_back();
    stage.modelInput = from.modelInput;
    stage.modelOutput = from.modelOutput;
    layoutsOf(func, stage.argLayouts, stage.resultLayouts);
    // The forward's sent float values, by result: the index of each one's
    // gradient among those the next stage sends back.
    std::map<unsigned, int> cotangentIndex;
    for (unsigned o = 0; o < func.getNumResults(); ++o)
      if (from.modelOutput[o] == -1 &&
          isa<FloatType>(getElementTypeOrSelf(func.getResultTypes()[o])))
        cotangentIndex.emplace(o, int(cotangentIndex.size()));
    auto step = [&](func::FuncOp piece,
                    rt::PipelineStepFunction &to) -> llvm::Error {
      if (!piece)
        return llvm::Error::success();
      layoutsOf(piece, to.argLayouts, to.resultLayouts);
      int sentBack = 0;
      for (unsigned i = 0; i < piece.getNumArguments(); ++i) {
        auto attr = [&](StringRef name) {
          return piece.getArgAttrOfType<IntegerAttr>(i, name);
        };
        if (auto input = attr(WeftDialect::getModelInputAttrName()))
          to.args.push_back({rt::PipelineRef::Input, int(input.getInt())});
        else if (auto saved = attr(WeftDialect::getSavedAttrName()))
          to.args.push_back({rt::PipelineRef::Saved, int(saved.getInt())});
        else if (auto of = attr(WeftDialect::getCotangentOfAttrName());
                 of && cotangentIndex.count(unsigned(of.getInt())))
          to.args.push_back({rt::PipelineRef::Cotangent,
                             cotangentIndex[unsigned(of.getInt())]});
        else
          return llvm::createStringError(
              "argument #" + llvm::Twine(i) + " of @" + piece.getSymName() +
              " is not a model input, a kept value or the gradient of a "
              "value the stage sends");
      }
      for (unsigned o = 0; o < piece.getNumResults(); ++o) {
        if (auto saved = piece.getResultAttrOfType<IntegerAttr>(
                o, WeftDialect::getSavedAttrName())) {
          to.results.push_back({rt::PipelineRef::Saved, int(saved.getInt())});
        } else if (piece.getResultAttr(o,
                                       WeftDialect::getGradientToAttrName())) {
          to.results.push_back({rt::PipelineRef::GradientSent, sentBack++});
        } else if (auto name = piece.getResultAttrOfType<StringAttr>(
                       o, WeftDialect::getGradientOfAttrName())) {
          auto [it, added] = gradientIndex.try_emplace(
              name.getValue(), int(program.gradientNames.size()));
          if (added)
            program.gradientNames.push_back(name.str());
          to.results.push_back({rt::PipelineRef::Gradient, it->second});
        } else {
          return llvm::createStringError(
              "result #" + llvm::Twine(o) + " of @" + piece.getSymName() +
              " is not a kept value, a gradient sent back or a parameter's "
              "gradient");
        }
      }
      // The gradients it returns as partial sums, reduced once per step.
      std::string why;
      FailureOr<GradientReduction> deferred = readGradientReduction(piece, why);
      if (failed(deferred))
        return llvm::createStringError(why);
      to.partial = deferred->partial;
      to.everyMicroBatch = deferred->everyMicroBatch;
      to.reduceBlock = deferred->block;
      return llvm::Error::success();
    };
    if (llvm::Error error = step(from.backward, stage.backward))
      return error;
    if (llvm::Error error = step(from.weight, stage.weight))
      return error;
  }
  for (const auto &steps : info.steps) {
    std::vector<rt::PipelineStep> &mine = program.steps.emplace_back();
    for (const auto &[step, name] : steps)
      mine.push_back({rt::PipelineStep::Kind(step.kind), step.microBatch,
                      step.chunk, step.peer, name, step.gradient});
  }
  return program;
}

//===- Training.cpp - What a training step's IR says about itself ---------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Training.h"

#include "weft/Dialect/WeftOps.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace weft;

FailureOr<GradientReduction> weft::readGradientReduction(func::FuncOp step,
                                                         std::string &why) {
  GradientReduction found;
  auto ref = step->getAttrOfType<FlatSymbolRefAttr>(
      WeftDialect::getGradientReductionAttrName());
  auto module = step->getParentOfType<ModuleOp>();
  if (ref && module)
    found.function = module.lookupSymbol<func::FuncOp>(ref);
  for (unsigned o = 0; o < step.getNumResults(); ++o)
    if (auto local = step.getResultAttrOfType<ShardingAttr>(
            o, WeftDialect::getLocalShardingAttrName()))
      if (!local.getPartialAxes().empty())
        found.partial.push_back(int(o));
  found.everyMicroBatch =
      step->hasAttr(WeftDialect::getReduceEveryMicroBatchAttrName());
  if (auto block = step->getAttrOfType<IntegerAttr>(
          WeftDialect::getMicroBatchBlockAttrName()))
    found.block = int(block.getInt());
  if (!found.partial.empty() &&
      (!found.function ||
       found.function.getNumArguments() != found.partial.size())) {
    why = "@" + step.getSymName().str() + " returns " +
          std::to_string(found.partial.size()) +
          " partial gradients but names no function that reduces them all "
          "(weft.gradient_reduction)";
    return failure();
  }
  return found;
}

llvm::StringMap<SmallVector<std::string, 2>>
weft::storedParameterAxes(ModuleOp module) {
  llvm::StringMap<SmallVector<std::string, 2>> stored;
  module.walk([&](ParameterOp param) {
    auto axes =
        param->getAttrOfType<ArrayAttr>(WeftDialect::getStoredOverAttrName());
    if (!axes)
      return;
    auto [entry, added] = stored.try_emplace(param.getName());
    if (added)
      for (StringRef axis : axes.getAsValueRange<StringAttr>())
        entry->second.push_back(axis.str());
  });
  return stored;
}

OptimizerSlot weft::optimizerSlotOf(DictionaryAttr slot) {
  auto role = slot ? slot.getAs<StringAttr>("role") : StringAttr();
  auto parameter = slot ? slot.getAs<StringAttr>("parameter") : StringAttr();
  return {role ? role.getValue().str() : "",
          parameter ? parameter.getValue().str() : ""};
}

OptimizerSlot weft::optimizerArgumentSlot(func::FuncOp optimizer, unsigned i) {
  return optimizerSlotOf(optimizer.getArgAttrOfType<DictionaryAttr>(
      i, WeftDialect::getOptimizerSlotAttrName()));
}

OptimizerSlot weft::optimizerResultSlot(func::FuncOp optimizer, unsigned i) {
  return optimizerSlotOf(optimizer.getResultAttrOfType<DictionaryAttr>(
      i, WeftDialect::getOptimizerSlotAttrName()));
}

std::vector<std::string> weft::trainingFeeds(ModuleOp module) {
  std::vector<std::string> feeds;
  if (auto list =
          module->getAttrOfType<ArrayAttr>(WeftDialect::getFeedsAttrName()))
    for (Attribute feed : list.getValue())
      feeds.push_back(cast<StringAttr>(feed).getValue().str());
  return feeds;
}

bool weft::returnsGradients(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>())
    for (unsigned r = 0; r < func.getNumResults(); ++r)
      if (func.getResultAttr(r, WeftDialect::getGradientOfAttrName()))
        return true;
  return false;
}

int weft::tokensInput(ModuleOp module) {
  std::vector<std::string> feeds = trainingFeeds(module);
  auto it = llvm::find(feeds, "tokens");
  return it == feeds.end() ? 0 : int(it - feeds.begin());
}

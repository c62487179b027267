//===- WeftExtractEvaluation.cpp - A training step's evaluation step ------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"
#include "weft/Planner/PipelineSchedule.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"

namespace weft {
#define GEN_PASS_DEF_WEFTEXTRACTEVALUATION
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

/// Erases every op of `body` that the terminator does not read, directly or
/// through the values it reads (ops in nested regions count as reads of the
/// values they use from outside).
void keepWhatTheResultsRead(Block &body) {
  llvm::DenseSet<Value> live;
  auto markReads = [&](Operation *op) {
    op->walk([&](Operation *inner) {
      for (Value operand : inner->getOperands())
        live.insert(operand);
    });
  };
  SmallVector<Operation *> dead;
  for (Operation &op : llvm::reverse(body)) {
    bool needed = &op == body.getTerminator() ||
                  llvm::any_of(op.getResults(),
                               [&](Value r) { return live.contains(r); });
    if (needed)
      markReads(&op);
    else
      dead.push_back(&op);
  }
  // (In reverse order: an op goes after the ops that read it.)
  for (Operation *op : dead) {
    op->dropAllUses();
    op->erase();
  }
}

/// `func` in eval mode, as `name`: it returns its results `keep` alone
/// (with their attributes), dropout is the identity (PyTorch's eval mode),
/// and what those results do not read is erased. Its discardable attributes
/// are dropped except those named in `kept`.
func::FuncOp evaluationClone(func::FuncOp func, StringRef name,
                             ArrayRef<unsigned> keep,
                             ArrayRef<StringRef> kept) {
  func::FuncOp evaluation = func.clone();
  evaluation.setSymName(name);
  // What says how to run the step (its gradient reduction, ...) is not
  // the evaluation's: it keeps its arguments' attributes (feeds, the loss
  // scale) and its kept results'.
  for (NamedAttribute attr : llvm::to_vector(evaluation->getDiscardableAttrs()))
    if (!llvm::is_contained(kept, attr.getName().getValue()))
      evaluation->removeDiscardableAttr(attr.getName());
  Block &body = evaluation.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> results;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  for (unsigned r : keep) {
    results.push_back(ret.getOperand(r));
    types.push_back(results.back().getType());
    DictionaryAttr dict = evaluation.getResultAttrDict(r);
    attrs.push_back(dict ? dict : DictionaryAttr::get(func.getContext()));
  }
  OpBuilder b(ret);
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  evaluation.setType(FunctionType::get(func.getContext(),
                                       evaluation.getArgumentTypes(), types));
  evaluation.setAllResultAttrs(attrs);
  evaluation.walk([](DropoutOp dropout) {
    dropout.getResult().replaceAllUsesWith(dropout.getInput());
    dropout.erase();
  });
  keepWhatTheResultsRead(body);
  return evaluation;
}

struct WeftExtractEvaluation
    : public weft::impl::WeftExtractEvaluationBase<WeftExtractEvaluation> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module->hasAttr(WeftDialect::getPipelineAttrName()))
      return extractFromStages(module);
    func::FuncOp step;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func->hasAttr(WeftDialect::getEvaluationStepAttrName()))
        return; // already extracted
      if (!step && !func.isExternal() &&
          !func->hasAttr(WeftDialect::getOptimizerAttrName()))
        step = func;
    }
    if (!step) {
      module.emitError("-weft-extract-evaluation needs a training step");
      return signalPassFailure();
    }
    if (!step.getBody().hasOneBlock()) {
      step.emitError("the evaluation step is extracted from a step of one "
                     "block; this one has ")
          << step.getBody().getBlocks().size();
      return signalPassFailure();
    }
    auto loss = step.getNumResults()
                    ? dyn_cast<RankedTensorType>(step.getResultTypes()[0])
                    : RankedTensorType();
    if (!loss || loss.getRank() != 0 ||
        !isa<FloatType>(loss.getElementType())) {
      step.emitError("the evaluation step returns the training step's loss, "
                     "its first result, a float scalar; this step's first "
                     "result is ")
          << (step.getNumResults() ? step.getResultTypes()[0] : Type());
      return signalPassFailure();
    }
    func::FuncOp evaluation = evaluationClone(
        step, (step.getSymName() + "_evaluation").str(), {0}, {});
    evaluation->setAttr(WeftDialect::getEvaluationStepAttrName(),
                        UnitAttr::get(&getContext()));
    SymbolTable(module).insert(evaluation, std::next(Block::iterator(step)));
  }

  /// A training step cut into pipeline stages: each stage's forward in eval
  /// mode, and the schedule's forward steps as the evaluation's schedule.
  void extractFromStages(ModuleOp module) {
    auto pipeline = module->getAttrOfType<DictionaryAttr>(
        WeftDialect::getPipelineAttrName());
    if (pipeline.get("evaluation_steps"))
      return; // already extracted
    auto steps = pipeline.getAs<ArrayAttr>("steps");
    if (!steps) {
      module.emitError("-weft-extract-evaluation: the pipeline has no "
                       "schedule; run -weft-schedule-pipeline first");
      return signalPassFailure();
    }
    // By virtual stage: its forward (the function without a role, or the
    // role "forward").
    SmallVector<func::FuncOp> forwards;
    for (auto func : module.getOps<func::FuncOp>()) {
      auto stage = func->getAttrOfType<DictionaryAttr>(
          WeftDialect::getPipelineStageAttrName());
      auto role = stage ? stage.getAs<StringAttr>("role") : StringAttr();
      if (stage && (!role || role.getValue() == "forward"))
        forwards.push_back(func);
    }
    if (!returnsGradients(module)) {
      module.emitError("-weft-extract-evaluation needs a training step: no "
                       "stage of this pipeline returns a gradient");
      return signalPassFailure();
    }
    for (func::FuncOp forward : forwards) {
      if (!forward.getBody().hasOneBlock()) {
        forward.emitError("the evaluation step is extracted from stages of "
                          "one block; this one has ")
            << forward.getBody().getBlocks().size();
        return signalPassFailure();
      }
      // What it sends on and the model's outputs (the loss); not what it
      // keeps for its backward.
      SmallVector<unsigned> keep;
      for (unsigned r = 0; r < forward.getNumResults(); ++r)
        if (!forward.getResultAttr(r, WeftDialect::getSavedAttrName()))
          keep.push_back(r);
      func::FuncOp evaluation = evaluationClone(
          forward, (forward.getSymName() + "_evaluation").str(), keep,
          {WeftDialect::getPipelineStageAttrName(),
           WeftDialect::getLoadBalancedAttrName()});
      NamedAttrList stage(evaluation->getAttrOfType<DictionaryAttr>(
          WeftDialect::getPipelineStageAttrName()));
      stage.set("role", StringAttr::get(&getContext(), "evaluation"));
      evaluation->setAttr(WeftDialect::getPipelineStageAttrName(),
                          stage.getDictionary(&getContext()));
      SymbolTable(module).insert(evaluation,
                                 std::next(Block::iterator(forward)));
    }
    // Each pipeline rank's forward steps, in the schedule's order: its
    // forwards and the sends and receives of activations (a subsequence of
    // a schedule that runs, so it runs).
    Builder b(&getContext());
    SmallVector<Attribute> ranks;
    for (Attribute list : steps) {
      SmallVector<Attribute> names;
      for (Attribute entry : cast<ArrayAttr>(list)) {
        std::optional<planner::PipelineStep> step =
            planner::parseStepName(cast<StringAttr>(entry).str());
        if (step && planner::isForwardStep(*step))
          names.push_back(entry);
      }
      ranks.push_back(b.getArrayAttr(names));
    }
    NamedAttrList entries(pipeline);
    entries.set("evaluation_steps", b.getArrayAttr(ranks));
    module->setAttr(WeftDialect::getPipelineAttrName(),
                    entries.getDictionary(&getContext()));
  }
};

} // namespace

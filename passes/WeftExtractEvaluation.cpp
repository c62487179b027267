//===- WeftExtractEvaluation.cpp - A training step's evaluation step ------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

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

struct WeftExtractEvaluation
    : public weft::impl::WeftExtractEvaluationBase<WeftExtractEvaluation> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
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
    if (module->hasAttr(WeftDialect::getPipelineAttrName())) {
      module.emitError("a pipeline's stages have no evaluation step yet");
      return signalPassFailure();
    }

    func::FuncOp evaluation = step.clone();
    evaluation.setSymName((step.getSymName() + "_evaluation").str());
    // What says how to run the step (its gradient reduction, ...) is not
    // the evaluation's: it keeps its arguments' attributes (feeds, the loss
    // scale) and the first result's.
    for (NamedAttribute attr :
         llvm::to_vector(evaluation->getDiscardableAttrs()))
      evaluation->removeDiscardableAttr(attr.getName());
    evaluation->setAttr(WeftDialect::getEvaluationStepAttrName(),
                        UnitAttr::get(&getContext()));
    Block &body = evaluation.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Value result = ret.getOperand(0);
    OpBuilder b(ret);
    func::ReturnOp::create(b, ret.getLoc(), result);
    ret.erase();
    DictionaryAttr resultAttrs = evaluation.getResultAttrDict(0);
    evaluation.setType(FunctionType::get(
        &getContext(), evaluation.getArgumentTypes(), {result.getType()}));
    evaluation.setAllResultAttrs(ArrayRef<DictionaryAttr>{
        resultAttrs ? resultAttrs : DictionaryAttr::get(&getContext())});
    // Eval mode: dropout keeps every element.
    evaluation.walk([](DropoutOp dropout) {
      dropout.getResult().replaceAllUsesWith(dropout.getInput());
      dropout.erase();
    });
    keepWhatTheResultsRead(body);
    SymbolTable(module).insert(evaluation, std::next(Block::iterator(step)));
  }
};

} // namespace

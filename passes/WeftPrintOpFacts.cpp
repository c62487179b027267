//===- WeftPrintOpFacts.cpp - Report sharding rules and costs -------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

namespace weft {
#define GEN_PASS_DEF_WEFTPRINTOPFACTS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;

namespace {
struct WeftPrintOpFacts
    : public weft::impl::WeftPrintOpFactsBase<WeftPrintOpFacts> {
  void runOnOperation() override {
    getOperation()->walk([](Operation *op) {
      auto ruleOp = dyn_cast<weft::ShardingRuleOpInterface>(op);
      auto costOp = dyn_cast<weft::CostOpInterface>(op);
      auto collective = dyn_cast<weft::CollectiveOpInterface>(op);
      if (!ruleOp && !costOp)
        return;
      InFlightDiagnostic remark = op->emitRemark();
      if (ruleOp)
        remark << "sharding rule " << ruleOp.getShardingRule().str();
      if (ruleOp && costOp)
        remark << "; ";
      if (costOp) {
        weft::OpCost cost = costOp.getCost();
        remark << "cost: " << static_cast<int64_t>(cost.flops) << " flops, "
               << cost.bytesRead << " bytes read, " << cost.bytesWritten
               << " bytes written";
      }
      if (op->hasTrait<weft::OpTrait::Elementwise>())
        remark << "; elementwise";
      if (auto differentiable = dyn_cast<weft::DifferentiableOpInterface>(op)) {
        SmallVector<weft::SavedTensor> saved;
        differentiable.getSavedForBackward(saved);
        remark << "; backward saves ";
        if (saved.empty())
          remark << "nothing";
        for (auto [i, tensor] : llvm::enumerate(saved)) {
          remark << (i ? ", " : "");
          if (auto result = dyn_cast<OpResult>(tensor.value);
              result && result.getOwner() == op)
            remark << "result #" << result.getResultNumber();
          else
            for (OpOperand &use : op->getOpOperands())
              if (use.get() == tensor.value) {
                remark << "operand #" << use.getOperandNumber();
                break;
              }
          if (tensor.maskOnly)
            remark << " (a 1-byte mask)";
          if (tensor.rowStatistics)
            remark << " (an f32 per row)";
        }
        weft::BackwardCost backward = differentiable.estimateBackwardCost(
            op->getOperandTypes(), op->getResultTypes());
        remark << ", costs "
               << static_cast<int64_t>(backward.inputGradient.flops)
               << " flops for inputs and "
               << static_cast<int64_t>(backward.weightGradient.flops)
               << " for weights";
        if (differentiable.isAttentionCore())
          remark << "; attention core";
        // What each float operand's gradient reads (for a weight: what a
        // weight-gradient step reads).
        auto describe = [&](Value value) -> std::string {
          if (auto result = dyn_cast<OpResult>(value);
              result && result.getOwner() == op)
            return "result #" + std::to_string(result.getResultNumber());
          for (OpOperand &use : op->getOpOperands())
            if (use.get() == value)
              return "operand #" + std::to_string(use.getOperandNumber());
          return "a value inside";
        };
        bool first = true;
        for (OpOperand &operand : op->getOpOperands()) {
          auto type = dyn_cast<RankedTensorType>(operand.get().getType());
          if (!type || !isa<FloatType>(type.getElementType()))
            continue;
          SmallVector<weft::GradientRead> reads;
          differentiable.getGradientReads(operand.getOperandNumber(), reads);
          remark << (first ? "; gradient of " : "; of ") << "operand #"
                 << operand.getOperandNumber() << " reads ";
          first = false;
          for (auto [i, read] : llvm::enumerate(reads)) {
            remark << (i ? ", " : "");
            if (read.kind == weft::GradientRead::ResultGradient)
              remark << "the gradient of " << describe(read.value);
            else if (read.kind == weft::GradientRead::Computed)
              remark << "a tensor it computes like " << describe(read.value);
            else
              remark << describe(read.value);
          }
        }
      }
      if (collective) {
        int64_t group = collective.getGroupSize();
        remark << "; "
               << weft::stringifyCollectiveKind(collective.getCollectiveKind())
               << " over a group of " << group << ": "
               << collective.getBytesSent(group) << " bytes sent per rank";
      }
    });
  }
};
} // namespace

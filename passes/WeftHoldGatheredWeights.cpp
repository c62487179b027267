//===- WeftHoldGatheredWeights.cpp - ZeroPP's blockwise gathers -----------===//
//
// Part of the Weft project.
//
// ZeroPP runs a pipeline's micro-batches in blocks: a stage gathers its
// stored weights once per block and reduces the block's summed gradients
// once. This pass marks a stage's weight gathers `hold N` and its deferred
// per-micro-batch reduction weft.micro_batch_block = N, which the runners
// and the planner's count of the step read.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace weft {
#define GEN_PASS_DEF_WEFTHOLDGATHEREDWEIGHTS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftHoldGatheredWeightsPass
    : public weft::impl::WeftHoldGatheredWeightsBase<
          WeftHoldGatheredWeightsPass> {
  using WeftHoldGatheredWeightsBase::WeftHoldGatheredWeightsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (block < 1) {
      module.emitError("-weft-hold-gathered-weights: block must be at least "
                       "1, got ")
          << int64_t(block);
      return signalPassFailure();
    }
    if (block == 1)
      return;
    Builder builder(module.getContext());
    IntegerAttr n = builder.getI64IntegerAttr(block);
    for (auto func : module.getOps<func::FuncOp>()) {
      if (!func->hasAttr(WeftDialect::getPipelineStageAttrName()))
        continue;
      func.walk([&](AllGatherOp gather) {
        if (isWeightBlock(gather.getInput()))
          gather.setHoldAttr(n);
      });
      if (func->hasAttr(WeftDialect::getReduceEveryMicroBatchAttrName()))
        func->setAttr(WeftDialect::getMicroBatchBlockAttrName(), n);
    }
  }
};
} // namespace

//===- WeftCanonicalize.cpp - Fold weft ops to a fixed point --------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace weft {
#define GEN_PASS_DEF_WEFTCANONICALIZE
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;

namespace {
struct WeftCanonicalize
    : public weft::impl::WeftCanonicalizeBase<WeftCanonicalize> {
  using Base::Base;

  LogicalResult initialize(MLIRContext *context) override {
    RewritePatternSet set(context);
    auto *dialect = context->getLoadedDialect<weft::WeftDialect>();
    for (RegisteredOperationName op : context->getRegisteredOperations())
      if (&op.getDialect() == dialect)
        op.getCanonicalizationPatterns(set, context);
    patterns = FrozenRewritePatternSet(std::move(set));
    return success();
  }

  void runOnOperation() override {
    GreedyRewriteConfig config;
    config.setMaxIterations(maxIterations);
    // Folds and dead ops only: merging blocks and dropping block arguments
    // is not what this pass promises (and costs a walk of every region).
    config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(applyPatternsGreedily(getOperation(), patterns, config))) {
      getOperation()->emitWarning()
          << "weft-canonicalize did not reach a fixed point in "
          << maxIterations << " iterations";
    }
  }

  FrozenRewritePatternSet patterns;
};
} // namespace

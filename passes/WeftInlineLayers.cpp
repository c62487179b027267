//===- WeftInlineLayers.cpp - Layers into their function ------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

namespace weft {
#define GEN_PASS_DEF_WEFTINLINELAYERS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftInlineLayers
    : public weft::impl::WeftInlineLayersBase<WeftInlineLayers> {
  void runOnOperation() override {
    SmallVector<LayerOp> layers;
    getOperation().walk([&](LayerOp layer) { layers.push_back(layer); });
    // Inner layers first (a walk is post-order), so that an outer body is
    // flat when it is cloned.
    for (LayerOp layer : layers) {
      IRMapping map;
      Block &body = layer.getBody().front();
      map.map(body.getArguments(), layer.getInputs());
      OpBuilder b(layer);
      for (Operation &op : body.without_terminator())
        b.clone(op, map);
      auto yield = cast<YieldOp>(body.getTerminator());
      for (auto [result, value] :
           llvm::zip(layer.getResults(), yield.getValues()))
        result.replaceAllUsesWith(map.lookupOrDefault(value));
      layer.erase();
    }
  }
};
} // namespace

//===- WeftDecomposeAttention.cpp - Attention as Megatron's unfused path --===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <limits>

namespace weft {
#define GEN_PASS_DEF_WEFTDECOMPOSEATTENTION
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftDecomposeAttention
    : public weft::impl::WeftDecomposeAttentionBase<WeftDecomposeAttention> {
  void runOnOperation() override {
    SmallVector<AttentionOp> attentions;
    getOperation().walk([&](AttentionOp op) { attentions.push_back(op); });
    for (AttentionOp op : attentions)
      decompose(op);
  }

  static void decompose(AttentionOp op) {
    OpBuilder b(op);
    Value out = buildDecomposedAttention(b, op);
    op.getResult().replaceAllUsesWith(out);
    op.erase();
  }
};
} // namespace

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
    SmallVector<AttentionGradOp> gradients;
    getOperation().walk([&](Operation *op) {
      if (auto attention = dyn_cast<AttentionOp>(op))
        attentions.push_back(attention);
      // (With positions or the forward's statistics, a ring's partition:
      // left fused, as its forward steps, weft.attention_block, are.)
      else if (auto grad = dyn_cast<AttentionGradOp>(op);
               grad && !grad.getQPositions() && !grad.getOut())
        gradients.push_back(grad);
    });
    for (AttentionOp op : attentions)
      decompose(op);
    for (AttentionGradOp op : gradients)
      if (failed(decompose(op)))
        return signalPassFailure();
  }

  static void decompose(AttentionOp op) {
    OpBuilder b(op);
    Value out = buildDecomposedAttention(b, op);
    op.getResult().replaceAllUsesWith(out);
    op.erase();
  }

  /// The gradient as Megatron's unfused path computes it: the decomposed
  /// attention of the same operands, recomputed and differentiated.
  static LogicalResult decompose(AttentionGradOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    // One tensor read as two operands (keys that are also the values) is
    // differentiated as two values, so that each result is its own operand's
    // gradient (the reshape to its own shape folds away).
    Value inputs[] = {op.getQ(), op.getK(), op.getV()};
    for (int i = 1; i < 3; ++i)
      if (llvm::is_contained(ArrayRef<Value>(inputs, i), inputs[i]))
        inputs[i] = ReshapeOp::create(b, loc, inputs[i].getType(), inputs[i]);
    auto attention = AttentionOp::create(
        b, loc, inputs[0], inputs[1], inputs[2], op.getMask(),
        op.getAlibiSlopes(), op.getScaleAttr(), op.getCausalAttr(),
        op.getDropoutAttr(), op.getSoftcapAttr(), op.getWindowAttr());
    GradientState local(b);
    for (Value input : inputs)
      local.markActive(input);
    LogicalResult built = differentiateDecomposedAttention(
        b, attention, op.getResultGrad(), local);
    attention.erase();
    if (failed(built))
      return failure();
    for (auto [result, input] : llvm::zip(op.getResults(), inputs))
      result.replaceAllUsesWith(local.gradientOrZeros(loc, input));
    op.erase();
    return success();
  }
};
} // namespace

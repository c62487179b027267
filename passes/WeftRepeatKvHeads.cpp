//===- WeftRepeatKvHeads.cpp - KV heads repeated for a head split --------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace weft {
#define GEN_PASS_DEF_WEFTREPEATKVHEADS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

/// Grouped-query attention with fewer KV heads than the ways the plan
/// splits heads (`ways`, a multiple of them): each KV head is repeated
/// `ways / kv` times, which is the same attention (a query head reads
/// its group's KV head, and a group's query heads now read copies of it),
/// and the heads' split then gives every rank one copy of its group's
/// head, as vLLM and Megatron-LM's forks replicate KV heads when tp
/// exceeds them (Megatron-Core itself needs them to divide by tp).
/// The projections that make K and V stay whole on every rank; a
/// gradient's repeats are summed.
void weft::repeatKeyValueHeads(func::FuncOp func, int64_t ways) {
  // (The query heads must divide by `ways` too, or the plan splits no
  // head: left for the plan's check to refuse.)
  auto needsRepeat = [&](Value q, Value k) {
    int64_t heads = cast<RankedTensorType>(q.getType()).getDimSize(1);
    int64_t kv = cast<RankedTensorType>(k.getType()).getDimSize(1);
    return ways > 1 && kv > 0 && kv % ways != 0 && ways % kv == 0 &&
           heads % ways == 0;
  };
  // [b, kv, s, d] -> [b, kv, 1, s, d] -> [b, kv, r, s, d] -> [b, ways, s, d]
  auto repeat = [&](OpBuilder &b, Location loc, Value x) -> Value {
    auto type = cast<RankedTensorType>(x.getType());
    ArrayRef<int64_t> s = type.getShape();
    Type element = type.getElementType();
    int64_t r = ways / s[1];
    Value one = ReshapeOp::create(
        b, loc, RankedTensorType::get({s[0], s[1], 1, s[2], s[3]}, element), x);
    auto copies = BroadcastToOp::create(
        b, loc, RankedTensorType::get({s[0], s[1], r, s[2], s[3]}, element),
        one);
    copies->setAttr(WeftDialect::getRepeatedKvHeadsAttrName(), b.getUnitAttr());
    return ReshapeOp::create(
        b, loc, RankedTensorType::get({s[0], ways, s[2], s[3]}, element),
        copies);
  };
  func.walk([&](Operation *op) {
    if (!isa<AttentionOp, AttentionGradOp>(op))
      return;
    Value k = op->getOperand(1), v = op->getOperand(2);
    if (!needsRepeat(op->getOperand(0), k))
      return;
    int64_t kv = cast<RankedTensorType>(k.getType()).getDimSize(1);
    OpBuilder b(op);
    op->setOperand(1, repeat(b, op->getLoc(), k));
    op->setOperand(2, repeat(b, op->getLoc(), v));
    auto grad = dyn_cast<AttentionGradOp>(op);
    if (!grad)
      return;
    // The gradient of `repeat`: [b, ways, s, d] -> [b, kv, r, s, d],
    // summed over r.
    b.setInsertionPointAfter(op);
    for (auto [dx, x] : {std::make_pair(grad.getKGrad(), grad.getK()),
                         std::make_pair(grad.getVGrad(), grad.getV())}) {
      dx.setType(x.getType());
      ArrayRef<int64_t> s = dx.getType().getShape();
      Type element = dx.getType().getElementType();
      auto split = ReshapeOp::create(
          b, op->getLoc(),
          RankedTensorType::get({s[0], kv, ways / kv, s[2], s[3]}, element),
          dx);
      Value sum = ReduceSumOp::create(
          b, op->getLoc(),
          RankedTensorType::get({s[0], kv, s[2], s[3]}, element), split,
          b.getDenseI64ArrayAttr({2}), false);
      dx.replaceAllUsesExcept(sum, split);
    }
  });
}

namespace {
struct WeftRepeatKvHeads
    : public weft::impl::WeftRepeatKvHeadsBase<WeftRepeatKvHeads> {
  using WeftRepeatKvHeadsBase::WeftRepeatKvHeadsBase;
  void runOnOperation() override {
    if (ways < 1) {
      getOperation().emitError("-weft-repeat-kv-heads: ways must be at "
                               "least 1, got ")
          << static_cast<int64_t>(ways);
      return signalPassFailure();
    }
    repeatKeyValueHeads(getOperation(), ways);
  }
};
} // namespace

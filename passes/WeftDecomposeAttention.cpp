//===- WeftDecomposeAttention.cpp - Attention as Megatron's unfused path --===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

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
    Location loc = op.getLoc();
    StringAttr core = b.getStringAttr(WeftDialect::getAttentionCoreAttrName());
    auto mark = [&](Value v) {
      v.getDefiningOp()->setAttr(core, b.getUnitAttr());
      return v;
    };
    RankedTensorType q = op.getQ().getType();
    Type element = q.getElementType();
    int64_t batch = q.getDimSize(0), heads = q.getDimSize(1),
            seq = q.getDimSize(2);
    int64_t kvHeads = op.getK().getType().getDimSize(1),
            kvSeq = op.getK().getType().getDimSize(2);
    // Grouped KV heads repeated to the query heads (repeat_interleave).
    auto expand = [&](Value kv) -> Value {
      if (kvHeads == heads)
        return kv;
      auto type = cast<RankedTensorType>(kv.getType());
      int64_t dim = type.getDimSize(3), group = heads / kvHeads;
      Value r = mark(ReshapeOp::create(
          b, loc,
          RankedTensorType::get({batch, kvHeads, 1, kvSeq, dim}, element), kv));
      r = mark(BroadcastToOp::create(
          b, loc,
          RankedTensorType::get({batch, kvHeads, group, kvSeq, dim}, element),
          r));
      return mark(ReshapeOp::create(
          b, loc, RankedTensorType::get({batch, heads, kvSeq, dim}, element),
          r));
    };
    Value k = expand(op.getK());
    Value v = expand(op.getV());
    auto scoresType =
        RankedTensorType::get({batch, heads, seq, kvSeq}, element);
    Value scores = mark(MatmulOp::create(b, loc, scoresType, op.getQ(), k,
                                         UnitAttr(), b.getUnitAttr()));
    Value probs;
    if (Value mask = op.getMask()) {
      // The mask applies to scaled scores; the softmax then has no scale.
      auto scalar = RankedTensorType::get({}, element);
      Value scale = ConstantOp::create(
          b, loc,
          cast<ElementsAttr>(DenseElementsAttr::get(
              scalar,
              b.getFloatAttr(element, op.getScale().convertToDouble()))));
      Value scaled = mark(MulOp::create(b, loc, scoresType, scores, scale));
      Value masked;
      if (cast<RankedTensorType>(mask.getType())
              .getElementType()
              .isInteger(1)) {
        Value hidden = ConstantOp::create(
            b, loc,
            cast<ElementsAttr>(DenseElementsAttr::get(
                scalar,
                b.getFloatAttr(element,
                               -std::numeric_limits<double>::infinity()))));
        masked =
            mark(WhereOp::create(b, loc, scoresType, mask, scaled, hidden));
      } else {
        masked = mark(AddOp::create(b, loc, scoresType, scaled, mask));
      }
      probs = mark(SoftmaxOp::create(b, loc, masked, 3, llvm::APFloat(1.0f),
                                     op.getCausal()));
    } else {
      probs = mark(
          SoftmaxOp::create(b, loc, scores, 3, op.getScale(), op.getCausal()));
    }
    if (std::optional<APFloat> dropout = op.getDropout())
      probs = mark(DropoutOp::create(b, loc, probs, *dropout));
    Value out = mark(MatmulOp::create(b, loc, op.getType(), probs, v,
                                      UnitAttr(), UnitAttr()));
    op.getResult().replaceAllUsesWith(out);
    op.erase();
  }
};
} // namespace

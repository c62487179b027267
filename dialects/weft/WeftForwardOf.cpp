//===- WeftForwardOf.cpp - The forward that a backward differentiates -----===//
//
// Part of the Weft project.
//
// A backward layer reads what its forward layer kept, or recomputes it from
// that and from the layer's input. What a gradient of it needs from the
// forward (a fused attention's output and log-sum-exps) is found by what it
// reads, whichever way it came: -weft-keep-attention-statistics hands the
// statistics over so, and so does -weft-partition for a ring's.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/WeftOps.h"

using namespace mlir;
using namespace weft;

namespace {

/// Where a backward layer's value comes from outside it: the layer's operand
/// for a block argument of its body, else null.
Value outsideOf(Value inside, LayerOp layer) {
  auto arg = dyn_cast<BlockArgument>(inside);
  if (!arg || arg.getOwner() != &layer.getBody().front())
    return Value();
  return layer.getInputs()[arg.getArgNumber()];
}

/// Whether `forwardValue`, inside `forward`'s body, is the value that
/// `outside` (an operand of a later op in the enclosing block) names: the
/// forward layer's operand that its block argument stands for, or the result
/// that yields it.
bool sameAcross(Value forwardValue, LayerOp forward, Value outside) {
  if (!forwardValue || !outside)
    return !forwardValue && !outside;
  Block &body = forward.getBody().front();
  if (auto arg = dyn_cast<BlockArgument>(forwardValue);
      arg && arg.getOwner() == &body)
    return forward.getInputs()[arg.getArgNumber()] == outside;
  auto result = dyn_cast<OpResult>(outside);
  if (!result || result.getOwner() != forward.getOperation())
    return false;
  auto yield = cast<YieldOp>(body.getTerminator());
  return yield.getValues()[result.getResultNumber()] == forwardValue;
}

bool sameAttributes(AttentionOp attention, AttentionGradOp grad) {
  return attention.getScaleAttr() == grad.getScaleAttr() &&
         attention.getCausal() == grad.getCausal() &&
         attention.getDropoutAttr() == grad.getDropoutAttr() &&
         attention.getSoftcapAttr() == grad.getSoftcapAttr() &&
         attention.getWindowAttr() == grad.getWindowAttr();
}

/// Whether values of a backward layer are values of its forward layer: the
/// same value across the layers' boundary, or the same op (name,
/// attributes, result) of such operands, recomputed (what a backward layer
/// recomputes from kept values and the layer's input: LLaMA's rotary K under
/// recompute=op is 9 ops deep).
struct Equivalence {
  Equivalence(LayerOp backward, LayerOp forward)
      : backward(backward), forward(forward) {}

  LayerOp backward, forward;
  llvm::DenseMap<std::pair<Value, Value>, bool> known;

  bool operator()(Value inner, Value forwardValue, int depth = 24) {
    if (!inner || !forwardValue)
      return !inner && !forwardValue;
    if (Value outside = outsideOf(inner, backward))
      return sameAcross(forwardValue, forward, outside);
    auto found = known.find({inner, forwardValue});
    if (found != known.end())
      return found->second;
    bool same = depth > 0 && sameOp(inner, forwardValue, depth);
    known[{inner, forwardValue}] = same;
    return same;
  }

  bool sameOp(Value inner, Value forwardValue, int depth) {
    auto x = dyn_cast<OpResult>(inner), y = dyn_cast<OpResult>(forwardValue);
    if (!x || !y || x.getResultNumber() != y.getResultNumber())
      return false;
    Operation *a = x.getOwner(), *b = y.getOwner();
    if (a->getName() != b->getName() ||
        a->getAttrDictionary() != b->getAttrDictionary() ||
        a->getNumRegions() || b->getNumRegions() ||
        a->getResultTypes() != b->getResultTypes() ||
        a->getNumOperands() != b->getNumOperands())
      return false;
    for (auto [p, q] : llvm::zip(a->getOperands(), b->getOperands()))
      if (!(*this)(p, q, depth - 1))
        return false;
    return true;
  }
};

} // namespace

LayerOp weft::forwardLayerOf(LayerOp backward) {
  StringRef kind = backward.getKind();
  if (!kind.consume_back(".backward"))
    return LayerOp();
  for (Value input : backward.getInputs())
    if (auto forward = input.getDefiningOp<LayerOp>();
        forward && forward.getKind() == kind &&
        forward.getIndex() == backward.getIndex() &&
        forward->getBlock() == backward->getBlock())
      return forward;
  return LayerOp();
}

AttentionOp weft::attentionInBlock(AttentionGradOp grad) {
  for (Operation *op = grad->getPrevNode(); op; op = op->getPrevNode()) {
    auto attention = dyn_cast<AttentionOp>(op);
    if (attention && attention.getQ() == grad.getQ() &&
        attention.getK() == grad.getK() && attention.getV() == grad.getV() &&
        attention.getMask() == grad.getMask() &&
        attention.getAlibiSlopes() == grad.getAlibiSlopes() &&
        sameAttributes(attention, grad))
      return attention;
  }
  return AttentionOp();
}

std::pair<AttentionOp, LayerOp>
weft::attentionInForwardLayer(AttentionGradOp grad) {
  auto backward = dyn_cast<LayerOp>(grad->getParentOp());
  LayerOp forward = backward ? forwardLayerOf(backward) : LayerOp();
  if (!forward)
    return {};
  Equivalence equivalent(backward, forward);
  for (auto attention : forward.getBody().front().getOps<AttentionOp>())
    if (sameAttributes(attention, grad) &&
        equivalent(grad.getQ(), attention.getQ()) &&
        equivalent(grad.getK(), attention.getK()) &&
        equivalent(grad.getV(), attention.getV()) &&
        equivalent(grad.getMask(), attention.getMask()) &&
        equivalent(grad.getAlibiSlopes(), attention.getAlibiSlopes()))
      return {attention, forward};
  return {};
}

Value weft::undoLayouts(OpBuilder &b, Location loc, ArrayRef<Value> chain,
                        unsigned at, Value carried) {
  for (unsigned i = at; i > 0; --i) {
    if (auto transpose = chain[i].getDefiningOp<TransposeOp>()) {
      ArrayRef<int64_t> perm = transpose.getPermutation();
      SmallVector<int64_t> inverse(perm.size());
      for (auto [d, p] : llvm::enumerate(perm))
        inverse[p] = int64_t(d);
      carried = TransposeOp::create(b, loc, carried, inverse);
    } else {
      carried = ReshapeOp::create(b, loc, chain[i - 1].getType(), carried);
    }
  }
  return carried;
}

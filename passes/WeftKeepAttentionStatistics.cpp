//===- WeftKeepAttentionStatistics.cpp - The forward's lse for backward ---===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace weft {
#define GEN_PASS_DEF_WEFTKEEPATTENTIONSTATISTICS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

/// Attention over all the keys as a block: the output (of `type`) and the
/// log-sum-exp of each query row.
static AttentionBlockOp buildBlock(OpBuilder &b, Location loc, Type type,
                                   Value q, Value k, Value v, Value mask,
                                   Value slopes, FloatAttr scale,
                                   UnitAttr causal, FloatAttr softcap,
                                   IntegerAttr window) {
  SmallVector<int64_t> rows(cast<RankedTensorType>(type).getShape());
  rows.back() = 1;
  auto lseType = RankedTensorType::get(rows, b.getF32Type());
  return AttentionBlockOp::create(b, loc, TypeRange{type, lseType}, q, k, v,
                                  mask, slopes, Value(), Value(), scale, causal,
                                  softcap, window, IntegerAttr());
}

/// `attention` as an attention block over all its keys: the same output,
/// and the log-sum-exp of each query row.
static AttentionBlockOp toBlock(AttentionOp attention) {
  OpBuilder b(attention);
  auto block =
      buildBlock(b, attention.getLoc(), attention.getType(), attention.getQ(),
                 attention.getK(), attention.getV(), attention.getMask(),
                 attention.getAlibiSlopes(), attention.getScaleAttr(),
                 attention.getCausalAttr(), attention.getSoftcapAttr(),
                 attention.getWindowAttr());
  block->setDiscardableAttrs(attention->getDiscardableAttrDictionary());
  attention.getResult().replaceAllUsesWith(block.getResult());
  attention.erase();
  return block;
}

/// `grad`, reading the forward's output and log-sum-exp.
static void readSaved(AttentionGradOp grad, Value out, Value lse) {
  OpBuilder b(grad);
  auto saved = AttentionGradOp::create(
      b, grad.getLoc(), grad.getQ(), grad.getK(), grad.getV(),
      grad.getResultGrad(), grad.getMask(), grad.getAlibiSlopes(), Value(),
      Value(), out, lse, grad.getScaleAttr(), grad.getCausalAttr(),
      grad.getDropoutAttr(), grad.getSoftcapAttr(), grad.getWindowAttr(),
      grad.getVisiblePairsAttr());
  saved->setDiscardableAttrs(grad->getDiscardableAttrDictionary());
  grad->replaceAllUsesWith(saved->getResults());
  grad.erase();
}

/// `values` with `extra` appended, but those it holds already; sets `at` to
/// where each of `extra` is.
static void appendOnce(SmallVectorImpl<Value> &values, ArrayRef<Value> extra,
                       SmallVectorImpl<unsigned> &at) {
  for (Value value : extra) {
    auto found = llvm::find(values, value);
    at.push_back(unsigned(std::distance(values.begin(), found)));
    if (found == values.end())
      values.push_back(value);
  }
}

/// `layer` rebuilt with `inputs` and `resultTypes` (its own and more), its
/// body moved over, its results' uses taken over.
static LayerOp rebuild(LayerOp layer, ValueRange inputs,
                       TypeRange resultTypes) {
  OpBuilder b(layer);
  auto wider = LayerOp::create(b, layer.getLoc(), layer.getKind(),
                               layer.getIndex(), inputs, resultTypes);
  wider->setAttrs(layer->getAttrs());
  wider.getBody().takeBody(layer.getBody());
  for (auto [old, kept] : llvm::zip(layer.getResults(), wider.getResults()))
    old.replaceAllUsesWith(kept);
  layer.erase();
  return wider;
}

/// `layer` with `extra` yielded as more results (a value it yields already
/// is not yielded twice); returns the layer that replaces it and sets
/// `results` to the results that carry `extra`.
static LayerOp yieldMore(LayerOp layer, ArrayRef<Value> extra,
                         SmallVectorImpl<Value> &results) {
  auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
  SmallVector<Value> values(yield.getValues());
  SmallVector<unsigned> at;
  appendOnce(values, extra, at);
  if (values.size() != yield.getValues().size()) {
    OpBuilder yb(yield);
    YieldOp::create(yb, yield.getLoc(), values);
    yield.erase();
    layer = rebuild(layer, layer.getInputs(), ValueRange(values).getTypes());
  }
  results.clear();
  for (unsigned index : at)
    results.push_back(layer.getResult(index));
  return layer;
}

/// `layer` with `extra` as more inputs (a value it takes already is not
/// taken twice); sets `args` to the body's arguments that stand for them.
static void takeMore(LayerOp layer, ArrayRef<Value> extra,
                     SmallVectorImpl<Value> &args) {
  SmallVector<Value> inputs(layer.getInputs());
  SmallVector<unsigned> at;
  appendOnce(inputs, extra, at);
  if (inputs.size() != layer.getInputs().size()) {
    layer = rebuild(layer, inputs, layer.getResultTypes());
    Block &body = layer.getBody().front();
    for (Value value : ValueRange(inputs).drop_front(body.getNumArguments()))
      body.addArgument(value.getType(), value.getLoc());
  }
  args.clear();
  for (unsigned index : at)
    args.push_back(layer.getBody().front().getArgument(index));
}

/// Where in `chain` (weft::layoutChain of an attention's output) `forward`
/// hands the output over: the last layout it yields already (the output
/// projection's input, which it keeps), else the last, which it will yield.
/// The same elements are then not kept twice.
static unsigned layoutToCarry(LayerOp forward, ArrayRef<Value> chain) {
  auto yield = cast<YieldOp>(forward.getBody().front().getTerminator());
  for (unsigned i = chain.size(); i-- > 0;)
    if (llvm::is_contained(yield.getValues(), chain[i]))
      return i;
  return chain.size() - 1;
}

struct WeftKeepAttentionStatistics
    : public weft::impl::WeftKeepAttentionStatisticsBase<
          WeftKeepAttentionStatistics> {
  using WeftKeepAttentionStatisticsBase::WeftKeepAttentionStatisticsBase;

  void runOnOperation() override {
    SmallVector<AttentionGradOp> grads;
    getOperation().walk([&](AttentionGradOp grad) {
      if (!grad.getOut() && !grad.getQPositions())
        grads.push_back(grad);
    });
    // Layers are rebuilt as they grow, but the ops in their bodies move
    // with the bodies: each gradient's places are looked up when it comes.
    for (AttentionGradOp grad : grads) {
      if (AttentionOp attention = attentionInBlock(grad)) {
        AttentionBlockOp block = toBlock(attention);
        readSaved(grad, block.getResult(), block.getLse());
        continue;
      }
      if (recomputeAttention) {
        // Selective recomputation: the attention runs again where its
        // gradient is, from what the gradient reads.
        OpBuilder b(grad);
        AttentionBlockOp block = buildBlock(
            b, grad.getLoc(), grad.getResultGrad().getType(), grad.getQ(),
            grad.getK(), grad.getV(), grad.getMask(), grad.getAlibiSlopes(),
            grad.getScaleAttr(), grad.getCausalAttr(), grad.getSoftcapAttr(),
            grad.getWindowAttr());
        readSaved(grad, block.getResult(), block.getLse());
        continue;
      }
      auto [attention, forward] = attentionInForwardLayer(grad);
      if (!attention)
        continue;
      auto backward = cast<LayerOp>(grad->getParentOp());
      AttentionBlockOp block = toBlock(attention);
      SmallVector<Value, 4> chain = layoutChain(block.getResult());
      unsigned at = layoutToCarry(forward, chain);
      SmallVector<Value> carried, args;
      forward = yieldMore(forward, {chain[at], block.getLse()}, carried);
      takeMore(backward, carried, args);
      OpBuilder b(grad);
      readSaved(grad, undoLayouts(b, grad.getLoc(), chain, at, args[0]),
                args[1]);
    }
  }
};
} // namespace

//===- WeftDocumentMask.cpp - Attention within each packed document -------===//
//
// Part of the Weft project.
//
// Pretraining packs documents into windows; Megatron-LM's
// --reset-attention-mask, torchtitan's block_causal mask and Llama 3 keep
// each token's attention within its document. This pass adds the document
// ids as a model input and masks every self-attention of the token sequence
// with "the same document".
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <limits>

namespace weft {
#define GEN_PASS_DEF_WEFTDOCUMENTMASK
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftDocumentMask
    : public weft::impl::WeftDocumentMaskBase<WeftDocumentMask> {
  using WeftDocumentMaskBase::WeftDocumentMaskBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func;
    for (auto candidate : module.getOps<func::FuncOp>())
      if (!func && !candidate.isExternal())
        func = candidate;
    std::vector<std::string> fills = trainingFeeds(module);
    if (!func || fills.size() != func.getNumArguments()) {
      module.emitError("-weft-document-mask: the module has no weft.feeds "
                       "for its function's inputs; run -weft-assign-feeds "
                       "first");
      return signalPassFailure();
    }
    for (const std::string &fill : fills)
      if (fill == "source" || fill == "documents") {
        func.emitError()
            << "-weft-document-mask: "
            << (fill == "source"
                    ? "the model reads an encoder's source (an "
                      "encoder-decoder); document masks are for models "
                      "that read packed windows of one token stream"
                    : "the model already takes document ids");
        return signalPassFailure();
      }
    const unsigned tokens = unsigned(tokensInput(module));
    auto ids = dyn_cast<RankedTensorType>(func.getArgumentTypes()[tokens]);
    if (!ids || ids.getRank() != 2 || !ids.hasStaticShape()) {
      func.emitError() << "-weft-document-mask: the token ids (input #"
                       << tokens << ") are " << func.getArgumentTypes()[tokens]
                       << ", not [batch, seq] with a static shape: give "
                          "--batch-size and --seq-len";
      return signalPassFailure();
    }
    const int64_t batch = ids.getDimSize(0), seq = ids.getDimSize(1);
    // The self-attentions of the token sequence: queries and keys of its
    // length.
    SmallVector<AttentionOp> attentions;
    func.walk([&](AttentionOp op) {
      auto q = cast<RankedTensorType>(op.getQ().getType());
      auto k = cast<RankedTensorType>(op.getK().getType());
      if (q.getDimSize(0) == batch && q.getDimSize(2) == seq &&
          k.getDimSize(2) == seq)
        attentions.push_back(op);
    });
    if (attentions.empty()) {
      func.emitError() << "-weft-document-mask: no weft.attention of @"
                       << func.getSymName()
                       << " attends over the token sequence (" << seq
                       << " queries and keys): an attention the import did "
                          "not raise cannot be masked by document";
      return signalPassFailure();
    }

    MLIRContext *ctx = &getContext();
    Location loc = func.getLoc();
    auto documentsType =
        RankedTensorType::get({batch, seq}, IntegerType::get(ctx, 64));
    const unsigned n = func.getNumArguments();
    if (failed(func.insertArgument(
            n, documentsType,
            DictionaryAttr::get(
                ctx, {NamedAttribute(StringAttr::get(ctx, "onnx.name"),
                                     StringAttr::get(ctx, "document_ids"))}),
            loc)))
      return signalPassFailure();
    SmallVector<Attribute> feeds;
    for (const std::string &fill : fills)
      feeds.push_back(StringAttr::get(ctx, fill));
    feeds.push_back(StringAttr::get(ctx, "documents"));
    module->setAttr(WeftDialect::getFeedsAttrName(),
                    ArrayAttr::get(ctx, feeds));

    // Position i of a row keeps position j where both are in one document.
    OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
    Value documents = func.getArgument(n);
    Value rows = ReshapeOp::create(
        b, loc, RankedTensorType::get({batch, 1, seq, 1}, b.getI64Type()),
        documents);
    Value cols = ReshapeOp::create(
        b, loc, RankedTensorType::get({batch, 1, 1, seq}, b.getI64Type()),
        documents);
    Value same = CompareOp::create(
        b, loc, RankedTensorType::get({batch, 1, seq, seq}, b.getI1Type()),
        ComparePredicate::eq, rows, cols);

    // The mask inside each layer that holds an attention: one more operand
    // (of the outermost layer first), and its body's argument.
    llvm::DenseMap<Operation *, Value> inside;
    std::function<Value(Operation *)> maskIn = [&](Operation *scope) -> Value {
      auto layer = dyn_cast_or_null<LayerOp>(scope);
      if (!layer)
        return same;
      if (Value known = inside.lookup(layer))
        return known;
      Value outer = maskIn(layer->getParentOp());
      layer->insertOperands(layer->getNumOperands(), outer);
      Value arg = layer.getBody().front().addArgument(outer.getType(), loc);
      inside[layer] = arg;
      return arg;
    };
    for (AttentionOp attention : attentions) {
      Operation *scope = attention->getParentOp();
      while (scope && !isa<LayerOp, func::FuncOp>(scope))
        scope = scope->getParentOp();
      Value mask = maskIn(isa<LayerOp>(scope) ? scope : nullptr);
      OpBuilder at(attention);
      Location where = attention.getLoc();
      if (Value own = attention.getMask()) {
        auto ownType = cast<RankedTensorType>(own.getType());
        Type element = ownType.getElementType();
        // Where the documents differ: false for a mask that keeps, -inf for
        // one that is added to the scores.
        Attribute outside =
            element.isInteger(1)
                ? Attribute(at.getBoolAttr(false))
                : Attribute(at.getFloatAttr(
                      element, -std::numeric_limits<double>::infinity()));
        Value fill = ConstantOp::create(
            at, where,
            DenseElementsAttr::get(RankedTensorType::get({}, element),
                                   outside));
        mask = WhereOp::create(at, where, mask, own, fill);
      }
      attention.getMaskMutable().assign(mask);
    }
  }
};
} // namespace

//===- WeftCompressCollectives.cpp - Codecs on collectives from a policy --===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"
#include "weft/Plan/Plan.h"

namespace weft {
#define GEN_PASS_DEF_WEFTCOMPRESSCOLLECTIVES
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

/// Whether the op's definition has a `codec` attribute (the collectives
/// that can send compressed).
bool takesCodec(Operation *op) {
  std::optional<RegisteredOperationName> name = op->getRegisteredInfo();
  return name && llvm::any_of(name->getAttributeNames(), [](StringAttr attr) {
           return attr.getValue() == "codec";
         });
}

/// Whether `codec` makes the op's operand smaller on the wire whatever its
/// size: not for a scalar, nor for elements already as narrow as the codec's.
bool narrows(Operation *op, CollectiveCodec codec) {
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  if (type.getRank() == 0)
    return false;
  int64_t width = type.getElementTypeBitWidth();
  switch (codec) {
  case CollectiveCodec::bf16:
    return width > 16;
  case CollectiveCodec::fp8:
  case CollectiveCodec::int8:
    return width > 8;
  default:
    return true;
  }
}

struct WeftCompressCollectives
    : public weft::impl::WeftCompressCollectivesBase<WeftCompressCollectives> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::Expected<CompressPolicy> parsed = parseCompressPolicy(policy);
    if (!parsed) {
      module.emitError("-weft-compress-collectives: ")
          << llvm::toString(parsed.takeError());
      return signalPassFailure();
    }
    module.walk([&](CollectiveOpInterface collective) {
      Operation *op = collective.getOperation();
      // A codec already set (the loss's statistics are pinned to none by
      // the partitioner) stays.
      if (!takesCodec(op) || op->hasAttr("codec"))
        return;
      std::vector<std::string> axes;
      for (StringRef axis : collective.getAxes().getAsValueRange<StringAttr>())
        axes.push_back(axis.str());
      std::optional<CollectiveCodec> codec =
          symbolizeCollectiveCodec(codecForAxes(*parsed, axes));
      // Integer collectives, and for top-k all but summing all-reduces, go
      // uncompressed; so do scalars (the loss summed over ranks, a squared
      // gradient norm: statistics that decide the step, where a block scale
      // or an index outweighs the value) and data the codec would not narrow
      // (bf16 under bf16). Both are facts of the type, not of the size, so
      // the cost model's programs at sample shapes carry the same codecs.
      if (codec && *codec != CollectiveCodec::none &&
          codecApplies(op, *codec) && narrows(op, *codec))
        op->setAttr("codec",
                    CollectiveCodecAttr::get(op->getContext(), *codec));
    });
    // A pipeline's sends of activations and of their gradients go between
    // the ranks of the pp axis: the module's `weft.pipeline` carries their
    // codec, which the executor applies to every float it sends.
    StringAttr name =
        StringAttr::get(&getContext(), WeftDialect::getPipelineAttrName());
    auto pipeline = module->getAttrOfType<DictionaryAttr>(name);
    std::string codec = codecForAxes(*parsed, {"pp"});
    if (pipeline && codec != "none" && !pipeline.get("codec")) {
      NamedAttrList entries(pipeline);
      entries.set("codec", StringAttr::get(&getContext(), codec));
      module->setAttr(name, entries.getDictionary(&getContext()));
    }
  }
};

} // namespace

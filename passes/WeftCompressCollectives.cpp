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
      // uncompressed.
      if (codec && *codec != CollectiveCodec::none && codecApplies(op, *codec))
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

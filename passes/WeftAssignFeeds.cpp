//===- WeftAssignFeeds.cpp - How a training run fills a model's inputs ----===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

namespace weft {
#define GEN_PASS_DEF_WEFTASSIGNFEEDS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

/// The fill an input's name says (Hugging Face's names, as torch.onnx.export
/// takes them from forward's arguments), or "" when it says none.
static StringRef fillOfName(StringRef name) {
  std::string lower = name.lower();
  StringRef text(lower);
  if (text.contains("mask"))
    return "ones";
  if (text.contains("position") || text.contains("pos_id"))
    return "positions";
  if (text.contains("token_type") || text.contains("segment"))
    return "zeros";
  if (text.contains("label"))
    return "labels";
  return "";
}

namespace {
struct WeftAssignFeeds
    : public weft::impl::WeftAssignFeedsBase<WeftAssignFeeds> {
  using WeftAssignFeedsBase::WeftAssignFeedsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func;
    for (auto candidate : module.getOps<func::FuncOp>())
      if (!func && !candidate.isExternal())
        func = candidate;
    if (!func || !func.getNumArguments()) {
      module.emitError("-weft-assign-feeds: the module has no function with "
                       "inputs to feed");
      return signalPassFailure();
    }
    // The overrides, by name or by #index.
    llvm::StringMap<std::string> given;
    for (const std::string &entry : feeds) {
      auto [name, fill] = StringRef(entry).split('=');
      if (name.empty() ||
          !llvm::is_contained({"ones", "zeros", "positions", "labels"}, fill)) {
        module.emitError() << "-weft-assign-feeds: '" << entry
                           << "' is not NAME=FILL with FILL ones, zeros, "
                              "positions or labels";
        return signalPassFailure();
      }
      given[name] = fill.str();
    }
    llvm::StringSet<> used;
    SmallVector<Attribute> fills{StringAttr::get(&getContext(), "tokens")};
    for (unsigned i = 1; i < func.getNumArguments(); ++i) {
      auto nameAttr = func.getArgAttrOfType<StringAttr>(i, "onnx.name");
      std::string name = nameAttr ? nameAttr.getValue().str() : "";
      std::string index = "#" + std::to_string(i);
      std::string fill;
      // A name and an index given for the same input: the name wins.
      for (const std::string &key : {name, index})
        if (auto found = given.find(key);
            !key.empty() && found != given.end()) {
          if (fill.empty())
            fill = found->second;
          used.insert(key);
        }
      auto type = dyn_cast<ShapedType>(func.getArgumentTypes()[i]);
      if (!type || !type.getElementType().isInteger()) {
        func.emitError()
            << "input " << index << (name.empty() ? "" : " ('" + name + "')")
            << " of @" << func.getSymName() << " is "
            << func.getArgumentTypes()[i]
            << ", not integers: a training run feeds windows of a token file "
               "(token ids, and the attention masks, position ids and token "
               "types it fills)";
        return signalPassFailure();
      }
      if (fill.empty())
        fill = fillOfName(name).str();
      if (fill.empty()) {
        std::string what = name.empty() ? index : name;
        func.emitError()
            << "input " << index << (name.empty() ? "" : " ('" + name + "')")
            << " of @" << func.getSymName()
            << ": a training run feeds the token ids to input #0 and fills "
               "the others by their names (attention masks with ones, "
               "position ids with 0..seq-1, token types with zeros, labels "
               "with the next tokens), and this name says none of them; give "
               "its fill, e.g. --feed "
            << what << "=ones (weft train, weft compile --train)";
        return signalPassFailure();
      }
      fills.push_back(StringAttr::get(&getContext(), fill));
    }
    for (const auto &entry : given)
      if (!used.contains(entry.getKey())) {
        module.emitError() << "-weft-assign-feeds: no input of @"
                           << func.getSymName() << " after the token ids is '"
                           << entry.getKey() << "' (named by onnx.name, or "
                           << "#INDEX)";
        return signalPassFailure();
      }
    module->setAttr(WeftDialect::getFeedsAttrName(),
                    ArrayAttr::get(&getContext(), fills));
  }
};
} // namespace

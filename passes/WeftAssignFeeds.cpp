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
/// `tokensElsewhere`: whether another input takes the token ids (then an
/// encoder's input is the source).
static StringRef fillOfName(StringRef name, bool tokensElsewhere) {
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
  if (tokensElsewhere &&
      (text.starts_with("src") || text.starts_with("source") ||
       text.contains("encoder") || text == "input_ids"))
    return "source";
  return "";
}

/// Whether an input's name says it is an encoder-decoder's decoder input:
/// the tokens whose next tokens are the labels (Hugging Face's
/// decoder_input_ids, torch.nn.Transformer users' tgt).
static bool isTargetName(StringRef name) {
  std::string lower = name.lower();
  StringRef text(lower);
  return fillOfName(name, false).empty() &&
         (text.contains("decoder") || text.starts_with("tgt") ||
          text.starts_with("target"));
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
      if (name.empty() || !llvm::is_contained({"tokens", "source", "ones",
                                               "zeros", "positions", "labels"},
                                              fill)) {
        module.emitError() << "-weft-assign-feeds: '" << entry
                           << "' is not NAME=FILL with FILL tokens, source, "
                              "ones, zeros, positions or labels";
        return signalPassFailure();
      }
      given[name] = fill.str();
    }
    const unsigned n = func.getNumArguments();
    auto nameOf = [&](unsigned i) {
      auto nameAttr = func.getArgAttrOfType<StringAttr>(i, "onnx.name");
      return nameAttr ? nameAttr.getValue().str() : std::string();
    };
    auto describe = [&](unsigned i) {
      std::string name = nameOf(i);
      return "input #" + std::to_string(i) +
             (name.empty() ? "" : " ('" + name + "')") + " of @" +
             func.getSymName().str();
    };
    // The given fills: a name and an index given for the same input, the
    // name wins.
    llvm::StringSet<> used;
    SmallVector<std::string> fills(n);
    for (unsigned i = 0; i < n; ++i)
      for (const std::string &key : {nameOf(i), "#" + std::to_string(i)})
        if (auto found = given.find(key);
            !key.empty() && found != given.end()) {
          if (fills[i].empty())
            fills[i] = found->second;
          used.insert(key);
        }
    for (const auto &entry : given)
      if (!used.contains(entry.getKey())) {
        module.emitError() << "-weft-assign-feeds: no input of @"
                           << func.getSymName() << " is '" << entry.getKey()
                           << "' (named by onnx.name, or #INDEX)";
        return signalPassFailure();
      }
    // The token ids: the input given them, else an encoder-decoder's decoder
    // input by its name, else the first.
    std::optional<unsigned> tokens;
    for (unsigned i = 0; i < n; ++i)
      if (fills[i] == "tokens") {
        if (tokens) {
          func.emitError() << "-weft-assign-feeds: " << describe(*tokens)
                           << " and " << describe(i)
                           << " are both given the token ids; one input "
                              "takes them";
          return signalPassFailure();
        }
        tokens = i;
      }
    for (unsigned i = 0; i < n && !tokens; ++i)
      if (fills[i].empty() && isTargetName(nameOf(i)))
        tokens = i;
    if (!tokens) {
      if (!fills[0].empty()) {
        func.emitError() << "-weft-assign-feeds: no input takes the token "
                            "ids: give one, e.g. --feed "
                         << (nameOf(0).empty() ? "#0" : nameOf(0))
                         << "=tokens (weft train, weft compile --train)";
        return signalPassFailure();
      }
      tokens = 0;
    }
    fills[*tokens] = "tokens";
    for (unsigned i = 0; i < n; ++i) {
      auto type = dyn_cast<ShapedType>(func.getArgumentTypes()[i]);
      if (!type || !type.getElementType().isInteger()) {
        func.emitError()
            << describe(i) << " is " << func.getArgumentTypes()[i]
            << ", not integers: a training run feeds windows of a token file "
               "(token ids, and the attention masks, position ids and token "
               "types it fills)";
        return signalPassFailure();
      }
      if (fills[i].empty())
        fills[i] = fillOfName(nameOf(i), *tokens != 0).str();
      // An encoder-decoder's first input, when the decoder's takes the ids.
      if (fills[i].empty() && i == 0)
        fills[i] = "source";
      if (fills[i].empty()) {
        std::string name = nameOf(i);
        func.emitError()
            << describe(i) << ": a training run feeds the token ids to input #"
            << *tokens
            << " and fills the others by their names (attention masks with "
               "ones, position ids with 0..seq-1, token types with zeros, "
               "labels with the next tokens, an encoder's input ids with the "
               "tokens before the window), and this name says none of them; "
               "give its fill, e.g. --feed "
            << (name.empty() ? "#" + std::to_string(i) : name)
            << "=ones (weft train, weft compile --train)";
        return signalPassFailure();
      }
    }
    SmallVector<Attribute> attrs;
    for (const std::string &fill : fills)
      attrs.push_back(StringAttr::get(&getContext(), fill));
    module->setAttr(WeftDialect::getFeedsAttrName(),
                    ArrayAttr::get(&getContext(), attrs));
  }
};
} // namespace

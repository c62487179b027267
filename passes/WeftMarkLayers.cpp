//===- WeftMarkLayers.cpp - Wrap repeated blocks in weft.layer ------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

#include <regex>

namespace weft {
#define GEN_PASS_DEF_WEFTMARKLAYERS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

struct LayerKey {
  std::string kind;
  int64_t index;
};

/// The repeated scope an op's location names: "/h.0/attn/MatMul" and
/// "layers.3.mlp.weight" give ("h", 0) and ("layers", 3).
std::optional<LayerKey> layerKeyOf(Operation *op) {
  auto name = dyn_cast<NameLoc>(op->getLoc());
  if (!name)
    return std::nullopt;
  static const std::regex scope(
      R"((?:^|/)([A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_]*)*)\.([0-9]+)(?:[/.]|$))");
  std::string text = name.getName().str();
  std::smatch match;
  if (!std::regex_search(text, match, scope))
    return std::nullopt;
  std::string kind = match[1];
  std::replace(kind.begin(), kind.end(), '/', '.');
  return LayerKey{kind, std::stoll(match[2])};
}

struct WeftMarkLayers
    : public weft::impl::WeftMarkLayersBase<WeftMarkLayers> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.getBody().empty())
      return;
    Block &block = func.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : block.without_terminator())
      ops.push_back(&op);

    // Which scope repeats most: its indices, each with the positions of its
    // tagged ops (parameters and constants are placed later).
    std::map<std::string, std::map<int64_t, std::pair<size_t, size_t>>> scopes;
    for (auto [position, op] : llvm::enumerate(ops)) {
      if (isa<ParameterOp, ConstantOp>(op))
        continue;
      if (std::optional<LayerKey> key = layerKeyOf(op)) {
        auto [it, inserted] = scopes[key->kind].try_emplace(
            key->index, std::make_pair(position, position));
        it->second.second = position;
      }
    }
    auto best = std::max_element(scopes.begin(), scopes.end(),
                                 [](const auto &a, const auto &b) {
                                   return a.second.size() < b.second.size();
                                 });
    if (best == scopes.end() || best->second.size() < 2)
      return;
    // Repetitions must not interleave.
    size_t end = 0;
    bool first = true;
    for (auto &[index, range] : best->second) {
      if (!first && range.first <= end)
        return;
      end = range.second;
      first = false;
    }
    for (auto &[index, range] : best->second)
      wrap(block, ArrayRef<Operation *>(ops).slice(range.first,
                                                   range.second - range.first + 1),
           best->first, index);
  }

  void wrap(Block &block, ArrayRef<Operation *> range, StringRef kind,
            int64_t index) {
    llvm::SmallPtrSet<Operation *, 32> inside(range.begin(), range.end());
    // Outside values the range reads, in first-use order; weights used only
    // here and constants are brought inside instead.
    llvm::MapVector<Value, Operation *> inputs;
    SmallVector<Operation *> broughtIn;
    llvm::SmallPtrSet<Operation *, 16> broughtInSet;
    for (Operation *op : range)
      op->walk([&](Operation *nested) {
        for (Value operand : nested->getOperands()) {
          Operation *def = operand.getDefiningOp();
          if (def && (inside.contains(def) || def->getParentOp() != block.getParentOp()))
            continue;
          if (!def && operand.getParentBlock() != &block)
            continue;
          bool onlyHere = llvm::all_of(operand.getUsers(), [&](Operation *user) {
            return inside.contains(block.findAncestorOpInBlock(*user));
          });
          if (def && (isa<ConstantOp>(def) || (isa<ParameterOp>(def) && onlyHere))) {
            if (broughtInSet.insert(def).second)
              broughtIn.push_back(def);
            continue;
          }
          inputs.insert({operand, nullptr});
        }
      });
    // Results used after the range.
    SmallVector<Value> outputs;
    for (Operation *op : range)
      for (Value result : op->getResults())
        if (llvm::any_of(result.getUsers(), [&](Operation *user) {
              return !inside.contains(block.findAncestorOpInBlock(*user));
            }))
          outputs.push_back(result);

    OpBuilder builder(range.front());
    SmallVector<Value> inputValues;
    for (auto &entry : inputs)
      inputValues.push_back(entry.first);
    auto layer = LayerOp::create(builder, range.front()->getLoc(), kind, index,
                                 inputValues, ValueRange(outputs).getTypes());
    Block &body = layer.getBody().front();
    OpBuilder inner = OpBuilder::atBlockBegin(&body);
    IRMapping mapping;
    for (auto [value, arg] : llvm::zip(inputValues, body.getArguments()))
      mapping.map(value, arg);
    for (Operation *def : broughtIn) {
      bool sharedConstant = isa<ConstantOp>(def) &&
                            llvm::any_of(def->getUsers(), [&](Operation *user) {
                              return !inside.contains(block.findAncestorOpInBlock(*user));
                            });
      if (sharedConstant) {
        mapping.map(def->getResult(0), inner.clone(*def)->getResult(0));
      } else {
        def->moveBefore(&body, body.end());
      }
    }
    for (Operation *op : range)
      op->moveBefore(&body, body.end());
    for (auto [value, arg] : llvm::zip(inputValues, body.getArguments()))
      value.replaceUsesWithIf(arg, [&](OpOperand &use) {
        return layer->isProperAncestor(use.getOwner());
      });
    for (Operation *def : broughtIn)
      if (def->getBlock() != &body) {
        Value copy = mapping.lookup(def->getResult(0));
        def->getResult(0).replaceUsesWithIf(copy, [&](OpOperand &use) {
          return layer->isProperAncestor(use.getOwner());
        });
      }
    OpBuilder end = OpBuilder::atBlockEnd(&body);
    YieldOp::create(end, layer.getLoc(), outputs);
    for (auto [output, result] : llvm::zip(outputs, layer.getResults()))
      output.replaceUsesWithIf(result, [&](OpOperand &use) {
        return !layer->isProperAncestor(use.getOwner());
      });
  }
};

} // namespace

//===- WeftMarkLayers.cpp - Wrap repeated blocks in weft.layer ------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <functional>

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
    using Ranges = std::map<int64_t, std::pair<size_t, size_t>>;
    llvm::SetVector<Operation *> hoisted;
    std::string kind;
    Ranges ranges;
    // Which scope repeats most: its indices, each with the positions of its
    // tagged ops (parameters and constants are placed later, and the shared
    // ops hoisted out of them stay out). False when no scope repeats or
    // repetitions interleave.
    auto findRepetitions = [&]() {
      ops.clear();
      for (Operation &op : block.without_terminator())
        ops.push_back(&op);
      std::map<std::string, Ranges> scopes;
      for (auto [position, op] : llvm::enumerate(ops)) {
        if (isa<ParameterOp, ConstantOp>(op) || hoisted.contains(op))
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
        return false;
      size_t end = 0;
      bool first = true;
      for (auto &[index, range] : best->second) {
        if (!first && range.first <= end)
          return false;
        end = range.second;
        first = false;
      }
      kind = best->first;
      ranges = best->second;
      return true;
    };
    if (!findRepetitions())
      return;
    hoistShared(block, ops, ranges, hoisted);
    if (!hoisted.empty() && !findRepetitions())
      return;
    for (auto &[index, range] : ranges)
      wrap(block,
           ArrayRef<Operation *>(ops).slice(range.first,
                                            range.second - range.first + 1),
           kind, index);
  }

  /// Moves before the first repetition the ops of a repetition that it and
  /// other repetitions read and that read nothing any repetition computes,
  /// with the ops of the same kind that they read: values every layer shares,
  /// such as rotary tables gathered at the positions, which CSE leaves in the
  /// first layer that gathered them. An exporter that computes them once
  /// puts them there; inside a layer they would break the chain of layers.
  /// Adds those it moves to `hoisted`.
  void hoistShared(Block &block, ArrayRef<Operation *> ops,
                   const std::map<int64_t, std::pair<size_t, size_t>> &ranges,
                   llvm::SetVector<Operation *> &hoisted) {
    llvm::DenseMap<Operation *, int64_t> repetition;
    for (auto &[index, range] : ranges)
      for (size_t i = range.first; i <= range.second; ++i)
        repetition[ops[i]] = index;
    Operation *start = ops[ranges.begin()->second.first];
    // Invariant: reads only values from before the first repetition, block
    // arguments, constants, parameters and other invariant ops.
    llvm::SmallPtrSet<Operation *, 16> invariant;
    for (auto &[index, range] : ranges)
      for (size_t i = range.first; i <= range.second; ++i) {
        Operation *op = ops[i];
        if (isa<ParameterOp, ConstantOp>(op) || op->getNumRegions() ||
            !isPure(op))
          continue;
        bool reads = llvm::all_of(op->getOperands(), [&](Value operand) {
          Operation *def = operand.getDefiningOp();
          if (!def)
            return operand.getParentBlock() == &block;
          if (def->getBlock() != &block)
            return false;
          return isa<ParameterOp, ConstantOp>(def) || invariant.contains(def) ||
                 (!repetition.count(def) && def->isBeforeInBlock(start));
        });
        if (reads)
          invariant.insert(op);
      }
    // Those read by another repetition, and the invariant ops they read.
    std::function<void(Operation *)> take = [&](Operation *op) {
      if (!hoisted.insert(op))
        return;
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (def &&
            (invariant.contains(def) || (isa<ParameterOp, ConstantOp>(def) &&
                                         !def->isBeforeInBlock(start))))
          take(def);
      }
    };
    // (Read by its own repetition too: the first layer's output, which only
    // the next reads, is the chain itself.)
    for (Operation *op : invariant) {
      int64_t own = repetition.lookup(op);
      bool here = false, elsewhere = false;
      for (Operation *user : op->getUsers()) {
        Operation *ancestor = block.findAncestorOpInBlock(*user);
        auto it = ancestor ? repetition.find(ancestor) : repetition.end();
        if (it != repetition.end())
          (it->second == own ? here : elsewhere) = true;
      }
      if (here && elsewhere)
        take(op);
    }
    for (Operation *op : ops)
      if (hoisted.contains(op))
        op->moveBefore(start);
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
    // Results used after the range. Those that later ops read come first:
    // the residual stream, which the next layer or the final norm reads, is
    // the layer's first result, as the partitioner and the planner expect,
    // also when the model returns a layer's other values too (hidden states,
    // attention outputs, a KV cache's present keys and values).
    SmallVector<Value> outputs;
    for (Operation *op : range)
      for (Value result : op->getResults())
        if (llvm::any_of(result.getUsers(), [&](Operation *user) {
              return !inside.contains(block.findAncestorOpInBlock(*user));
            }))
          outputs.push_back(result);
    std::stable_partition(outputs.begin(), outputs.end(), [&](Value result) {
      return llvm::any_of(result.getUsers(), [&](Operation *user) {
        Operation *top = block.findAncestorOpInBlock(*user);
        return !inside.contains(top) && !isa<func::ReturnOp>(top);
      });
    });

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

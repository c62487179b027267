//===- WeftDeferGradientReduction.cpp - One gradient reduction per step ---===//
//
// Part of the Weft project.
//
// The partitioner reduces a partial sum where it arises: a weight replicated
// over the data-parallel axis whose gradient contracts the split batch is
// all-reduced inside the backward layer that computes it. Run once per
// micro-batch, that sends the gradients g times in a step of g micro-batches.
// This pass moves those reductions out of the step into a function of their
// own, which the runner calls once per step on the micro-batches' summed
// partial gradients: the data-parallel gradient reduction of PyTorch DDP's
// no_sync() accumulation and Megatron-LM's, and the bytes the cost model
// counts once per step.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"

#include <map>
#include <set>

namespace weft {
#define GEN_PASS_DEF_WEFTDEFERGRADIENTREDUCTION
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

/// The reduction a gradient's chain ends in: sum all-reduces over these
/// mesh axes, of one mesh and codec.
struct Reduction {
  FlatSymbolRefAttr mesh;
  Attribute codec;
  std::set<std::string> axes;
  bool operator==(const Reduction &other) const {
    return mesh == other.mesh && codec == other.codec && axes == other.axes;
  }
};

/// Whether `value` is the same on every rank that differs only in `axes`
/// (its coordinates on the other mesh axes held): made from constants,
/// parameters and the step's inputs that are not split or partial over
/// those axes, by ops without regions, slices over other axes, layer
/// boundaries, and all-reduces or all-gathers over those axes (whose result
/// every rank of the group shares). `known` remembers the values decided.
static bool isUniformOver(Value value, const std::set<std::string> &axes,
                          llvm::DenseMap<Value, bool> &known) {
  if (auto it = known.find(value); it != known.end())
    return it->second;
  auto overlaps = [&](ArrayAttr group) {
    return llvm::any_of(group.getAsValueRange<StringAttr>(),
                        [&](StringRef axis) { return axes.count(axis.str()); });
  };
  auto covers = [&](ArrayAttr group) {
    std::set<std::string> names;
    for (StringRef axis : group.getAsValueRange<StringAttr>())
      names.insert(axis.str());
    return llvm::all_of(axes,
                        [&](const std::string &a) { return names.count(a); });
  };
  auto decide = [&]() -> bool {
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      Operation *owner = arg.getOwner()->getParentOp();
      if (auto layer = dyn_cast_or_null<LayerOp>(owner))
        return arg.getArgNumber() < layer.getInputs().size() &&
               isUniformOver(layer.getInputs()[arg.getArgNumber()], axes,
                             known);
      auto func = dyn_cast_or_null<func::FuncOp>(owner);
      if (!func || arg.getOwner() != &func.getBody().front())
        return false;
      auto attr = func.getArgAttrOfType<ShardingAttr>(
          arg.getArgNumber(), WeftDialect::getLocalShardingAttrName());
      if (!attr)
        return true; // not partitioned: the same on every rank
      TensorSharding sharding = fromAttr(attr);
      auto inAxes = [&](const std::string &axis) { return axes.count(axis); };
      if (llvm::any_of(sharding.partial, inAxes))
        return false;
      for (const auto &dim : sharding.dims)
        if (llvm::any_of(dim, inAxes))
          return false;
      return true;
    }
    Operation *def = value.getDefiningOp();
    if (def->getNumRegions() > 0 && !isa<LayerOp>(def))
      return false;
    if (auto layer = dyn_cast<LayerOp>(def)) {
      auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
      return isUniformOver(
          yield.getValues()[cast<OpResult>(value).getResultNumber()], axes,
          known);
    }
    if (auto collective = dyn_cast<CollectiveOpInterface>(def)) {
      CollectiveKind kind = collective.getCollectiveKind();
      if ((kind == CollectiveKind::AllReduce ||
           kind == CollectiveKind::AllGather) &&
          covers(collective.getAxes()))
        return true;
      if (kind != CollectiveKind::AllSlice || overlaps(collective.getAxes()))
        return false;
    }
    return llvm::all_of(def->getOperands(), [&](Value operand) {
      return isUniformOver(operand, axes, known);
    });
  };
  bool uniform = decide();
  known[value] = uniform;
  return uniform;
}

/// isUniformOver's answers, per group of axes.
using UniformMemo =
    std::map<std::set<std::string>, llvm::DenseMap<Value, bool>>;

/// Whether every reader of the values on `path` but `result` (the value the
/// step returns) is on the path too: an op with a result on it, or a layer's
/// yield of one. Then removing the path's all-reduces changes no value that
/// anything else reads.
static bool readOnlyOnPath(Value result, const llvm::DenseSet<Value> &path) {
  for (Value value : path) {
    if (value == result)
      continue;
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (auto yield = dyn_cast<YieldOp>(user)) {
        auto layer = dyn_cast<LayerOp>(yield->getParentOp());
        if (!layer || !path.contains(layer->getResult(use.getOperandNumber())))
          return false;
        continue;
      }
      if (llvm::none_of(user->getResults(),
                        [&](Value r) { return path.contains(r); }))
        return false;
    }
  }
  return result.hasOneUse();
}

/// What the values of one step function carry: the reduction `carried`
/// finds for each value it is asked about, remembered, so that a value read
/// twice on the way (the sine and cosine tables' gradients, both sliced in
/// halves) is looked at once.
class ReductionSearch {
public:
  explicit ReductionSearch(UniformMemo &uniform) : uniform(uniform) {}

  /// The reduction `value` carries, if it is a sum all-reduce, or made from
  /// such all-reduces of one group by additive ops (`isAdditive`), by ops
  /// linear in one operand (`Multilinear`) whose other operands are the
  /// same on every rank of the group, and by layer boundaries: then the
  /// reductions can move past it (if nothing else reads the values on the
  /// way: `readOnlyOnPath`). A sum all-reduce of a value that itself carries
  /// an all-reduce over other axes is one all-reduce over both (the
  /// partitioner reduces a gradient partial over dp and ulysses in two
  /// steps): it is `nested`.
  std::optional<Reduction> carried(Value value) {
    if (auto it = memo.find(value); it != memo.end())
      return it->second;
    std::optional<Reduction> found = decide(value);
    memo[value] = found;
    return found;
  }

  /// Adds the values that carry `value`'s reduction to `path`, and the
  /// nested all-reduces to `nested`.
  void collect(Value value, llvm::DenseSet<Value> &path,
               llvm::DenseSet<Operation *> &nested) {
    if (!path.insert(value).second)
      return;
    Operation *def = value.getDefiningOp();
    if (auto reduce = dyn_cast<AllReduceOp>(def)) {
      if (isNested(reduce)) {
        nested.insert(reduce);
        collect(reduce.getInput(), path, nested);
      }
      return;
    }
    if (auto layer = dyn_cast<LayerOp>(def)) {
      auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
      collect(yield.getValues()[cast<OpResult>(value).getResultNumber()], path,
              nested);
      return;
    }
    for (Value operand : def->getOperands())
      if (carried(operand))
        collect(operand, path, nested);
  }

private:
  /// Whether `reduce`'s input carries a reduction of its mesh and codec
  /// over other axes, which it completes, through values nothing else
  /// reads (a tensor-parallel all-reduce of an activation's gradient, which
  /// many ops read, stays where it is).
  bool isNested(AllReduceOp reduce) {
    if (auto it = nestedMemo.find(reduce); it != nestedMemo.end())
      return it->second;
    std::optional<Reduction> inner = carried(reduce.getInput());
    bool nests =
        inner && inner->mesh == reduce.getMeshAttr() &&
        inner->codec == reduce.getCodecAttr() &&
        llvm::none_of(reduce.getAxes(), [&](Attribute axis) {
          return inner->axes.count(cast<StringAttr>(axis).getValue().str());
        });
    if (nests) {
      llvm::DenseSet<Value> innerPath;
      llvm::DenseSet<Operation *> innerNested;
      collect(reduce.getInput(), innerPath, innerNested);
      nests = readOnlyOnPath(reduce.getInput(), innerPath);
    }
    nestedMemo[reduce] = nests;
    return nests;
  }

  std::optional<Reduction> decide(Value value) {
    if (!isa<RankedTensorType>(value.getType()))
      return std::nullopt;
    Operation *def = value.getDefiningOp();
    if (!def)
      return std::nullopt;
    if (auto reduce = dyn_cast<AllReduceOp>(def)) {
      if (reduce.getKind() != ReductionKind::sum)
        return std::nullopt;
      Reduction own{reduce.getMeshAttr(), reduce.getCodecAttr(), {}};
      for (Attribute axis : reduce.getAxes())
        own.axes.insert(cast<StringAttr>(axis).getValue().str());
      if (isNested(reduce)) {
        std::optional<Reduction> inner = carried(reduce.getInput());
        own.axes.insert(inner->axes.begin(), inner->axes.end());
      }
      return own;
    }
    if (auto layer = dyn_cast<LayerOp>(def)) {
      auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
      return carried(
          yield.getValues()[cast<OpResult>(value).getResultNumber()]);
    }
    if (def->getNumOperands() == 0 || def->getNumResults() != 1)
      return std::nullopt;
    std::optional<Reduction> found;
    auto rule = dyn_cast<ShardingRuleOpInterface>(def);
    if (rule && rule.isAdditive()) {
      for (Value operand : def->getOperands()) {
        std::optional<Reduction> r = carried(operand);
        if (!r || (found && !(*r == *found)))
          return std::nullopt;
        found = r;
      }
      return found;
    }
    if (!def->hasTrait<weft::OpTrait::Multilinear>())
      return std::nullopt;
    // One operand carries the partial sum; the others must be the same on
    // every rank of its group.
    std::optional<unsigned> carrier;
    for (OpOperand &operand : def->getOpOperands()) {
      std::optional<Reduction> r = carried(operand.get());
      if (!r)
        continue;
      if (found)
        return std::nullopt;
      found = r;
      carrier = operand.getOperandNumber();
    }
    if (!found || llvm::any_of(def->getOpOperands(), [&](OpOperand &operand) {
          return operand.getOperandNumber() != *carrier &&
                 !isUniformOver(operand.get(), found->axes,
                                uniform[found->axes]);
        }))
      return std::nullopt;
    return found;
  }

  UniformMemo &uniform;
  llvm::DenseMap<Value, std::optional<Reduction>> memo;
  llvm::DenseMap<Operation *, bool> nestedMemo;
};

/// Removes the all-reduces `ReductionSearch` found on `path`: returns the value
/// that now holds the partial sum in place of `value`. `done` maps the
/// values already taken (read twice on the path) to theirs.
static Value removeReductions(Value value,
                              const llvm::DenseSet<Operation *> &nested,
                              const llvm::DenseSet<Value> &path,
                              llvm::DenseMap<Value, Value> &done) {
  if (auto it = done.find(value); it != done.end())
    return it->second;
  Operation *def = value.getDefiningOp();
  if (auto reduce = dyn_cast<AllReduceOp>(def)) {
    Value input = reduce.getInput();
    if (nested.contains(reduce))
      input = removeReductions(input, nested, path, done);
    reduce.getResult().replaceAllUsesWith(input);
    reduce.erase();
    done[value] = input;
    return input;
  }
  if (auto layer = dyn_cast<LayerOp>(def)) {
    auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
    unsigned index = cast<OpResult>(value).getResultNumber();
    Value yielded = yield.getValues()[index];
    Value partial = removeReductions(yielded, nested, path, done);
    if (partial != yielded)
      yield->setOperand(index, partial);
    done[value] = value;
    return value;
  }
  for (OpOperand &operand : def->getOpOperands()) {
    if (!path.contains(operand.get()))
      continue;
    Value partial = removeReductions(operand.get(), nested, path, done);
    if (partial != operand.get())
      operand.set(partial);
  }
  done[value] = value;
  return value;
}

struct WeftDeferGradientReduction
    : public weft::impl::WeftDeferGradientReductionBase<
          WeftDeferGradientReduction> {
  using WeftDeferGradientReductionBase::WeftDeferGradientReductionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    meshInfo = getMeshInfo(module);
    SymbolTable symbols(module);
    for (auto func : llvm::to_vector(module.getOps<func::FuncOp>())) {
      // A pipeline stage's training function is taken once
      // -weft-split-backward has cut it into its steps' functions (a `role`):
      // the executor reduces each step function's partial gradients.
      auto stage = func->getAttrOfType<DictionaryAttr>(
          WeftDialect::getPipelineStageAttrName());
      if (!func.isExternal() && (!stage || stage.get("role")) &&
          !func->hasAttr(WeftDialect::getGradientReductionAttrName()))
        defer(func, symbols);
    }
  }

  std::optional<MeshInfo> meshInfo;

  /// The reduction's axes in the order the mesh declares them.
  SmallVector<StringRef, 4> axesInMeshOrder(const Reduction &reduction) {
    SmallVector<StringRef, 4> ordered;
    if (meshInfo)
      for (const std::string &axis : meshInfo->axes)
        if (reduction.axes.count(axis))
          ordered.push_back(*reduction.axes.find(axis));
    for (const std::string &axis : reduction.axes)
      if (!llvm::is_contained(ordered, axis))
        ordered.push_back(axis);
    return ordered;
  }

  void defer(func::FuncOp func, SymbolTable &symbols) {
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    struct Moved {
      unsigned result;
      Reduction reduction;
    };
    SmallVector<Moved> moved;
    llvm::DenseSet<Operation *> nested;
    llvm::DenseSet<Value> path;
    UniformMemo uniform;
    ReductionSearch search(uniform);
    for (unsigned r = 0; r < func.getNumResults(); ++r) {
      if (!func.getResultAttr(r, WeftDialect::getGradientOfAttrName()))
        continue;
      std::optional<Reduction> reduction = search.carried(ret.getOperand(r));
      if (!reduction)
        continue;
      llvm::DenseSet<Operation *> ownNested;
      llvm::DenseSet<Value> ownPath;
      search.collect(ret.getOperand(r), ownPath, ownNested);
      if (!readOnlyOnPath(ret.getOperand(r), ownPath))
        continue;
      moved.push_back({r, *reduction});
      nested.insert(ownNested.begin(), ownNested.end());
      path.insert(ownPath.begin(), ownPath.end());
    }
    if (moved.empty())
      return;
    // The reduction function: one argument and one result per moved
    // gradient, each all-reduced as the step did (-weft-optimize-collectives
    // then buckets them).
    MLIRContext *context = func.getContext();
    OpBuilder b(context);
    SmallVector<Type> types;
    for (const Moved &m : moved)
      types.push_back(func.getResultTypes()[m.result]);
    b.setInsertionPointAfter(func);
    auto reduce = func::FuncOp::create(
        b, func.getLoc(), (func.getName() + "_reduce_gradients").str(),
        FunctionType::get(context, types, types));
    symbols.insert(reduce);
    Block *body = reduce.addEntryBlock();
    b.setInsertionPointToEnd(body);
    SmallVector<Value> reduced;
    // The dimension each gradient is reduce-scattered on (-1: all-reduced
    // whole) and the axes it is scattered over.
    SmallVector<int64_t> scattered;
    SmallVector<SmallVector<StringRef, 4>> scatteredOver;
    // A stored weight's gradient scattered into its block with nothing left
    // to all-reduce: reduced after every micro-batch, as AxoNN's backward
    // reduce-scatters over the depth axis, so a rank accumulates its block.
    bool storedBlocks = false;
    const bool loadBalanced =
        func->hasAttr(WeftDialect::getLoadBalancedAttrName());
    ModuleOp module = func->getParentOfType<ModuleOp>();
    const llvm::StringMap<SmallVector<std::string, 2>> storedAxes =
        module ? storedParameterAxes(module)
               : llvm::StringMap<SmallVector<std::string, 2>>();
    for (auto [index, m] : llvm::enumerate(moved)) {
      auto type = cast<RankedTensorType>(types[index]);
      SmallVector<StringRef, 4> axes = axesInMeshOrder(m.reduction);
      auto sizeOf = [&](ArrayRef<StringRef> names) {
        int64_t size = 1;
        for (StringRef axis : names)
          size *= meshInfo ? meshInfo->size(axis) : 1;
        return size;
      };
      auto local = func.getResultAttrOfType<ShardingAttr>(
          m.result, WeftDialect::getLocalShardingAttrName());
      TensorSharding whole =
          local ? fromAttr(local) : TensorSharding::replicated(type.getRank());
      // A block whose dimension these axes lead, cp first, is in the
      // load-balanced ring's layout (two mirrored pieces per rank), as the
      // runtime lays out such a split: its reduce-scatter is a zigzag one.
      auto zigzagOn = [&](ArrayRef<StringRef> over, int64_t d) {
        return loadBalanced && !over.empty() && over.front() == "cp" &&
               (size_t(d) >= whole.dims.size() || whole.dims[d].empty());
      };
      // With `scatter` (ZeRO), over the whole group on the first dimension
      // that divides; without, a weight the step stores in blocks beyond its
      // layout (AxoNN's depth axis, weft.stored_over) gets its gradient
      // reduce-scattered into that block over those axes, the rest of the
      // group all-reduced: its optimizer step updates the stored block.
      SmallVector<StringRef, 4> over;
      int64_t dim = -1;
      if (scatter) {
        over = axes;
        const int64_t group = sizeOf(over);
        for (int64_t d = 0; group > 1 && d < type.getRank(); ++d)
          if (type.getDimSize(d) % (group * (zigzagOn(over, d) ? 2 : 1)) == 0) {
            dim = d;
            break;
          }
      } else if (auto name = func.getResultAttrOfType<StringAttr>(
                     m.result, WeftDialect::getGradientOfAttrName());
                 name && type.getRank() > 0) {
        SmallVector<std::string, 2> stored = storedAxes.lookup(name.getValue());
        for (StringRef axis : axes)
          if (llvm::is_contained(stored, axis))
            over.push_back(axis);
        const int64_t group = sizeOf(over);
        if (over.size() == stored.size() && group > 1 &&
            type.getDimSize(0) % (group * (zigzagOn(over, 0) ? 2 : 1)) == 0)
          dim = 0;
      }
      if (dim < 0)
        over.clear();
      storedBlocks |= !scatter && dim >= 0 && over.size() == axes.size();
      scattered.push_back(dim);
      scatteredOver.push_back(over);
      auto kind = ReductionKindAttr::get(context, ReductionKind::sum);
      auto codec = dyn_cast_or_null<CollectiveCodecAttr>(m.reduction.codec);
      Value value = body->getArgument(index);
      if (dim >= 0) {
        SmallVector<int64_t> block(type.getShape());
        block[dim] /= sizeOf(over);
        value = ReduceScatterOp::create(
            b, func.getLoc(), type.clone(block), kind, value, m.reduction.mesh,
            b.getStrArrayAttr(over), b.getI64IntegerAttr(dim),
            zigzagOn(over, dim) ? b.getUnitAttr() : UnitAttr(), codec);
      }
      SmallVector<StringRef, 4> rest;
      for (StringRef axis : axes)
        if (!llvm::is_contained(over, axis))
          rest.push_back(axis);
      if (!rest.empty())
        value = AllReduceOp::create(
            b, func.getLoc(), value.getType(), kind, value, m.reduction.mesh,
            b.getStrArrayAttr(rest), codec, DenseI64ArrayAttr());
      reduced.push_back(value);
    }
    func::ReturnOp::create(b, func.getLoc(), reduced);
    reduce.setType(
        FunctionType::get(context, types, ValueRange(reduced).getTypes()));
    // What each moved result is: a partial sum over the reduction's axes
    // in the step, whole in the reduction function.
    for (auto [index, m] : llvm::enumerate(moved)) {
      SmallVector<StringRef, 4> axes = axesInMeshOrder(m.reduction);
      auto local = func.getResultAttrOfType<ShardingAttr>(
          m.result, WeftDialect::getLocalShardingAttrName());
      StringRef mesh = m.reduction.mesh.getValue();
      TensorSharding whole =
          local ? fromAttr(local)
                : TensorSharding::replicated(
                      cast<RankedTensorType>(types[index]).getRank());
      TensorSharding partial = whole;
      partial.partial.append(axes.begin(), axes.end());
      ShardingAttr partialAttr = toAttr(context, mesh, partial);
      TensorSharding kept = whole;
      if (scattered[index] >= 0)
        kept.dims[scattered[index]].append(scatteredOver[index].begin(),
                                           scatteredOver[index].end());
      reduce.setResultAttr(index, WeftDialect::getLocalShardingAttrName(),
                           toAttr(context, mesh, kept));
      reduce.setArgAttr(index, WeftDialect::getLocalShardingAttrName(),
                        partialAttr);
      func.setResultAttr(m.result, WeftDialect::getLocalShardingAttrName(),
                         partialAttr);
      reduce.setResultAttr(
          index, WeftDialect::getGradientOfAttrName(),
          func.getResultAttr(m.result, WeftDialect::getGradientOfAttrName()));
    }
    llvm::DenseMap<Value, Value> done;
    for (const Moved &m : moved)
      ret->setOperand(m.result, removeReductions(ret.getOperand(m.result),
                                                 nested, path, done));
    func->setAttr(WeftDialect::getGradientReductionAttrName(),
                  FlatSymbolRefAttr::get(reduce.getSymNameAttr()));
    if (everyMicroBatch || storedBlocks)
      func->setAttr(WeftDialect::getReduceEveryMicroBatchAttrName(),
                    UnitAttr::get(context));
  }
};
} // namespace

//===- WeftSplitBackward.cpp - A training stage's steps as functions ------===//
//
// Part of the Weft project.
//
// Cuts each differentiated pipeline stage (forward and backward in one
// function) into the functions of its schedule's steps: forward, backward
// (input gradients) and, for schedules with W steps, weight gradients. An op
// goes to the first function whose results need it; what a later function
// reads from an earlier one is kept on the rank in a numbered slot
// (weft.saved).
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace weft {
#define GEN_PASS_DEF_WEFTSPLITBACKWARD
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
enum Role { Forward = 0, Backward = 1, Weight = 2 };
constexpr const char *roleNames[] = {"forward", "backward", "weight"};

/// Ops that weights and constants alone compute (parameters, constants, a
/// weight's bf16 cast or transpose, its gather from stored shards): rebuilt
/// in every function that reads them rather than kept between steps, as
/// the cost model counts them (weights, not activations: a value is kept
/// per micro-batch only if the step's inputs flow into it).
static bool isRebuilt(Operation *op, llvm::DenseMap<Operation *, bool> &memo) {
  if (op->getNumRegions())
    return false;
  if (op->getNumOperands() == 0)
    return true;
  if (!isa<AllSliceOp, AllGatherOp>(op) &&
      (isa<CollectiveOpInterface>(op) || !isMemoryEffectFree(op)))
    return false;
  if (auto known = memo.find(op); known != memo.end())
    return known->second;
  bool rebuilt = llvm::all_of(op->getOperands(), [&](Value operand) {
    Operation *def = operand.getDefiningOp();
    return def && def->getBlock() == op->getBlock() && isRebuilt(def, memo);
  });
  memo[op] = rebuilt;
  return rebuilt;
}
bool isRebuilt(Operation *op) {
  llvm::DenseMap<Operation *, bool> memo;
  return isRebuilt(op, memo);
}

/// The values `op` reads: its operands and what its regions use from above.
SmallVector<Value> readsOf(Operation *op) {
  SmallVector<Value> values(op->getOperands());
  if (op->getNumRegions()) {
    llvm::SetVector<Value> above;
    getUsedValuesDefinedAbove(op->getRegions(), above);
    values.append(above.begin(), above.end());
  }
  return values;
}

struct WeftSplitBackward
    : public weft::impl::WeftSplitBackwardBase<WeftSplitBackward> {
  using WeftSplitBackwardBase::WeftSplitBackwardBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto pipeline = module->getAttrOfType<DictionaryAttr>(
        WeftDialect::getPipelineAttrName());
    if (!pipeline) {
      module.emitError("-weft-split-backward: the module is not cut into "
                       "pipeline stages; run -weft-split-stages and "
                       "-weft-differentiate first");
      return signalPassFailure();
    }
    // Weight-gradient steps in the schedule: their own function.
    bool weightSteps = false;
    if (auto steps = pipeline.getAs<ArrayAttr>("steps"))
      for (Attribute list : steps)
        if (auto names = dyn_cast<ArrayAttr>(list))
          for (Attribute name : names)
            if (auto text = dyn_cast<StringAttr>(name))
              weightSteps |= text.getValue().starts_with("W");
    SmallVector<func::FuncOp> stages;
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(WeftDialect::getPipelineStageAttrName()))
        stages.push_back(func);
    bool any = false;
    for (func::FuncOp func : stages) {
      auto stage = func->getAttrOfType<DictionaryAttr>(
          WeftDialect::getPipelineStageAttrName());
      if (stage.get("role")) {
        func.emitError("-weft-split-backward: @")
            << func.getSymName() << " is already split (it has a role)";
        return signalPassFailure();
      }
      bool differentiated = false;
      for (unsigned r = 0; r < func.getNumResults(); ++r)
        differentiated |=
            func.getResultAttr(r, WeftDialect::getGradientOfAttrName()) ||
            func.getResultAttr(r, WeftDialect::getGradientToAttrName());
      if (!differentiated)
        continue;
      any = true;
      if (failed(split(func, weightSteps)))
        return signalPassFailure();
    }
    if (!any) {
      module.emitError("-weft-split-backward: no pipeline stage returns "
                       "gradients; run -weft-differentiate on the split "
                       "module first");
      signalPassFailure();
    }
  }

  /// Splits a backward layer whose results the backward step needs only in
  /// part (the input gradient it sends on) into two layers: the first
  /// computes those results and yields, besides, what the rest reads of it
  /// (the layer's output gradients, its kept activations); the second,
  /// `<kind>.weight`, computes the parameters' gradients from them. Without
  /// this a backward layer is one op, and the backward step would compute
  /// (and reduce) its weights' gradients too, leaving the W step empty.
  /// The layer's recomputed forward (ops that read only its inputs that
  /// the forward step computed, `isForward`) is the first part's, as a
  /// framework recomputes before the backward: the second reads the
  /// recomputed values its weight gradients read (a linear's input), not
  /// what they are computed from (the two inputs of a SwiGLU product).
  static void splitLayer(LayerOp layer, const llvm::DenseSet<unsigned> &needed,
                         llvm::function_ref<bool(Value)> isForward) {
    Block &inner = layer.getBody().front();
    auto yield = cast<YieldOp>(inner.getTerminator());
    // The recomputed forward: ops reading only forward inputs, weights and
    // constants, and one another.
    llvm::DenseSet<Operation *> recomputed;
    for (Operation &op : inner.without_terminator())
      if (llvm::all_of(readsOf(&op), [&](Value value) {
            if (auto arg = dyn_cast<BlockArgument>(value))
              return arg.getOwner() != &inner ||
                     isForward(layer.getInputs()[arg.getArgNumber()]);
            Operation *def = value.getDefiningOp();
            return def->getBlock() != &inner || recomputed.contains(def) ||
                   isRebuilt(def);
          }))
        recomputed.insert(&op);
    SmallVector<unsigned> first, second;
    for (unsigned r = 0; r < layer.getNumResults(); ++r)
      (needed.contains(r) ? first : second).push_back(r);
    // What the first part computes: its yields' producers in the body.
    llvm::DenseSet<Operation *> firstOps;
    SmallVector<Value> work;
    for (unsigned r : first)
      work.push_back(yield.getOperand(r));
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || def->getBlock() != &inner || !firstOps.insert(def).second)
        continue;
      llvm::append_range(work, readsOf(def));
    }
    // What the second computes besides, and what it reads of the first
    // (parameters and constants are rebuilt, not passed).
    llvm::DenseSet<Operation *> secondOps;
    llvm::SetVector<Value> bridges, args;
    for (unsigned r : second)
      work.push_back(yield.getOperand(r));
    while (!work.empty()) {
      Value value = work.pop_back_val();
      Operation *def = value.getDefiningOp();
      if (!def) {
        if (cast<BlockArgument>(value).getOwner() == &inner)
          args.insert(value);
        continue;
      }
      if (def->getBlock() != &inner)
        continue;
      if (!isRebuilt(def) && !firstOps.contains(def) &&
          recomputed.contains(def)) {
        // A gather that only the second part reads (a linear's input under
        // SP, kept as its block): the second part gathers it, the first
        // does not. (Recomputed by the first part, it ran there unread: a
        // collective is not dead code to erase.)
        if (isa<AllGatherOp>(def)) {
          if (secondOps.insert(def).second)
            llvm::append_range(work, readsOf(def));
          continue;
        }
        // Recomputed by the first part, with what it is computed from
        // (the parameters and constants it reads rebuilt there too: a norm
        // recomputed for the weight part's linear reads its scale).
        SmallVector<Operation *> more{def};
        while (!more.empty()) {
          Operation *op = more.pop_back_val();
          if (!firstOps.insert(op).second)
            continue;
          for (Value read : readsOf(op))
            if (Operation *from = read.getDefiningOp();
                from && from->getBlock() == &inner)
              more.push_back(from);
        }
      }
      if (firstOps.contains(def) && !isRebuilt(def)) {
        // A gather over the mesh (under SP an output gradient or a linear's
        // input, gathered over the sequence): the second part gathers
        // again from the block, which is what it keeps, as the step does
        // for the stage's own gathers.
        if (isa<AllGatherOp>(def)) {
          if (secondOps.insert(def).second)
            llvm::append_range(work, readsOf(def));
          continue;
        }
        bridges.insert(value);
        continue;
      }
      if (secondOps.insert(def).second)
        llvm::append_range(work, readsOf(def));
    }
    OpBuilder b(layer);
    SmallVector<Type> firstTypes;
    for (unsigned r : first)
      firstTypes.push_back(layer.getResult(r).getType());
    for (Value bridge : bridges)
      firstTypes.push_back(bridge.getType());
    auto build = [&](StringRef kind, ValueRange inputs, TypeRange types,
                     ArrayRef<Value> innerInputs,
                     const llvm::DenseSet<Operation *> &keep,
                     ArrayRef<Value> yields) {
      auto part = LayerOp::create(b, layer.getLoc(), kind, layer.getIndex(),
                                  inputs, types);
      for (NamedAttribute attr : layer->getDiscardableAttrs())
        part->setAttr(attr.getName(), attr.getValue());
      Block &body = part.getBody().front();
      IRMapping map;
      for (auto [value, arg] : llvm::zip(innerInputs, body.getArguments()))
        map.map(value, arg);
      OpBuilder in = OpBuilder::atBlockEnd(&body);
      for (Operation &op : inner.without_terminator())
        if (keep.contains(&op))
          in.clone(op, map);
      SmallVector<Value> mapped;
      for (Value value : yields)
        mapped.push_back(map.lookup(value));
      YieldOp::create(in, yield.getLoc(), mapped);
      return part;
    };
    SmallVector<Value> firstYields;
    for (unsigned r : first)
      firstYields.push_back(yield.getOperand(r));
    llvm::append_range(firstYields, bridges);
    SmallVector<Value> innerArgs(inner.getArguments());
    LayerOp head = build(layer.getKind(), layer.getInputs(), firstTypes,
                         innerArgs, firstOps, firstYields);
    // The second part's inputs: the layer's that it reads, then the first
    // part's bridges.
    SmallVector<Value> inputs, innerInputs;
    for (BlockArgument arg : inner.getArguments())
      if (args.contains(arg)) {
        inputs.push_back(layer.getInputs()[arg.getArgNumber()]);
        innerInputs.push_back(arg);
      }
    for (auto [k, bridge] : llvm::enumerate(bridges)) {
      inputs.push_back(head.getResult(unsigned(first.size() + k)));
      innerInputs.push_back(bridge);
    }
    SmallVector<Type> secondTypes;
    SmallVector<Value> secondYields;
    for (unsigned r : second) {
      secondTypes.push_back(layer.getResult(r).getType());
      secondYields.push_back(yield.getOperand(r));
    }
    std::string kind = (layer.getKind() + ".weight").str();
    LayerOp tail =
        build(kind, inputs, secondTypes, innerInputs, secondOps, secondYields);
    for (auto [k, r] : llvm::enumerate(first))
      layer.getResult(r).replaceAllUsesWith(head.getResult(unsigned(k)));
    for (auto [k, r] : llvm::enumerate(second))
      layer.getResult(r).replaceAllUsesWith(tail.getResult(unsigned(k)));
    layer.erase();
  }

  LogicalResult split(func::FuncOp func, bool weightSteps) {
    if (!func.getBody().hasOneBlock())
      return func.emitError("-weft-split-backward: @")
             << func.getSymName() << " has more than one block";
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    auto roleOfResult = [&](unsigned r) {
      if (func.getResultAttr(r, WeftDialect::getGradientToAttrName()))
        return Backward;
      if (func.getResultAttr(r, WeftDialect::getGradientOfAttrName()))
        return weightSteps ? Weight : Backward;
      return Forward;
    };
    // The first stage sends no gradient back, yet its B step computes the
    // input gradients as every other stage's does, down to the gradient that
    // reaches its first layer's input (what the embedding's weight gradient
    // reads), and keeps that for its W step: W then computes the weight
    // gradients alone, as the schedule's placement of W steps assumes. (Were
    // the whole backward left to W, the last micro-batches' W steps, which
    // the first stage runs after its last B, would make the step longer.)
    // These are the backward layers' results that an op outside them reads.
    bool sendsGradient = false;
    for (unsigned r = 0; r < ret.getNumOperands(); ++r)
      sendsGradient |= roleOfResult(r) == Backward;
    auto firstStageInputGradients = [&]() {
      SmallVector<Value> seeds;
      if (!weightSteps || sendsGradient)
        return seeds;
      for (auto layer : body.getOps<LayerOp>()) {
        if (!layer.getKind().ends_with(".backward"))
          continue;
        for (Value result : layer->getResults())
          if (llvm::any_of(result.getUsers(), [](Operation *user) {
                auto reader = dyn_cast<LayerOp>(user);
                return !isa<func::ReturnOp>(user) &&
                       !(reader && reader.getKind().ends_with(".backward"));
              }))
            seeds.push_back(result);
      }
      return seeds;
    };
    // With W steps: the results of each layer that the forward and backward
    // steps need; a layer they need only in part is cut in two.
    if (weightSteps) {
      llvm::DenseMap<Operation *, llvm::DenseSet<unsigned>> needed;
      llvm::DenseSet<Value> seen;
      llvm::DenseSet<Operation *> visited;
      SmallVector<Value> work;
      for (unsigned r = 0; r < ret.getNumOperands(); ++r)
        if (roleOfResult(r) != Weight)
          work.push_back(ret.getOperand(r));
      llvm::append_range(work, firstStageInputGradients());
      while (!work.empty()) {
        Value value = work.pop_back_val();
        if (!seen.insert(value).second)
          continue;
        Operation *def = value.getDefiningOp();
        if (!def || def->getBlock() != &body)
          continue;
        if (isa<LayerOp>(def))
          needed[def].insert(cast<OpResult>(value).getResultNumber());
        if (visited.insert(def).second)
          llvm::append_range(work, readsOf(def));
      }
      SmallVector<std::pair<LayerOp, llvm::DenseSet<unsigned>>> parts;
      for (auto layer : body.getOps<LayerOp>()) {
        // (A forward layer stays whole: its kept values are the forward's.)
        if (!layer.getKind().ends_with(".backward"))
          continue;
        auto it = needed.find(layer);
        if (it == needed.end() || it->second.size() == layer.getNumResults())
          continue;
        parts.emplace_back(layer, it->second);
      }
      // What the forward step computes (the values the backward layers
      // take from it): its ops, and the stage's inputs but the gradients
      // received.
      llvm::DenseSet<Operation *> forwardOps;
      for (unsigned r = 0; r < ret.getNumOperands(); ++r)
        if (roleOfResult(r) == Forward)
          work.push_back(ret.getOperand(r));
      while (!work.empty()) {
        Operation *def = work.pop_back_val().getDefiningOp();
        if (def && def->getBlock() == &body && forwardOps.insert(def).second)
          llvm::append_range(work, readsOf(def));
      }
      auto isForward = [&](Value value) {
        if (auto arg = dyn_cast<BlockArgument>(value))
          return !func.getArgAttr(arg.getArgNumber(),
                                  WeftDialect::getCotangentOfAttrName());
        return forwardOps.contains(value.getDefiningOp()) ||
               isRebuilt(value.getDefiningOp());
      };
      for (auto &[layer, results] : parts)
        splitLayer(layer, results, isForward);
    }
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    // Each op to the first role whose results need it.
    llvm::DenseMap<Operation *, Role> owner;
    SmallVector<llvm::DenseSet<Operation *>, 3> rebuiltIn(3);
    // (The layers are cut by now: the first stage's input gradients are
    // their first parts' results.)
    const SmallVector<Value> inputGradients = firstStageInputGradients();
    for (Role role : {Forward, Backward, Weight}) {
      SmallVector<Value> work;
      for (unsigned r = 0; r < ret.getNumOperands(); ++r)
        if (roleOfResult(r) == role)
          work.push_back(ret.getOperand(r));
      if (role == Backward)
        llvm::append_range(work, inputGradients);
      while (!work.empty()) {
        Value value = work.pop_back_val();
        Operation *def = value.getDefiningOp();
        if (!def || def->getBlock() != &body)
          continue;
        if (isRebuilt(def)) {
          // (With what it is rebuilt from.)
          if (rebuiltIn[role].insert(def).second)
            llvm::append_range(work, def->getOperands());
          continue;
        }
        // An activation an earlier step gathered over the mesh (the output
        // layer's input under SP): gathered again from the kept block, as
        // Megatron's sequence-parallel linears do, not kept whole.
        if (isa<AllGatherOp>(def) && owner.count(def) &&
            owner.lookup(def) != role) {
          rebuiltIn[role].insert(def);
          continue;
        }
        if (!owner.try_emplace(def, role).second)
          continue;
        llvm::append_range(work, readsOf(def));
      }
    }

    // Per role: the values it reads that are made elsewhere.
    llvm::MapVector<Value, int64_t> slots; // a value kept between steps
    SmallVector<llvm::SetVector<Value>, 3> reads(3);
    // A value received from the previous stage is the forward step's: a
    // later step that reads it keeps it.
    auto isReceived = [&](Value value) {
      auto arg = dyn_cast<BlockArgument>(value);
      return arg && func.getArgAttr(arg.getArgNumber(),
                                    WeftDialect::getReceivedFromAttrName());
    };
    auto producer = [&](Value value) {
      Operation *def = value.getDefiningOp();
      return def ? owner.lookup(def) : Forward;
    };
    auto noteRead = [&](Role role, Value value) {
      Operation *def = value.getDefiningOp();
      if (!def && (role == Forward || !isReceived(value))) {
        reads[role].insert(value); // a function argument
        return;
      }
      if (!def) {
        reads[role].insert(value);
        slots.try_emplace(value, int64_t(slots.size()));
        return;
      }
      if (isRebuilt(def) || owner.lookup(def) == role ||
          rebuiltIn[role].contains(def))
        return;
      reads[role].insert(value);
      slots.try_emplace(value, int64_t(slots.size()));
    };
    for (Operation *op : ops) {
      auto it = owner.find(op);
      if (it == owner.end())
        continue;
      for (Value value : readsOf(op))
        noteRead(it->second, value);
    }
    for (unsigned r = 0; r < ret.getNumOperands(); ++r)
      noteRead(roleOfResult(r), ret.getOperand(r));
    // A gather done again reads the block it gathers (what a rebuilt
    // weight reads is rebuilt too).
    for (Role role : {Backward, Weight})
      for (Operation *op : ops)
        if (rebuiltIn[role].contains(op))
          for (Value value : op->getOperands())
            noteRead(role, value);

    MLIRContext *ctx = &getContext();
    OpBuilder b(func);
    auto stageAttr = func->getAttrOfType<DictionaryAttr>(
        WeftDialect::getPipelineStageAttrName());
    auto i64 = [&](int64_t n) { return b.getI64IntegerAttr(n); };
    for (Role role : {Forward, Backward, Weight}) {
      bool hasResults = role == Backward && !inputGradients.empty();
      for (unsigned r = 0; r < ret.getNumOperands(); ++r)
        hasResults |= roleOfResult(r) == role;
      if (!hasResults)
        continue;
      // Arguments: the function's own (in order), then the kept values.
      SmallVector<Value> args;
      SmallVector<DictionaryAttr> argAttrs;
      for (BlockArgument arg : func.getArguments())
        if (reads[role].contains(arg) &&
            (role == Forward || !slots.count(arg))) {
          args.push_back(arg);
          argAttrs.push_back(func.getArgAttrDict(arg.getArgNumber()));
        }
      for (auto [value, slot] : slots)
        if (reads[role].contains(value) && producer(value) != role) {
          args.push_back(value);
          argAttrs.push_back(b.getDictionaryAttr(
              b.getNamedAttr(WeftDialect::getSavedAttrName(), i64(slot))));
        }
      // Results: the role's own, then what later roles keep from it.
      SmallVector<Value> results;
      SmallVector<DictionaryAttr> resultAttrs;
      for (unsigned r = 0; r < ret.getNumOperands(); ++r)
        if (roleOfResult(r) == role) {
          results.push_back(ret.getOperand(r));
          resultAttrs.push_back(func.getResultAttrDict(r));
        }
      for (auto [value, slot] : slots) {
        if (producer(value) != role)
          continue;
        results.push_back(value);
        resultAttrs.push_back(b.getDictionaryAttr(
            b.getNamedAttr(WeftDialect::getSavedAttrName(), i64(slot))));
      }
      std::string name = func.getSymName().str();
      if (role != Forward)
        name += std::string("_") + roleNames[role];
      auto piece = func::FuncOp::create(
          b, func.getLoc(), name,
          FunctionType::get(ctx, ValueRange(args).getTypes(),
                            ValueRange(results).getTypes()));
      NamedAttrList stage(stageAttr);
      stage.set("role", b.getStringAttr(roleNames[role]));
      piece->setAttr(WeftDialect::getPipelineStageAttrName(),
                     stage.getDictionary(ctx));
      for (NamedAttribute attr : func->getAttrs())
        if (attr.getName() == WeftDialect::getLoadBalancedAttrName())
          piece->setAttr(attr.getName(), attr.getValue());
      Block *entry = piece.addEntryBlock();
      IRMapping map;
      for (auto [position, value] : llvm::enumerate(args)) {
        map.map(value, entry->getArgument(position));
        if (argAttrs[position])
          piece.setArgAttrs(position, argAttrs[position]);
      }
      OpBuilder inside = OpBuilder::atBlockEnd(entry);
      for (Operation *op : ops)
        if (rebuiltIn[role].contains(op) ||
            (owner.count(op) && owner.lookup(op) == role))
          inside.clone(*op, map);
      SmallVector<Value> mapped;
      for (Value value : results)
        mapped.push_back(map.lookup(value));
      func::ReturnOp::create(inside, ret.getLoc(), mapped);
      for (auto [position, attrs] : llvm::enumerate(resultAttrs))
        if (attrs)
          piece.setResultAttrs(position, attrs);
    }
    func.erase();
    return success();
  }
};
} // namespace

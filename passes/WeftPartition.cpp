//===- WeftPartition.cpp - SPMD partitioning and collective cleanup -------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/Partition.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"

#include <climits>
#include <map>

namespace weft {
#define GEN_PASS_DEF_WEFTPARTITION
#define GEN_PASS_DEF_WEFTOPTIMIZECOLLECTIVES
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

/// Rewrites one function into the program each rank runs: the driver of
/// each op's partition method (PartitionState), and resharding.
class Partitioner : public PartitionState {
public:
  Partitioner(func::FuncOp func, const MeshInfo &mesh)
      : func(func), meshInfo(mesh), b(func.getContext()),
        loadBalanced(func->hasAttr(WeftDialect::getLoadBalancedAttrName())) {}

  LogicalResult run();

  OpBuilder &builder() override { return b; }
  const MeshInfo &mesh() const override { return meshInfo; }
  TensorSharding target(Value v) override {
    if (std::optional<TensorSharding> s = getSharding(v))
      return *s;
    return TensorSharding::replicated(
        cast<RankedTensorType>(v.getType()).getRank());
  }
  const TensorSharding &actual(Value global) override {
    return actuals[global];
  }
  Value operand(Location loc, Value global,
                const TensorSharding &want) override {
    auto key = std::make_pair(global.getAsOpaquePointer(), want.str());
    auto found = reshards.find(key);
    if (found != reshards.end())
      return found->second;
    Value v = reshard(loc, local.lookup(global), actuals[global], want);
    reshards[key] = v;
    return v;
  }
  Value reshard(Location loc, Value value, TensorSharding from,
                const TensorSharding &to) override;
  void setResult(Value global, Value localValue,
                 TensorSharding sharding) override {
    local[global] = localValue;
    actuals[global] = std::move(sharding);
  }
  /// Load-balanced rings lay the sequence out in mirrored chunks: slicing
  /// and gathering over the ring axis (always the major axis of a sequence
  /// split) use that order.
  bool isZigzag(ArrayRef<std::string> axes) override {
    return loadBalanced && !axes.empty() && axes.front() == "cp";
  }

private:
  static RankedTensorType resized(Value v, int64_t dim, int64_t factor,
                                  bool multiply) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = multiply ? shape[dim] * factor : shape[dim] / factor;
    return RankedTensorType::get(shape, type.getElementType());
  }
  LogicalResult partitionOp(Operation *op);
  LogicalResult partitionLayer(LayerOp layer);
  /// Of each attention gradient in a backward layer that reads the forward
  /// layer's q, k and v (kept, or recomputed as recompute=op recomputes the
  /// rotary K) without attending them again, the forward attention
  /// (attentionInForwardLayer; the global program, found before it is
  /// partitioned).
  llvm::DenseMap<Operation *, Operation *> forwardAttentionOf;
  llvm::DenseSet<Operation *> statisticsWanted;
  /// A ring attention's statistics as its forward layer hands them over
  /// (the local layer's results), by the global attention.
  llvm::DenseMap<Operation *, RingStatistics> handedOver;
  /// Where the forward layer hands the output over in a later layout (one
  /// the layer yields anyway): the layouts (weft::layoutChain of the ring's
  /// output, local values of the forward layer) up to that one.
  llvm::DenseMap<Operation *, SmallVector<Value, 4>> handedOverLayouts;

  func::FuncOp func;
  const MeshInfo &meshInfo;
  OpBuilder b;
  bool loadBalanced;
  llvm::DenseMap<Value, Value> local;
  llvm::DenseMap<Value, TensorSharding> actuals;
  SmallVector<BlockArgument> globals;
  std::map<std::pair<const void *, std::string>, Value> reshards;
};

Value Partitioner::reshard(Location loc, Value value, TensorSharding from,
                           const TensorSharding &to) {
  if (from == to)
    return value;
  size_t rank = from.dims.size();
  // 1. Pending sums: reduce-scatter onto a dimension that gains exactly the
  //    partial axes, all-reduce what is left.
  if (!from.partial.empty()) {
    for (size_t d = 0; d < rank; ++d) {
      const auto &have = from.dims[d], &want = to.dims[d];
      if (want.size() <= have.size() ||
          !std::equal(have.begin(), have.end(), want.begin()))
        continue;
      SmallVector<std::string, 2> extra(want.begin() + have.size(), want.end());
      bool allPartial = true;
      for (const std::string &axis : extra)
        allPartial &= llvm::is_contained(from.partial, axis);
      if (!allPartial)
        continue;
      int64_t n = meshInfo.product(extra);
      // (A split's layout is the load-balanced one only when its first
      // axis is cp: the axes that lead the dimension, as the runtime's.)
      value = ReduceScatterOp::create(
          b, loc, resized(value, d, n, false),
          ReductionKindAttr::get(b.getContext(), ReductionKind::sum), value,
          meshRef(), axesAttr(extra), b.getI64IntegerAttr(d),
          have.empty() ? zigzagAttr(extra) : UnitAttr(), CollectiveCodecAttr());
      from.dims[d] = want;
      SmallVector<std::string, 2> rest;
      for (const std::string &axis : from.partial)
        if (!llvm::is_contained(extra, axis))
          rest.push_back(axis);
      from.partial = rest;
      break;
    }
    if (!from.partial.empty()) {
      value = AllReduceOp::create(
          b, loc, value.getType(),
          ReductionKindAttr::get(b.getContext(), ReductionKind::sum), value,
          meshRef(), axesAttr(from.partial), CollectiveCodecAttr(),
          DenseI64ArrayAttr());
      from.partial.clear();
    }
  }
  // 2. Axes leaving a dimension: to another dimension that gains exactly
  //    them (all_to_all), or gathered.
  for (size_t d = 0; d < rank; ++d) {
    auto &have = from.dims[d];
    const auto &want = to.dims[d];
    size_t common = 0;
    while (common < have.size() && common < want.size() &&
           have[common] == want[common])
      ++common;
    if (common == have.size())
      continue;
    SmallVector<std::string, 2> leaving(have.begin() + common, have.end());
    int64_t n = meshInfo.product(leaving);
    bool moved = false;
    // An all-to-all moves contiguous chunks; a load-balanced ring's
    // sequence is laid out in mirrored (zigzag) chunks, which only its
    // gather and slice know. Moving a zigzag split to another dimension by
    // all-to-all would scramble both (the backward of causal ring attention,
    // whose dS moves from query-split to key-split, did).
    for (size_t e = 0; e < rank && !moved && !isZigzag(leaving); ++e) {
      if (e == d)
        continue;
      const auto &eHave = from.dims[e], &eWant = to.dims[e];
      if (eWant.size() != eHave.size() + leaving.size() ||
          !std::equal(eHave.begin(), eHave.end(), eWant.begin()) ||
          !std::equal(leaving.begin(), leaving.end(),
                      eWant.begin() + eHave.size()))
        continue;
      auto type = cast<RankedTensorType>(value.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[e] /= n;
      shape[d] *= n;
      value = AllToAllOp::create(
          b, loc, RankedTensorType::get(shape, type.getElementType()), value,
          meshRef(), axesAttr(leaving), b.getI64IntegerAttr(e),
          b.getI64IntegerAttr(d), CollectiveCodecAttr());
      from.dims[e] = eWant;
      moved = true;
    }
    if (!moved)
      value = AllGatherOp::create(
          b, loc, resized(value, d, n, true), value, meshRef(),
          axesAttr(leaving), b.getI64IntegerAttr(d),
          common == 0 ? zigzagAttr(leaving) : UnitAttr(), CollectiveCodecAttr(),
          IntegerAttr());
    have.resize(common);
  }
  // 3. Axes arriving: each rank keeps its slice.
  for (size_t d = 0; d < rank; ++d) {
    auto &have = from.dims[d];
    const auto &want = to.dims[d];
    if (have.size() == want.size())
      continue;
    SmallVector<std::string, 2> arriving(want.begin() + have.size(),
                                         want.end());
    int64_t n = meshInfo.product(arriving);
    value = AllSliceOp::create(
        b, loc, resized(value, d, n, false), value, meshRef(),
        axesAttr(arriving), b.getI64IntegerAttr(d),
        have.empty() ? zigzagAttr(arriving) : UnitAttr());
    have = want;
  }
  return value;
}

LogicalResult Partitioner::run() {
  Block &body = func.getBody().front();
  // Arguments become per-rank.
  SmallVector<Type> argTypes;
  for (BlockArgument arg : body.getArguments()) {
    TensorSharding s = target(arg);
    RankedTensorType type = localType(arg, s);
    argTypes.push_back(type);
    actuals[arg] = s;
  }
  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  // The attentions whose gradients are in other layers (ring statistics go
  // from one to the other); an attention gradient whose attention runs
  // again where it is (recomputation) takes that one's.
  func.walk([&](AttentionGradOp grad) {
    if (grad.getOut() || attentionInBlock(grad))
      return;
    if (AttentionOp attention = attentionInForwardLayer(grad).first) {
      forwardAttentionOf[grad] = attention;
      statisticsWanted.insert(attention);
    }
  });
  // Build the new body after the old ops, then drop the old ones.
  globals.assign(body.getArguments().begin(), body.getArguments().end());
  for (auto [arg, type] : llvm::zip(globals, argTypes)) {
    Value fresh = body.addArgument(type, arg.getLoc());
    local[arg] = fresh;
  }
  b.setInsertionPointToEnd(&body);
  for (Operation *op : ops)
    if (failed(partitionOp(op)))
      return failure();
  // Remove the global program.
  for (Operation *op : llvm::reverse(ops)) {
    op->dropAllUses();
    op->erase();
  }
  unsigned globalArgs = argTypes.size();
  SmallVector<DictionaryAttr> argAttrs;
  for (unsigned i = 0; i < globalArgs; ++i)
    argAttrs.push_back(func.getArgAttrDict(i));
  for (unsigned i = 0; i < globalArgs; ++i)
    body.getArgument(i).dropAllUses();
  body.eraseArguments(0, globalArgs);
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  func.setType(FunctionType::get(func.getContext(), argTypes,
                                 ret.getOperandTypes()));
  // The signature is per-rank now: its shardings say where each rank's
  // block sits in the global tensors.
  for (unsigned i = 0; i < globalArgs; ++i) {
    if (auto attr = argAttrs[i] ? argAttrs[i].getAs<ShardingAttr>(
                                      WeftDialect::getShardingAttrName())
                                : ShardingAttr()) {
      func.removeArgAttr(i,
                         StringAttr::get(func.getContext(),
                                         WeftDialect::getShardingAttrName()));
      func.setArgAttr(i, WeftDialect::getLocalShardingAttrName(), attr);
    }
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto attr = func.getResultAttrOfType<ShardingAttr>(
            i, WeftDialect::getShardingAttrName())) {
      func.removeResultAttr(
          i, StringAttr::get(func.getContext(),
                             WeftDialect::getShardingAttrName()));
      func.setResultAttr(i, WeftDialect::getLocalShardingAttrName(), attr);
    }
  return success();
}

/// Where `value` is in `values`, appended if it is not there.
static unsigned placeOnce(SmallVectorImpl<Value> &values, Value value) {
  auto found = llvm::find(values, value);
  if (found != values.end())
    return unsigned(std::distance(values.begin(), found));
  values.push_back(value);
  return values.size() - 1;
}

/// A layer stays one region: its inputs are resharded to its body
/// arguments' shardings at the boundary, its body is partitioned in place of
/// the original, and the yielded values are resharded to the layer results'
/// shardings, so that the layer can still move to a pipeline stage whole.
LogicalResult Partitioner::partitionLayer(LayerOp layer) {
  Location loc = layer.getLoc();
  Block &body = layer.getBody().front();
  SmallVector<Value> inputs;
  std::vector<TensorSharding> inputShardings;
  for (auto [input, arg] : llvm::zip(layer.getInputs(), body.getArguments())) {
    inputShardings.push_back(target(arg));
    inputs.push_back(operand(loc, input, inputShardings.back()));
  }
  // A backward layer whose attention gradients read q, k and v that a
  // forward layer's ring attended (kept or recomputed, and not attended
  // again) takes the ring's statistics as extra inputs.
  SmallVector<std::pair<AttentionGradOp, RingStatistics>, 2> carried;
  SmallVector<SmallVector<Value, 4>, 2> carriedLayouts;
  layer.walk([&](AttentionGradOp grad) {
    auto forward = forwardAttentionOf.find(grad);
    if (forward == forwardAttentionOf.end())
      return;
    auto statistics = handedOver.find(forward->second);
    if (statistics == handedOver.end())
      return;
    carried.push_back({grad, statistics->second});
    carriedLayouts.push_back(handedOverLayouts.lookup(forward->second));
  });
  // (A value the layer takes already, as it takes the output that a
  // recompute=op forward keeps, is not taken twice.)
  SmallVector<std::pair<unsigned, unsigned>, 2> carriedAt;
  for (auto &[grad, statistics] : carried)
    carriedAt.push_back(
        {placeOnce(inputs, statistics.out), placeOnce(inputs, statistics.lse)});
  SmallVector<Type> resultTypes;
  std::vector<TensorSharding> resultShardings;
  for (Value result : layer.getResults()) {
    resultShardings.push_back(target(result));
    resultTypes.push_back(localType(result, resultShardings.back()));
  }
  auto local = LayerOp::create(b, loc, layer.getKind(), layer.getIndex(),
                               inputs, resultTypes);
  Block *localBody = &local.getBody().front();
  for (auto [arg, localArg, sharding] : llvm::zip(
           body.getArguments(), localBody->getArguments(), inputShardings))
    setResult(arg, localArg, sharding);
  for (auto [entry, at, layouts] :
       llvm::zip(carried, carriedAt, carriedLayouts)) {
    auto &[grad, statistics] = entry;
    // The output back in the ring's layout, where it came in a later one.
    Value out = localBody->getArgument(at.first);
    if (!layouts.empty()) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToEnd(localBody);
      out = undoLayouts(b, grad.getLoc(), layouts, layouts.size() - 1, out);
    }
    ringStatistics[{grad.getQ(), grad.getK(), grad.getV()}] = {
        out, statistics.outSharding, localBody->getArgument(at.second),
        statistics.lseSharding};
  }
  SmallVector<std::pair<AttentionOp, RingStatistics>, 2> kept;
  SmallVector<std::pair<unsigned, unsigned>, 2> keptAt;
  SmallVector<Value> yielded;
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(localBody);
    for (Operation &op : body.without_terminator())
      if (failed(partitionOp(&op)))
        return failure();
    auto yield = cast<YieldOp>(body.getTerminator());
    for (auto [value, sharding] : llvm::zip(yield.getValues(), resultShardings))
      yielded.push_back(operand(yield.getLoc(), value, sharding));
    // A forward layer whose ring attended q, k and v that a backward layer
    // reads (or recomputes) hands over the ring's statistics too.
    layer.walk([&](AttentionOp attention) {
      if (!statisticsWanted.contains(attention))
        return;
      auto found = ringStatistics.find(
          {attention.getQ(), attention.getK(), attention.getV()});
      if (found != ringStatistics.end() &&
          found->second.lse.getParentBlock() == localBody)
        kept.push_back({attention, found->second});
    });
    // The output goes over once: in the last of its layouts (the reshapes
    // and transposes that alone read it, weft::layoutChain) that the layer
    // yields already (the output projection's input, which it keeps for the
    // weight's gradient; under recompute=op the output itself), else as it
    // is. The backward layer undoes the layouts (as
    // -weft-keep-attention-statistics does without the ring).
    for (auto &[attention, statistics] : kept) {
      SmallVector<Value, 4> chain = layoutChain(statistics.out);
      unsigned layout = 0;
      for (unsigned i = chain.size(); i-- > 1;)
        if (llvm::is_contained(yielded, chain[i])) {
          layout = i;
          break;
        }
      if (layout > 0)
        handedOverLayouts[attention].assign(chain.begin(),
                                            chain.begin() + layout + 1);
      keptAt.push_back({placeOnce(yielded, chain[layout]),
                        placeOnce(yielded, statistics.lse)});
    }
    YieldOp::create(b, yield.getLoc(), yielded);
  }
  if (yielded.size() > resultTypes.size()) {
    // The layer, with the statistics as results too.
    for (Value value : ArrayRef<Value>(yielded).drop_front(resultTypes.size()))
      resultTypes.push_back(value.getType());
    auto extended = LayerOp::create(b, loc, layer.getKind(), layer.getIndex(),
                                    inputs, resultTypes);
    extended.getBody().takeBody(local.getBody());
    local.erase();
    local = extended;
  }
  for (auto [entry, at] : llvm::zip(kept, keptAt)) {
    auto &[attention, statistics] = entry;
    handedOver[attention] = {local.getResult(at.first), statistics.outSharding,
                             local.getResult(at.second),
                             statistics.lseSharding};
  }
  for (auto [result, localResult, sharding] :
       llvm::zip(layer.getResults(), local.getResults(), resultShardings))
    setResult(result, localResult, sharding);
  return success();
}

LogicalResult Partitioner::partitionOp(Operation *op) {
  Location loc = op->getLoc();
  if (auto ret = dyn_cast<func::ReturnOp>(op)) {
    SmallVector<Value> results;
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      TensorSharding want = TensorSharding::replicated(
          cast<RankedTensorType>(value.getType()).getRank());
      if (auto attr = func.getResultAttrOfType<ShardingAttr>(
              index, WeftDialect::getShardingAttrName()))
        want = fromAttr(attr);
      results.push_back(operand(loc, value, want));
    }
    func::ReturnOp::create(b, loc, results);
    return success();
  }
  if (isa<CollectiveOpInterface>(op))
    return op->emitError("the program is already partitioned (it has "
                         "collectives); partition the original model");
  if (auto layer = dyn_cast<LayerOp>(op))
    return partitionLayer(layer);
  auto partitionable = dyn_cast<ShardingRuleOpInterface>(op);
  if (!partitionable)
    return op->emitError("cannot partition '")
           << op->getName() << "': it has no sharding rule";
  return partitionable.partition(*this);
}

struct WeftPartition : public weft::impl::WeftPartitionBase<WeftPartition> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<MeshInfo> mesh = getMeshInfo(module);
    if (!mesh)
      return;
    for (auto func : llvm::to_vector(module.getOps<func::FuncOp>())) {
      if (func.isExternal())
        continue;
      if (failed(Partitioner(func, *mesh).run()))
        return signalPassFailure();
    }
  }
};

//===----------------------------------------------------------------------===//
// -weft-optimize-collectives
//===----------------------------------------------------------------------===//

struct WeftOptimizeCollectives
    : public weft::impl::WeftOptimizeCollectivesBase<WeftOptimizeCollectives> {
  /// A sum all-reduce or a sum reduce-scatter.
  static bool isSumReduction(Operation *op) {
    if (auto reduce = dyn_cast_or_null<AllReduceOp>(op))
      return reduce.getKind() == ReductionKind::sum;
    if (auto scatter = dyn_cast_or_null<ReduceScatterOp>(op))
      return scatter.getKind() == ReductionKind::sum;
    return false;
  }

  /// An all-gather read only by casts to one narrower float type (a weight
  /// stored in f32 blocks, ZeRO-3, read in bf16 under mixed precision) gathers
  /// the cast block instead: the same values, half the bytes, as FSDP's
  /// mixed precision gathers its 16-bit parameters.
  static void castBeforeGathering(func::FuncOp func) {
    SmallVector<AllGatherOp> gathers;
    func.walk([&](AllGatherOp gather) { gathers.push_back(gather); });
    for (AllGatherOp gather : gathers) {
      auto from = dyn_cast<FloatType>(gather.getType().getElementType());
      FloatType to;
      bool narrowing = from && !gather->use_empty();
      for (Operation *user : gather->getUsers()) {
        auto cast = dyn_cast<CastOp>(user);
        auto element = cast ? dyn_cast<FloatType>(
                                  cast.getResult().getType().getElementType())
                            : FloatType();
        if (!element || element.getWidth() >= from.getWidth() ||
            (to && element != to)) {
          narrowing = false;
          break;
        }
        to = element;
      }
      if (!narrowing)
        continue;
      OpBuilder b(gather);
      auto blockType =
          RankedTensorType::get(gather.getInput().getType().getShape(), to);
      Value block =
          CastOp::create(b, gather.getLoc(), blockType, gather.getInput());
      auto narrow = AllGatherOp::create(
          b, gather.getLoc(),
          RankedTensorType::get(gather.getType().getShape(), to), block,
          gather.getMeshAttr(), gather.getAxes(), gather.getDimAttr(),
          gather.getZigzagAttr(), gather.getCodecAttr(), gather.getHoldAttr());
      for (Operation *user : llvm::make_early_inc_range(gather->getUsers())) {
        user->getResult(0).replaceAllUsesWith(narrow.getResult());
        user->erase();
      }
      gather.erase();
    }
  }

  /// A sum of reduced partial sums is the reduction of the sum of the
  /// partials: an op that sums its operands (`isAdditive`, two operands or
  /// more) whose operands are all sum all-reduces, or all sum
  /// reduce-scatters, of one group, dimension and codec, each read only
  /// there, from inputs of one type, runs on the partial values and is
  /// reduced once. A value read by several column-parallel linears
  /// (separate q, k and v projections; gate and up) gets one gradient
  /// reduction, as Megatron's fused projection has, instead of one per
  /// linear.
  static void sumBeforeReducing(func::FuncOp func) {
    SmallVector<Operation *> sums;
    func.walk([&](Operation *op) {
      auto rule = dyn_cast<ShardingRuleOpInterface>(op);
      if (rule && op->getNumOperands() >= 2 && op->getNumResults() == 1 &&
          rule.isAdditive())
        sums.push_back(op);
    });
    // In program order, so that a chain of sums is reduced once at its end.
    for (Operation *op : sums) {
      Type type = op->getResult(0).getType();
      SmallVector<Operation *> reduces;
      for (Value operand : op->getOperands()) {
        Operation *reduce = operand.getDefiningOp();
        if (!isSumReduction(reduce) || operand.getType() != type ||
            !operand.hasOneUse() ||
            (!reduces.empty() &&
             (reduce->getName() != reduces[0]->getName() ||
              reduce->getAttrDictionary() != reduces[0]->getAttrDictionary() ||
              reduce->getOperand(0).getType() !=
                  reduces[0]->getOperand(0).getType())))
          break;
        reduces.push_back(reduce);
      }
      if (reduces.size() != op->getNumOperands())
        continue;
      OpBuilder b(op);
      OperationState state(op->getLoc(), op->getName());
      for (Operation *reduce : reduces)
        state.addOperands(reduce->getOperand(0));
      state.addTypes(reduces[0]->getOperand(0).getType());
      state.addAttributes(op->getAttrs());
      Operation *partial = b.create(state);
      Operation *once = b.clone(*reduces[0]);
      once->setOperand(0, partial->getResult(0));
      op->getResult(0).replaceAllUsesWith(once->getResult(0));
      op->erase();
      for (Operation *reduce : reduces)
        reduce->erase();
    }
  }

  /// Two reduced partial sums added into a running sum one after the other,
  /// `(x + reduce(a)) + reduce(b)`, are one reduction of their sum,
  /// `x + reduce(a + b)`, when the reductions match (sum, one group,
  /// dimension and codec, inputs of one type) and each value is read only
  /// there. A layer input read by separate q, k and v projections (a post-LN
  /// model's: the previous layer's sequence-split LayerNorm output under
  /// Megatron SP) takes each projection's input gradient into the residual
  /// gradient this way; reassociated, it is reduce-scattered once, as
  /// Megatron's fused QKV projection's is.
  static void reassociateReductions(func::FuncOp func) {
    SmallVector<AddOp> adds;
    func.walk([&](AddOp op) { adds.push_back(op); });
    auto sumReduction = [](Value v) -> Operation * {
      Operation *op = v.getDefiningOp();
      return v.hasOneUse() && isSumReduction(op) ? op : nullptr;
    };
    auto sameTypes = [](AddOp op) {
      return op.getLhs().getType() == op.getType() &&
             op.getRhs().getType() == op.getType();
    };
    for (AddOp op : adds) {
      if (!sameTypes(op))
        continue;
      for (unsigned outer = 0; outer < 2; ++outer) {
        Operation *second = sumReduction(op->getOperand(outer));
        auto inner = op->getOperand(1 - outer).getDefiningOp<AddOp>();
        if (!second || !inner || !inner->hasOneUse() || !sameTypes(inner) ||
            inner->getBlock() != op->getBlock())
          continue;
        Operation *first = nullptr;
        unsigned kept = 0;
        for (unsigned i = 0; i < 2 && !first; ++i) {
          Operation *candidate = sumReduction(inner->getOperand(i));
          if (candidate && candidate->getName() == second->getName() &&
              candidate->getAttrDictionary() == second->getAttrDictionary() &&
              candidate->getOperand(0).getType() ==
                  second->getOperand(0).getType() &&
              !sumReduction(inner->getOperand(1 - i))) {
            first = candidate;
            kept = 1 - i;
          }
        }
        if (!first)
          continue;
        OpBuilder b(op);
        Value partial =
            AddOp::create(b, op.getLoc(), first->getOperand(0).getType(),
                          first->getOperand(0), second->getOperand(0));
        Operation *once = b.clone(*second);
        once->setOperand(0, partial);
        Value sum = AddOp::create(b, op.getLoc(), op.getType(),
                                  inner->getOperand(kept), once->getResult(0));
        op.getResult().replaceAllUsesWith(sum);
        op->erase();
        inner->erase();
        first->erase();
        second->erase();
        break;
      }
    }
  }

  /// An additive op of one operand (`isAdditive`) reading a sum all-reduce
  /// that only it reads is the all-reduce of the op: the ranks apply the op
  /// to their partial values and reduce its result, when that result is
  /// smaller than its input (a `weft.reduce_sum`; a reshape or a widening
  /// cast would only move the reduction). Under Megatron SP, a final norm's
  /// bias gradient, summed over the positions of the output layer's partial
  /// input gradient, all-reduced that whole gradient. Where the partial value
  /// is also reduce-scattered over the same group along a dimension that is
  /// a reduction factor of the op's sharding rule (the norm's input gradient
  /// under SP), each rank applies the op to the block it got instead, as
  /// Megatron's SP norms do: by the rule, the op of a block is the rank's
  /// partial result, the ranks' partial results add up to the same total,
  /// the work is not repeated on every rank, and a later weight-gradient step
  /// keeps the block, not the whole partial sum. (A lossy codec's sum is not
  /// exact: left alone.)
  static void sumBeforeAllReduce(func::FuncOp func) {
    SmallVector<ShardingRuleOpInterface> ops;
    func.walk([&](ShardingRuleOpInterface op) {
      if (op->getNumOperands() == 1 && op->getNumResults() == 1 &&
          op.isAdditive())
        ops.push_back(op);
    });
    for (ShardingRuleOpInterface op : ops) {
      auto reduce = op->getOperand(0).getDefiningOp<AllReduceOp>();
      if (!reduce || reduce.getKind() != ReductionKind::sum ||
          reduce.getWireCodec() != CollectiveCodec::none ||
          !reduce->hasOneUse() || reduce->getBlock() != op->getBlock() ||
          getTensorBytes(op->getResult(0).getType()) >=
              getTensorBytes(reduce.getType()))
        continue;
      ShardingRule rule = op.getShardingRule();
      auto summed = [&](int64_t dim) {
        const ShardingRule::DimFactors &factors = rule.operands[0][dim];
        return factors.size() == 1 && rule.getFactorKind(factors[0]) ==
                                          ShardingRule::FactorKind::Reduction;
      };
      Value partial = reduce.getInput();
      for (Operation *user : partial.getUsers()) {
        auto scatter = dyn_cast<ReduceScatterOp>(user);
        if (scatter && scatter.getKind() == ReductionKind::sum &&
            scatter.getAxes() == reduce.getAxes() &&
            scatter.getWireCodec() == CollectiveCodec::none &&
            scatter->getBlock() == op->getBlock() && summed(scatter.getDim())) {
          // (Its only operand is defined before the all-reduce.)
          if (reduce->isBeforeInBlock(scatter))
            scatter->moveBefore(reduce);
          partial = scatter.getResult();
          break;
        }
      }
      OpBuilder b(op);
      Operation *local = b.clone(*op);
      local->setOperand(0, partial);
      Operation *once = b.clone(*reduce);
      once->setOperand(0, local->getResult(0));
      once->getResult(0).setType(op->getResult(0).getType());
      op->getResult(0).replaceAllUsesWith(once->getResult(0));
      op->erase();
      reduce.erase();
    }
  }

  /// Buckets all-reduces that do not depend on one another (same kind,
  /// group and element type) into one: their inputs flattened and
  /// concatenated, reduced once, split back. One launch and one latency
  /// instead of several (gradient buckets, a loss and its count).
  static void mergeAllReduces(func::FuncOp func) {
    SmallVector<Block *> blocks;
    func.walk([&](Block *block) { blocks.push_back(block); });
    for (Block *blockPtr : blocks) {
      Block &block = *blockPtr;
      SmallVector<AllReduceOp> ops(block.getOps<AllReduceOp>());
      llvm::DenseSet<Operation *> merged;
      for (size_t i = 0; i < ops.size(); ++i) {
        if (merged.contains(ops[i]))
          continue;
        SmallVector<AllReduceOp> bucket = {ops[i]};
        // Later all-reduces whose inputs are ready before the first one
        // runs (defined before it) and match it.
        for (size_t j = i + 1; j < ops.size(); ++j) {
          AllReduceOp other = ops[j];
          if (merged.contains(other) || other.getKind() != ops[i].getKind() ||
              other.getAxes() != ops[i].getAxes() ||
              other.getCodecAttr() != ops[i].getCodecAttr() ||
              other.getMembersAttr() != ops[i].getMembersAttr() ||
              other.getType().getElementType() !=
                  ops[i].getType().getElementType())
            continue;
          Operation *def = other.getInput().getDefiningOp();
          if (def && (def->getBlock() != &block ||
                      !def->isBeforeInBlock(ops[i])))
            continue;
          bucket.push_back(other);
        }
        if (bucket.size() < 2)
          continue;
        OpBuilder b(ops[i]);
        Location loc = ops[i].getLoc();
        Type element = ops[i].getType().getElementType();
        SmallVector<Value> flat;
        int64_t total = 0;
        for (AllReduceOp op : bucket) {
          int64_t n = op.getType().getNumElements();
          total += n;
          flat.push_back(ReshapeOp::create(
              b, loc, RankedTensorType::get({n}, element), op.getInput()));
        }
        auto flatType = RankedTensorType::get({total}, element);
        Value joined = ConcatOp::create(b, loc, flatType, flat,
                                        b.getI64IntegerAttr(0));
        Value reduced =
            AllReduceOp::create(b, loc, flatType, ops[i].getKindAttr(), joined,
                                ops[i].getMeshAttr(), ops[i].getAxes(),
                                ops[i].getCodecAttr(), ops[i].getMembersAttr());
        SmallVector<Type> pieces;
        SmallVector<int64_t> sizes;
        for (AllReduceOp op : bucket) {
          int64_t n = op.getType().getNumElements();
          pieces.push_back(RankedTensorType::get({n}, element));
          sizes.push_back(n);
        }
        auto split = SplitOp::create(b, loc, pieces, reduced,
                                     b.getI64IntegerAttr(0),
                                     b.getDenseI64ArrayAttr(sizes));
        for (auto [op, piece] : llvm::zip(bucket, split.getResults())) {
          Value back = ReshapeOp::create(b, loc, op.getType(), piece);
          op.getResult().replaceAllUsesWith(back);
          merged.insert(op);
        }
        for (AllReduceOp op : bucket)
          op.erase();
      }
    }
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto module = func->getParentOfType<ModuleOp>();
    std::optional<MeshInfo> mesh = module ? getMeshInfo(module) : std::nullopt;
    if (!mesh)
      return;
    // Over a group of one rank, a collective from a value to a value is
    // that value (point-to-point ops have no such identity).
    SmallVector<CollectiveOpInterface> collectives;
    func.walk([&](CollectiveOpInterface op) {
      if (op->getNumOperands() == 1 && op->getNumResults() == 1)
        collectives.push_back(op);
    });
    for (CollectiveOpInterface op : collectives) {
      if (op.getGroupSize() == 1) {
        op->getResult(0).replaceAllUsesWith(op->getOperand(0));
        op->erase();
      }
    }
    castBeforeGathering(func);
    reassociateReductions(func);
    sumBeforeReducing(func);
    sumBeforeAllReduce(func);
    mergeAllReduces(func);
    SmallVector<AllSliceOp> slices;
    func.walk([&](AllSliceOp s) { slices.push_back(s); });
    for (AllSliceOp slice : slices) {
      // A slice nothing reads moves no data: gone (a partition rule that
      // builds what it needs leaves the generic block of its operand unread).
      if (slice->use_empty()) {
        slice.erase();
        continue;
      }
      Operation *producer = slice.getInput().getDefiningOp();
      if (auto reduce = dyn_cast_or_null<AllReduceOp>(producer)) {
        if (reduce.getAxes() != slice.getAxes() ||
            reduce.getKind() != ReductionKind::sum || slice.getZigzag())
          continue;
        OpBuilder b(slice);
        auto scatter = ReduceScatterOp::create(
            b, slice.getLoc(), slice.getType(), reduce.getKindAttr(),
            reduce.getInput(), slice.getMeshAttr(), slice.getAxes(),
            slice.getDimAttr(), UnitAttr(), reduce.getCodecAttr());
        slice.getResult().replaceAllUsesWith(scatter.getResult());
        slice.erase();
        if (reduce->use_empty())
          reduce.erase();
      } else if (auto gather = dyn_cast_or_null<AllGatherOp>(producer)) {
        if (gather.getAxes() != slice.getAxes() ||
            gather.getDim() != slice.getDim() ||
            gather.getZigzag() != slice.getZigzag())
          continue;
        slice.getResult().replaceAllUsesWith(gather.getInput());
        slice.erase();
        if (gather->use_empty())
          gather.erase();
      }
    }
  }
};
} // namespace

//===- WeftPartition.cpp - SPMD partitioning and collective cleanup -------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

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

/// Rewrites one function into the program each rank runs.
class Partitioner {
public:
  Partitioner(func::FuncOp func, const MeshInfo &mesh)
      : func(func), mesh(mesh), b(func.getContext()),
        meshRef(FlatSymbolRefAttr::get(func.getContext(), mesh.name)),
        loadBalanced(func->hasAttr(WeftDialect::getLoadBalancedAttrName())) {}

  LogicalResult run();

private:
  TensorSharding target(Value v) {
    if (std::optional<TensorSharding> s = getSharding(v))
      return *s;
    return TensorSharding::replicated(
        cast<RankedTensorType>(v.getType()).getRank());
  }
  RankedTensorType localType(Value global, const TensorSharding &s) {
    auto type = cast<RankedTensorType>(global.getType());
    return RankedTensorType::get(localShape(type.getShape(), s, mesh),
                                 type.getElementType());
  }
  /// Load-balanced rings lay the sequence out in mirrored chunks: slicing
  /// and gathering over the ring axis (always the major axis of a sequence
  /// split) use that order.
  UnitAttr zigzag(ArrayRef<std::string> axes) {
    return loadBalanced && !axes.empty() && axes.front() == "cp"
               ? b.getUnitAttr()
               : UnitAttr();
  }
  ArrayAttr axesAttr(ArrayRef<std::string> axes) {
    SmallVector<StringRef> names(axes.begin(), axes.end());
    return b.getStrArrayAttr(names);
  }
  static RankedTensorType resized(Value v, int64_t dim, int64_t factor,
                                  bool multiply) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = multiply ? shape[dim] * factor : shape[dim] / factor;
    return RankedTensorType::get(shape, type.getElementType());
  }
  Value reshard(Location loc, Value value, TensorSharding from,
                const TensorSharding &to);
  /// The local value of `global` in sharding `want` (each resharding of a
  /// value is made once).
  Value operand(Location loc, Value global, const TensorSharding &want) {
    auto key = std::make_pair(global.getAsOpaquePointer(), want.str());
    auto found = reshards.find(key);
    if (found != reshards.end())
      return found->second;
    Value v = reshard(loc, local.lookup(global), actual[global], want);
    reshards[key] = v;
    return v;
  }
  Value constant(Location loc, Type elementType, double value) {
    auto type = RankedTensorType::get({}, elementType);
    Attribute attr;
    if (isa<FloatType>(elementType))
      attr = DenseElementsAttr::get(type, b.getFloatAttr(elementType, value));
    else if (elementType.isInteger(1))
      attr = DenseElementsAttr::get(type, value != 0);
    else
      attr = DenseElementsAttr::get(
          type, b.getIntegerAttr(elementType, int64_t(value)));
    return ConstantOp::create(b, loc, cast<ElementsAttr>(attr));
  }
  /// A vector with one entry per rank of the group over `axes`, sliced to
  /// this rank's entry: rank-dependent constants without a rank op.
  Value perRank(Location loc, ArrayRef<int64_t> values,
                ArrayRef<std::string> axes, Type elementType) {
    auto type = RankedTensorType::get({int64_t(values.size())}, elementType);
    SmallVector<APInt> ints;
    for (int64_t v : values)
      ints.push_back(APInt(elementType.getIntOrFloatBitWidth(), v, true));
    Value full =
        ConstantOp::create(b, loc, DenseElementsAttr::get(type, ints));
    return AllSliceOp::create(b, loc, resized(full, 0, values.size(), false),
                              full, meshRef, axesAttr(axes),
                              b.getI64IntegerAttr(0), UnitAttr());
  }

  LogicalResult partitionOp(Operation *op);
  LogicalResult partitionGeneric(Operation *op);
  LogicalResult partitionRingAttention(AttentionOp op);
  LogicalResult partitionVocabCrossEntropy(CrossEntropyOp op,
                                           const TensorSharding &logits);
  LogicalResult partitionVocabEmbedding(EmbeddingOp op,
                                        const TensorSharding &table);

  func::FuncOp func;
  const MeshInfo &mesh;
  OpBuilder b;
  FlatSymbolRefAttr meshRef;
  bool loadBalanced;
  llvm::DenseMap<Value, Value> local;
  llvm::DenseMap<Value, TensorSharding> actual;
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
      int64_t n = mesh.product(extra);
      value = ReduceScatterOp::create(
          b, loc, resized(value, d, n, false),
          ReductionKindAttr::get(b.getContext(), ReductionKind::sum), value,
          meshRef, axesAttr(extra), b.getI64IntegerAttr(d));
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
          meshRef, axesAttr(from.partial));
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
    int64_t n = mesh.product(leaving);
    bool moved = false;
    for (size_t e = 0; e < rank && !moved; ++e) {
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
          meshRef, axesAttr(leaving), b.getI64IntegerAttr(e),
          b.getI64IntegerAttr(d));
      from.dims[e] = eWant;
      moved = true;
    }
    if (!moved)
      value = AllGatherOp::create(b, loc, resized(value, d, n, true), value,
                                  meshRef, axesAttr(leaving),
                                  b.getI64IntegerAttr(d), zigzag(leaving));
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
    int64_t n = mesh.product(arriving);
    value = AllSliceOp::create(b, loc, resized(value, d, n, false), value,
                               meshRef, axesAttr(arriving),
                               b.getI64IntegerAttr(d), zigzag(arriving));
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
    actual[arg] = s;
  }
  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
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
  if (isa<LayerOp>(op))
    return op->emitError("weft.layer must be inlined before partitioning "
                         "(run -weft-apply-plan)");
  if (isa<ParameterOp, ConstantOp, IotaOp>(op)) {
    // Built whole, then each rank keeps its shard.
    Operation *copy = b.clone(*op);
    copy->removeAttr(WeftDialect::getShardingAttrName());
    Value result = op->getResult(0);
    TensorSharding want = target(result);
    TensorSharding whole = TensorSharding::replicated(want.dims.size());
    local[result] = reshard(loc, copy->getResult(0), whole, want);
    actual[result] = want;
    return success();
  }
  if (auto attention = dyn_cast<AttentionOp>(op))
    if (attention->hasAttr(WeftDialect::getContextParallelAttrName()) &&
        mesh.size("cp") > 1)
      return partitionRingAttention(attention);
  if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
    TensorSharding table = target(embedding.getTable());
    if (!table.dims[0].empty())
      return partitionVocabEmbedding(embedding, table);
  }
  if (auto ce = dyn_cast<CrossEntropyOp>(op)) {
    const TensorSharding &logits = actual[ce.getLogits()];
    if (!logits.dims.back().empty() ||
        ce.getReduction() != LossReduction::none)
      return partitionVocabCrossEntropy(ce, logits);
  }
  if (!isa<ShardingRuleOpInterface>(op))
    return op->emitError("cannot partition '")
           << op->getName() << "': it has no sharding rule";
  return partitionGeneric(op);
}

LogicalResult Partitioner::partitionGeneric(Operation *op) {
  ShardingRule rule = cast<ShardingRuleOpInterface>(op).getShardingRule();
  std::vector<TensorSharding> resultTargets, operandActual;
  for (Value r : op->getResults())
    resultTargets.push_back(target(r));
  for (Value v : op->getOperands())
    operandActual.push_back(actual[v]);
  // Weights first (the plan fixed their splits), then what the results
  // should be, then how the other operands are.
  std::vector<TensorSharding> weightTargets(op->getNumOperands());
  SmallVector<ShardedTensor> tensors;
  for (auto [i, factors] : llvm::enumerate(rule.operands))
    if (op->getOperand(i).getDefiningOp<ParameterOp>()) {
      weightTargets[i] = target(op->getOperand(i));
      tensors.push_back({&factors, &weightTargets[i], 0});
    }
  for (auto [i, factors] : llvm::enumerate(rule.results))
    tensors.push_back({&factors, &resultTargets[i], 1});
  for (auto [i, factors] : llvm::enumerate(rule.operands))
    tensors.push_back({&factors, &operandActual[i], 2});
  FactorAxes axes = assignFactorAxes(rule, mesh, tensors);
  IRMapping map;
  for (auto [v, factors] : llvm::zip(op->getOperands(), rule.operands))
    map.map(v, operand(op->getLoc(), v, projectSharding(factors, axes)));
  Operation *copy = b.clone(*op, map);
  copy->removeAttr(WeftDialect::getShardingAttrName());
  // Partial sums: split reduction factors.
  SmallVector<std::string, 2> partial;
  for (int64_t f = 0; f < rule.getNumFactors(); ++f)
    if (rule.getFactorKind(f) == ShardingRule::FactorKind::Reduction)
      for (const std::string &axis : axes.axes[f])
        partial.push_back(axis);
  // A bias added on every rank of a partial sum would be summed n times:
  // each rank adds its 1/n.
  if (auto linear = dyn_cast<LinearOp>(copy); linear && linear.getBias() &&
                                               !partial.empty()) {
    auto biasType = cast<RankedTensorType>(linear.getBias().getType());
    b.setInsertionPoint(linear);
    Value share = constant(op->getLoc(), biasType.getElementType(),
                           1.0 / double(mesh.product(partial)));
    Value scaled =
        MulOp::create(b, op->getLoc(), biasType, linear.getBias(), share);
    linear.getBiasMutable().assign(scaled);
    b.setInsertionPointToEnd(linear->getBlock());
  }
  for (auto [i, r] : llvm::enumerate(op->getResults())) {
    TensorSharding s = projectSharding(rule.results[i], axes);
    s.partial = partial;
    copy->getResult(i).setType(localType(r, s));
    local[r] = copy->getResult(i);
    actual[r] = s;
  }
  // Shape attributes that follow a split dimension.
  if (auto slice = dyn_cast<SliceOp>(copy)) {
    auto in = cast<RankedTensorType>(slice.getInput().getType());
    auto out = cast<RankedTensorType>(slice.getType());
    SmallVector<int64_t> limits(slice.getLimits());
    for (int64_t d = 0; d < in.getRank(); ++d)
      if (out.getDimSize(d) == in.getDimSize(d))
        limits[d] = in.getDimSize(d);
    slice.setLimits(limits);
  }
  if (auto split = dyn_cast<SplitOp>(copy)) {
    SmallVector<int64_t> sizes;
    for (Value r : split.getResults())
      sizes.push_back(
          cast<RankedTensorType>(r.getType()).getDimSize(split.getAxis()));
    split.setSizes(sizes);
  }
  return success();
}

LogicalResult Partitioner::partitionVocabEmbedding(EmbeddingOp op,
                                                   const TensorSharding &table) {
  Location loc = op.getLoc();
  const auto &vocabAxes = table.dims[0];
  TensorSharding resultTarget = target(op.getResult());
  // Indices follow the result's leading dimensions (minus the vocab axes).
  auto indexType = cast<RankedTensorType>(op.getIndices().getType());
  TensorSharding indexWant = TensorSharding::replicated(indexType.getRank());
  for (int64_t d = 0; d < indexType.getRank(); ++d)
    for (const std::string &axis : resultTarget.dims[d])
      if (!llvm::is_contained(vocabAxes, axis))
        indexWant.dims[d].push_back(axis);
  TensorSharding tableWant = TensorSharding::replicated(2);
  tableWant.dims[0] = vocabAxes;
  Value ids = operand(loc, op.getIndices(), indexWant);
  Value rows = operand(loc, op.getTable(), tableWant);
  int64_t vocab = op.getTable().getType().getDimSize(0);
  int64_t parts = mesh.product(vocabAxes);
  int64_t shard = vocab / parts;
  Type idType = indexType.getElementType();
  SmallVector<int64_t> offsets;
  for (int64_t i = 0; i < parts; ++i)
    offsets.push_back(i * shard);
  Value offset = perRank(loc, offsets, vocabAxes, idType);
  if (!ids || !rows)
    return op.emitError("internal: embedding operands were not partitioned");
  Value shifted = SubOp::create(b, loc, ids.getType(), ids, offset);
  auto boolType = RankedTensorType::get(
      cast<RankedTensorType>(ids.getType()).getShape(), b.getI1Type());
  Value zero = constant(loc, idType, 0);
  Value geZero = CompareOp::create(
      b, loc, boolType, ComparePredicateAttr::get(b.getContext(), ComparePredicate::ge),
      shifted, zero);
  Value ltShard = CompareOp::create(
      b, loc, boolType, ComparePredicateAttr::get(b.getContext(), ComparePredicate::lt),
      shifted, constant(loc, idType, shard));
  Value valid = WhereOp::create(b, loc, boolType, geZero, ltShard,
                                constant(loc, b.getI1Type(), 0));
  Value safe = WhereOp::create(b, loc, shifted.getType(), valid, shifted, zero);
  auto rowsType = cast<RankedTensorType>(rows.getType());
  SmallVector<int64_t> outShape(boolType.getShape());
  outShape.push_back(rowsType.getDimSize(1));
  auto outType = RankedTensorType::get(outShape, rowsType.getElementType());
  Value looked = EmbeddingOp::create(b, loc, outType, rows, safe);
  SmallVector<int64_t> maskShape(boolType.getShape());
  maskShape.push_back(1);
  Value mask = ReshapeOp::create(
      b, loc, RankedTensorType::get(maskShape, b.getI1Type()), valid);
  Value result = WhereOp::create(b, loc, outType, mask, looked,
                                 constant(loc, rowsType.getElementType(), 0));
  TensorSharding s = indexWant;
  s.dims.emplace_back();
  s.partial = vocabAxes;
  local[op.getResult()] = result;
  actual[op.getResult()] = s;
  return success();
}

LogicalResult Partitioner::partitionRingAttention(AttentionOp op) {
  Location loc = op.getLoc();
  SmallVector<std::string, 2> ring = {"cp"};
  int64_t c = mesh.size("cp");
  TensorSharding out = target(op.getResult());
  TensorSharding qWant = TensorSharding::replicated(4);
  qWant.dims[0] = out.dims[0];
  qWant.dims[1] = out.dims[1];
  qWant.dims[2] = ring;
  TensorSharding kvWant = qWant;
  Value q = operand(loc, op.getQ(), qWant);
  Value k = operand(loc, op.getK(), kvWant);
  Value v = operand(loc, op.getV(), kvWant);
  auto qType = cast<RankedTensorType>(q.getType());
  auto kType = cast<RankedTensorType>(k.getType());
  auto vType = cast<RankedTensorType>(v.getType());
  Type element = qType.getElementType();
  int64_t batch = qType.getDimSize(0), heads = qType.getDimSize(1),
          seq = qType.getDimSize(2), kvHeads = kType.getDimSize(1),
          valueDim = vType.getDimSize(3);
  Value mask;
  if (Value globalMask = op.getMask()) {
    auto maskType = cast<RankedTensorType>(globalMask.getType());
    int64_t rank = maskType.getRank();
    if (rank >= 2 && maskType.getDimSize(rank - 2) != 1)
      return op.emitError("ring attention needs a mask that broadcasts over "
                          "the queries (its query dimension is ")
             << maskType.getDimSize(rank - 2) << "); use ulysses instead of cp";
    TensorSharding maskWant = TensorSharding::replicated(rank);
    if (maskType.getDimSize(rank - 1) != 1)
      maskWant.dims[rank - 1] = ring;
    if (rank == 4 && maskType.getDimSize(0) != 1)
      maskWant.dims[0] = out.dims[0];
    if (rank == 4 && maskType.getDimSize(1) != 1)
      maskWant.dims[1] = out.dims[1];
    mask = operand(loc, globalMask, maskWant);
  }
  // Grouped-query attention: each KV head serves heads / kvHeads queries.
  auto expand = [&](Value kv, int64_t dim) -> Value {
    if (kvHeads == heads)
      return kv;
    int64_t group = heads / kvHeads;
    auto t = cast<RankedTensorType>(kv.getType());
    Value r = ReshapeOp::create(
        b, loc,
        RankedTensorType::get({batch, kvHeads, 1, seq, dim}, element), kv);
    r = BroadcastToOp::create(
        b, loc,
        RankedTensorType::get({batch, kvHeads, group, seq, dim}, element), r);
    return ReshapeOp::create(
        b, loc, RankedTensorType::get({batch, heads, seq, dim}, element), r);
    (void)t;
  };
  // Positions of this rank's queries, and of the K/V block it holds.
  int64_t total = seq * c;
  SmallVector<int64_t> positions;
  for (int64_t i = 0; i < total; ++i)
    positions.push_back(i);
  Type i64 = b.getI64Type();
  auto posType = RankedTensorType::get({total}, i64);
  SmallVector<APInt> posValues;
  for (int64_t p : positions)
    posValues.push_back(APInt(64, p));
  Value allPositions =
      ConstantOp::create(b, loc, DenseElementsAttr::get(posType, posValues));
  Value qPos = AllSliceOp::create(b, loc, RankedTensorType::get({seq}, i64),
                                  allPositions, meshRef, axesAttr(ring),
                                  b.getI64IntegerAttr(0), zigzag(ring));
  Value kPos = qPos;
  auto scoresType =
      RankedTensorType::get({batch, heads, seq, seq}, element);
  auto statsType = RankedTensorType::get({batch, heads, seq, 1}, element);
  auto outType = RankedTensorType::get({batch, heads, seq, valueDim}, element);
  Value scale = constant(loc, element, op.getScale().convertToDouble());
  Value negBig = constant(loc, element, -1.0e30);
  Value m, l, o;
  for (int64_t step = 0; step < c; ++step) {
    if (step > 0) {
      auto pass = [&](Value x) -> Value {
        return CollectivePermuteOp::create(b, loc, x.getType(), x, meshRef,
                                           axesAttr(ring),
                                           b.getI64IntegerAttr(1));
      };
      k = pass(k);
      v = pass(v);
      kPos = pass(kPos);
      if (mask && cast<RankedTensorType>(mask.getType()).getShape().back() != 1)
        mask = pass(mask);
    }
    Value scores = MatmulOp::create(b, loc, scoresType, q,
                                    expand(k, kType.getDimSize(3)), UnitAttr(),
                                    b.getUnitAttr());
    scores = MulOp::create(b, loc, scoresType, scores, scale);
    if (mask) {
      auto maskType = cast<RankedTensorType>(mask.getType());
      if (maskType.getElementType().isInteger(1))
        scores = WhereOp::create(b, loc, scoresType, mask, scores, negBig);
      else
        scores = AddOp::create(b, loc, scoresType, scores, mask);
    }
    if (op.getCausal()) {
      Value rows = ReshapeOp::create(
          b, loc, RankedTensorType::get({seq, 1}, i64), qPos);
      Value cols = ReshapeOp::create(
          b, loc, RankedTensorType::get({1, seq}, i64), kPos);
      Value allowed = CompareOp::create(
          b, loc, RankedTensorType::get({seq, seq}, b.getI1Type()),
          ComparePredicateAttr::get(b.getContext(), ComparePredicate::ge),
          rows, cols);
      scores = WhereOp::create(b, loc, scoresType, allowed, scores, negBig);
    }
    Value blockMax = ReduceMaxOp::create(b, loc, statsType, scores,
                                         b.getDenseI64ArrayAttr({3}),
                                         b.getUnitAttr());
    Value mNew = step == 0 ? blockMax
                           : MaximumOp::create(b, loc, statsType, m, blockMax)
                                 .getResult();
    Value p = ExpOp::create(b, loc, scoresType,
                            SubOp::create(b, loc, scoresType, scores, mNew));
    Value rowSum = ReduceSumOp::create(b, loc, statsType, p,
                                       b.getDenseI64ArrayAttr({3}),
                                       b.getUnitAttr());
    Value pv = MatmulOp::create(b, loc, outType, p, expand(v, valueDim),
                                UnitAttr(), UnitAttr());
    if (step == 0) {
      l = rowSum;
      o = pv;
    } else {
      Value alpha = ExpOp::create(b, loc, statsType,
                                  SubOp::create(b, loc, statsType, m, mNew));
      l = AddOp::create(b, loc, statsType,
                        MulOp::create(b, loc, statsType, l, alpha), rowSum);
      o = AddOp::create(b, loc, outType,
                        MulOp::create(b, loc, outType, o, alpha), pv);
    }
    m = mNew;
  }
  Value result = DivOp::create(b, loc, outType, o, l);
  local[op.getResult()] = result;
  TensorSharding s = qWant;
  s.dims[3].clear();
  actual[op.getResult()] = s;
  return success();
}

/// Cross-entropy on logits whose classes are split: the log-sum-exp and the
/// label's logit are each one all-reduce over the class axes (Megatron's
/// vocabulary-parallel cross-entropy); no rank holds all logits.
LogicalResult
Partitioner::partitionVocabCrossEntropy(CrossEntropyOp op,
                                        const TensorSharding &logitsSharding) {
  Location loc = op.getLoc();
  auto logitsType = cast<RankedTensorType>(op.getLogits().getType());
  int64_t rank = logitsType.getRank();
  SmallVector<std::string, 2> classAxes(logitsSharding.dims.back());
  // Positions as the logits have them (minus pending sums), classes split.
  TensorSharding logitsWant = logitsSharding;
  logitsWant.partial.clear();
  TensorSharding labelsWant = TensorSharding::replicated(rank - 1);
  for (int64_t d = 0; d + 1 < rank; ++d)
    labelsWant.dims[d] = logitsWant.dims[d];
  Value logits = operand(loc, op.getLogits(), logitsWant);
  Value labels = operand(loc, op.getLabels(), labelsWant);
  auto localType = cast<RankedTensorType>(logits.getType());
  auto labelType = cast<RankedTensorType>(labels.getType());
  Type element = localType.getElementType();
  Type idType = labelType.getElementType();
  int64_t classes = localType.getShape().back();
  SmallVector<int64_t> keptShape(localType.getShape());
  keptShape.back() = 1;
  auto keptType = RankedTensorType::get(keptShape, element);
  auto rows = b.getDenseI64ArrayAttr({rank - 1});
  auto group = axesAttr(classAxes);
  auto sum = ReductionKindAttr::get(b.getContext(), ReductionKind::sum);
  // log-sum-exp over all shards.
  Value localMax = ReduceMaxOp::create(b, loc, keptType, logits, rows,
                                       b.getUnitAttr());
  bool split = !classAxes.empty();
  Value globalMax =
      split ? AllReduceOp::create(
                  b, loc, keptType,
                  ReductionKindAttr::get(b.getContext(), ReductionKind::max),
                  localMax, meshRef, group)
                  .getResult()
            : localMax;
  Value exps = ExpOp::create(
      b, loc, localType, SubOp::create(b, loc, localType, logits, globalMax));
  Value localSum =
      ReduceSumOp::create(b, loc, keptType, exps, rows, b.getUnitAttr());
  Value globalSum =
      split ? AllReduceOp::create(b, loc, keptType, sum, localSum, meshRef,
                                  group)
                  .getResult()
            : localSum;
  Value lse = AddOp::create(b, loc, keptType,
                            LogOp::create(b, loc, keptType, globalSum),
                            globalMax);
  // The label's logit, from the shard that holds it.
  Value shifted = labels;
  if (split) {
    SmallVector<int64_t> offsets;
    int64_t parts = mesh.product(classAxes);
    for (int64_t i = 0; i < parts; ++i)
      offsets.push_back(i * classes);
    Value offset = perRank(loc, offsets, classAxes, idType);
    shifted = SubOp::create(b, loc, labelType, labels, offset);
  }
  auto boolType = RankedTensorType::get(labelType.getShape(), b.getI1Type());
  Value zero = constant(loc, idType, 0);
  Value inShard = WhereOp::create(
      b, loc, boolType,
      CompareOp::create(b, loc, boolType,
                        ComparePredicateAttr::get(b.getContext(),
                                                  ComparePredicate::ge),
                        shifted, zero),
      CompareOp::create(b, loc, boolType,
                        ComparePredicateAttr::get(b.getContext(),
                                                  ComparePredicate::lt),
                        shifted, constant(loc, idType, classes)),
      constant(loc, b.getI1Type(), 0));
  SmallVector<int64_t> columnShape(labelType.getShape());
  columnShape.push_back(1);
  Value column = ReshapeOp::create(
      b, loc, RankedTensorType::get(columnShape, idType), shifted);
  Value iota = IotaOp::create(b, loc, RankedTensorType::get(localType.getShape(), idType),
                              b.getI64IntegerAttr(rank - 1));
  auto hotType = RankedTensorType::get(localType.getShape(), b.getI1Type());
  Value hot = CompareOp::create(
      b, loc, hotType,
      ComparePredicateAttr::get(b.getContext(), ComparePredicate::eq), iota,
      column);
  Value picked = ReduceSumOp::create(
      b, loc, RankedTensorType::get(labelType.getShape(), element),
      WhereOp::create(b, loc, localType, hot, logits,
                      constant(loc, element, 0)),
      rows, UnitAttr());
  auto lossType = RankedTensorType::get(labelType.getShape(), element);
  picked = WhereOp::create(b, loc, lossType, inShard, picked,
                           constant(loc, element, 0));
  Value target = split ? AllReduceOp::create(b, loc, lossType, sum, picked,
                                             meshRef, group)
                             .getResult()
                       : picked;
  Value loss = SubOp::create(
      b, loc, lossType, ReshapeOp::create(b, loc, lossType, lse), target);
  // Ignored positions count nothing.
  Value counted;
  if (std::optional<uint64_t> ignore = op.getIgnoreIndex()) {
    Value keep = CompareOp::create(
        b, loc, boolType,
        ComparePredicateAttr::get(b.getContext(), ComparePredicate::ne),
        labels, constant(loc, idType, double(int64_t(*ignore))));
    loss = WhereOp::create(b, loc, lossType, keep, loss,
                           constant(loc, element, 0));
    counted = WhereOp::create(b, loc, lossType, keep,
                              constant(loc, element, 1),
                              constant(loc, element, 0));
  }
  TensorSharding result = labelsWant;
  if (op.getReduction() != LossReduction::none) {
    SmallVector<int64_t> all;
    for (int64_t d = 0; d + 1 < rank; ++d)
      all.push_back(d);
    auto scalar = RankedTensorType::get({}, element);
    Value total = ReduceSumOp::create(b, loc, scalar, loss,
                                      b.getDenseI64ArrayAttr(all), UnitAttr());
    // Positions split across ranks: sum the partial totals (and counts).
    SmallVector<std::string, 2> positionAxes;
    for (const auto &dim : labelsWant.dims)
      positionAxes.append(dim.begin(), dim.end());
    if (!positionAxes.empty())
      total = AllReduceOp::create(b, loc, scalar, sum, total, meshRef,
                                  axesAttr(positionAxes));
    if (op.getReduction() == LossReduction::mean) {
      Value count;
      if (counted) {
        count = ReduceSumOp::create(b, loc, scalar, counted,
                                    b.getDenseI64ArrayAttr(all), UnitAttr());
        if (!positionAxes.empty())
          count = AllReduceOp::create(b, loc, scalar, sum, count, meshRef,
                                      axesAttr(positionAxes));
      } else {
        int64_t n = 1;
        for (int64_t d = 0; d + 1 < rank; ++d)
          n *= logitsType.getDimSize(d);
        count = constant(loc, element, double(n));
      }
      total = DivOp::create(b, loc, scalar, total, count);
    }
    loss = total;
    result = TensorSharding::replicated(0);
  }
  local[op.getResult()] = loss;
  actual[op.getResult()] = result;
  return success();
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
  /// Buckets all-reduces that do not depend on one another (same kind,
  /// group and element type) into one: their inputs flattened and
  /// concatenated, reduced once, split back. One launch and one latency
  /// instead of several (gradient buckets, a loss and its count).
  static void mergeAllReduces(func::FuncOp func) {
    for (Block &block : func.getBody()) {
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
        Value reduced = AllReduceOp::create(b, loc, flatType,
                                            ops[i].getKindAttr(), joined,
                                            ops[i].getMeshAttr(),
                                            ops[i].getAxes());
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
    mergeAllReduces(func);
    SmallVector<AllSliceOp> slices;
    func.walk([&](AllSliceOp s) { slices.push_back(s); });
    for (AllSliceOp slice : slices) {
      Operation *producer = slice.getInput().getDefiningOp();
      if (auto reduce = dyn_cast_or_null<AllReduceOp>(producer)) {
        if (reduce.getAxes() != slice.getAxes() ||
            reduce.getKind() != ReductionKind::sum || slice.getZigzag())
          continue;
        OpBuilder b(slice);
        auto scatter = ReduceScatterOp::create(
            b, slice.getLoc(), slice.getType(), reduce.getKindAttr(),
            reduce.getInput(), slice.getMeshAttr(), slice.getAxes(),
            slice.getDimAttr());
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

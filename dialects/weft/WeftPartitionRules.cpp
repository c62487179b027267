//===- WeftPartitionRules.cpp - How weft ops partition themselves ---------===//
//
// Part of the Weft project.
//
// ShardingRuleOpInterface::partition: the generic partition by an op's factor
// rule, and the ops whose rank program is another algorithm than their
// factor rule gives: parameters and constants (built whole, each rank keeps
// its shard), a linear whose bias meets a partial sum, slices and splits
// whose attributes follow a split dimension, the vocabulary-parallel
// embedding and cross-entropy (Megatron), and ring attention (Li et al.
// 2021; Liu et al. 2023) for a key sequence split over a ring.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Partition.h"
#include "weft/Dialect/WeftOps.h"

#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace weft;

//===----------------------------------------------------------------------===//
// PartitionState helpers
//===----------------------------------------------------------------------===//

PartitionState::~PartitionState() = default;

FlatSymbolRefAttr PartitionState::meshRef() {
  return FlatSymbolRefAttr::get(builder().getContext(), mesh().name);
}

ArrayAttr PartitionState::axesAttr(ArrayRef<std::string> axes) {
  SmallVector<StringRef> names(axes.begin(), axes.end());
  return builder().getStrArrayAttr(names);
}

UnitAttr PartitionState::zigzagAttr(ArrayRef<std::string> axes) {
  return isZigzag(axes) ? builder().getUnitAttr() : UnitAttr();
}

RankedTensorType PartitionState::localType(Value global,
                                           const TensorSharding &sharding) {
  auto type = cast<RankedTensorType>(global.getType());
  return RankedTensorType::get(localShape(type.getShape(), sharding, mesh()),
                               type.getElementType());
}

Value PartitionState::constant(Location loc, Type elementType, double value) {
  OpBuilder &b = builder();
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

Value PartitionState::perRank(Location loc, ArrayRef<int64_t> values,
                              ArrayRef<std::string> axes, Type elementType) {
  OpBuilder &b = builder();
  auto type = RankedTensorType::get({int64_t(values.size())}, elementType);
  SmallVector<APInt> ints;
  for (int64_t v : values)
    ints.push_back(APInt(elementType.getIntOrFloatBitWidth(), v, true));
  Value full = ConstantOp::create(b, loc, DenseElementsAttr::get(type, ints));
  auto sliceType = RankedTensorType::get({1}, elementType);
  return AllSliceOp::create(b, loc, sliceType, full, meshRef(), axesAttr(axes),
                            b.getI64IntegerAttr(0), UnitAttr());
}

//===----------------------------------------------------------------------===//
// The generic partition
//===----------------------------------------------------------------------===//

FailureOr<Operation *> weft::partitionByFactorRule(Operation *op,
                                                   PartitionState &state) {
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return op->emitError("cannot partition '")
           << op->getName() << "': it has no sharding rule";
  ShardingRule rule = ruleOp.getShardingRule();
  std::vector<TensorSharding> resultTargets, operandActual;
  for (Value r : op->getResults())
    resultTargets.push_back(state.target(r));
  for (Value v : op->getOperands())
    operandActual.push_back(state.actual(v));
  // Weights first (the plan fixed their splits), then what the results
  // should be, then how the other operands are.
  std::vector<TensorSharding> weightTargets(op->getNumOperands());
  SmallVector<ShardedTensor> tensors;
  for (auto [i, factors] : llvm::enumerate(rule.operands))
    if (getWeightParameter(op->getOperand(i))) {
      weightTargets[i] = state.target(op->getOperand(i));
      tensors.push_back({&factors, &weightTargets[i], 0});
    }
  for (auto [i, factors] : llvm::enumerate(rule.results))
    tensors.push_back({&factors, &resultTargets[i], 1});
  for (auto [i, factors] : llvm::enumerate(rule.operands))
    tensors.push_back({&factors, &operandActual[i], 2});
  FactorAxes axes = assignFactorAxes(rule, state.mesh(), tensors);
  // Operand by operand: one value read twice (Q Kᵀ of a shared projection)
  // may be needed in two shardings.
  SmallVector<Value> locals;
  for (auto [v, factors] : llvm::zip(op->getOperands(), rule.operands))
    locals.push_back(
        state.operand(op->getLoc(), v, projectSharding(factors, axes)));
  Operation *copy = state.builder().clone(*op);
  for (auto [i, local] : llvm::enumerate(locals))
    copy->setOperand(unsigned(i), local);
  copy->removeAttr(WeftDialect::getShardingAttrName());
  // Partial sums: split reduction factors.
  SmallVector<std::string, 2> partial;
  for (int64_t f = 0; f < rule.getNumFactors(); ++f)
    if (rule.getFactorKind(f) == ShardingRule::FactorKind::Reduction)
      for (const std::string &axis : axes.axes[f])
        partial.push_back(axis);
  for (auto [i, r] : llvm::enumerate(op->getResults())) {
    TensorSharding s = projectSharding(rule.results[i], axes);
    s.partial = partial;
    if (i < rule.resultSums.size())
      for (int64_t f : rule.resultSums[i])
        for (const std::string &axis : axes.axes[f])
          s.partial.push_back(axis);
    copy->getResult(i).setType(state.localType(r, s));
    state.setResult(r, copy->getResult(i), s);
  }
  return copy;
}

LogicalResult weft::partitionWhole(Operation *op, PartitionState &state) {
  Operation *copy = state.builder().clone(*op);
  copy->removeAttr(WeftDialect::getShardingAttrName());
  Value result = op->getResult(0);
  TensorSharding want = state.target(result);
  TensorSharding whole = TensorSharding::replicated(want.dims.size());
  state.setResult(result,
                  state.reshard(op->getLoc(), copy->getResult(0), whole, want),
                  want);
  return success();
}

/// A weight stored over more axes than it is used with (`weft.stored_over`,
/// AxoNN's depth axis): each rank keeps the shard of its first dimension
/// split further over those axes, and all-gathers it where it is used.
LogicalResult ParameterOp::partition(PartitionState &state) {
  auto stored =
      (*this)->getAttrOfType<ArrayAttr>(WeftDialect::getStoredOverAttrName());
  if (!stored || stored.empty())
    return partitionWhole(*this, state);
  Value result = getResult();
  TensorSharding want = state.target(result);
  TensorSharding storage = want;
  auto type = cast<RankedTensorType>(result.getType());
  if (type.getRank() < 1)
    return emitError("a scalar weight cannot be stored in shards");
  for (StringAttr axis : stored.getAsRange<StringAttr>()) {
    if (storage.uses(axis.getValue()))
      return emitError("stored over mesh axis '")
             << axis.getValue() << "', which already splits it";
    storage.dims.front().push_back(axis.getValue().str());
  }
  int64_t split = state.mesh().product(storage.dims.front());
  if (type.getDimSize(0) % split)
    return emitError("the weight's first dimension (")
           << type.getDimSize(0) << ") is not divisible by the " << split
           << " shards it is stored in; store it over fewer axes";
  // (The rank's weight keeps `weft.stored_over`: the optimizer step holds
  // and updates the stored block, storedParameterAxes.)
  Operation *copy = state.builder().clone(*getOperation());
  copy->removeAttr(WeftDialect::getShardingAttrName());
  TensorSharding whole = TensorSharding::replicated(type.getRank());
  Value shard =
      state.reshard(getLoc(), copy->getResult(0), std::move(whole), storage);
  state.setResult(result, state.reshard(getLoc(), shard, storage, want), want);
  return success();
}
LogicalResult ConstantOp::partition(PartitionState &state) {
  return partitionWhole(*this, state);
}
/// Each rank counts its block of the split dimension from the block's first
/// index; a zigzag block is two pieces, and a float offset is not a rank
/// constant (perRank), so those are built whole and sliced.
LogicalResult IotaOp::partition(PartitionState &state) {
  Value result = getResult();
  TensorSharding want = state.target(result);
  const int64_t dim = getDim();
  ArrayRef<std::string> axes = want.dims[dim];
  Type element = getType().getElementType();
  if (!want.partial.empty() ||
      (!axes.empty() && (state.isZigzag(axes) || !element.isInteger())))
    return partitionWhole(*this, state);
  RankedTensorType local = state.localType(result, want);
  OpBuilder &b = state.builder();
  Value count = IotaOp::create(b, getLoc(), local, b.getI64IntegerAttr(dim));
  if (!axes.empty()) {
    SmallVector<int64_t> offsets;
    for (int64_t i = 0, n = state.mesh().product(axes); i < n; ++i)
      offsets.push_back(i * local.getDimSize(dim));
    count = AddOp::create(b, getLoc(), local, count,
                          state.perRank(getLoc(), offsets, axes, element));
  }
  state.setResult(result, count, want);
  return success();
}

/// A softmax's statistics along dimension `axis` of local value `x`, which is
/// split over `axes` (none: whole): the rows' maximum and sum of
/// exponentials, each all-reduced over the split, uncompressed (they decide
/// every probability), and `x` minus the maximum with its exponentials. The
/// ops made go into `made` if given.
namespace {
struct RowStatistics {
  Value max, shifted, exps, sum;
};
} // namespace
static RowStatistics
rowStatistics(PartitionState &state, Location loc, Value x, int64_t axis,
              ArrayRef<std::string> axes,
              SmallVectorImpl<Operation *> *made = nullptr) {
  OpBuilder &b = state.builder();
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> keptShape(type.getShape());
  keptShape[axis] = 1;
  auto kept = RankedTensorType::get(keptShape, type.getElementType());
  auto dims = b.getDenseI64ArrayAttr({axis});
  auto exact = CollectiveCodecAttr::get(b.getContext(), CollectiveCodec::none);
  auto track = [&](Value v) {
    if (made)
      made->push_back(v.getDefiningOp());
    return v;
  };
  auto overSplit = [&](ReductionKind kind, Value local) {
    if (axes.empty())
      return local;
    return track(AllReduceOp::create(
        b, loc, kept, ReductionKindAttr::get(b.getContext(), kind), local,
        state.meshRef(), state.axesAttr(axes), exact, DenseI64ArrayAttr()));
  };
  RowStatistics rows;
  rows.max = overSplit(
      ReductionKind::max,
      track(ReduceMaxOp::create(b, loc, kept, x, dims, b.getUnitAttr())));
  rows.shifted = track(SubOp::create(b, loc, type, x, rows.max));
  rows.exps = track(ExpOp::create(b, loc, type, rows.shifted));
  rows.sum = overSplit(ReductionKind::sum,
                       track(ReduceSumOp::create(b, loc, kept, rows.exps, dims,
                                                 b.getUnitAttr())));
  return rows;
}

/// The log-sum-exp of local value `x` over its dimensions `reduced` (kept as
/// 1s), which are split over `axes` (none: whole): each rank's block's, in one
/// pass, and the blocks' values `l` combined as `m + log(sum(exp(l - m)))`,
/// `m` their maximum, with two all-reduces of one value per row, uncompressed
/// (they decide every probability). The ops made go into `made` if given.
static Value splitLogSumExp(PartitionState &state, Location loc, Value x,
                            ArrayRef<int64_t> reduced,
                            ArrayRef<std::string> axes,
                            SmallVectorImpl<Operation *> *made = nullptr) {
  OpBuilder &b = state.builder();
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> keptShape(type.getShape());
  for (int64_t axis : reduced)
    keptShape[axis] = 1;
  auto kept = RankedTensorType::get(keptShape, type.getElementType());
  auto track = [&](Value v) {
    if (made)
      made->push_back(v.getDefiningOp());
    return v;
  };
  Value local = track(ReduceLogSumExpOp::create(
      b, loc, kept, x, b.getDenseI64ArrayAttr(reduced), b.getUnitAttr()));
  if (axes.empty())
    return local;
  auto exact = CollectiveCodecAttr::get(b.getContext(), CollectiveCodec::none);
  auto overSplit = [&](ReductionKind kind, Value v) {
    return track(AllReduceOp::create(
        b, loc, kept, ReductionKindAttr::get(b.getContext(), kind), v,
        state.meshRef(), state.axesAttr(axes), exact, DenseI64ArrayAttr()));
  };
  Value max = overSplit(ReductionKind::max, local);
  Value sum = overSplit(
      ReductionKind::sum,
      track(ExpOp::create(b, loc, kept,
                          track(SubOp::create(b, loc, kept, local, max)))));
  return track(AddOp::create(b, loc, kept,
                             track(LogOp::create(b, loc, kept, sum)), max));
}

/// Reduced where it lies when a reduced dimension arrives split (the
/// cross-entropy's backward, on the logits of a vocabulary-parallel head);
/// otherwise by the factor rule, which keeps reduced dimensions whole.
LogicalResult ReduceLogSumExpOp::partition(PartitionState &state) {
  TensorSharding want = state.actual(getInput());
  want.partial.clear();
  SmallVector<std::string, 2> axes;
  for (int64_t axis : getAxes())
    axes.append(want.dims[axis].begin(), want.dims[axis].end());
  if (axes.empty())
    return success(succeeded(partitionByFactorRule(*this, state)));
  Location loc = getLoc();
  OpBuilder &b = state.builder();
  Value input = state.operand(loc, getInput(), want);
  SmallVector<Operation *> made;
  Value result = splitLogSumExp(state, loc, input, getAxes(), axes, &made);
  TensorSharding sharding;
  SmallVector<int64_t> shape;
  auto local = cast<RankedTensorType>(result.getType());
  for (int64_t d = 0, rank = local.getRank(); d < rank; ++d) {
    bool reduced = llvm::is_contained(getAxes(), d);
    if (reduced && !getKeepDims())
      continue;
    sharding.dims.push_back(reduced ? SmallVector<std::string, 2>{}
                                    : want.dims[d]);
    shape.push_back(local.getDimSize(d));
  }
  if (!getKeepDims()) {
    result = ReshapeOp::create(b, loc, local.clone(shape), result);
    made.push_back(result.getDefiningOp());
  }
  // What marks the op (a recomputation, the backward) marks each op it
  // became.
  for (NamedAttribute attr : (*this)->getDiscardableAttrs())
    if (attr.getName() != WeftDialect::getShardingAttrName())
      for (Operation *piece : made)
        piece->setAttr(attr.getName(), attr.getValue());
  state.setResult(getResult(), result, sharding);
  return success();
}

/// Softmax (or its log) along a dimension its input arrives split in: the
/// rows' maxima and sums are all-reduced over the split (one value per row
/// each) and every rank keeps its columns. Causal masking needs the columns'
/// positions: that case, and an axis not split, take the generic rule.
template <typename Op>
static LogicalResult partitionSoftmaxLike(Op op, bool log,
                                          PartitionState &state) {
  const int64_t axis = op.getAxis();
  TensorSharding want = state.actual(op.getInput());
  want.partial.clear();
  SmallVector<std::string, 2> axes(want.dims[axis]);
  if (axes.empty() || op.getCausal())
    return success(succeeded(partitionByFactorRule(op, state)));
  Location loc = op.getLoc();
  OpBuilder &b = state.builder();
  Value input = state.operand(loc, op.getInput(), want);
  auto type = cast<RankedTensorType>(input.getType());
  SmallVector<Operation *> made;
  Value scaled = input;
  if (op.getScale().convertToFloat() != 1.0f) {
    scaled =
        MulOp::create(b, loc, type, input,
                      state.constant(loc, type.getElementType(),
                                     double(op.getScale().convertToFloat())));
    made.push_back(scaled.getDefiningOp());
  }
  RowStatistics rows = rowStatistics(state, loc, scaled, axis, axes, &made);
  Value result =
      log ? SubOp::create(b, loc, type, rows.shifted,
                          LogOp::create(b, loc, rows.sum.getType(), rows.sum))
                .getResult()
          : DivOp::create(b, loc, type, rows.exps, rows.sum).getResult();
  if (log)
    made.push_back(result.getDefiningOp()->getOperand(1).getDefiningOp());
  made.push_back(result.getDefiningOp());
  // What marks the op (the attention core, for selective recomputation)
  // marks each op it became.
  for (NamedAttribute attr : op->getDiscardableAttrs())
    if (attr.getName() != WeftDialect::getShardingAttrName())
      for (Operation *piece : made)
        piece->setAttr(attr.getName(), attr.getValue());
  state.setResult(op.getResult(), result, want);
  return success();
}
LogicalResult SoftmaxOp::partition(PartitionState &state) {
  return partitionSoftmaxLike(*this, false, state);
}
LogicalResult LogSoftmaxOp::partition(PartitionState &state) {
  return partitionSoftmaxLike(*this, true, state);
}

/// A bias added on every rank of a partial sum would be summed n times: each
/// rank adds its 1/n.
LogicalResult LinearOp::partition(PartitionState &state) {
  FailureOr<Operation *> copy = partitionByFactorRule(*this, state);
  if (failed(copy))
    return failure();
  auto linear = cast<LinearOp>(*copy);
  const TensorSharding &result = state.actual(getResult());
  if (!linear.getBias() || result.partial.empty())
    return success();
  OpBuilder &b = state.builder();
  auto biasType = cast<RankedTensorType>(linear.getBias().getType());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(linear);
  Value share =
      state.constant(getLoc(), biasType.getElementType(),
                     1.0 / double(state.mesh().product(result.partial)));
  Value scaled = MulOp::create(b, getLoc(), biasType, linear.getBias(), share);
  linear.getBiasMutable().assign(scaled);
  return success();
}

/// The limits of a dimension that is kept whole follow its local size.
LogicalResult SliceOp::partition(PartitionState &state) {
  FailureOr<Operation *> copy = partitionByFactorRule(*this, state);
  if (failed(copy))
    return failure();
  auto slice = cast<SliceOp>(*copy);
  auto in = cast<RankedTensorType>(slice.getInput().getType());
  auto out = cast<RankedTensorType>(slice.getType());
  SmallVector<int64_t> limits(slice.getLimits());
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (out.getDimSize(d) == in.getDimSize(d))
      limits[d] = in.getDimSize(d);
  slice.setLimits(limits);
  return success();
}

/// The sizes of the pieces are their local sizes.
LogicalResult SplitOp::partition(PartitionState &state) {
  FailureOr<Operation *> copy = partitionByFactorRule(*this, state);
  if (failed(copy))
    return failure();
  auto split = cast<SplitOp>(*copy);
  SmallVector<int64_t> sizes;
  for (Value r : split.getResults())
    sizes.push_back(
        cast<RankedTensorType>(r.getType()).getDimSize(split.getAxis()));
  split.setSizes(sizes);
  return success();
}

namespace {
/// While alive, the ops built at the builder's insertion point are one op's
/// decomposition: when it ends it marks them `weft.decomposed`. A rule
/// starts one once the op's operands are resolved, so that their reshards
/// stay the operands' (what the op's backward reads).
class Decomposition {
public:
  explicit Decomposition(OpBuilder &b) : b(b), block(b.getInsertionBlock()) {
    if (block && b.getInsertionPoint() != block->begin())
      before = &*std::prev(b.getInsertionPoint());
  }
  ~Decomposition() {
    if (!block || b.getInsertionBlock() != block)
      return;
    auto name = WeftDialect::getDecomposedAttrName();
    for (auto it = before ? std::next(Block::iterator(before)) : block->begin();
         it != b.getInsertionPoint(); ++it)
      it->setAttr(name, UnitAttr::get(b.getContext()));
  }

private:
  OpBuilder &b;
  Block *block;
  Operation *before = nullptr;
};
} // namespace

/// A normalization over dimensions its input arrives split in (OLMo 2's QK
/// norm over every head's features, after a column-parallel projection):
/// each rank sums its block's x (LayerNorm) and squares, the sums are
/// all-reduced over the split (one value per row each, uncompressed, in f32
/// for a 16-bit input) and every rank normalizes and scales its own block,
/// as a distributed RMSNorm does, instead of gathering the rows. Dimensions
/// that arrive whole take the generic rule.
static LogicalResult partitionSplitNorm(Operation *op, Value input, Value scale,
                                        Value bias, int64_t axis,
                                        double epsilon, bool rms,
                                        PartitionState &state) {
  TensorSharding want = state.actual(input);
  want.partial.clear();
  SmallVector<std::string, 2> axes;
  auto globalType = cast<RankedTensorType>(input.getType());
  const int64_t rank = globalType.getRank();
  int64_t count = 1;
  SmallVector<int64_t> dims;
  for (int64_t d = axis; d < rank; ++d) {
    if (d < int64_t(want.dims.size()))
      axes.append(want.dims[d].begin(), want.dims[d].end());
    count *= globalType.getDimSize(d);
    dims.push_back(d);
  }
  if (axes.empty())
    return success(succeeded(partitionByFactorRule(op, state)));
  Location loc = op->getLoc();
  OpBuilder &b = state.builder();
  Value x = state.operand(loc, input, want);
  // Scale and bias span the normalized dimensions: read whole (as a rank
  // keeps a norm's weights) and sliced as x is within the decomposition, so
  // that the slice is this op's use of the weights, not their storage.
  TensorSharding spanned, whole;
  spanned.dims.assign(want.dims.begin() + axis, want.dims.end());
  whole.dims.resize(spanned.dims.size());
  Value wholeScale = state.operand(loc, scale, whole);
  Value wholeBias = bias ? state.operand(loc, bias, whole) : Value();
  Decomposition decomposition(b);
  Value localScale = state.reshard(loc, wholeScale, whole, spanned);
  Value localBias =
      bias ? state.reshard(loc, wholeBias, whole, spanned) : Value();
  SmallVector<Operation *> made;
  auto track = [&](Value v) {
    made.push_back(v.getDefiningOp());
    return v;
  };
  auto type = cast<RankedTensorType>(x.getType());
  Type f32 = b.getF32Type();
  auto wide = type.clone(f32);
  Value xf =
      type.getElementType() == f32 ? x : track(CastOp::create(b, loc, wide, x));
  SmallVector<int64_t> keptShape(type.getShape());
  for (int64_t d : dims)
    keptShape[d] = 1;
  auto kept = RankedTensorType::get(keptShape, f32);
  auto exact = CollectiveCodecAttr::get(b.getContext(), CollectiveCodec::none);
  auto mean = [&](Value v) {
    Value local = track(ReduceSumOp::create(
        b, loc, kept, v, b.getDenseI64ArrayAttr(dims), b.getUnitAttr()));
    Value total = track(AllReduceOp::create(
        b, loc, kept,
        ReductionKindAttr::get(b.getContext(), ReductionKind::sum), local,
        state.meshRef(), state.axesAttr(axes), exact, DenseI64ArrayAttr()));
    return track(MulOp::create(b, loc, kept, total,
                               state.constant(loc, f32, 1.0 / double(count))));
  };
  Value centered = xf;
  if (!rms)
    centered = track(SubOp::create(b, loc, wide, xf, mean(xf)));
  Value variance = mean(track(MulOp::create(b, loc, wide, centered, centered)));
  Value rstd = track(
      RsqrtOp::create(b, loc, kept,
                      track(AddOp::create(b, loc, kept, variance,
                                          state.constant(loc, f32, epsilon)))));
  Value normalized = track(MulOp::create(b, loc, wide, centered, rstd));
  if (normalized.getType() != type)
    normalized = track(CastOp::create(b, loc, type, normalized));
  Value result = track(MulOp::create(b, loc, type, normalized, localScale));
  if (localBias)
    result = track(AddOp::create(b, loc, type, result, localBias));
  // What marks the op (a recomputation, the backward) marks each op it
  // became.
  for (NamedAttribute attr : op->getDiscardableAttrs())
    if (attr.getName() != WeftDialect::getShardingAttrName())
      for (Operation *piece : made)
        piece->setAttr(attr.getName(), attr.getValue());
  state.setResult(op->getResult(0), result, want);
  return success();
}
LogicalResult LayerNormOp::partition(PartitionState &state) {
  return partitionSplitNorm(*this, getInput(), getScale(), getBias(), getAxis(),
                            getEpsilon().convertToDouble(),
                            /*rms=*/false, state);
}
LogicalResult RMSNormOp::partition(PartitionState &state) {
  return partitionSplitNorm(*this, getInput(), getScale(), Value(), getAxis(),
                            getEpsilon().convertToDouble(), /*rms=*/true,
                            state);
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel embedding
//===----------------------------------------------------------------------===//

/// An embedding whose table is split over the vocabulary: each rank looks up
/// the ids in its shard (the others give zero rows), and the result is a
/// partial sum over the vocabulary axes.
static LogicalResult partitionVocabEmbedding(EmbeddingOp op,
                                             const TensorSharding &table,
                                             PartitionState &state) {
  Location loc = op.getLoc();
  OpBuilder &b = state.builder();
  const auto &vocabAxes = table.dims[0];
  TensorSharding resultTarget = state.target(op.getResult());
  // Indices follow the result's leading dimensions (minus the vocab axes).
  auto indexType = cast<RankedTensorType>(op.getIndices().getType());
  TensorSharding indexWant = TensorSharding::replicated(indexType.getRank());
  for (int64_t d = 0; d < indexType.getRank(); ++d)
    for (const std::string &axis : resultTarget.dims[d])
      if (!llvm::is_contained(vocabAxes, axis))
        indexWant.dims[d].push_back(axis);
  TensorSharding tableWant = TensorSharding::replicated(2);
  tableWant.dims[0] = vocabAxes;
  Value ids = state.operand(loc, op.getIndices(), indexWant);
  Value rows = state.operand(loc, op.getTable(), tableWant);
  Decomposition decomposition(b);
  int64_t vocab = op.getTable().getType().getDimSize(0);
  int64_t parts = state.mesh().product(vocabAxes);
  int64_t shard = vocab / parts;
  Type idType = indexType.getElementType();
  SmallVector<int64_t> offsets;
  for (int64_t i = 0; i < parts; ++i)
    offsets.push_back(i * shard);
  Value offset = state.perRank(loc, offsets, vocabAxes, idType);
  if (!ids || !rows)
    return op.emitError("internal: embedding operands were not partitioned");
  Value shifted = SubOp::create(b, loc, ids.getType(), ids, offset);
  auto boolType = RankedTensorType::get(
      cast<RankedTensorType>(ids.getType()).getShape(), b.getI1Type());
  Value zero = state.constant(loc, idType, 0);
  Value geZero = CompareOp::create(
      b, loc, boolType,
      ComparePredicateAttr::get(b.getContext(), ComparePredicate::ge), shifted,
      zero);
  Value ltShard = CompareOp::create(
      b, loc, boolType,
      ComparePredicateAttr::get(b.getContext(), ComparePredicate::lt), shifted,
      state.constant(loc, idType, shard));
  Value valid = WhereOp::create(b, loc, boolType, geZero, ltShard,
                                state.constant(loc, b.getI1Type(), 0));
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
  Value result =
      WhereOp::create(b, loc, outType, mask, looked,
                      state.constant(loc, rowsType.getElementType(), 0));
  TensorSharding s = indexWant;
  s.dims.emplace_back();
  s.partial = vocabAxes;
  state.setResult(op.getResult(), result, s);
  return success();
}

LogicalResult EmbeddingOp::partition(PartitionState &state) {
  TensorSharding table = state.target(getTable());
  if (!table.dims[0].empty())
    return partitionVocabEmbedding(*this, table, state);
  return success(succeeded(partitionByFactorRule(*this, state)));
}

//===----------------------------------------------------------------------===//
// Ring attention
//===----------------------------------------------------------------------===//

/// How a ring step finds its K/V block's part of the mask.
enum class RingMaskForm {
  /// No mask, or one that broadcasts over the keys: the same at every step.
  Fixed,
  /// Split along the keys: each block's columns travel with the block.
  Passed,
  /// The mask varies over the queries and the keys (a sliding window, a
  /// padding mask combined with a causal one): each rank holds its queries'
  /// rows with every key, and each step gathers the columns of the block it
  /// holds at the block's positions, which travel with it.
  Gathered,
};

/// The local mask of an attention over a ring (none if `globalMask` is
/// null), split as the queries (`qWant`) along batch and heads: along the
/// keys over the ring where it broadcasts over the queries, else along the
/// queries, its keys whole. `form` says how each step takes its block's
/// part.
static Value ringMask(Location loc, Value globalMask,
                      const TensorSharding &qWant, PartitionState &state,
                      RingMaskForm &form, bool keysGathered = false) {
  form = RingMaskForm::Fixed;
  if (!globalMask)
    return {};
  auto maskType = cast<RankedTensorType>(globalMask.getType());
  int64_t rank = maskType.getRank();
  TensorSharding maskWant = TensorSharding::replicated(rank);
  bool overQueries = rank >= 2 && maskType.getDimSize(rank - 2) != 1;
  bool overKeys = rank >= 1 && maskType.getDimSize(rank - 1) != 1;
  if (overQueries) {
    // Every key is here, or gathered at each step: the mask splits with the
    // queries, and its keys stay whole.
    maskWant.dims[rank - 2] = qWant.dims[2];
    if (!keysGathered && overKeys)
      form = RingMaskForm::Gathered;
  } else if (overKeys && !keysGathered) {
    maskWant.dims[rank - 1] = qWant.dims[2];
    form = RingMaskForm::Passed;
  }
  if (rank == 4 && maskType.getDimSize(0) != 1)
    maskWant.dims[0] = qWant.dims[0];
  if (rank == 4 && maskType.getDimSize(1) != 1)
    maskWant.dims[1] = qWant.dims[1];
  return state.operand(loc, globalMask, maskWant);
}

/// The mask of the ring step whose K/V block has positions `kPos`.
static Value blockMask(OpBuilder &b, Location loc, Value mask,
                       RingMaskForm form, Value kPos) {
  if (form != RingMaskForm::Gathered)
    return mask;
  int64_t rank = cast<RankedTensorType>(mask.getType()).getRank();
  return GatherOp::create(b, loc, mask, kPos, rank - 1);
}

/// The positions of this rank's `seq` queries in a sequence split over the
/// ring (the load-balanced layout where the plan uses it).
static Value ringPositions(PartitionState &state, Location loc, int64_t seq) {
  OpBuilder &b = state.builder();
  SmallVector<std::string, 2> ring = {"cp"};
  Type i64 = b.getI64Type();
  int64_t c = state.mesh().size("cp");
  auto posType = RankedTensorType::get({seq * c}, i64);
  Value allPositions = IotaOp::create(b, loc, posType, 0);
  return AllSliceOp::create(b, loc, RankedTensorType::get({seq}, i64),
                            allPositions, state.meshRef(), state.axesAttr(ring),
                            b.getI64IntegerAttr(0), state.zigzagAttr(ring));
}

/// `x` from the rank `shift` places back on the ring (this rank's goes
/// `shift` places on).
static Value ringPass(PartitionState &state, Value x, int64_t shift = 1) {
  OpBuilder &b = state.builder();
  SmallVector<std::string, 2> ring = {"cp"};
  return CollectivePermuteOp::create(
      b, x.getLoc(), x.getType(), x, state.meshRef(), state.axesAttr(ring),
      b.getI64IntegerAttr(shift), CollectiveCodecAttr());
}

/// The positions rank `r` of the ring holds of a sequence split over it,
/// `seq` of them, as [first, last] intervals: chunks r and 2c - 1 - r of
/// seq / 2 in the load-balanced layout, else chunk r of seq.
static SmallVector<std::pair<int64_t, int64_t>, 2>
ringChunks(PartitionState &state, int64_t seq, int64_t r) {
  const int64_t c = state.mesh().size("cp");
  const bool zigzag = bool(state.zigzagAttr({"cp"}));
  const int64_t chunk = zigzag ? seq / 2 : seq;
  SmallVector<std::pair<int64_t, int64_t>, 2> chunks;
  for (int64_t index : zigzag ? SmallVector<int64_t, 2>{r, 2 * c - 1 - r}
                              : SmallVector<int64_t, 2>{r})
    chunks.push_back({index * chunk, (index + 1) * chunk - 1});
  return chunks;
}

/// The steps of a ring over `seq` local positions per rank at which some
/// rank's queries see the block it holds (step k brings rank r the keys of
/// rank r - k), in order, step 0 first. Every step, unless a causal sliding
/// window of `window` keys per query reaches no query of any rank at some
/// steps: in the load-balanced layout rank r holds chunks r and 2c - 1 - r
/// of seq / 2 positions, else chunk r of seq. The ring's blocks then jump
/// over the steps left out, which carry neither blocks nor work.
static SmallVector<int64_t> ringSteps(PartitionState &state, int64_t seq,
                                      bool causal, int64_t window) {
  const int64_t c = state.mesh().size("cp");
  SmallVector<int64_t> steps;
  if (!causal || window <= 0) {
    for (int64_t k = 0; k < c; ++k)
      steps.push_back(k);
    return steps;
  }
  for (int64_t k = 0; k < c; ++k) {
    bool needed = k == 0;
    for (int64_t r = 0; r < c && !needed; ++r)
      for (auto [qFirst, qLast] : ringChunks(state, seq, r))
        for (auto [kFirst, kLast] : ringChunks(state, seq, (r - k + c) % c))
          // Some query q and key p with 0 <= q - p <= window - 1.
          needed |= qLast >= kFirst && qFirst - kLast <= window - 1;
    if (needed)
      steps.push_back(k);
  }
  return steps;
}

/// The pairs of a query q in [a, b] and a key p in [c, d] that a causal mask
/// leaves visible, 0 <= q - p, and a sliding window of `window` keys (0:
/// none), q - p <= window - 1. For a distance q - p, the pairs are
/// min(b, d + q - p) - max(a, c + q - p) + 1, linear in it between the two
/// distances where a bound changes sides: summed piece by piece.
static int64_t causalPairs(int64_t a, int64_t b, int64_t c, int64_t d,
                           int64_t window) {
  int64_t lo = std::max<int64_t>(0, a - d), hi = b - c;
  if (window > 0)
    hi = std::min(hi, window - 1);
  if (lo > hi)
    return 0;
  auto at = [&](int64_t distance) {
    return std::min(b, d + distance) - std::max(a, c + distance) + 1;
  };
  SmallVector<int64_t, 4> cuts{lo, hi + 1};
  for (int64_t cut : {b - d + 1, a - c + 1})
    if (cut > lo && cut <= hi)
      cuts.push_back(cut);
  llvm::sort(cuts);
  int64_t pairs = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    if (cuts[i] < cuts[i + 1])
      pairs +=
          (at(cuts[i]) + at(cuts[i + 1] - 1)) * (cuts[i + 1] - cuts[i]) / 2;
  return pairs;
}

/// The (query, key) pairs per batch and head that a causal mask (and a
/// sliding window of `window` keys, 0: none) leaves visible at ring step
/// `k` to the rank that sees the most: rank r's queries attend to rank
/// r - k's keys, by the layout's positions. (A weft.attention_block's
/// visible pairs: its cost, as a kernel that skips the hidden tiles spends
/// it, for the slowest rank of the step.)
static int64_t ringStepPairs(PartitionState &state, int64_t seq, int64_t window,
                             int64_t k) {
  const int64_t c = state.mesh().size("cp");
  int64_t most = 0;
  for (int64_t r = 0; r < c; ++r) {
    int64_t pairs = 0;
    for (auto [qFirst, qLast] : ringChunks(state, seq, r))
      for (auto [kFirst, kLast] : ringChunks(state, seq, (r - k + c) % c))
        pairs += causalPairs(qFirst, qLast, kFirst, kLast, window);
    most = std::max(most, pairs);
  }
  return most;
}

/// The queries' layout under context parallelism: batch and heads as the
/// result `target` splits them, the sequence over the ring.
static TensorSharding contextParallelQueries(const TensorSharding &target) {
  TensorSharding q = TensorSharding::replicated(4);
  q.dims[0] = target.dims[0];
  q.dims[1] = target.dims[1];
  q.dims[2] = {"cp"};
  return q;
}

/// `local`, split over the ring along its sequence (dimension 2) as
/// `split`, all-gathered whole.
static Value gatherSequence(PartitionState &state, Location loc, Value local,
                            const TensorSharding &split) {
  TensorSharding whole = split;
  whole.dims[2].clear();
  return state.reshard(loc, local, split, whole);
}

/// The positions of all `seq` keys, in order.
static Value allPositions(PartitionState &state, Location loc, int64_t seq) {
  OpBuilder &b = state.builder();
  return IotaOp::create(b, loc, RankedTensorType::get({seq}, b.getI64Type()),
                        0);
}

/// ALiBi's slopes (null: none) as the queries `qWant` split their heads.
static Value slopesFor(PartitionState &state, Location loc, Value slopes,
                       const TensorSharding &qWant) {
  if (!slopes)
    return Value();
  TensorSharding want = TensorSharding::replicated(1);
  want.dims[0] = qWant.dims[1];
  return state.operand(loc, slopes, want);
}

/// True if `op` is split over a context-parallel mesh axis that gathers K
/// and V rather than passing them around a ring.
static bool gathersKeys(Operation *op) {
  return op->hasAttr(WeftDialect::getContextParallelGatherAttrName());
}

/// Attention whose sequence is split over a ring of `cp` ranks: each rank
/// keeps its queries and passes its K/V block (and the block's positions)
/// around the ring; at each of the `cp` steps it attends to the block it
/// holds (weft.attention_block) and merges the result into its running
/// output through the blocks' log-sum-exps, in f32. The next step's block is
/// sent before the current one is computed, so the two can overlap. Causal
/// masks come from the positions, which the load-balanced (zigzag) layout
/// makes every rank's share of the work equal.
static LogicalResult partitionRingAttention(AttentionOp op,
                                            PartitionState &state) {
  Location loc = op.getLoc();
  OpBuilder &b = state.builder();
  TensorSharding qWant = contextParallelQueries(state.target(op.getResult()));
  TensorSharding kvWant = qWant;
  Value q = state.operand(loc, op.getQ(), qWant);
  Value k = state.operand(loc, op.getK(), kvWant);
  Value v = state.operand(loc, op.getV(), kvWant);
  auto qType = cast<RankedTensorType>(q.getType());
  auto vType = cast<RankedTensorType>(v.getType());
  Type element = qType.getElementType();
  int64_t batch = qType.getDimSize(0), heads = qType.getDimSize(1),
          seq = qType.getDimSize(2), valueDim = vType.getDimSize(3);
  RingMaskForm maskForm;
  Value mask = ringMask(loc, op.getMask(), qWant, state, maskForm);
  // The ring is the attention's decomposition: the step, differentiated
  // before it is partitioned, runs the attention's backward, which reads q,
  // k and v (the blocks here), not what each ring step would keep.
  Decomposition decomposition(b);
  UnitAttr causal = op.getCausal() ? b.getUnitAttr() : UnitAttr();
  Value slopes = slopesFor(state, loc, op.getAlibiSlopes(), qWant);
  // Positions of this rank's queries, and of the K/V block it holds (which
  // a causal mask and ALiBi's distances read).
  Value qPos = ringPositions(state, loc, seq);
  Value kPos = qPos;
  bool passMask = maskForm == RingMaskForm::Passed;
  bool byPosition = causal || slopes;
  bool passPositions = byPosition || maskForm == RingMaskForm::Gathered;
  // The steps the window needs (all of them without one).
  SmallVector<int64_t> steps =
      ringSteps(state, seq, bool(causal), windowOrZero(op.getWindow()));
  const int64_t n = int64_t(steps.size());
  // What each step's block leaves visible to the most loaded rank.
  auto visibleAttr = [&](int64_t k) -> IntegerAttr {
    if (!causal)
      return {};
    return b.getI64IntegerAttr(
        ringStepPairs(state, seq, windowOrZero(op.getWindow()), k));
  };
  int64_t shift = 1;
  auto pass = [&](Value x) { return ringPass(state, x, shift); };
  Type f32 = b.getF32Type();
  auto outType = RankedTensorType::get({batch, heads, seq, valueDim}, element);
  auto accType = RankedTensorType::get({batch, heads, seq, valueDim}, f32);
  auto lseType = RankedTensorType::get({batch, heads, seq, 1}, f32);
  FloatAttr scale = op.getScaleAttr();
  auto castTo = [&](Value x, RankedTensorType type) -> Value {
    return x.getType() == type ? x
                               : CastOp::create(b, loc, type, x).getResult();
  };
  Value acc, lse;
  for (int64_t step = 0; step < n; ++step) {
    // The block for the next step leaves before this one is computed.
    Value kNext, vNext, kPosNext, maskNext;
    if (step + 1 < n) {
      shift = steps[step + 1] - steps[step];
      kNext = pass(k);
      vNext = pass(v);
      if (passPositions)
        kPosNext = pass(kPos);
      if (passMask)
        maskNext = pass(mask);
    }
    auto block = AttentionBlockOp::create(
        b, loc, TypeRange{outType, lseType}, q, k, v,
        blockMask(b, loc, mask, maskForm, kPos), slopes,
        byPosition ? qPos : Value(), byPosition ? kPos : Value(), scale, causal,
        op.getSoftcapAttr(), op.getWindowAttr(), visibleAttr(steps[step]));
    Value blockOut = castTo(block.getResult(), accType);
    if (step == 0) {
      acc = blockOut;
      lse = block.getLse();
    } else {
      // lse = max + log(exp(lse_a - max) + exp(lse_b - max));
      // acc = acc · exp(lse_a - lse) + out_b · exp(lse_b - lse).
      // (One op per statement: the IR's order does not depend on the order
      // in which a compiler evaluates arguments.)
      Value blockLse = block.getLse();
      auto expOfDifference = [&](Value x, Value y) -> Value {
        Value difference = SubOp::create(b, loc, lseType, x, y);
        return ExpOp::create(b, loc, lseType, difference);
      };
      Value top = MaximumOp::create(b, loc, lseType, lse, blockLse);
      Value old = expOfDifference(lse, top);
      Value fresh = expOfDifference(blockLse, top);
      Value sum = AddOp::create(b, loc, lseType, old, fresh);
      Value logSum = LogOp::create(b, loc, lseType, sum);
      Value merged = AddOp::create(b, loc, lseType, top, logSum);
      Value keep = expOfDifference(lse, merged);
      Value take = expOfDifference(blockLse, merged);
      Value kept = MulOp::create(b, loc, accType, acc, keep);
      Value taken = MulOp::create(b, loc, accType, blockOut, take);
      acc = AddOp::create(b, loc, accType, kept, taken);
      lse = merged;
    }
    if (step + 1 < n) {
      k = kNext;
      v = vNext;
      if (passPositions)
        kPos = kPosNext;
      if (passMask)
        mask = maskNext;
    }
  }
  Value result = castTo(acc, outType);
  TensorSharding s = qWant;
  s.dims[3].clear();
  state.setResult(op.getResult(), result, s);
  // The backward ring (weft.attention_grad of the same q, k and v) reads
  // the output and the rows' log-sum-exps, as FlashAttention's backward
  // does.
  state.ringStatistics[{op.getQ(), op.getK(), op.getV()}] = {result, s, lse, s};
  return success();
}

/// Attention whose sequence is split over `cp` ranks that all-gather K and
/// V (Megatron's --cp-comm-type all_gather; Llama 3, Dubey et al. 2024
/// s3.3.2): each rank keeps its queries and attends to every key at once
/// (weft.attention_block, whose causal mask reads the queries' positions in
/// the load-balanced layout and the keys'). The gathers are exposed; what
/// the backward reads is the rank's K and V blocks, which it gathers again,
/// and the output and log-sum-exps.
static LogicalResult partitionGatheredAttention(AttentionOp op,
                                                PartitionState &state) {
  Location loc = op.getLoc();
  OpBuilder &b = state.builder();
  TensorSharding qWant = contextParallelQueries(state.target(op.getResult()));
  Value q = state.operand(loc, op.getQ(), qWant);
  Value k = state.operand(loc, op.getK(), qWant);
  Value v = state.operand(loc, op.getV(), qWant);
  RingMaskForm maskForm;
  Value mask = ringMask(loc, op.getMask(), qWant, state, maskForm,
                        /*keysGathered=*/true);
  auto qType = cast<RankedTensorType>(q.getType());
  auto vType = cast<RankedTensorType>(v.getType());
  Decomposition decomposition(b);
  Value kAll = gatherSequence(state, loc, k, qWant);
  Value vAll = gatherSequence(state, loc, v, qWant);
  bool causal = op.getCausal();
  Value slopes = slopesFor(state, loc, op.getAlibiSlopes(), qWant);
  Value qPos, kPos;
  if (causal || slopes) {
    qPos = ringPositions(state, loc, qType.getDimSize(2));
    kPos = allPositions(state, loc,
                        cast<RankedTensorType>(kAll.getType()).getDimSize(2));
  }
  auto outType =
      RankedTensorType::get({qType.getDimSize(0), qType.getDimSize(1),
                             qType.getDimSize(2), vType.getDimSize(3)},
                            qType.getElementType());
  auto lseType = RankedTensorType::get(
      {qType.getDimSize(0), qType.getDimSize(1), qType.getDimSize(2), 1},
      b.getF32Type());
  auto attention = AttentionBlockOp::create(
      b, loc, TypeRange{outType, lseType}, q, kAll, vAll, mask, slopes, qPos,
      kPos, op.getScaleAttr(), causal ? b.getUnitAttr() : UnitAttr(),
      op.getSoftcapAttr(), op.getWindowAttr(), IntegerAttr());
  TensorSharding s = qWant;
  s.dims[3].clear();
  state.setResult(op.getResult(), attention.getResult(), s);
  state.ringStatistics[{op.getQ(), op.getK(), op.getV()}] = {
      attention.getResult(), s, attention.getLse(), s};
  return success();
}

LogicalResult AttentionOp::partition(PartitionState &state) {
  if ((*this)->hasAttr(WeftDialect::getContextParallelAttrName()) &&
      state.mesh().size("cp") > 1)
    return gathersKeys(*this) ? partitionGatheredAttention(*this, state)
                              : partitionRingAttention(*this, state);
  return success(succeeded(partitionByFactorRule(*this, state)));
}

/// `s` (a [batch, heads, seq, dim] layout whose sequence is split over
/// ulysses) with that split moved to the heads, as DeepSpeed-Ulysses'
/// all-to-all moves it; nullopt for any other layout.
static std::optional<TensorSharding>
ulyssesOnHeads(TensorSharding s) {
  if (s.dims.size() != 4 || !llvm::is_contained(s.dims[2], "ulysses") ||
      llvm::is_contained(s.dims[1], "ulysses") || !s.partial.empty())
    return std::nullopt;
  llvm::erase(s.dims[2], "ulysses");
  s.dims[1].push_back("ulysses");
  return s;
}

/// The backward of ring attention (the gradient of an attention the ring's
/// forward partitioned, whose output and log-sum-exps it kept): each rank
/// keeps its queries, their output's gradient and statistics, and the K/V
/// blocks travel the ring as in the forward, each with the running sums of
/// its gradients. At each of the `cp` steps a rank adds the block it holds
/// to its queries' gradient (f32) and the block's gradients to the sums
/// that arrived with it, then passes the sums on; after the last step each
/// block's sums go home. A block and its sums leave before the step that
/// does not need them is computed, so sends overlap steps. Each rank sends
/// c - 1 K/V blocks and c gradient blocks, of K's and V's element type (as
/// Megatron's context parallelism does); none of it is gathered. Returns
/// false, building nothing, where the forward's statistics are not known
/// (the generic rule then gathers K and V and reduce-scatters their
/// gradients).
static FailureOr<bool> partitionRingAttentionGrad(AttentionGradOp op,
                                                  PartitionState &state) {
  auto found = state.ringStatistics.find({op.getQ(), op.getK(), op.getV()});
  if (found == state.ringStatistics.end() || op.getOut())
    return false;
  PartitionState::RingStatistics statistics = found->second;
  Location loc = op.getLoc();
  OpBuilder &b = state.builder();
  SmallVector<std::string, 2> ring = {"cp"};
  int64_t c = state.mesh().size("cp");
  // Under Ulysses with the ring (the hybrid), the forward all-to-alls q, k
  // and v from a sequence split over ulysses to the heads; the backward
  // does the same, so that each rank runs its heads' backward, as the
  // forward ran their attention, instead of gathering the sequence and
  // running every head's.
  TensorSharding target = state.target(op.getQGrad());
  if (state.mesh().size("ulysses") > 1)
    target = ulyssesOnHeads(target).value_or(target);
  TensorSharding qWant = contextParallelQueries(target);
  TensorSharding lseWant = qWant;
  TensorSharding kvWant = qWant;
  Value q = state.operand(loc, op.getQ(), qWant);
  Value k = state.operand(loc, op.getK(), kvWant);
  Value v = state.operand(loc, op.getV(), kvWant);
  Value dout = state.operand(loc, op.getResultGrad(), qWant);
  auto qType = cast<RankedTensorType>(q.getType());
  bool causal = op.getCausal();
  Value out = statistics.out;
  if (!(statistics.outSharding == qWant))
    out = state.reshard(loc, out, statistics.outSharding, qWant);
  if (out.getType() != dout.getType())
    out = CastOp::create(b, loc, dout.getType(), out);
  Value lse = statistics.lse;
  if (!(statistics.lseSharding == lseWant))
    lse = state.reshard(loc, lse, statistics.lseSharding, lseWant);
  RingMaskForm maskForm;
  const bool gathered = gathersKeys(op);
  Value mask = ringMask(loc, op.getMask(), qWant, state, maskForm, gathered);
  Value slopes = slopesFor(state, loc, op.getAlibiSlopes(), qWant);
  bool byPosition = causal || slopes;
  bool passPositions = byPosition || maskForm == RingMaskForm::Gathered;
  // The queries' positions: this rank's own, or the op's as the ring splits
  // them where they are not the plain 0, 1, ... that -weft-apply-plan gives
  // for the generic rule. (Under the hybrid those are split over the
  // sequence's ulysses axis too, and taking them would gather it.)
  Value qPos;
  if (passPositions && op.getQPositions() &&
      !op.getQPositions().getDefiningOp<IotaOp>()) {
    TensorSharding positionsWant = TensorSharding::replicated(1);
    positionsWant.dims[0] = ring;
    qPos = state.operand(loc, op.getQPositions(), positionsWant);
  } else if (passPositions) {
    qPos = ringPositions(state, loc, qType.getDimSize(2));
  }
  if (gathered) {
    // K and V gathered again; the gradients of every key are this rank's
    // queries' parts, summed over the ranks as the consumers want them
    // (reduce-scattered back to the blocks).
    Value kAll = gatherSequence(state, loc, k, kvWant);
    Value vAll = gatherSequence(state, loc, v, kvWant);
    Value kPos;
    if (byPosition)
      kPos = allPositions(state, loc,
                          cast<RankedTensorType>(kAll.getType()).getDimSize(2));
    auto grad = AttentionGradOp::create(
        b, loc, q, kAll, vAll, dout, mask, slopes, byPosition ? qPos : Value(),
        kPos, out, lse, op.getScaleAttr(), op.getCausalAttr(),
        op.getDropoutAttr(), op.getSoftcapAttr(), op.getWindowAttr(),
        IntegerAttr());
    TensorSharding sums = kvWant;
    sums.dims[2].clear();
    sums.partial.push_back("cp");
    state.setResult(op.getQGrad(), grad.getQGrad(), qWant);
    state.setResult(op.getKGrad(), grad.getKGrad(), sums);
    state.setResult(op.getVGrad(), grad.getVGrad(), sums);
    return true;
  }
  Value kPos = qPos;
  bool passMask = maskForm == RingMaskForm::Passed;
  // The steps the window needs, as the forward ring takes them; positions
  // other than the layout's (under the hybrid) take every step.
  const bool layoutPositions =
      !op.getQPositions() || op.getQPositions().getDefiningOp<IotaOp>();
  SmallVector<int64_t> steps =
      ringSteps(state, qType.getDimSize(2), causal && layoutPositions,
                windowOrZero(op.getWindow()));
  const int64_t n = int64_t(steps.size());
  auto visibleAttr = [&](int64_t k) -> IntegerAttr {
    if (!causal || !layoutPositions)
      return {};
    return b.getI64IntegerAttr(ringStepPairs(state, qType.getDimSize(2),
                                             windowOrZero(op.getWindow()), k));
  };
  int64_t shift = 1;
  auto pass = [&](Value x) { return ringPass(state, x, shift); };
  auto f32Type = RankedTensorType::get(qType.getShape(), b.getF32Type());
  auto widened = [&](Value x) -> Value {
    return x.getType() == f32Type
               ? x
               : CastOp::create(b, loc, f32Type, x).getResult();
  };
  Value dq, dk, dv;
  for (int64_t step = 0; step < n; ++step) {
    Value kNext, vNext, kPosNext, maskNext, dkIn, dvIn;
    if (step + 1 < n) {
      shift = steps[step + 1] - steps[step];
      kNext = pass(k);
      vNext = pass(v);
      if (passPositions)
        kPosNext = pass(kPos);
      if (passMask)
        maskNext = pass(mask);
    }
    // The sums of the block this rank now holds, from the rank that held it.
    if (step > 0) {
      shift = steps[step] - steps[step - 1];
      dkIn = pass(dk);
      dvIn = pass(dv);
    }
    auto grad = AttentionGradOp::create(
        b, loc, q, k, v, dout, blockMask(b, loc, mask, maskForm, kPos), slopes,
        byPosition ? qPos : Value(), byPosition ? kPos : Value(), out, lse,
        op.getScaleAttr(), op.getCausalAttr(), op.getDropoutAttr(),
        op.getSoftcapAttr(), op.getWindowAttr(), visibleAttr(steps[step]));
    Value blockDq = widened(grad.getQGrad());
    dq = step == 0 ? blockDq
                   : AddOp::create(b, loc, f32Type, dq, blockDq).getResult();
    dk = step == 0
             ? grad.getKGrad()
             : AddOp::create(b, loc, dkIn.getType(), dkIn, grad.getKGrad())
                   .getResult();
    dv = step == 0
             ? grad.getVGrad()
             : AddOp::create(b, loc, dvIn.getType(), dvIn, grad.getVGrad())
                   .getResult();
    if (step + 1 < n) {
      k = kNext;
      v = vNext;
      if (passPositions)
        kPos = kPosNext;
      if (passMask)
        mask = maskNext;
    }
  }
  // Each block's sums, complete, go back to the rank that holds the block
  // (the block came steps.back() places along the ring).
  shift = c - steps.back();
  if (shift < c) {
    dk = pass(dk);
    dv = pass(dv);
  }
  if (dq.getType() != qType)
    dq = CastOp::create(b, loc, qType, dq);
  state.setResult(op.getQGrad(), dq, qWant);
  state.setResult(op.getKGrad(), dk, kvWant);
  state.setResult(op.getVGrad(), dv, kvWant);
  return true;
}

/// DeepSpeed-Ulysses' backward (Jacobs et al. 2023), the forward's mirror:
/// where the gradients are wanted with the sequence split over `ulysses`
/// (as q, k and v are before the forward's all-to-all), each rank takes q,
/// k, v and the output's gradient by all-to-all with the heads split
/// instead and the whole sequence, runs the backward of its heads, and
/// hands the gradients on split so (their readers all-to-all them back).
/// Returns false, building nothing, where the sequence is not split over
/// ulysses or a mask has a heads dimension to split; the generic rule then
/// gathers the sequence and runs every head's backward on each rank.
static FailureOr<bool> partitionUlyssesAttentionGrad(AttentionGradOp op,
                                                     PartitionState &state) {
  if (state.mesh().size("ulysses") <= 1 || op.getOut() || op.getQPositions())
    return false;
  auto headsSplit = [&](Value result) {
    return ulyssesOnHeads(state.target(result));
  };
  std::optional<TensorSharding> qWant = headsSplit(op.getQGrad()),
                                kWant = headsSplit(op.getKGrad()),
                                vWant = headsSplit(op.getVGrad());
  if (!qWant || !kWant || !vWant)
    return false;
  // A mask is whole over the sequences and follows the batch's split (it
  // broadcasts over the heads).
  Value mask = op.getMask();
  if (mask) {
    auto maskType = cast<RankedTensorType>(mask.getType());
    if (maskType.getRank() == 4 && maskType.getDimSize(1) != 1)
      return false;
    TensorSharding maskWant = TensorSharding::replicated(maskType.getRank());
    if (maskType.getRank() == 4 && maskType.getDimSize(0) != 1)
      maskWant.dims[0] = qWant->dims[0];
    mask = state.operand(op.getLoc(), mask, maskWant);
  }
  Location loc = op.getLoc();
  Value q = state.operand(loc, op.getQ(), *qWant);
  Value k = state.operand(loc, op.getK(), *kWant);
  Value v = state.operand(loc, op.getV(), *vWant);
  Value dout = state.operand(loc, op.getResultGrad(), *qWant);
  Value slopes = slopesFor(state, loc, op.getAlibiSlopes(), *qWant);
  auto grad = AttentionGradOp::create(
      state.builder(), loc, q, k, v, dout, mask, slopes, Value(), Value(),
      Value(), Value(), op.getScaleAttr(), op.getCausalAttr(),
      op.getDropoutAttr(), op.getSoftcapAttr(), op.getWindowAttr(),
      IntegerAttr());
  state.setResult(op.getQGrad(), grad.getQGrad(), *qWant);
  state.setResult(op.getKGrad(), grad.getKGrad(), *kWant);
  state.setResult(op.getVGrad(), grad.getVGrad(), *vWant);
  return true;
}

LogicalResult AttentionGradOp::partition(PartitionState &state) {
  FailureOr<bool> built = false;
  if ((*this)->hasAttr(WeftDialect::getContextParallelAttrName()) &&
      state.mesh().size("cp") > 1)
    built = partitionRingAttentionGrad(*this, state);
  else
    built = partitionUlyssesAttentionGrad(*this, state);
  if (failed(built))
    return failure();
  if (*built)
    return success();
  return success(succeeded(partitionByFactorRule(*this, state)));
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

/// Cross-entropy on logits whose classes are split: the log-sum-exp and the
/// label's logit are each one all-reduce over the class axes (Megatron's
/// vocabulary-parallel cross-entropy); no rank holds all logits.
static LogicalResult
partitionVocabCrossEntropy(CrossEntropyOp op,
                           const TensorSharding &logitsSharding,
                           PartitionState &state) {
  Location loc = op.getLoc();
  OpBuilder &b = state.builder();
  auto logitsType = cast<RankedTensorType>(op.getLogits().getType());
  int64_t rank = logitsType.getRank();
  SmallVector<std::string, 2> classAxes(logitsSharding.dims.back());
  // Positions as the logits have them (minus pending sums), classes split.
  TensorSharding logitsWant = logitsSharding;
  logitsWant.partial.clear();
  TensorSharding labelsWant = TensorSharding::replicated(rank - 1);
  for (int64_t d = 0; d + 1 < rank; ++d)
    labelsWant.dims[d] = logitsWant.dims[d];
  Value logits = state.operand(loc, op.getLogits(), logitsWant);
  Value labels = state.operand(loc, op.getLabels(), labelsWant);
  Decomposition decomposition(b);
  auto localType = cast<RankedTensorType>(logits.getType());
  auto labelType = cast<RankedTensorType>(labels.getType());
  Type element = localType.getElementType();
  Type idType = labelType.getElementType();
  int64_t classes = localType.getShape().back();
  auto group = state.axesAttr(classAxes);
  auto sum = ReductionKindAttr::get(b.getContext(), ReductionKind::sum);
  // The loss's statistics (per-token maxima, sums, target logits, totals)
  // are few and decide the loss: pinned uncompressed, whatever the plan's
  // compression policy.
  auto exact = CollectiveCodecAttr::get(b.getContext(), CollectiveCodec::none);
  // log-sum-exp over all shards: one pass over this rank's block.
  bool split = !classAxes.empty();
  Value lse = splitLogSumExp(state, loc, logits, {rank - 1}, classAxes);
  // The label's logit, from the shard that holds it: one element per row,
  // taken from the block flattened (row * classes + label).
  Value shifted = labels;
  if (split) {
    SmallVector<int64_t> offsets;
    int64_t parts = state.mesh().product(classAxes);
    for (int64_t i = 0; i < parts; ++i)
      offsets.push_back(i * classes);
    Value offset = state.perRank(loc, offsets, classAxes, idType);
    shifted = SubOp::create(b, loc, labelType, labels, offset);
  }
  auto boolType = RankedTensorType::get(labelType.getShape(), b.getI1Type());
  Value zero = state.constant(loc, idType, 0);
  Value inShard = WhereOp::create(
      b, loc, boolType,
      CompareOp::create(
          b, loc, boolType,
          ComparePredicateAttr::get(b.getContext(), ComparePredicate::ge),
          shifted, zero),
      CompareOp::create(
          b, loc, boolType,
          ComparePredicateAttr::get(b.getContext(), ComparePredicate::lt),
          shifted, state.constant(loc, idType, classes)),
      state.constant(loc, b.getI1Type(), 0));
  // In i64 whatever the labels' type: a rank's block can hold more than
  // 2^31 elements (4 x 8,192 tokens of Llama 3's 128,256 classes at tp=1:
  // 4.2e9).
  const int64_t positions = labelType.getNumElements();
  auto flatIds = RankedTensorType::get({positions}, b.getI64Type());
  Value column = WhereOp::create(b, loc, labelType, inShard, shifted, zero);
  if (idType != b.getI64Type())
    column = CastOp::create(b, loc, labelType.clone(b.getI64Type()), column);
  column = ReshapeOp::create(b, loc, flatIds, column);
  Value flatIndex = AddOp::create(
      b, loc, flatIds,
      MulOp::create(b, loc, flatIds,
                    IotaOp::create(b, loc, flatIds, b.getI64IntegerAttr(0)),
                    state.constant(loc, b.getI64Type(), double(classes))),
      column);
  Value block = ReshapeOp::create(
      b, loc, RankedTensorType::get({positions * classes}, element), logits);
  auto lossType = RankedTensorType::get(labelType.getShape(), element);
  Value picked = ReshapeOp::create(
      b, loc, lossType,
      GatherOp::create(b, loc, RankedTensorType::get({positions}, element),
                       block, flatIndex, b.getI64IntegerAttr(0)));
  picked = WhereOp::create(b, loc, lossType, inShard, picked,
                           state.constant(loc, element, 0));
  Value target = split ? AllReduceOp::create(b, loc, lossType, sum, picked,
                                             state.meshRef(), group, exact,
                                             DenseI64ArrayAttr())
                             .getResult()
                       : picked;
  Value loss = SubOp::create(b, loc, lossType,
                             ReshapeOp::create(b, loc, lossType, lse), target);
  // Ignored positions count nothing.
  Value counted;
  if (std::optional<uint64_t> ignore = op.getIgnoreIndex()) {
    Value keep = CompareOp::create(
        b, loc, boolType,
        ComparePredicateAttr::get(b.getContext(), ComparePredicate::ne), labels,
        state.constant(loc, idType, double(int64_t(*ignore))));
    loss = WhereOp::create(b, loc, lossType, keep, loss,
                           state.constant(loc, element, 0));
    counted =
        WhereOp::create(b, loc, lossType, keep, state.constant(loc, element, 1),
                        state.constant(loc, element, 0));
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
      total = AllReduceOp::create(b, loc, scalar, sum, total, state.meshRef(),
                                  state.axesAttr(positionAxes), exact,
                                  DenseI64ArrayAttr());
    if (op.getReduction() == LossReduction::mean) {
      Value count;
      if (counted) {
        count = ReduceSumOp::create(b, loc, scalar, counted,
                                    b.getDenseI64ArrayAttr(all), UnitAttr());
        if (!positionAxes.empty())
          count = AllReduceOp::create(
              b, loc, scalar, sum, count, state.meshRef(),
              state.axesAttr(positionAxes), exact, DenseI64ArrayAttr());
      } else {
        int64_t n = 1;
        for (int64_t d = 0; d + 1 < rank; ++d)
          n *= logitsType.getDimSize(d);
        count = state.constant(loc, element, double(n));
      }
      total = DivOp::create(b, loc, scalar, total, count);
    }
    loss = total;
    result = TensorSharding::replicated(0);
  }
  state.setResult(op.getResult(), loss, result);
  return success();
}

LogicalResult CrossEntropyOp::partition(PartitionState &state) {
  const TensorSharding &logits = state.actual(getLogits());
  if (!logits.dims.back().empty() || getReduction() != LossReduction::none)
    return partitionVocabCrossEntropy(*this, logits, state);
  return success(succeeded(partitionByFactorRule(*this, state)));
}

//===- WeftShardingRules.cpp - Factor rules of the weft ops ---------------===//
//
// Part of the Weft project.
//
// ShardingRuleOpInterface for every compute op whose rule is not next to its
// cost in WeftInterfaces.cpp. A factor is one axis of an op's iteration space;
// a factor the op needs whole (a softmax axis, a gathered dimension, a
// position-dependent one) is blocked, so propagation never splits it and the
// partitioner gathers it first.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftInterfaces.h"
#include "weft/Dialect/WeftOps.h"

using namespace mlir;
using namespace weft;

static ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// Result-only rule: one factor per result dimension, blocked if asked.
static ShardingRule sourceRule(Operation *op, bool blockAll) {
  ShardingRule rule;
  SmallVector<int64_t> factors = addFactors(rule, shapeOf(op->getResult(0)));
  if (blockAll)
    for (int64_t factor : factors)
      rule.block(factor);
  rule.results.push_back(toTensorFactors(factors));
  return rule;
}

// Weights: the partitioner keeps each rank's shard.
ShardingRule ParameterOp::getShardingRule() { return sourceRule(*this, false); }
// Values written in the IR: built whole, then sliced.
ShardingRule ConstantOp::getShardingRule() { return sourceRule(*this, true); }
// Positions: each rank counts its own block (IotaOp::partition).
ShardingRule IotaOp::getShardingRule() { return sourceRule(*this, false); }

ShardingRule CompareOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}
ShardingRule WhereOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}
ShardingRule CastOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}
// A float converted to a type that holds every value of its own is the
// same number: the sum of the converted parts is the converted sum, taken
// in the wider type.
bool CastOp::isAdditive() {
  auto from = dyn_cast<FloatType>(getElementTypeOrSelf(getInput().getType()));
  auto to = dyn_cast<FloatType>(getElementTypeOrSelf(getResult().getType()));
  return from && to &&
         llvm::APFloatBase::isRepresentableBy(from.getFloatSemantics(),
                                              to.getFloatSemantics());
}
ShardingRule DropoutOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}
// Which elements are kept depends on the row and column index.
ShardingRule TriluOp::getShardingRule() {
  ShardingRule rule = getElementwiseShardingRule(*this);
  size_t rank = rule.results[0].size();
  for (size_t dim = rank - 2; dim < rank; ++dim)
    for (int64_t factor : rule.results[0][dim])
      rule.block(factor);
  return rule;
}

/// Reductions: reduced dimensions are reduction factors. Only a sum of
/// partial sums is the sum, so max and mean need the reduced dimension whole.
static ShardingRule reductionRule(Operation *op, ArrayRef<int64_t> axes,
                                  bool keepDims, bool splittable) {
  ShardingRule rule;
  SmallVector<int64_t> factors = addFactors(rule, shapeOf(op->getOperand(0)));
  rule.operands.push_back(toTensorFactors(factors));
  ShardingRule::TensorFactors result;
  for (auto [dim, factor] : llvm::enumerate(factors)) {
    bool reduced = llvm::is_contained(axes, int64_t(dim));
    if (reduced && !splittable)
      rule.block(factor);
    if (!reduced)
      result.push_back({factor});
    else if (keepDims)
      result.push_back({});
  }
  rule.results.push_back(result);
  return rule;
}
ShardingRule ReduceSumOp::getShardingRule() {
  return reductionRule(*this, getAxes(), getKeepDims(), true);
}
ShardingRule ReduceMeanOp::getShardingRule() {
  return reductionRule(*this, getAxes(), getKeepDims(), false);
}
ShardingRule ReduceMaxOp::getShardingRule() {
  return reductionRule(*this, getAxes(), getKeepDims(), false);
}
ShardingRule ReduceLogSumExpOp::getShardingRule() {
  return reductionRule(*this, getAxes(), getKeepDims(), false);
}

/// Softmax-like: every dimension passes through, the axis is needed whole
/// (and with a causal mask, the rows too: which entries are masked depends on
/// the row's position).
static ShardingRule alongAxisRule(Operation *op, int64_t axis, bool causal) {
  ShardingRule rule;
  SmallVector<int64_t> factors = addFactors(rule, shapeOf(op->getOperand(0)));
  rule.block(factors[axis]);
  if (causal && factors.size() >= 2)
    rule.block(factors[factors.size() - 2]);
  rule.operands.push_back(toTensorFactors(factors));
  rule.results.push_back(toTensorFactors(factors));
  return rule;
}
ShardingRule SoftmaxOp::getShardingRule() {
  return alongAxisRule(*this, getAxis(), getCausal());
}
ShardingRule LogSoftmaxOp::getShardingRule() {
  return alongAxisRule(*this, getAxis(), getCausal());
}

// A running sum needs its axis whole.
ShardingRule CumSumOp::getShardingRule() {
  return alongAxisRule(*this, getAxis(), false);
}

/// Normalizations: the normalized dimensions (axis..rank) are needed whole;
/// scale and bias span them.
static ShardingRule normRule(Operation *op, int64_t axis) {
  ShardingRule rule;
  SmallVector<int64_t> factors = addFactors(rule, shapeOf(op->getOperand(0)));
  for (size_t dim = axis; dim < factors.size(); ++dim)
    rule.block(factors[dim]);
  rule.operands.push_back(toTensorFactors(factors));
  for (unsigned i = 1; i < op->getNumOperands(); ++i)
    rule.operands.push_back(
        toTensorFactors(ArrayRef<int64_t>(factors).drop_front(axis)));
  rule.results.push_back(toTensorFactors(factors));
  return rule;
}
ShardingRule LayerNormOp::getShardingRule() {
  return normRule(*this, getAxis());
}
ShardingRule RMSNormOp::getShardingRule() { return normRule(*this, getAxis()); }

/// Attention over [batch, heads, seq, head_dim]: query heads are KV heads
/// (major) times the group (minor), so splitting KV heads splits both. The
/// key sequence and the head dimension of Q and K are contracted inside the
/// softmax: blocked (the partitioner lowers a split key sequence to ring
/// attention). A causal (or ALiBi) query sequence is position-dependent:
/// blocked, unless the queries' positions are operands (attention_block), which
/// split with them.
///
/// The gradient (`resultGrad`, weft.attention_grad) reads the output's
/// gradient like the output and yields Q's, K's and V's gradients like them;
/// the value dimension is contracted too (dP = dO Vᵀ), and K's and V's
/// gradients sum over the queries and a KV head's group, which Q's keeps.
/// ALiBi's slopes are the query heads'.
static ShardingRule attentionRule(Value qValue, Value kValue, Value vValue,
                                  Value maskValue, Value alibiSlopes,
                                  Value qPositions, Value kPositions,
                                  bool causal, bool withLse,
                                  Value resultGrad = Value(),
                                  Value savedOut = Value()) {
  ShardingRule rule;
  ArrayRef<int64_t> q = shapeOf(qValue), k = shapeOf(kValue),
                    v = shapeOf(vValue);
  int64_t batch = rule.addFactor(q[0]);
  int64_t kvHeads = rule.addFactor(k[1]);
  int64_t group = q[1] != k[1] ? rule.addFactor(q[1] / k[1]) : -1;
  int64_t seq = rule.addFactor(q[2]);
  int64_t kvSeq = rule.addFactor(k[2]);
  int64_t headDim = rule.addFactor(q[3]);
  int64_t valueDim = rule.addFactor(v[3]);
  rule.block(kvSeq);
  rule.block(headDim);
  if ((causal || alibiSlopes) && !qPositions)
    rule.block(seq);
  ShardingRule::DimFactors queryHeads = {kvHeads};
  if (q[1] != k[1])
    queryHeads.push_back(group);
  rule.operands.push_back({{batch}, queryHeads, {seq}, {headDim}});
  rule.operands.push_back({{batch}, {kvHeads}, {kvSeq}, {headDim}});
  rule.operands.push_back({{batch}, {kvHeads}, {kvSeq}, {valueDim}});
  if (resultGrad) {
    rule.block(valueDim);
    rule.operands.push_back({{batch}, queryHeads, {seq}, {valueDim}});
  }
  if (Value mask = maskValue) {
    SmallVector<ShardingRule::DimFactors> space = {
        {batch}, queryHeads, {seq}, {kvSeq}};
    SmallVector<int64_t> spaceShape = {q[0], q[1], q[2], k[2]};
    ArrayRef<int64_t> shape = shapeOf(mask);
    ShardingRule::TensorFactors tensor;
    size_t offset = spaceShape.size() - shape.size();
    for (auto [dim, size] : llvm::enumerate(shape))
      tensor.push_back(size == spaceShape[offset + dim] && size != 1
                           ? space[offset + dim]
                           : ShardingRule::DimFactors{});
    rule.operands.push_back(tensor);
  }
  // ALiBi's slopes, one per query head: split with them.
  if (alibiSlopes)
    rule.operands.push_back({queryHeads});
  if (qPositions) {
    rule.operands.push_back({{seq}});
    rule.operands.push_back({{kvSeq}});
  }
  if (savedOut) {
    // The forward's output and log-sum-exp, row by row as the queries.
    rule.operands.push_back({{batch}, queryHeads, {seq}, {valueDim}});
    rule.operands.push_back({{batch}, queryHeads, {seq}, {}});
  }
  if (resultGrad) {
    rule.results.push_back({{batch}, queryHeads, {seq}, {headDim}});
    rule.results.push_back({{batch}, {kvHeads}, {kvSeq}, {headDim}});
    rule.results.push_back({{batch}, {kvHeads}, {kvSeq}, {valueDim}});
    SmallVector<int64_t, 2> queries = {seq};
    if (q[1] != k[1])
      queries.push_back(group);
    rule.resultSums = {{}, queries, queries};
    return rule;
  }
  rule.results.push_back({{batch}, queryHeads, {seq}, {valueDim}});
  if (withLse)
    rule.results.push_back({{batch}, queryHeads, {seq}, {}});
  return rule;
}

ShardingRule AttentionOp::getShardingRule() {
  return attentionRule(getQ(), getK(), getV(), getMask(), getAlibiSlopes(),
                       Value(), Value(), getCausal(), /*withLse=*/false);
}

ShardingRule AttentionBlockOp::getShardingRule() {
  return attentionRule(getQ(), getK(), getV(), getMask(), getAlibiSlopes(),
                       getQPositions(), getKPositions(), getCausal(),
                       /*withLse=*/true);
}

ShardingRule AttentionGradOp::getShardingRule() {
  return attentionRule(getQ(), getK(), getV(), getMask(), getAlibiSlopes(),
                       getQPositions(), getKPositions(), getCausal(),
                       /*withLse=*/false, getResultGrad(), getOut());
}

/// Embedding: the vocabulary is gathered from (blocked here; the partitioner
/// lowers a vocabulary-split table to a masked local lookup and a sum).
ShardingRule EmbeddingOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> table = shapeOf(getTable());
  int64_t vocab = rule.addFactor(table[0]);
  int64_t hidden = rule.addFactor(table[1]);
  rule.block(vocab);
  SmallVector<int64_t> rows = addFactors(rule, shapeOf(getIndices()));
  rule.operands.push_back({{vocab}, {hidden}});
  rule.operands.push_back(toTensorFactors(rows));
  SmallVector<int64_t> result(rows);
  result.push_back(hidden);
  rule.results.push_back(toTensorFactors(result));
  return rule;
}

ShardingRule GatherOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> input = shapeOf(getInput());
  int64_t axis = getAxis();
  SmallVector<int64_t> inputFactors = addFactors(rule, input);
  rule.block(inputFactors[axis]);
  SmallVector<int64_t> indexFactors = addFactors(rule, shapeOf(getIndices()));
  rule.operands.push_back(toTensorFactors(inputFactors));
  rule.operands.push_back(toTensorFactors(indexFactors));
  SmallVector<int64_t> result(inputFactors.begin(), inputFactors.begin() + axis);
  result.append(indexFactors);
  result.append(inputFactors.begin() + axis + 1, inputFactors.end());
  rule.results.push_back(toTensorFactors(result));
  return rule;
}

/// Reshape: input and output dimensions are grouped into the smallest runs
/// with equal products. A run that splits one dimension (or merges several
/// into one) shares factors, major to minor; a run that regroups several
/// into several gets blocked factors of its own on each side.
ShardingRule ReshapeOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  ShardingRule::TensorFactors inFactors(in.size()), outFactors(out.size());
  size_t i = 0, o = 0;
  while (i < in.size() || o < out.size()) {
    // Size-1 dimensions carry nothing.
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (o < out.size() && out[o] == 1) {
      ++o;
      continue;
    }
    if (i >= in.size() || o >= out.size())
      break;
    size_t iEnd = i + 1, oEnd = o + 1;
    int64_t inProduct = in[i], outProduct = out[o];
    while (inProduct != outProduct) {
      if (inProduct < outProduct && iEnd < in.size())
        inProduct *= in[iEnd++];
      else if (oEnd < out.size())
        outProduct *= out[oEnd++];
      else
        break;
    }
    size_t inCount = iEnd - i, outCount = oEnd - o;
    if (inCount == 1) {
      for (size_t d = o; d < oEnd; ++d) {
        int64_t factor = rule.addFactor(out[d]);
        inFactors[i].push_back(factor);
        outFactors[d].push_back(factor);
      }
    } else if (outCount == 1) {
      for (size_t d = i; d < iEnd; ++d) {
        int64_t factor = rule.addFactor(in[d]);
        inFactors[d].push_back(factor);
        outFactors[o].push_back(factor);
      }
    } else {
      for (size_t d = i; d < iEnd; ++d) {
        int64_t factor = rule.addFactor(in[d]);
        rule.block(factor);
        inFactors[d].push_back(factor);
      }
      for (size_t d = o; d < oEnd; ++d) {
        int64_t factor = rule.addFactor(out[d]);
        rule.block(factor);
        outFactors[d].push_back(factor);
      }
    }
    i = iEnd;
    o = oEnd;
  }
  rule.operands.push_back(inFactors);
  rule.results.push_back(outFactors);
  return rule;
}

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> factors = addFactors(rule, shapeOf(getInput()));
  rule.operands.push_back(toTensorFactors(factors));
  SmallVector<int64_t> result;
  for (int64_t dim : getPermutation())
    result.push_back(factors[dim]);
  rule.results.push_back(toTensorFactors(result));
  return rule;
}

// Slicing, concatenating and splitting need the dimensions they cut whole.
ShardingRule SliceOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  SmallVector<int64_t> factors = addFactors(rule, in);
  for (size_t dim = 0; dim < in.size(); ++dim)
    if (in[dim] != out[dim])
      rule.block(factors[dim]);
  rule.operands.push_back(toTensorFactors(factors));
  rule.results.push_back(toTensorFactors(factors));
  return rule;
}

ShardingRule ConcatOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> out = shapeOf(getResult());
  SmallVector<int64_t> factors = addFactors(rule, out);
  int64_t axis = getAxis();
  rule.block(factors[axis]);
  for (Value input : getInputs()) {
    ShardingRule::TensorFactors tensor = toTensorFactors(factors);
    // Each input has its own extent along the axis.
    int64_t own = rule.addFactor(shapeOf(input)[axis]);
    rule.block(own);
    tensor[axis] = {own};
    rule.operands.push_back(tensor);
  }
  rule.results.push_back(toTensorFactors(factors));
  return rule;
}

ShardingRule SplitOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput());
  SmallVector<int64_t> factors = addFactors(rule, in);
  int64_t axis = getAxis();
  rule.block(factors[axis]);
  rule.operands.push_back(toTensorFactors(factors));
  for (Value result : getResults()) {
    ShardingRule::TensorFactors tensor = toTensorFactors(factors);
    int64_t own = rule.addFactor(shapeOf(result)[axis]);
    rule.block(own);
    tensor[axis] = {own};
    rule.results.push_back(tensor);
  }
  return rule;
}

ShardingRule BroadcastToOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> out = shapeOf(getResult());
  SmallVector<int64_t> factors = addFactors(rule, out);
  addBroadcastOperand(rule, factors, out, shapeOf(getInput()));
  rule.results.push_back(toTensorFactors(factors));
  return rule;
}

/// Cross-entropy: positions are parallel (summed by a sum reduction); the
/// classes are needed whole for the log-sum-exp.
ShardingRule CrossEntropyOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  SmallVector<int64_t> factors = addFactors(rule, logits);
  rule.block(factors.back());
  rule.operands.push_back(toTensorFactors(factors));
  ArrayRef<int64_t> positions = ArrayRef<int64_t>(factors).drop_back();
  rule.operands.push_back(toTensorFactors(positions));
  switch (getReduction()) {
  case LossReduction::none:
    rule.results.push_back(toTensorFactors(positions));
    break;
  case LossReduction::sum:
    rule.results.push_back({});
    break;
  case LossReduction::mean:
    // Mean over the positions that are not ignored: a count per shard.
    for (int64_t factor : positions)
      rule.block(factor);
    rule.results.push_back({});
    break;
  }
  return rule;
}

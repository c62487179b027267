//===- WeftInterfaces.cpp - Sharding rules and costs of weft ops ----------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftInterfaces.h"
#include "weft/Dialect/WeftOps.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace weft;

int64_t weft::getTensorBytes(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  int64_t bits = tensor.getElementTypeBitWidth();
  return tensor.getNumElements() * std::max<int64_t>(1, bits / 8);
}

int64_t SavedTensor::bytes(RankedTensorType type, int form) {
  switch (form) {
  case MaskOnly:
    return type.getNumElements();
  case RowStatistics: {
    int64_t rows = type.getRank()
                       ? type.getNumElements() /
                             std::max<int64_t>(1, type.getShape().back())
                       : 1;
    return rows * 4;
  }
  default:
    return getTensorBytes(type);
  }
}

static int64_t sumBytes(TypeRange types) {
  int64_t bytes = 0;
  for (Type type : types)
    bytes += getTensorBytes(type);
  return bytes;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

StringRef weft::stringifyCollectiveKind(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  case CollectiveKind::Permute:
    return "collective_permute";
  case CollectiveKind::AllSlice:
    return "all_slice";
  case CollectiveKind::Send:
    return "send";
  case CollectiveKind::Recv:
    return "recv";
  case CollectiveKind::Broadcast:
    return "broadcast";
  }
  llvm_unreachable("unknown collective kind");
}

int64_t weft::getCollectiveGroupSize(Operation *op) {
  auto collective = cast<CollectiveOpInterface>(op);
  auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(
      op, collective.getMeshAttr());
  if (!mesh)
    return 0;
  if (!collective.getGroupMembers().empty())
    return int64_t(collective.getGroupMembers().size());
  int64_t size = 1;
  for (StringRef axis : collective.getAxes().getAsValueRange<StringAttr>()) {
    std::optional<int64_t> axisSize = mesh.getAxisSize(axis);
    if (!axisSize)
      return 0;
    size *= *axisSize;
  }
  return size;
}

int64_t weft::getCollectiveBytesSent(Operation *op, int64_t n) {
  auto collective = cast<CollectiveOpInterface>(op);
  // The operand's bytes as encoded (a recv has none; it sends nothing).
  int64_t bytes =
      op->getNumOperands()
          ? getWireBytes(op->getOperand(0).getType(), collective.getWireCodec())
          : 0;
  // A top-k all-reduce gathers every rank's kept elements.
  if (isTopK(collective.getWireCodec()))
    return n > 1 ? (n - 1) * bytes : 0;
  return collectiveBytesSent(collective.getCollectiveKind(), bytes, n);
}

bool weft::codecApplies(Operation *op, CollectiveCodec codec) {
  if (codec == CollectiveCodec::none)
    return true;
  if (op->getNumOperands() == 0 ||
      !isa<FloatType>(
          cast<RankedTensorType>(op->getOperand(0).getType()).getElementType()))
    return false;
  auto reduce = dyn_cast<AllReduceOp>(op);
  return !isTopK(codec) || (reduce && (reduce.getKind() == ReductionKind::sum ||
                                       reduce.getKind() == ReductionKind::avg));
}

CollectiveCodec weft::getCollectiveCodec(Operation *op) {
  if (auto codec = op->getAttrOfType<CollectiveCodecAttr>("codec"))
    return codec.getValue();
  return CollectiveCodec::none;
}

int64_t weft::codecWireBytes(int64_t numElements, int64_t elementBytes,
                             bool isFloat, CollectiveCodec codec) {
  if (!isFloat)
    return numElements * elementBytes;
  switch (codec) {
  case CollectiveCodec::none:
    return numElements * elementBytes;
  case CollectiveCodec::bf16:
    return numElements * std::min<int64_t>(elementBytes, 2);
  case CollectiveCodec::fp8:
  case CollectiveCodec::int8:
    return numElements + 4 * ((numElements + kCodecBlock - 1) / kCodecBlock);
  case CollectiveCodec::topk:
  case CollectiveCodec::topk_noef:
    return 8 * ((numElements + kTopKFraction - 1) / kTopKFraction);
  }
  llvm_unreachable("unknown codec");
}

int64_t weft::getWireBytes(Type type, CollectiveCodec codec) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || codec == CollectiveCodec::none)
    return getTensorBytes(type);
  int64_t width = std::max<int64_t>(1, tensor.getElementTypeBitWidth() / 8);
  return codecWireBytes(tensor.getNumElements(), width,
                        isa<FloatType>(tensor.getElementType()), codec);
}

int64_t weft::collectiveBytesSent(CollectiveKind kind, int64_t bytes,
                                  int64_t n) {
  if (n <= 1)
    return 0;
  switch (kind) {
  case CollectiveKind::AllReduce:
    return 2 * (n - 1) * bytes / n;
  case CollectiveKind::AllGather:
    return (n - 1) * bytes;
  case CollectiveKind::ReduceScatter:
  case CollectiveKind::AllToAll:
  case CollectiveKind::Broadcast:
    return (n - 1) * bytes / n;
  case CollectiveKind::Permute:
  case CollectiveKind::Send:
    return bytes;
  case CollectiveKind::AllSlice:
  case CollectiveKind::Recv:
    return 0;
  }
  llvm_unreachable("unknown collective kind");
}

//===----------------------------------------------------------------------===//
// ShardingRule
//===----------------------------------------------------------------------===//

ShardingRule::FactorKind ShardingRule::getFactorKind(int64_t factor) const {
  for (const TensorFactors &tensor : results)
    for (const DimFactors &dim : tensor)
      if (llvm::is_contained(dim, factor))
        return FactorKind::Parallel;
  return FactorKind::Reduction;
}

std::string ShardingRule::str() const {
  // Name factors i, j, k, ... in order of first use, as Shardy prints them.
  SmallVector<int64_t> order;
  auto visit = [&](ArrayRef<TensorFactors> tensors) {
    for (const TensorFactors &tensor : tensors)
      for (const DimFactors &dim : tensor)
        for (int64_t factor : dim)
          if (!llvm::is_contained(order, factor))
            order.push_back(factor);
  };
  visit(operands);
  visit(results);
  for (int64_t factor = 0; factor < getNumFactors(); ++factor)
    if (!llvm::is_contained(order, factor))
      order.push_back(factor);
  auto name = [&](int64_t factor) {
    int64_t position = llvm::find(order, factor) - order.begin();
    std::string letters;
    letters += static_cast<char>('i' + position % 18);
    if (position >= 18)
      letters += std::to_string(position / 18);
    return letters;
  };

  std::string text;
  llvm::raw_string_ostream os(text);
  auto printTensors = [&](ArrayRef<TensorFactors> tensors) {
    os << '(';
    llvm::interleaveComma(tensors, os, [&](const TensorFactors &tensor) {
      os << '[';
      llvm::interleaveComma(tensor, os, [&](const DimFactors &dim) {
        if (dim.empty())
          os << '1';
        llvm::interleave(
            dim, os, [&](int64_t factor) { os << name(factor); }, "*");
      });
      os << ']';
    });
    os << ')';
  };
  printTensors(operands);
  os << " -> ";
  printTensors(results);
  os << " {";
  llvm::interleaveComma(order, os, [&](int64_t factor) {
    os << name(factor) << '=' << factorSizes[factor];
  });
  os << '}';
  SmallVector<int64_t> reductions;
  for (int64_t factor : order)
    if (getFactorKind(factor) == FactorKind::Reduction)
      reductions.push_back(factor);
  if (!reductions.empty()) {
    os << " reduction={";
    llvm::interleaveComma(reductions, os,
                          [&](int64_t factor) { os << name(factor); });
    os << '}';
  }
  bool anySums =
      llvm::any_of(resultSums, [](const auto &f) { return !f.empty(); });
  if (anySums) {
    // Which result sums over which factors: "sums={1: i*k, 2: i*k}".
    os << " sums={";
    bool first = true;
    for (auto [result, factors] : llvm::enumerate(resultSums)) {
      if (factors.empty())
        continue;
      if (!first)
        os << ", ";
      first = false;
      os << result << ": ";
      llvm::interleave(
          factors, os, [&](int64_t factor) { os << name(factor); }, "*");
    }
    os << '}';
  }
  SmallVector<int64_t> blockedFactors;
  for (int64_t factor : order)
    if (isBlocked(factor))
      blockedFactors.push_back(factor);
  if (!blockedFactors.empty()) {
    os << " blocked={";
    llvm::interleaveComma(blockedFactors, os,
                          [&](int64_t factor) { os << name(factor); });
    os << '}';
  }
  return text;
}

/// Appends `operand` to `rule`, aligned at the trailing dimensions with the
/// factors of `space`; a dimension of size 1 that broadcasts gets no factor.
void weft::addBroadcastOperand(ShardingRule &rule,
                                ArrayRef<int64_t> spaceFactors,
                                ArrayRef<int64_t> spaceShape,
                                ArrayRef<int64_t> operandShape) {
  ShardingRule::TensorFactors tensor;
  size_t offset = spaceShape.size() - operandShape.size();
  for (auto [dim, size] : llvm::enumerate(operandShape)) {
    ShardingRule::DimFactors factors;
    if (size == spaceShape[offset + dim])
      factors.push_back(spaceFactors[offset + dim]);
    tensor.push_back(factors);
  }
  rule.operands.push_back(tensor);
}

/// One factor per dimension of `shape`.
SmallVector<int64_t> weft::addFactors(ShardingRule &rule,
                                       ArrayRef<int64_t> shape) {
  SmallVector<int64_t> factors;
  for (int64_t size : shape)
    factors.push_back(rule.addFactor(size));
  return factors;
}

ShardingRule::TensorFactors weft::toTensorFactors(ArrayRef<int64_t> factors) {
  ShardingRule::TensorFactors tensor;
  for (int64_t factor : factors)
    tensor.push_back({factor});
  return tensor;
}

ShardingRule weft::getElementwiseShardingRule(Operation *op) {
  ShardingRule rule;
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  SmallVector<int64_t> factors = addFactors(rule, shape);
  for (Type type : op->getOperandTypes())
    addBroadcastOperand(rule, factors, shape,
                        cast<RankedTensorType>(type).getShape());
  rule.results.push_back(toTensorFactors(factors));
  return rule;
}

OpCost weft::estimateElementwiseCost(TypeRange operandTypes,
                                     TypeRange resultTypes,
                                     int64_t flopsPerElement) {
  OpCost cost;
  for (Type type : resultTypes)
    cost.flops += static_cast<double>(flopsPerElement) *
                  cast<RankedTensorType>(type).getNumElements();
  cost.bytesRead = sumBytes(operandTypes);
  cost.bytesWritten = sumBytes(resultTypes);
  return cost;
}

//===----------------------------------------------------------------------===//
// Per-op rules and costs
//===----------------------------------------------------------------------===//

ShardingRule GeluOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}

OpCost GeluOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  // erf form: x/sqrt2, erf, +1, *x, *0.5. tanh form: x^3 (2), *c, +x, *k,
  // tanh, +1, *x, *0.5.
  int64_t flops = getApproximation() == GeluApproximation::erf ? 5 : 9;
  return estimateElementwiseCost(operandTypes, resultTypes, flops);
}

ShardingRule MatmulOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> lhs = getLhs().getType().getShape();
  ArrayRef<int64_t> rhs = getRhs().getType().getShape();
  ArrayRef<int64_t> result = getType().getShape();
  ArrayRef<int64_t> batchShape = result.drop_back(2);
  SmallVector<int64_t> batch = addFactors(rule, batchShape);
  int64_t m = rule.addFactor(result[result.size() - 2]);
  int64_t n = rule.addFactor(result.back());
  int64_t k = rule.addFactor(getTransposeLhs() ? lhs[lhs.size() - 2]
                                               : lhs.back());
  auto addOperand = [&](ArrayRef<int64_t> shape, int64_t row, int64_t col) {
    addBroadcastOperand(rule, batch, batchShape, shape.drop_back(2));
    rule.operands.back().push_back({row});
    rule.operands.back().push_back({col});
  };
  if (getTransposeLhs())
    addOperand(lhs, k, m);
  else
    addOperand(lhs, m, k);
  if (getTransposeRhs())
    addOperand(rhs, n, k);
  else
    addOperand(rhs, k, n);
  SmallVector<int64_t> resultFactors(batch);
  resultFactors.append({m, n});
  rule.results.push_back(toTensorFactors(resultFactors));
  return rule;
}

OpCost MatmulOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  auto lhs = cast<RankedTensorType>(operandTypes[0]);
  auto result = cast<RankedTensorType>(resultTypes[0]);
  int64_t k = getTransposeLhs() ? lhs.getDimSize(lhs.getRank() - 2)
                                : lhs.getShape().back();
  OpCost cost;
  cost.flops = 2.0 * static_cast<double>(result.getNumElements()) * k;
  cost.bytesRead = sumBytes(operandTypes);
  cost.bytesWritten = sumBytes(resultTypes);
  cost.unit = OpCost::Unit::Matrix;
  return cost;
}

ShardingRule LinearOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> input = getInput().getType().getShape();
  SmallVector<int64_t> rows = addFactors(rule, input.drop_back());
  int64_t n = rule.addFactor(getType().getShape().back());
  int64_t k = rule.addFactor(input.back());
  SmallVector<int64_t> inputFactors(rows);
  inputFactors.push_back(k);
  rule.operands.push_back(toTensorFactors(inputFactors));
  rule.operands.push_back(getTransposeWeight() ? toTensorFactors({n, k})
                                               : toTensorFactors({k, n}));
  if (getBias())
    rule.operands.push_back(toTensorFactors({n}));
  SmallVector<int64_t> resultFactors(rows);
  resultFactors.push_back(n);
  rule.results.push_back(toTensorFactors(resultFactors));
  return rule;
}

OpCost LinearOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  auto input = cast<RankedTensorType>(operandTypes[0]);
  auto result = cast<RankedTensorType>(resultTypes[0]);
  OpCost cost;
  cost.flops = 2.0 * static_cast<double>(result.getNumElements()) *
               input.getShape().back();
  if (operandTypes.size() > 2)
    cost.flops += static_cast<double>(result.getNumElements());
  cost.bytesRead = sumBytes(operandTypes);
  cost.bytesWritten = sumBytes(resultTypes);
  cost.unit = OpCost::Unit::Matrix;
  return cost;
}

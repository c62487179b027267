//===- WeftCosts.cpp - What each weft op costs ----------------------------===//
//
// Part of the Weft project.
//
// CostOpInterface for the ops whose cost is not given next to their sharding
// rule in WeftInterfaces.cpp. Counts are of the work a good kernel must do:
// FLOPs it executes and bytes it must move through memory at least once. Views
// (reshape) and storage (parameter, constant) cost nothing; data movement ops
// read and write their tensors once.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftInterfaces.h"
#include "weft/Dialect/WeftOps.h"

using namespace mlir;
using namespace weft;

static int64_t bytesOf(TypeRange types) {
  int64_t bytes = 0;
  for (Type type : types)
    if (isa<RankedTensorType>(type))
      bytes += getTensorBytes(type);
  return bytes;
}

static double elementsOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor ? static_cast<double>(tensor.getNumElements()) : 0.0;
}

/// Reads every operand and writes every result once, doing `flopsPerElement`
/// operations per element of the first operand.
static OpCost streamCost(TypeRange operandTypes, TypeRange resultTypes,
                         double flopsPerElement) {
  OpCost cost;
  if (!operandTypes.empty())
    cost.flops = flopsPerElement * elementsOf(operandTypes.front());
  cost.bytesRead = bytesOf(operandTypes);
  cost.bytesWritten = bytesOf(resultTypes);
  return cost;
}

/// Moves data without arithmetic: reads what it writes.
static OpCost moveCost(TypeRange resultTypes) {
  OpCost cost;
  cost.bytesRead = bytesOf(resultTypes);
  cost.bytesWritten = cost.bytesRead;
  return cost;
}

// Storage and views.
OpCost ParameterOp::estimateCost(TypeRange, TypeRange) { return {}; }
OpCost ConstantOp::estimateCost(TypeRange, TypeRange) { return {}; }
OpCost ReshapeOp::estimateCost(TypeRange, TypeRange) { return {}; }
OpCost YieldOp::estimateCost(TypeRange, TypeRange) { return {}; }
OpCost WaitOp::estimateCost(TypeRange, TypeRange) { return {}; }

// One kernel: the body's arithmetic, its operands read once and its result
// written once (the values inside are never stored). The body's ops are
// costed at their own types: a fusion is costed where it stands.
OpCost FusionOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  OpCost cost;
  if (getKind() == FusionKind::epilogue) {
    // The GEMM as it is; the epilogue's arithmetic rides along.
    for (Operation &op : getBody().front().without_terminator()) {
      OpCost part = cast<CostOpInterface>(op).getCost();
      if (isa<LinearOp>(op))
        cost = part;
      else
        cost.flops += part.flops;
    }
    cost.kernels = 1;
    return cost;
  }
  for (Operation &op : getBody().front().without_terminator())
    cost.flops += cast<CostOpInterface>(op).getCost().flops;
  cost.bytesRead = bytesOf(operandTypes);
  cost.bytesWritten = bytesOf(resultTypes);
  return cost;
}
OpCost MeshOp::estimateCost(TypeRange, TypeRange) { return {}; }
OpCost IotaOp::estimateCost(TypeRange, TypeRange resultTypes) {
  OpCost cost;
  cost.bytesWritten = bytesOf(resultTypes);
  return cost;
}

// Elementwise-shaped ops.
OpCost CompareOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return estimateElementwiseCost(operandTypes, resultTypes, 1);
}
OpCost WhereOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return estimateElementwiseCost(operandTypes, resultTypes, 1);
}
OpCost CastOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return estimateElementwiseCost(operandTypes, resultTypes, 1);
}
OpCost DropoutOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return estimateElementwiseCost(operandTypes, resultTypes, 1);
}
OpCost TriluOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return estimateElementwiseCost(operandTypes, resultTypes, 1);
}
// One add per element, in one pass.
OpCost CumSumOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return estimateElementwiseCost(operandTypes, resultTypes, 1);
}

// Reductions and normalizations: one pass over the input (the kernels keep a
// row in registers or shared memory).
OpCost ReduceSumOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 1);
}
OpCost ReduceMeanOp::estimateCost(TypeRange operandTypes,
                                  TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 1);
}
OpCost ReduceMaxOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 1);
}
// A running maximum and a rescaled sum of exponentials: compare, exp, add.
OpCost ReduceLogSumExpOp::estimateCost(TypeRange operandTypes,
                                       TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 3);
}
// (scale,) max, subtract, exp, sum, divide; the causal mask is a compare.
OpCost SoftmaxOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, getCausal() ? 6 : 5);
}
OpCost LogSoftmaxOp::estimateCost(TypeRange operandTypes,
                                  TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, getCausal() ? 6 : 5);
}
// mean, centre, square, sum, rsqrt-scale, gain, bias.
OpCost LayerNormOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 8);
}
OpCost RMSNormOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 5);
}
// logsumexp over the classes, one pick.
OpCost CrossEntropyOp::estimateCost(TypeRange operandTypes,
                                    TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 5);
}

// Fused attention (flash-attention style): Q Kᵀ and P V as GEMMs, the softmax
// in registers, the S×S scores never in memory. A causal mask skips the
// blocks above the diagonal, about half of the work when seq == kv_seq; with
// explicit positions (a ring step) half of the pairs are visible on average
// over the ranks of a load-balanced ring, which is what the cost counts where
// the partitioner has not counted a ring step's visible pairs.
static OpCost fusedAttentionCost(TypeRange operandTypes, TypeRange resultTypes,
                                 bool causal, bool positions, int64_t window,
                                 std::optional<int64_t> visible) {
  auto q = cast<RankedTensorType>(operandTypes[0]);
  auto k = cast<RankedTensorType>(operandTypes[1]);
  auto v = cast<RankedTensorType>(operandTypes[2]);
  double batchHeads = static_cast<double>(q.getDimSize(0)) * q.getDimSize(1);
  double seq = q.getDimSize(2), kvSeq = k.getDimSize(2);
  double pairs = seq * kvSeq;
  if (causal && positions) {
    pairs = 0.5 * seq * kvSeq;
  } else if (causal) {
    // Query i sees keys 0..i (top-left aligned), capped at kv_seq.
    double visible = 0;
    if (kvSeq >= seq)
      visible = seq * (seq + 1) / 2;
    else
      visible = kvSeq * (kvSeq + 1) / 2 + (seq - kvSeq) * kvSeq;
    pairs = visible;
  }
  // A sliding window: query i sees at most `window` keys, its first
  // window - 1 rows fewer (w (w + 1) / 2 + (seq - w) w of them where kv_seq
  // covers the queries; else at most seq · w). Ring blocks (positions) are
  // costed as their share, as a causal one is.
  if (causal && window > 0) {
    double w = double(window);
    double windowed = !positions && kvSeq >= seq && w < seq
                          ? w * (w + 1) / 2 + (seq - w) * w
                          : seq * std::min(w, kvSeq);
    pairs = std::min(pairs, windowed);
  }
  // A ring step's pairs as the partitioner counted them for its layout.
  if (causal && positions && visible)
    pairs = double(*visible);
  OpCost cost;
  cost.flops = batchHeads * pairs *
               (2.0 * q.getDimSize(3) + 2.0 * v.getDimSize(3) + 5.0);
  cost.bytesRead = bytesOf(operandTypes);
  cost.bytesWritten = bytesOf(resultTypes);
  cost.unit = OpCost::Unit::FusedAttention;
  return cost;
}

static constexpr double kAttentionBackward = 2.5;

OpCost weft::estimateAttentionGradientCost(TypeRange forwardOperands,
                                           Type output, bool causal,
                                           bool positions, int64_t window,
                                           std::optional<int64_t> visible) {
  OpCost cost = fusedAttentionCost(forwardOperands, TypeRange{output}, causal,
                                   positions, window, visible);
  cost.flops *= kAttentionBackward;
  cost.bytesRead += getTensorBytes(output);
  cost.bytesWritten = bytesOf(forwardOperands.take_front(3));
  return cost;
}

OpCost AttentionGradOp::estimateCost(TypeRange operandTypes,
                                     TypeRange resultTypes) {
  // The forward's operands are this op's but the output's gradient (#3).
  SmallVector<Type> forward(operandTypes.begin(), operandTypes.end());
  Type output = forward[3];
  forward.erase(forward.begin() + 3);
  return estimateAttentionGradientCost(
      forward, output, getCausal(), bool(getQPositions()),
      windowOrZero(getWindow()), getVisiblePairs());
}

OpCost AttentionOp::estimateCost(TypeRange operandTypes,
                                 TypeRange resultTypes) {
  return fusedAttentionCost(operandTypes, resultTypes, getCausal(), false,
                            windowOrZero(getWindow()), std::nullopt);
}

OpCost AttentionBlockOp::estimateCost(TypeRange operandTypes,
                                      TypeRange resultTypes) {
  return fusedAttentionCost(operandTypes, resultTypes, getCausal(),
                            bool(getQPositions()), windowOrZero(getWindow()),
                            getVisiblePairs());
}

// Indexing: read the rows that are picked, write them.
OpCost EmbeddingOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  OpCost cost = moveCost(resultTypes);
  cost.bytesRead += bytesOf(operandTypes.drop_front());
  return cost;
}
OpCost GatherOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  OpCost cost = moveCost(resultTypes);
  cost.bytesRead += bytesOf(operandTypes.drop_front());
  return cost;
}
OpCost TransposeOp::estimateCost(TypeRange, TypeRange resultTypes) {
  return moveCost(resultTypes);
}
OpCost SliceOp::estimateCost(TypeRange, TypeRange resultTypes) {
  return moveCost(resultTypes);
}
OpCost ConcatOp::estimateCost(TypeRange, TypeRange resultTypes) {
  return moveCost(resultTypes);
}
OpCost SplitOp::estimateCost(TypeRange, TypeRange resultTypes) {
  return moveCost(resultTypes);
}
OpCost BroadcastToOp::estimateCost(TypeRange operandTypes,
                                   TypeRange resultTypes) {
  OpCost cost;
  cost.bytesRead = bytesOf(operandTypes);
  cost.bytesWritten = bytesOf(resultTypes);
  return cost;
}

// A layer costs what its body costs (for the body's own types; the types
// passed in are those of the layer's boundary and do not change the body).
OpCost LayerOp::estimateCost(TypeRange, TypeRange) {
  OpCost total;
  getBody().walk([&](CostOpInterface op) {
    OpCost cost = op.getCost();
    total.flops += cost.flops;
    total.bytesRead += cost.bytesRead;
    total.bytesWritten += cost.bytesWritten;
  });
  return total;
}

// Collectives: the local work of the kernel (reading the input, writing the
// result, reducing what arrives). The bytes on the wire depend on the group
// size and algorithm; the planner's communication model counts those.
OpCost AllReduceOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 1);
}
OpCost ReduceScatterOp::estimateCost(TypeRange operandTypes,
                                     TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 1);
}
OpCost AllGatherOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 0);
}
OpCost AllSliceOp::estimateCost(TypeRange, TypeRange resultTypes) {
  return moveCost(resultTypes);
}
OpCost AllToAllOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 0);
}
OpCost CollectivePermuteOp::estimateCost(TypeRange operandTypes,
                                         TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 0);
}
OpCost SendOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 0);
}
OpCost RecvOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 0);
}
OpCost BroadcastOp::estimateCost(TypeRange operandTypes, TypeRange resultTypes) {
  return streamCost(operandTypes, resultTypes, 0);
}

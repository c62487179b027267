//===- WeftInterfaces.h - Sharding-rule and cost interfaces -----*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// The facts every compute op states about itself: how its dimensions relate
// (ShardingRule) and what it costs (OpCost). The planner, the partitioner and
// the cost model read only these, so the plan that is costed is the plan that
// is emitted.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_WEFTINTERFACES_H
#define WEFT_DIALECT_WEFTINTERFACES_H

#include "weft/Dialect/WeftDialect.h"

#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace weft {

/// An op's factor rule. The iteration space is a list of factors; each operand
/// and result dimension is the product of a list of factors, major to minor
/// (one for most ops, several where a reshape merges dimensions, none for a
/// broadcast dimension of size 1). A factor that occurs in no result is a
/// reduction factor: splitting it leaves the results partial sums.
struct ShardingRule {
  enum class FactorKind { Parallel, Reduction };

  /// Factors of one tensor dimension, major to minor.
  using DimFactors = llvm::SmallVector<int64_t, 1>;
  /// The factors of every dimension of one tensor.
  using TensorFactors = llvm::SmallVector<DimFactors, 4>;

  llvm::SmallVector<int64_t> factorSizes;
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;
  /// Factors the op cannot split: it needs the whole dimension (a softmax or
  /// normalization axis, a gathered or sliced dimension, a position-dependent
  /// one). Propagation never shards them; the partitioner gathers them.
  llvm::SmallVector<bool> blocked;
  /// Per result (none listed: none), the factors it sums over although
  /// another result names them: attention's dK sums over the queries that dQ
  /// keeps. Split, they leave that result a partial sum.
  llvm::SmallVector<llvm::SmallVector<int64_t, 2>> resultSums;

  /// Adds a factor of the given size and returns its index.
  int64_t addFactor(int64_t size) {
    factorSizes.push_back(size);
    blocked.push_back(false);
    return static_cast<int64_t>(factorSizes.size()) - 1;
  }
  void block(int64_t factor) { blocked[factor] = true; }
  bool isBlocked(int64_t factor) const { return blocked[factor]; }
  int64_t getNumFactors() const {
    return static_cast<int64_t>(factorSizes.size());
  }
  /// A factor is a reduction factor if no result dimension names it.
  FactorKind getFactorKind(int64_t factor) const;

  /// Renders the rule as "([i, k], [k, j]) -> ([i, j]) {i=4, j=8, k=16}
  /// reduction={k} blocked={...}", naming factors i, j, k, ... in order of
  /// first use.
  std::string str() const;
};

/// What running an op once costs, counted, not timed.
struct OpCost {
  /// Which units do the arithmetic: vector units, matrix (tensor) cores, or
  /// a fused attention kernel (matrix cores with a softmax in between).
  enum class Unit { Vector, Matrix, FusedAttention };
  /// Floating-point operations (a multiply-add is two).
  double flops = 0;
  /// Bytes the op must read from and write to memory at least once.
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
  Unit unit = Unit::Vector;
  /// Kernel launches the work takes.
  int kernels = 1;

  /// This cost `times` over (flops and bytes scaled).
  OpCost scaled(double times) const {
    OpCost cost = *this;
    cost.flops *= times;
    cost.bytesRead = int64_t(double(bytesRead) * times);
    cost.bytesWritten = int64_t(double(bytesWritten) * times);
    return cost;
  }
};

/// A value an op's backward reads (DifferentiableOpInterface): the value
/// itself, one byte per element of it (which elements dropout kept), or one
/// f32 per row of it (a fused attention's log-sum-exp per query row, which
/// its backward reads with the output: `value` is the output).
struct SavedTensor {
  mlir::Value value;
  bool maskOnly = false;
  bool rowStatistics = false;

  /// How much of a value is kept: a key, with the value, for sets of kept
  /// tensors.
  enum Form : int { Whole = 0, MaskOnly = 1, RowStatistics = 2 };
  Form form() const {
    return maskOnly ? MaskOnly : rowStatistics ? RowStatistics : Whole;
  }
  /// The bytes kept of a value of `type` in form `form`.
  static int64_t bytes(mlir::RankedTensorType type, int form);
};

/// A value an operand's gradient reads (DifferentiableOpInterface::
/// getGradientReads).
struct GradientRead {
  enum Kind {
    /// A value of the forward program (an operand or a result).
    Forward,
    /// The gradient that reached `value` (a result of the op).
    ResultGradient,
    /// A tensor the backward computes on the way, of `value`'s type (a
    /// norm's normalized input, typed like its result).
    Computed,
  };
  mlir::Value value;
  Kind kind = Forward;
};

/// The traits' reads (getGradientReads' default): an Additive op's operand
/// gradient reads its results' gradients, a Multilinear op's also its other
/// operands; any other op's reads its results' gradients and what it saves.
void getDefaultGradientReads(mlir::Operation *op, unsigned operand,
                             llvm::SmallVectorImpl<GradientRead> &reads);

/// What an op's gradients cost: of its inputs, and of its weight (if it has
/// a weight operand).
struct BackwardCost {
  OpCost inputGradient;
  OpCost weightGradient;
};

/// The default backward cost: one pass like the op's forward.
BackwardCost estimateStreamingBackwardCost(mlir::Operation *op,
                                           mlir::TypeRange operandTypes,
                                           mlir::TypeRange resultTypes);

/// Fused attention's backward (weft.attention_grad; FlashAttention's): it
/// recomputes Q Kᵀ and runs four GEMMs where the forward runs two, 2.5 times
/// the forward's arithmetic over the same visible pairs; it reads the
/// forward's operands and the output's gradient, and writes Q's, K's and V's
/// gradients. `forwardOperands` are the attention's (q, k, v, then the mask
/// and positions if any), `output` its result; `window` its sliding window
/// (0 for none); `visible` a ring step's visible pairs per batch and head
/// (weft.attention_block's `visible`), which replace the share a causal
/// block with positions is otherwise costed as.
OpCost
estimateAttentionGradientCost(mlir::TypeRange forwardOperands,
                              mlir::Type output, bool causal, bool positions,
                              int64_t window = 0,
                              std::optional<int64_t> visible = std::nullopt);

class PartitionState;
class GradientState;
/// The generic partition by an op's factor rule (see Partition.h); returns
/// the local op.
mlir::FailureOr<mlir::Operation *> partitionByFactorRule(mlir::Operation *op,
                                                         PartitionState &state);

/// The kinds of collective (CollectiveOpInterface).
enum class CollectiveKind {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  Permute,
  AllSlice,
  Send,
  Recv,
  Broadcast,
};

/// The NCCL-style name of a kind: "all_reduce", "collective_permute", ...
llvm::StringRef stringifyCollectiveKind(CollectiveKind kind);

/// The size of a collective's group: the product of its axes' sizes on its
/// mesh (0 if the mesh or an axis is missing).
int64_t getCollectiveGroupSize(mlir::Operation *op);

/// The bytes one rank sends for collective `op` in a group of `groupSize`
/// ranks (NCCL's ring counts; see CollectiveOpInterface).
int64_t getCollectiveBytesSent(mlir::Operation *op, int64_t groupSize);

/// The bytes one rank sends for a collective of `kind` whose operand has
/// `operandBytes`, in a group of `groupSize` ranks (NCCL's ring counts).
int64_t collectiveBytesSent(CollectiveKind kind, int64_t operandBytes,
                            int64_t groupSize);

/// Bytes that a tensor of `type` occupies (i1 takes one byte per element).
int64_t getTensorBytes(mlir::Type type);

/// How collective `op` encodes what it sends: its `codec` attribute, or none.
CollectiveCodec getCollectiveCodec(mlir::Operation *op);

/// Elements that share one f32 scale under the fp8 and int8 codecs.
constexpr int64_t kCodecBlock = 128;
/// The elements top-k keeps: ceil(numElements / kTopKFraction), each sent as
/// a 4-byte index and a 4-byte value.
constexpr int64_t kTopKFraction = 100;

/// Whether `codec` is top-k (with or without error feedback): a sparse sum
/// that only a summing all_reduce sends (as an all-gather of each rank's
/// kept elements).
inline bool isTopK(CollectiveCodec codec) {
  return codec == CollectiveCodec::topk || codec == CollectiveCodec::topk_noef;
}

/// Bytes that `numElements` elements of `elementBytes` bytes each take on the
/// wire under `codec` (floats only; other types are sent as they are): bf16
/// two bytes (never more than the element), fp8 and int8 one byte plus four
/// per block of kCodecBlock. The runtime counts the same
/// (weft/runtime/Codec.h).
int64_t codecWireBytes(int64_t numElements, int64_t elementBytes, bool isFloat,
                       CollectiveCodec codec);

/// Whether collective `op` can send under `codec`: none always; otherwise a
/// float operand, and for top-k a summing all_reduce. The verifier refuses
/// the others and -weft-compress-collectives skips them.
bool codecApplies(mlir::Operation *op, CollectiveCodec codec);

/// Bytes a tensor of `type` takes on the wire under `codec`.
int64_t getWireBytes(mlir::Type type, CollectiveCodec codec);

/// The rule of an elementwise op with numpy broadcasting: one parallel factor
/// per result dimension; an operand dimension of size 1 that broadcasts has
/// no factor.
ShardingRule getElementwiseShardingRule(mlir::Operation *op);

/// Appends an operand aligned at the trailing dimensions with `spaceFactors`
/// of a space of shape `spaceShape`; size-1 broadcast dimensions get none.
void addBroadcastOperand(ShardingRule &rule, llvm::ArrayRef<int64_t> spaceFactors,
                         llvm::ArrayRef<int64_t> spaceShape,
                         llvm::ArrayRef<int64_t> operandShape);
/// Adds one factor per dimension of `shape` and returns them.
llvm::SmallVector<int64_t> addFactors(ShardingRule &rule,
                                      llvm::ArrayRef<int64_t> shape);
/// One single-factor dimension per entry.
ShardingRule::TensorFactors toTensorFactors(llvm::ArrayRef<int64_t> factors);

/// The cost of an elementwise op doing `flopsPerElement` operations per result
/// element and touching each operand and result once.
OpCost estimateElementwiseCost(mlir::TypeRange operandTypes,
                               mlir::TypeRange resultTypes,
                               int64_t flopsPerElement);

namespace OpTrait {
/// Every result element is computed from the operand elements at the same
/// (broadcast) position or from its own coordinates: ops with this trait
/// chain into one generated elementwise kernel.
template <typename ConcreteType>
class Elementwise : public mlir::OpTrait::TraitBase<ConcreteType, Elementwise> {
};
/// op(x1 + x2, y1 + y2, ...) = op(x1, y1, ...) + op(x2, y2, ...): partial
/// sums over one group stay partial sums through the op.
template <typename ConcreteType>
class Additive : public mlir::OpTrait::TraitBase<ConcreteType, Additive> {};
/// op(x1 + x2, y) = op(x1, y) + op(x2, y) in each operand, the others held
/// fixed: a partial sum through one operand, with the others the same on
/// every rank of its group, stays a partial sum.
template <typename ConcreteType>
class Multilinear : public mlir::OpTrait::TraitBase<ConcreteType, Multilinear> {
};
} // namespace OpTrait

} // namespace weft

#include "dialects/weft/WeftInterfaces.h.inc"

#endif // WEFT_DIALECT_WEFTINTERFACES_H

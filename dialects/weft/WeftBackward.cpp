//===- WeftBackward.cpp - What each op's backward reads and costs ---------===//
//
// Part of the Weft project.
//
// DifferentiableOpInterface: the values each op's gradient reads, and what
// computing its gradients costs. These are the facts behind Korthikanti et
// al.'s activation-memory formulas (a linear keeps its input, a norm its
// input, a softmax its output, dropout a one-byte mask) and behind the usual
// backward-to-forward ratios (a GEMM's gradient is two GEMMs of its size;
// flash attention's backward recomputes the scores, about 2.5 times its
// forward).
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/WeftInterfaces.h"
#include "weft/Dialect/WeftOps.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace weft;

BackwardCost weft::estimateStreamingBackwardCost(Operation *op,
                                                 TypeRange operandTypes,
                                                 TypeRange resultTypes) {
  BackwardCost cost;
  if (auto costed = dyn_cast<CostOpInterface>(op))
    cost.inputGradient = costed.estimateCost(operandTypes, resultTypes);
  cost.weightGradient.kernels = 0;
  return cost;
}

/// A constant has no gradient; everything else (activations, weights) has.
static bool needsGradient(Value value) {
  return !matchPattern(value, m_Constant());
}

static void save(SmallVectorImpl<SavedTensor> &saved, Value value) {
  saved.push_back({value, false});
}

/// A product-like op: each operand's gradient reads the other operand.
static void saveForProduct(SmallVectorImpl<SavedTensor> &saved, Value lhs,
                           Value rhs) {
  if (needsGradient(lhs) && needsGradient(rhs)) {
    save(saved, lhs);
    save(saved, rhs);
  } else if (needsGradient(lhs)) {
    save(saved, rhs);
  } else if (needsGradient(rhs)) {
    save(saved, lhs);
  }
}

/// An op whose gradient reads all of its operands that have one.
static void saveVariableOperands(SmallVectorImpl<SavedTensor> &saved,
                                 Operation *op) {
  bool any = llvm::any_of(op->getOperands(), needsGradient);
  if (!any)
    return;
  for (Value operand : op->getOperands())
    if (needsGradient(operand))
      save(saved, operand);
}

void MulOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saveForProduct(saved, getLhs(), getRhs());
}
// d(x/y) = dz/y and -dz·x/y².
void DivOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saveVariableOperands(saved, *this);
}
void PowOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saveVariableOperands(saved, *this);
}
// Which operand won is found by comparing them again.
void MaximumOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saveVariableOperands(saved, *this);
}
void MinimumOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saveVariableOperands(saved, *this);
}
// The gradient goes to the branch the condition chose.
void WhereOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  if (needsGradient(getCondition()) &&
      (needsGradient(getLhs()) || needsGradient(getRhs())))
    save(saved, getCondition());
}

// Unary functions read their input; exp reads its result (e^x is its own
// derivative).
void ExpOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getResult());
}
void LogOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void SqrtOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void RsqrtOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void TanhOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void ErfOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void SinOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void CosOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void SigmoidOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void ReluOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void AbsOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void SiluOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void GeluOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
// Which elements were kept: one byte each.
void DropoutOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saved.push_back({getResult(), /*maskOnly=*/true});
}
// The gradient goes to the maxima, found by comparing input and result.
void ReduceMaxOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
  save(saved, getResult());
}
// d logsumexp is the softmax, exp(input - result).
void ReduceLogSumExpOp::getSavedForBackward(
    SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
  save(saved, getResult());
}
// d softmax reads the probabilities; d log_softmax their logarithms.
void SoftmaxOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getResult());
}
void LogSoftmaxOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getResult());
}
// Norms read their input (and the per-row statistics, which are small).
void LayerNormOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
void RMSNormOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
}
// The gradient of a lookup is scattered back to the rows that were read.
void EmbeddingOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getIndices());
}
void GatherOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getIndices());
}
// softmax(logits) - onehot(label) needs the logits.
void CrossEntropyOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getLogits());
  save(saved, getLabels());
}

//===----------------------------------------------------------------------===//
// What each operand's gradient reads
//===----------------------------------------------------------------------===//

static void readResultGradients(Operation *op,
                                SmallVectorImpl<GradientRead> &reads) {
  for (Value result : op->getResults())
    reads.push_back({result, GradientRead::ResultGradient});
}

void weft::getDefaultGradientReads(Operation *op, unsigned operand,
                                   SmallVectorImpl<GradientRead> &reads) {
  readResultGradients(op, reads);
  // A sum, a difference, a reshape: the gradient passes on as it came.
  if (op->hasTrait<OpTrait::Additive>())
    return;
  // A product: each operand's gradient is the product of the others with
  // the result's gradient.
  if (op->hasTrait<OpTrait::Multilinear>()) {
    for (OpOperand &other : op->getOpOperands())
      if (other.getOperandNumber() != operand)
        reads.push_back({other.get(), GradientRead::Forward});
    return;
  }
  if (auto differentiable = dyn_cast<DifferentiableOpInterface>(op)) {
    SmallVector<SavedTensor> saved;
    differentiable.getSavedForBackward(saved);
    for (const SavedTensor &tensor : saved)
      reads.push_back({tensor.value, GradientRead::Forward});
  }
}

// dW = Xᵀ·dY reads the input; db = Σ dY the result's gradient alone;
// dX = dY·Wᵀ the weight.
void LinearOp::getGradientReads(unsigned operand,
                                SmallVectorImpl<GradientRead> &reads) {
  readResultGradients(*this, reads);
  if (operand == 0)
    reads.push_back({getWeight(), GradientRead::Forward});
  else if (operand == 1)
    reads.push_back({getInput(), GradientRead::Forward});
}

/// A norm's scale gradient is Σ dY·x̂: the normalized input, which the
/// backward computes again from the kept input (typed like the result); the
/// bias's is Σ dY; the input's reads the input and the scale.
static void normGradientReads(Operation *op, unsigned operand,
                              SmallVectorImpl<GradientRead> &reads) {
  Value result = op->getResult(0);
  reads.push_back({result, GradientRead::ResultGradient});
  if (operand == 0) {
    reads.push_back({op->getOperand(0), GradientRead::Forward});
    reads.push_back({op->getOperand(1), GradientRead::Forward});
  } else if (operand == 1) {
    reads.push_back({result, GradientRead::Computed});
  }
}
void LayerNormOp::getGradientReads(unsigned operand,
                                   SmallVectorImpl<GradientRead> &reads) {
  normGradientReads(*this, operand, reads);
}
void RMSNormOp::getGradientReads(unsigned operand,
                                 SmallVectorImpl<GradientRead> &reads) {
  normGradientReads(*this, operand, reads);
}

// A table's gradient scatters the result's gradient to the rows read.
void EmbeddingOp::getGradientReads(unsigned operand,
                                   SmallVectorImpl<GradientRead> &reads) {
  readResultGradients(*this, reads);
  reads.push_back({getIndices(), GradientRead::Forward});
  (void)operand;
}
void GatherOp::getGradientReads(unsigned operand,
                                SmallVectorImpl<GradientRead> &reads) {
  readResultGradients(*this, reads);
  reads.push_back({getIndices(), GradientRead::Forward});
  (void)operand;
}

/// What the body's ops that take the operand read, seen from outside: a
/// body argument is the operand, a yielded value the result, and the
/// gradient of a value inside (the GEMM's result under an epilogue's GELU)
/// a tensor the backward computes, typed like that value.
void FusionOp::getGradientReads(unsigned operand,
                                SmallVectorImpl<GradientRead> &reads) {
  Block &body = getBody().front();
  Operation *yield = body.getTerminator();
  auto outside = [&](Value value) -> Value {
    if (auto arg = dyn_cast<BlockArgument>(value))
      return getInputs()[arg.getArgNumber()];
    for (OpOperand &use : yield->getOpOperands())
      if (use.get() == value)
        return getOperation()->getResult(use.getOperandNumber());
    return value;
  };
  for (OpOperand &use : body.getArgument(operand).getUses()) {
    auto differentiable = dyn_cast<DifferentiableOpInterface>(use.getOwner());
    if (!differentiable)
      continue;
    SmallVector<GradientRead> inner;
    differentiable.getGradientReads(use.getOperandNumber(), inner);
    for (GradientRead read : inner) {
      Value seen = outside(read.value);
      if (read.kind == GradientRead::ResultGradient && seen == read.value)
        reads.push_back({read.value, GradientRead::Computed});
      else
        reads.push_back({seen, read.kind});
    }
  }
}

//===----------------------------------------------------------------------===//
// GEMMs and attention
//===----------------------------------------------------------------------===//

void MatmulOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saveForProduct(saved, getLhs(), getRhs());
}

/// Both operands' gradients are GEMMs of the forward's size.
BackwardCost MatmulOp::estimateBackwardCost(TypeRange operandTypes,
                                            TypeRange resultTypes) {
  BackwardCost cost;
  cost.inputGradient = estimateCost(operandTypes, resultTypes).scaled(2);
  cost.inputGradient.kernels = 2;
  cost.weightGradient.kernels = 0;
  return cost;
}

void LinearOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  save(saved, getInput());
  save(saved, getWeight());
}

/// dX = dY·Wᵀ and dW = Xᵀ·dY: each a GEMM of the forward's size.
BackwardCost LinearOp::estimateBackwardCost(TypeRange operandTypes,
                                            TypeRange resultTypes) {
  BackwardCost cost;
  cost.inputGradient = estimateCost(operandTypes, resultTypes);
  cost.weightGradient = cost.inputGradient;
  return cost;
}

/// What the body keeps, seen from outside: a body argument is the operand;
/// a value inside is kept by the epilogue (cuBLASLt writes the GEMM's result
/// as an auxiliary output), or recomputed from the operands by an
/// elementwise fusion's backward kernel, which then keeps its operands. A
/// mask (dropout's) is kept as it is: it cannot be recomputed.
void FusionOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  // What its body's ops keep, as the differentiated program keeps it: a value
  // inside the fusion that one of them reads in backward (the SiLU's output
  // a SwiGLU product reads, the GEMM's result an epilogue's GELU reads) is
  // written out and kept, not recomputed.
  Block &body = getBody().front();
  for (Operation &op : body.without_terminator()) {
    auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
    if (!differentiable)
      continue;
    SmallVector<SavedTensor> inner;
    differentiable.getSavedForBackward(inner);
    for (SavedTensor tensor : inner) {
      if (auto arg = dyn_cast<BlockArgument>(tensor.value))
        saved.push_back({getInputs()[arg.getArgNumber()], tensor.maskOnly,
                         tensor.rowStatistics});
      else
        saved.push_back(tensor);
    }
  }
}

/// The backward of an elementwise chain is one kernel too: it reads the
/// kept operands and the result's gradient and writes the operands'
/// gradients. An epilogue's is the GEMM's backward, with the GELU's
/// derivative in the input-gradient GEMM's epilogue (cuBLASLt's DGELU).
BackwardCost FusionOp::estimateBackwardCost(TypeRange operandTypes,
                                            TypeRange resultTypes) {
  BackwardCost cost;
  cost.weightGradient.kernels = 0;
  double flops = 0;
  for (Operation &op : getBody().front().without_terminator()) {
    auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
    if (!differentiable)
      continue;
    BackwardCost part = differentiable.estimateBackwardCost(
        op.getOperandTypes(), op.getResultTypes());
    if (getKind() == FusionKind::epilogue && isa<LinearOp>(op)) {
      cost = part;
      continue;
    }
    flops += part.inputGradient.flops;
  }
  if (getKind() == FusionKind::epilogue) {
    cost.inputGradient.flops += flops;
    // The GELU's derivative reads the kept GEMM result.
    cost.inputGradient.bytesRead += getTensorBytes(getType());
    return cost;
  }
  int64_t inputs = 0;
  for (Type type : operandTypes)
    if (isa<RankedTensorType>(type))
      inputs += getTensorBytes(type);
  int64_t result = 0;
  for (Type type : resultTypes)
    result += getTensorBytes(type);
  cost.inputGradient.flops = flops;
  cost.inputGradient.bytesRead = inputs + result;
  cost.inputGradient.bytesWritten = inputs;
  return cost;
}

/// What fused attention keeps for its backward: Q, K and V.
template <typename AttentionLike>
static void saveAttention(AttentionLike op,
                          SmallVectorImpl<SavedTensor> &saved) {
  save(saved, op.getQ());
  save(saved, op.getK());
  save(saved, op.getV());
}
/// Its backward is weft.attention_grad's cost: no weights.
static BackwardCost attentionBackward(TypeRange operandTypes,
                                      TypeRange resultTypes, bool causal,
                                      bool positions, int64_t window,
                                      std::optional<int64_t> visible) {
  BackwardCost cost;
  cost.inputGradient = estimateAttentionGradientCost(
      operandTypes, resultTypes.front(), causal, positions, window, visible);
  cost.weightGradient.kernels = 0;
  return cost;
}

// Its backward (weft.attention_grad, which AttentionOp::buildGradients
// builds) forms the probabilities from q, k and each row's log-sum-exp, and
// reads v and the output (D = rowsum(dO * out)), as FlashAttention-2's does.
SmallVector<Value, 4> weft::layoutChain(Value value) {
  SmallVector<Value, 4> chain{value};
  while (chain.back().hasOneUse()) {
    Operation *user = *chain.back().getUsers().begin();
    if (!isa<ReshapeOp, TransposeOp>(user))
      break;
    chain.push_back(user->getResult(0));
  }
  return chain;
}

void AttentionOp::getSavedForBackward(SmallVectorImpl<SavedTensor> &saved) {
  saveAttention(*this, saved);
  // And, as FlashAttention-2's backward reads them, the output (as the
  // output projection keeps it: a transpose of it holds the same elements,
  // which the backward transposes back) and each query row's log-sum-exp
  // (-weft-keep-attention-statistics keeps them in the forward layer;
  // selective recomputation runs the attention again).
  save(saved, layoutChain(getResult()).back());
  saved.push_back({getResult(), /*maskOnly=*/false, /*rowStatistics=*/true});
}

BackwardCost AttentionOp::estimateBackwardCost(TypeRange operandTypes,
                                               TypeRange resultTypes) {
  return attentionBackward(operandTypes, resultTypes, getCausal(), false,
                           windowOrZero(getWindow()), std::nullopt);
}

bool AttentionOp::isAttentionCore() { return true; }

void AttentionBlockOp::getSavedForBackward(
    SmallVectorImpl<SavedTensor> &saved) {
  // And the block's output and log-sum-exps, which merge the ring's blocks.
  saveAttention(*this, saved);
  save(saved, getResult());
  save(saved, getLse());
}

BackwardCost AttentionBlockOp::estimateBackwardCost(TypeRange operandTypes,
                                                    TypeRange resultTypes) {
  return attentionBackward(operandTypes, resultTypes, getCausal(),
                           bool(getQPositions()), windowOrZero(getWindow()),
                           getVisiblePairs());
}

bool AttentionBlockOp::isAttentionCore() { return true; }

//===- Gradients.h - Reverse-mode differentiation of weft IR -----*- C++
//-*-===//
//
// Part of the Weft project.
//
// The state of a reverse sweep: the gradient accumulated for each value, the
// builder that backward ops are created with, and the gradients of the
// parameters by name. Each op's DifferentiableOpInterface::buildGradients
// reads its results' gradients from it and adds its operands'; the sweep
// itself (differentiateOps) knows no op by name.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_GRADIENTS_H
#define WEFT_DIALECT_GRADIENTS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <functional>
#include <string>
#include <utility>

namespace weft {

/// What a layer's backward recomputes instead of keeping from forward
/// (Korthikanti et al. 2022): the whole layer, the attention core, or nothing;
/// or, per op (torchtitan's selective per-op checkpointing), everything but
/// the outputs of the attentions and of every other weight GEMM
/// (keptByOpPolicy).
enum class Recompute { Full, Selective, None, Ops };

/// Recompute::Ops: of a layer's ops in program order, those whose results
/// backward keeps, as torchtitan's `selective_ac_option = "op"` policy saves
/// them: every fused attention, and the 1st, 3rd, 5th, ... matrix-unit op
/// that reads a weight (`isWeight`; an op's OpCost says its unit). The rest
/// is recomputed from what these keep and from the layer's inputs.
void keptByOpPolicy(llvm::ArrayRef<mlir::Operation *> ops,
                    llvm::function_ref<bool(mlir::Value)> isWeight,
                    llvm::DenseSet<mlir::Operation *> &kept);

/// Without full recomputation, a layer's backward recomputes an elementwise
/// op from one activation operand rather than keep its result, where
/// everything that reads the result in backward is elementwise too (the
/// recomputation fuses into those kernels) and the operand is kept anyway:
/// SwiGLU's silu(gate), read by the product's gradient, recomputed from the
/// gate its own gradient keeps, as Megatron-Core's fused SwiGLU does. A
/// result a GEMM reads (GELU's, the second MLP GEMM's input) stays kept. This
/// says whether `op` has that form: elementwise, one result, differentiable,
/// and exactly one operand for which `isActivation` holds (returned in
/// `activation`); the sweep and the cost model's profile each check the rest
/// on their side.
bool isCheapToRematerialize(mlir::Operation *op,
                            llvm::function_ref<bool(mlir::Value)> isActivation,
                            mlir::Value &activation);

class GradientState {
public:
  explicit GradientState(mlir::OpBuilder &builder,
                         Recompute recompute = Recompute::Full)
      : b(builder), recompute(recompute) {}

  Recompute getRecompute() const { return recompute; }

  mlir::OpBuilder &builder() { return b; }

  /// Parameters that are not trained (`weft train --freeze`): the names for
  /// which `frozen` is true are constants to the sweep, which gives them no
  /// gradient and differentiates nothing only they reach. States made for a
  /// nested sweep (a layer's body, a decomposed attention) take their
  /// parent's with inheritFrozen.
  void setFrozen(std::function<bool(llvm::StringRef)> predicate) {
    frozen = std::move(predicate);
  }
  void inheritFrozen(const GradientState &parent) { frozen = parent.frozen; }
  bool isFrozen(llvm::StringRef name) const { return frozen && frozen(name); }

  /// Marks `value` as depending on something trained (a parameter, or an
  /// input the caller differentiates): only such values get gradients.
  void markActive(mlir::Value value);
  /// True if `value` is a float tensor that depends on a trained value.
  bool needsGradient(mlir::Value value) const { return active.contains(value); }

  /// The gradient accumulated for `value`, or null if none reached it.
  mlir::Value gradient(mlir::Value value) const {
    return gradients.lookup(value);
  }
  /// The gradient of `value`, or zeros of its type if none reached it.
  mlir::Value gradientOrZeros(mlir::Location loc, mlir::Value value);
  /// Sets the gradient of `value` (the seed of a sweep).
  void setGradient(mlir::Value value, mlir::Value grad) {
    gradients[value] = grad;
  }

  /// Adds `grad` to the gradient of `operand`, if it needs one: a gradient
  /// of a broadcast shape is summed over the broadcast dimensions and cast to
  /// the operand's element type first.
  void accumulate(mlir::Location loc, mlir::Value operand, mlir::Value grad);

  /// Adds the gradient of the parameter called `name`. Parameters are one
  /// weight wherever they are read (tied embeddings): gradients add up.
  void accumulateParameter(mlir::Location loc, llvm::StringRef name,
                           mlir::Value grad);
  /// The parameters' gradients, in the order they were first reached.
  llvm::ArrayRef<std::pair<std::string, mlir::Value>>
  getParameterGradients() const {
    return parameterGradients;
  }

  // Builders the gradients of many ops need.

  /// A splat constant of `type` (a tensor type) with `value`.
  mlir::Value splat(mlir::Location loc, mlir::Type type, double value);
  /// A scalar constant of `elementType`, broadcasting against any tensor.
  mlir::Value scalar(mlir::Location loc, mlir::Type elementType, double value);
  /// `grad` summed down to `shape` (numpy broadcasting in reverse).
  mlir::Value unbroadcast(mlir::Location loc, mlir::Value grad,
                          llvm::ArrayRef<int64_t> shape);
  /// `value` broadcast to `type`'s shape after restoring the dimensions in
  /// `axes` that a reduction without keep_dims removed.
  mlir::Value expandReduced(mlir::Location loc, mlir::Value value,
                            llvm::ArrayRef<int64_t> axes,
                            mlir::RankedTensorType type);

private:
  mlir::OpBuilder &b;
  Recompute recompute;
  std::function<bool(llvm::StringRef)> frozen;
  llvm::DenseSet<mlir::Value> active;
  llvm::DenseMap<mlir::Value, mlir::Value> gradients;
  llvm::SmallVector<std::pair<std::string, mlir::Value>> parameterGradients;
  llvm::StringMap<unsigned> parameterIndex;
};

/// Marks the results of parameters (but frozen ones), and of ops with an
/// active operand, as active, in program order.
void propagateActivity(GradientState &state,
                       llvm::ArrayRef<mlir::Operation *> ops);

/// Differentiates `ops` (in program order, each operand defined by an earlier
/// one of them or active through `state`) in reverse: for every op with a
/// result that has a gradient, builds its gradients at the builder's
/// insertion point. Activity flows forward first: results of parameters,
/// and of ops with an active operand, are active. Fails, with a diagnostic
/// at the op, for an op that has no gradient.
mlir::LogicalResult differentiateOps(GradientState &state,
                                     llvm::ArrayRef<mlir::Operation *> ops);

class AttentionOp;
/// Builds `op` decomposed at `b`'s insertion point, as Megatron's unfused
/// path computes it (grouped KV heads repeated, Q Kᵀ, scale and mask,
/// softmax, dropout, P V), the ops marked as the attention core; returns the
/// output. -weft-decompose-attention and attention's gradient build it.
mlir::Value buildDecomposedAttention(mlir::OpBuilder &b, AttentionOp op);

/// Megatron's unfused backward of `op` for the gradient `dy` of its output:
/// the decomposed attention recomputed at `b`'s insertion point
/// (buildDecomposedAttention) and differentiated in `local`, whose active
/// values (op's operands that need gradients) then hold theirs.
mlir::LogicalResult differentiateDecomposedAttention(mlir::OpBuilder &b,
                                                     AttentionOp op,
                                                     mlir::Value dy,
                                                     GradientState &local);

/// `value`, then each reshape or transpose that alone reads the one before
/// (an attention's output on its way to the output projection, in that
/// projection's layout): the same elements, in the layouts they pass
/// through. A fused attention's backward keeps the last of them, which the
/// output projection keeps anyway (AttentionOp::getSavedForBackward,
/// -weft-keep-attention-statistics).
llvm::SmallVector<mlir::Value, 4> layoutChain(mlir::Value value);

/// `carried`, the `at`-th layout of `chain` (a layoutChain), back in the
/// first layout: each reshape and transpose undone, at `b`'s insertion point.
/// (A backward layer that takes an attention's output in the layout its
/// forward layer keeps anyway gets the output so.)
mlir::Value undoLayouts(mlir::OpBuilder &b, mlir::Location loc,
                        llvm::ArrayRef<mlir::Value> chain, unsigned at,
                        mlir::Value carried);

class AttentionGradOp;
class LayerOp;
/// The forward layer of backward layer `backward`: the layer of its kind
/// less ".backward" and its index, in its block, whose results it reads; or
/// null.
LayerOp forwardLayerOf(LayerOp backward);

/// The attention before `grad` in its own block of the q, k, v and mask it
/// reads (with its scale, causality and dropout), or null.
AttentionOp attentionInBlock(AttentionGradOp grad);

/// The attention of the forward layer that `grad`'s backward layer
/// differentiates, of the q, k, v and mask that `grad` reads (kept by the
/// forward layer or recomputed: the same ops of the same values, as deep as
/// LLaMA's rotary K under recompute=op), with that forward layer; nulls where
/// there is none.
std::pair<AttentionOp, LayerOp> attentionInForwardLayer(AttentionGradOp grad);

} // namespace weft

#endif // WEFT_DIALECT_GRADIENTS_H

//===- WeftFolds.cpp - Folds of weft ops ----------------------------------===//
//
// Part of the Weft project.
//
// Identities that hold for every input, so that imported graphs lose the
// no-op reshapes, transposes and arithmetic that exporters leave behind.
// `x + 0` folds to `x` although IEEE gives +0 for -0 + 0: like XLA, Weft
// treats the sign of zero as not significant.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"

#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace weft;

/// True if `attr` is a splat constant whose elements all equal `value`.
static bool isSplatOf(Attribute attr, int64_t value) {
  auto splat = dyn_cast_or_null<SplatElementsAttr>(attr);
  if (!splat)
    return false;
  Type elementType = splat.getElementType();
  if (isa<FloatType>(elementType))
    return splat.getSplatValue<APFloat>().isExactlyValue(
        static_cast<double>(value));
  if (isa<IntegerType>(elementType))
    return splat.getSplatValue<APInt>().getSExtValue() == value;
  return false;
}

/// `x op c` folds to `x` when `c` is the identity and broadcasting it does not
/// change `x`'s shape.
static OpFoldResult foldRightIdentity(Value result, Value lhs, Attribute rhs,
                                      int64_t identity) {
  if (isSplatOf(rhs, identity) && lhs.getType() == result.getType())
    return lhs;
  return {};
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValueAttr(); }

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult folded =
          foldRightIdentity(getResult(), getLhs(), adaptor.getRhs(), 0))
    return folded;
  return foldRightIdentity(getResult(), getRhs(), adaptor.getLhs(), 0);
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  return foldRightIdentity(getResult(), getLhs(), adaptor.getRhs(), 0);
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult folded =
          foldRightIdentity(getResult(), getLhs(), adaptor.getRhs(), 1))
    return folded;
  return foldRightIdentity(getResult(), getRhs(), adaptor.getLhs(), 1);
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  return foldRightIdentity(getResult(), getLhs(), adaptor.getRhs(), 1);
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // reshape(reshape(x)) is one reshape of x: row-major order is kept.
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  return {};
}

namespace {
/// reshape(transpose(reshape(x))) where the inner reshape merges x's leading
/// dimensions into one, the transpose keeps that dimension first, and the
/// outer reshape splits it back: one transpose of x. torch's dynamo exporter
/// (onnxscript's scaled_dot_product_attention) swaps the key's last two
/// dimensions this way, [b, h, s, d] -> [b*h, s, d] -> [b*h, d, s] ->
/// [b, h, d, s], "so we can transpose with a static permutation".
struct MergedLeadingTranspose : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp outer,
                                PatternRewriter &rewriter) const override {
    auto transpose = outer.getInput().getDefiningOp<TransposeOp>();
    if (!transpose)
      return failure();
    auto inner = transpose.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    auto x = cast<RankedTensorType>(inner.getInput().getType());
    auto merged = cast<RankedTensorType>(inner.getType());
    auto result = cast<RankedTensorType>(outer.getType());
    ArrayRef<int64_t> perm = transpose.getPermutation();
    int64_t m = merged.getRank();
    int64_t k = x.getRank() - (m - 1);
    if (k < 1 || m < 2 || perm[0] != 0 || !x.hasStaticShape() ||
        !result.hasStaticShape() || result.getRank() != x.getRank())
      return failure();
    ArrayRef<int64_t> xShape = x.getShape();
    // The inner reshape merges x's first k dimensions and keeps the rest.
    int64_t leading = 1;
    for (int64_t d : xShape.take_front(k))
      leading *= d;
    if (merged.getDimSize(0) != leading ||
        merged.getShape().drop_front() != xShape.drop_front(k))
      return failure();
    // The outer one splits the first dimension back into the same k.
    ArrayRef<int64_t> transposed =
        cast<RankedTensorType>(transpose.getType()).getShape();
    if (result.getShape().take_front(k) != xShape.take_front(k) ||
        result.getShape().drop_front(k) != transposed.drop_front())
      return failure();
    SmallVector<int64_t> permutation;
    for (int64_t d = 0; d < k; ++d)
      permutation.push_back(d);
    for (int64_t d : perm.drop_front())
      permutation.push_back(d + k - 1);
    rewriter.replaceOpWithNewOp<TransposeOp>(outer, inner.getInput(),
                                             permutation);
    return success();
  }
};

/// reshape(linear(reshape(x))) where the inner reshape flattens x's rows
/// ([..., K] -> [M, K]) and the outer one unflattens the linear's result
/// ([M, N] -> [a..., N]): linear(reshape(x -> [a..., K])), the rows kept
/// apart. nn.MultiheadAttention flattens [s, b] to run its output
/// projection, and Hugging Face's Conv1D (GPT-2) flattens [b, s]; a merged
/// [s * b] cannot be split where b is (data parallelism splits the batch),
/// and a split sequence would have to be gathered first.
struct FlattenedLinear : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp outer,
                                PatternRewriter &rewriter) const override {
    auto linear = outer.getInput().getDefiningOp<LinearOp>();
    if (!linear || !linear->hasOneUse())
      return failure();
    auto inner = linear.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    auto flat = cast<RankedTensorType>(linear.getType());
    auto result = cast<RankedTensorType>(outer.getType());
    auto rows = cast<RankedTensorType>(linear.getInput().getType());
    if (!flat.hasStaticShape() || !result.hasStaticShape() ||
        !rows.hasStaticShape() || result.getRank() < 2 ||
        result.getShape().back() != flat.getShape().back() ||
        result.getRank() == flat.getRank())
      return failure();
    SmallVector<int64_t> shape(result.getShape());
    shape.back() = rows.getShape().back();
    Value input = ReshapeOp::create(rewriter, inner.getLoc(), rows.clone(shape),
                                    inner.getInput());
    auto kept = LinearOp::create(rewriter, linear.getLoc(), result, input,
                                 linear.getWeight(), linear.getBias(),
                                 linear.getTransposeWeightAttr());
    rewriter.replaceOp(outer, kept.getResult());
    return success();
  }
};
} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                            MLIRContext *context) {
  patterns.add<MergedLeadingTranspose, FlattenedLinear>(context);
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  if (llvm::equal(getPermutation(),
                  llvm::seq<int64_t>(0, getType().getRank())))
    return getInput();
  auto inner = getInput().getDefiningOp<TransposeOp>();
  if (!inner)
    return {};
  // Result dim i is inner's dim perm[i], which is x's dim innerPerm[perm[i]].
  SmallVector<int64_t> composed;
  for (int64_t dim : getPermutation())
    composed.push_back(inner.getPermutation()[dim]);
  if (llvm::equal(composed, llvm::seq<int64_t>(0, getType().getRank())))
    return inner.getInput();
  getInputMutable().assign(inner.getInput());
  setPermutation(composed);
  return getResult();
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1 && getInputs().front().getType() == getType())
    return getInputs().front();
  return {};
}

OpFoldResult BroadcastToOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

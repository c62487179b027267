//===- WeftRaise.cpp - Raise decomposed forms to single weft ops ----------===//
//
// Part of the Weft project.
//
// Each pattern starts from the op that is unique to its form (erf, tanh,
// sigmoid, the normalizing div or sqrt, softmax) and checks the neighbours
// that must surround it. Every intermediate value must have no other use,
// so that replacing the root does not duplicate work.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace weft {
#define GEN_PASS_DEF_WEFTRAISE
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

//===----------------------------------------------------------------------===//
// Matching helpers
//===----------------------------------------------------------------------===//

/// The value of a splat (or one-element) constant or inline parameter.
std::optional<double> splatValue(Value value) {
  Attribute attr;
  if (auto constant = value.getDefiningOp<ConstantOp>())
    attr = constant.getValue();
  else if (auto param = value.getDefiningOp<ParameterOp>())
    attr = param.getValue() ? *param.getValue() : Attribute();
  auto elements = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!elements || (!elements.isSplat() && elements.getNumElements() != 1))
    return std::nullopt;
  if (isa<FloatType>(elements.getElementType()))
    return (*elements.getValues<APFloat>().begin()).convertToDouble();
  if (isa<IntegerType>(elements.getElementType()))
    return static_cast<double>((*elements.getValues<APInt>().begin()).getSExtValue());
  return std::nullopt;
}

bool isConstant(Value value, double expected, double relTol = 1e-4) {
  std::optional<double> actual = splatValue(value);
  return actual && std::abs(*actual - expected) <= relTol * std::abs(expected) +
                                                      1e-12;
}

/// The only user of `value`, if it is an OpTy.
template <typename OpTy> OpTy soleUser(Value value) {
  if (!value.hasOneUse())
    return nullptr;
  return dyn_cast<OpTy>(*value.getUsers().begin());
}

/// For a binary op, the operand that is not `value` (either side).
Value otherOperand(Operation *op, Value value) {
  if (op->getOperand(0) == value)
    return op->getOperand(1);
  if (op->getOperand(1) == value)
    return op->getOperand(0);
  return {};
}

/// If `value` is `x * c` or `c * x` (or `x / (1/c)`) with c constant, returns
/// x and c.
std::optional<std::pair<Value, double>> scaledBy(Value value) {
  if (auto mul = value.getDefiningOp<MulOp>()) {
    if (std::optional<double> c = splatValue(mul.getRhs()))
      return std::make_pair(mul.getLhs(), *c);
    if (std::optional<double> c = splatValue(mul.getLhs()))
      return std::make_pair(mul.getRhs(), *c);
  }
  if (auto div = value.getDefiningOp<DivOp>())
    if (std::optional<double> c = splatValue(div.getRhs()); c && *c != 0)
      return std::make_pair(div.getLhs(), 1.0 / *c);
  return std::nullopt;
}

/// True if `value` is `x^2` written as pow(x, 2) or x * x.
bool isSquareOf(Value value, Value x) {
  if (auto pow = value.getDefiningOp<PowOp>())
    return pow.getLhs() == x && isConstant(pow.getRhs(), 2.0);
  if (auto mul = value.getDefiningOp<MulOp>())
    return mul.getLhs() == x && mul.getRhs() == x;
  return false;
}

/// If `value` is `x^3` (pow(x, 3), x * x * x in any grouping), returns true.
bool isCubeOf(Value value, Value x) {
  if (auto pow = value.getDefiningOp<PowOp>())
    return pow.getLhs() == x && isConstant(pow.getRhs(), 3.0);
  if (auto mul = value.getDefiningOp<MulOp>()) {
    Value other = otherOperand(mul, x);
    return other && isSquareOf(other, x);
  }
  return false;
}

/// The axis a reduction normalizes over, if it reduces the trailing
/// dimensions [axis, rank) and keeps them.
std::optional<int64_t> trailingAxis(ReduceMeanOp mean) {
  int64_t rank = mean.getInput().getType().getRank();
  ArrayRef<int64_t> axes = mean.getAxes();
  if (!mean.getKeepDims() || axes.empty())
    return std::nullopt;
  for (auto [i, axis] : llvm::enumerate(axes))
    if (axis != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i))
      return std::nullopt;
  return axes.front();
}

/// A tensor of ones of `shape` and `element` type, for a missing scale.
Value ones(PatternRewriter &rewriter, Location loc, ArrayRef<int64_t> shape,
           Type element) {
  auto type = RankedTensorType::get(shape, element);
  return ConstantOp::create(rewriter, loc,
                            DenseElementsAttr::get(type, rewriter.getFloatAttr(element, 1.0)));
}

/// Given `a = 1 + f(x)`, finds `0.5 * x * a` in any association and returns
/// the op that computes it.
Operation *matchHalfXTimes(Value a, Value x) {
  auto first = soleUser<MulOp>(a);
  if (!first)
    return nullptr;
  Value other = otherOperand(first, a);
  if (other == x) {
    // (x * a) * 0.5
    auto second = soleUser<MulOp>(first.getResult());
    if (second && isConstant(otherOperand(second, first.getResult()), 0.5))
      return second;
    return nullptr;
  }
  // (0.5 * x) * a
  if (std::optional<std::pair<Value, double>> half = scaledBy(other);
      half && half->first == x && std::abs(half->second - 0.5) < 1e-6 &&
      other.hasOneUse())
    return first;
  // (0.5 * a) * x
  if (isConstant(other, 0.5)) {
    auto second = soleUser<MulOp>(first.getResult());
    if (second && otherOperand(second, first.getResult()) == x)
      return second;
  }
  return nullptr;
}

/// `1 + value` (either order), its only use.
AddOp plusOne(Value value) {
  auto add = soleUser<AddOp>(value);
  if (add && isConstant(otherOperand(add, value), 1.0))
    return add;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Patterns
//===----------------------------------------------------------------------===//

struct RaiseGeluErf : OpRewritePattern<ErfOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ErfOp erf, PatternRewriter &rewriter) const override {
    std::optional<std::pair<Value, double>> scaled = scaledBy(erf.getInput());
    if (!scaled || std::abs(scaled->second - M_SQRT1_2) > 1e-4 ||
        !erf.getInput().hasOneUse())
      return failure();
    Value x = scaled->first;
    AddOp add = plusOne(erf.getResult());
    Operation *root = add ? matchHalfXTimes(add.getResult(), x) : nullptr;
    if (!root || root->getResult(0).getType() != x.getType())
      return failure();
    rewriter.setInsertionPoint(root);
    rewriter.replaceOp(root, GeluOp::create(rewriter, root->getLoc(), x,
                                            GeluApproximation::erf));
    return success();
  }
};

struct RaiseGeluTanh : OpRewritePattern<TanhOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TanhOp tanh, PatternRewriter &rewriter) const override {
    // tanh(c * (x + 0.044715 * x^3)), c = sqrt(2 / pi)
    std::optional<std::pair<Value, double>> outer = scaledBy(tanh.getInput());
    if (!outer || std::abs(outer->second - 0.7978845608) > 1e-4)
      return failure();
    auto sum = outer->first.getDefiningOp<AddOp>();
    if (!sum)
      return failure();
    for (auto [x, cubic] : {std::pair{sum.getLhs(), sum.getRhs()},
                            std::pair{sum.getRhs(), sum.getLhs()}}) {
      std::optional<std::pair<Value, double>> inner = scaledBy(cubic);
      if (!inner || std::abs(inner->second - 0.044715) > 1e-5 ||
          !isCubeOf(inner->first, x))
        continue;
      AddOp add = plusOne(tanh.getResult());
      Operation *root = add ? matchHalfXTimes(add.getResult(), x) : nullptr;
      if (!root || root->getResult(0).getType() != x.getType())
        continue;
      rewriter.setInsertionPoint(root);
      rewriter.replaceOp(root, GeluOp::create(rewriter, root->getLoc(), x,
                                              GeluApproximation::tanh));
      return success();
    }
    return failure();
  }
};

struct RaiseSilu : OpRewritePattern<SigmoidOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SigmoidOp sigmoid,
                                PatternRewriter &rewriter) const override {
    Value x = sigmoid.getInput();
    auto mul = soleUser<MulOp>(sigmoid.getResult());
    if (!mul || otherOperand(mul, sigmoid.getResult()) != x ||
        mul.getType() != x.getType())
      return failure();
    rewriter.replaceOpWithNewOp<SiluOp>(mul, x);
    return success();
  }
};

/// Extends a normalized value by an optional `* gamma` and `+ beta` whose
/// shapes are the normalized shape; returns the last op and the operands.
struct Affine {
  Operation *root;
  Value scale, bias;
};
Affine matchAffine(Value normalized, ArrayRef<int64_t> normalizedShape) {
  Affine affine{normalized.getDefiningOp(), {}, {}};
  auto fits = [&](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && type.getShape() == normalizedShape;
  };
  if (auto mul = soleUser<MulOp>(normalized)) {
    Value gamma = otherOperand(mul, normalized);
    if (fits(gamma) && mul.getType() == normalized.getType()) {
      affine = {mul, gamma, {}};
      if (auto add = soleUser<AddOp>(mul.getResult())) {
        Value beta = otherOperand(add, mul.getResult());
        if (fits(beta) && add.getType() == normalized.getType())
          affine = {add, gamma, beta};
      }
    }
  }
  return affine;
}

struct RaiseLayerNorm : OpRewritePattern<DivOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DivOp div, PatternRewriter &rewriter) const override {
    // (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)
    auto centered = div.getLhs().getDefiningOp<SubOp>();
    auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
    if (!centered || !sqrt)
      return failure();
    auto mean = centered.getRhs().getDefiningOp<ReduceMeanOp>();
    Value x = centered.getLhs();
    if (!mean || mean.getInput() != x || x.getType() != div.getType())
      return failure();
    std::optional<int64_t> axis = trailingAxis(mean);
    auto sum = sqrt.getInput().getDefiningOp<AddOp>();
    if (!axis || !sum)
      return failure();
    for (auto [varianceValue, epsValue] : {std::pair{sum.getLhs(), sum.getRhs()},
                                           std::pair{sum.getRhs(), sum.getLhs()}}) {
      auto variance = varianceValue.getDefiningOp<ReduceMeanOp>();
      std::optional<double> eps = splatValue(epsValue);
      if (!variance || !eps || *eps <= 0 || trailingAxis(variance) != axis ||
          !isSquareOf(variance.getInput(), centered.getResult()))
        continue;
      auto type = cast<RankedTensorType>(x.getType());
      ArrayRef<int64_t> normalized = type.getShape().drop_front(*axis);
      Affine affine = matchAffine(div.getResult(), normalized);
      rewriter.setInsertionPoint(affine.root);
      Value scale = affine.scale ? affine.scale
                                 : ones(rewriter, div.getLoc(), normalized,
                                        type.getElementType());
      rewriter.replaceOp(affine.root,
                         LayerNormOp::create(rewriter, affine.root->getLoc(), type,
                                             x, scale, affine.bias, *axis,
                                             APFloat(static_cast<float>(*eps))));
      return success();
    }
    return failure();
  }
};

struct RaiseRMSNorm : OpRewritePattern<SqrtOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SqrtOp sqrt, PatternRewriter &rewriter) const override {
    // sqrt(mean(x^2) + eps), then x / that or x * (1 / that)
    auto sum = sqrt.getInput().getDefiningOp<AddOp>();
    if (!sum || !sqrt.getResult().hasOneUse())
      return failure();
    for (auto [meanValue, epsValue] : {std::pair{sum.getLhs(), sum.getRhs()},
                                       std::pair{sum.getRhs(), sum.getLhs()}}) {
      auto mean = meanValue.getDefiningOp<ReduceMeanOp>();
      std::optional<double> eps = splatValue(epsValue);
      if (!mean || !eps || *eps <= 0)
        continue;
      std::optional<int64_t> axis = trailingAxis(mean);
      Value square = mean.getInput();
      Operation *squareOp = square.getDefiningOp();
      if (!axis || !squareOp)
        continue;
      Value x = squareOp->getOperand(0);
      if (!isSquareOf(square, x))
        continue;
      // The normalized value: x / sqrt(...) or x * (1 / sqrt(...)).
      Value normalized;
      Operation *user = *sqrt.getResult().getUsers().begin();
      if (auto div = dyn_cast<DivOp>(user)) {
        if (div.getLhs() == x && div.getRhs() == sqrt.getResult())
          normalized = div.getResult();
        else if (isConstant(div.getLhs(), 1.0))
          if (auto mul = soleUser<MulOp>(div.getResult());
              mul && otherOperand(mul, div.getResult()) == x)
            normalized = mul.getResult();
      }
      if (!normalized || normalized.getType() != x.getType())
        continue;
      auto type = cast<RankedTensorType>(x.getType());
      ArrayRef<int64_t> shape = type.getShape().drop_front(*axis);
      Affine affine = matchAffine(normalized, shape);
      if (affine.bias)
        continue; // RMSNorm has no bias; leave such a form alone.
      rewriter.setInsertionPoint(affine.root);
      Value scale = affine.scale ? affine.scale
                                 : ones(rewriter, sqrt.getLoc(), shape,
                                        type.getElementType());
      rewriter.replaceOp(affine.root,
                         RMSNormOp::create(rewriter, affine.root->getLoc(), type, x,
                                           scale, *axis,
                                           APFloat(static_cast<float>(*eps))));
      return success();
    }
    return failure();
  }
};

bool isWeight(Value value, int64_t rank) {
  auto param = value.getDefiningOp<ParameterOp>();
  return param && param.getType().getRank() == rank;
}

struct RaiseLinear : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatmulOp matmul,
                                PatternRewriter &rewriter) const override {
    if (matmul.getTransposeLhs() || !isWeight(matmul.getRhs(), 2) ||
        matmul.getLhs().getType().getRank() < 2)
      return failure();
    rewriter.replaceOpWithNewOp<LinearOp>(matmul, matmul.getLhs(), matmul.getRhs(),
                                          Value(), matmul.getTransposeRhs());
    return success();
  }
};

struct RaiseLinearBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    for (auto [productValue, bias] : {std::pair{add.getLhs(), add.getRhs()},
                                      std::pair{add.getRhs(), add.getLhs()}}) {
      auto linear = productValue.getDefiningOp<LinearOp>();
      if (!linear || linear.getBias() || !linear.getResult().hasOneUse() ||
          !isWeight(bias, 1) || add.getType() != linear.getType() ||
          cast<RankedTensorType>(bias.getType()).getDimSize(0) !=
              linear.getType().getShape().back())
        continue;
      rewriter.replaceOpWithNewOp<LinearOp>(add, linear.getInput(),
                                            linear.getWeight(), bias,
                                            linear.getTransposeWeight());
      return success();
    }
    return failure();
  }
};

/// True if `value` is a constant whose last two dimensions keep (true / 0) the
/// lower triangle including the diagonal and mask the rest, the same in every
/// leading position: a causal mask aligned at the top left.
bool isCausalMask(Value value, bool boolean) {
  auto constant = value.getDefiningOp<ConstantOp>();
  auto elements = constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                           : DenseElementsAttr();
  if (!elements)
    return false;
  auto type = cast<RankedTensorType>(elements.getType());
  if (type.getRank() < 2)
    return false;
  int64_t rows = type.getDimSize(type.getRank() - 2), cols = type.getShape().back();
  int64_t i = 0;
  if (boolean) {
    for (bool keep : elements.getValues<bool>()) {
      int64_t col = i % cols, row = (i / cols) % rows;
      if (keep != (col <= row))
        return false;
      ++i;
    }
    return true;
  }
  for (APFloat v : elements.getValues<APFloat>()) {
    int64_t col = i % cols, row = (i / cols) % rows;
    double d = v.convertToDouble();
    if (col <= row ? d != 0.0 : d > -1e4)
      return false;
    ++i;
  }
  return true;
}

struct RaiseAttention : OpRewritePattern<SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SoftmaxOp softmax,
                                PatternRewriter &rewriter) const override {
    auto scoresType = softmax.getType();
    if (scoresType.getRank() != 4 || softmax.getAxis() != 3)
      return failure();
    auto output = soleUser<MatmulOp>(softmax.getResult());
    if (!output || output.getLhs() != softmax.getResult() ||
        output.getTransposeLhs() || output.getTransposeRhs())
      return failure();
    Value v = output.getRhs();
    // The scores: scaled q·kᵀ, maybe masked.
    Value scores = softmax.getInput(), mask;
    bool causal = false;
    if (auto where = scores.getDefiningOp<WhereOp>()) {
      std::optional<double> fill = splatValue(where.getRhs());
      if (!fill || *fill > -1e4 || !scores.hasOneUse())
        return failure();
      if (isCausalMask(where.getCondition(), /*boolean=*/true))
        causal = true;
      else
        mask = where.getCondition();
      scores = where.getLhs();
    } else if (auto add = scores.getDefiningOp<AddOp>()) {
      for (auto [inner, additive] : {std::pair{add.getLhs(), add.getRhs()},
                                     std::pair{add.getRhs(), add.getLhs()}}) {
        if (!inner.getDefiningOp<MatmulOp>() && !scaledBy(inner))
          continue;
        if (isCausalMask(additive, /*boolean=*/false))
          causal = true;
        else
          mask = additive;
        scores = inner;
        break;
      }
      if (scores == softmax.getInput())
        return failure();
    }
    double scale = 1.0;
    if (!scores.getDefiningOp<MatmulOp>()) {
      std::optional<std::pair<Value, double>> scaled = scaledBy(scores);
      if (!scaled || scaled->second <= 0)
        return failure();
      scores = scaled->first;
      scale = scaled->second;
    }
    auto qk = scores.getDefiningOp<MatmulOp>();
    if (!qk || qk.getTransposeLhs())
      return failure();
    Value q = qk.getLhs(), k = qk.getRhs();
    TransposeOp keyTranspose;
    if (!qk.getTransposeRhs()) {
      // kᵀ = transpose(x, P) for any P (exporters fuse the head permute
      // with the transpose), so k = transpose(x, P with its last two swapped).
      keyTranspose = k.getDefiningOp<TransposeOp>();
      if (!keyTranspose || keyTranspose.getPermutation().size() != 4)
        return failure();
    }
    rewriter.setInsertionPoint(output);
    if (keyTranspose) {
      ArrayRef<int64_t> perm = keyTranspose.getPermutation();
      SmallVector<int64_t> keyPerm{perm[0], perm[1], perm[3], perm[2]};
      k = TransposeOp::create(rewriter, keyTranspose.getLoc(),
                              keyTranspose.getInput(), keyPerm);
    }
    auto qType = dyn_cast<RankedTensorType>(q.getType());
    auto kType = dyn_cast<RankedTensorType>(k.getType());
    auto vType = dyn_cast<RankedTensorType>(v.getType());
    if (!qType || !kType || !vType || qType.getRank() != 4 ||
        kType.getRank() != 4 || vType.getRank() != 4) {
      if (keyTranspose)
        rewriter.eraseOp(k.getDefiningOp());
      return failure();
    }
    auto attention = AttentionOp::create(
        rewriter, output.getLoc(), output.getType(), q, k, v, mask,
        rewriter.getF32FloatAttr(static_cast<float>(scale)),
        causal ? rewriter.getUnitAttr() : UnitAttr(), FloatAttr());
    // Shapes that only look like attention (a mask that does not broadcast,
    // heads that do not group) are left alone, silently.
    LogicalResult valid = success();
    {
      ScopedDiagnosticHandler quiet(getContext(),
                                    [](Diagnostic &) { return success(); });
      valid = verify(attention, /*verifyRecursively=*/false);
    }
    if (failed(valid)) {
      rewriter.eraseOp(attention);
      if (keyTranspose)
        rewriter.eraseOp(k.getDefiningOp());
      return failure();
    }
    rewriter.replaceOp(output, attention.getResult());
    return success();
  }
};

/// If `value` is `reshape(broadcast_to(reshape(kv)))` that repeats each of
/// kv's heads `rep` times in a row (HF's repeat_kv), returns kv and rep.
std::optional<std::pair<Value, int64_t>> unrepeatHeads(Value value) {
  auto merge = value.getDefiningOp<ReshapeOp>();
  auto expand = merge ? merge.getInput().getDefiningOp<BroadcastToOp>() : nullptr;
  auto split = expand ? expand.getInput().getDefiningOp<ReshapeOp>() : nullptr;
  if (!split)
    return std::nullopt;
  auto kvType = split.getInput().getType();
  ArrayRef<int64_t> kv = kvType.getShape();
  ArrayRef<int64_t> unit = split.getType().getShape();
  ArrayRef<int64_t> expanded = expand.getType().getShape();
  ArrayRef<int64_t> merged = merge.getType().getShape();
  // [b, g, s, d] -> [b, g, 1, s, d] -> [b, g, rep, s, d] -> [b, g*rep, s, d]
  if (kv.size() != 4 || unit.size() != 5 || merged.size() != 4 ||
      unit != ArrayRef<int64_t>{kv[0], kv[1], 1, kv[2], kv[3]} ||
      expanded[0] != kv[0] || expanded[1] != kv[1] || expanded[3] != kv[2] ||
      expanded[4] != kv[3] ||
      merged != ArrayRef<int64_t>{kv[0], kv[1] * expanded[2], kv[2], kv[3]})
    return std::nullopt;
  return std::make_pair(split.getInput(), expanded[2]);
}

/// Grouped-query attention written with repeated KV heads becomes attention
/// on the KV heads themselves, so the planner sees the smaller KV.
struct RaiseGroupedQuery : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp attention,
                                PatternRewriter &rewriter) const override {
    std::optional<std::pair<Value, int64_t>> k = unrepeatHeads(attention.getK());
    std::optional<std::pair<Value, int64_t>> v = unrepeatHeads(attention.getV());
    if (!k || !v || k->second != v->second || k->second == 1)
      return failure();
    rewriter.modifyOpInPlace(attention, [&] {
      attention.getKMutable().assign(k->first);
      attention.getVMutable().assign(v->first);
    });
    return success();
  }
};

struct WeftRaise : public weft::impl::WeftRaiseBase<WeftRaise> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<RaiseGeluErf, RaiseGeluTanh, RaiseSilu, RaiseLayerNorm,
                 RaiseRMSNorm, RaiseLinear, RaiseLinearBias, RaiseAttention,
                 RaiseGroupedQuery>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      getOperation()->emitWarning("weft-raise did not reach a fixed point");
  }
};

} // namespace

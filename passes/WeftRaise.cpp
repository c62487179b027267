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
#include <limits>

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
    // (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps), or the centered
    // value times (1 / sqrt(...)) (torch.rsqrt's export).
    auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
    if (!sqrt)
      return failure();
    Value normalizedValue = div.getResult();
    auto centered = div.getLhs().getDefiningOp<SubOp>();
    if (!centered && isConstant(div.getLhs(), 1.0))
      if (auto mul = soleUser<MulOp>(div.getResult())) {
        centered = otherOperand(mul, div.getResult()).getDefiningOp<SubOp>();
        normalizedValue = mul.getResult();
      }
    if (!centered)
      return failure();
    auto mean = centered.getRhs().getDefiningOp<ReduceMeanOp>();
    Value x = centered.getLhs();
    if (!mean || mean.getInput() != x ||
        x.getType() != normalizedValue.getType())
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
      Affine affine = matchAffine(normalizedValue, normalized);
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
    if (matmul.getTransposeLhs() || matmul.getLhs().getType().getRank() < 2)
      return failure();
    Value weight = matmul.getRhs();
    bool transposed = matmul.getTransposeRhs();
    // Training exports (no constant folding) keep Transpose(W) before the
    // MatMul of nn.Linear.
    if (auto transpose = weight.getDefiningOp<TransposeOp>();
        transpose && isWeight(transpose.getInput(), 2) &&
        transpose.getPermutation() == ArrayRef<int64_t>{1, 0}) {
      weight = transpose.getInput();
      transposed = !transposed;
    }
    if (!isWeight(weight, 2))
      return failure();
    rewriter.replaceOpWithNewOp<LinearOp>(matmul, matmul.getLhs(), weight,
                                          Value(), transposed);
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

/// Whether the softmax patterns record why they did not match.
using Explanations = llvm::DenseMap<Operation *, std::string>;

/// "'weft.where' (node '/h.0/attn/Where')", naming the ONNX node an op came
/// from when its location says.
std::string describe(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "'" << op->getName() << "'";
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location part : fused.getLocations())
      if (isa<NameLoc>(part)) {
        loc = part;
        break;
      }
  if (auto name = dyn_cast<NameLoc>(loc))
    os << " (node '" << name.getName().getValue() << "')";
  return text;
}

std::string describe(Value value) {
  if (Operation *op = value.getDefiningOp())
    return describe(op);
  return "a function argument";
}

/// A float-to-float cast's input (softmax in f32 with casts around it).
Value throughCast(Value value) {
  if (auto cast = value.getDefiningOp<CastOp>())
    if (isa<FloatType>(getElementTypeOrSelf(cast.getInput().getType())) &&
        isa<FloatType>(getElementTypeOrSelf(cast.getType())))
      return cast.getInput();
  return value;
}

/// True if `value` is computed from a matmul through scaling, masking, casts
/// and reshapes (merged heads taken apart): the scores side of a masked sum,
/// as opposed to the mask.
bool reachesProduct(Value value, int depth = 8) {
  Operation *op = value.getDefiningOp();
  if (!op || depth == 0)
    return false;
  if (isa<MatmulOp>(op))
    return true;
  if (!isa<MulOp, DivOp, AddOp, SubOp, WhereOp, CastOp, MaximumOp, MinimumOp,
           ReshapeOp, TanhOp>(op))
    return false;
  return llvm::any_of(op->getOperands(),
                      [&](Value v) { return reachesProduct(v, depth - 1); });
}

/// The elements of a constant (or a broadcast of one).
DenseElementsAttr constantElements(Value value) {
  if (auto broadcast = value.getDefiningOp<BroadcastToOp>())
    value = broadcast.getInput();
  auto constant = value.getDefiningOp<ConstantOp>();
  return constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                  : DenseElementsAttr();
}

/// True if `value` is a constant mask (or a top-left window of one) whose
/// last two dimensions keep the lower triangle including the diagonal and
/// mask the rest, the same in every leading position: a causal mask aligned
/// at the top left. A boolean
/// mask keeps where it equals `trueKeeps`; an additive one keeps where it is
/// 0 and masks where it is -1e4 or less (-inf, finfo.min, -1e9).
bool isCausalMask(Value value, bool trueKeeps = true) {
  // A window of a causal mask that starts at its top left corner, in unit
  // steps, is causal: HF's GPT-2 slices its max-positions x max-positions
  // tril buffer to [:s, :s] (a buffer too large to fold into a constant).
  if (auto slice = value.getDefiningOp<SliceOp>()) {
    ArrayRef<int64_t> starts = slice.getStarts();
    int64_t rank = static_cast<int64_t>(starts.size());
    std::optional<ArrayRef<int64_t>> strides = slice.getStrides();
    bool unit = !strides || llvm::all_of(strides->take_back(2),
                                         [](int64_t s) { return s == 1; });
    if (rank >= 2 && starts[rank - 2] == 0 && starts[rank - 1] == 0 && unit)
      return isCausalMask(slice.getInput(), trueKeeps);
    return false;
  }
  DenseElementsAttr elements = constantElements(value);
  if (!elements)
    return false;
  auto type = cast<RankedTensorType>(elements.getType());
  if (type.getRank() < 2)
    return false;
  int64_t rows = type.getDimSize(type.getRank() - 2), cols = type.getShape().back();
  if (rows < 2 || cols < 2)
    return false;
  auto at = [&](int64_t i, bool keep) {
    int64_t col = i % cols, row = (i / cols) % rows;
    return keep == (col <= row);
  };
  int64_t i = 0;
  if (elements.getElementType().isInteger(1)) {
    for (bool element : elements.getValues<bool>())
      if (!at(i++, element == trueKeeps))
        return false;
    return true;
  }
  if (!isa<FloatType>(elements.getElementType()))
    return false;
  for (APFloat v : elements.getValues<APFloat>()) {
    double d = v.convertToDouble();
    if ((d != 0.0 && d > -1e4) || !at(i++, d == 0.0))
      return false;
  }
  return true;
}

/// A large negative fill: masked scores are -1e4 or less (-inf, finfo.min).
bool isMaskFill(Value value) {
  std::optional<double> fill = splatValue(value);
  return fill && *fill <= -1e4;
}

/// What a softmax turns out to be part of: softmax(scale · q kᵀ [masked]) · v.
struct AttentionMatch {
  MatmulOp output;
  Value q, k, v;
  /// Set when kᵀ was given as a transpose; k is then its input, permuted.
  TransposeOp keyTranspose;
  /// Batch and heads merged into one dimension ([b·h, l, d] operands, as
  /// nn.MultiheadAttention and bmm-based code write it); `k` is then kᵀ.
  bool merged = false;
  double scale = 1.0;
  bool causal = false;
  /// The keys each query sees where a mask keeps a sliding window of them
  /// (0: no window).
  int64_t window = 0;
  /// Causal attention within `band` keys (0: all keys up to the query).
  void addCausalBand(int64_t band) {
    causal = true;
    if (band > 0)
      window = window > 0 ? std::min(window, band) : band;
  }
  /// The masks the scores carry besides a causal one (BLOOM's: an ALiBi bias
  /// and a padding mask), which weft.attention takes as one.
  struct Mask {
    Value value;
    /// Boolean, and masks where it is true (where(m, -inf, s)).
    bool invert = false;
    /// Applied to scores of merged batch·heads ([1 or b·h, l, s]).
    bool merged = false;
    /// Set for a boolean mask that the model applied as a bias (0 where it
    /// keeps, this fill where it masks), which stays one: a finite fill
    /// (finfo.min) leaves a row that masks every key finite, as the model's.
    Value biasFill;
  };
  SmallVector<Mask, 2> masks;
  /// The fill of a boolean mask (where(keep, s, fill)), which masks that
  /// are combined keep.
  Value fill;
  std::optional<double> dropout;
  /// Soft-capping of the scaled scores before the masks (Gemma 2's
  /// softcap · tanh(s / softcap)).
  std::optional<double> softcap;
  /// Scales of the scores that are no constant but the same for every
  /// query and key of a head (cosine attention's learned temperature, [1 or
  /// b, h, 1, 1]): they multiply (or, `divides`, divide) q instead.
  struct QueryScale {
    Value factor;
    bool divides = false;
  };
  SmallVector<QueryScale, 1> queryScales;
};

/// If `value` is `x * f`, `f * x` or `x / f` with f a tensor that is the same
/// for every query and key ([..., 1, 1], broadcasting to the rank-4 scores)
/// and not computed from `scores`' own ops, returns x and the scale.
std::optional<std::pair<Value, AttentionMatch::QueryScale>>
perHeadScaled(Value value, int64_t scoresRank) {
  Operation *op = value.getDefiningOp();
  if (!op || scoresRank != 4 || !isa<MulOp, DivOp>(op))
    return std::nullopt;
  auto perHead = [&](Value factor) {
    auto type = dyn_cast<RankedTensorType>(factor.getType());
    if (!type || type.getRank() < 2 || type.getRank() > 4 ||
        type.getShape().take_back(2) != ArrayRef<int64_t>{1, 1} ||
        !isa<FloatType>(type.getElementType()))
      return false;
    // Not the scores' own statistics: nothing that reads a product of rank
    // 4 (q·kᵀ) within a few ops.
    SmallVector<Value, 8> work{factor};
    for (int steps = 0; !work.empty() && steps < 32; ++steps) {
      Value next = work.pop_back_val();
      Operation *def = next.getDefiningOp();
      if (!def)
        continue;
      if (auto product = dyn_cast<MatmulOp>(def);
          product && product.getType().getRank() == 4)
        return false;
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    return work.empty();
  };
  if (auto div = dyn_cast<DivOp>(op)) {
    if (perHead(div.getRhs()) && !perHead(div.getLhs()))
      return std::make_pair(div.getLhs(),
                            AttentionMatch::QueryScale{div.getRhs(), true});
    return std::nullopt;
  }
  auto mul = cast<MulOp>(op);
  for (auto [x, factor] : {std::pair{mul.getLhs(), mul.getRhs()},
                           std::pair{mul.getRhs(), mul.getLhs()}})
    if (perHead(factor) && !perHead(x))
      return std::make_pair(x, AttentionMatch::QueryScale{factor, false});
  return std::nullopt;
}

/// If `value` is `c · tanh(x / c)` (any order of the product, the division
/// by c written as a product with 1/c), returns x and c.
std::optional<std::pair<Value, double>> softCapped(Value value) {
  std::optional<std::pair<Value, double>> outer = scaledBy(value);
  if (!outer || !(outer->second > 0))
    return std::nullopt;
  auto tanh = outer->first.getDefiningOp<TanhOp>();
  if (!tanh)
    return std::nullopt;
  std::optional<std::pair<Value, double>> inner = scaledBy(tanh.getInput());
  double cap = outer->second;
  // The two constants are one cap in f32 (1/c rounds, as does c).
  if (!inner || std::abs(inner->second * cap - 1.0) > 1e-5)
    return std::nullopt;
  return std::make_pair(inner->first, cap);
}

/// How a mask's elements read: a boolean that keeps where true (or where
/// false), or an additive float (0 keeps, -1e4 or less masks).
enum class MaskReading { KeepTrue, KeepFalse, Additive };

/// If `value`, read as `reading`, keeps a causal band of keys (each query
/// itself and keys before it: a causal mask, constant or computed, or a
/// sliding window), the band's window: 0 for none (causal), else the keys
/// each query sees. Defined with keepBand below.
std::optional<int64_t> causalBand(Value value, MaskReading reading);

/// The reading of a boolean mask that keeps where it is `trueKeeps`.
MaskReading booleanReading(bool trueKeeps) {
  return trueKeeps ? MaskReading::KeepTrue : MaskReading::KeepFalse;
}

/// `mask`, a boolean mask, as a causal band (its window, 0 for none) and the
/// rest of it, if it is one combined with a causal mask or sliding window
/// (BLOOM's `causal | padding`, Mistral's window and padding: Or, or And of
/// keep-masks, which the importer writes as where(a, a, b) and where(a, b,
/// a)); `invert` says whether true masks.
std::optional<std::pair<Value, int64_t>> factorCausal(Value mask, bool invert) {
  auto where = mask.getDefiningOp<WhereOp>();
  if (!where)
    return std::nullopt;
  Value cond = where.getCondition();
  // Or(a, b) = where(a, a, b) masks where either does (true masks); And(a, b)
  // = where(a, b, a) keeps where both do (true keeps).
  Value other = invert ? (where.getLhs() == cond ? where.getRhs() : Value())
                       : (where.getRhs() == cond ? where.getLhs() : Value());
  if (!other)
    return std::nullopt;
  MaskReading reading = booleanReading(!invert);
  if (std::optional<int64_t> window = causalBand(cond, reading))
    return std::make_pair(other, *window);
  if (std::optional<int64_t> window = causalBand(other, reading))
    return std::make_pair(cond, *window);
  return std::nullopt;
}

/// How a [b·h, l, d] operand of merged-heads attention (or a [b·h, d, l]
/// kᵀ) comes from a tensor with batch and heads apart: a reshape of
/// [b, h, l, d] (`seqFirst` false), or nn.MultiheadAttention's
/// transpose(reshape([l, b, h·d] -> [l, b·h, d])) (`seqFirst` true).
struct MergedHeads {
  Value source;
  bool seqFirst;
  int64_t batch, heads;
  /// For a key: `source` is k itself ([b, h, l, d]), merged and then
  /// transposed (bmm(q, k.reshape(b·h, l, d).transpose(1, 2))), rather than kᵀ.
  bool sourceIsKey = false;
};

std::optional<MergedHeads> matchMergedHeads(Value value, bool keyTransposed) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() != 3)
    return std::nullopt;
  if (auto reshape = value.getDefiningOp<ReshapeOp>()) {
    ArrayRef<int64_t> apart = reshape.getInput().getType().getShape();
    if (apart.size() == 4 && apart[0] * apart[1] == type.getDimSize(0) &&
        apart.drop_front(2) == type.getShape().drop_front())
      return MergedHeads{reshape.getInput(), false, apart[0], apart[1]};
    return std::nullopt;
  }
  auto transpose = value.getDefiningOp<TransposeOp>();
  if (keyTransposed && transpose &&
      transpose.getPermutation() == ArrayRef<int64_t>{0, 2, 1})
    if (std::optional<MergedHeads> key =
            matchMergedHeads(transpose.getInput(), false);
        key && !key->seqFirst) {
      key->sourceIsKey = true;
      return key;
    }
  auto reshape =
      transpose ? transpose.getInput().getDefiningOp<ReshapeOp>() : ReshapeOp();
  if (!reshape || transpose.getPermutation() !=
                      (keyTransposed ? ArrayRef<int64_t>{1, 2, 0}
                                     : ArrayRef<int64_t>{1, 0, 2}))
    return std::nullopt;
  ArrayRef<int64_t> seq = reshape.getInput().getType().getShape();
  ArrayRef<int64_t> merged = reshape.getType().getShape();
  // [l, b, h·d] -> [l, b·h, d]
  if (seq.size() != 3 || merged.size() != 3 || seq[0] != merged[0] ||
      seq[1] == 0 || merged[1] % seq[1] != 0 ||
      (merged[1] / seq[1]) * merged[2] != seq[2])
    return std::nullopt;
  return MergedHeads{reshape.getInput(), true, seq[1], merged[1] / seq[1]};
}

/// The [b, h, l, d] tensor (k, not kᵀ, for a key) of a matched operand.
Value unmergeHeads(PatternRewriter &rewriter, Location loc,
                   const MergedHeads &heads, bool keyTransposed,
                   SmallVectorImpl<Operation *> &created) {
  Value value = heads.source;
  if (heads.seqFirst) {
    ArrayRef<int64_t> seq = cast<RankedTensorType>(value.getType()).getShape();
    auto type =
        cast<RankedTensorType>(value.getType())
            .clone({seq[0], heads.batch, heads.heads, seq[2] / heads.heads});
    value = ReshapeOp::create(rewriter, loc, type, value);
    created.push_back(value.getDefiningOp());
    value = TransposeOp::create(rewriter, loc, value,
                                ArrayRef<int64_t>{1, 2, 0, 3});
    created.push_back(value.getDefiningOp());
    return value;
  }
  if (keyTransposed && !heads.sourceIsKey) {
    value = TransposeOp::create(rewriter, loc, value,
                                ArrayRef<int64_t>{0, 1, 3, 2});
    created.push_back(value.getDefiningOp());
  }
  return value;
}

/// Recognises attention by what the ops around a softmax compute, whatever
/// order exporters wrote them in: the probabilities (maybe cast back from
/// f32, maybe through dropout) multiply v; the scores are q·kᵀ scaled by a
/// constant (after the product, on q, on kᵀ, or split over both), maybe
/// soft-capped (c · tanh(s / c)), masked by where(keep, s, -big),
/// where(drop, -big, s) or s + bias in any nesting, and maybe cast to f32.
/// On failure, `why` names the op that stopped it.
FailureOr<AttentionMatch> matchAttention(SoftmaxOp softmax, std::string &why) {
  auto fail = [&](const llvm::Twine &reason) {
    why = reason.str();
    return failure();
  };
  auto scoresType = softmax.getType();
  int64_t rank = scoresType.getRank();
  if (rank != 4 && rank != 3)
    return fail("the scores have rank " + llvm::Twine(rank) +
                ", not [batch, heads, queries, keys] (or [batch·heads, "
                "queries, keys])");
  if (softmax.getAxis() != uint64_t(rank - 1))
    return fail("the softmax is not over the last (key) dimension");
  AttentionMatch match;
  match.merged = rank == 3;
  Value probs = softmax.getResult();
  if (auto cast = soleUser<CastOp>(probs))
    if (throughCast(cast.getResult()) == probs)
      probs = cast.getResult();
  if (auto dropout = soleUser<DropoutOp>(probs)) {
    match.dropout = dropout.getRatio().convertToDouble();
    probs = dropout.getResult();
  }
  // [b, h, l, s] probabilities whose batch and heads merge for a product
  // with [b·h, s, d] values (BLOOM's bmm), as their scores came apart from
  // a merged product (below).
  bool probsMerged = false;
  if (auto merge = soleUser<ReshapeOp>(probs); merge && rank == 4) {
    ArrayRef<int64_t> apart = scoresType.getShape();
    if (merge.getType().getShape() ==
        ArrayRef<int64_t>{apart[0] * apart[1], apart[2], apart[3]}) {
      probsMerged = true;
      probs = merge.getResult();
    }
  }
  match.output = soleUser<MatmulOp>(probs);
  if (!match.output || match.output.getLhs() != probs ||
      match.output.getTransposeLhs() || match.output.getTransposeRhs()) {
    if (!probs.hasOneUse())
      return fail(
          "the probabilities have " +
          llvm::Twine(std::distance(probs.use_begin(), probs.use_end())) +
          " uses, not one product with V");
    return fail("the probabilities are used by " +
                describe(*probs.getUsers().begin()) + ", not as P in P·V");
  }
  match.v = match.output.getRhs();

  // Peel masks and scales off the scores until the product q·kᵀ.
  Value scores = throughCast(softmax.getInput());
  // Peeling goes from the softmax inwards: a scale met before a mask is
  // applied after it.
  bool scaledOutside = false;
  auto takeMask = [&](Value mask, bool invert) -> LogicalResult {
    if (match.masks.size() == 2)
      return fail("the scores carry three masks that are not causal (" +
                  describe(match.masks[0].value) + ", " +
                  describe(match.masks[1].value) + " and " + describe(mask) +
                  ")");
    match.masks.push_back({mask, invert, match.merged, /*biasFill=*/Value()});
    return success();
  };
  for (int depth = 0; depth < 10 && !scores.getDefiningOp<MatmulOp>();
       ++depth) {
    Operation *op = scores.getDefiningOp();
    if (!op)
      return fail("the scores are a function argument, not q·kᵀ");
    // Scores of merged batch·heads, [b·h, l, s], taken apart to [b, h, l, s]
    // (BLOOM: the ALiBi bias is added to the merged product, the padding
    // and causal masks to the scores apart).
    if (auto apart = dyn_cast<ReshapeOp>(op);
        apart && probsMerged && !match.merged) {
      ArrayRef<int64_t> dims = scoresType.getShape();
      if (apart.getInput().getType().getShape() !=
          ArrayRef<int64_t>{dims[0] * dims[1], dims[2], dims[3]})
        return fail(describe(op) + " does not take the scores' batch·heads "
                                   "apart");
      match.merged = true;
      scores = apart.getInput();
      continue;
    }
    // weft.attention caps the scores before it masks them (Gemma 2,
    // FlashAttention); a cap over masked scores leaves a hidden key at -cap,
    // not -inf, and is not that.
    if (match.softcap && isa<WhereOp, AddOp>(op))
      return fail(describe(op) + " masks the scores before they are "
                                 "soft-capped; weft.attention caps them "
                                 "before any mask");
    if (auto where = dyn_cast<WhereOp>(op)) {
      bool keepsTrue;
      if (isMaskFill(where.getRhs()) && reachesProduct(where.getLhs())) {
        keepsTrue = true;
        scores = where.getLhs();
      } else if (isMaskFill(where.getLhs()) && reachesProduct(where.getRhs())) {
        keepsTrue = false;
        scores = where.getRhs();
      } else {
        return fail(describe(op) +
                    " selects between values neither of which is a constant "
                    "fill of -1e4 or less, so it is not a mask");
      }
      match.fill = keepsTrue ? where.getRhs() : where.getLhs();
      if (std::optional<int64_t> band =
              causalBand(where.getCondition(), booleanReading(keepsTrue))) {
        match.addCausalBand(*band);
      } else if (std::optional<std::pair<Value, int64_t>> rest =
                     factorCausal(where.getCondition(), !keepsTrue)) {
        match.addCausalBand(rest->second);
        if (failed(takeMask(rest->first, !keepsTrue)))
          return failure();
      } else if (failed(takeMask(where.getCondition(), !keepsTrue))) {
        return failure();
      }
      continue;
    }
    if (auto add = dyn_cast<AddOp>(op)) {
      bool lhsScores = reachesProduct(add.getLhs()),
           rhsScores = reachesProduct(add.getRhs());
      if (lhsScores == rhsScores)
        return fail(describe(op) +
                    (lhsScores ? " adds two products" : " adds no product") +
                    ", so it is not scores plus a mask");
      Value bias = lhsScores ? add.getRhs() : add.getLhs();
      scores = lhsScores ? add.getLhs() : add.getRhs();
      if (!isa<FloatType>(getElementTypeOrSelf(bias.getType())))
        return fail(describe(op) + " adds a non-float bias");
      // A boolean mask made a bias, where(m, fill, 0) or where(m, 0, fill)
      // (nn.MultiheadAttention's causal | key padding mask, made float for
      // baddbmm): the boolean mask, from which a causal one factors out.
      // Where the other side is a causal bias instead of 0 (transformers'
      // AttentionMaskConverter since 4.36: the causal bias filled with
      // finfo.min where the padding masks), the attention is causal too.
      // (A scale applied after it would scale the fill: the bias is then
      // refused below, as any.)
      if (auto where = bias.getDefiningOp<WhereOp>(); where && !scaledOutside) {
        auto isZero = [](Value v) {
          std::optional<double> value = splatValue(v);
          return value && *value == 0.0;
        };
        auto isZeroOrCausal = [&](Value v) {
          return isZero(v) || causalBand(v, MaskReading::Additive);
        };
        std::optional<bool> keepsTrue;
        if (isMaskFill(where.getLhs()) && isZeroOrCausal(where.getRhs()))
          keepsTrue = false;
        else if (isMaskFill(where.getRhs()) && isZeroOrCausal(where.getLhs()))
          keepsTrue = true;
        if (keepsTrue) {
          Value cond = where.getCondition();
          Value fill = *keepsTrue ? where.getRhs() : where.getLhs();
          Value kept = *keepsTrue ? where.getLhs() : where.getRhs();
          bool otherCausal = !isZero(kept);
          if (otherCausal)
            match.addCausalBand(*causalBand(kept, MaskReading::Additive));
          if (std::optional<int64_t> band =
                  causalBand(cond, booleanReading(*keepsTrue))) {
            match.addCausalBand(*band);
            continue;
          }
          Value rest = cond;
          if (std::optional<std::pair<Value, int64_t>> factored =
                  factorCausal(cond, !*keepsTrue)) {
            match.addCausalBand(factored->second);
            rest = factored->first;
          }
          if (rest == cond && !otherCausal) {
            // Nothing factors out: the bias is the mask, as it is.
            if (failed(takeMask(bias, false)))
              return failure();
            continue;
          }
          if (failed(takeMask(rest, !*keepsTrue)))
            return failure();
          match.masks.back().biasFill = fill;
          continue;
        }
      }
      if (std::optional<int64_t> band =
              causalBand(bias, MaskReading::Additive)) {
        match.addCausalBand(*band);
        continue;
      }
      // A scale applied after an additive mask scales the mask too.
      if (scaledOutside)
        return fail(describe(op) +
                    " adds a mask that a later scale multiplies");
      if (failed(takeMask(bias, false)))
        return failure();
      continue;
    }
    if (std::optional<std::pair<Value, double>> capped = softCapped(scores)) {
      if (!match.queryScales.empty())
        return fail(describe(op) + " soft-caps scores that a learned scale "
                                   "multiplies after the cap");
      if (match.softcap)
        return fail(describe(op) + " soft-caps scores that are soft-capped "
                                   "already");
      // A scale a met outside the cap c makes one cap: a·c·tanh(x/c) =
      // (a·c)·tanh(a·x / (a·c)), and a goes on into the scale as any.
      match.softcap = capped->second * match.scale;
      scores = capped->first;
      continue;
    }
    if (std::optional<std::pair<Value, double>> scaled = scaledBy(scores)) {
      if (scaled->second <= 0)
        return fail(describe(op) + " scales the scores by " +
                    std::to_string(scaled->second) + ", which is not positive");
      scaledOutside = true;
      match.scale *= scaled->second;
      scores = scaled->first;
      continue;
    }
    if (auto scaled = perHeadScaled(scores, rank); scaled && !match.merged) {
      scaledOutside = true;
      match.queryScales.push_back(scaled->second);
      scores = scaled->first;
      continue;
    }
    if (auto cast = dyn_cast<CastOp>(op);
        cast && throughCast(scores) != scores) {
      scores = throughCast(scores);
      continue;
    }
    return fail("the scores come from " + describe(op) +
                ", which is neither q·kᵀ, a scale (constant, or per head: "
                "[..., 1, 1]) nor a mask");
  }
  auto qk = scores.getDefiningOp<MatmulOp>();
  if (!qk)
    return fail("the scores are not a product q·kᵀ");
  if (probsMerged && !match.merged)
    return fail("the probabilities' batch and heads merge for the product "
                "with V, but the scores' were never merged");
  if (qk.getTransposeLhs())
    return fail(describe(qk.getOperation()) +
                " transposes its left operand; q·kᵀ does not");
  match.q = qk.getLhs();
  if (std::optional<std::pair<Value, double>> scaled = scaledBy(match.q);
      scaled && scaled->second > 0 && match.q.hasOneUse()) {
    match.scale *= scaled->second;
    match.q = scaled->first;
  }
  Value k = qk.getRhs();
  if (std::optional<std::pair<Value, double>> scaled = scaledBy(k);
      scaled && scaled->second > 0 && k.hasOneUse()) {
    match.scale *= scaled->second;
    k = scaled->first;
  }
  if (match.merged) {
    match.k = k;
    if (qk.getTransposeRhs())
      return fail(describe(qk.getOperation()) +
                  " transposes k inside the product of merged heads");
    for (auto [operand, keyTransposed] :
         {std::pair{match.q, false}, std::pair{k, true},
          std::pair{match.v, false}})
      if (!matchMergedHeads(operand, keyTransposed))
        return fail(
            "the merged batch·heads operand " + describe(operand) +
            " is not a reshape of [batch, heads, seq, head_dim] nor "
            "nn.MultiheadAttention's [seq, batch·heads, head_dim] view");
    return match;
  }
  if (!qk.getTransposeRhs()) {
    // kᵀ = transpose(x, P) for any P (exporters fuse the head permute
    // with the transpose), so k = transpose(x, P with its last two swapped).
    match.keyTranspose = k.getDefiningOp<TransposeOp>();
    if (!match.keyTranspose || match.keyTranspose.getPermutation().size() != 4)
      return fail("kᵀ comes from " + describe(k) +
                  ", not from a transpose of k");
  } else {
    match.k = k;
  }
  for (Value operand :
       {match.q, match.keyTranspose ? match.keyTranspose.getInput() : k,
        match.v})
    if (cast<RankedTensorType>(operand.getType()).getRank() != 4)
      return fail("q, k or v (" + describe(operand) + ") is not rank 4");
  return match;
}

struct RaiseAttention : OpRewritePattern<SoftmaxOp> {
  RaiseAttention(MLIRContext *context, Explanations *explanations)
      : OpRewritePattern(context), explanations(explanations) {}

  LogicalResult matchAndRewrite(SoftmaxOp softmax,
                                PatternRewriter &rewriter) const override {
    std::string why;
    FailureOr<AttentionMatch> found = matchAttention(softmax, why);
    if (failed(found))
      return explain(softmax, why);
    AttentionMatch &match = *found;
    rewriter.setInsertionPoint(match.output);
    SmallVector<Operation *> created;
    Value q = match.q, k = match.k, v = match.v;
    Type resultType = match.output.getType();
    std::optional<MergedHeads> mergedQuery;
    if (match.merged) {
      mergedQuery = matchMergedHeads(q, false);
      Location loc = match.output.getLoc();
      q = unmergeHeads(rewriter, loc, *mergedQuery, false, created);
      k = unmergeHeads(rewriter, loc, *matchMergedHeads(k, true), true,
                       created);
      v = unmergeHeads(rewriter, loc, *matchMergedHeads(v, false), false,
                       created);
      auto qType = cast<RankedTensorType>(q.getType());
      resultType = qType.clone(
          {qType.getDimSize(0), qType.getDimSize(1), qType.getDimSize(2),
           cast<RankedTensorType>(v.getType()).getDimSize(3)});
    }
    if (match.keyTranspose) {
      ArrayRef<int64_t> perm = match.keyTranspose.getPermutation();
      SmallVector<int64_t> keyPerm{perm[0], perm[1], perm[3], perm[2]};
      k = TransposeOp::create(rewriter, match.keyTranspose.getLoc(),
                              match.keyTranspose.getInput(), keyPerm);
      created.push_back(k.getDefiningOp());
    }
    // A per-head scale of the scores scales q (softmax(t q·kᵀ) =
    // softmax((t q)·kᵀ)): [1 or b, h, 1, 1] broadcasts over its positions
    // and width.
    for (const AttentionMatch::QueryScale &scale : match.queryScales) {
      auto qType = cast<RankedTensorType>(q.getType());
      auto factorType = cast<RankedTensorType>(scale.factor.getType());
      ArrayRef<int64_t> qShape = qType.getShape(),
                        shape = factorType.getShape();
      bool fits = factorType.getElementType() == qType.getElementType() &&
                  shape.size() <= qShape.size();
      for (size_t i = 1; fits && i <= shape.size(); ++i)
        fits = shape[shape.size() - i] == 1 ||
               shape[shape.size() - i] == qShape[qShape.size() - i];
      if (!fits) {
        for (Operation *op : llvm::reverse(created))
          rewriter.eraseOp(op);
        return explain(softmax, "the scores' per-head scale " +
                                    describe(scale.factor) +
                                    " does not broadcast over q");
      }
    }
    for (const AttentionMatch::QueryScale &scale : match.queryScales) {
      Location loc = match.output.getLoc();
      Value factor = scale.factor;
      q = scale.divides ? DivOp::create(rewriter, loc, q, factor).getResult()
                        : MulOp::create(rewriter, loc, q, factor).getResult();
      created.push_back(q.getDefiningOp());
    }
    Value mask;
    if (FailureOr<Value> combined = combineMasks(rewriter, match, q, created);
        succeeded(combined))
      mask = *combined;
    else
      return explain(softmax, "the scores' masks do not combine (a mask "
                              "with its own batch·heads that are not q's)");
    auto attention = AttentionOp::create(
        rewriter, match.output.getLoc(), resultType, q, k, v, mask, Value(),
        rewriter.getF32FloatAttr(static_cast<float>(match.scale)),
        match.causal ? rewriter.getUnitAttr() : UnitAttr(),
        match.dropout && *match.dropout > 0
            ? rewriter.getF64FloatAttr(*match.dropout)
            : FloatAttr(),
        match.softcap ? rewriter.getF32FloatAttr(float(*match.softcap))
                      : FloatAttr(),
        // A window as wide as the sequence is none (query i sees i + 1
        // keys).
        match.window > 0 &&
                match.window <
                    std::min(cast<RankedTensorType>(q.getType()).getDimSize(2),
                             cast<RankedTensorType>(k.getType()).getDimSize(2))
            ? rewriter.getI64IntegerAttr(match.window)
            : IntegerAttr());
    // Shapes that only look like attention (a mask that does not broadcast,
    // heads that do not group) are left alone.
    LogicalResult valid = success();
    {
      ScopedDiagnosticHandler quiet(getContext(), [&](Diagnostic &diag) {
        why = "the parts do not form a valid weft.attention: " + diag.str();
        return success();
      });
      valid = verify(attention, /*verifyRecursively=*/false);
    }
    if (failed(valid)) {
      rewriter.eraseOp(attention);
      for (Operation *op : llvm::reverse(created))
        rewriter.eraseOp(op);
      return explain(softmax, why);
    }
    if (!match.merged) {
      rewriter.replaceOp(match.output, attention.getResult());
      return success();
    }
    // Back to merged heads for the ops that follow. nn.MultiheadAttention
    // then writes transpose(out, [1, 0, 2]) and a reshape to [l·b, h·d] (or
    // [l, b, h·d]): that is transpose(attention, [2, 0, 1, 3]) reshaped,
    // with heads kept apart so that splitting them needs no gather.
    Value out = attention.getResult();
    if (auto back = soleUser<TransposeOp>(match.output.getResult());
        back && mergedQuery->seqFirst &&
        back.getPermutation() == ArrayRef<int64_t>{1, 0, 2})
      if (auto flat = soleUser<ReshapeOp>(back.getResult())) {
        Value seqFirst = TransposeOp::create(rewriter, back.getLoc(), out,
                                             ArrayRef<int64_t>{2, 0, 1, 3});
        rewriter.setInsertionPoint(flat);
        rewriter.replaceOpWithNewOp<ReshapeOp>(flat, flat.getType(), seqFirst);
        rewriter.eraseOp(back);
        rewriter.eraseOp(match.output);
        return success();
      }
    rewriter.replaceOpWithNewOp<ReshapeOp>(match.output, match.output.getType(),
                                           out);
    return success();
  }

private:
  /// The match's masks as one mask of weft.attention ([.., l, s], keeping
  /// where true or adding a bias): each in the keep form, as [1 or b, 1 or
  /// h, l, s] where it applied to merged heads; boolean masks combined by
  /// And, biases by Add, and a boolean mask with a bias as the bias where
  /// it keeps and the scores' own fill where it masks.
  static FailureOr<Value> combineMasks(PatternRewriter &rewriter,
                                       const AttentionMatch &match, Value q,
                                       SmallVectorImpl<Operation *> &created) {
    Value keep, bias;
    for (const AttentionMatch::Mask &part : match.masks) {
      Value mask = part.value;
      Location loc = mask.getLoc();
      if (part.invert) {
        // where(m, -big, s) keeps where m is false: the mask is m == false.
        Value falses = ConstantOp::create(
            rewriter, loc,
            DenseElementsAttr::get(
                RankedTensorType::get({}, rewriter.getI1Type()), false));
        created.push_back(falses.getDefiningOp());
        mask = CompareOp::create(rewriter, loc, ComparePredicate::eq, mask,
                                 falses);
        created.push_back(mask.getDefiningOp());
      }
      if (part.biasFill) {
        // 0 where it keeps, the model's fill where it masks.
        Value zero = ConstantOp::create(
            rewriter, loc,
            DenseElementsAttr::get(
                RankedTensorType::get(
                    {}, getElementTypeOrSelf(part.biasFill.getType())),
                rewriter.getZeroAttr(
                    getElementTypeOrSelf(part.biasFill.getType()))));
        created.push_back(zero.getDefiningOp());
        mask = WhereOp::create(rewriter, loc, mask, zero, part.biasFill);
        created.push_back(mask.getDefiningOp());
      }
      auto maskType = cast<RankedTensorType>(mask.getType());
      if (part.merged && maskType.getRank() == 3) {
        // A [1 or b·h, l, s] mask of merged heads, as [1 or b, 1 or h, l, s].
        auto qType = cast<RankedTensorType>(q.getType());
        int64_t rows = maskType.getDimSize(0);
        if (rows != 1 && rows != qType.getDimSize(0) * qType.getDimSize(1))
          return failure();
        bool perHead = rows != 1;
        mask = ReshapeOp::create(
            rewriter, loc,
            maskType.clone({perHead ? qType.getDimSize(0) : 1,
                            perHead ? qType.getDimSize(1) : 1,
                            maskType.getDimSize(1), maskType.getDimSize(2)}),
            mask);
        created.push_back(mask.getDefiningOp());
      }
      Value &into =
          isa<FloatType>(getElementTypeOrSelf(mask.getType())) ? bias : keep;
      if (!into) {
        into = mask;
        continue;
      }
      // Two boolean masks keep where both do (And(a, b) = where(a, b, a));
      // two biases add.
      into = &into == &keep
                 ? WhereOp::create(rewriter, loc, into, mask, into).getResult()
                 : AddOp::create(rewriter, loc, into, mask).getResult();
      created.push_back(into.getDefiningOp());
    }
    if (!keep || !bias)
      return keep ? keep : bias;
    Value fill = match.fill;
    if (getElementTypeOrSelf(fill.getType()) !=
        getElementTypeOrSelf(bias.getType())) {
      fill = CastOp::create(rewriter, fill.getLoc(),
                            cast<RankedTensorType>(fill.getType())
                                .clone(getElementTypeOrSelf(bias.getType())),
                            fill);
      created.push_back(fill.getDefiningOp());
    }
    Value combined =
        WhereOp::create(rewriter, bias.getLoc(), keep, bias, fill).getResult();
    created.push_back(combined.getDefiningOp());
    return combined;
  }

  LogicalResult explain(SoftmaxOp softmax, const std::string &why) const {
    if (explanations)
      (*explanations)[softmax] = why;
    return failure();
  }
  Explanations *explanations;
};

/// The keys a mask keeps for each query: key j for query i exactly when
/// lo <= j - i <= hi, in every leading position (a causal mask is [-inf,
/// 0], a sliding window of W keys [1 - W, 0]).
struct KeepBand {
  static constexpr int64_t kOpen = std::numeric_limits<int64_t>::max() / 4;
  int64_t lo = -kOpen, hi = kOpen;
  KeepBand meet(KeepBand other) const {
    return {std::max(lo, other.lo), std::min(hi, other.hi)};
  }
};

/// Whether every element of `value` masks, read as `reading`.
bool masksEverywhere(Value value, MaskReading reading) {
  std::optional<double> splat = splatValue(value);
  if (!splat)
    return false;
  if (reading == MaskReading::Additive)
    return *splat <= -1e4;
  return (*splat != 0.0) == (reading == MaskReading::KeepFalse);
}

/// The band of keys a constant mask keeps, read as `reading`, if it keeps
/// exactly the keys of one band in every leading position: each diagonal
/// (j - i) of its last two dimensions keeps or masks whole, and the kept
/// diagonals are consecutive. A band that reaches the first or the last
/// diagonal is open on that side (a causal mask: [-inf, 0]; Mistral's
/// window of W keys: [1 - W, 0]; a boolean that masks the keys W and more
/// before each query, read as masking where true: [1 - W, +inf]).
std::optional<KeepBand> constantBand(Value value, MaskReading reading) {
  DenseElementsAttr elements = constantElements(value);
  if (!elements)
    return std::nullopt;
  auto type = cast<RankedTensorType>(elements.getType());
  if (type.getRank() < 2)
    return std::nullopt;
  int64_t rows = type.getDimSize(type.getRank() - 2),
          cols = type.getShape().back();
  if (rows < 2 || cols < 2)
    return std::nullopt;
  SmallVector<int8_t> keeps; // 1 keeps, 0 masks, -1 neither
  keeps.reserve(size_t(elements.getNumElements()));
  if (elements.getElementType().isInteger(1)) {
    if (reading == MaskReading::Additive)
      return std::nullopt;
    bool trueKeeps = reading == MaskReading::KeepTrue;
    for (bool element : elements.getValues<bool>())
      keeps.push_back(element == trueKeeps ? 1 : 0);
  } else if (isa<FloatType>(elements.getElementType()) &&
             reading == MaskReading::Additive) {
    for (APFloat v : elements.getValues<APFloat>()) {
      double d = v.convertToDouble();
      keeps.push_back(d == 0.0 ? 1 : d <= -1e4 ? 0 : -1);
    }
  } else {
    return std::nullopt;
  }
  // Diagonal d = j - i runs from 1 - rows to cols - 1: each keeps (1),
  // masks (0), or is not seen yet (-1).
  SmallVector<int8_t> diagonal(size_t(rows + cols - 1), -1);
  for (size_t n = 0; n < keeps.size(); ++n) {
    if (keeps[n] < 0)
      return std::nullopt;
    int64_t j = int64_t(n) % cols, i = (int64_t(n) / cols) % rows;
    int8_t &d = diagonal[size_t(j - i + rows - 1)];
    if (d >= 0 && d != keeps[n])
      return std::nullopt;
    d = keeps[n];
  }
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < int64_t(diagonal.size()); ++d)
    if (diagonal[size_t(d)] == 1) {
      if (first < 0)
        first = d;
      else if (last != d - 1)
        return std::nullopt; // kept diagonals with a gap
      last = d;
    }
  if (first < 0)
    return std::nullopt; // masks everything
  KeepBand band;
  band.lo = first == 0 ? -KeepBand::kOpen : first - (rows - 1);
  band.hi = last == int64_t(diagonal.size()) - 1 ? KeepBand::kOpen
                                                 : last - (rows - 1);
  return band;
}

/// The band of keys `value` keeps, read as `reading`, where it is made of
/// splats, triangles of them (weft.trilu) and their And, Or, Not, sums and
/// selections -- what a causal or sliding-window mask computed at run time
/// is (torch.triu(torch.full((s, s), -inf), 1) exported with dynamic axes:
/// at 32K tokens it does not fold into a constant) -- or a constant causal
/// or sliding-window mask. A layer's argument is read as what the layer
/// was given.
std::optional<KeepBand> keepBand(Value value, MaskReading reading,
                                 int depth = 12) {
  using Band = KeepBand;
  if (depth == 0)
    return std::nullopt;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto layer = dyn_cast_or_null<LayerOp>(arg.getOwner()->getParentOp());
    if (!layer || arg.getArgNumber() >= layer->getNumOperands())
      return std::nullopt;
    return keepBand(layer->getOperand(arg.getArgNumber()), reading, depth - 1);
  }
  if (splatValue(value))
    return masksEverywhere(value, reading) ? std::nullopt
                                           : std::optional<Band>(Band{});
  bool keepTrue = reading != MaskReading::KeepFalse;
  if (isCausalMask(value, keepTrue))
    return Band{-Band::kOpen, 0};
  if (std::optional<Band> band = constantBand(value, reading))
    return band;
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  // Leading dimensions added or broadcast ([None, None], expand): the same
  // band in every one of them.
  if (isa<ReshapeOp, BroadcastToOp>(op)) {
    auto from = cast<RankedTensorType>(op->getOperand(0).getType());
    auto to = cast<RankedTensorType>(value.getType());
    if (from.getRank() >= 2 &&
        from.getShape().take_back(2) == to.getShape().take_back(2))
      return keepBand(op->getOperand(0), reading, depth - 1);
    return std::nullopt;
  }
  if (auto trilu = dyn_cast<TriluOp>(op)) {
    // Inside the triangle the input stays; outside it is 0 (false).
    int64_t k = trilu.getDiagonal();
    Band triangle =
        trilu.getUpper() ? Band{k, Band::kOpen} : Band{-Band::kOpen, k};
    if (reading == MaskReading::KeepTrue) {
      std::optional<Band> inner =
          keepBand(trilu.getInput(), reading, depth - 1);
      return inner ? std::optional<Band>(inner->meet(triangle)) : std::nullopt;
    }
    // A zero keeps: of an input that masks everywhere, the keys outside the
    // triangle.
    if (!masksEverywhere(trilu.getInput(), reading))
      return std::nullopt;
    return trilu.getUpper() ? Band{-Band::kOpen, k - 1}
                            : Band{k + 1, Band::kOpen};
  }
  if (auto cmp = dyn_cast<CompareOp>(op)) {
    // x == false is Not x; x == true is x.
    std::optional<double> other = splatValue(cmp.getRhs());
    if (reading == MaskReading::Additive ||
        cmp.getPredicate() != ComparePredicate::eq || !other ||
        !getElementTypeOrSelf(cmp.getLhs().getType()).isInteger(1))
      return std::nullopt;
    bool flip = *other == 0.0;
    MaskReading inner = flip == (reading == MaskReading::KeepTrue)
                            ? MaskReading::KeepFalse
                            : MaskReading::KeepTrue;
    return keepBand(cmp.getLhs(), inner, depth - 1);
  }
  if (auto where = dyn_cast<WhereOp>(op)) {
    Value cond = where.getCondition(), lhs = where.getLhs(),
          rhs = where.getRhs();
    if (reading == MaskReading::Additive) {
      // where(c, fill, x) keeps where c is false and x keeps (x = 0 keeps
      // everywhere: a boolean mask made a bias); where(c, x, fill) where c
      // is true and x keeps (AttentionMaskConverter fills a causal bias
      // where a window or the padding masks).
      auto both = [&](Value c, MaskReading cReading,
                      Value x) -> std::optional<Band> {
        std::optional<Band> a = keepBand(c, cReading, depth - 1);
        std::optional<Band> b = keepBand(x, reading, depth - 1);
        return a && b ? std::optional<Band>(a->meet(*b)) : std::nullopt;
      };
      if (isMaskFill(lhs))
        return both(cond, MaskReading::KeepFalse, rhs);
      if (isMaskFill(rhs))
        return both(cond, MaskReading::KeepTrue, lhs);
      return std::nullopt;
    }
    // And (where(a, b, a)) and Or (where(a, a, b)) of booleans: of masks
    // that keep where true, And keeps the common keys and Or the keys of
    // either (a band where the two meet or touch); where true masks, the
    // other way round.
    bool isAnd = rhs == cond, isOr = lhs == cond;
    if (isAnd == isOr)
      return std::nullopt;
    std::optional<Band> a = keepBand(cond, reading, depth - 1);
    std::optional<Band> b = keepBand(isAnd ? lhs : rhs, reading, depth - 1);
    if (!a || !b)
      return std::nullopt;
    if (isAnd == (reading == MaskReading::KeepTrue))
      return a->meet(*b);
    if (std::max(a->lo, b->lo) > std::min(a->hi, b->hi) + 1)
      return std::nullopt;
    return Band{std::min(a->lo, b->lo), std::max(a->hi, b->hi)};
  }
  if (reading == MaskReading::Additive) {
    // A sum of additive masks keeps where both do; a clamp at a fill
    // (transformers' finfo.min) keeps where its input does.
    if (auto add = dyn_cast<AddOp>(op)) {
      std::optional<Band> a = keepBand(add.getLhs(), reading, depth - 1);
      std::optional<Band> b = keepBand(add.getRhs(), reading, depth - 1);
      return a && b ? std::optional<Band>(a->meet(*b)) : std::nullopt;
    }
    if (auto clamp = dyn_cast<MaximumOp>(op)) {
      if (isMaskFill(clamp.getRhs()))
        return keepBand(clamp.getLhs(), reading, depth - 1);
      if (isMaskFill(clamp.getLhs()))
        return keepBand(clamp.getRhs(), reading, depth - 1);
    }
  }
  return std::nullopt;
}

std::optional<int64_t> causalBand(Value value, MaskReading reading) {
  std::optional<KeepBand> band = keepBand(value, reading);
  if (!band || band->hi != 0 || band->lo > 0)
    return std::nullopt;
  return band->lo <= -KeepBand::kOpen ? 0 : 1 - band->lo;
}

/// A mask taken apart into the band of keys it keeps and what else it masks:
/// `rest` are masks (each read as its reading) that all keep where the mask
/// keeps, beside the band.
struct BandSplit {
  KeepBand band;
  bool hasBand = false;
  SmallVector<std::pair<Value, MaskReading>, 2> rest;
  /// A fill the mask was clamped at (transformers clamp a sum of biases at
  /// finfo.min), which an additive rest keeps: a row that masks every key
  /// stays finite, as the model's.
  Value floor;
  void add(const BandSplit &other) {
    band = band.meet(other.band);
    hasBand |= other.hasBand;
    rest.append(other.rest.begin(), other.rest.end());
    if (!floor)
      floor = other.floor;
  }
};

/// `value`, read as `reading`, as a band and the rest (splitBand): a band of
/// splats and triangles (keepBand) combined with other masks by where, And,
/// Or, sums and clamps -- Gemma 2's local layers in transformers' eager
/// attention fill a window over the model's causal-and-padding mask,
/// where(tril(ones, -W), min, where(padding, min, causal)). What is not a
/// band is a rest, whole.
BandSplit splitBand(Value value, MaskReading reading, int depth = 8) {
  if (std::optional<KeepBand> band = keepBand(value, reading))
    return {*band, true, {}, Value()};
  BandSplit opaque{KeepBand{}, false, {{value, reading}}, Value()};
  Operation *op = value.getDefiningOp();
  if (!op || depth == 0)
    return opaque;
  auto both = [&](Value a, MaskReading ra, Value b, MaskReading rb) {
    BandSplit split = splitBand(a, ra, depth - 1);
    split.add(splitBand(b, rb, depth - 1));
    return split;
  };
  if (auto where = dyn_cast<WhereOp>(op)) {
    Value cond = where.getCondition(), lhs = where.getLhs(),
          rhs = where.getRhs();
    if (reading == MaskReading::Additive) {
      // where(c, fill, x) keeps where c is false and x keeps; where(c, x,
      // fill) where c is true and x keeps.
      if (isMaskFill(lhs) && !isMaskFill(rhs))
        return both(cond, MaskReading::KeepFalse, rhs, reading);
      if (isMaskFill(rhs) && !isMaskFill(lhs))
        return both(cond, MaskReading::KeepTrue, lhs, reading);
      return opaque;
    }
    // And (where(a, b, a)) keeps where both keep, read as keeping where
    // true; Or (where(a, a, b)) masks where either masks, read as masking
    // where true.
    bool isAnd = rhs == cond, isOr = lhs == cond;
    if (isAnd && !isOr && reading == MaskReading::KeepTrue)
      return both(cond, reading, lhs, reading);
    if (isOr && !isAnd && reading == MaskReading::KeepFalse)
      return both(cond, reading, rhs, reading);
    return opaque;
  }
  if (reading == MaskReading::Additive) {
    if (auto add = dyn_cast<AddOp>(op))
      return both(add.getLhs(), reading, add.getRhs(), reading);
    if (auto clamp = dyn_cast<MaximumOp>(op)) {
      for (auto [inner, bound] : {std::pair{clamp.getLhs(), clamp.getRhs()},
                                  std::pair{clamp.getRhs(), clamp.getLhs()}})
        if (isMaskFill(bound)) {
          BandSplit split = splitBand(inner, reading, depth - 1);
          split.floor = bound;
          return split;
        }
    }
  }
  return opaque;
}

/// `value` (a mask's rest, read as a boolean or a bias) with the additive
/// band masks among its operands, through elementwise ops, replaced by 0
/// where each keeps every key `band` keeps: on those keys they are 0, and
/// the attention masks the others whatever the mask says, so the attention
/// reads the same; the result broadcasts over the queries where only the
/// band made it [.., l, s] (transformers' `_update_causal_mask`:
/// where(causal + attention_mask == 0, min, causal) leaves
/// causal + attention_mask == 0 as the padding, which is then [b, 1, 1, s]).
/// Null where nothing changes; with `dryRun`, `value` itself where something
/// would (and nothing is built).
bool isDroppableBand(Value operand, KeepBand band) {
  auto type = dyn_cast<RankedTensorType>(operand.getType());
  if (!type || type.getRank() < 2 || !isa<FloatType>(type.getElementType()))
    return false;
  std::optional<KeepBand> inner = keepBand(operand, MaskReading::Additive);
  return inner && inner->lo <= band.lo && inner->hi >= band.hi &&
         !masksEverywhere(operand, MaskReading::Additive);
}

Value withoutBands(PatternRewriter &rewriter, Value value, KeepBand band,
                   bool dryRun = false, int depth = 4) {
  Operation *op = value.getDefiningOp();
  if (!op || depth == 0 ||
      !isa<AddOp, SubOp, MulOp, MaximumOp, MinimumOp, CompareOp, WhereOp>(op))
    return {};
  SmallVector<Value, 3> operands(op->getOperands());
  bool changed = false;
  for (Value &operand : operands) {
    if (isDroppableBand(operand, band)) {
      changed = true;
      if (dryRun)
        return value;
      auto type = cast<RankedTensorType>(operand.getType());
      operand = ConstantOp::create(
          rewriter, operand.getLoc(),
          DenseElementsAttr::get(
              RankedTensorType::get({}, type.getElementType()),
              rewriter.getFloatAttr(type.getElementType(), 0.0)));
      continue;
    }
    if (Value inner =
            withoutBands(rewriter, operand, band, dryRun, depth - 1)) {
      if (dryRun)
        return value;
      operand = inner;
      changed = true;
    }
  }
  if (!changed)
    return {};
  Location loc = op->getLoc();
  if (auto compare = dyn_cast<CompareOp>(op))
    return CompareOp::create(rewriter, loc, compare.getPredicate(), operands[0],
                             operands[1]);
  if (isa<WhereOp>(op))
    return WhereOp::create(rewriter, loc, operands[0], operands[1],
                           operands[2]);
  if (isa<AddOp>(op))
    return AddOp::create(rewriter, loc, operands[0], operands[1]);
  if (isa<SubOp>(op))
    return SubOp::create(rewriter, loc, operands[0], operands[1]);
  if (isa<MulOp>(op))
    return MulOp::create(rewriter, loc, operands[0], operands[1]);
  if (isa<MaximumOp>(op))
    return MaximumOp::create(rewriter, loc, operands[0], operands[1]);
  return MinimumOp::create(rewriter, loc, operands[0], operands[1]);
}

/// Attention whose mask keeps a causal band of keys -- a causal mask or a
/// sliding window, constant or computed from triangles at run time -- alone
/// or with one other mask (HF's causal + padding, Mistral's window and
/// padding, a window filled over a causal-and-padding mask as Gemma 2's
/// local layers have it) becomes causal attention with that window and the
/// other mask alone, or none: nothing of [seq, kv_seq] is stored, the ring
/// passes only the other mask's columns, and the cost model counts the
/// visible pairs (a causal half, or the window's).
struct FactorMaskBand : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp attention,
                                PatternRewriter &rewriter) const override {
    Value mask = attention.getMask();
    if (!mask)
      return failure();
    auto maskType = cast<RankedTensorType>(mask.getType());
    bool boolean = maskType.getElementType().isInteger(1);
    if (!boolean && !isa<FloatType>(maskType.getElementType()))
      return failure();
    int64_t seq = attention.getQ().getType().getDimSize(2),
            kvSeq = attention.getK().getType().getDimSize(2);
    int64_t rank = maskType.getRank();
    if (rank < 2 || maskType.getDimSize(rank - 2) != seq ||
        maskType.getDimSize(rank - 1) != kvSeq)
      return failure();
    BandSplit split = splitBand(mask, boolean ? MaskReading::KeepTrue
                                              : MaskReading::Additive);
    if (!split.hasBand || split.rest.size() > 1)
      return failure();
    KeepBand band = split.band;
    if (attention.getCausal())
      band = band.meet({-KeepBand::kOpen, 0});
    if (std::optional<uint64_t> window = attention.getWindow())
      band = band.meet({1 - int64_t(*window), KeepBand::kOpen});
    if (band.hi != 0 || band.lo > 0)
      return failure();
    std::optional<int64_t> window;
    if (band.lo > -KeepBand::kOpen && 1 - band.lo < std::min(seq, kvSeq))
      window = 1 - band.lo;
    // A band of the mask's that keeps every key (the zero of
    // where(keep, 0, fill), the form this rewrite leaves) adds nothing to an
    // attention already as causal and windowed as it would become: the
    // rewrite would rebuild the same mask again and again.
    const bool keepsAll =
        split.band.lo <= -KeepBand::kOpen && split.band.hi >= KeepBand::kOpen;
    std::optional<uint64_t> newWindow;
    if (window)
      newWindow = uint64_t(*window);
    if (keepsAll && attention.getCausal() &&
        attention.getWindow() == newWindow &&
        !(split.rest.size() == 1 &&
          withoutBands(rewriter, split.rest.front().first, band,
                       /*dryRun=*/true)))
      return failure();
    auto becomeCausal = [&](Value newMask) {
      rewriter.modifyOpInPlace(attention, [&] {
        if (newMask)
          attention.getMaskMutable().assign(newMask);
        else
          attention.getMaskMutable().clear();
        attention.setCausal(true);
        if (window)
          attention.setWindow(uint64_t(*window));
        else
          attention.removeWindowAttr();
      });
      return success();
    };
    if (split.rest.empty())
      return becomeCausal(Value());
    // The rest, read as the attention reads its mask.
    auto [rest, restReading] = split.rest.front();
    auto restType = dyn_cast<RankedTensorType>(rest.getType());
    if (!restType || restType.getRank() > rank)
      return failure();
    // It broadcasts to the mask (trailing dimensions aligned).
    for (int64_t i = 1; i <= restType.getRank(); ++i) {
      int64_t have = restType.getDimSize(restType.getRank() - i),
              want = maskType.getDimSize(rank - i);
      if (have != 1 && have != want)
        return failure();
    }
    if (boolean && restReading == MaskReading::Additive)
      return failure();
    rewriter.setInsertionPoint(attention);
    Location loc = attention.getLoc();
    if (Value narrower = withoutBands(rewriter, rest, band))
      rest = narrower;
    Value newMask = rest;
    if (split.floor && restReading == MaskReading::Additive)
      newMask = MaximumOp::create(rewriter, loc, rest, split.floor);
    auto scalar = [&](Type element, Attribute value) -> Value {
      return ConstantOp::create(
          rewriter, loc,
          DenseElementsAttr::get(RankedTensorType::get({}, element), value));
    };
    if (boolean) {
      if (restReading == MaskReading::Additive)
        return failure();
      if (restReading == MaskReading::KeepFalse)
        newMask = CompareOp::create(
            rewriter, loc, ComparePredicate::eq, rest,
            scalar(rewriter.getI1Type(), rewriter.getBoolAttr(false)));
    } else if (restReading != MaskReading::Additive) {
      // A boolean made a bias: finfo.min where it masks, as transformers
      // fill (a row that masks every key stays finite, as the model's).
      auto element = cast<FloatType>(maskType.getElementType());
      Value fill = scalar(
          element, rewriter.getFloatAttr(
                       element, APFloat::getLargest(element.getFloatSemantics(),
                                                    /*Negative=*/true)));
      Value zero = scalar(element, rewriter.getFloatAttr(element, 0.0));
      // where(keep, 0, fill), keep = Not(rest) where true masks: the form
      // the attention match gives such a mask (combineMasks), so that layers
      // with and without the band read the same mask (CSE merges them).
      Value keep = rest;
      if (restReading == MaskReading::KeepFalse)
        keep = CompareOp::create(
            rewriter, loc, ComparePredicate::eq, rest,
            scalar(rewriter.getI1Type(), rewriter.getBoolAttr(false)));
      newMask = WhereOp::create(rewriter, loc, keep, zero, fill);
    }
    return becomeCausal(newMask);
  }
};

/// If `value` is `reshape(broadcast_to(reshape(kv)))` that repeats each of
/// kv's heads `rep` times in a row (HF's repeat_kv), or the concatenation
/// over heads of such repeats of each head of a split (repeat_interleave's
/// static export), returns kv and rep.
std::optional<std::pair<Value, int64_t>> unrepeatHeads(Value value);

std::optional<std::pair<Value, int64_t>> unrepeatSplitHeads(ConcatOp concat) {
  if (concat.getAxis() != 1 || concat.getInputs().empty())
    return std::nullopt;
  SplitOp split;
  int64_t rep = 0;
  for (auto [index, piece] : llvm::enumerate(concat.getInputs())) {
    std::optional<std::pair<Value, int64_t>> repeated = unrepeatHeads(piece);
    if (!repeated)
      return std::nullopt;
    auto result = dyn_cast<OpResult>(repeated->first);
    auto from = result ? dyn_cast<SplitOp>(result.getOwner()) : SplitOp();
    if (!from || result.getResultNumber() != index ||
        (split && from != split) || (rep && repeated->second != rep))
      return std::nullopt;
    split = from;
    rep = repeated->second;
  }
  if (split.getAxis() != 1 ||
      split.getNumResults() != concat.getInputs().size() ||
      llvm::any_of(split.getSizes(), [](int64_t size) { return size != 1; }))
    return std::nullopt;
  return std::make_pair(split.getInput(), rep);
}

std::optional<std::pair<Value, int64_t>> unrepeatHeads(Value value) {
  if (auto concat = value.getDefiningOp<ConcatOp>())
    return unrepeatSplitHeads(concat);
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

/// ALiBi written as a constant bias (MPT's build_attn_bias, `-slope ·
/// distance to the last key` as [1, h, 1, s]; the same bias over every query
/// row as [1, h, s, s]) on a causal attention becomes the attention's
/// `alibi` slopes: each row of such a bias is `c + m_h · j` over the keys j,
/// which under a causal mask is `-m_h · |i - j|` plus a constant of the row,
/// so the probabilities are the same. Nothing of [h, s] is stored, and the
/// ring passes positions instead of the bias's columns.
struct RaiseAlibiBias : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp attention,
                                PatternRewriter &rewriter) const override {
    Value mask = attention.getMask();
    if (!attention.getCausal() || !mask || attention.getAlibiSlopes())
      return failure();
    DenseElementsAttr bias;
    if (!matchPattern(mask, m_Constant(&bias)) ||
        !isa<FloatType>(bias.getElementType()))
      return failure();
    auto maskType = cast<RankedTensorType>(mask.getType());
    const int64_t rank = maskType.getRank();
    const int64_t heads = attention.getQ().getType().getDimSize(1),
                  kvSeq = attention.getK().getType().getDimSize(2);
    // [..., h or 1, rows, kv_seq] with nothing over the batch.
    if (rank < 1 || maskType.getDimSize(rank - 1) != kvSeq || kvSeq < 2)
      return failure();
    if (rank == 4 && maskType.getDimSize(0) != 1)
      return failure();
    const int64_t maskHeads = rank >= 3 ? maskType.getDimSize(rank - 3) : 1;
    const int64_t rows = rank >= 2 ? maskType.getDimSize(rank - 2) : 1;
    // A splat has no slope; a bias of more than 2^24 elements (a [h, s, s]
    // constant at thousands of tokens) is left as it is rather than read.
    if (bias.isSplat() || bias.getNumElements() > (int64_t(1) << 24))
      return failure();
    SmallVector<double> values;
    values.reserve(size_t(bias.getNumElements()));
    for (APFloat value : bias.getValues<APFloat>())
      values.push_back(value.convertToDouble());
    double largest = 0;
    for (double value : values) {
      if (!std::isfinite(value))
        return failure();
      largest = std::max(largest, std::abs(value));
    }
    // One slope per head, the same for every row of it, and each row
    // affine in the key's index.
    SmallVector<float> slopes(maskHeads, 0.0f);
    const double tolerance = 1e-6 * largest;
    bool any = false;
    for (int64_t h = 0; h < maskHeads; ++h) {
      const double *head = values.data() + h * rows * kvSeq;
      double m = (head[kvSeq - 1] - head[0]) / double(kvSeq - 1);
      for (int64_t r = 0; r < rows; ++r) {
        const double *row = head + r * kvSeq;
        for (int64_t j = 0; j < kvSeq; ++j)
          if (std::abs(row[j] - (row[0] + m * double(j))) > tolerance)
            return failure();
        double rowSlope = (row[kvSeq - 1] - row[0]) / double(kvSeq - 1);
        if (std::abs(rowSlope - m) * double(kvSeq) > tolerance)
          return failure();
      }
      slopes[size_t(h)] = float(m);
      any = any || m != 0;
    }
    if (!any)
      return failure();
    if (maskHeads == 1)
      slopes.assign(size_t(heads), slopes.front());
    else if (maskHeads != heads)
      return failure();
    rewriter.setInsertionPoint(attention);
    auto slopesType = RankedTensorType::get({heads}, rewriter.getF32Type());
    Value slopesValue = ConstantOp::create(
        rewriter, attention.getLoc(), slopesType,
        DenseElementsAttr::get(slopesType, ArrayRef<float>(slopes)));
    rewriter.modifyOpInPlace(attention, [&] {
      attention.getMaskMutable().clear();
      attention.getAlibiSlopesMutable().assign(slopesValue);
    });
    return success();
  }
};

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
  using WeftRaiseBase::WeftRaiseBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    Explanations explanations;
    patterns.add<RaiseGeluErf, RaiseGeluTanh, RaiseSilu, RaiseLayerNorm,
                 RaiseRMSNorm, RaiseLinear, RaiseLinearBias, RaiseGroupedQuery,
                 FactorMaskBand, RaiseAlibiBias>(&getContext());
    patterns.add<RaiseAttention>(&getContext(),
                                 explain ? &explanations : nullptr);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      getOperation()->emitWarning("weft-raise did not reach a fixed point");
    if (!explain)
      return;
    // Every softmax left over says why it is not attention.
    getOperation()->walk([&](SoftmaxOp softmax) {
      auto it = explanations.find(softmax);
      softmax.emitRemark() << "not raised to weft.attention: "
                           << (it != explanations.end()
                                   ? it->second
                                   : "no attention pattern was tried");
    });
  }
};

} // namespace

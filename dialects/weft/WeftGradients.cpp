//===- WeftGradients.cpp - Each op's vector-Jacobian product --------------===//
//
// Part of the Weft project.
//
// DifferentiableOpInterface::buildGradients for every op, and the reverse
// sweep that calls them. Gradients are built from weft ops, so the backward
// program is partitioned, costed, interpreted and emitted by the same passes
// and kernels as the forward one. Where a gradient is a known composite (a
// norm, a softmax, cross-entropy) it is written out in ops; attention
// recomputes its decomposed form (the attention core that selective
// recomputation recomputes) and differentiates that.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/WeftOps.h"

#include "mlir/IR/IRMapping.h"

#include <cmath>

using namespace mlir;
using namespace weft;

//===----------------------------------------------------------------------===//
// GradientState
//===----------------------------------------------------------------------===//

/// An op that only rearranges one tensor (a reshape or transpose to heads):
/// one operand, one result of as many elements of the same type, and no
/// arithmetic.
static bool isRearrangement(Operation *op) {
  auto costed = dyn_cast<CostOpInterface>(op);
  if (!costed || op->getNumOperands() != 1 || op->getNumResults() != 1)
    return false;
  auto from = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto to = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return from && to && from.hasStaticShape() && to.hasStaticShape() &&
         from.getElementType() == to.getElementType() &&
         from.getNumElements() == to.getNumElements() &&
         costed.getCost().flops == 0;
}

bool weft::isCheapToRematerialize(Operation *op,
                                  llvm::function_ref<bool(Value)> isActivation,
                                  Value &activation) {
  if (!op->hasTrait<weft::OpTrait::Elementwise>() || op->getNumResults() != 1 ||
      !isa<DifferentiableOpInterface>(op))
    return false;
  activation = nullptr;
  for (Value operand : op->getOperands()) {
    if (!isActivation(operand))
      continue;
    if (activation && activation != operand)
      return false;
    activation = operand;
  }
  return bool(activation);
}

/// The sweep's side of the rule (isCheapToRematerialize): `clone`'s result
/// is read only by elementwise ops, and its activation operand by the
/// backward already (an op outside `pending`, the forward clones not yet
/// walked), so it is kept anyway.
static bool isRematerialized(Operation *clone,
                             const llvm::DenseSet<Value> &fromInputs,
                             const llvm::DenseSet<Operation *> &pending) {
  Value activation;
  if (!isCheapToRematerialize(
          clone, [&](Value v) { return fromInputs.contains(v); }, activation))
    return false;
  Value result = clone->getResult(0);
  if (result.use_empty() ||
      llvm::any_of(result.getUsers(), [](Operation *user) {
        return !user->hasTrait<weft::OpTrait::Elementwise>();
      }))
    return false;
  return llvm::any_of(activation.getUsers(), [&](Operation *user) {
    return user != clone && !pending.contains(user);
  });
}

void weft::keptByOpPolicy(ArrayRef<Operation *> ops,
                          llvm::function_ref<bool(Value)> isWeight,
                          llvm::DenseSet<Operation *> &kept) {
  int products = 0;
  for (Operation *op : ops) {
    auto costed = dyn_cast<CostOpInterface>(op);
    if (!costed)
      continue;
    OpCost::Unit unit = costed.getCost().unit;
    if (unit != OpCost::Unit::FusedAttention &&
        (unit != OpCost::Unit::Matrix ||
         llvm::none_of(op->getOperands(), isWeight) || products++ % 2))
      continue;
    // A GEMM's result that only a chain of rearrangements reads is kept as
    // the chain's last: the same bytes (PyTorch saves the GEMM's output and
    // the views share it), in the layout that its readers take, which a
    // partitioned step can keep split as they read it. (An attention keeps
    // its own result: a ring's backward reads it, with its statistics.)
    Operation *at = op;
    while (unit == OpCost::Unit::Matrix && at->getNumResults() == 1 &&
           at->getResult(0).hasOneUse()) {
      Operation *user = *at->getResult(0).getUsers().begin();
      if (user->getBlock() != at->getBlock() || !isRearrangement(user))
        break;
      at = user;
    }
    kept.insert(at);
  }
}

static bool isFloatTensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

static RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

static RankedTensorType withShape(RankedTensorType type,
                                  ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, type.getElementType());
}

void GradientState::markActive(Value value) {
  if (isFloatTensor(value))
    active.insert(value);
}

Value GradientState::splat(Location loc, Type type, double value) {
  auto tensor = cast<RankedTensorType>(type);
  Type element = tensor.getElementType();
  Attribute attr = isa<FloatType>(element)
                       ? Attribute(b.getFloatAttr(element, value))
                       : Attribute(b.getIntegerAttr(element, int64_t(value)));
  return ConstantOp::create(
      b, loc, cast<ElementsAttr>(DenseElementsAttr::get(tensor, attr)));
}

Value GradientState::scalar(Location loc, Type elementType, double value) {
  return splat(loc, RankedTensorType::get({}, elementType), value);
}

Value GradientState::gradientOrZeros(Location loc, Value value) {
  if (Value grad = gradient(value))
    return grad;
  return splat(loc, value.getType(), 0.0);
}

Value GradientState::unbroadcast(Location loc, Value grad,
                                 ArrayRef<int64_t> shape) {
  RankedTensorType type = tensorType(grad);
  if (type.getShape() == shape)
    return grad;
  int64_t lead = type.getRank() - int64_t(shape.size());
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d < lead || (shape[d - lead] == 1 && type.getDimSize(d) != 1))
      axes.push_back(d);
  if (!axes.empty()) {
    SmallVector<int64_t> kept;
    for (int64_t d = 0; d < type.getRank(); ++d)
      kept.push_back(llvm::is_contained(axes, d) ? 1 : type.getDimSize(d));
    grad = ReduceSumOp::create(b, loc, withShape(type, kept), grad, axes,
                               /*keep_dims=*/true);
  }
  if (tensorType(grad).getShape() != shape)
    grad = ReshapeOp::create(b, loc, withShape(type, shape), grad);
  return grad;
}

Value GradientState::expandReduced(Location loc, Value value,
                                   ArrayRef<int64_t> axes,
                                   RankedTensorType type) {
  RankedTensorType valueType = tensorType(value);
  if (valueType.getRank() != type.getRank()) {
    SmallVector<int64_t> kept(type.getShape());
    for (int64_t axis : axes)
      kept[axis] = 1;
    value = ReshapeOp::create(b, loc, withShape(valueType, kept), value);
  }
  if (tensorType(value).getShape() != type.getShape())
    value = BroadcastToOp::create(
        b, loc, withShape(tensorType(value), type.getShape()), value);
  return value;
}

void GradientState::accumulate(Location loc, Value operand, Value grad) {
  if (!grad || !needsGradient(operand))
    return;
  RankedTensorType type = tensorType(operand);
  grad = unbroadcast(loc, grad, type.getShape());
  if (tensorType(grad).getElementType() != type.getElementType())
    grad = CastOp::create(b, loc, type, grad);
  if (Value existing = gradients.lookup(operand))
    grad = AddOp::create(b, loc, type, existing, grad);
  gradients[operand] = grad;
}

void GradientState::accumulateParameter(Location loc, StringRef name,
                                        Value grad) {
  if (!grad)
    return;
  auto [it, inserted] =
      parameterIndex.try_emplace(name, unsigned(parameterGradients.size()));
  if (inserted) {
    parameterGradients.push_back({name.str(), grad});
    return;
  }
  Value &sum = parameterGradients[it->second].second;
  sum = AddOp::create(b, loc, sum.getType(), sum, grad);
}

void weft::propagateActivity(GradientState &state, ArrayRef<Operation *> ops) {
  for (Operation *op : ops) {
    // A region (a layer) that holds trained parameters depends on them.
    auto trained = [&](ParameterOp param) {
      return !state.isFrozen(param.getName());
    };
    auto param = dyn_cast<ParameterOp>(op);
    bool active =
        (param && trained(param)) ||
        llvm::any_of(op->getOperands(),
                     [&](Value v) { return state.needsGradient(v); }) ||
        (op->getNumRegions() && op->walk([&](ParameterOp inner) {
                                    return trained(inner)
                                               ? WalkResult::interrupt()
                                               : WalkResult::advance();
                                  }).wasInterrupted());
    if (active)
      for (Value result : op->getResults())
        state.markActive(result);
  }
}

LogicalResult weft::differentiateOps(GradientState &state,
                                     ArrayRef<Operation *> ops) {
  propagateActivity(state, ops);
  for (Operation *op : llvm::reverse(ops)) {
    if (llvm::none_of(op->getResults(),
                      [&](Value r) { return bool(state.gradient(r)); }))
      continue;
    auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
    if (!differentiable)
      return op->emitError("'")
             << op->getName()
             << "' has no gradient: a training step cannot pass through it";
    if (failed(differentiable.buildGradients(state)))
      return failure();
  }
  return success();
}

/// The ops created at `b`'s insertion point since `marker` (the op before
/// it then, or null at the block's start).
static SmallVector<Operation *> createdSince(OpBuilder &b, Operation *marker) {
  Block *block = b.getInsertionBlock();
  Block::iterator it =
      marker ? std::next(marker->getIterator()) : block->begin();
  SmallVector<Operation *> ops;
  for (; it != b.getInsertionPoint(); ++it)
    ops.push_back(&*it);
  return ops;
}

static Operation *insertionMarker(OpBuilder &b) {
  Block::iterator ip = b.getInsertionPoint();
  return ip == b.getInsertionBlock()->begin() ? nullptr : &*std::prev(ip);
}

//===----------------------------------------------------------------------===//
// Sources: no operands to differentiate
//===----------------------------------------------------------------------===//

LogicalResult ParameterOp::buildGradients(GradientState &state) {
  state.accumulateParameter(getLoc(), getName(), state.gradient(getResult()));
  return success();
}
LogicalResult ConstantOp::buildGradients(GradientState &) { return success(); }
LogicalResult IotaOp::buildGradients(GradientState &) { return success(); }
LogicalResult CompareOp::buildGradients(GradientState &) { return success(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace {
/// Shorthands for building a gradient at one location: binary ops on values
/// of one shape (or a scalar constant), typed like their first operand.
struct Grad {
  GradientState &state;
  Location loc;
  OpBuilder &b() { return state.builder(); }
  Value dy(Value result) { return state.gradient(result); }
  // Result types follow the ops' own inference (numpy broadcasting).
  Value add(Value x, Value y) { return AddOp::create(b(), loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b(), loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b(), loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b(), loc, x, y); }
  Value neg(Value x) { return NegOp::create(b(), loc, x.getType(), x); }
  Value scalar(Value like, double v) {
    return state.scalar(loc, tensorType(like).getElementType(), v);
  }
  Value mulScalar(Value x, double v) { return mul(x, scalar(x, v)); }
  Value zerosLike(Value x) { return scalar(x, 0.0); }
  /// where(cond, x, 0) typed like x.
  Value select(Value cond, Value x, bool keepWhere) {
    Value zero = zerosLike(x);
    return keepWhere ? WhereOp::create(b(), loc, x.getType(), cond, x, zero)
                     : WhereOp::create(b(), loc, x.getType(), cond, zero, x);
  }
  Value reduceSum(Value x, ArrayRef<int64_t> axes) {
    auto type = tensorType(x);
    SmallVector<int64_t> shape(type.getShape());
    for (int64_t a : axes)
      shape[a] = 1;
    return ReduceSumOp::create(b(), loc, withShape(type, shape), x, axes, true);
  }
  Value reduceMean(Value x, ArrayRef<int64_t> axes) {
    auto type = tensorType(x);
    SmallVector<int64_t> shape(type.getShape());
    for (int64_t a : axes)
      shape[a] = 1;
    return ReduceMeanOp::create(b(), loc, withShape(type, shape), x, axes,
                                true);
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    if (tensorType(x).getShape() == shape)
      return x;
    return ReshapeOp::create(b(), loc, withShape(tensorType(x), shape), x);
  }
  Value matmul(Value x, Value y, bool tx, bool ty) {
    return MatmulOp::create(b(), loc, x, y, tx ? b().getUnitAttr() : UnitAttr(),
                            ty ? b().getUnitAttr() : UnitAttr());
  }
  Value cast(Value x, Type element) {
    auto type = tensorType(x);
    if (type.getElementType() == element)
      return x;
    return CastOp::create(b(), loc, type.clone(element), x);
  }
  Value compare(ComparePredicate predicate, Value x, Value y,
                ArrayRef<int64_t> shape) {
    return CompareOp::create(b(), loc,
                             RankedTensorType::get(shape, b().getI1Type()),
                             predicate, x, y);
  }
  void to(Value operand, Value grad) { state.accumulate(loc, operand, grad); }
  bool needs(Value operand) { return state.needsGradient(operand); }
};
} // namespace

LogicalResult AddOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  g.to(getLhs(), g.dy(getResult()));
  g.to(getRhs(), g.dy(getResult()));
  return success();
}
LogicalResult SubOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value dy = g.dy(getResult());
  g.to(getLhs(), dy);
  if (g.needs(getRhs()))
    g.to(getRhs(), g.neg(dy));
  return success();
}
LogicalResult MulOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value dy = g.dy(getResult());
  if (g.needs(getLhs()))
    g.to(getLhs(), g.mul(dy, getRhs()));
  if (g.needs(getRhs()))
    g.to(getRhs(), g.mul(dy, getLhs()));
  return success();
}
// d(x/y) = dz/y and -dz·(x/y)/y.
LogicalResult DivOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value dy = g.dy(getResult());
  if (g.needs(getLhs()))
    g.to(getLhs(), g.div(dy, getRhs()));
  if (g.needs(getRhs()))
    g.to(getRhs(), g.neg(g.div(g.mul(dy, getResult()), getRhs())));
  return success();
}
// d(x^p) = p·x^(p-1) dx + x^p·ln(x) dp.
LogicalResult PowOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value dy = g.dy(getResult());
  if (g.needs(getLhs())) {
    Value exponent = g.sub(getRhs(), g.scalar(getRhs(), 1.0));
    Value power = PowOp::create(state.builder(), getLoc(), getLhs(), exponent);
    g.to(getLhs(), g.mul(dy, g.mul(power, getRhs())));
  }
  if (g.needs(getRhs())) {
    Value log =
        LogOp::create(state.builder(), getLoc(), getLhs().getType(), getLhs());
    g.to(getRhs(), g.mul(dy, g.mul(getResult(), log)));
  }
  return success();
}
// The gradient goes to the operand that won (the left one on ties, as
// torch.maximum splits it evenly; ties are rare in trained values).
static void minMaxGradients(Grad &g, Value lhs, Value rhs, Value result,
                            ComparePredicate lhsWins) {
  Value dy = g.dy(result);
  Value wins = g.compare(lhsWins, lhs, rhs, tensorType(result).getShape());
  g.to(lhs, g.select(wins, dy, true));
  g.to(rhs, g.select(wins, dy, false));
}
LogicalResult MaximumOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  minMaxGradients(g, getLhs(), getRhs(), getResult(), ComparePredicate::ge);
  return success();
}
LogicalResult MinimumOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  minMaxGradients(g, getLhs(), getRhs(), getResult(), ComparePredicate::le);
  return success();
}
LogicalResult WhereOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value dy = g.dy(getResult());
  if (g.needs(getLhs()))
    g.to(getLhs(), g.select(getCondition(), dy, true));
  if (g.needs(getRhs()))
    g.to(getRhs(), g.select(getCondition(), dy, false));
  return success();
}

LogicalResult NegOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  g.to(getInput(), g.neg(g.dy(getResult())));
  return success();
}
LogicalResult ExpOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  g.to(getInput(), g.mul(g.dy(getResult()), getResult()));
  return success();
}
LogicalResult LogOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  g.to(getInput(), g.div(g.dy(getResult()), getInput()));
  return success();
}
// d sqrt(x) = dx / (2 sqrt(x)).
LogicalResult SqrtOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  g.to(getInput(), g.div(g.mulScalar(g.dy(getResult()), 0.5), getResult()));
  return success();
}
// d x^(-1/2) = -x^(-3/2)/2 dx = -y³/2 dx.
LogicalResult RsqrtOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value y = getResult();
  Value cube = g.mul(g.mul(y, y), y);
  g.to(getInput(), g.mul(g.mulScalar(g.dy(y), -0.5), cube));
  return success();
}
LogicalResult TanhOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value y = getResult();
  Value slope = g.sub(g.scalar(y, 1.0), g.mul(y, y));
  g.to(getInput(), g.mul(g.dy(y), slope));
  return success();
}
// d erf(x) = 2/sqrt(pi) e^(-x²) dx.
LogicalResult ErfOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value x = getInput();
  Value e =
      ExpOp::create(state.builder(), getLoc(), x.getType(), g.neg(g.mul(x, x)));
  g.to(x, g.mul(g.dy(getResult()), g.mulScalar(e, 2.0 / std::sqrt(M_PI))));
  return success();
}
// d sin(x) = cos(x) dx.
LogicalResult SinOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value x = getInput();
  Value c = CosOp::create(state.builder(), getLoc(), x.getType(), x);
  g.to(x, g.mul(g.dy(getResult()), c));
  return success();
}
// d cos(x) = -sin(x) dx.
LogicalResult CosOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value x = getInput();
  Value s = SinOp::create(state.builder(), getLoc(), x.getType(), x);
  g.to(x, g.mul(g.dy(getResult()), g.neg(s)));
  return success();
}
LogicalResult SigmoidOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value y = getResult();
  g.to(getInput(), g.mul(g.dy(y), g.mul(y, g.sub(g.scalar(y, 1.0), y))));
  return success();
}
LogicalResult ReluOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value x = getInput();
  Value positive = g.compare(ComparePredicate::gt, x, g.zerosLike(x),
                             tensorType(x).getShape());
  g.to(x, g.select(positive, g.dy(getResult()), true));
  return success();
}
// d |x| = sign(x) dx, with sign(0) = 0 (as torch's abs backward).
LogicalResult AbsOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value x = getInput();
  ArrayRef<int64_t> shape = tensorType(x).getShape();
  Value zero = g.zerosLike(x);
  Value dy = g.dy(getResult());
  Value up =
      g.select(g.compare(ComparePredicate::gt, x, zero, shape), dy, true);
  Value down =
      g.select(g.compare(ComparePredicate::lt, x, zero, shape), dy, true);
  g.to(x, g.sub(up, down));
  return success();
}
// silu(x) = x·s(x): d = s(x)·(1 + x·(1 - s(x))).
LogicalResult SiluOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value x = getInput();
  Value s = SigmoidOp::create(state.builder(), getLoc(), x.getType(), x);
  Value one = g.scalar(x, 1.0);
  Value slope = g.mul(s, g.add(one, g.mul(x, g.sub(one, s))));
  g.to(x, g.mul(g.dy(getResult()), slope));
  return success();
}
LogicalResult GeluOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  OpBuilder &b = state.builder();
  Value x = getInput();
  Type type = x.getType();
  Value one = g.scalar(x, 1.0);
  Value slope;
  if (getApproximation() == GeluApproximation::tanh) {
    // u = c(x + a x³), t = tanh u: d = (1 + t)/2 + x/2 (1 - t²) c (1 + 3a x²).
    const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
    Value x2 = g.mul(x, x);
    Value u = g.mulScalar(g.add(x, g.mulScalar(g.mul(x2, x), a)), c);
    Value t = TanhOp::create(b, getLoc(), type, u);
    Value left = g.mulScalar(g.add(one, t), 0.5);
    Value du = g.mulScalar(g.add(one, g.mulScalar(x2, 3 * a)), c);
    Value right =
        g.mul(g.mulScalar(x, 0.5), g.mul(g.sub(one, g.mul(t, t)), du));
    slope = g.add(left, right);
  } else {
    // d = Φ(x) + x φ(x), Φ(x) = (1 + erf(x/√2))/2, φ(x) = e^(-x²/2)/√(2π).
    Value cdf = g.mulScalar(
        g.add(one, ErfOp::create(b, getLoc(), type,
                                 g.mulScalar(x, 1.0 / std::sqrt(2.0)))),
        0.5);
    Value pdf = g.mulScalar(
        ExpOp::create(b, getLoc(), type, g.mulScalar(g.mul(x, x), -0.5)),
        1.0 / std::sqrt(2.0 * M_PI));
    slope = g.add(cdf, g.mul(x, pdf));
  }
  g.to(x, g.mul(g.dy(getResult()), slope));
  return success();
}
// A training step keeps every element, as forward programs do: dropout is
// not applied, so its gradient is the identity.
LogicalResult DropoutOp::buildGradients(GradientState &state) {
  state.accumulate(getLoc(), getInput(), state.gradient(getResult()));
  return success();
}
LogicalResult CastOp::buildGradients(GradientState &state) {
  // accumulate casts back to the operand's element type.
  state.accumulate(getLoc(), getInput(), state.gradient(getResult()));
  return success();
}
// y_i = sum of x_j over j <= i (j < i exclusive): dx_j = sum of dy_i over
// i >= j (i > j), the running sum the other way.
LogicalResult CumSumOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  Value dx = CumSumOp::create(state.builder(), getLoc(), dy.getType(), dy,
                              getAxis(), getExclusive(), !getReverse());
  state.accumulate(getLoc(), getInput(), dx);
  return success();
}
LogicalResult TriluOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  Value masked = TriluOp::create(state.builder(), getLoc(), dy.getType(), dy,
                                 getUpper(), getDiagonal());
  state.accumulate(getLoc(), getInput(), masked);
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions, softmax, norms
//===----------------------------------------------------------------------===//

LogicalResult ReduceSumOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  state.accumulate(
      getLoc(), getInput(),
      state.expandReduced(getLoc(), dy, getAxes(), tensorType(getInput())));
  return success();
}
LogicalResult ReduceMeanOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  RankedTensorType type = tensorType(getInput());
  double count = 1;
  for (int64_t axis : getAxes())
    count *= double(type.getDimSize(axis));
  Value dy = state.expandReduced(getLoc(), g.dy(getResult()), getAxes(), type);
  g.to(getInput(), g.mulScalar(dy, 1.0 / count));
  return success();
}
LogicalResult ReduceMaxOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  RankedTensorType type = tensorType(getInput());
  Value max = state.expandReduced(getLoc(), getResult(), getAxes(), type);
  Value dy = state.expandReduced(getLoc(), g.dy(getResult()), getAxes(), type);
  Value hit = g.compare(ComparePredicate::eq, getInput(), max, type.getShape());
  g.to(getInput(), g.select(hit, dy, true));
  return success();
}
// y = log Σ eˣ: dx = e^(x - y)·dy, the softmax times the incoming gradient.
LogicalResult ReduceLogSumExpOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  RankedTensorType type = tensorType(getInput());
  // The reduced dimensions kept as 1s, broadcast by the elementwise ops.
  SmallVector<int64_t> kept(type.getShape());
  for (int64_t axis : getAxes())
    kept[axis] = 1;
  auto keep = [&](Value v) { return g.reshape(v, kept); };
  Value probs = ExpOp::create(state.builder(), getLoc(), type,
                              g.sub(getInput(), keep(getResult())));
  g.to(getInput(), g.mul(probs, keep(g.dy(getResult()))));
  return success();
}
// softmax(s·x): dx = s·y·(dy - Σ dy·y); log_softmax: s·(dy - e^y Σ dy).
LogicalResult SoftmaxOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value y = getResult(), dy = g.dy(y);
  int64_t axis = getAxis();
  Value inner = g.reduceSum(g.mul(dy, y), {axis});
  Value dx = g.mul(y, g.sub(dy, inner));
  double scale = getScale().convertToDouble();
  g.to(getInput(), scale == 1.0 ? dx : g.mulScalar(dx, scale));
  return success();
}
LogicalResult LogSoftmaxOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value y = getResult(), dy = g.dy(y);
  Value p = ExpOp::create(state.builder(), getLoc(), y.getType(), y);
  Value dx = g.sub(dy, g.mul(p, g.reduceSum(dy, {int64_t(getAxis())})));
  double scale = getScale().convertToDouble();
  g.to(getInput(), scale == 1.0 ? dx : g.mulScalar(dx, scale));
  return success();
}

/// The gradients of a normalization over the dimensions from `axis` on:
/// x̂ = (x - mean)·rstd (RMSNorm: x·rstd), y = x̂·scale (+ bias).
static void normGradients(Grad &g, Value x, Value scale, Value bias,
                          Value result, int64_t axis, double epsilon,
                          bool rms) {
  RankedTensorType type = tensorType(x);
  SmallVector<int64_t> axes;
  for (int64_t d = axis; d < type.getRank(); ++d)
    axes.push_back(d);
  Value dy = g.dy(result);
  Value centered = rms ? x : g.sub(x, g.reduceMean(x, axes));
  Value variance = g.reduceMean(g.mul(centered, centered), axes);
  Value rstd = RsqrtOp::create(g.b(), g.loc, variance.getType(),
                               g.add(variance, g.scalar(x, epsilon)));
  Value normalized = g.mul(centered, rstd);
  if (g.needs(scale))
    g.to(scale, g.mul(dy, normalized));
  if (bias && g.needs(bias))
    g.to(bias, dy);
  if (!g.needs(x))
    return;
  Value scaled = g.mul(dy, scale);
  Value dx = g.sub(
      scaled, g.mul(normalized, g.reduceMean(g.mul(scaled, normalized), axes)));
  if (!rms)
    dx = g.sub(dx, g.reduceMean(scaled, axes));
  g.to(x, g.mul(dx, rstd));
}
LogicalResult LayerNormOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  normGradients(g, getInput(), getScale(), getBias(), getResult(), getAxis(),
                getEpsilon().convertToDouble(), /*rms=*/false);
  return success();
}
LogicalResult RMSNormOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  normGradients(g, getInput(), getScale(), Value(), getResult(), getAxis(),
                getEpsilon().convertToDouble(), /*rms=*/true);
  return success();
}

//===----------------------------------------------------------------------===//
// Products
//===----------------------------------------------------------------------===//

// y = op(A)·op(B): each gradient is one GEMM with the transposes arranged;
// broadcast batch dimensions are summed by accumulate.
LogicalResult MatmulOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value a = getLhs(), c = getRhs(), dy = g.dy(getResult());
  bool ta = getTransposeLhs(), tc = getTransposeRhs();
  if (g.needs(a))
    g.to(a, ta ? g.matmul(c, dy, tc, true) : g.matmul(dy, c, false, !tc));
  if (g.needs(c))
    g.to(c, tc ? g.matmul(dy, a, true, ta) : g.matmul(a, dy, !ta, false));
  return success();
}

LogicalResult LinearOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value x = getInput(), w = getWeight(), dy = g.dy(getResult());
  bool tw = getTransposeWeight();
  RankedTensorType xType = tensorType(x), yType = tensorType(dy);
  if (g.needs(x))
    g.to(x, LinearOp::create(state.builder(), getLoc(), xType, dy, w, Value(),
                             tw ? UnitAttr() : state.builder().getUnitAttr()));
  // The weight's gradient contracts the last-but-one dimension and sums the
  // others (accumulate), without merging dimensions: a sequence split
  // (Megatron SP, context parallelism) stays a split and leaves partial sums.
  if (g.needs(w)) {
    if (xType.getRank() == 1) {
      x = g.reshape(x, {1, xType.getDimSize(0)});
      dy = g.reshape(dy, {1, yType.getDimSize(0)});
    }
    g.to(w, tw ? g.matmul(dy, x, true, false) : g.matmul(x, dy, true, false));
  }
  if (getBias())
    g.to(getBias(), dy);
  return success();
}

/// The rows of `table` ([rows, ...]) that `indices` read, as a one-hot
/// product: d table = onehot(indices)ᵀ · d result, batched over the leading
/// index dimensions (accumulate sums them). Built from generic ops without
/// merging dimensions, it partitions like any batched GEMM: a split batch or
/// sequence leaves partial sums, a vocabulary-split table gets the rows of
/// its shard.
static Value scatterRows(Grad &g, Value indices, Value dy,
                         RankedTensorType table) {
  RankedTensorType indexType = tensorType(indices);
  int64_t rows = table.getDimSize(0);
  int64_t width = table.getNumElements() / std::max<int64_t>(rows, 1);
  SmallVector<int64_t> shape(indexType.getShape());
  if (shape.empty())
    shape.push_back(1);
  Value index = g.reshape(indices, shape);
  SmallVector<int64_t> column(shape), hits(shape), rowsShape(shape);
  column.push_back(1);
  hits.push_back(rows);
  rowsShape.push_back(width);
  Value iota = IotaOp::create(
      g.b(), g.loc, RankedTensorType::get(hits, indexType.getElementType()),
      int64_t(hits.size()) - 1);
  Value hit =
      g.compare(ComparePredicate::eq, g.reshape(index, column), iota, hits);
  Value onehot = g.cast(hit, table.getElementType());
  Value grad = g.reshape(dy, rowsShape);
  // [..., n, rows]ᵀ · [..., n, width] -> [..., rows, width]
  Value product = g.matmul(onehot, grad, true, false);
  SmallVector<int64_t> out(tensorType(product).getShape().drop_back(2));
  out.append(table.getShape().begin(), table.getShape().end());
  return g.reshape(product, out);
}

LogicalResult EmbeddingOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  if (g.needs(getTable()))
    g.to(getTable(), scatterRows(g, getIndices(), g.dy(getResult()),
                                 tensorType(getTable())));
  return success();
}
LogicalResult GatherOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  if (!g.needs(getInput()))
    return success();
  RankedTensorType input = tensorType(getInput());
  Value dy = g.dy(getResult());
  const int64_t axis = getAxis();
  if (axis == 0) {
    g.to(getInput(), scatterRows(g, getIndices(), dy, input));
    return success();
  }
  // Along another axis (a reversed slice, an edge or reflect padding): that
  // axis's positions are the rows. The result's index dimensions and the
  // input's axis move to the front, the rows scatter as an embedding's, the
  // index dimensions' partial sums add up, and the axis moves back.
  const int64_t rank = input.getRank();
  const int64_t k = tensorType(getIndices()).getRank();
  auto transpose = [&](Value x, ArrayRef<int64_t> perm) -> Value {
    auto type = tensorType(x);
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(type.getDimSize(p));
    return TransposeOp::create(g.b(), g.loc, withShape(type, shape), x, perm);
  };
  SmallVector<int64_t> dyPerm, inputPerm{axis};
  for (int64_t i = axis; i < axis + k; ++i)
    dyPerm.push_back(i);
  for (int64_t i = 0; i < axis; ++i) {
    dyPerm.push_back(i);
    inputPerm.push_back(i);
  }
  for (int64_t i = axis + k; i < rank - 1 + k; ++i)
    dyPerm.push_back(i);
  for (int64_t i = axis + 1; i < rank; ++i)
    inputPerm.push_back(i);
  SmallVector<int64_t> rowsShape;
  for (int64_t p : inputPerm)
    rowsShape.push_back(input.getDimSize(p));
  Value rows = scatterRows(g, getIndices(), transpose(dy, dyPerm),
                           withShape(input, rowsShape));
  const int64_t lead = tensorType(rows).getRank() - rank;
  if (lead > 0)
    rows = g.reshape(
        g.reduceSum(rows, llvm::to_vector(llvm::seq<int64_t>(0, lead))),
        rowsShape);
  SmallVector<int64_t> inverse(rank);
  for (auto [i, p] : llvm::enumerate(inputPerm))
    inverse[p] = int64_t(i);
  g.to(getInput(), transpose(rows, inverse));
  return success();
}

//===----------------------------------------------------------------------===//
// Attention and the loss
//===----------------------------------------------------------------------===//

Value weft::buildDecomposedAttention(OpBuilder &b, AttentionOp op) {
  Location loc = op.getLoc();
  StringAttr core = b.getStringAttr(WeftDialect::getAttentionCoreAttrName());
  auto mark = [&](Value v) {
    v.getDefiningOp()->setAttr(core, b.getUnitAttr());
    return v;
  };
  RankedTensorType q = op.getQ().getType();
  Type element = q.getElementType();
  int64_t batch = q.getDimSize(0), heads = q.getDimSize(1),
          seq = q.getDimSize(2);
  int64_t kvHeads = op.getK().getType().getDimSize(1),
          kvSeq = op.getK().getType().getDimSize(2);
  // Grouped KV heads repeated to the query heads (repeat_interleave).
  auto expand = [&](Value kv) -> Value {
    if (kvHeads == heads)
      return kv;
    auto type = cast<RankedTensorType>(kv.getType());
    int64_t dim = type.getDimSize(3), group = heads / kvHeads;
    Value r = mark(ReshapeOp::create(
        b, loc, RankedTensorType::get({batch, kvHeads, 1, kvSeq, dim}, element),
        kv));
    r = mark(BroadcastToOp::create(
        b, loc,
        RankedTensorType::get({batch, kvHeads, group, kvSeq, dim}, element),
        r));
    return mark(ReshapeOp::create(
        b, loc, RankedTensorType::get({batch, heads, kvSeq, dim}, element), r));
  };
  Value k = expand(op.getK());
  Value v = expand(op.getV());
  auto scoresType = RankedTensorType::get({batch, heads, seq, kvSeq}, element);
  Value scores = mark(MatmulOp::create(b, loc, scoresType, op.getQ(), k,
                                       UnitAttr(), b.getUnitAttr()));
  Value probs;
  std::optional<APFloat> softcap = op.getSoftcap();
  int64_t window = windowOrZero(op.getWindow());
  Value slopes = op.getAlibiSlopes();
  // ALiBi: -m_h |i - j| times `factor`, from two iotas of the scores' shape
  // (the query's index and the key's), exact in f32, times the slopes [1,
  // heads, 1, 1]: elementwise ops of the scores' shape, which the kernel
  // pipeline fuses with the sum (and the scale), so nothing of [seq,
  // kv_seq] is read from memory (as FlashAttention's alibi_slopes adds
  // them), in the scores' element type.
  auto alibiBias = [&](double factor) -> Value {
    auto f32 = b.getF32Type();
    auto full = RankedTensorType::get({batch, heads, seq, kvSeq}, f32);
    Value rows = mark(IotaOp::create(b, loc, full, b.getI64IntegerAttr(2)));
    Value columns = mark(IotaOp::create(b, loc, full, b.getI64IntegerAttr(3)));
    Value distance = mark(AbsOp::create(
        b, loc, mark(SubOp::create(b, loc, full, rows, columns))));
    // The slopes broadcast to the scores' shape first, so that every op of
    // the bias is of that shape and one kernel computes them all.
    auto slopesType = cast<RankedTensorType>(slopes.getType());
    Value perHead = mark(ReshapeOp::create(
        b, loc,
        RankedTensorType::get({1, heads, 1, 1}, slopesType.getElementType()),
        slopes));
    perHead = mark(BroadcastToOp::create(
        b, loc,
        RankedTensorType::get({batch, heads, seq, kvSeq},
                              slopesType.getElementType()),
        perHead));
    if (slopesType.getElementType() != f32)
      perHead = mark(CastOp::create(b, loc, full, perHead));
    auto f32Scalar = RankedTensorType::get({}, f32);
    Value negated =
        ConstantOp::create(b, loc,
                           cast<ElementsAttr>(DenseElementsAttr::get(
                               f32Scalar, b.getFloatAttr(f32, -factor))));
    perHead = mark(MulOp::create(b, loc, full, perHead, negated));
    Value bias = mark(MulOp::create(b, loc, full, distance, perHead));
    if (element != f32)
      bias = mark(CastOp::create(b, loc, scoresType, bias));
    return bias;
  };
  if (slopes && !op.getMask() && !softcap && !window) {
    // ALiBi alone: the biases over the scale, added to the unscaled scores,
    // so that the softmax keeps the scale (one fused pass, which Megatron-
    // DeepSpeed's BLOOM spends copying the biases into baddbmm's output).
    Value biased =
        mark(AddOp::create(b, loc, scoresType, scores,
                           alibiBias(1.0 / op.getScale().convertToDouble())));
    probs = mark(
        SoftmaxOp::create(b, loc, biased, 3, op.getScale(), op.getCausal()));
  } else if (Value mask = op.getMask(); mask || softcap || window || slopes) {
    // The cap and the mask apply to scaled scores; the softmax then has no
    // scale.
    auto scalar = RankedTensorType::get({}, element);
    auto constant = [&](double value) -> Value {
      return ConstantOp::create(b, loc,
                                cast<ElementsAttr>(DenseElementsAttr::get(
                                    scalar, b.getFloatAttr(element, value))));
    };
    Value scaled = mark(MulOp::create(
        b, loc, scoresType, scores, constant(op.getScale().convertToDouble())));
    if (softcap) {
      // softcap · tanh(s / softcap), before the mask.
      double cap = softcap->convertToDouble();
      Value t =
          mark(TanhOp::create(b, loc, scoresType,
                              mark(MulOp::create(b, loc, scoresType, scaled,
                                                 constant(1.0 / cap)))));
      scaled = mark(MulOp::create(b, loc, scoresType, t, constant(cap)));
    }
    if (slopes)
      scaled = mark(AddOp::create(b, loc, scoresType, scaled, alibiBias(1.0)));
    Value masked = scaled;
    if (mask &&
        cast<RankedTensorType>(mask.getType()).getElementType().isInteger(1))
      masked = mark(
          WhereOp::create(b, loc, scoresType, mask, scaled,
                          constant(-std::numeric_limits<double>::infinity())));
    else if (mask)
      masked = mark(AddOp::create(b, loc, scoresType, scaled, mask));
    if (window) {
      // The keys a sliding window hides beyond the causal ones (j <= i -
      // window), as a constant [seq, kv_seq] mask: the unfused attention
      // holds its scores whole anyway.
      auto bandType = RankedTensorType::get({seq, kvSeq}, b.getI1Type());
      SmallVector<bool> keep(size_t(seq * kvSeq));
      for (int64_t i = 0; i < seq; ++i)
        for (int64_t j = 0; j < kvSeq; ++j)
          keep[size_t(i * kvSeq + j)] = j > i - window;
      Value band = ConstantOp::create(
          b, loc, cast<ElementsAttr>(DenseElementsAttr::get(bandType, keep)));
      masked = mark(
          WhereOp::create(b, loc, scoresType, band, masked,
                          constant(-std::numeric_limits<double>::infinity())));
    }
    probs = mark(SoftmaxOp::create(b, loc, masked, 3, llvm::APFloat(1.0f),
                                   op.getCausal()));
  } else {
    probs = mark(
        SoftmaxOp::create(b, loc, scores, 3, op.getScale(), op.getCausal()));
  }
  if (std::optional<APFloat> dropout = op.getDropout())
    probs = mark(DropoutOp::create(b, loc, probs, *dropout));
  Value out = mark(
      MatmulOp::create(b, loc, op.getType(), probs, v, UnitAttr(), UnitAttr()));
  return out;
}

//===----------------------------------------------------------------------===//
// (gradients)
//===----------------------------------------------------------------------===//

// Attention's gradient is one fused op, weft.attention_grad (FlashAttention's
// backward: the probabilities recomputed per query row from q and k, never
// kept whole), with the forward's dropout. A mask that takes a gradient
// itself is differentiated through the decomposed attention instead.
LogicalResult weft::differentiateDecomposedAttention(OpBuilder &b,
                                                     AttentionOp op, Value dy,
                                                     GradientState &local) {
  // dV = Pᵀ dO, dP = dO Vᵀ, dS = P (dP - Σ dP P), dQ = s dS K, dK = s dSᵀ Q,
  // with grouped heads summed back.
  Operation *marker = insertionMarker(b);
  Value out = buildDecomposedAttention(b, op);
  SmallVector<Operation *> ops = createdSince(b, marker);
  local.setGradient(out, dy);
  if (failed(differentiateOps(local, ops)))
    return failure();
  // The recomputed output itself (P V) is read by nothing.
  if (Operation *product = out.getDefiningOp(); product && out.use_empty())
    product->erase();
  return success();
}

LogicalResult AttentionOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  if (!dy)
    return success();
  if (dy.getType() != getType())
    dy = CastOp::create(state.builder(), getLoc(), getType(), dy);
  // A mask or slopes that take a gradient are differentiated through the
  // decomposed attention.
  bool maskGradient =
      (getMask() && state.needsGradient(getMask())) ||
      (getAlibiSlopes() && state.needsGradient(getAlibiSlopes()));
  if (!maskGradient) {
    auto grad = AttentionGradOp::create(
        state.builder(), getLoc(), getQ(), getK(), getV(), dy, getMask(),
        getAlibiSlopes(), Value(), Value(), Value(), Value(), getScaleAttr(),
        getCausalAttr(), getDropoutAttr(), getSoftcapAttr(), getWindowAttr(),
        IntegerAttr());
    Value operands[] = {getQ(), getK(), getV()};
    for (auto [operand, gradient] : llvm::zip(operands, grad.getResults()))
      state.accumulate(getLoc(), operand, gradient);
    return success();
  }
  OpBuilder &b = state.builder();
  GradientState local(b);
  local.inheritFrozen(state);
  for (Value operand : getOperands())
    if (state.needsGradient(operand))
      local.markActive(operand);
  if (failed(differentiateDecomposedAttention(b, *this, dy, local)))
    return failure();
  for (Value operand : getOperands())
    state.accumulate(getLoc(), operand, local.gradient(operand));
  return success();
}
LogicalResult AttentionBlockOp::buildGradients(GradientState &) {
  return emitError("the gradient of a ring-attention block is not built yet: "
                   "differentiate before partitioning (weft.attention's "
                   "gradient partitions like its forward)");
}

// d logits = (softmax(logits) - onehot(labels)) · w per position, where w is
// the loss gradient (divided by the counted positions for `mean`) and zero
// at ignored positions.
LogicalResult CrossEntropyOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  if (!g.needs(getLogits()))
    return success();
  RankedTensorType logits = tensorType(getLogits());
  RankedTensorType labels = tensorType(getLabels());
  int64_t rank = logits.getRank();
  SmallVector<int64_t> column(labels.getShape());
  column.push_back(1);
  // The softmax as exp(logits - logsumexp): one reduction and an
  // elementwise chain, which a vocabulary-parallel head computes on its own
  // block (the log-sum-exp's blocks combine with two all-reduces of a value
  // per row) and the CUDA backend fuses with the one-hot subtraction.
  Value lse = ReduceLogSumExpOp::create(g.b(), getLoc(), getLogits(),
                                        g.b().getDenseI64ArrayAttr({rank - 1}),
                                        g.b().getUnitAttr());
  Value probs = ExpOp::create(g.b(), getLoc(), logits, g.sub(getLogits(), lse));
  Value iota = IotaOp::create(g.b(), getLoc(),
                              logits.clone(labels.getElementType()), rank - 1);
  Value hit = g.compare(ComparePredicate::eq, g.reshape(getLabels(), column),
                        iota, logits.getShape());
  Value diff = g.sub(probs, g.cast(hit, logits.getElementType()));
  Value weight = g.dy(getResult());
  Value valid;
  if (std::optional<int64_t> ignore = getIgnoreIndex()) {
    Value ignored = state.splat(
        getLoc(), RankedTensorType::get({}, labels.getElementType()),
        double(*ignore));
    valid = g.cast(g.compare(ComparePredicate::ne, getLabels(), ignored,
                             labels.getShape()),
                   logits.getElementType());
  }
  if (getReduction() == LossReduction::mean) {
    Value count =
        valid ? ReduceSumOp::create(
                    g.b(), getLoc(),
                    RankedTensorType::get({}, logits.getElementType()), valid,
                    llvm::to_vector(llvm::seq<int64_t>(0, labels.getRank())),
                    false)
              : g.scalar(getLogits(), double(labels.getNumElements()));
    weight = g.div(weight, count);
  }
  if (valid)
    weight = g.mul(valid, weight);
  if (tensorType(weight).getRank() > 0)
    weight = g.reshape(weight, column);
  g.to(getLogits(), g.mul(diff, weight));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  g.to(getInput(),
       g.reshape(g.dy(getResult()), tensorType(getInput()).getShape()));
  return success();
}
LogicalResult TransposeOp::buildGradients(GradientState &state) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = int64_t(i);
  Value dy = state.gradient(getResult());
  state.accumulate(getLoc(), getInput(),
                   TransposeOp::create(state.builder(), getLoc(),
                                       getInput().getType(), dy, inverse));
  return success();
}
LogicalResult BroadcastToOp::buildGradients(GradientState &state) {
  state.accumulate(getLoc(), getInput(), state.gradient(getResult()));
  return success();
}
// The slice's gradient is its result's, padded with zeros to the input's
// shape dimension by dimension. Along a strided dimension the result's
// elements first go every `stride` places, zeros between them (GPT-J's
// interleaved rotary embedding takes x[..., ::2] and x[..., 1::2]).
LogicalResult SliceOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  RankedTensorType in = tensorType(getInput());
  Value grad = g.dy(getResult());
  std::optional<ArrayRef<int64_t>> strides = getStrides();
  auto zerosLike = [&](RankedTensorType type, int64_t d, int64_t size) {
    SmallVector<int64_t> shape(type.getShape());
    shape[d] = size;
    return state.splat(getLoc(), withShape(type, shape), 0.0);
  };
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t start = getStarts()[d];
    int64_t stride = strides ? (*strides)[d] : 1;
    RankedTensorType type = tensorType(grad);
    int64_t span = type.getDimSize(d); // input places the gradient covers
    if (stride > 1 && span > 0) {
      // [.., n, ..] -> [.., n, 1, ..] ++ zeros [.., n, stride - 1, ..]
      // -> [.., n * stride, ..], cut to the input's places after `start`.
      SmallVector<int64_t> split(type.getShape());
      split.insert(split.begin() + d + 1, 1);
      Value column = g.reshape(grad, split);
      RankedTensorType columnType = tensorType(column);
      SmallVector<int64_t> spread(columnType.getShape());
      spread[d + 1] = stride;
      Value spaced = ConcatOp::create(
          state.builder(), getLoc(), withShape(columnType, spread),
          ValueRange{column, zerosLike(columnType, d + 1, stride - 1)}, d + 1);
      SmallVector<int64_t> flat(type.getShape());
      flat[d] = span * stride;
      grad = g.reshape(spaced, flat);
      span = std::min(span * stride, in.getDimSize(d) - start);
      if (span < flat[d]) {
        SmallVector<int64_t> starts(flat.size(), 0), limits(flat);
        limits[d] = span;
        grad = SliceOp::create(state.builder(), getLoc(), grad, starts, limits,
                               DenseI64ArrayAttr());
      }
      type = tensorType(grad);
    }
    int64_t after = in.getDimSize(d) - start - span;
    if (start == 0 && after == 0)
      continue;
    SmallVector<Value> parts;
    if (start > 0)
      parts.push_back(zerosLike(type, d, start));
    parts.push_back(grad);
    if (after > 0)
      parts.push_back(zerosLike(type, d, after));
    SmallVector<int64_t> shape(type.getShape());
    shape[d] = in.getDimSize(d);
    grad = ConcatOp::create(state.builder(), getLoc(), withShape(type, shape),
                            parts, d);
  }
  state.accumulate(getLoc(), getInput(), grad);
  return success();
}
LogicalResult ConcatOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  RankedTensorType type = tensorType(dy);
  int64_t axis = getAxis(), offset = 0;
  for (Value input : getInputs()) {
    RankedTensorType in = tensorType(input);
    SmallVector<int64_t> starts(type.getRank(), 0), limits(type.getShape());
    starts[axis] = offset;
    limits[axis] = offset + in.getDimSize(axis);
    offset += in.getDimSize(axis);
    if (!state.needsGradient(input))
      continue;
    state.accumulate(getLoc(), input,
                     SliceOp::create(state.builder(), getLoc(),
                                     withShape(type, in.getShape()), dy, starts,
                                     limits, DenseI64ArrayAttr()));
  }
  return success();
}
LogicalResult SplitOp::buildGradients(GradientState &state) {
  SmallVector<Value> pieces;
  for (Value result : getResults())
    pieces.push_back(state.gradientOrZeros(getLoc(), result));
  state.accumulate(getLoc(), getInput(),
                   ConcatOp::create(state.builder(), getLoc(),
                                    getInput().getType(), pieces, getAxis()));
  return success();
}

//===----------------------------------------------------------------------===//
// Layers: a backward layer per forward layer
//===----------------------------------------------------------------------===//

// The gradient of a layer is a layer of kind `<kind>.backward`: it takes the
// forward layer's inputs and its results' gradients, recomputes the body and
// differentiates it, and yields the inputs' gradients and then the body's
// parameters' gradients. It is isolated from above like the forward layer,
// so it moves to a pipeline stage whole, and recomputing the body inside it
// is full (per-layer) activation recomputation.
LogicalResult LayerOp::buildGradients(GradientState &state) {
  OpBuilder &b = state.builder();
  Location loc = getLoc();
  Block &body = getBody().front();
  SmallVector<Value> inputs(getInputs());
  SmallVector<unsigned> seeded;
  for (auto [index, result] : llvm::enumerate(getResults()))
    if (state.needsGradient(result)) {
      inputs.push_back(state.gradientOrZeros(loc, result));
      seeded.push_back(unsigned(index));
    }
  auto *block = new Block();
  for (Value input : inputs)
    block->addArgument(input.getType(), loc);
  OpBuilder inner(getContext());
  inner.setInsertionPointToEnd(block);
  IRMapping map;
  for (auto [arg, local] :
       llvm::zip(body.getArguments(), block->getArguments()))
    map.map(arg, local);
  SmallVector<Operation *> forward, originals;
  for (Operation &op : body.without_terminator()) {
    forward.push_back(inner.clone(op, map));
    originals.push_back(&op);
  }
  GradientState local(inner);
  local.inheritFrozen(state);
  for (auto [index, input] : llvm::enumerate(getInputs()))
    if (state.needsGradient(input))
      local.markActive(block->getArgument(index));
  // Activity first, then the seeds.
  propagateActivity(local, forward);
  auto yield = cast<YieldOp>(body.getTerminator());
  for (auto [k, index] : llvm::enumerate(seeded))
    local.accumulate(loc, map.lookup(yield.getValues()[index]),
                     block->getArgument(getInputs().size() + k));
  if (failed(differentiateOps(local, forward))) {
    delete block;
    return failure();
  }
  SmallVector<Value> yielded;
  SmallVector<Value> gradientInputs;
  for (auto [index, input] : llvm::enumerate(getInputs()))
    if (state.needsGradient(input)) {
      yielded.push_back(local.gradientOrZeros(loc, block->getArgument(index)));
      gradientInputs.push_back(input);
    }
  SmallVector<std::string> names;
  for (const auto &[name, grad] : local.getParameterGradients()) {
    yielded.push_back(grad);
    names.push_back(name);
  }
  YieldOp::create(inner, loc, yielded);
  // Without full recomputation, the backward layer takes what it reads of
  // the forward from the forward layer, which yields it: every value (none),
  // or every value but the attention core's (selective). Parameters and
  // constants are read again, not kept. Walking backward, a value is kept
  // only if the backward ops or a recomputed op still read it.
  SmallVector<Value> saved;
  if (state.getRecompute() != Recompute::Full) {
    // Values computed from the layer's inputs are activations; the rest
    // (a transposed weight) is recomputed from the parameters.
    llvm::DenseSet<Value> fromInputs(block->getArguments().begin(),
                                     block->getArguments().end());
    for (Operation *clone : forward)
      if (llvm::any_of(clone->getOperands(),
                       [&](Value v) { return fromInputs.contains(v); }))
        fromInputs.insert(clone->result_begin(), clone->result_end());
    llvm::DenseSet<Operation *> keptByPolicy;
    if (state.getRecompute() == Recompute::Ops)
      keptByOpPolicy(
          forward,
          [&](Value v) { return !fromInputs.contains(v) && isFloatTensor(v); },
          keptByPolicy);
    // The forward clones not yet walked: uses by them are not the
    // backward's.
    llvm::DenseSet<Operation *> pending(forward.begin(), forward.end());
    for (size_t i = forward.size(); i-- > 0;) {
      Operation *clone = forward[i], *original = originals[i];
      pending.erase(clone);
      auto differentiable = dyn_cast<DifferentiableOpInterface>(clone);
      bool recomputed =
          llvm::none_of(clone->getResults(),
                        [&](Value v) { return fromInputs.contains(v); }) ||
          (state.getRecompute() == Recompute::Selective && differentiable &&
           differentiable.isAttentionCore()) ||
          (state.getRecompute() == Recompute::Ops &&
           !keptByPolicy.contains(clone)) ||
          (state.getRecompute() != Recompute::Ops &&
           isRematerialized(clone, fromInputs, pending));
      if (!recomputed)
        for (auto [value, kept] :
             llvm::zip(clone->getResults(), original->getResults())) {
          if (value.use_empty())
            continue;
          value.replaceAllUsesWith(block->addArgument(value.getType(), loc));
          saved.push_back(kept);
        }
      if (clone->use_empty())
        clone->erase();
    }
  }
  SmallVector<Type> types;
  for (Value v : yielded)
    types.push_back(v.getType());
  LayerOp forwardLayer = *this;
  if (!saved.empty()) {
    auto yield = cast<YieldOp>(body.getTerminator());
    SmallVector<Value> values(yield.getValues());
    values.append(saved.begin(), saved.end());
    OpBuilder yb(yield);
    YieldOp::create(yb, yield.getLoc(), values);
    yield.erase();
    SmallVector<Type> resultTypes(getResultTypes());
    for (Value v : saved)
      resultTypes.push_back(v.getType());
    OpBuilder fb(getOperation());
    forwardLayer = LayerOp::create(fb, loc, getKind(), getIndex(), getInputs(),
                                   resultTypes);
    forwardLayer->setAttrs(getOperation()->getAttrs());
    forwardLayer.getBody().front().erase();
    forwardLayer.getBody().getBlocks().splice(forwardLayer.getBody().end(),
                                              getBody().getBlocks());
    for (auto [old, widened] :
         llvm::zip(getResults(), forwardLayer.getResults()))
      old.replaceAllUsesWith(widened);
    for (unsigned i = getNumResults(); i < forwardLayer.getNumResults(); ++i)
      inputs.push_back(forwardLayer.getResult(i));
  }
  auto backward = LayerOp::create(b, loc, (getKind() + ".backward").str(),
                                  getIndex(), inputs, types);
  backward.getBody().front().erase();
  backward.getBody().push_back(block);
  unsigned r = 0;
  for (Value input : gradientInputs)
    state.accumulate(loc, input, backward.getResult(r++));
  for (const std::string &name : names)
    state.accumulateParameter(loc, name, backward.getResult(r++));
  // The widened forward layer replaces this one; the sweep has passed it.
  if (forwardLayer != *this)
    getOperation()->erase();
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives: each one's transpose
//===----------------------------------------------------------------------===//

// An all-reduce of partial sums is read whole by every rank: the gradient of
// each partial sum is the result's gradient (the mean's, divided by n).
LogicalResult AllReduceOp::buildGradients(GradientState &state) {
  Grad g{state, getLoc()};
  Value dy = g.dy(getResult());
  switch (getKind()) {
  case ReductionKind::sum:
    g.to(getInput(), dy);
    return success();
  case ReductionKind::avg:
    g.to(getInput(), g.mulScalar(dy, 1.0 / double(getGroupSize())));
    return success();
  default:
    return emitError("the gradient of a max or min all-reduce is not built");
  }
}
LogicalResult AllGatherOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  state.accumulate(getLoc(), getInput(),
                   ReduceScatterOp::create(
                       state.builder(), getLoc(), getInput().getType(),
                       ReductionKindAttr::get(getContext(), ReductionKind::sum),
                       dy, getMeshAttr(), getAxesAttr(), getDimAttr(),
                       getZigzagAttr(), getCodecAttr()));
  return success();
}
LogicalResult ReduceScatterOp::buildGradients(GradientState &state) {
  if (getKind() != ReductionKind::sum)
    return emitError("only a summing reduce-scatter has a gradient");
  Value dy = state.gradient(getResult());
  state.accumulate(
      getLoc(), getInput(),
      AllGatherOp::create(state.builder(), getLoc(), getInput().getType(), dy,
                          getMeshAttr(), getAxesAttr(), getDimAttr(),
                          getZigzagAttr(), getCodecAttr(), IntegerAttr()));
  return success();
}
LogicalResult AllSliceOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  state.accumulate(getLoc(), getInput(),
                   AllGatherOp::create(
                       state.builder(), getLoc(), getInput().getType(), dy,
                       getMeshAttr(), getAxesAttr(), getDimAttr(),
                       getZigzagAttr(), CollectiveCodecAttr(), IntegerAttr()));
  return success();
}
LogicalResult AllToAllOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  state.accumulate(getLoc(), getInput(),
                   AllToAllOp::create(state.builder(), getLoc(),
                                      getInput().getType(), dy, getMeshAttr(),
                                      getAxesAttr(), getConcatDimAttr(),
                                      getSplitDimAttr(), getCodecAttr()));
  return success();
}
LogicalResult CollectivePermuteOp::buildGradients(GradientState &state) {
  Value dy = state.gradient(getResult());
  int64_t n = std::max<int64_t>(getGroupSize(), 1);
  int64_t back = ((n - getShift()) % n + n) % n;
  state.accumulate(getLoc(), getInput(),
                   CollectivePermuteOp::create(
                       state.builder(), getLoc(), getInput().getType(), dy,
                       getMeshAttr(), getAxesAttr(),
                       state.builder().getI64IntegerAttr(back),
                       getCodecAttr()));
  return success();
}
LogicalResult SendOp::buildGradients(GradientState &) {
  return emitError("the gradient of a pipeline send is not built yet");
}
LogicalResult RecvOp::buildGradients(GradientState &) {
  return emitError("the gradient of a pipeline receive is not built yet");
}
LogicalResult BroadcastOp::buildGradients(GradientState &) {
  return emitError("the gradient of a broadcast is not built yet");
}
LogicalResult FusionOp::buildGradients(GradientState &) {
  return emitError("a fusion has no gradient: differentiate before "
                   "-weft-fuse-elementwise");
}

//===- WeftDifferentiate.cpp - A training step's backward -----------------===//
//
// Part of the Weft project.
//
// Sweeps a function's ops in reverse from its scalar loss; every op builds
// its own gradient (DifferentiableOpInterface), so this pass names no op.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Regex.h"

#include <functional>
#include <memory>

namespace weft {
#define GEN_PASS_DEF_WEFTDIFFERENTIATE
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftDifferentiate
    : public weft::impl::WeftDifferentiateBase<WeftDifferentiate> {
  using WeftDifferentiateBase::WeftDifferentiateBase;

  void runOnOperation() override {
    std::optional<Recompute> mode =
        llvm::StringSwitch<std::optional<Recompute>>(recompute)
            .Case("full", Recompute::Full)
            .Case("selective", Recompute::Selective)
            .Case("none", Recompute::None)
            .Case("op", Recompute::Ops)
            .Default(std::nullopt);
    if (!mode) {
      getOperation().emitError("-weft-differentiate: recompute '")
          << recompute << "' is not full, selective, op or none";
      return signalPassFailure();
    }
    std::function<bool(StringRef)> frozen;
    if (!freeze.empty()) {
      auto regex = std::make_shared<llvm::Regex>(freeze);
      std::string why;
      if (!regex->isValid(why)) {
        getOperation().emitError("-weft-differentiate: freeze '")
            << freeze << "' is not a regular expression: " << why;
        return signalPassFailure();
      }
      frozen = [regex](StringRef name) { return regex->match(name); };
    }
    bool any = false;
    const bool split =
        getOperation()->hasAttr(WeftDialect::getPipelineAttrName());
    // With stages, the loss scale comes to the last stage as a new model
    // input, after those the stages read.
    int64_t modelInputs = 0;
    for (auto func : getOperation().getOps<func::FuncOp>())
      for (unsigned i = 0; !func.isExternal() && i < func.getNumArguments();
           ++i)
        if (auto input = func.getArgAttrOfType<IntegerAttr>(
                i, WeftDialect::getModelInputAttrName()))
          modelInputs = std::max(modelInputs, input.getInt() + 1);
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      any = true;
      if (failed(split ? differentiateStage(
                             func, *mode,
                             scaleLoss ? std::optional<int64_t>(modelInputs)
                                       : std::nullopt,
                             frozen)
                       : differentiate(func, *mode, scaleLoss, frozen)))
        return signalPassFailure();
    }
    if (!any) {
      getOperation().emitError("-weft-differentiate: no function to "
                               "differentiate");
      signalPassFailure();
    }
  }

  /// A pipeline stage's backward (a vector-Jacobian product): the gradient
  /// of each float value the stage sends on comes back as a new argument
  /// (weft.cotangent_of), the loss (model output #0, on the last stage) is
  /// seeded with 1, or with the loss scale, model input #`scaleInput`; the
  /// stage returns, after its own results, the gradient of each float value
  /// it received (weft.gradient_to the previous stage) and its parameters'
  /// gradients (weft.gradient_of).
  static LogicalResult
  differentiateStage(func::FuncOp func, Recompute mode,
                     std::optional<int64_t> scaleInput,
                     const std::function<bool(StringRef)> &frozen) {
    auto stageAttr = func->getAttrOfType<DictionaryAttr>(
        WeftDialect::getPipelineStageAttrName());
    if (!stageAttr)
      return func.emitError("@")
             << func.getSymName()
             << " is not a pipeline stage of the split module (no "
             << WeftDialect::getPipelineStageAttrName() << ")";
    for (unsigned r = 0; r < func.getNumResults(); ++r)
      if (func.getResultAttr(r, WeftDialect::getGradientOfAttrName()))
        return func.emitError("@")
               << func.getSymName() << " is already differentiated";
    const int64_t stage = stageAttr.getAs<IntegerAttr>("stage").getInt();
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    OpBuilder b(ret);
    GradientState state(b, mode);
    state.setFrozen(frozen);
    auto isFloat = [](Type type) {
      auto tensor = dyn_cast<RankedTensorType>(type);
      return tensor && isa<FloatType>(tensor.getElementType());
    };
    SmallVector<BlockArgument> received;
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(),
                          WeftDialect::getReceivedFromAttrName()) &&
          isFloat(arg.getType())) {
        received.push_back(arg);
        state.markActive(arg);
      }
    propagateActivity(state, ops);
    bool seeded = false;
    unsigned numResults = ret.getNumOperands();
    for (unsigned r = 0; r < numResults; ++r) {
      Value value = ret.getOperand(r);
      if (func.getResultAttr(r, WeftDialect::getSentToAttrName())) {
        if (!isFloat(value.getType()))
          continue;
        unsigned index = func.getNumArguments();
        if (failed(
                func.insertArgument(index, value.getType(),
                                    b.getDictionaryAttr(b.getNamedAttr(
                                        WeftDialect::getCotangentOfAttrName(),
                                        b.getI64IntegerAttr(r))),
                                    ret.getLoc())))
          return failure();
        BlockArgument cotangent = func.getArgument(index);
        if (state.needsGradient(value))
          state.setGradient(value, cotangent);
        seeded = true;
        continue;
      }
      auto output = func.getResultAttrOfType<IntegerAttr>(
          r, WeftDialect::getModelOutputAttrName());
      auto type = dyn_cast<RankedTensorType>(value.getType());
      if (output && output.getInt() == 0 && type && type.getRank() == 0 &&
          isFloat(type)) {
        if (state.needsGradient(value)) {
          Value seed = scaleInput ? lossScaleArgument(func, type, *scaleInput)
                                  : state.splat(ret.getLoc(), type, 1.0);
          if (!seed)
            return failure();
          state.setGradient(value, seed);
        }
        seeded = true;
      }
    }
    if (!seeded)
      return func.emitError("@")
             << func.getSymName()
             << " neither sends a float value on nor returns the scalar loss "
                "as model output #0: run -weft-append-loss=reduction=mean "
                "before -weft-split-stages";
    if (failed(differentiateOps(state, ops)))
      return failure();
    SmallVector<Value> results(ret.getOperands());
    SmallVector<DictionaryAttr> attrs;
    for (unsigned r = 0; r < numResults; ++r)
      attrs.push_back(func.getResultAttrDict(r)
                          ? func.getResultAttrDict(r)
                          : DictionaryAttr::get(func.getContext()));
    for (BlockArgument arg : received) {
      results.push_back(state.gradientOrZeros(ret.getLoc(), arg));
      attrs.push_back(b.getDictionaryAttr(
          b.getNamedAttr(WeftDialect::getGradientToAttrName(),
                         b.getI64IntegerAttr(stage - 1))));
    }
    for (const auto &[name, grad] : state.getParameterGradients()) {
      results.push_back(grad);
      attrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
          WeftDialect::getGradientOfAttrName(), b.getStringAttr(name))));
    }
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   ValueRange(results).getTypes()));
    func.setAllResultAttrs(attrs);
    return success();
  }

  /// Loss scaling's seed: a new last argument of `func`, an f32 scalar
  /// marked weft.loss_scale (and, on a pipeline stage, as model input
  /// #`modelInput`), cast to the loss's type.
  static Value lossScaleArgument(func::FuncOp func, RankedTensorType lossType,
                                 std::optional<int64_t> modelInput) {
    OpBuilder b(func.getContext());
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    SmallVector<NamedAttribute, 2> attrs{
        b.getNamedAttr(WeftDialect::getLossScaleAttrName(), b.getUnitAttr())};
    if (modelInput)
      attrs.push_back(b.getNamedAttr(WeftDialect::getModelInputAttrName(),
                                     b.getI64IntegerAttr(*modelInput)));
    unsigned index = func.getNumArguments();
    Block &body = func.getBody().front();
    if (failed(func.insertArgument(index, scalar, b.getDictionaryAttr(attrs),
                                   func.getLoc())))
      return Value();
    Value seed = func.getArgument(index);
    if (scalar == lossType)
      return seed;
    b.setInsertionPoint(body.getTerminator());
    return CastOp::create(b, func.getLoc(), lossType, seed);
  }

  static LogicalResult
  differentiate(func::FuncOp func, Recompute mode, bool scaleLoss,
                const std::function<bool(StringRef)> &frozen) {
    auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    auto lossType =
        ret.getNumOperands()
            ? dyn_cast<RankedTensorType>(ret.getOperand(0).getType())
            : RankedTensorType();
    if (!lossType || lossType.getRank() != 0 ||
        !isa<FloatType>(lossType.getElementType()))
      return func.emitError("@")
             << func.getSymName()
             << " does not return a scalar loss first: run "
                "-weft-append-loss=reduction=mean (or return a rank-0 float "
                "tensor) before -weft-differentiate";
    Value loss = ret.getOperand(0);
    SmallVector<Operation *> ops;
    for (Operation &op : func.getBody().front().without_terminator())
      ops.push_back(&op);
    OpBuilder b(ret);
    GradientState state(b, mode);
    state.setFrozen(frozen);
    propagateActivity(state, ops);
    if (!state.needsGradient(loss))
      return func.emitError("@")
             << func.getSymName() << ": the loss depends on no parameter"
             << (frozen ? " that is not frozen" : "")
             << ", so there is nothing to train";
    Value seed = scaleLoss ? lossScaleArgument(func, lossType, std::nullopt)
                           : state.splat(ret.getLoc(), lossType, 1.0);
    if (!seed)
      return failure();
    state.setGradient(loss, seed);
    if (failed(differentiateOps(state, ops)))
      return failure();
    // Gradients in the order the forward reads the parameters.
    llvm::StringMap<unsigned> order;
    func.walk([&](ParameterOp param) {
      order.try_emplace(param.getName(), order.size());
    });
    SmallVector<std::pair<std::string, Value>> gradients(
        state.getParameterGradients());
    llvm::stable_sort(gradients, [&](const auto &x, const auto &y) {
      return order.lookup(x.first) < order.lookup(y.first);
    });
    SmallVector<Value> results{loss};
    SmallVector<DictionaryAttr> attrs{DictionaryAttr::get(func.getContext())};
    for (const auto &[name, grad] : gradients) {
      results.push_back(grad);
      attrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
          WeftDialect::getGradientOfAttrName(), b.getStringAttr(name))));
    }
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                   ValueRange(results).getTypes()));
    func.setAllResultAttrs(attrs);
    return success();
  }
};
} // namespace

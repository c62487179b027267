//===- WeftAppendLoss.cpp - A model's logits into a per-token loss --------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <limits>

namespace weft {
#define GEN_PASS_DEF_WEFTAPPENDLOSS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

/// The sum of the per-position losses over the number of positions whose
/// label counts.
static Value meanOverCounted(OpBuilder &b, Location loc, Value losses,
                             Value labels, IntegerAttr ignore) {
  auto type = cast<RankedTensorType>(losses.getType());
  auto scalar = RankedTensorType::get({}, type.getElementType());
  SmallVector<int64_t> all =
      llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
  Value sum = ReduceSumOp::create(b, loc, scalar, losses, all, false);
  Value count;
  if (ignore) {
    auto labelType = cast<RankedTensorType>(labels.getType());
    Value ignored = ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            RankedTensorType::get({}, labelType.getElementType()),
            b.getIntegerAttr(labelType.getElementType(), ignore.getInt()))));
    Value counted = CompareOp::create(
        b, loc, RankedTensorType::get(labelType.getShape(), b.getI1Type()),
        ComparePredicate::ne, labels, ignored);
    Value ones = CastOp::create(b, loc, type, counted);
    count = ReduceSumOp::create(b, loc, scalar, ones, all, false);
  } else {
    count = ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            scalar, b.getFloatAttr(type.getElementType(),
                                   double(type.getNumElements())))));
  }
  return DivOp::create(b, loc, scalar, sum, count);
}

namespace {
struct WeftAppendLoss : public weft::impl::WeftAppendLossBase<WeftAppendLoss> {
  using WeftAppendLossBase::WeftAppendLossBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal() && !func)
        func = f;
    if (!func || func.getNumResults() == 0) {
      module.emitError(
          "-weft-append-loss needs a function that returns logits");
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    Value logits = ret.getOperand(0);
    auto type = cast<RankedTensorType>(logits.getType());
    if (type.getRank() < 2 || !isa<FloatType>(type.getElementType())) {
      InFlightDiagnostic diag = ret.emitError("the model's first result is ")
                                << type
                                << ", not logits [..., classes] of a float "
                                   "type; a loss needs logits";
      // A scalar: a loss the model computes in a form -weft-lift-model-loss
      // does not take apart (class weights, a sum of terms).
      if (type.getRank() == 0 && isa<FloatType>(type.getElementType()))
        diag << " (a scalar: if it is the model's own loss, export the model "
                "returning its logits, or its loss as cross_entropy(logits, "
                "labels) with reduction 'mean')";
      return signalPassFailure();
    }
    OpBuilder b(ret);
    Location loc = ret.getLoc();
    ArrayRef<int64_t> positions = type.getShape().drop_back();
    auto labelType = RankedTensorType::get(positions, b.getI64Type());
    BlockArgument labels =
        func.getBody().front().addArgument(labelType, func.getLoc());
    auto f32 = RankedTensorType::get(type.getShape(), b.getF32Type());
    Value wide = logits;
    if (type != f32)
      wide = CastOp::create(b, loc, f32, logits);
    IntegerAttr ignore;
    if (ignoreIndex != std::numeric_limits<int64_t>::min())
      ignore = b.getI64IntegerAttr(ignoreIndex);
    Value loss = CrossEntropyOp::create(
        b, loc, RankedTensorType::get(positions, b.getF32Type()), wide, labels,
        LossReductionAttr::get(b.getContext(), LossReduction::none), ignore);
    if (reduction == "mean") {
      loss = meanOverCounted(b, loc, loss, labels, ignore);
    } else if (reduction != "none") {
      module.emitError("-weft-append-loss: reduction '")
          << reduction << "' is not none or mean";
      return signalPassFailure();
    }
    ret->setOperand(0, loss);
    SmallVector<Type> results(ret.getOperandTypes());
    func.setType(FunctionType::get(
        b.getContext(), func.getBody().front().getArgumentTypes(), results));
  }
};
} // namespace

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
            .Default(std::nullopt);
    if (!mode) {
      getOperation().emitError("-weft-differentiate: recompute '")
          << recompute << "' is not full, selective or none";
      return signalPassFailure();
    }
    bool any = false;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      any = true;
      if (failed(differentiate(func, *mode)))
        return signalPassFailure();
    }
    if (!any) {
      getOperation().emitError("-weft-differentiate: no function to "
                               "differentiate");
      signalPassFailure();
    }
  }

  static LogicalResult differentiate(func::FuncOp func, Recompute mode) {
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
    propagateActivity(state, ops);
    if (!state.needsGradient(loss))
      return func.emitError("@")
             << func.getSymName()
             << ": the loss depends on no parameter, so there is nothing to "
                "train";
    state.setGradient(loss, state.splat(ret.getLoc(), lossType, 1.0));
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

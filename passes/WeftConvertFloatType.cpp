//===- WeftConvertFloatType.cpp - f32 tensors as bf16 or f16 --------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Dialect/WeftElements.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace weft {
#define GEN_PASS_DEF_WEFTCONVERTFLOATTYPE
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

struct WeftConvertFloatType
    : public weft::impl::WeftConvertFloatTypeBase<WeftConvertFloatType> {
  using WeftConvertFloatTypeBase::WeftConvertFloatTypeBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext *context = &getContext();
    Type target;
    if (to == "bf16")
      target = BFloat16Type::get(context);
    else if (to == "f16")
      target = Float16Type::get(context);
    if (!target) {
      func.emitError("-weft-convert-float-type: 'to' must be bf16 or f16, not '")
          << to << "'";
      return signalPassFailure();
    }
    auto convert = [&](Type type) -> Type {
      auto tensor = dyn_cast<RankedTensorType>(type);
      if (tensor && tensor.getElementType().isF32())
        return tensor.clone(target);
      return type;
    };
    // A constant's elements, rounded to the new type.
    auto convertValue = [&](ElementsAttr value) -> ElementsAttr {
      auto type = dyn_cast<RankedTensorType>(value.getType());
      if (!type || !type.getElementType().isF32())
        return value;
      return convertFloatElements(value, cast<RankedTensorType>(convert(type)));
    };
    func.walk([&](Operation *op) {
      for (OpResult result : op->getResults())
        result.setType(convert(result.getType()));
      for (Region &region : op->getRegions())
        for (Block &block : region)
          for (BlockArgument arg : block.getArguments())
            arg.setType(convert(arg.getType()));
      if (auto constant = dyn_cast<ConstantOp>(op))
        constant.setValueAttr(convertValue(constant.getValue()));
      if (auto parameter = dyn_cast<ParameterOp>(op))
        if (std::optional<ElementsAttr> value = parameter.getValue())
          parameter.setValueAttr(convertValue(*value));
    });
    SmallVector<Type> inputs, results;
    for (Type type : func.getArgumentTypes())
      inputs.push_back(convert(type));
    for (Type type : func.getResultTypes())
      results.push_back(convert(type));
    func.setType(FunctionType::get(context, inputs, results));
  }
};

} // namespace

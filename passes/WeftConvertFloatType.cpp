//===- WeftConvertFloatType.cpp - f32 tensors as bf16 or f16 --------------===//
//
// Part of the Weft project.
//
// Two passes over one conversion: 16-bit inference (every f32 tensor
// narrowed, weights and signature included) and mixed-precision training
// (the same inside the function, with the f32 weights and signature kept).
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Dialect/WeftElements.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace weft {
#define GEN_PASS_DEF_WEFTCONVERTFLOATTYPE
#define GEN_PASS_DEF_WEFTMIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

/// bf16 or f16 by name; null (after a diagnostic at `func`) otherwise.
static Type sixteenBitType(func::FuncOp func, StringRef pass, StringRef option,
                           StringRef name) {
  MLIRContext *context = func.getContext();
  if (name == "bf16")
    return BFloat16Type::get(context);
  if (name == "f16")
    return Float16Type::get(context);
  func.emitError() << "-" << pass << ": '" << option
                   << "' must be bf16 or f16, not '" << name << "'";
  return Type();
}

/// `type` with `target` for its elements if it is an f32 tensor.
static Type narrowed(Type type, Type target) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (tensor && tensor.getElementType().isF32())
    return tensor.clone(target);
  return type;
}

static bool isF32Tensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getElementType().isF32();
}

/// The ops of `func` that compute positions: what is computed from iotas
/// and constants alone, reading no argument and no parameter (rotary
/// angles, their cosines and sines, as LLaMA's rotary embedding computes
/// them in the forward pass), with the constants they read. They keep f32,
/// as PyTorch computes Hugging Face's rotary tables with autocast off and
/// Megatron-LM its rotary frequencies in f32: positions past 256 have no
/// exact bf16, and an angle of thousands of radians rounded to bf16 is off
/// by tens of radians.
static llvm::SmallPtrSet<Operation *, 16>
positionComputations(func::FuncOp func) {
  llvm::SmallPtrSet<Operation *, 16> free, kept;
  func.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (op == func.getOperation() || op->getNumRegions() ||
        op->hasTrait<mlir::OpTrait::IsTerminator>() || isa<ParameterOp>(op) ||
        !isa<WeftDialect>(op->getDialect()))
      return;
    if (!llvm::all_of(op->getOperands(), [&](Value operand) {
          Operation *def = operand.getDefiningOp();
          return def && free.contains(def);
        }))
      return;
    free.insert(op);
    if (!isa<ConstantOp>(op) && llvm::any_of(op->getResultTypes(), isF32Tensor))
      kept.insert(op);
  });
  for (Operation *op : free)
    if (isa<ConstantOp>(op) &&
        llvm::any_of(op->getUsers(),
                     [&](Operation *user) { return kept.contains(user); }))
      kept.insert(op);
  return kept;
}

/// Every f32 tensor the ops of `func` make or their nested regions take,
/// as `target`; constants (and, unless `keepParameters`, parameters)
/// rounded to it, except the position computations, which keep f32 and
/// are narrowed by one cast where a narrowed op reads them. The function's
/// own arguments and signature are left to the caller.
static void narrowBody(func::FuncOp func, Type target, bool keepParameters) {
  llvm::SmallPtrSet<Operation *, 16> kept = positionComputations(func);
  // A constant's elements, rounded to the new type.
  auto convertValue = [&](ElementsAttr value) -> ElementsAttr {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || !type.getElementType().isF32())
      return value;
    return convertFloatElements(value,
                                cast<RankedTensorType>(narrowed(type, target)));
  };
  func.walk([&](Operation *op) {
    auto parameter = dyn_cast<ParameterOp>(op);
    if (op == func.getOperation() || (parameter && keepParameters) ||
        kept.contains(op))
      return;
    Type original = parameter ? parameter.getType() : Type();
    for (OpResult result : op->getResults())
      result.setType(narrowed(result.getType(), target));
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setType(narrowed(arg.getType(), target));
    if (auto constant = dyn_cast<ConstantOp>(op))
      constant.setValueAttr(convertValue(constant.getValue()));
    if (parameter)
      if (std::optional<ElementsAttr> value = parameter.getValue())
        parameter.setValueAttr(convertValue(*value));
    // A weight in a file keeps its file, which holds f32: whoever reads it
    // rounds (stored = f32).
    if (ExternalDataAttr external =
            parameter ? parameter.getExternalAttr() : ExternalDataAttr();
        external && !external.getStored() && parameter.getType() != original)
      parameter.setExternalAttr(ExternalDataAttr::get(
          func.getContext(), external.getLocation(), external.getOffset(),
          external.getLength(), external.getColumnStart(),
          external.getRowWidth(), Float32Type::get(func.getContext())));
  });
  OpBuilder b(func.getContext());
  for (Operation *op : kept) {
    b.setInsertionPointAfter(op);
    for (OpResult result : op->getResults()) {
      SmallVector<OpOperand *> reads;
      for (OpOperand &use : result.getUses())
        if (!kept.contains(use.getOwner()))
          reads.push_back(&use);
      Type type = narrowed(result.getType(), target);
      if (reads.empty() || type == result.getType())
        continue;
      Value narrow = CastOp::create(b, op->getLoc(), type, result);
      for (OpOperand *read : reads)
        read->set(narrow);
    }
  }
}

namespace {

struct WeftConvertFloatType
    : public weft::impl::WeftConvertFloatTypeBase<WeftConvertFloatType> {
  using WeftConvertFloatTypeBase::WeftConvertFloatTypeBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Type target = sixteenBitType(func, "weft-convert-float-type", "to", to);
    if (!target)
      return signalPassFailure();
    narrowBody(func, target, /*keepParameters=*/false);
    for (BlockArgument arg : func.getArguments())
      arg.setType(narrowed(arg.getType(), target));
    SmallVector<Type> inputs, results;
    for (Type type : func.getArgumentTypes())
      inputs.push_back(narrowed(type, target));
    for (Type type : func.getResultTypes())
      results.push_back(narrowed(type, target));
    func.setType(FunctionType::get(&getContext(), inputs, results));
  }
};

struct WeftMixedPrecision
    : public weft::impl::WeftMixedPrecisionBase<WeftMixedPrecision> {
  using WeftMixedPrecisionBase::WeftMixedPrecisionBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    Type target =
        sixteenBitType(func, "weft-mixed-precision", "compute", compute);
    if (!target)
      return signalPassFailure();
    narrowBody(func, target, /*keepParameters=*/true);
    OpBuilder b(&getContext());
    // Whoever reads an f32 value (a kept weight, an argument) now expects
    // it narrowed: one cast next to the value serves every read.
    auto narrowReads = [&](Value wide, Location loc) {
      Type type = narrowed(wide.getType(), target);
      SmallVector<OpOperand *> reads;
      for (OpOperand &use : wide.getUses())
        reads.push_back(&use);
      if (type == wide.getType() || reads.empty())
        return;
      Value narrow = CastOp::create(b, loc, type, wide);
      for (OpOperand *read : reads)
        read->set(narrow);
    };
    func.walk([&](ParameterOp parameter) {
      b.setInsertionPointAfter(parameter);
      narrowReads(parameter.getResult(), parameter.getLoc());
    });
    Block &entry = func.getBody().front();
    b.setInsertionPointToStart(&entry);
    for (BlockArgument arg : entry.getArguments())
      narrowReads(arg, arg.getLoc());
    // The results keep their f32 types: widened where they are returned.
    func.walk([&](func::ReturnOp ret) {
      b.setInsertionPoint(ret);
      for (auto [operand, type] :
           llvm::zip(ret->getOpOperands(), func.getResultTypes()))
        if (operand.get().getType() != type)
          operand.set(CastOp::create(b, ret.getLoc(), type, operand.get()));
    });
  }
};

} // namespace

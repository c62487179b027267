//===- Training.h - What a training step's IR says about itself -*- C++ -*-===//
//
// Part of the Weft project.
//
// Readers of the attributes the training passes leave on functions: the
// deferred gradient reduction a partitioned step names
// (-weft-defer-gradient-reduction) and the optimizer step's slots
// (-weft-build-optimizer). The driver that runs a step and the emitter that
// prints one read them here, the same way.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_TRAINING_H
#define WEFT_DIALECT_TRAINING_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

#include <string>
#include <vector>

namespace weft {

/// A training step's deferred gradient reduction: the function its
/// weft.gradient_reduction names (null if none), and the positions of the
/// results the step returns as partial sums (a weft.local_sharding with
/// partial axes), which that function takes in this order.
struct GradientReduction {
  mlir::func::FuncOp function;
  std::vector<int> partial;
  /// weft.reduce_every_micro_batch (ZeRO-2 and 3): `function` runs on each
  /// micro-batch's partial gradients, not once on their sum.
  bool everyMicroBatch = false;
  /// weft.micro_batch_block (ZeroPP): with `everyMicroBatch`, `function`
  /// runs once per block of this many micro-batches, on their sum.
  int block = 1;
};

/// The reduction of `step`; fails, with `why` saying so, if the step returns
/// partial sums that no named function reduces.
mlir::FailureOr<GradientReduction>
readGradientReduction(mlir::func::FuncOp step, std::string &why);

/// A weft.optimizer_slot: the role of an optimizer step's argument or result
/// and the parameter it belongs to (empty for a scalar).
struct OptimizerSlot {
  std::string role;
  std::string parameter;

  /// What an argument of that slot keeps from step to step, as the runtime
  /// counts the state a rank holds: nothing (a scalar, or a gradient the
  /// step computes), the parameter's block, or its optimizer state.
  enum class Held { None = 0, Parameter = 1, State = 2 };
  Held held() const {
    if (parameter.empty() || role == "grad")
      return Held::None;
    return role == "param" ? Held::Parameter : Held::State;
  }
};
OptimizerSlot optimizerSlotOf(mlir::DictionaryAttr slot);

/// By parameter name, the mesh axes a module stores the weight over beyond
/// the block it uses (`weft.stored_over`, which the partitioned weight
/// keeps: it is cut to that block on dimension 0 and all-gathered over
/// these axes before use), as the first weft.parameter of that name that
/// stores it says (a tied weight read by a stored use on one stage and
/// whole on another is stored on both). One walk of the module.
llvm::StringMap<llvm::SmallVector<std::string, 2>>
storedParameterAxes(mlir::ModuleOp module);
/// How a training run fills each of the model's inputs, as the module's
/// weft.feeds (-weft-assign-feeds) says: "tokens" (one input), "source",
/// "ones", "zeros", "positions", "labels" or "documents". Empty when the
/// attribute is absent.
std::vector<std::string> trainingFeeds(mlir::ModuleOp module);
/// Which model input takes the token ids whose next tokens are the labels:
/// the one weft.feeds names "tokens" (input 0 without the attribute).
int tokensInput(mlir::ModuleOp module);
/// Whether a function of `module` returns a parameter's gradient
/// (weft.gradient_of): the module is a training step (-weft-differentiate),
/// not a forward program.
bool returnsGradients(mlir::ModuleOp module);

OptimizerSlot optimizerArgumentSlot(mlir::func::FuncOp optimizer, unsigned i);
OptimizerSlot optimizerResultSlot(mlir::func::FuncOp optimizer, unsigned i);

} // namespace weft

#endif // WEFT_DIALECT_TRAINING_H

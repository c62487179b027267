//===- Interpreter.h - Run weft functions on the CPU ------------*- C++ -*-===//
//
// Part of the Weft project.
//
// Evaluates a func.func of weft ops op by op with the runtime's CPU kernels,
// in f32 for floats (bf16/f16 values rounded where their type demands) and
// i64 for integers. It is the reference that imports and partitioned programs
// are checked against.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_EXEC_INTERPRETER_H
#define WEFT_EXEC_INTERPRETER_H

#include "weft/runtime/Communicator.h"
#include "weft/runtime/HostTensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

#include <string>
#include <vector>

namespace weft::rt {
struct RankContext;
} // namespace weft::rt

namespace weft {

struct InterpreterOptions {
  /// Directory that external parameter locations are relative to.
  std::string weightsDir = ".";
  /// For partitioned programs: this device's rank on the module's weft.mesh
  /// (row-major over its axes) and the communicator its collectives use.
  int rank = 0;
  rt::Communicator *communicator = nullptr;
  /// Parameter values by name that replace the module's (a training run's
  /// current weights); parameters not in it read their own values.
  const llvm::StringMap<rt::HostTensor> *parameters = nullptr;
  /// The residuals of top-k all-reduces with error feedback, kept across a
  /// training run's steps; such an all-reduce needs one.
  rt::FeedbackStore *feedback = nullptr;
  /// The context of the rank running the function (a pipeline executor's):
  /// its micro-batch and the gathers it holds over a block of micro-batches
  /// (weft.all_gather ... hold N); null: every gather gathers.
  rt::RankContext *rankContext = nullptr;
  /// Where a differentiated step's saved activations are measured: element
  /// `rank` becomes the most bytes the run held at once of what its forward
  /// layers hand their backward layers (the activation inputs and the values
  /// a forward `weft.layer` yields for its `.backward` pair), from the forward
  /// layer until the backward layer has read them (if more than before).
  /// The interpreter stores floats in f32 and integers in i64.
  std::vector<int64_t> *savedActivationPeak = nullptr;
};


/// The runtime element type of a weft element type.
rt::DType toDType(mlir::Type elementType);

/// Converts constant elements to a host tensor.
rt::HostTensor toHostTensor(mlir::ElementsAttr value);

/// Reads a parameter stored as external data (ONNX's large-model format) from
/// `dir`, the directory its location is relative to.
llvm::FailureOr<rt::HostTensor> readExternalParameter(mlir::Operation *param,
                                                      llvm::StringRef dir);

/// Converts a host tensor to constant elements of `type` (same shape).
mlir::DenseElementsAttr toElementsAttr(const rt::HostTensor &tensor,
                                       mlir::RankedTensorType type);

/// Evaluates `ops` in order (each operand defined by an earlier one of them)
/// and returns the values of `results`: constant folding with the kernels
/// that run models.
llvm::FailureOr<std::vector<rt::HostTensor>>
evaluate(llvm::ArrayRef<mlir::Operation *> ops, mlir::ValueRange results,
         const InterpreterOptions &options);

/// Runs `func` on `inputs`. Problems (missing weights, out-of-range indices,
/// ops the CPU backend cannot run) are diagnostics at the op, and failure.
llvm::FailureOr<std::vector<rt::HostTensor>>
interpret(mlir::func::FuncOp func, const std::vector<rt::HostTensor> &inputs,
          const InterpreterOptions &options);

} // namespace weft

#endif // WEFT_EXEC_INTERPRETER_H

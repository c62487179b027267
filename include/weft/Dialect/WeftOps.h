//===- WeftOps.h - Operations of the weft dialect ---------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_WEFTOPS_H
#define WEFT_DIALECT_WEFTOPS_H

#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftInterfaces.h"
#include "weft/Dialect/WeftShape.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/weft/WeftOps.h.inc"

namespace weft {

/// Verifies that `sharding` can describe a value of `type`: its mesh exists
/// (looked up from `from`), names only that mesh's axes, has one entry per
/// dimension, and splits each dimension into equal parts.
llvm::LogicalResult
verifyShardingFor(ShardingAttr sharding, mlir::Type type, mlir::Operation *from,
                  llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// The shape one rank holds of a tensor of shape `globalShape` sharded by
/// `sharding` over `mesh`. The sharding must be valid for that shape.
llvm::SmallVector<int64_t> getLocalShape(ShardingAttr sharding, MeshOp mesh,
                                         llvm::ArrayRef<int64_t> globalShape);

/// The inverse: the whole tensor's shape, from the block of `localShape`
/// that one rank holds under `sharding` over `mesh`.
llvm::SmallVector<int64_t> getGlobalShape(ShardingAttr sharding, MeshOp mesh,
                                          llvm::ArrayRef<int64_t> localShape);

/// The weight `value` holds: the `weft.parameter` that defines it, directly
/// or through `weft.cast`s from float to float (the 16-bit copy of an f32
/// weight that -weft-mixed-precision reads); null otherwise. A plan splits
/// a weight, whichever copy of it an op reads.
ParameterOp getWeightParameter(mlir::Value value);

/// Whether `value` is a block of a weight: a weft.parameter through
/// weft.all_slice ops and float casts only, the same on every micro-batch
/// (what a `weft.all_gather ... hold N` may gather).
bool isWeightBlock(mlir::Value value);

/// The values that hold `param`'s weight: its result and every float cast
/// of it (getWeightParameter's inverse).
llvm::SmallVector<mlir::Value> getWeightValues(ParameterOp param);

/// An attention op's soft-capping of its scores (`softcap`), or 0 where it
/// has none: the kernels' convention.
inline float softcapOrZero(std::optional<llvm::APFloat> softcap) {
  return softcap ? softcap->convertToFloat() : 0.0f;
}

/// An attention op's sliding window (`window`), or 0 where it has none.
inline int64_t windowOrZero(std::optional<uint64_t> window) {
  return window ? int64_t(*window) : 0;
}

} // namespace weft

#endif // WEFT_DIALECT_WEFTOPS_H

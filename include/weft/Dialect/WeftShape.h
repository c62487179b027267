//===- WeftShape.h - Shape rules shared by weft ops -------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// Result-type inference that several ops share. Each function reports a
// violated constraint at `location` (when given) and returns failure, so it is
// safe on unverified IR: parsers and verifiers call it before anything else
// has checked the operands.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_WEFTSHAPE_H
#define WEFT_DIALECT_WEFTSHAPE_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/TypeRange.h"

#include <optional>

namespace weft {

/// The numpy broadcast of `lhs` and `rhs`, or std::nullopt if they do not
/// broadcast.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> lhs, llvm::ArrayRef<int64_t> rhs);

/// Infers the result of an elementwise op: the broadcast shape of all
/// operands, with `elementType`, or the first operand's element type if null.
llvm::LogicalResult
inferBroadcastResultType(std::optional<mlir::Location> location,
                         mlir::TypeRange operandTypes, mlir::Type elementType,
                         llvm::SmallVectorImpl<mlir::Type> &inferred);

/// Infers the result of a reduction of `inputType` over `axes`.
llvm::LogicalResult
inferReduceResultType(std::optional<mlir::Location> location,
                      mlir::Type inputType, llvm::ArrayRef<int64_t> axes,
                      bool keepDims, llvm::SmallVectorImpl<mlir::Type> &inferred);

} // namespace weft

#endif // WEFT_DIALECT_WEFTSHAPE_H

//===- WeftElements.h - Constant elements as values -------------*- C++ -*-===//
//
// Part of the Weft project.
//
// What passes do with the elements of a constant or an inline weight without
// running a kernel: take a block of them, round them to another float type.
// Passes use these instead of the runtime's host tensors, so that the pass
// library does not depend on the CPU backend.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_WEFTELEMENTS_H
#define WEFT_DIALECT_WEFTELEMENTS_H

#include "mlir/IR/BuiltinAttributeInterfaces.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace weft {

/// The block [starts, limits) of `value` (unit strides), as elements of the
/// block's shape and the same element type.
mlir::DenseElementsAttr sliceElements(mlir::ElementsAttr value,
                                      llvm::ArrayRef<int64_t> starts,
                                      llvm::ArrayRef<int64_t> limits);

/// `value` as elements of `type` (same shape, a float element type): each
/// float rounded to the nearest value of the new type, ties to even.
mlir::DenseElementsAttr convertFloatElements(mlir::ElementsAttr value,
                                             mlir::RankedTensorType type);

} // namespace weft

#endif // WEFT_DIALECT_WEFTELEMENTS_H

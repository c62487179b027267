//===- WeftShape.cpp - Shape rules shared by weft ops ---------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftShape.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;

namespace weft {

std::optional<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> lhs,
                                                    ArrayRef<int64_t> rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align at the trailing dimension; a missing leading dimension is 1.
    size_t fromEnd = rank - 1 - i;
    int64_t a = fromEnd < lhs.size() ? lhs[lhs.size() - 1 - fromEnd] : 1;
    int64_t b = fromEnd < rhs.size() ? rhs[rhs.size() - 1 - fromEnd] : 1;
    if (a != b && a != 1 && b != 1)
      return std::nullopt;
    result[i] = a == 1 ? b : a;
  }
  return result;
}

LogicalResult inferBroadcastResultType(std::optional<Location> location,
                                       TypeRange operandTypes, Type elementType,
                                       SmallVectorImpl<Type> &inferred) {
  if (operandTypes.empty())
    return emitOptionalError(location, "expects at least one operand");
  SmallVector<int64_t> shape;
  for (Type type : operandTypes) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor)
      return emitOptionalError(location, "expects ranked tensor operands, got ",
                               type);
    std::optional<SmallVector<int64_t>> joined =
        broadcastShapes(shape, tensor.getShape());
    if (!joined)
      return emitOptionalError(location, "operand shapes do not broadcast: ",
                               operandTypes,
                               " (dimensions must be equal or 1, aligned at "
                               "the trailing dimension)");
    shape = std::move(*joined);
  }
  if (!elementType)
    elementType = cast<RankedTensorType>(operandTypes.front()).getElementType();
  inferred.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

LogicalResult inferReduceResultType(std::optional<Location> location,
                                    Type inputType, ArrayRef<int64_t> axes,
                                    bool keepDims,
                                    SmallVectorImpl<Type> &inferred) {
  auto input = dyn_cast<RankedTensorType>(inputType);
  if (!input)
    return emitOptionalError(location, "expects a ranked tensor, got ",
                             inputType);
  if (axes.empty())
    return emitOptionalError(location, "needs at least one axis to reduce");
  int64_t rank = input.getRank();
  llvm::SmallSet<int64_t, 4> seen;
  for (int64_t axis : axes) {
    if (axis < 0 || axis >= rank)
      return emitOptionalError(location, "axis ", axis,
                               " is out of range for rank ", rank,
                               " (axes are in [0, rank))");
    if (!seen.insert(axis).second)
      return emitOptionalError(location, "axis ", axis, " is listed twice");
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!seen.contains(d))
      shape.push_back(input.getDimSize(d));
    else if (keepDims)
      shape.push_back(1);
  }
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

} // namespace weft

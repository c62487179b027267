//===- WeftElements.cpp - Constant elements as values ---------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftElements.h"

#include "llvm/ADT/SmallVector.h"

using namespace mlir;

/// Visits the row-major linear index of every element of the block
/// [starts, limits) of a tensor of `shape`.
static void forEachInBlock(ArrayRef<int64_t> shape, ArrayRef<int64_t> starts,
                           ArrayRef<int64_t> limits,
                           llvm::function_ref<void(int64_t)> visit) {
  size_t rank = shape.size();
  SmallVector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  for (size_t d = 0; d < rank; ++d)
    if (starts[d] >= limits[d])
      return;
  SmallVector<int64_t> index(starts.begin(), starts.end());
  while (true) {
    int64_t linear = 0;
    for (size_t d = 0; d < rank; ++d)
      linear += index[d] * strides[d];
    visit(linear);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++index[d] < limits[d])
        break;
      index[d] = starts[d];
      if (d == 0)
        return;
    }
    if (rank == 0)
      return;
  }
}

DenseElementsAttr weft::sliceElements(ElementsAttr value,
                                      ArrayRef<int64_t> starts,
                                      ArrayRef<int64_t> limits) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape;
  for (auto [start, limit] : llvm::zip(starts, limits))
    shape.push_back(limit - start);
  auto sliceType = RankedTensorType::get(shape, type.getElementType());
  if (isa<FloatType>(type.getElementType())) {
    SmallVector<APFloat> all(value.getValues<APFloat>());
    SmallVector<APFloat> picked;
    forEachInBlock(type.getShape(), starts, limits,
                   [&](int64_t i) { picked.push_back(all[i]); });
    return DenseElementsAttr::get(sliceType, picked);
  }
  SmallVector<APInt> all(value.getValues<APInt>());
  SmallVector<APInt> picked;
  forEachInBlock(type.getShape(), starts, limits,
                 [&](int64_t i) { picked.push_back(all[i]); });
  return DenseElementsAttr::get(sliceType, picked);
}

DenseElementsAttr weft::convertFloatElements(ElementsAttr value,
                                             RankedTensorType type) {
  const llvm::fltSemantics &semantics =
      cast<FloatType>(type.getElementType()).getFloatSemantics();
  SmallVector<APFloat> converted;
  for (APFloat element : value.getValues<APFloat>()) {
    bool lost = false;
    element.convert(semantics, APFloat::rmNearestTiesToEven, &lost);
    converted.push_back(element);
  }
  return DenseElementsAttr::get(type, converted);
}

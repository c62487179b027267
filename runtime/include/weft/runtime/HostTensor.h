//===- HostTensor.h - A tensor in host memory -------------------*- C++ -*-===//
//
// Part of the Weft project.
//
// The CPU backend computes floats in f32 and integers (and booleans) in i64;
// a tensor remembers the element type it stands for so that casts to bf16 or
// f16 round as the real type would, and outputs are written in that type.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_HOSTTENSOR_H
#define WEFT_RUNTIME_HOSTTENSOR_H

#include "weft/runtime/Storage.h"

#include <cstdint>
#include <string>
#include <vector>

namespace weft::rt {

/// F64 is computed in f32 like the 16-bit types; it keeps its type so that
/// files are read and written as doubles.
enum class DType { F32, F16, BF16, I64, I32, Bool, F64 };

/// True for the types stored as floats.
inline bool isFloat(DType type) {
  return type == DType::F32 || type == DType::F16 || type == DType::BF16 ||
         type == DType::F64;
}
const char *dtypeName(DType type);
int64_t dtypeBytes(DType type);

using Shape = std::vector<int64_t>;
int64_t numElements(const Shape &shape);
/// The element count of a shape that came from outside (a file, a peer):
/// -1 when a dimension is negative or the product exceeds 2^62, so that
/// callers never compute a size that wrapped around.
int64_t checkedNumElements(const Shape &shape);
/// `count * width` in bytes, or -1 when it exceeds 2^62 (or count < 0).
int64_t checkedBytes(int64_t count, int64_t width);
std::string shapeString(const Shape &shape);

struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  Storage<float> floats; // when isFloat(dtype)
  Storage<int64_t> ints; // otherwise (booleans as 0 / 1)

  HostTensor() = default;
  /// Zero-filled.
  HostTensor(DType dtype, Shape shape);
  /// Not initialized: for kernels that write every element.
  static HostTensor uninitialized(DType dtype, Shape shape);

  int64_t numel() const { return numElements(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool isFloat() const { return weft::rt::isFloat(dtype); }
  /// Element `i` as a double, whatever the storage.
  double at(int64_t i) const { return isFloat() ? floats[i] : ints[i]; }
};

/// The bytes the CPU runtime allocates for `t`'s elements: floats of every
/// float type as f32, integers and booleans as i64.
inline int64_t storageBytes(const HostTensor &t) {
  return t.numel() * int64_t(t.isFloat() ? sizeof(float) : sizeof(int64_t));
}

/// A tensor whose elements are `t`'s, not copied: to be read, not written,
/// while `t` lives (a compiled training step's view of the parameters its
/// rank holds, read by every micro-batch).
HostTensor viewOf(const HostTensor &t);
/// `t` owning its elements: a borrowed tensor's (a view) copied, an owned
/// one's moved. What a function returns must not be a view of its inputs.
HostTensor owning(HostTensor t);

/// Rounds an f32 to the nearest bf16 / f16 (ties to even), returned as f32.
float roundToBF16(float value);
float roundToF16(float value);
/// Conversions between 16-bit storage and f32.
float bf16BitsToFloat(uint16_t bits);
float f16BitsToFloat(uint16_t bits);
uint16_t floatToBF16Bits(float value);
uint16_t floatToF16Bits(float value);

} // namespace weft::rt

#endif // WEFT_RUNTIME_HOSTTENSOR_H

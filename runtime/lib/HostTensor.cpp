//===- HostTensor.cpp - A tensor in host memory ---------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/HostTensor.h"
#include "weft/runtime/Profile.h"

#include <cmath>
#include <cstring>

namespace weft::rt {

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::Bool:
    return "i1";
  case DType::F64:
    return "f64";
  }
  return "?";
}

int64_t dtypeBytes(DType type) {
  switch (type) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I64:
  case DType::F64:
    return 8;
  case DType::Bool:
    return 1;
  }
  return 0;
}

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

static constexpr int64_t kMaxCount = int64_t(1) << 62;

int64_t checkedNumElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > kMaxCount / d)
      return -1;
    n *= d;
  }
  return n;
}

int64_t checkedBytes(int64_t count, int64_t width) {
  if (count < 0 || width <= 0 || count > kMaxCount / width)
    return -1;
  return count * width;
}

std::string shapeString(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

HostTensor::HostTensor(DType dtype, Shape shape)
    : dtype(dtype), shape(std::move(shape)) {
  if (weft::rt::isFloat(dtype))
    floats.assign(numel(), 0.0f);
  else
    ints.assign(numel(), 0);
  noteAllocation(isFloat() ? numel() * 4 : numel() * 8);
}

HostTensor HostTensor::uninitialized(DType dtype, Shape shape) {
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  int64_t n = tensor.numel();
  if (weft::rt::isFloat(dtype))
    tensor.floats = Storage<float>::uninitialized(n);
  else
    tensor.ints = Storage<int64_t>::uninitialized(n);
  noteAllocation(tensor.isFloat() ? n * 4 : n * 8);
  return tensor;
}

static uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
static float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t floatToBF16Bits(float value) {
  uint32_t bits = bitsOf(value);
  if (std::isnan(value))
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  // Round to nearest, ties to even, on the 16 dropped bits.
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16BitsToFloat(uint16_t bits) {
  return floatOf(static_cast<uint32_t>(bits) << 16);
}

float roundToBF16(float value) {
  return bf16BitsToFloat(floatToBF16Bits(value));
}

uint16_t floatToF16Bits(float value) {
  uint32_t bits = bitsOf(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t mantissa = bits & 0x7FFFFF;
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFF);
  if (exponent == 0xFF) // inf or nan
    return sign | 0x7C00 | (mantissa ? 0x200 : 0);
  int32_t halfExponent = exponent - 127 + 15;
  if (halfExponent >= 0x1F)
    return sign | 0x7C00; // overflow to inf
  if (halfExponent <= 0) {
    // Subnormal half (or zero): shift the implicit bit in, round to even.
    if (halfExponent < -10)
      return sign;
    mantissa |= 0x800000;
    int shift = 14 - halfExponent;
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = (static_cast<uint32_t>(halfExponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half; // may carry into the exponent, which is right (up to inf)
  return sign | static_cast<uint16_t>(half);
}

float f16BitsToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {
    if (mantissa == 0)
      return floatOf(sign);
    // Subnormal: value = mantissa * 2^-24.
    float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 0x1F)
    return floatOf(sign | 0x7F800000 | (mantissa << 13));
  return floatOf(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

float roundToF16(float value) { return f16BitsToFloat(floatToF16Bits(value)); }

HostTensor viewOf(const HostTensor &t) {
  HostTensor view;
  view.dtype = t.dtype;
  view.shape = t.shape;
  // The elements are read through the view, never written (viewOf's
  // contract), so the const is only set aside for Storage's pointer type.
  view.floats = Storage<float>::borrow(const_cast<float *>(t.floats.data()),
                                       t.floats.size(), nullptr);
  view.ints = Storage<int64_t>::borrow(const_cast<int64_t *>(t.ints.data()),
                                       t.ints.size(), nullptr);
  return view;
}

HostTensor owning(HostTensor t) {
  HostTensor result = std::move(t);
  if (result.floats.borrowed())
    result.floats = Storage<float>(result.floats);
  if (result.ints.borrowed())
    result.ints = Storage<int64_t>(result.ints);
  return result;
}

} // namespace weft::rt

//===- CodecElements.h - A codec's elements and wire layout -----*- C++ -*-===//
//
// Part of the Weft project.
//
// What one element and one block of 128 become on the wire under fp8 (e4m3)
// and int8, shared by the CPU runtime (rt::roundTrip, which computes what a
// receiver decodes) and the CUDA backend's encode and decode kernels, which
// produce the bytes NCCL sends: the same functions on both sides, so that
// the host tests of these functions test what the GPU computes.
//
// A segment of `count` elements is sent as its payload (1 byte per element
// under fp8 and int8, 2 under bf16) padded to 4 bytes, then one f32 scale
// per block of 128 (fp8 and int8).
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CODECELEMENTS_H
#define WEFT_RUNTIME_CODECELEMENTS_H

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

namespace weft::rt::codec {

/// Elements that share one scale under fp8 and int8 (Codec.h's
/// kCodecBlock).
constexpr int64_t kBlock = 128;
/// The largest magnitudes of e4m3 and of the symmetric int8 grid.
constexpr float kE4M3Max = 448.0f;
constexpr float kInt8Max = 127.0f;

/// The e4m3 bits of `value` (1 sign, 4 exponent bits with bias 7, 3
/// mantissa bits; no infinities, 0x7f is NaN), rounded to nearest even and
/// saturated at +-448.
WEFT_HOST_DEVICE inline uint8_t encodeE4M3(float value) {
  if (value != value)
    return 0x7f;
  uint32_t bits;
  memcpy(&bits, &value, 4);
  uint8_t sign = bits >> 31 ? 0x80 : 0;
  float magnitude = fabsf(value);
  if (magnitude >= kE4M3Max)
    return uint8_t(sign | 0x7e);
  // Below the smallest normal (2^-6) the step is the subnormal one, 2^-9;
  // above it, 3 mantissa bits: a step of 2^(e - 3) in [2^e, 2^(e+1)).
  int exponent = 0;
  frexpf(magnitude, &exponent); // magnitude = f * 2^exponent, f in [.5, 1)
  int e = exponent - 1 < -6 ? -6 : exponent - 1;
  float step = ldexpf(1.0f, e - 3);
  float rounded = rintf(magnitude / step) * step;
  if (rounded >= kE4M3Max)
    return uint8_t(sign | 0x7e);
  if (rounded < ldexpf(1.0f, -6)) // subnormal (or zero): mantissa x 2^-9
    return uint8_t(sign | int(rounded * 512.0f));
  frexpf(rounded, &exponent); // a rounding up may reach the next binade
  int field = exponent - 1 + 7;
  int mantissa = int((ldexpf(rounded, -(exponent - 1)) - 1.0f) * 8.0f);
  return uint8_t(sign | field << 3 | mantissa);
}

WEFT_HOST_DEVICE inline float decodeE4M3(uint8_t bits) {
  int field = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  float magnitude;
  if (field == 0xf && mantissa == 0x7)
    magnitude = NAN;
  else if (field == 0)
    magnitude = ldexpf(float(mantissa), -9);
  else
    magnitude = ldexpf(1.0f + float(mantissa) / 8.0f, field - 7);
  return bits & 0x80 ? -magnitude : magnitude;
}

/// `value` (already divided by its block's scale) on the int8 grid:
/// rounded to nearest even, clamped to +-127.
WEFT_HOST_DEVICE inline int8_t encodeInt8(float value) {
  float q = value == value ? rintf(value) : 0.0f; // NaN: a NaN scale says so
  q = q < -kInt8Max ? -kInt8Max : (q > kInt8Max ? kInt8Max : q);
  return int8_t(q);
}

/// Whether a block whose largest magnitude is `amax` is scaled: not when it
/// is all zeros, holds a non-finite value, or is so small that the scale
/// underflows. An unscaled block travels with scale 0 (zeros) or NaN
/// (non-finite) on the GPU; the CPU's round trip keeps its values.
WEFT_HOST_DEVICE inline bool scaled(float amax, float scale) {
  return amax != 0 && amax - amax == 0 && scale != 0; // finite: x - x == 0
}

/// Bytes of a segment of `count` elements under a codec whose payload takes
/// `width` bytes per element (1 for fp8 and int8, 2 for bf16), with
/// `blockScales` (fp8 and int8): the payload padded to 4 bytes, then one f32
/// per block.
WEFT_HOST_DEVICE inline int64_t payloadBytes(int64_t count, int width) {
  return (count * width + 3) / 4 * 4;
}
WEFT_HOST_DEVICE inline int64_t segmentBytes(int64_t count, int width,
                                             bool blockScales) {
  return payloadBytes(count, width) +
         (blockScales ? 4 * ((count + kBlock - 1) / kBlock) : 0);
}

} // namespace weft::rt::codec

#endif // WEFT_RUNTIME_CODECELEMENTS_H

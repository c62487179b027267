//===- Codec.h - Compression of what collectives send -----------*- C++ -*-===//
//
// Part of the Weft project.
//
// A collective may send its floats compressed (the `codec` of a weft
// collective op): bf16 (round to nearest even), fp8 (e4m3 with one f32 scale
// per block of 128 elements) or int8 (symmetric, one f32 scale per block of
// 128). Every rank reconstructs the same values from what was sent, so the
// ranks of a group stay bit-identical; the bytes counted are the encoded
// bytes (payload plus scales). The dialect's byte count
// (weft::codecWireBytes) uses the same formula.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CODEC_H
#define WEFT_RUNTIME_CODEC_H

#include "weft/runtime/HostTensor.h"

#include <optional>
#include <string>

namespace weft::rt {

enum class Codec { None, BF16, FP8, Int8 };

/// Elements that share one scale under fp8 and int8.
constexpr int64_t kCodecBlock = 128;

/// "none", "bf16", "fp8", "int8".
const char *codecName(Codec codec);
std::optional<Codec> parseCodec(const std::string &name);

/// Bytes that `numel` elements of `dtype` take on the wire under `codec`
/// (a codec never widens: bf16 data under bf16 stays 2 bytes).
int64_t wireBytes(int64_t numel, DType dtype, Codec codec);
inline int64_t wireBytes(const HostTensor &t, Codec codec) {
  return wireBytes(t.numel(), t.dtype, codec);
}

/// What a receiver reconstructs from `x` encoded under `codec` (`x` itself
/// for None and for integer tensors). Blocks run over the flattened tensor.
HostTensor roundTrip(const HostTensor &x, Codec codec);

/// One value of e4m3 (no infinities, max 448), rounded to nearest even and
/// saturated.
float roundToE4M3(float value);

} // namespace weft::rt

#endif // WEFT_RUNTIME_CODEC_H

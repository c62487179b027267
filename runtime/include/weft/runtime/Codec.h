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

#include "weft/runtime/CodecElements.h"
#include "weft/runtime/HostTensor.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace weft::rt {

/// TopK and TopKNoEF keep the largest 1% of a summed gradient's elements by
/// magnitude (a 4-byte index and a 4-byte value each); with TopK the rest is
/// carried to the next step's gradient (error feedback, kept by the caller).
enum class Codec { None, BF16, FP8, Int8, TopK, TopKNoEF };

/// Elements that share one scale under fp8 and int8.
constexpr int64_t kCodecBlock = codec::kBlock;
/// Top-k keeps ceil(numel / kTopKFraction) elements.
constexpr int64_t kTopKFraction = 100;

inline bool isTopK(Codec codec) {
  return codec == Codec::TopK || codec == Codec::TopKNoEF;
}

/// "none", "bf16", "fp8", "int8", "topk", "topk_noef".
const char *codecName(Codec codec);
std::optional<Codec> parseCodec(const std::string &name);

/// Bytes that `numel` elements of `dtype` take on the wire under `codec`
/// (a codec never widens: bf16 data under bf16 stays 2 bytes).
int64_t wireBytes(int64_t numel, DType dtype, Codec codec);
inline int64_t wireBytes(const HostTensor &t, Codec codec) {
  return wireBytes(t.numel(), t.dtype, codec);
}

/// What a receiver reconstructs from `x` encoded under `codec` (`x` itself
/// for None and for integer tensors). Blocks run over the flattened tensor;
/// top-k keeps the largest magnitudes (the lower index first among equal
/// ones) and zeroes the rest.
HostTensor roundTrip(const HostTensor &x, Codec codec);

/// The error-feedback residuals of top-k collectives: what each rank's call
/// site did not send, added to what it sends next (a training run keeps one
/// store for all its steps). Thread-safe: ranks are threads.
class FeedbackStore {
public:
  /// `x` plus the residual kept for (`rank`, `site`), which becomes what
  /// top-k of the sum leaves out. The caller all-reduces the sum under
  /// Codec::TopK, which sends exactly the kept part.
  HostTensor withFeedback(int rank, const void *site, const HostTensor &x);

  /// Every residual kept, by (rank, site): what a checkpoint saves.
  std::map<std::pair<int, const void *>, HostTensor> residualsKept() const;
  /// Sets the residual of (`rank`, `site`), as a checkpoint holds it.
  void restore(int rank, const void *site, HostTensor residual);

private:
  mutable std::mutex mutex;
  std::map<std::pair<int, const void *>, HostTensor> residuals;
};

/// One value of e4m3 (no infinities, max 448), rounded to nearest even and
/// saturated.
float roundToE4M3(float value);

} // namespace weft::rt

#endif // WEFT_RUNTIME_CODEC_H

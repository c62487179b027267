//===- Codec.cpp - Compression of what collectives send -------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Codec.h"
#include "weft/runtime/CodecElements.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace weft::rt;

const char *weft::rt::codecName(Codec codec) {
  switch (codec) {
  case Codec::BF16:
    return "bf16";
  case Codec::FP8:
    return "fp8";
  case Codec::Int8:
    return "int8";
  case Codec::TopK:
    return "topk";
  case Codec::TopKNoEF:
    return "topk_noef";
  case Codec::None:
    break;
  }
  return "none";
}

std::optional<Codec> weft::rt::parseCodec(const std::string &name) {
  for (Codec codec : {Codec::None, Codec::BF16, Codec::FP8, Codec::Int8,
                      Codec::TopK, Codec::TopKNoEF})
    if (name == codecName(codec))
      return codec;
  return std::nullopt;
}

int64_t weft::rt::wireBytes(int64_t numel, DType dtype, Codec codec) {
  int64_t width = dtypeBytes(dtype);
  if (!isFloat(dtype))
    return numel * width;
  switch (codec) {
  case Codec::None:
    return numel * width;
  case Codec::BF16:
    return numel * std::min<int64_t>(width, 2);
  case Codec::FP8:
  case Codec::Int8:
    return numel + 4 * ((numel + kCodecBlock - 1) / kCodecBlock);
  case Codec::TopK:
  case Codec::TopKNoEF:
    return 8 * ((numel + kTopKFraction - 1) / kTopKFraction);
  }
  return numel * width;
}

HostTensor FeedbackStore::withFeedback(int rank, const void *site,
                                       const HostTensor &x) {
  HostTensor total = x;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = residuals.find({rank, site});
    if (found != residuals.end() && found->second.shape == x.shape &&
        found->second.floats.size() == total.floats.size())
      for (size_t i = 0; i < total.floats.size(); ++i)
        total.floats[i] += found->second.floats[i];
  }
  HostTensor kept = roundTrip(total, Codec::TopK);
  HostTensor left = total;
  for (size_t i = 0; i < left.floats.size(); ++i)
    left.floats[i] -= kept.floats[i];
  std::lock_guard<std::mutex> lock(mutex);
  residuals[{rank, site}] = std::move(left);
  return total;
}

std::map<std::pair<int, const void *>, HostTensor>
FeedbackStore::residualsKept() const {
  std::lock_guard<std::mutex> lock(mutex);
  return residuals;
}

void FeedbackStore::restore(int rank, const void *site, HostTensor residual) {
  std::lock_guard<std::mutex> lock(mutex);
  residuals[{rank, site}] = std::move(residual);
}

float weft::rt::roundToE4M3(float value) {
  return codec::decodeE4M3(codec::encodeE4M3(value));
}

HostTensor weft::rt::roundTrip(const HostTensor &x, Codec codec) {
  if (codec == Codec::None || !x.isFloat())
    return x;
  HostTensor out = HostTensor::uninitialized(x.dtype, x.shape);
  const int64_t n = x.numel();
  const float *in = x.floats.data();
  float *result = out.floats.data();
  // What arrives is stored in the tensor's type (a bf16 tensor holds bf16
  // values, as the GPU's decode kernels store them).
  auto stored = [&](float value) {
    if (x.dtype == DType::BF16)
      return roundToBF16(value);
    return x.dtype == DType::F16 ? roundToF16(value) : value;
  };
  if (codec == Codec::BF16) {
    for (int64_t i = 0; i < n; ++i)
      result[i] = stored(roundToBF16(in[i]));
    return out;
  }
  if (isTopK(codec) && n > 0) {
    int64_t k = (n + kTopKFraction - 1) / kTopKFraction;
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i)
      order[i] = i;
    auto larger = [&](int64_t a, int64_t b) {
      float x = std::fabs(in[a]), y = std::fabs(in[b]);
      return x > y || (x == y && a < b);
    };
    std::nth_element(order.begin(), order.begin() + (k - 1), order.end(),
                     larger);
    std::fill(result, result + n, 0.0f);
    for (int64_t i = 0; i < k; ++i)
      result[order[i]] = in[order[i]];
    return out;
  }
  // One scale per block maps the block's largest magnitude to the format's
  // largest value; the scale travels as an f32.
  const float top = codec == Codec::FP8 ? codec::kE4M3Max : codec::kInt8Max;
  for (int64_t start = 0; start < n; start += kCodecBlock) {
    int64_t end = std::min(n, start + kCodecBlock);
    float amax = 0;
    for (int64_t i = start; i < end; ++i) {
      float a = std::fabs(in[i]);
      // A NaN sticks (the block is then sent unscaled).
      if (amax == amax && !(a <= amax))
        amax = a;
    }
    float scale = amax / top;
    if (!codec::scaled(amax, scale)) {
      // Nothing to scale (zeros, or magnitudes so small the scale
      // underflows), or a non-finite value: sent as is, so an overflow stays
      // visible to loss scaling.
      for (int64_t i = start; i < end; ++i)
        result[i] = in[i];
      continue;
    }
    for (int64_t i = start; i < end; ++i) {
      float v = in[i] / scale;
      float q = codec == Codec::FP8 ? codec::decodeE4M3(codec::encodeE4M3(v))
                                    : float(codec::encodeInt8(v));
      result[i] = stored(q * scale);
    }
  }
  return out;
}

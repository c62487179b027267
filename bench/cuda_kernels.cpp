//===- cuda_kernels.cpp - Times the CUDA runtime's attention and GEMMs ----===//
//
// Part of the Weft project.
//
// Needs a GPU. Times the runtime entry points a generated program calls, at
// the shapes of a GPT-3 175B layer (hidden 12288, 96 heads of 128, 2048
// tokens, micro-batch 1 and 4) and a LLaMA-3 70B layer (hidden 8192, 64
// heads, 8 KV heads, FFN 28672, 8192 tokens), in bf16: causal attention
// (cuda::attention), its backward (cuda::attentionGrad, first checked against
// float64 on small shapes) and the layer's GEMMs (cuda::linear, cuBLASLt).
// Inputs are random; each figure is the median of 10 runs after 2 warm-ups,
// timed with CUDA events. bench/cuda_torch.py times the same shapes in PyTorch.
//
//   cuda-kernels-bench [attention|attention-grad|gemm|check]...
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/cuda/Cuda.h"

#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace weft::rt;
using namespace weft::rt::cuda;

namespace {

int failures = 0;

HostTensor randomHost(Shape shape, std::mt19937 &rng) {
  HostTensor host(DType::BF16, shape);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // A few thousand normals repeated with an offset: random enough for
  // timing and checking, and fast to make for billions of elements.
  std::vector<float> pool(4099);
  for (float &x : pool)
    x = normal(rng);
  size_t offset = rng() % pool.size();
  for (size_t i = 0; i < host.floats.size(); ++i)
    host.floats[i] = pool[(i * 7 + i / pool.size() + offset) % pool.size()];
  return host;
}

DeviceTensor deviceCopy(Context &ctx, const HostTensor &host, DType dtype) {
  DeviceTensor t{nullptr, dtype, host.shape};
  check(ctx, cudaMalloc(&t.data, size_t(t.bytes())), "cudaMalloc");
  upload(ctx, host, t);
  return t;
}

DeviceTensor randomTensor(Context &ctx, Shape shape, std::mt19937 &rng) {
  return deviceCopy(ctx, randomHost(std::move(shape), rng), DType::BF16);
}

DeviceTensor emptyTensor(Context &ctx, Shape shape, DType dtype = DType::BF16) {
  DeviceTensor t{nullptr, dtype, shape};
  check(ctx, cudaMalloc(&t.data, size_t(t.bytes())), "cudaMalloc");
  // Poisoned (NaN in every float type), so that an element the kernel does
  // not write shows in the check.
  check(ctx, cudaMemset(t.data, 0xff, size_t(t.bytes())), "cudaMemset");
  return t;
}

template <typename F> double medianMs(Context &ctx, F &&run) {
  cudaEvent_t start, stop;
  check(ctx, cudaEventCreate(&start), "cudaEventCreate");
  check(ctx, cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 2; ++i)
    run();
  std::vector<double> times;
  for (int i = 0; i < 10; ++i) {
    check(ctx, cudaEventRecord(start, ctx.compute), "cudaEventRecord");
    run();
    check(ctx, cudaEventRecord(stop, ctx.compute), "cudaEventRecord");
    check(ctx, cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(ctx, cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return (times[4] + times[5]) / 2;
}

void report(const std::string &what, double ms, double flops) {
  double tflops = flops / (ms * 1e-3) / 1e12;
  std::printf("weft  %-44s %9.3f ms %7.1f TFLOP/s  MFU %5.1f%%\n", what.c_str(),
              ms, tflops, 100 * tflops / 989.0);
  std::fflush(stdout);
}

/// Times causal attention in bf16, then checks its output against the f32
/// CUDA-core kernel on the same inputs: ||out - ref|| / ||ref||.
void benchAttention(Context &ctx, std::mt19937 &rng, const char *name,
                    int64_t b, int64_t heads, int64_t kvHeads, int64_t s,
                    int64_t d) {
  HostTensor qh = randomHost({b, heads, s, d}, rng);
  HostTensor kh = randomHost({b, kvHeads, s, d}, rng);
  HostTensor vh = randomHost({b, kvHeads, s, d}, rng);
  DeviceTensor q = deviceCopy(ctx, qh, DType::BF16);
  DeviceTensor k = deviceCopy(ctx, kh, DType::BF16);
  DeviceTensor v = deviceCopy(ctx, vh, DType::BF16);
  DeviceTensor out = emptyTensor(ctx, {b, heads, s, d});
  float scale = 1.0f / std::sqrt(float(d));
  double ms = medianMs(ctx, [&] {
    attention(ctx, q, k, v, nullptr, scale, /*causal=*/true, out);
  });
  // Q K^T and P V, each 2 b h s^2 d, halved by the causal mask.
  double flops =
      2.0 * 2.0 * double(b * heads) * double(s) * double(s) * double(d) / 2.0;
  report(std::string("attention ") + name, ms, flops);

  DeviceTensor q32 = deviceCopy(ctx, qh, DType::F32);
  DeviceTensor k32 = deviceCopy(ctx, kh, DType::F32);
  DeviceTensor v32 = deviceCopy(ctx, vh, DType::F32);
  DeviceTensor ref = emptyTensor(ctx, {b, heads, s, d}, DType::F32);
  attention(ctx, q32, k32, v32, nullptr, scale, true, ref);
  HostTensor got = download(ctx, out), want = download(ctx, ref);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.floats.size(); ++i) {
    double e = double(got.floats[i]) - double(want.floats[i]);
    diff += e * e;
    norm += double(want.floats[i]) * double(want.floats[i]);
  }
  double error = std::sqrt(diff / norm);
  std::printf("weft  %-44s relative error against f32: %.2e (%s)\n",
              (std::string("attention ") + name).c_str(), error,
              error < 1e-2 ? "ok" : "FAIL");
  std::fflush(stdout);
  if (!(error < 1e-2))
    failures += 1;
  for (DeviceTensor *t : {&q, &k, &v, &out, &q32, &k32, &v32, &ref})
    cudaFree(t->data);
}

float roundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

double relativeError(const HostTensor &got, const HostTensor &want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.floats.size(); ++i) {
    double e = double(got.floats[i]) - double(want.floats[i]);
    diff += e * e;
    norm += double(want.floats[i]) * double(want.floats[i]);
  }
  return std::sqrt(diff / norm);
}

/// An additive mask with -inf entries ([b, 1, s, kvS], f32) and a ring
/// step's positions: queries at 50.., keys anywhere up to 60 past the last.
struct MaskAndPositions {
  HostTensor mask, qPos, kPos;
};
MaskAndPositions randomMaskAndPositions(std::mt19937 &rng, int64_t b, int64_t s,
                                        int64_t kvS) {
  MaskAndPositions m{HostTensor(DType::F32, {b, 1, s, kvS}),
                     HostTensor(DType::I64, {s}),
                     HostTensor(DType::I64, {kvS})};
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (float &x : m.mask.floats)
    x = rng() % 10 == 0 ? -INFINITY : uniform(rng);
  for (int64_t i = 0; i < s; ++i)
    m.qPos.ints[size_t(i)] = 50 + i;
  for (int64_t j = 0; j < kvS; ++j)
    m.kPos.ints[size_t(j)] = int64_t(rng() % uint32_t(s + 60));
  return m;
}

/// The tensor-core kernel's cases, in bf16 or f16, against the f32 CUDA-core
/// kernel on the same (bf16-rounded, so exact in either) inputs: grouped KV
/// heads, sequences that are not a multiple of the 64-row tile, more keys than
/// queries, an additive mask with -inf entries, and a ring step's positions
/// with the log-sum-exp.
void checkAttention(Context &ctx, std::mt19937 &rng, DType type, int64_t b,
                    int64_t heads, int64_t kvHeads, int64_t s, int64_t kvS,
                    int64_t d, bool causal, bool withMask, bool withPositions) {
  HostTensor qh = randomHost({b, heads, s, d}, rng);
  HostTensor kh = randomHost({b, kvHeads, kvS, d}, rng);
  HostTensor vh = randomHost({b, kvHeads, kvS, d}, rng);
  for (HostTensor *t : {&qh, &kh, &vh})
    for (float &x : t->floats)
      x = roundToBf16(x);
  auto [maskHost, qPos, kPos] = randomMaskAndPositions(rng, b, s, kvS);
  DeviceTensor mask = deviceCopy(ctx, maskHost, DType::F32);
  DeviceTensor qp = deviceCopy(ctx, qPos, DType::I64);
  DeviceTensor kp = deviceCopy(ctx, kPos, DType::I64);
  float scale = 1.0f / std::sqrt(float(d));
  HostTensor results[2], lses[2];
  DType types[2] = {type, DType::F32};
  std::vector<DeviceTensor> owned{mask, qp, kp};
  for (int r = 0; r < 2; ++r) {
    DeviceTensor q = deviceCopy(ctx, qh, types[r]);
    DeviceTensor k = deviceCopy(ctx, kh, types[r]);
    DeviceTensor v = deviceCopy(ctx, vh, types[r]);
    DeviceTensor out = emptyTensor(ctx, {b, heads, s, d}, types[r]);
    DeviceTensor lse = emptyTensor(ctx, {b, heads, s}, DType::F32);
    if (withPositions)
      attentionBlock(ctx, q, k, v, withMask ? &mask : nullptr, &qp, &kp, scale,
                     true, out, lse);
    else
      attention(ctx, q, k, v, withMask ? &mask : nullptr, scale, causal, out);
    results[r] = download(ctx, out);
    lses[r] = download(ctx, lse);
    for (DeviceTensor *t : {&q, &k, &v, &out, &lse})
      owned.push_back(*t);
  }
  double error = relativeError(results[0], results[1]);
  double lseError = 0;
  if (withPositions)
    for (size_t i = 0; i < lses[0].floats.size(); ++i)
      lseError = std::max(
          lseError, double(std::fabs(lses[0].floats[i] - lses[1].floats[i])));
  bool ok = error < 1e-2 && lseError < 1e-2;
  std::printf(
      "check attention %s b=%ld h=%ld/%ld s=%ld keys=%ld d=%ld%s%s%s: "
      "relative error %.2e%s (%s)\n",
      dtypeName(type), long(b), long(heads), long(kvHeads), long(s), long(kvS),
      long(d), causal ? " causal" : "", withMask ? " mask" : "",
      withPositions ? " positions+lse" : "", error,
      withPositions ? (", lse max error " + std::to_string(lseError)).c_str()
                    : "",
      ok ? "ok" : "FAIL");
  std::fflush(stdout);
  failures += ok ? 0 : 1;
  for (DeviceTensor &t : owned)
    cudaFree(t.data);
}

/// Attention in float64 over a block's keys followed by `otherS` keys of
/// another block that every query sees (k and v hold both, [b, kvHeads,
/// kvS + otherS, d]): each query row's probabilities over all keys, its
/// output and its log-sum-exp. Causality (when `causal`) and the mask
/// apply to the block's keys: by index, or by positions when given.
struct ForwardReference {
  std::vector<double> p, out, lse;
};
ForwardReference forwardReference(const HostTensor &q, const HostTensor &k,
                                  const HostTensor &v, const HostTensor *mask,
                                  const HostTensor *qPos,
                                  const HostTensor *kPos, int64_t kvS,
                                  int64_t otherS, double scale, bool causal) {
  int64_t b = q.shape[0], heads = q.shape[1], s = q.shape[2], d = q.shape[3];
  int64_t kvHeads = k.shape[1], group = heads / kvHeads, keys = kvS + otherS;
  auto row = [d](const HostTensor &t, int64_t r, int64_t c) {
    return double(t.floats[size_t(r * d + c)]);
  };
  int64_t rows = b * heads * s;
  ForwardReference f{std::vector<double>(size_t(rows * keys)),
                     std::vector<double>(size_t(rows * d)),
                     std::vector<double>(size_t(rows))};
  for (int64_t bh = 0; bh < b * heads; ++bh) {
    int64_t bkv = bh / heads * kvHeads + bh % heads / group;
    for (int64_t i = 0; i < s; ++i) {
      int64_t r = bh * s + i;
      double *pr = &f.p[size_t(r * keys)];
      double max = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        bool hidden =
            j < kvS && causal &&
            (qPos ? kPos->ints[size_t(j)] > qPos->ints[size_t(i)] : j > i);
        double x = -INFINITY;
        if (!hidden) {
          x = 0;
          for (int64_t c = 0; c < d; ++c)
            x += row(q, r, c) * row(k, bkv * keys + j, c);
          x *= scale;
          if (j < kvS && mask)
            x += mask->floats[size_t((bh / heads * s + i) * kvS + j)];
        }
        pr[j] = x;
        max = std::max(max, x);
      }
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j)
        sum += max == -INFINITY ? 0.0 : std::exp(pr[j] - max);
      for (int64_t j = 0; j < keys; ++j) {
        pr[j] = max == -INFINITY ? 0.0 : std::exp(pr[j] - max) / sum;
        for (int64_t c = 0; c < d; ++c)
          f.out[size_t(r * d + c)] += pr[j] * row(v, bkv * keys + j, c);
      }
      f.lse[size_t(r)] = max + std::log(sum);
    }
  }
  return f;
}

/// The gradients of the block's keys (the first kvS) in float64, from the
/// forward's probabilities: dS = P (dP - D) with D = dO . `out` per row; dq
/// = scale dS K, dk = scale dSᵀ Q (summed over the group's heads), dv = Pᵀ
/// dO.
struct GradReference {
  std::vector<double> q, k, v;
};
GradReference gradReference(const HostTensor &q, const HostTensor &k,
                            const HostTensor &v, const HostTensor &dout,
                            const std::vector<double> &p,
                            const std::vector<double> &out, int64_t kvS,
                            int64_t otherS, double scale) {
  int64_t b = q.shape[0], heads = q.shape[1], s = q.shape[2], d = q.shape[3];
  int64_t kvHeads = k.shape[1], group = heads / kvHeads, keys = kvS + otherS;
  auto row = [d](const HostTensor &t, int64_t r, int64_t c) {
    return double(t.floats[size_t(r * d + c)]);
  };
  GradReference g{std::vector<double>(size_t(b * heads * s * d)),
                  std::vector<double>(size_t(b * kvHeads * kvS * d)),
                  std::vector<double>(size_t(b * kvHeads * kvS * d))};
  for (int64_t bh = 0; bh < b * heads; ++bh) {
    int64_t bkv = bh / heads * kvHeads + bh % heads / group;
    for (int64_t i = 0; i < s; ++i) {
      int64_t r = bh * s + i;
      double delta = 0;
      for (int64_t c = 0; c < d; ++c)
        delta += row(dout, r, c) * out[size_t(r * d + c)];
      for (int64_t j = 0; j < kvS; ++j) {
        double pj = p[size_t(r * keys + j)];
        if (pj == 0)
          continue;
        double dp = 0;
        for (int64_t c = 0; c < d; ++c)
          dp += row(dout, r, c) * row(v, bkv * keys + j, c);
        double ds = pj * (dp - delta) * scale;
        for (int64_t c = 0; c < d; ++c) {
          g.q[size_t(r * d + c)] += ds * row(k, bkv * keys + j, c);
          g.k[size_t((bkv * kvS + j) * d + c)] += ds * row(q, r, c);
          g.v[size_t((bkv * kvS + j) * d + c)] += pj * row(dout, r, c);
        }
      }
    }
  }
  return g;
}

/// Attention's backward (cuda::attentionGrad) against the float64 reference
/// on the same inputs (rounded to bf16, so exact in every type): dq, dk and
/// dv, each ||got - ref|| / ||ref||, with grouped KV heads, sequences that
/// are not a multiple of the 64-thread block, more keys than queries, an
/// additive mask with -inf entries (rows whose keys are all masked get zero
/// gradients), and a ring step: one block of keys, given the whole
/// attention's output and log-sum-exp (over this block and another that
/// every query sees), causal by positions.
void checkAttentionGrad(Context &ctx, std::mt19937 &rng, DType type, int64_t b,
                        int64_t heads, int64_t kvHeads, int64_t s, int64_t kvS,
                        int64_t d, bool causal, bool withMask, bool ring) {
  auto rounded = [&](Shape shape) {
    HostTensor t = randomHost(std::move(shape), rng);
    for (float &x : t.floats)
      x = roundToBf16(x);
    return t;
  };
  int64_t otherS = ring ? 37 : 0;
  HostTensor qh = rounded({b, heads, s, d}), doh = rounded({b, heads, s, d});
  // The block's keys, then (a ring step) the other block's.
  HostTensor kh = rounded({b, kvHeads, kvS + otherS, d});
  HostTensor vh = rounded({b, kvHeads, kvS + otherS, d});
  auto [maskHost, qPos, kPos] = randomMaskAndPositions(rng, b, s, kvS);
  double scale = 1.0 / std::sqrt(double(d));
  ForwardReference f = forwardReference(
      qh, kh, vh, withMask ? &maskHost : nullptr, ring ? &qPos : nullptr,
      ring ? &kPos : nullptr, kvS, otherS, scale, causal);

  std::vector<DeviceTensor> owned;
  auto dev = [&](const HostTensor &host, DType t) {
    owned.push_back(deviceCopy(ctx, host, t));
    return owned.back();
  };
  auto poisoned = [&](Shape shape) {
    owned.push_back(emptyTensor(ctx, std::move(shape), type));
    return owned.back();
  };
  HostTensor kb(DType::F32, {b, kvHeads, kvS, d}),
      vb(DType::F32, {b, kvHeads, kvS, d});
  for (int64_t bkv = 0; bkv < b * kvHeads; ++bkv)
    for (int64_t x = 0; x < kvS * d; ++x) {
      kb.floats[size_t(bkv * kvS * d + x)] =
          kh.floats[size_t(bkv * (kvS + otherS) * d + x)];
      vb.floats[size_t(bkv * kvS * d + x)] =
          vh.floats[size_t(bkv * (kvS + otherS) * d + x)];
    }
  HostTensor outHost(DType::F32, qh.shape), lseHost(DType::F32, {b, heads, s});
  for (size_t i = 0; i < f.out.size(); ++i)
    outHost.floats[i] = float(f.out[i]);
  for (size_t i = 0; i < f.lse.size(); ++i)
    lseHost.floats[i] = float(f.lse[i]);
  DeviceTensor q = dev(qh, type), k = dev(kb, type), v = dev(vb, type);
  DeviceTensor dout = dev(doh, type), mask = dev(maskHost, DType::F32);
  DeviceTensor qp = dev(qPos, DType::I64), kp = dev(kPos, DType::I64);
  DeviceTensor out = dev(outHost, type), lse = dev(lseHost, DType::F32);
  DeviceTensor gq = poisoned(qh.shape), gk = poisoned(kb.shape),
               gv = poisoned(vb.shape);
  attentionGrad(ctx, q, k, v, dout, withMask ? &mask : nullptr,
                ring ? &qp : nullptr, ring ? &kp : nullptr,
                ring ? &out : nullptr, ring ? &lse : nullptr, float(scale),
                causal, gq, gk, gv);
  // A ring step's D = dO . O reads the saved output as the kernel does, in
  // its own type.
  std::vector<double> saved = f.out;
  if (ring) {
    HostTensor rounded = download(ctx, out);
    for (size_t i = 0; i < saved.size(); ++i)
      saved[i] = rounded.floats[i];
  }
  GradReference want =
      gradReference(qh, kh, vh, doh, f.p, saved, kvS, otherS, scale);
  auto error = [&](const DeviceTensor &got, const std::vector<double> &ref) {
    HostTensor g = download(ctx, got);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      double e = double(g.floats[i]) - ref[i];
      diff += e * e;
      norm += ref[i] * ref[i];
    }
    return std::sqrt(diff / norm);
  };
  double eq = error(gq, want.q), ek = error(gk, want.k), ev = error(gv, want.v);
  double bound = type == DType::F32 ? 1e-5 : 1e-2;
  bool ok = eq < bound && ek < bound && ev < bound;
  std::printf(
      "check attention_grad %s b=%ld h=%ld/%ld s=%ld keys=%ld d=%ld%s%s%s: "
      "relative error dq %.2e dk %.2e dv %.2e (bound %.0e, %s)\n",
      dtypeName(type), long(b), long(heads), long(kvHeads), long(s), long(kvS),
      long(d), causal ? " causal" : "", withMask ? " mask" : "",
      ring ? " ring step" : "", eq, ek, ev, bound, ok ? "ok" : "FAIL");
  std::fflush(stdout);
  failures += ok ? 0 : 1;
  for (DeviceTensor &t : owned)
    cudaFree(t.data);
}

/// Times attention's backward in bf16 at a real layer's shape: the
/// gradients of causal attention (cuda::attentionGrad), counted as
/// FlashAttention counts them (2.5 times the forward's FLOPs: S, dP, dV, dK,
/// dQ).
void benchAttentionGrad(Context &ctx, std::mt19937 &rng, const char *name,
                        int64_t b, int64_t heads, int64_t kvHeads, int64_t s,
                        int64_t d) {
  DeviceTensor q = randomTensor(ctx, {b, heads, s, d}, rng);
  DeviceTensor k = randomTensor(ctx, {b, kvHeads, s, d}, rng);
  DeviceTensor v = randomTensor(ctx, {b, kvHeads, s, d}, rng);
  DeviceTensor dout = randomTensor(ctx, {b, heads, s, d}, rng);
  DeviceTensor dq = emptyTensor(ctx, {b, heads, s, d});
  DeviceTensor dk = emptyTensor(ctx, {b, kvHeads, s, d});
  DeviceTensor dv = emptyTensor(ctx, {b, kvHeads, s, d});
  float scale = 1.0f / std::sqrt(float(d));
  double ms = medianMs(ctx, [&] {
    attentionGrad(ctx, q, k, v, dout, nullptr, nullptr, nullptr, nullptr,
                  nullptr, scale, /*causal=*/true, dq, dk, dv);
  });
  double flops = 2.5 * 2.0 * 2.0 * double(b * heads) * double(s) * double(s) *
                 double(d) / 2.0;
  report(std::string("attention_grad ") + name, ms, flops);
  // Given the forward's output and log-sum-exp (as FlashAttention's backward
  // is), the forward is not run again.
  DeviceTensor out = emptyTensor(ctx, {b, heads, s, d});
  DeviceTensor lse = emptyTensor(ctx, {b, heads, s}, DType::F32);
  attentionBlock(ctx, q, k, v, nullptr, nullptr, nullptr, scale, true, out,
                 lse);
  ms = medianMs(ctx, [&] {
    attentionGrad(ctx, q, k, v, dout, nullptr, nullptr, nullptr, &out, &lse,
                  scale, /*causal=*/true, dq, dk, dv);
  });
  report(std::string("attention_grad ") + name + " saved", ms, flops);
  for (DeviceTensor *t : {&q, &k, &v, &dout, &dq, &dk, &dv, &out, &lse})
    cudaFree(t->data);
}

void benchLinear(Context &ctx, std::mt19937 &rng, const char *name, int64_t m,
                 int64_t kDim, int64_t n) {
  DeviceTensor x = randomTensor(ctx, {m, kDim}, rng);
  DeviceTensor w = randomTensor(ctx, {kDim, n}, rng);
  DeviceTensor out = emptyTensor(ctx, {m, n});
  double ms = medianMs(
      ctx, [&] { linear(ctx, x, w, nullptr, false, Epilogue::None, out); });
  report(std::string("linear ") + name, ms,
         2.0 * double(m) * double(kDim) * double(n));
  for (DeviceTensor *t : {&x, &w, &out})
    cudaFree(t->data);
}

} // namespace

int main(int argc, char **argv) {
  // What to run: attention, attention-grad, gemm; all three by default.
  // `check` alone or with the others: the correctness checks without the
  // timed runs (short enough for compute-sanitizer).
  auto named = [&](const char *what) {
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], what) == 0)
        return true;
    return false;
  };
  bool checksOnly = named("check");
  auto wanted = [&](const char *what) {
    return argc < 2 || (checksOnly && argc == 2) || named(what);
  };
  Context ctx;
  try {
    check(ctx, cudaStreamCreateWithFlags(&ctx.compute, cudaStreamNonBlocking),
          "cudaStreamCreate");
    ctx.comm = ctx.compute;
    cublasLtHandle_t handle = nullptr;
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS)
      fail(ctx, "cublasLtCreate failed");
    ctx.blasLt = handle;
    ctx.blasWorkspaceBytes = size_t(32) << 20;
    check(ctx, cudaMalloc(&ctx.blasWorkspace, ctx.blasWorkspaceBytes),
          "cudaMalloc");
    std::mt19937 rng(0);
    if (wanted("attention")) {
      for (DType type : {DType::BF16, DType::F16})
        for (int64_t d : {int64_t(64), int64_t(128)}) {
          checkAttention(ctx, rng, type, 2, 4, 2, 100, 100, d, true, false,
                         false);
          checkAttention(ctx, rng, type, 1, 3, 3, 130, 200, d, false, true,
                         false);
          checkAttention(ctx, rng, type, 2, 2, 1, 64, 64, d, true, true, false);
          checkAttention(ctx, rng, type, 1, 4, 2, 70, 90, d, true, false, true);
          checkAttention(ctx, rng, type, 1, 2, 2, 33, 130, d, true, true, true);
        }
      if (!checksOnly) {
        benchAttention(ctx, rng, "gpt3 b=1 h=96 s=2048 d=128", 1, 96, 96, 2048,
                       128);
        benchAttention(ctx, rng, "gpt3 b=4 h=96 s=2048 d=128", 4, 96, 96, 2048,
                       128);
        benchAttention(ctx, rng, "llama70b b=1 h=64/8 s=8192 d=128", 1, 64, 8,
                       8192, 128);
      }
    }
    if (wanted("attention-grad")) {
      for (DType type : {DType::F32, DType::BF16, DType::F16})
        for (int64_t d : {int64_t(64), int64_t(128)}) {
          checkAttentionGrad(ctx, rng, type, 2, 4, 2, 100, 100, d, true, false,
                             false);
          checkAttentionGrad(ctx, rng, type, 1, 3, 3, 130, 200, d, false, true,
                             false);
          checkAttentionGrad(ctx, rng, type, 2, 2, 1, 64, 64, d, true, true,
                             false);
          checkAttentionGrad(ctx, rng, type, 1, 4, 2, 70, 90, d, true, false,
                             true);
          checkAttentionGrad(ctx, rng, type, 1, 2, 2, 33, 130, d, true, true,
                             true);
          // Several 64-row tiles each way; causal with more keys than
          // queries (top-left aligned).
          checkAttentionGrad(ctx, rng, type, 1, 4, 1, 200, 260, d, true, false,
                             false);
          checkAttentionGrad(ctx, rng, type, 1, 2, 2, 300, 300, d, true, true,
                             false);
        }
      if (!checksOnly) {
        benchAttentionGrad(ctx, rng, "gpt3 b=1 h=96 s=2048 d=128", 1, 96, 96,
                           2048, 128);
        benchAttentionGrad(ctx, rng, "gpt3 b=4 h=96 s=2048 d=128", 4, 96, 96,
                           2048, 128);
        benchAttentionGrad(ctx, rng, "llama70b b=1 h=64/8 s=8192 d=128", 1, 64,
                           8, 8192, 128);
      }
    }
    if (wanted("gemm") && !checksOnly) {
      // The GPT-3 layer's four GEMMs at micro-batch 1 (2048 tokens) and 4.
      for (int64_t tokens : {int64_t(2048), int64_t(8192)}) {
        std::string t = "m=" + std::to_string(tokens);
        benchLinear(ctx, rng, ("gpt3 qkv " + t).c_str(), tokens, 12288,
                    3 * 12288);
        benchLinear(ctx, rng, ("gpt3 proj " + t).c_str(), tokens, 12288, 12288);
        benchLinear(ctx, rng, ("gpt3 fc1 " + t).c_str(), tokens, 12288,
                    4 * 12288);
        benchLinear(ctx, rng, ("gpt3 fc2 " + t).c_str(), tokens, 4 * 12288,
                    12288);
      }
      benchLinear(ctx, rng, "llama70b up m=8192", 8192, 8192, 28672);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return failures ? 1 : 0;
}

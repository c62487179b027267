//===- cuda_kernels.cpp - Times the CUDA runtime's attention and GEMMs ----===//
//
// Part of the Weft project.
//
// Needs a GPU. Times the runtime entry points a generated program calls, at
// the shapes of a GPT-3 175B layer (hidden 12288, 96 heads of 128, 2048
// tokens, micro-batch 1 and 4) and a LLaMA-3 70B layer (hidden 8192, 64
// heads, 8 KV heads, FFN 28672, 8192 tokens), in bf16: causal attention
// (cuda::attention) and the layer's GEMMs (cuda::linear, cuBLASLt). Inputs
// are random; each figure is the median of 10 runs after 2 warm-ups, timed
// with CUDA events. bench/cuda_torch.py times the same shapes in PyTorch.
//
//   cuda-kernels-bench [attention|gemm]...
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
  HostTensor maskHost(DType::F32, {b, 1, s, kvS});
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (float &x : maskHost.floats)
    x = rng() % 10 == 0 ? -INFINITY : uniform(rng);
  HostTensor qPos(DType::I64, {s}), kPos(DType::I64, {kvS});
  for (int64_t i = 0; i < s; ++i)
    qPos.ints[size_t(i)] = 50 + i;
  for (int64_t j = 0; j < kvS; ++j)
    kPos.ints[size_t(j)] = int64_t(rng() % uint32_t(s + 60));
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
  bool attentionOnly = argc > 1 && std::strcmp(argv[1], "attention") == 0;
  bool gemmOnly = argc > 1 && std::strcmp(argv[1], "gemm") == 0;
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
    if (!gemmOnly) {
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
      benchAttention(ctx, rng, "gpt3 b=1 h=96 s=2048 d=128", 1, 96, 96, 2048,
                     128);
      benchAttention(ctx, rng, "gpt3 b=4 h=96 s=2048 d=128", 4, 96, 96, 2048,
                     128);
      benchAttention(ctx, rng, "llama70b b=1 h=64/8 s=8192 d=128", 1, 64, 8,
                     8192, 128);
    }
    if (!attentionOnly) {
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

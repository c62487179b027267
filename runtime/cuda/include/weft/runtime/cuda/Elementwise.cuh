//===- Elementwise.cuh - Device helpers of generated kernels ----*- C++ -*-===//
//
// Part of the Weft project.
//
// Generated elementwise kernels compute in f32 (floats) or i64 (integers and
// booleans) and convert at loads and stores; operands are read through
// broadcast strides (0 along broadcast dimensions) over the output's shape.
//
// The same program also compiles as plain C++ (no __CUDACC__), against the
// runtime's host emulation of the CUDA backend: a kernel is then a function
// whose loop covers every element, and a launch a call.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CUDA_ELEMENTWISE_CUH
#define WEFT_RUNTIME_CUDA_ELEMENTWISE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#ifdef __CUDACC__
#define WEFT_DEVICE __device__
#define WEFT_GLOBAL __global__
/// A grid-stride loop over the kernel's elements.
#define WEFT_ELEMENTS(i, n)                                                    \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);   \
       i += int64_t(gridDim.x) * blockDim.x)
#define WEFT_LAUNCH(kernel, n, ctx)                                            \
  kernel<<<::weft::rt::cuda::gridFor(n), ::weft::rt::cuda::kBlock, 0,          \
           (ctx).compute>>>
#else
#include <algorithm>
#include <cmath>
#define WEFT_DEVICE
#define WEFT_GLOBAL
#define WEFT_ELEMENTS(i, n) for (int64_t i = 0; i < (n); ++i)
#define WEFT_LAUNCH(kernel, n, ctx) kernel
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
#endif

namespace weft::rt::cuda {

constexpr int kMaxRank = 8;
constexpr int kBlock = 256;

/// Blocks for a grid-stride loop over n elements.
inline unsigned gridFor(int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

/// An output shape and one operand's strides over it, by value in kernels.
struct Dims {
  int rank;
  int64_t size[kMaxRank];
};
struct Strides {
  int64_t stride[kMaxRank];
};

/// Offset of output element `linear` in an operand with `strides`.
WEFT_DEVICE inline int64_t offsetOf(int64_t linear, const Dims &dims,
                                   const Strides &strides) {
  int64_t offset = 0;
  for (int d = dims.rank - 1; d >= 0; --d) {
    int64_t coordinate = linear % dims.size[d];
    linear /= dims.size[d];
    offset += coordinate * strides.stride[d];
  }
  return offset;
}
/// Coordinate of output element `linear` along dimension `dim`.
WEFT_DEVICE inline int64_t coordinateOf(int64_t linear, const Dims &dims,
                                       int dim) {
  for (int d = dims.rank - 1; d > dim; --d)
    linear /= dims.size[d];
  return linear % dims.size[dim];
}

WEFT_DEVICE inline float loadF(const float *p, int64_t i) { return p[i]; }
WEFT_DEVICE inline float loadF(const __nv_bfloat16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}
WEFT_DEVICE inline float loadF(const __half *p, int64_t i) {
  return __half2float(p[i]);
}
WEFT_DEVICE inline float loadF(const int64_t *p, int64_t i) {
  return float(p[i]);
}
WEFT_DEVICE inline float loadF(const int32_t *p, int64_t i) {
  return float(p[i]);
}
WEFT_DEVICE inline float loadF(const bool *p, int64_t i) {
  return p[i] ? 1.0f : 0.0f;
}
WEFT_DEVICE inline int64_t loadI(const int64_t *p, int64_t i) { return p[i]; }
WEFT_DEVICE inline int64_t loadI(const int32_t *p, int64_t i) { return p[i]; }
WEFT_DEVICE inline int64_t loadI(const bool *p, int64_t i) { return p[i]; }
WEFT_DEVICE inline int64_t loadI(const float *p, int64_t i) {
  return int64_t(p[i]);
}
WEFT_DEVICE inline int64_t loadI(const __nv_bfloat16 *p, int64_t i) {
  return int64_t(__bfloat162float(p[i]));
}
WEFT_DEVICE inline int64_t loadI(const __half *p, int64_t i) {
  return int64_t(__half2float(p[i]));
}

WEFT_DEVICE inline void storeF(float *p, int64_t i, float v) { p[i] = v; }
WEFT_DEVICE inline void storeF(__nv_bfloat16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}
WEFT_DEVICE inline void storeF(__half *p, int64_t i, float v) {
  p[i] = __float2half(v);
}
WEFT_DEVICE inline void storeF(int64_t *p, int64_t i, float v) {
  p[i] = int64_t(v);
}
WEFT_DEVICE inline void storeF(int32_t *p, int64_t i, float v) {
  p[i] = int32_t(v);
}
WEFT_DEVICE inline void storeF(bool *p, int64_t i, float v) { p[i] = v != 0; }
WEFT_DEVICE inline void storeI(int64_t *p, int64_t i, int64_t v) { p[i] = v; }
WEFT_DEVICE inline void storeI(int32_t *p, int64_t i, int64_t v) {
  p[i] = int32_t(v);
}
WEFT_DEVICE inline void storeI(bool *p, int64_t i, int64_t v) { p[i] = v != 0; }
WEFT_DEVICE inline void storeI(float *p, int64_t i, int64_t v) {
  p[i] = float(v);
}
WEFT_DEVICE inline void storeI(__nv_bfloat16 *p, int64_t i, int64_t v) {
  p[i] = __float2bfloat16(float(v));
}
WEFT_DEVICE inline void storeI(__half *p, int64_t i, int64_t v) {
  p[i] = __float2half(float(v));
}

/// Rounds as the stored type would, so that a fused chain of bf16 ops
/// matches the same ops run one by one.
WEFT_DEVICE inline float roundAs(float v, const float *) { return v; }
WEFT_DEVICE inline float roundAs(float v, const __nv_bfloat16 *) {
  return __bfloat162float(__float2bfloat16(v));
}
WEFT_DEVICE inline float roundAs(float v, const __half *) {
  return __half2float(__float2half(v));
}

WEFT_DEVICE inline float geluTanh(float x) {
  return 0.5f * x *
         (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
WEFT_DEVICE inline float geluErf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}
WEFT_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
WEFT_DEVICE inline float silu(float x) { return x * sigmoid(x); }

} // namespace weft::rt::cuda

#endif // WEFT_RUNTIME_CUDA_ELEMENTWISE_CUH

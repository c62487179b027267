//===- Elementwise.cuh - Device helpers of generated kernels ----*- C++ -*-===//
//
// Part of the Weft project.
//
// Generated elementwise kernels compute in f32 (floats) or i64 (integers and
// booleans) and convert at loads and stores; operands are read through
// broadcast strides (0 along broadcast dimensions) over the output's shape.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CUDA_ELEMENTWISE_CUH
#define WEFT_RUNTIME_CUDA_ELEMENTWISE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace weft::rt::cuda {

constexpr int kMaxRank = 8;

/// An output shape and one operand's strides over it, by value in kernels.
struct Dims {
  int rank;
  int64_t size[kMaxRank];
};
struct Strides {
  int64_t stride[kMaxRank];
};

/// Offset of output element `linear` in an operand with `strides`.
__device__ inline int64_t offsetOf(int64_t linear, const Dims &dims,
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
__device__ inline int64_t coordinateOf(int64_t linear, const Dims &dims,
                                       int dim) {
  for (int d = dims.rank - 1; d > dim; --d)
    linear /= dims.size[d];
  return linear % dims.size[dim];
}

__device__ inline float loadF(const float *p, int64_t i) { return p[i]; }
__device__ inline float loadF(const __nv_bfloat16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ inline float loadF(const __half *p, int64_t i) {
  return __half2float(p[i]);
}
__device__ inline float loadF(const int64_t *p, int64_t i) {
  return float(p[i]);
}
__device__ inline float loadF(const int32_t *p, int64_t i) {
  return float(p[i]);
}
__device__ inline float loadF(const bool *p, int64_t i) {
  return p[i] ? 1.0f : 0.0f;
}
__device__ inline int64_t loadI(const int64_t *p, int64_t i) { return p[i]; }
__device__ inline int64_t loadI(const int32_t *p, int64_t i) { return p[i]; }
__device__ inline int64_t loadI(const bool *p, int64_t i) { return p[i]; }
__device__ inline int64_t loadI(const float *p, int64_t i) {
  return int64_t(p[i]);
}
__device__ inline int64_t loadI(const __nv_bfloat16 *p, int64_t i) {
  return int64_t(__bfloat162float(p[i]));
}
__device__ inline int64_t loadI(const __half *p, int64_t i) {
  return int64_t(__half2float(p[i]));
}

__device__ inline void storeF(float *p, int64_t i, float v) { p[i] = v; }
__device__ inline void storeF(__nv_bfloat16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}
__device__ inline void storeF(__half *p, int64_t i, float v) {
  p[i] = __float2half(v);
}
__device__ inline void storeF(int64_t *p, int64_t i, float v) {
  p[i] = int64_t(v);
}
__device__ inline void storeF(int32_t *p, int64_t i, float v) {
  p[i] = int32_t(v);
}
__device__ inline void storeF(bool *p, int64_t i, float v) { p[i] = v != 0; }
__device__ inline void storeI(int64_t *p, int64_t i, int64_t v) { p[i] = v; }
__device__ inline void storeI(int32_t *p, int64_t i, int64_t v) {
  p[i] = int32_t(v);
}
__device__ inline void storeI(bool *p, int64_t i, int64_t v) { p[i] = v != 0; }
__device__ inline void storeI(float *p, int64_t i, int64_t v) {
  p[i] = float(v);
}
__device__ inline void storeI(__nv_bfloat16 *p, int64_t i, int64_t v) {
  p[i] = __float2bfloat16(float(v));
}
__device__ inline void storeI(__half *p, int64_t i, int64_t v) {
  p[i] = __float2half(float(v));
}

/// Rounds as the stored type would, so that a fused chain of bf16 ops
/// matches the same ops run one by one.
__device__ inline float roundAs(float v, const float *) { return v; }
__device__ inline float roundAs(float v, const __nv_bfloat16 *) {
  return __bfloat162float(__float2bfloat16(v));
}
__device__ inline float roundAs(float v, const __half *) {
  return __half2float(__float2half(v));
}

__device__ inline float geluTanh(float x) {
  return 0.5f * x *
         (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ inline float geluErf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}
__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float silu(float x) { return x * sigmoid(x); }

} // namespace weft::rt::cuda

#endif // WEFT_RUNTIME_CUDA_ELEMENTWISE_CUH

//===- CudaKernels.cu - The CUDA backend's kernels ------------------------===//
//
// Part of the Weft project.
//
// Kernels compute in f32 whatever the stored float type (f32, bf16, f16).
// Data movement works on element bits (1, 2, 4 or 8 bytes), so it serves
// every dtype. GEMMs go to cuBLASLt with f32 accumulation and their bias and
// GELU epilogues fused.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/CodecElements.h"
#include "weft/runtime/cuda/Cuda.h"
#include "weft/runtime/cuda/Elementwise.cuh"

#include <cublasLt.h>

#include <algorithm>
#include <cfloat>
#include <optional>
#include <string>
#include <type_traits>

using namespace weft::rt;
using namespace weft::rt::cuda;

namespace {

constexpr int kThreads = 256;

unsigned blocksFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 65535 * 32 ? (blocks > 0 ? blocks : 1)
                                      : 65535 * 32);
}

Dims dimsOf(const Shape &shape) {
  Dims dims{};
  dims.rank = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    dims.size[d] = shape[d];
  return dims;
}

Strides contiguous(const Shape &shape) {
  Strides strides{};
  int64_t s = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    strides.stride[d] = s;
    s *= shape[d];
  }
  return strides;
}

void checkRank(const Context &ctx, const Shape &shape) {
  if (shape.size() > size_t(kMaxRank))
    fail(ctx, "tensors of rank " + std::to_string(shape.size()) +
                  " exceed the CUDA kernels' " + std::to_string(kMaxRank));
}

// ---- Data movement on element bits -------------------------------------

template <typename E>
__global__ void copyStridedKernel(int64_t n, Dims dims, Strides from,
                                  int64_t fromBase, Strides to, int64_t toBase,
                                  const E *src, E *dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[toBase + offsetOf(i, dims, to)] = src[fromBase + offsetOf(i, dims, from)];
}

/// Copies the elements of `dims` from `src` (read through `from`) to `dst`
/// (written through `to`).
void copyStrided(Context &ctx, DType dtype, const Shape &shape,
                 const Strides &from, int64_t fromBase, const void *src,
                 const Strides &to, int64_t toBase, void *dst,
                 cudaStream_t stream = nullptr) {
  if (!stream)
    stream = ctx.compute;
  checkRank(ctx, shape);
  int64_t n = numElements(shape);
  if (n == 0)
    return;
  Dims dims = dimsOf(shape);
  unsigned blocks = blocksFor(n);
  switch (dtypeBytes(dtype)) {
  case 1:
    copyStridedKernel<<<blocks, kThreads, 0, stream>>>(
        n, dims, from, fromBase, to, toBase, static_cast<const uint8_t *>(src),
        static_cast<uint8_t *>(dst));
    break;
  case 2:
    copyStridedKernel<<<blocks, kThreads, 0, stream>>>(
        n, dims, from, fromBase, to, toBase,
        static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst));
    break;
  case 4:
    copyStridedKernel<<<blocks, kThreads, 0, stream>>>(
        n, dims, from, fromBase, to, toBase,
        static_cast<const uint32_t *>(src), static_cast<uint32_t *>(dst));
    break;
  default:
    copyStridedKernel<<<blocks, kThreads, 0, stream>>>(
        n, dims, from, fromBase, to, toBase,
        static_cast<const uint64_t *>(src), static_cast<uint64_t *>(dst));
    break;
  }
  checkLaunch(ctx);
}

template <typename E, typename I>
__global__ void gatherKernel(int64_t n, int64_t axisSize, int64_t indexCount,
                             int64_t inner, const E *src, const I *indices,
                             E *dst, int *bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t in = i % inner;
    int64_t j = (i / inner) % indexCount;
    int64_t outer = i / (inner * indexCount);
    int64_t index = int64_t(indices[j]);
    if (index < 0)
      index += axisSize;
    if (index < 0 || index >= axisSize) {
      *bad = 1;
      continue;
    }
    dst[i] = src[(outer * axisSize + index) * inner + in];
  }
}

template <typename E>
void launchGather(Context &ctx, int64_t n, int64_t axisSize, int64_t count,
                  int64_t inner, const void *src, const DeviceTensor &indices,
                  void *dst, int *bad) {
  unsigned blocks = blocksFor(n);
  if (indices.dtype == DType::I32)
    gatherKernel<<<blocks, kThreads, 0, ctx.compute>>>(
        n, axisSize, count, inner, static_cast<const E *>(src),
        static_cast<const int32_t *>(indices.data), static_cast<E *>(dst), bad);
  else
    gatherKernel<<<blocks, kThreads, 0, ctx.compute>>>(
        n, axisSize, count, inner, static_cast<const E *>(src),
        static_cast<const int64_t *>(indices.data), static_cast<E *>(dst), bad);
}

// ---- Rows: softmax and norms -------------------------------------------

/// Block-wide sum or max of `value` (every thread gets the result).
__device__ float blockReduce(float value, bool max, float *scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = max ? fmaxf(value, other) : value + other;
  }
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0)
    scratch[warp] = value;
  __syncthreads();
  int warps = (blockDim.x + 31) / 32;
  value = threadIdx.x < unsigned(warps) ? scratch[threadIdx.x]
                                        : (max ? -FLT_MAX : 0.0f);
  if (warp == 0)
    for (int offset = 16; offset > 0; offset /= 2) {
      float other = __shfl_xor_sync(0xffffffffu, value, offset);
      value = max ? fmaxf(value, other) : value + other;
    }
  if (threadIdx.x == 0)
    scratch[0] = value;
  __syncthreads();
  float result = scratch[0];
  __syncthreads();
  return result;
}

/// One block per row of `length` entries `inner` apart, on `scale · x`.
/// With `rows` > 0 (causal; the softmax axis is the last), row r is at
/// position r % rows and sees its first position + 1 entries.
template <typename T>
__global__ void softmaxKernel(int64_t length, int64_t inner, bool log,
                              float scale, int64_t rows, const T *x, T *y) {
  __shared__ float scratch[32];
  int64_t row = blockIdx.x;
  int64_t base = (row / inner) * length * inner + row % inner;
  int64_t visible = rows > 0 ? min(length, row % rows + 1) : length;
  float max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
    max = fmaxf(max, loadF(x, base + j * inner) * scale);
  max = blockReduce(max, true, scratch);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
    sum += expf(loadF(x, base + j * inner) * scale - max);
  sum = blockReduce(sum, false, scratch);
  float logSum = logf(sum);
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    if (j >= visible) {
      storeF(y, base + j * inner, log ? -INFINITY : 0.0f);
      continue;
    }
    float v = loadF(x, base + j * inner) * scale - max;
    storeF(y, base + j * inner, log ? v - logSum : expf(v) / sum);
  }
}

/// A reduction over a tensor's last `length` (contiguous) entries, one block
/// per row, the threads reading consecutive entries: a cross-entropy's
/// log-sum-exp over 128,256 classes, where a thread per row would walk its
/// row alone. `kind` as reduceKernel's; a row of -inf has log-sum-exp -inf.
template <typename T>
__global__ void rowReduceKernel(int64_t length, int kind, const T *x, T *y) {
  __shared__ float scratch[32];
  const T *row = x + blockIdx.x * length;
  bool max = kind == 2 || kind == 3;
  float acc = max ? -FLT_MAX : 0.0f;
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    float v = loadF(row, j);
    acc = max ? fmaxf(acc, v) : acc + v;
  }
  acc = blockReduce(acc, max, scratch);
  if (kind == 3) {
    float top = acc, sum = 0.0f;
    if (top != -INFINITY && top != -FLT_MAX)
      for (int64_t j = threadIdx.x; j < length; j += blockDim.x)
        sum += __expf(loadF(row, j) - top);
    sum = blockReduce(sum, false, scratch);
    acc = sum > 0.0f ? top + __logf(sum) : -INFINITY;
  } else if (kind == 1) {
    acc /= float(length);
  }
  if (threadIdx.x == 0)
    storeF(y, blockIdx.x, acc);
}

/// Cross-entropy, one block per row of `classes` logits: the row's loss,
/// log sum exp(x) - x[label] in f32, and whether it counts (an ignored
/// label does not). A label that is no class is flagged in `bad`.
template <typename T>
__global__ void crossEntropyKernel(int64_t classes, const T *logits,
                                   const int64_t *labels, bool ignore,
                                   int64_t ignoreIndex, float *losses,
                                   float *counted, int *bad) {
  __shared__ float scratch[32];
  const T *row = logits + blockIdx.x * classes;
  int64_t label = labels[blockIdx.x];
  float max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    max = fmaxf(max, loadF(row, j));
  max = blockReduce(max, true, scratch);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    sum += expf(loadF(row, j) - max);
  sum = blockReduce(sum, false, scratch);
  if (threadIdx.x != 0)
    return;
  bool skip = ignore && label == ignoreIndex;
  if (!skip && (label < 0 || label >= classes)) {
    *bad = 1;
    skip = true;
  }
  losses[blockIdx.x] = skip ? 0.0f : logf(sum) + max - loadF(row, label);
  counted[blockIdx.x] = skip ? 0.0f : 1.0f;
}

/// The losses as the output: per row (`reduction` 0), their mean over the
/// counted rows (1) or their sum (2), in one block.
template <typename T>
__global__ void lossReductionKernel(int64_t rows, int reduction,
                                    const float *losses, const float *counted,
                                    T *out) {
  __shared__ float scratch[32];
  if (reduction == 0) {
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
      storeF(out, r, losses[r]);
    return;
  }
  float total = 0, count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    total += losses[r];
    count += counted[r];
  }
  total = blockReduce(total, false, scratch);
  count = blockReduce(count, false, scratch);
  if (threadIdx.x == 0)
    storeF(out, 0, reduction == 2 ? total : count > 0 ? total / count : NAN);
}

template <typename T>
__global__ void normalizeKernel(int64_t length, float epsilon, bool rms,
                                const T *x, const T *scale, const T *bias,
                                T *y) {
  __shared__ float scratch[32];
  const T *row = x + blockIdx.x * length;
  T *out = y + blockIdx.x * length;
  float mean = 0;
  if (!rms) {
    float sum = 0;
    for (int64_t j = threadIdx.x; j < length; j += blockDim.x)
      sum += loadF(row, j);
    mean = blockReduce(sum, false, scratch) / float(length);
  }
  float squares = 0;
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    float v = loadF(row, j) - mean;
    squares += v * v;
  }
  float inv = rsqrtf(blockReduce(squares, false, scratch) / float(length) +
                     epsilon);
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    float v = (loadF(row, j) - mean) * inv * loadF(scale, j);
    if (bias)
      v += loadF(bias, j);
    storeF(out, j, v);
  }
}

/// One output element per thread: loops over the reduced elements.
template <typename T>
__global__ void reduceKernel(int64_t n, Dims kept, Strides keptStrides,
                             Dims reduced, Strides reducedStrides,
                             int64_t reducedCount, int kind, const T *x,
                             T *y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = offsetOf(i, kept, keptStrides);
    if (kind == 3) {
      // Log-sum-exp in one pass: a running maximum, the sum rescaled when
      // it grows.
      float top = -INFINITY, sum = 0.0f;
      for (int64_t r = 0; r < reducedCount; ++r) {
        float v = loadF(x, base + offsetOf(r, reduced, reducedStrides));
        if (v == -INFINITY)
          continue;
        if (v > top) {
          sum = sum * __expf(top - v) + 1.0f;
          top = v;
        } else {
          sum += __expf(v - top);
        }
      }
      storeF(y, i, sum > 0.0f ? top + __logf(sum) : -INFINITY);
      continue;
    }
    float acc = kind == 2 ? -FLT_MAX : 0.0f;
    for (int64_t r = 0; r < reducedCount; ++r) {
      float v = loadF(x, base + offsetOf(r, reduced, reducedStrides));
      acc = kind == 2 ? fmaxf(acc, v) : acc + v;
    }
    storeF(y, i, kind == 1 ? acc / float(reducedCount) : acc);
  }
}

template <typename T>
__global__ void triluKernel(int64_t n, int64_t rows, int64_t cols, bool upper,
                            int64_t diagonal, const T *x, T *y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = i % cols, r = (i / cols) % rows;
    bool keep = upper ? c - r >= diagonal : c - r <= diagonal;
    y[i] = keep ? x[i] : T(0);
  }
}

/// One thread per line along the axis, summing it in order: a padding mask's
/// positions, not a hot loop.
template <typename T, typename Acc>
__global__ void cumsumKernel(int64_t lines, int64_t length, int64_t inner,
                             bool exclusive, bool reverse, const T *x, T *y) {
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < lines;
       l += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (l / inner) * length * inner + l % inner;
    Acc sum = 0;
    for (int64_t k = 0; k < length; ++k) {
      int64_t at = base + (reverse ? length - 1 - k : k) * inner;
      Acc v;
      if constexpr (std::is_same_v<Acc, float>)
        v = loadF(x, at);
      else
        v = loadI(x, at);
      if (!exclusive)
        sum += v;
      if constexpr (std::is_same_v<Acc, float>)
        storeF(y, at, sum);
      else
        storeI(y, at, sum);
      if (exclusive)
        sum += v;
    }
  }
}

// ---- Flash attention -----------------------------------------------------

struct MaskView {
  const void *data;
  int kind;  // 0 none, 1 boolean, 2 additive f32, 3 additive bf16, 4 f16
  int64_t stride[4];
  /// Soft-capping of the scaled scores before the mask (0: none), a
  /// causal attention's sliding window (0: none), and ALiBi's slopes (one
  /// per query head; null: none) with the positions its distances read
  /// (null: the indices). Only the CUDA-core kernels apply them; the
  /// tensor-core ones are not chosen.
  float softcap;
  int64_t window;
  const void *alibi;
  int alibiKind; // 2 f32, 3 bf16, 4 f16 (as `kind`)
  const int64_t *qPos, *kPos;
};

/// Whether key `j` is hidden from query `i` by a causal mask: by position
/// (a ring step) or by index (top-left aligned), and by a sliding window
/// (keys `window` or more before the query).
__device__ inline bool causallyHidden(bool causal, const MaskView &mask,
                                      const int64_t *qPos, const int64_t *kPos,
                                      int64_t i, int64_t j) {
  if (!causal)
    return false;
  int64_t qi = qPos ? qPos[i] : i, kj = qPos ? kPos[j] : j;
  return kj > qi || (mask.window > 0 && kj <= qi - mask.window);
}

__device__ inline float maskValue(const MaskView &mask, int64_t b, int64_t h,
                                  int64_t i, int64_t j) {
  int64_t at = b * mask.stride[0] + h * mask.stride[1] + i * mask.stride[2] +
               j * mask.stride[3];
  switch (mask.kind) {
  case 1:
    return static_cast<const bool *>(mask.data)[at] ? 0.0f : -INFINITY;
  case 2:
    return static_cast<const float *>(mask.data)[at];
  case 3:
    return loadF(static_cast<const __nv_bfloat16 *>(mask.data), at);
  case 4:
    return loadF(static_cast<const __half *>(mask.data), at);
  default:
    return 0.0f;
  }
}

/// A scaled score `s` capped (softcap·tanh(s / softcap)), biased by ALiBi
/// (-m_h |i - j|) and then masked; `slope`, if given, gets the cap's
/// derivative 1 - tanh².
__device__ inline float maskedScore(const MaskView &mask, float s, int64_t b,
                                    int64_t h, int64_t i, int64_t j,
                                    float *slope = nullptr) {
  if (mask.softcap > 0) {
    float t = tanhf(s / mask.softcap);
    s = mask.softcap * t;
    if (slope)
      *slope = 1.0f - t * t;
  }
  if (mask.alibi) {
    int64_t qi = mask.qPos ? mask.qPos[i] : i,
            kj = mask.qPos ? mask.kPos[j] : j;
    float slope = mask.alibiKind == 3
                      ? loadF(static_cast<const __nv_bfloat16 *>(mask.alibi), h)
                  : mask.alibiKind == 4
                      ? loadF(static_cast<const __half *>(mask.alibi), h)
                      : static_cast<const float *>(mask.alibi)[h];
    s -= slope * float(qi > kj ? qi - kj : kj - qi);
  }
  return mask.kind ? s + maskValue(mask, b, h, i, j) : s;
}

/// One thread per query row, kBlockQ rows per block; K and V go through
/// shared memory kBlockK rows at a time and each row keeps a running max,
/// sum and output (the online softmax), so no score matrix is stored. With
/// positions (a ring step), the causal mask compares them; with `lse`, each
/// row's log-sum-exp is written too.
template <typename T, int kMaxDim, int kBlockK>
__global__ void
flashAttentionKernel(int64_t heads, int64_t kvHeads, int64_t seq, int64_t kvSeq,
                     int dim, int vDim, float scale, bool causal, MaskView mask,
                     const int64_t *qPos, const int64_t *kPos, const T *q,
                     const T *k, const T *v, T *out, float *lse) {
  extern __shared__ float tiles[];
  float *kTile = tiles;
  float *vTile = tiles + kBlockK * dim;
  // Each thread's scores for the current tile.
  float *scores = vTile + kBlockK * vDim + threadIdx.x * kBlockK;
  int64_t bh = blockIdx.y;
  int64_t b = bh / heads, h = bh % heads;
  int64_t kvh = h / (heads / kvHeads);
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  bool active = i < seq;
  const T *qRow = q + (bh * seq + (active ? i : 0)) * dim;
  const T *kHead = k + (b * kvHeads + kvh) * kvSeq * dim;
  const T *vHead = v + (b * kvHeads + kvh) * kvSeq * vDim;
  float qr[kMaxDim], acc[kMaxDim];
#pragma unroll
  for (int d = 0; d < kMaxDim; ++d) {
    qr[d] = d < dim && active ? loadF(qRow, d) * scale : 0.0f;
    acc[d] = 0.0f;
  }
  float runningMax = -INFINITY, runningSum = 0.0f;
  int64_t lastRow = min(seq, int64_t(blockIdx.x + 1) * blockDim.x) - 1;
  int64_t end = causal && !qPos ? min(kvSeq, lastRow + 1) : kvSeq;
  for (int64_t start = 0; start < end; start += kBlockK) {
    int count = int(min(int64_t(kBlockK), end - start));
    for (int64_t e = threadIdx.x; e < count * dim; e += blockDim.x)
      kTile[e] = loadF(kHead, start * dim + e);
    for (int64_t e = threadIdx.x; e < count * vDim; e += blockDim.x)
      vTile[e] = loadF(vHead, start * vDim + e);
    __syncthreads();
    if (active) {
      float tileMax = -INFINITY;
#pragma unroll 1
      for (int j = 0; j < count; ++j) {
        float s = -INFINITY;
        int64_t column = start + j;
        bool hidden =
            causallyHidden(causal, mask, qPos, kPos, active ? i : 0, column);
        if (!hidden) {
          s = 0.0f;
#pragma unroll
          for (int d = 0; d < kMaxDim; ++d)
            if (d < dim)
              s += qr[d] * kTile[j * dim + d];
          s = maskedScore(mask, s, b, h, i, column);
        }
        scores[j] = s;
        tileMax = fmaxf(tileMax, s);
      }
      float newMax = fmaxf(runningMax, tileMax);
      if (newMax > -INFINITY) {
        float correction = expf(runningMax - newMax);
        runningSum *= correction;
#pragma unroll
        for (int d = 0; d < kMaxDim; ++d)
          acc[d] *= correction;
#pragma unroll 1
        for (int j = 0; j < count; ++j) {
          float p = scores[j] > -INFINITY ? expf(scores[j] - newMax) : 0.0f;
          runningSum += p;
#pragma unroll
          for (int d = 0; d < kMaxDim; ++d)
            if (d < vDim)
              acc[d] += p * vTile[j * vDim + d];
        }
        runningMax = newMax;
      }
    }
    __syncthreads();
  }
  if (active) {
    T *outRow = out + (bh * seq + i) * vDim;
    float inv = runningSum > 0 ? 1.0f / runningSum : 0.0f;
#pragma unroll
    for (int d = 0; d < kMaxDim; ++d)
      if (d < vDim)
        storeF(outRow, d, acc[d] * inv);
    if (lse)
      lse[bh * seq + i] =
          runningSum > 0 ? runningMax + logf(runningSum) : -1e30f;
  }
}

/// What a block of keys adds to attention: positions and the log-sum-exp.
struct BlockView {
  const int64_t *qPos = nullptr, *kPos = nullptr;
  float *lse = nullptr;
};

template <typename T, int kMaxDim, int kBlockK>
void launchAttention(Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
                     const DeviceTensor &v, const MaskView &mask, float scale,
                     bool causal, const BlockView &block,
                     const DeviceTensor &out) {
  constexpr int kBlockQ = 64;
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2];
  int dim = int(q.shape[3]), vDim = int(v.shape[3]);
  size_t shared =
      size_t(kBlockK) * size_t(dim + vDim + kBlockQ) * sizeof(float);
  dim3 grid(unsigned((seq + kBlockQ - 1) / kBlockQ), unsigned(batch * heads));
  flashAttentionKernel<T, kMaxDim, kBlockK>
      <<<grid, kBlockQ, shared, ctx.compute>>>(
          heads, k.shape[1], seq, k.shape[2], dim, vDim, scale, causal, mask,
          block.qPos, block.kPos, static_cast<const T *>(q.data),
          static_cast<const T *>(k.data), static_cast<const T *>(v.data),
          static_cast<T *>(out.data), block.lse);
  checkLaunch(ctx);
}

// ---- Flash attention on tensor cores (bf16, f16; heads of 64 or 128) -----

/// A 16 x 8 x 16 product on the tensor cores, f32 accumulation:
/// c += a (16 x 16, row-major fragments) * b (16 x 8, column-major).
template <typename T>
__device__ inline void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same<T, __nv_bfloat16>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
#endif
}

template <typename T> __device__ inline uint32_t packPair(float x, float y) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    __nv_bfloat162 pair = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&pair);
  } else {
    __half2 pair = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&pair);
  }
}

template <typename T> __device__ inline uint32_t load32(const T *at) {
  return *reinterpret_cast<const uint32_t *>(at);
}

__device__ inline uint32_t sharedAddress(const void *at) {
  return uint32_t(__cvta_generic_to_shared(at));
}

/// 16 bytes from global to shared memory without passing through
/// registers (cp.async); zeros where `valid` is false.
__device__ inline void copyAsync16(void *shared, const void *global,
                                   bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   sharedAddress(shared)),
               "l"(global), "r"(valid ? 16 : 0));
#endif
}

__device__ inline void commitAsync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int kPending> __device__ inline void waitAsync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

/// Four 8 x 8 matrices of 16-bit elements from shared memory, each thread
/// naming one row (ldmatrix); `.trans` hands each thread a column pair.
template <bool kTranspose>
__device__ inline void loadMatrices(uint32_t (&r)[4], const void *row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kTranspose)
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(sharedAddress(row)));
  else
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(sharedAddress(row)));
#endif
}

/// FlashAttention-2's forward on mma.sync: a block of 4 warps takes 64
/// query rows (16 per warp, held as A fragments in registers) and walks the
/// keys 64 at a time. K and V tiles arrive in shared memory by cp.async,
/// double-buffered so that the next tile loads while this one is used;
/// rows are padded by 8 elements so that ldmatrix reads 32 distinct banks,
/// and V's B fragments come transposed by ldmatrix.trans. S = Q Kᵀ stays in
/// registers; the online softmax (in base 2: max and sum across the 4
/// threads of a row) rescales the output accumulators, and P, converted to
/// T in registers, is the A operand of P V. Masks, causal positions (ring
/// steps) and the log-sum-exp are applied per score, as in the CUDA-core
/// kernel.
template <typename T, int kDim>
__global__ void __launch_bounds__(128)
    flashAttentionMmaKernel(int64_t heads, int64_t kvHeads, int64_t seq,
                            int64_t kvSeq, float scale, bool causal,
                            MaskView mask, const int64_t *qPos,
                            const int64_t *kPos, const T *q, const T *k,
                            const T *v, T *out, float *lse) {
  constexpr int kRows = 64, kKeys = 64, kPitch = kDim + 8, kChunks = kDim / 8;
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  extern __shared__ uint4 sharedTiles[];
  T *qTile = reinterpret_cast<T *>(sharedTiles);
  T *kTiles = qTile + kRows * kPitch;      // [2][kKeys][kPitch]
  T *vTiles = kTiles + 2 * kKeys * kPitch; // [2][kKeys][kPitch]
  int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  int g = lane / 4, t = lane % 4;
  int64_t bh = blockIdx.y, b = bh / heads, h = bh % heads;
  int64_t kvh = h / (heads / kvHeads);
  // Under a causal mask the last query blocks see the most keys: they are
  // started first, so that the short ones fill the tail.
  int64_t row0 = int64_t(gridDim.x - 1 - blockIdx.x) * kRows;
  const T *qHead = q + bh * seq * kDim;
  const T *kHead = k + (b * kvHeads + kvh) * kvSeq * kDim;
  const T *vHead = v + (b * kvHeads + kvh) * kvSeq * kDim;
  int64_t lastRow = min(seq, row0 + kRows) - 1;
  int64_t end = causal && !qPos ? min(kvSeq, lastRow + 1) : kvSeq;

  auto loadTile = [&](int64_t start, int buffer) {
    T *kTile = kTiles + buffer * kKeys * kPitch;
    T *vTile = vTiles + buffer * kKeys * kPitch;
    for (int e = int(threadIdx.x); e < kKeys * kChunks; e += 128) {
      int r = e / kChunks, c = e % kChunks;
      bool valid = start + r < kvSeq;
      int64_t at = valid ? (start + r) * kDim + c * 8 : 0;
      copyAsync16(kTile + r * kPitch + c * 8, kHead + at, valid);
      copyAsync16(vTile + r * kPitch + c * 8, vHead + at, valid);
    }
    commitAsync();
  };

  for (int e = int(threadIdx.x); e < kRows * kChunks; e += 128) {
    int r = e / kChunks, c = e % kChunks;
    bool valid = row0 + r < seq;
    copyAsync16(qTile + r * kPitch + c * 8,
                qHead + (valid ? (row0 + r) * kDim + c * 8 : 0), valid);
  }
  commitAsync();
  if (end > 0) {
    loadTile(0, 0);
    waitAsync<1>();
  } else {
    waitAsync<0>();
  }
  __syncthreads();
  int warpRow = warp * 16;
  uint32_t qa[kDim / 16][4];
#pragma unroll
  for (int kk = 0; kk < kDim / 16; ++kk) {
    const T *top = qTile + (warpRow + g) * kPitch + kk * 16 + t * 2;
    const T *bottom = top + 8 * kPitch;
    qa[kk][0] = load32(top);
    qa[kk][1] = load32(bottom);
    qa[kk][2] = load32(top + 8);
    qa[kk][3] = load32(bottom + 8);
  }
  float o[kDim / 8][4];
#pragma unroll
  for (int d = 0; d < kDim / 8; ++d)
    o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  // The running max is in base-2 units (scores times log2 e).
  float rowMax[2] = {-INFINITY, -INFINITY}, rowSum[2] = {0.0f, 0.0f};
  int64_t rows[2] = {row0 + warpRow + g, row0 + warpRow + g + 8};
  // ldmatrix.x4: lane l names row l % 8 of matrix l / 8.
  int matrix = lane / 8, matrixRow = lane % 8;

  int buffer = 0;
  for (int64_t start = 0; start < end; start += kKeys, buffer ^= 1) {
    if (start + kKeys < end) {
      loadTile(start + kKeys, buffer ^ 1);
      waitAsync<1>();
    } else {
      waitAsync<0>();
    }
    __syncthreads();
    const T *kTile = kTiles + buffer * kKeys * kPitch;
    const T *vTile = vTiles + buffer * kKeys * kPitch;

    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk)
#pragma unroll
      for (int n = 0; n < kKeys / 8; n += 2) {
        // Matrices: keys n*8.. and (n+1)*8.., dimensions kk*16.. and +8.
        uint32_t frag[4];
        loadMatrices<false>(
            frag, kTile + ((n + matrix / 2) * 8 + matrixRow) * kPitch +
                      kk * 16 + (matrix & 1) * 8);
        mma16816<T>(s[n], qa[kk], frag[0], frag[1]);
        mma16816<T>(s[n + 1], qa[kk], frag[2], frag[3]);
      }

    float tileMax[2] = {-INFINITY, -INFINITY};
    // Scores that need a look at their indices: the last, partial tile, a
    // mask, positions, or a tile that reaches past the warp's first row
    // under a causal mask. The others are only scaled.
    bool edge = start + kKeys > kvSeq || mask.kind ||
                (causal && (qPos || start + kKeys - 1 > row0 + warpRow));
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * (scale * kLog2e);
        if (edge) {
          int64_t i = rows[e / 2], j = start + n * 8 + t * 2 + (e & 1);
          bool hidden = j >= kvSeq;
          if (!hidden && causal)
            hidden = qPos ? i < seq && kPos[j] > qPos[i] : j > i;
          if (hidden)
            x = -INFINITY;
          else if (mask.kind && i < seq)
            x += maskValue(mask, b, h, i, j) * kLog2e;
        }
        s[n][e] = x;
        tileMax[e / 2] = fmaxf(tileMax[e / 2], x);
      }
    float base[2], correction[2], tileSum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tileMax[r] =
          fmaxf(tileMax[r], __shfl_xor_sync(0xffffffff, tileMax[r], 1));
      tileMax[r] =
          fmaxf(tileMax[r], __shfl_xor_sync(0xffffffff, tileMax[r], 2));
      float newMax = fmaxf(rowMax[r], tileMax[r]);
      base[r] = newMax == -INFINITY ? 0.0f : newMax;
      correction[r] = exp2f(rowMax[r] - base[r]);
      rowMax[r] = newMax;
    }
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2f(s[n][e] - base[e / 2]);
        s[n][e] = p;
        tileSum[e / 2] += p;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      rowSum[r] = rowSum[r] * correction[r] + tileSum[r];
#pragma unroll
    for (int d = 0; d < kDim / 8; ++d) {
      o[d][0] *= correction[0];
      o[d][1] *= correction[0];
      o[d][2] *= correction[1];
      o[d][3] *= correction[1];
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t pa[4] = {packPair<T>(s[2 * kk][0], s[2 * kk][1]),
                        packPair<T>(s[2 * kk][2], s[2 * kk][3]),
                        packPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                        packPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int d = 0; d < kDim / 8; d += 2) {
        // Transposed matrices: keys kk*16.. and +8, dimensions d*8.. and
        // (d+1)*8.. of V stored [key][dim].
        uint32_t frag[4];
        loadMatrices<true>(
            frag, vTile + (kk * 16 + (matrix & 1) * 8 + matrixRow) * kPitch +
                      (d + matrix / 2) * 8);
        mma16816<T>(o[d], pa, frag[0], frag[1]);
        mma16816<T>(o[d + 1], pa, frag[2], frag[3]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rowSum[r] += __shfl_xor_sync(0xffffffff, rowSum[r], 1);
    rowSum[r] += __shfl_xor_sync(0xffffffff, rowSum[r], 2);
    int64_t i = rows[r];
    if (i >= seq)
      continue;
    float inv = rowSum[r] > 0 ? 1.0f / rowSum[r] : 0.0f;
    T *outRow = out + (bh * seq + i) * kDim;
#pragma unroll
    for (int d = 0; d < kDim / 8; ++d)
      *reinterpret_cast<uint32_t *>(outRow + d * 8 + t * 2) =
          packPair<T>(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (lse && t == 0)
      lse[bh * seq + i] =
          rowSum[r] > 0 ? rowMax[r] * kLn2 + logf(rowSum[r]) : -1e30f;
  }
}

/// Whether the tensor-core kernel takes this attention: 16-bit floats,
/// heads of 64 or 128 for Q, K and V alike, 16-byte aligned tensors, and a
/// device of compute capability 8.0 or later.
template <typename T>
bool tensorCoreAttention(Context &ctx, const DeviceTensor &q,
                         const DeviceTensor &k, const DeviceTensor &v,
                         const DeviceTensor &out) {
  static_assert(!std::is_same<T, float>::value, "f32 has no MMA path");
  int64_t dim = q.shape[3];
  if ((dim != 64 && dim != 128) || k.shape[3] != dim || v.shape[3] != dim)
    return false;
  for (const DeviceTensor *t : {&q, &k, &v, &out})
    if (reinterpret_cast<uintptr_t>(t->data) % 16)
      return false;
  static int major = [&] {
    int device = 0, value = 0;
    check(ctx, cudaGetDevice(&device), "cudaGetDevice");
    check(ctx,
          cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor,
                                 device),
          "cudaDeviceGetAttribute");
    return value;
  }();
  return major >= 8;
}

template <typename T, int kDim>
void launchAttentionMma(Context &ctx, const DeviceTensor &q,
                        const DeviceTensor &k, const DeviceTensor &v,
                        const MaskView &mask, float scale, bool causal,
                        const BlockView &block, const DeviceTensor &out) {
  constexpr int kRows = 64, kKeys = 64;
  size_t shared = size_t(kRows + 4 * kKeys) * (kDim + 8) * sizeof(T);
  // Raised once per process; ranks as threads may get here together, and a
  // static's initialization is thread-safe.
  static const bool raised = [&] {
    check(ctx,
          cudaFuncSetAttribute(flashAttentionMmaKernel<T, kDim>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(shared)),
          "cudaFuncSetAttribute");
    return true;
  }();
  (void)raised;
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2];
  dim3 grid(unsigned((seq + kRows - 1) / kRows), unsigned(batch * heads));
  flashAttentionMmaKernel<T, kDim><<<grid, 128, shared, ctx.compute>>>(
      heads, k.shape[1], seq, k.shape[2], scale, causal, mask, block.qPos,
      block.kPos, static_cast<const T *>(q.data),
      static_cast<const T *>(k.data), static_cast<const T *>(v.data),
      static_cast<T *>(out.data), block.lse);
  checkLaunch(ctx);
}

template <typename T>
void dispatchAttention(Context &ctx, const DeviceTensor &q,
                       const DeviceTensor &k, const DeviceTensor &v,
                       const MaskView &mask, float scale, bool causal,
                       const BlockView &block, const DeviceTensor &out) {
  int64_t dim = std::max(q.shape[3], v.shape[3]);
  // A block row per (batch, head): the grid's y extent.
  if (q.shape[0] * q.shape[1] > 65535)
    fail(ctx, "attention over more than 65535 (batch x heads) pairs is not "
              "supported on CUDA; split the batch");
  // f32 has no tensor-core path: its MMA kernels are not instantiated (they
  // were 6 % of this file's PTX, never launched).
  if constexpr (!std::is_same<T, float>::value) {
    if (!(mask.softcap > 0) && mask.window == 0 && !mask.alibi &&
        tensorCoreAttention<T>(ctx, q, k, v, out)) {
      if (dim == 64)
        launchAttentionMma<T, 64>(ctx, q, k, v, mask, scale, causal, block,
                                  out);
      else
        launchAttentionMma<T, 128>(ctx, q, k, v, mask, scale, causal, block,
                                   out);
      return;
    }
  }
  if (dim <= 64)
    launchAttention<T, 64, 32>(ctx, q, k, v, mask, scale, causal, block, out);
  else if (dim <= 128)
    launchAttention<T, 128, 32>(ctx, q, k, v, mask, scale, causal, block, out);
  else if (dim <= 256)
    launchAttention<T, 256, 16>(ctx, q, k, v, mask, scale, causal, block, out);
  else
    fail(ctx, "attention heads wider than 256 are not supported on CUDA");
}

// ---- Attention's backward -------------------------------------------------

/// One thread per query row: the row's log-sum-exp over the keys it sees,
/// D = rowsum(P dP) with dP = dO Vᵀ, and dQ = scale Σ_j P (dP - D) K_j, in
/// three passes over the keys (nothing of size S x S is stored). A row whose
/// keys are all masked gets dQ = 0 and lse = +inf (its P is then 0). With
/// the forward's `savedOut` and `savedLse` (a ring's block of keys), the
/// row's log-sum-exp is the saved one and D = rowsum(dO out): one pass.
template <typename T, int kMaxDim>
__global__ void attentionGradRowsKernel(
    int64_t heads, int64_t kvHeads, int64_t seq, int64_t kvSeq, int dim,
    int vDim, float scale, bool causal, MaskView mask, const int64_t *qPos,
    const int64_t *kPos, const T *q, const T *k, const T *v, const T *dout,
    const T *savedOut, const float *savedLse, T *dq, float *lse, float *delta) {
  int64_t bh = blockIdx.y;
  int64_t b = bh / heads, h = bh % heads;
  int64_t kvh = h / (heads / kvHeads);
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= seq)
    return;
  const T *qRow = q + (bh * seq + i) * dim;
  const T *doRow = dout + (bh * seq + i) * vDim;
  const T *kHead = k + (b * kvHeads + kvh) * kvSeq * dim;
  const T *vHead = v + (b * kvHeads + kvh) * kvSeq * vDim;
  float qr[kMaxDim], dor[kMaxDim], acc[kMaxDim];
#pragma unroll
  for (int d = 0; d < kMaxDim; ++d) {
    qr[d] = d < dim ? loadF(qRow, d) * scale : 0.0f;
    dor[d] = d < vDim ? loadF(doRow, d) : 0.0f;
    acc[d] = 0.0f;
  }
  int64_t end = causal && !qPos ? min(kvSeq, i + 1) : kvSeq;
  auto score = [&](int64_t j, float *slope) {
    if (causallyHidden(causal, mask, qPos, kPos, i, j))
      return -INFINITY;
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < kMaxDim; ++d)
      if (d < dim)
        s += qr[d] * loadF(kHead, j * dim + d);
    return maskedScore(mask, s, b, h, i, j, slope);
  };
  auto gradOfProb = [&](int64_t j) {
    float dp = 0.0f;
#pragma unroll
    for (int d = 0; d < kMaxDim; ++d)
      if (d < vDim)
        dp += dor[d] * loadF(vHead, j * vDim + d);
    return dp;
  };
  T *dqRow = dq + (bh * seq + i) * dim;
  float rowLse = 0.0f, rowDelta = 0.0f;
  if (savedLse) {
    rowLse = savedLse[bh * seq + i];
    const T *outRow = savedOut + (bh * seq + i) * vDim;
#pragma unroll
    for (int d = 0; d < kMaxDim; ++d)
      if (d < vDim)
        rowDelta += loadF(outRow, d) * dor[d];
  }
  // Pass 0 finds the row's log-sum-exp (online, as the forward does), pass 1
  // sums D and pass 2 accumulates dQ; with a saved log-sum-exp only pass 2
  // runs. The passes share one loop so that the unrolled dot products of the
  // score and of dP are compiled once each, not four and two times.
  float max = -INFINITY, sum = 0.0f;
  for (int pass = savedLse ? 2 : 0; pass < 3; ++pass) {
    if (pass == 1) {
      if (!(sum > 0)) {
        for (int d = 0; d < dim; ++d)
          storeF(dqRow, d, 0.0f);
        lse[bh * seq + i] = INFINITY;
        delta[bh * seq + i] = 0.0f;
        return;
      }
      rowLse = max + logf(sum);
    }
    for (int64_t j = 0; j < end; ++j) {
      float slope = 1.0f;
      float s = score(j, &slope);
      if (!(s > -INFINITY))
        continue;
      if (pass == 0) {
        if (s > max) {
          sum = sum * expf(max - s) + 1.0f;
          max = s;
        } else {
          sum += expf(s - max);
        }
        continue;
      }
      float p = expf(s - rowLse), dp = gradOfProb(j);
      if (pass == 1) {
        rowDelta += p * dp;
        continue;
      }
      float ds = p * (dp - rowDelta) * scale * slope;
#pragma unroll
      for (int d = 0; d < kMaxDim; ++d)
        if (d < dim)
          acc[d] += ds * loadF(kHead, j * dim + d);
    }
  }
  for (int d = 0; d < kMaxDim; ++d)
    if (d < dim)
      storeF(dqRow, d, acc[d]);
  lse[bh * seq + i] = rowLse;
  delta[bh * seq + i] = rowDelta;
}

/// One thread per key row of a KV head: dK_j = scale Σ_i dS_ij Q_i and dV_j
/// = Σ_i P_ij dO_i over the query heads of its group and the queries that
/// see it, with P recomputed from each row's log-sum-exp.
template <typename T, int kMaxDim>
__global__ void attentionGradKeysKernel(
    int64_t heads, int64_t kvHeads, int64_t seq, int64_t kvSeq, int dim,
    int vDim, float scale, bool causal, MaskView mask, const int64_t *qPos,
    const int64_t *kPos, const T *q, const T *k, const T *v, const T *dout,
    const float *lse, const float *delta, T *dk, T *dv) {
  int64_t bkv = blockIdx.y;
  int64_t b = bkv / kvHeads, kvh = bkv % kvHeads;
  int64_t group = heads / kvHeads;
  int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= kvSeq)
    return;
  float kr[kMaxDim], vr[kMaxDim], dkAcc[kMaxDim], dvAcc[kMaxDim];
#pragma unroll
  for (int d = 0; d < kMaxDim; ++d) {
    kr[d] = d < dim ? loadF(k, (bkv * kvSeq + j) * dim + d) : 0.0f;
    vr[d] = d < vDim ? loadF(v, (bkv * kvSeq + j) * vDim + d) : 0.0f;
    dkAcc[d] = 0.0f;
    dvAcc[d] = 0.0f;
  }
  int64_t first = causal && !qPos ? j : 0;
  for (int64_t g = 0; g < group; ++g) {
    int64_t h = kvh * group + g, bh = b * heads + h;
    for (int64_t i = first; i < seq; ++i) {
      if (causallyHidden(causal, mask, qPos, kPos, i, j))
        continue;
      const T *qRow = q + (bh * seq + i) * dim;
      const T *doRow = dout + (bh * seq + i) * vDim;
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < kMaxDim; ++d) {
        if (d < dim)
          s += loadF(qRow, d) * kr[d];
        if (d < vDim)
          dp += loadF(doRow, d) * vr[d];
      }
      float slope = 1.0f;
      s = maskedScore(mask, s * scale, b, h, i, j, &slope);
      if (!(s > -INFINITY))
        continue;
      float p = expf(s - lse[bh * seq + i]);
      float ds = p * (dp - delta[bh * seq + i]) * scale * slope;
#pragma unroll
      for (int d = 0; d < kMaxDim; ++d) {
        if (d < dim)
          dkAcc[d] += ds * loadF(qRow, d);
        if (d < vDim)
          dvAcc[d] += p * loadF(doRow, d);
      }
    }
  }
  for (int d = 0; d < kMaxDim; ++d) {
    if (d < dim)
      storeF(dk + (bkv * kvSeq + j) * dim, d, dkAcc[d]);
    if (d < vDim)
      storeF(dv + (bkv * kvSeq + j) * vDim, d, dvAcc[d]);
  }
}

template <typename T, int kMaxDim>
void launchAttentionGrad(Context &ctx, const DeviceTensor &q,
                         const DeviceTensor &k, const DeviceTensor &v,
                         const DeviceTensor &dout, const MaskView &mask,
                         const int64_t *qPos, const int64_t *kPos,
                         const DeviceTensor *out, const DeviceTensor *savedLse,
                         float scale, bool causal, const DeviceTensor &dq,
                         const DeviceTensor &dk, const DeviceTensor &dv) {
  constexpr int kThreadsPerBlock = 64;
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2];
  int64_t kvHeads = k.shape[1], kvSeq = k.shape[2];
  int dim = int(q.shape[3]), vDim = int(v.shape[3]);
  // Each query row's log-sum-exp and D, f32.
  float *stats = nullptr;
  size_t rows = size_t(batch * heads * seq);
  check(ctx,
        cudaMallocAsync(reinterpret_cast<void **>(&stats),
                        std::max<size_t>(2 * rows, 1) * sizeof(float),
                        ctx.compute),
        "cudaMallocAsync");
  dim3 rowGrid(unsigned((seq + kThreadsPerBlock - 1) / kThreadsPerBlock),
               unsigned(batch * heads));
  attentionGradRowsKernel<T, kMaxDim>
      <<<rowGrid, kThreadsPerBlock, 0, ctx.compute>>>(
          heads, kvHeads, seq, kvSeq, dim, vDim, scale, causal, mask, qPos,
          kPos, static_cast<const T *>(q.data), static_cast<const T *>(k.data),
          static_cast<const T *>(v.data), static_cast<const T *>(dout.data),
          out ? static_cast<const T *>(out->data) : nullptr,
          savedLse ? static_cast<const float *>(savedLse->data) : nullptr,
          static_cast<T *>(dq.data), stats, stats + rows);
  checkLaunch(ctx);
  dim3 keyGrid(unsigned((kvSeq + kThreadsPerBlock - 1) / kThreadsPerBlock),
               unsigned(batch * kvHeads));
  attentionGradKeysKernel<T, kMaxDim>
      <<<keyGrid, kThreadsPerBlock, 0, ctx.compute>>>(
          heads, kvHeads, seq, kvSeq, dim, vDim, scale, causal, mask, qPos,
          kPos, static_cast<const T *>(q.data), static_cast<const T *>(k.data),
          static_cast<const T *>(v.data), static_cast<const T *>(dout.data),
          stats, stats + rows, static_cast<T *>(dk.data),
          static_cast<T *>(dv.data));
  checkLaunch(ctx);
  check(ctx, cudaFreeAsync(stats, ctx.compute), "cudaFreeAsync");
}

// ---- Attention's backward on tensor cores (bf16, f16; heads of 64 or 128) -

/// D = rowsum(dO ∘ O) for each query row, one warp per row.
template <typename T>
__global__ void attentionDeltaKernel(int64_t rows, int dim, const T *dout,
                                     const T *out, float *delta) {
  int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = int(threadIdx.x) % 32;
  if (row >= rows)
    return;
  float sum = 0.0f;
  for (int d = lane; d < dim; d += 32)
    sum += loadF(dout, row * dim + d) * loadF(out, row * dim + d);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffff, sum, offset);
  if (lane == 0)
    delta[row] = sum;
}

/// 64 rows of a [rows][kDim] tensor into a shared tile padded to kPitch, by
/// cp.async (zeros past `limit`).
template <typename T, int kDim>
__device__ inline void copyRowsAsync(T *tile, const T *from, int64_t first,
                                     int64_t limit) {
  constexpr int kPitch = kDim + 8, kChunks = kDim / 8;
  for (int e = int(threadIdx.x); e < 64 * kChunks; e += 128) {
    int r = e / kChunks, c = e % kChunks;
    bool valid = first + r < limit;
    copyAsync16(tile + r * kPitch + c * 8,
                from + (valid ? (first + r) * kDim + c * 8 : 0), valid);
  }
}

/// c[n] += a · Bᵀ over one 16-row warp strip and 64 columns: B's 64 rows
/// (shared, [row][kDim], padded) are the columns; `a` holds the strip's A
/// fragments for the kDim/16 k-steps.
template <typename T, int kDim>
__device__ inline void stripTimesRowsT(float (&c)[8][4],
                                       const uint32_t (&a)[kDim / 16][4],
                                       const T *rows, int lane) {
  constexpr int kPitch = kDim + 8;
  int matrix = lane / 8, matrixRow = lane % 8;
#pragma unroll
  for (int kk = 0; kk < kDim / 16; ++kk)
#pragma unroll
    for (int n = 0; n < 8; n += 2) {
      uint32_t frag[4];
      loadMatrices<false>(frag,
                          rows + ((n + matrix / 2) * 8 + matrixRow) * kPitch +
                              kk * 16 + (matrix & 1) * 8);
      mma16816<T>(c[n], a[kk], frag[0], frag[1]);
      mma16816<T>(c[n + 1], a[kk], frag[2], frag[3]);
    }
}

/// acc += P · B, P a 16 x 64 strip in accumulator layout (converted to A
/// fragments in registers) and B 64 rows of [row][kDim] in shared memory.
template <typename T, int kDim>
__device__ inline void stripTimesRows(float (&acc)[kDim / 8][4],
                                      const float (&p)[8][4], const T *rows,
                                      int lane) {
  constexpr int kPitch = kDim + 8;
  int matrix = lane / 8, matrixRow = lane % 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t pa[4] = {packPair<T>(p[2 * kk][0], p[2 * kk][1]),
                      packPair<T>(p[2 * kk][2], p[2 * kk][3]),
                      packPair<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                      packPair<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int d = 0; d < kDim / 8; d += 2) {
      uint32_t frag[4];
      loadMatrices<true>(
          frag, rows + (kk * 16 + (matrix & 1) * 8 + matrixRow) * kPitch +
                    (d + matrix / 2) * 8);
      mma16816<T>(acc[d], pa, frag[0], frag[1]);
      mma16816<T>(acc[d + 1], pa, frag[2], frag[3]);
    }
  }
}

/// A 16-row strip's A fragments from a shared tile ([row][kDim], padded).
template <typename T, int kDim>
__device__ inline void loadStrip(uint32_t (&a)[kDim / 16][4], const T *tile,
                                 int strip, int lane) {
  constexpr int kPitch = kDim + 8;
  int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kk = 0; kk < kDim / 16; ++kk) {
    const T *top = tile + (strip + g) * kPitch + kk * 16 + t * 2;
    const T *bottom = top + 8 * kPitch;
    a[kk][0] = load32(top);
    a[kk][1] = load32(bottom);
    a[kk][2] = load32(top + 8);
    a[kk][3] = load32(bottom + 8);
  }
}

/// dQ, FlashAttention-2's way, query-parallel: a block of 4 warps takes 64
/// query rows (16 per warp, Q and dO as A fragments in registers) and walks
/// the keys 64 at a time, K and V double-buffered through shared memory as
/// in the forward. Per tile: S = Q Kᵀ and dP = dO Vᵀ on the tensor cores,
/// P = exp(scale S - lse) from the rows' log-sum-exps, dS = P (dP - D), and
/// dQ += dS K with dS converted to A fragments in registers. Nothing is
/// written but dQ: no atomics.
template <typename T, int kDim>
__global__ void __launch_bounds__(128)
    attentionGradQueriesMmaKernel(int64_t heads, int64_t kvHeads, int64_t seq,
                                  int64_t kvSeq, float scale, bool causal,
                                  MaskView mask, const int64_t *qPos,
                                  const int64_t *kPos, const T *q, const T *k,
                                  const T *v, const T *dout, const float *lse,
                                  const float *delta, T *dq) {
  constexpr int kRows = 64, kKeys = 64, kPitch = kDim + 8;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ uint4 sharedTiles[];
  T *qTile = reinterpret_cast<T *>(sharedTiles);
  T *doTile = qTile + kRows * kPitch;
  T *kTiles = doTile + kRows * kPitch;     // [2][kKeys][kPitch]
  T *vTiles = kTiles + 2 * kKeys * kPitch; // [2][kKeys][kPitch]
  int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  int g = lane / 4, t = lane % 4;
  int64_t bh = blockIdx.y, b = bh / heads, h = bh % heads;
  int64_t kvh = h / (heads / kvHeads);
  int64_t row0 = int64_t(gridDim.x - 1 - blockIdx.x) * kRows;
  const T *kHead = k + (b * kvHeads + kvh) * kvSeq * kDim;
  const T *vHead = v + (b * kvHeads + kvh) * kvSeq * kDim;
  int64_t lastRow = min(seq, row0 + kRows) - 1;
  int64_t end = causal && !qPos ? min(kvSeq, lastRow + 1) : kvSeq;
  auto loadTile = [&](int64_t start, int buffer) {
    copyRowsAsync<T, kDim>(kTiles + buffer * kKeys * kPitch, kHead, start,
                           kvSeq);
    copyRowsAsync<T, kDim>(vTiles + buffer * kKeys * kPitch, vHead, start,
                           kvSeq);
    commitAsync();
  };
  copyRowsAsync<T, kDim>(qTile, q + bh * seq * kDim, row0, seq);
  copyRowsAsync<T, kDim>(doTile, dout + bh * seq * kDim, row0, seq);
  commitAsync();
  if (end > 0) {
    loadTile(0, 0);
    waitAsync<1>();
  } else {
    waitAsync<0>();
  }
  __syncthreads();
  int warpRow = warp * 16;
  uint32_t qa[kDim / 16][4], doa[kDim / 16][4];
  loadStrip<T, kDim>(qa, qTile, warpRow, lane);
  loadStrip<T, kDim>(doa, doTile, warpRow, lane);
  int64_t rows[2] = {row0 + warpRow + g, row0 + warpRow + g + 8};
  float rowLse[2], rowDelta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    bool valid = rows[r] < seq;
    rowLse[r] = valid ? lse[bh * seq + rows[r]] * kLog2e : INFINITY;
    rowDelta[r] = valid ? delta[bh * seq + rows[r]] : 0.0f;
  }
  float acc[kDim / 8][4];
#pragma unroll
  for (int d = 0; d < kDim / 8; ++d)
    acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.0f;

  int buffer = 0;
  for (int64_t start = 0; start < end; start += kKeys, buffer ^= 1) {
    if (start + kKeys < end) {
      loadTile(start + kKeys, buffer ^ 1);
      waitAsync<1>();
    } else {
      waitAsync<0>();
    }
    __syncthreads();
    const T *kTile = kTiles + buffer * kKeys * kPitch;
    const T *vTile = vTiles + buffer * kKeys * kPitch;
    float s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = dp[n][e] = 0.0f;
    stripTimesRowsT<T, kDim>(s, qa, kTile, lane);
    stripTimesRowsT<T, kDim>(dp, doa, vTile, lane);
    bool edge = start + kKeys > kvSeq || mask.kind ||
                (causal && (qPos || start + kKeys - 1 > row0 + warpRow));
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * (scale * kLog2e);
        if (edge) {
          int64_t i = rows[e / 2], j = start + n * 8 + t * 2 + (e & 1);
          bool hidden = j >= kvSeq || i >= seq;
          if (!hidden && causal)
            hidden = qPos ? kPos[j] > qPos[i] : j > i;
          if (hidden)
            x = -INFINITY;
          else if (mask.kind)
            x += maskValue(mask, b, h, i, j) * kLog2e;
        }
        float p = exp2f(x - rowLse[e / 2]);
        s[n][e] = p * (dp[n][e] - rowDelta[e / 2]);
      }
    stripTimesRows<T, kDim>(acc, s, kTile, lane);
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int64_t i = rows[r];
    if (i >= seq)
      continue;
    T *row = dq + (bh * seq + i) * kDim;
#pragma unroll
    for (int d = 0; d < kDim / 8; ++d)
      *reinterpret_cast<uint32_t *>(row + d * 8 + t * 2) =
          packPair<T>(acc[d][2 * r] * scale, acc[d][2 * r + 1] * scale);
  }
}

/// dK and dV, key-parallel: a block of 4 warps takes 64 keys of one KV head
/// (16 per warp) and walks the query rows of the heads that share it, 64 at
/// a time, Q and dO double-buffered through shared memory with the rows'
/// log-sum-exps and D. Per tile: Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, Pᵀ and dSᵀ as
/// in the dQ kernel, then dV += Pᵀ dO and dK += dSᵀ Q, both from registers.
template <typename T, int kDim>
__global__ void __launch_bounds__(128)
    attentionGradKeysMmaKernel(int64_t heads, int64_t kvHeads, int64_t seq,
                               int64_t kvSeq, float scale, bool causal,
                               MaskView mask, const int64_t *qPos,
                               const int64_t *kPos, const T *q, const T *k,
                               const T *v, const T *dout, const float *lse,
                               const float *delta, T *dk, T *dv) {
  constexpr int kRows = 64, kKeys = 64, kPitch = kDim + 8;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ uint4 sharedTiles[];
  float *stats = reinterpret_cast<float *>(sharedTiles); // [2][lse, D][kRows]
  T *kTile = reinterpret_cast<T *>(stats + 4 * kRows);
  T *vTile = kTile + kKeys * kPitch;
  T *qTiles = vTile + kKeys * kPitch;       // [2][kRows][kPitch]
  T *doTiles = qTiles + 2 * kRows * kPitch; // [2][kRows][kPitch]
  int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  int g = lane / 4, t = lane % 4;
  int64_t bkv = blockIdx.y, b = bkv / kvHeads, kvh = bkv % kvHeads;
  int64_t group = heads / kvHeads;
  // Under a causal mask the first keys are seen by the most queries.
  int64_t key0 = int64_t(blockIdx.x) * kKeys;
  int64_t firstRow = causal && !qPos ? key0 / kRows * kRows : 0;
  int64_t tilesPerHead =
      firstRow < seq ? (seq - firstRow + kRows - 1) / kRows : 0;
  int64_t tiles = tilesPerHead * group;
  auto loadTile = [&](int64_t tile, int buffer) {
    int64_t bh = b * heads + kvh * group + tile / tilesPerHead;
    int64_t first = firstRow + tile % tilesPerHead * kRows;
    copyRowsAsync<T, kDim>(qTiles + buffer * kRows * kPitch,
                           q + bh * seq * kDim, first, seq);
    copyRowsAsync<T, kDim>(doTiles + buffer * kRows * kPitch,
                           dout + bh * seq * kDim, first, seq);
    commitAsync();
    // Rows past the end get lse = +inf (P = 0) and D = 0.
    if (threadIdx.x < kRows) {
      int64_t i = first + threadIdx.x;
      bool valid = i < seq;
      stats[buffer * 2 * kRows + threadIdx.x] =
          valid ? lse[bh * seq + i] * kLog2e : INFINITY;
      stats[buffer * 2 * kRows + kRows + threadIdx.x] =
          valid ? delta[bh * seq + i] : 0.0f;
    }
  };
  copyRowsAsync<T, kDim>(kTile, k + bkv * kvSeq * kDim, key0, kvSeq);
  copyRowsAsync<T, kDim>(vTile, v + bkv * kvSeq * kDim, key0, kvSeq);
  commitAsync();
  int warpKey = warp * 16;
  int64_t keys[2] = {key0 + warpKey + g, key0 + warpKey + g + 8};
  float dkAcc[kDim / 8][4], dvAcc[kDim / 8][4];
#pragma unroll
  for (int d = 0; d < kDim / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dkAcc[d][e] = dvAcc[d][e] = 0.0f;
  if (tiles > 0)
    loadTile(0, 0);
  int buffer = 0;
  for (int64_t tile = 0; tile < tiles; ++tile, buffer ^= 1) {
    if (tile + 1 < tiles) {
      loadTile(tile + 1, buffer ^ 1);
      waitAsync<1>();
    } else {
      waitAsync<0>();
    }
    __syncthreads();
    int64_t h = kvh * group + tile / tilesPerHead;
    int64_t first = firstRow + tile % tilesPerHead * kRows;
    const T *qTile = qTiles + buffer * kRows * kPitch;
    const T *doTile = doTiles + buffer * kRows * kPitch;
    const float *rowLse = stats + buffer * 2 * kRows;
    const float *rowDelta = rowLse + kRows;
    float s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = dp[n][e] = 0.0f;
    {
      uint32_t a[kDim / 16][4];
      loadStrip<T, kDim>(a, kTile, warpKey, lane);
      stripTimesRowsT<T, kDim>(s, a, qTile, lane);
      loadStrip<T, kDim>(a, vTile, warpKey, lane);
      stripTimesRowsT<T, kDim>(dp, a, doTile, lane);
    }
    bool edge = key0 + kKeys > kvSeq || first + kRows > seq || mask.kind ||
                (causal && (qPos || first < key0 + warpKey + 16));
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int c = n * 8 + t * 2 + (e & 1);
        float x = s[n][e] * (scale * kLog2e);
        if (edge) {
          int64_t i = first + c, j = keys[e / 2];
          bool hidden = j >= kvSeq || i >= seq;
          if (!hidden && causal)
            hidden = qPos ? kPos[j] > qPos[i] : j > i;
          if (hidden)
            x = -INFINITY;
          else if (mask.kind)
            x += maskValue(mask, b, h, i, j) * kLog2e;
        }
        float p = exp2f(x - rowLse[c]);
        s[n][e] = p;
        dp[n][e] = p * (dp[n][e] - rowDelta[c]);
      }
    stripTimesRows<T, kDim>(dvAcc, s, doTile, lane);
    stripTimesRows<T, kDim>(dkAcc, dp, qTile, lane);
    __syncthreads();
  }
  waitAsync<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int64_t j = keys[r];
    if (j >= kvSeq)
      continue;
    T *dkRow = dk + (bkv * kvSeq + j) * kDim;
    T *dvRow = dv + (bkv * kvSeq + j) * kDim;
#pragma unroll
    for (int d = 0; d < kDim / 8; ++d) {
      *reinterpret_cast<uint32_t *>(dkRow + d * 8 + t * 2) =
          packPair<T>(dkAcc[d][2 * r] * scale, dkAcc[d][2 * r + 1] * scale);
      *reinterpret_cast<uint32_t *>(dvRow + d * 8 + t * 2) =
          packPair<T>(dvAcc[d][2 * r], dvAcc[d][2 * r + 1]);
    }
  }
}

/// The shared memory of the tensor-core backward's kernels: six 64-row
/// tiles of 16-bit elements (Q, dO and two buffers of K and V, or K, V and
/// two of Q and dO), padded, and `extra` bytes.
inline size_t attentionGradMmaShared(int64_t dim, size_t extra) {
  return size_t(6 * 64) * size_t(dim + 8) * 2 + extra;
}

/// The shared memory a block may opt in to on the current device: 227 KiB
/// on an H100, 163 KiB on an A100, 99 KiB on sm_86 and sm_89 parts (RTX
/// 30xx/40xx, A10, L4, L40S).
size_t sharedMemoryOptIn(Context &ctx) {
  static size_t bytes = [&] {
    int device = 0, value = 0;
    check(ctx, cudaGetDevice(&device), "cudaGetDevice");
    check(ctx,
          cudaDeviceGetAttribute(
              &value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute");
    return size_t(value);
  }();
  return bytes;
}

template <typename T, int kDim>
void launchAttentionGradMma(Context &ctx, const DeviceTensor &q,
                            const DeviceTensor &k, const DeviceTensor &v,
                            const DeviceTensor &dout, const MaskView &mask,
                            const int64_t *qPos, const int64_t *kPos,
                            const DeviceTensor *out,
                            const DeviceTensor *savedLse, float scale,
                            bool causal, const DeviceTensor &dq,
                            const DeviceTensor &dk, const DeviceTensor &dv) {
  constexpr int kTile = 64;
  size_t queriesShared = attentionGradMmaShared(kDim, 0);
  size_t keysShared = attentionGradMmaShared(kDim, 4 * kTile * sizeof(float));
  static const bool raised = [&] {
    check(ctx,
          cudaFuncSetAttribute(attentionGradQueriesMmaKernel<T, kDim>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(queriesShared)),
          "cudaFuncSetAttribute");
    check(ctx,
          cudaFuncSetAttribute(attentionGradKeysMmaKernel<T, kDim>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(keysShared)),
          "cudaFuncSetAttribute");
    return true;
  }();
  (void)raised;
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2];
  int64_t kvHeads = k.shape[1], kvSeq = k.shape[2];
  size_t rows = size_t(batch * heads * seq);
  // Each query row's D (and, without the forward's, its log-sum-exp and
  // the output they come from: the forward is run again).
  float *stats = nullptr;
  void *outBuffer = nullptr;
  check(ctx,
        cudaMallocAsync(reinterpret_cast<void **>(&stats),
                        std::max<size_t>(2 * rows, 1) * sizeof(float),
                        ctx.compute),
        "cudaMallocAsync");
  const float *lse = stats + rows;
  const void *outData = out ? out->data : nullptr;
  if (!savedLse) {
    check(ctx,
          cudaMallocAsync(&outBuffer,
                          std::max<size_t>(rows * kDim, 1) * sizeof(T),
                          ctx.compute),
          "cudaMallocAsync");
    BlockView block;
    block.qPos = qPos;
    block.kPos = kPos;
    block.lse = stats + rows;
    launchAttentionMma<T, kDim>(ctx, q, k, v, mask, scale, causal, block,
                                DeviceTensor{outBuffer, q.dtype, q.shape});
    outData = outBuffer;
  } else {
    lse = static_cast<const float *>(savedLse->data);
  }
  if (rows > 0) {
    attentionDeltaKernel<T><<<unsigned((rows + 3) / 4), 128, 0, ctx.compute>>>(
        int64_t(rows), kDim, static_cast<const T *>(dout.data),
        static_cast<const T *>(outData), stats);
    checkLaunch(ctx);
  }
  if (seq > 0) {
    dim3 grid(unsigned((seq + kTile - 1) / kTile), unsigned(batch * heads));
    attentionGradQueriesMmaKernel<T, kDim>
        <<<grid, 128, queriesShared, ctx.compute>>>(
            heads, kvHeads, seq, kvSeq, scale, causal, mask, qPos, kPos,
            static_cast<const T *>(q.data), static_cast<const T *>(k.data),
            static_cast<const T *>(v.data), static_cast<const T *>(dout.data),
            lse, stats, static_cast<T *>(dq.data));
    checkLaunch(ctx);
  }
  if (kvSeq > 0) {
    dim3 grid(unsigned((kvSeq + kTile - 1) / kTile), unsigned(batch * kvHeads));
    attentionGradKeysMmaKernel<T, kDim><<<grid, 128, keysShared, ctx.compute>>>(
        heads, kvHeads, seq, kvSeq, scale, causal, mask, qPos, kPos,
        static_cast<const T *>(q.data), static_cast<const T *>(k.data),
        static_cast<const T *>(v.data), static_cast<const T *>(dout.data), lse,
        stats, static_cast<T *>(dk.data), static_cast<T *>(dv.data));
    checkLaunch(ctx);
  }
  if (outBuffer)
    check(ctx, cudaFreeAsync(outBuffer, ctx.compute), "cudaFreeAsync");
  check(ctx, cudaFreeAsync(stats, ctx.compute), "cudaFreeAsync");
}

// ---- Type dispatch for float kernels ------------------------------------

template <typename F>
void withFloatType(const Context &ctx, DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32:
    f(static_cast<float *>(nullptr));
    return;
  case DType::BF16:
    f(static_cast<__nv_bfloat16 *>(nullptr));
    return;
  case DType::F16:
    f(static_cast<__half *>(nullptr));
    return;
  default:
    fail(ctx, std::string("expected a float tensor, got ") + dtypeName(dtype));
  }
}

cudaDataType_t blasType(const Context &ctx, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    fail(ctx, std::string("GEMMs take float tensors, not ") + dtypeName(dtype));
  }
}

void checkBlas(const Context &ctx, cublasStatus_t status, const char *call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(ctx, std::string(call) + ": " + cublasLtGetStatusString(status));
}

/// D (column-major m x n) = op(A) (m x k) * op(B) (k x n), `batch` times,
/// through cuBLASLt with f32 accumulation and an optional epilogue.
void gemm(Context &ctx, DType dtype, bool transA, bool transB, int64_t m,
          int64_t n, int64_t k, const void *a, int64_t lda, int64_t strideA,
          const void *b, int64_t ldb, int64_t strideB, void *d, int64_t ldd,
          int64_t strideD, int64_t batch, Epilogue epilogue,
          const void *bias) {
  auto handle = static_cast<cublasLtHandle_t>(ctx.blasLt);
  cudaDataType_t type = blasType(ctx, dtype);
  cublasLtMatmulDesc_t desc = nullptr;
  checkBlas(ctx, cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            "cublasLtMatmulDescCreate");
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                 sizeof(opA));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                 sizeof(opB));
  cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
  switch (epilogue) {
  case Epilogue::Bias:
    e = CUBLASLT_EPILOGUE_BIAS;
    break;
  case Epilogue::GeluBias:
    e = CUBLASLT_EPILOGUE_GELU_BIAS;
    break;
  case Epilogue::Gelu:
    e = CUBLASLT_EPILOGUE_GELU;
    break;
  case Epilogue::None:
    break;
  }
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e,
                                 sizeof(e));
  if (bias)
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                   &bias, sizeof(bias));
  auto layout = [&](int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    checkBlas(ctx,
              cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows),
                                         uint64_t(cols), ld),
              "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
      int32_t count = int32_t(batch);
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                       &count, sizeof(count));
      cublasLtMatrixLayoutSetAttribute(
          l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
          sizeof(stride));
    }
    return l;
  };
  cublasLtMatrixLayout_t la = transA ? layout(k, m, lda, strideA)
                                     : layout(m, k, lda, strideA);
  cublasLtMatrixLayout_t lb = transB ? layout(n, k, ldb, strideB)
                                     : layout(k, n, ldb, strideB);
  cublasLtMatrixLayout_t ld = layout(m, n, ldd, strideD);
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulPreferenceCreate(&preference);
  uint64_t workspace = ctx.blasWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
      sizeof(workspace));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, desc, la, lb, ld, ld, preference, 1, &heuristic, &found);
  float alpha = 1.0f, beta = 0.0f;
  if (status == CUBLAS_STATUS_SUCCESS && found == 0)
    status = CUBLAS_STATUS_NOT_SUPPORTED;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmul(handle, desc, &alpha, a, la, b, lb, &beta, d, ld,
                            d, ld, &heuristic.algo, ctx.blasWorkspace,
                            ctx.blasWorkspaceBytes, ctx.compute);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  checkBlas(ctx, status, "cublasLtMatmul");
}

} // namespace

// ---- The kernels' entry points -------------------------------------------

void cuda::linear(Context &ctx, const DeviceTensor &x, const DeviceTensor &w,
                  const DeviceTensor *bias, bool transposeWeight,
                  Epilogue epilogue, const DeviceTensor &out) {
  int64_t kDim = x.shape.back();
  int64_t nDim = transposeWeight ? w.shape[0] : w.shape[1];
  int64_t mDim = x.numel() / kDim;
  // Row-major out[M, N] = x[M, K] w[K, N] is column-major
  // out^T[N, M] = w^T[N, K] x^T[K, M]: cuBLASLt's A is w, its B is x.
  gemm(ctx, out.dtype, transposeWeight, false, nDim, mDim, kDim, w.data,
       transposeWeight ? kDim : nDim, 0, x.data, kDim, 0, out.data, nDim, 0, 1,
       bias ? epilogue : (epilogue == Epilogue::GeluBias ? Epilogue::Gelu
                                                           : epilogue),
       bias ? bias->data : nullptr);
}

void cuda::matmul(Context &ctx, const DeviceTensor &a, const DeviceTensor &b,
                  bool transposeA, bool transposeB, const DeviceTensor &out) {
  size_t ra = a.shape.size(), rb = b.shape.size();
  int64_t mDim = out.shape[out.shape.size() - 2];
  int64_t nDim = out.shape.back();
  int64_t kDim = transposeA ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t batch = out.numel() / (mDim * nDim);
  int64_t strideA = ra > 2 ? mDim * kDim : 0;
  int64_t strideB = rb > 2 ? kDim * nDim : 0;
  // Column-major out^T = op(b)^T op(a)^T, as in linear.
  gemm(ctx, out.dtype, transposeB, transposeA, nDim, mDim, kDim, b.data,
       transposeB ? kDim : nDim, strideB, a.data, transposeA ? mDim : kDim,
       strideA, out.data, nDim, mDim * nDim, batch, Epilogue::None, nullptr);
}

/// The kernel's view of an attention mask broadcast over [B, H, S, Sk].
static MaskView maskView(Context &ctx, const DeviceTensor *mask, float softcap,
                         int64_t window, const DeviceTensor *alibi = nullptr,
                         const int64_t *qPos = nullptr,
                         const int64_t *kPos = nullptr) {
  MaskView view{};
  view.softcap = softcap;
  view.window = window;
  if (alibi) {
    view.alibi = alibi->data;
    switch (alibi->dtype) {
    case DType::F32:
      view.alibiKind = 2;
      break;
    case DType::BF16:
      view.alibiKind = 3;
      break;
    case DType::F16:
      view.alibiKind = 4;
      break;
    default:
      fail(ctx, "ALiBi's slopes must be float");
    }
    view.qPos = qPos;
    view.kPos = kPos;
  }
  if (mask) {
    // Broadcast the mask's dimensions (aligned right) over [B, H, S, Sk].
    Strides strides = contiguous(mask->shape);
    size_t rank = mask->shape.size();
    for (size_t d = 0; d < 4; ++d) {
      int64_t md = int64_t(d) - int64_t(4 - rank);
      view.stride[d] =
          md >= 0 && mask->shape[size_t(md)] != 1 ? strides.stride[md] : 0;
    }
    view.data = mask->data;
    switch (mask->dtype) {
    case DType::Bool:
      view.kind = 1;
      break;
    case DType::F32:
      view.kind = 2;
      break;
    case DType::BF16:
      view.kind = 3;
      break;
    case DType::F16:
      view.kind = 4;
      break;
    default:
      fail(ctx, "an attention mask must be boolean or float");
    }
  }
  return view;
}

/// The kernel's view of a ring step's positions (none: both null).
static BlockView positionsView(Context &ctx, const DeviceTensor *qPositions,
                               const DeviceTensor *kPositions) {
  BlockView view;
  if (qPositions) {
    if (qPositions->dtype != DType::I64 || kPositions->dtype != DType::I64)
      fail(ctx, "attention positions must be i64 on CUDA");
    view.qPos = static_cast<const int64_t *>(qPositions->data);
    view.kPos = static_cast<const int64_t *>(kPositions->data);
  }
  return view;
}

/// Zeros `t` (a gradient with nothing summed into it).
static void zero(Context &ctx, const DeviceTensor &t) {
  if (t.bytes() > 0)
    check(ctx, cudaMemsetAsync(t.data, 0, size_t(t.bytes()), ctx.compute),
          "cudaMemsetAsync");
}

void cuda::attention(Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
                     const DeviceTensor &v, const DeviceTensor *mask,
                     float scale, bool causal, const DeviceTensor &out,
                     float softcap, int64_t window, const DeviceTensor *alibi) {
  // No query rows (or batch, or heads): nothing to write, and a grid of 0
  // blocks would be a launch error.
  if (q.numel() == 0)
    return;
  MaskView view = maskView(ctx, mask, softcap, window, alibi);
  withFloatType(ctx, q.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    dispatchAttention<T>(ctx, q, k, v, view, scale, causal, BlockView{}, out);
  });
}

void cuda::attentionBlock(Context &ctx, const DeviceTensor &q,
                          const DeviceTensor &k, const DeviceTensor &v,
                          const DeviceTensor *mask,
                          const DeviceTensor *qPositions,
                          const DeviceTensor *kPositions, float scale,
                          bool causal, const DeviceTensor &out,
                          const DeviceTensor &lse, float softcap,
                          int64_t window, const DeviceTensor *alibi) {
  if (q.numel() == 0)
    return;
  BlockView block = positionsView(ctx, qPositions, kPositions);
  MaskView view =
      maskView(ctx, mask, softcap, window, alibi, block.qPos, block.kPos);
  if (lse.dtype != DType::F32)
    fail(ctx, "an attention block's log-sum-exp is f32");
  block.lse = static_cast<float *>(lse.data);
  withFloatType(ctx, q.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    dispatchAttention<T>(ctx, q, k, v, view, scale, causal, block, out);
  });
}

void cuda::attentionGrad(
    Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
    const DeviceTensor &v, const DeviceTensor &dout, const DeviceTensor *mask,
    const DeviceTensor *qPositions, const DeviceTensor *kPositions,
    const DeviceTensor *out, const DeviceTensor *lse, float scale, bool causal,
    const DeviceTensor &dq, const DeviceTensor &dk, const DeviceTensor &dv,
    float softcap, int64_t window, const DeviceTensor *alibi) {
  BlockView positions = positionsView(ctx, qPositions, kPositions);
  MaskView view = maskView(ctx, mask, softcap, window, alibi, positions.qPos,
                           positions.kPos);
  const int64_t *qPos = positions.qPos, *kPos = positions.kPos;
  if (bool(out) != bool(lse) || (lse && lse->dtype != DType::F32) ||
      (out && out->dtype != dout.dtype))
    fail(ctx, "an attention gradient's saved output has the output's type and "
              "its log-sum-exp is f32, both given or neither");
  if (q.shape[0] * q.shape[1] > 65535)
    fail(ctx, "attention over more than 65535 (batch x heads) pairs is not "
              "supported on CUDA; split the batch");
  // No query rows or no keys: the other side's gradients sum nothing (and
  // a grid of 0 blocks would be a launch error).
  if (q.numel() == 0 || k.numel() == 0) {
    zero(ctx, dq);
    zero(ctx, dk);
    zero(ctx, dv);
    return;
  }
  int64_t dim = std::max(q.shape[3], v.shape[3]);
  withFloatType(ctx, q.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    // 16-bit heads of 64 or 128: FlashAttention-2's backward on the tensor
    // cores, where the device gives a block its shared memory (heads of 128
    // need 103 KiB: not on sm_86/sm_89 parts). f32, other widths and those
    // take the CUDA-core kernels below.
    if constexpr (!std::is_same<T, float>::value) {
      bool aligned = true;
      for (const DeviceTensor *t : {&dq, &dk, &dv, out})
        if (t && reinterpret_cast<uintptr_t>(t->data) % 16)
          aligned = false;
      if (aligned && !(view.softcap > 0) && view.window == 0 && !view.alibi &&
          tensorCoreAttention<T>(ctx, q, k, v, dout) &&
          attentionGradMmaShared(dim, 4 * 64 * sizeof(float)) <=
              sharedMemoryOptIn(ctx)) {
        if (dim == 64)
          launchAttentionGradMma<T, 64>(ctx, q, k, v, dout, view, qPos, kPos,
                                        out, lse, scale, causal, dq, dk, dv);
        else
          launchAttentionGradMma<T, 128>(ctx, q, k, v, dout, view, qPos, kPos,
                                         out, lse, scale, causal, dq, dk, dv);
        return;
      }
    }
    if (dim <= 64)
      launchAttentionGrad<T, 64>(ctx, q, k, v, dout, view, qPos, kPos, out, lse,
                                 scale, causal, dq, dk, dv);
    else if (dim <= 128)
      launchAttentionGrad<T, 128>(ctx, q, k, v, dout, view, qPos, kPos, out,
                                  lse, scale, causal, dq, dk, dv);
    else if (dim <= 256)
      launchAttentionGrad<T, 256>(ctx, q, k, v, dout, view, qPos, kPos, out,
                                  lse, scale, causal, dq, dk, dv);
    else
      fail(ctx, "attention heads wider than 256 are not supported on CUDA");
  });
}

void cuda::normalize(Context &ctx, const DeviceTensor &x,
                     const DeviceTensor &scale, const DeviceTensor *bias,
                     int64_t axis, float epsilon, bool rms,
                     const DeviceTensor &out) {
  int64_t length = 1;
  for (size_t d = size_t(axis); d < x.shape.size(); ++d)
    length *= x.shape[d];
  int64_t rows = x.numel() / length;
  if (scale.dtype != x.dtype || (bias && bias->dtype != x.dtype))
    fail(ctx, "a norm's scale and bias must have the input's type");
  withFloatType(ctx, x.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    normalizeKernel<<<unsigned(rows), kThreads, 0, ctx.compute>>>(
        length, epsilon, rms, static_cast<const T *>(x.data),
        static_cast<const T *>(scale.data),
        bias ? static_cast<const T *>(bias->data) : nullptr,
        static_cast<T *>(out.data));
  });
  checkLaunch(ctx);
}

void cuda::softmax(Context &ctx, const DeviceTensor &x, int64_t axis, bool log,
                   float scale, bool causal, const DeviceTensor &out) {
  int64_t length = x.shape[size_t(axis)], inner = 1;
  for (size_t d = size_t(axis) + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  int64_t rows = x.numel() / length;
  int64_t positions =
      causal && x.shape.size() >= 2 ? x.shape[x.shape.size() - 2] : 0;
  withFloatType(ctx, x.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    softmaxKernel<<<unsigned(rows), kThreads, 0, ctx.compute>>>(
        length, inner, log, scale, positions, static_cast<const T *>(x.data),
        static_cast<T *>(out.data));
  });
  checkLaunch(ctx);
}

void cuda::reduce(Context &ctx, ReduceKind kind, const DeviceTensor &x,
                  const std::vector<int64_t> &axes, const DeviceTensor &out) {
  checkRank(ctx, x.shape);
  Strides strides = contiguous(x.shape);
  Shape keptShape, reducedShape;
  Strides keptStrides{}, reducedStrides{};
  for (size_t d = 0; d < x.shape.size(); ++d) {
    bool reduced = false;
    for (int64_t a : axes)
      reduced |= a == int64_t(d);
    if (reduced) {
      reducedStrides.stride[reducedShape.size()] = strides.stride[d];
      reducedShape.push_back(x.shape[d]);
    } else {
      keptStrides.stride[keptShape.size()] = strides.stride[d];
      keptShape.push_back(x.shape[d]);
    }
  }
  int64_t n = numElements(keptShape);
  // Reduced dimensions that are the last ones, and long rows: a block a row.
  // (The axes are distinct: k of them at or past rank - k are the last k.)
  const int64_t rank = int64_t(x.shape.size());
  bool trailing = !axes.empty();
  for (int64_t a : axes)
    trailing &= a >= rank - int64_t(axes.size());
  int64_t length = numElements(reducedShape);
  if (trailing && length >= 1024) {
    withFloatType(ctx, x.dtype, [&](auto *type) {
      using T = std::remove_pointer_t<decltype(type)>;
      rowReduceKernel<<<unsigned(n), kThreads, 0, ctx.compute>>>(
          length, int(kind), static_cast<const T *>(x.data),
          static_cast<T *>(out.data));
    });
    checkLaunch(ctx);
    return;
  }
  withFloatType(ctx, x.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    reduceKernel<<<blocksFor(n), kThreads, 0, ctx.compute>>>(
        n, dimsOf(keptShape), keptStrides, dimsOf(reducedShape),
        reducedStrides, numElements(reducedShape), int(kind),
        static_cast<const T *>(x.data), static_cast<T *>(out.data));
  });
  checkLaunch(ctx);
}

void cuda::transpose(Context &ctx, const DeviceTensor &x,
                     const std::vector<int64_t> &perm,
                     const DeviceTensor &out) {
  Strides in = contiguous(x.shape), from{};
  for (size_t d = 0; d < perm.size(); ++d)
    from.stride[d] = in.stride[perm[d]];
  copyStrided(ctx, x.dtype, out.shape, from, 0, x.data, contiguous(out.shape),
              0, out.data);
}

void cuda::slice(Context &ctx, const DeviceTensor &x,
                 const std::vector<int64_t> &starts,
                 const std::vector<int64_t> &strides,
                 const DeviceTensor &out) {
  Strides in = contiguous(x.shape), from{};
  int64_t base = 0;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    from.stride[d] = in.stride[d] * strides[d];
    base += starts[d] * in.stride[d];
  }
  copyStrided(ctx, x.dtype, out.shape, from, base, x.data,
              contiguous(out.shape), 0, out.data);
}

void cuda::insert(Context &ctx, const DeviceTensor &x, int64_t axis,
                  int64_t offset, const DeviceTensor &out) {
  Strides to = contiguous(out.shape);
  copyStrided(ctx, x.dtype, x.shape, contiguous(x.shape), 0, x.data, to,
              offset * to.stride[axis], out.data);
}

void cuda::gather(Context &ctx, const DeviceTensor &x,
                  const DeviceTensor &indices, int64_t axis,
                  const DeviceTensor &out) {
  int64_t inner = 1;
  for (size_t d = size_t(axis) + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  int64_t n = out.numel();
  if (n == 0)
    return;
  int *bad = nullptr;
  check(ctx, cudaMallocAsync(reinterpret_cast<void **>(&bad), sizeof(int),
                             ctx.compute),
        "cudaMallocAsync");
  check(ctx, cudaMemsetAsync(bad, 0, sizeof(int), ctx.compute),
        "cudaMemsetAsync");
  int64_t axisSize = x.shape[size_t(axis)], count = indices.numel();
  switch (dtypeBytes(x.dtype)) {
  case 1:
    launchGather<uint8_t>(ctx, n, axisSize, count, inner, x.data, indices,
                          out.data, bad);
    break;
  case 2:
    launchGather<uint16_t>(ctx, n, axisSize, count, inner, x.data, indices,
                           out.data, bad);
    break;
  case 4:
    launchGather<uint32_t>(ctx, n, axisSize, count, inner, x.data, indices,
                           out.data, bad);
    break;
  default:
    launchGather<uint64_t>(ctx, n, axisSize, count, inner, x.data, indices,
                           out.data, bad);
    break;
  }
  checkLaunch(ctx);
  int flag = 0;
  check(ctx, cudaMemcpyAsync(&flag, bad, sizeof(int), cudaMemcpyDeviceToHost,
                             ctx.compute),
        "cudaMemcpyAsync");
  check(ctx, cudaFreeAsync(bad, ctx.compute), "cudaFreeAsync");
  check(ctx, cudaStreamSynchronize(ctx.compute), "cudaStreamSynchronize");
  if (flag)
    fail(ctx, "an index is out of range for a dimension of " +
                  std::to_string(axisSize));
}

void cuda::crossEntropy(Context &ctx, const DeviceTensor &logits,
                        const DeviceTensor &labels, LossReduction reduction,
                        std::optional<int64_t> ignoreIndex,
                        const DeviceTensor &out) {
  int64_t classes = logits.shape.back(), rows = labels.numel();
  if (labels.dtype != DType::I64)
    fail(ctx, "cross-entropy labels must be i64");
  if (rows == 0)
    return;
  // Per-row losses and counts, then the flag of a bad label.
  float *work = nullptr;
  check(ctx,
        cudaMallocAsync(reinterpret_cast<void **>(&work),
                        size_t(2 * rows) * sizeof(float) + sizeof(int),
                        ctx.compute),
        "cudaMallocAsync");
  float *losses = work, *counted = work + rows;
  int *bad = reinterpret_cast<int *>(work + 2 * rows);
  check(ctx, cudaMemsetAsync(bad, 0, sizeof(int), ctx.compute),
        "cudaMemsetAsync");
  int kind = reduction == LossReduction::None   ? 0
             : reduction == LossReduction::Mean ? 1
                                                : 2;
  withFloatType(ctx, logits.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    crossEntropyKernel<<<unsigned(rows), kThreads, 0, ctx.compute>>>(
        classes, static_cast<const T *>(logits.data),
        static_cast<const int64_t *>(labels.data), ignoreIndex.has_value(),
        ignoreIndex.value_or(0), losses, counted, bad);
    lossReductionKernel<<<1, kThreads, 0, ctx.compute>>>(
        rows, kind, losses, counted, static_cast<T *>(out.data));
  });
  checkLaunch(ctx);
  int flag = 0;
  check(ctx,
        cudaMemcpyAsync(&flag, bad, sizeof(int), cudaMemcpyDeviceToHost,
                        ctx.compute),
        "cudaMemcpyAsync");
  check(ctx, cudaFreeAsync(work, ctx.compute), "cudaFreeAsync");
  check(ctx, cudaStreamSynchronize(ctx.compute), "cudaStreamSynchronize");
  if (flag)
    fail(ctx, "a cross-entropy label is not a class in [0, " +
                  std::to_string(classes) + ")");
}

void cuda::trilu(Context &ctx, const DeviceTensor &x, bool upper,
                 int64_t diagonal, const DeviceTensor &out) {
  int64_t n = x.numel();
  int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
  withFloatType(ctx, x.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    triluKernel<<<blocksFor(n), kThreads, 0, ctx.compute>>>(
        n, rows, cols, upper, diagonal, static_cast<const T *>(x.data),
        static_cast<T *>(out.data));
  });
  checkLaunch(ctx);
}

void cuda::cumsum(Context &ctx, const DeviceTensor &x, int64_t axis,
                  bool exclusive, bool reverse, const DeviceTensor &out) {
  int64_t length = x.shape[axis], inner = 1;
  for (size_t d = axis + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  int64_t lines = length ? x.numel() / length : 0;
  if (!lines)
    return;
  auto launch = [&](auto *type, auto acc) {
    using T = std::remove_pointer_t<decltype(type)>;
    cumsumKernel<T, decltype(acc)>
        <<<blocksFor(lines), kThreads, 0, ctx.compute>>>(
            lines, length, inner, exclusive, reverse,
            static_cast<const T *>(x.data), static_cast<T *>(out.data));
  };
  switch (x.dtype) {
  case DType::I64:
    launch(static_cast<int64_t *>(nullptr), int64_t(0));
    break;
  case DType::I32:
    launch(static_cast<int32_t *>(nullptr), int64_t(0));
    break;
  default:
    withFloatType(ctx, x.dtype, [&](auto *type) { launch(type, 0.0f); });
  }
  checkLaunch(ctx);
}

void cuda::allSlice(Context &ctx, const DeviceTensor &x,
                    const std::vector<std::string> &axes, int64_t dim,
                    bool zigzag, const DeviceTensor &out) {
  int64_t parts = 1;
  for (const std::string &axis : axes)
    parts *= ctx.mesh.axisSize(axis);
  int64_t index = ctx.mesh.indexIn(ctx.rank, axes);
  std::vector<int64_t> starts(x.shape.size(), 0), steps(x.shape.size(), 1);
  if (!zigzag) {
    starts[size_t(dim)] = index * (x.shape[size_t(dim)] / parts);
    slice(ctx, x, starts, steps, out);
    return;
  }
  // The load-balanced layout: chunks i and 2 major - 1 - i of the first
  // axis, split among the other axes (as rt::zigzagSlice).
  int64_t major = ctx.mesh.axisSize(axes.front()), minor = parts / major;
  int64_t i1 = index / minor, i2 = index % minor;
  int64_t chunk = x.shape[size_t(dim)] / (2 * major);
  int64_t piece = 2 * chunk / minor;
  Shape half = out.shape;
  // Each rank's block is piece rows from the pair [chunk i1, chunk 2m-1-i1].
  for (int64_t row = 0; row < piece;) {
    int64_t inPair = i2 * piece + row;
    int64_t source = inPair < chunk ? i1 * chunk + inPair
                                    : (2 * major - 1 - i1) * chunk +
                                          (inPair - chunk);
    int64_t run = inPair < chunk ? std::min(piece - row, chunk - inPair)
                                 : piece - row;
    half[size_t(dim)] = run;
    starts[size_t(dim)] = source;
    Strides in = contiguous(x.shape), from{};
    int64_t base = 0;
    for (size_t d = 0; d < x.shape.size(); ++d) {
      from.stride[d] = in.stride[d];
      base += starts[d] * in.stride[d];
    }
    Strides to = contiguous(out.shape);
    copyStrided(ctx, x.dtype, half, from, base, x.data, to,
                row * to.stride[dim], out.data);
    row += run;
  }
}

// ---- Collectives -----------------------------------------------------------
//
// The communicator moves blocks along dimension 0; a collective along
// another dimension rearranges on the communication stream around it, so
// the compute stream only waits where the result is used.

namespace {

/// Moves dimension `from` of a tensor of `shape` to position `to`, on the
/// communication stream.
void moveDim(Context &ctx, DType dtype, const Shape &shape, size_t from,
             size_t to, const void *src, void *dst) {
  std::vector<int64_t> perm;
  for (size_t d = 0; d < shape.size(); ++d)
    if (d != from)
      perm.push_back(int64_t(d));
  perm.insert(perm.begin() + to, int64_t(from));
  Strides in = contiguous(shape), strides{};
  Shape out;
  for (size_t d = 0; d < perm.size(); ++d) {
    strides.stride[d] = in.stride[perm[d]];
    out.push_back(shape[size_t(perm[d])]);
  }
  copyStrided(ctx, dtype, out, strides, 0, src, contiguous(out), 0, dst,
              ctx.comm);
}

void *scratch(Context &ctx, int64_t bytes) {
  void *p = nullptr;
  check(ctx, cudaMallocAsync(&p, size_t(std::max<int64_t>(bytes, 1)), ctx.comm),
        "cudaMallocAsync");
  return p;
}

/// The communication stream waits for the compute stream's work so far.
void startCollective(Context &ctx) {
  if (!ctx.communicator)
    fail(ctx, "no communicator");
  cudaEvent_t ready;
  check(ctx, cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
        "cudaEventCreate");
  check(ctx, cudaEventRecord(ready, ctx.compute), "cudaEventRecord");
  check(ctx, cudaStreamWaitEvent(ctx.comm, ready, 0), "cudaStreamWaitEvent");
  check(ctx, cudaEventDestroy(ready), "cudaEventDestroy");
}

cudaEvent_t endCollective(Context &ctx) {
  cudaEvent_t done;
  check(ctx, cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
        "cudaEventCreate");
  check(ctx, cudaEventRecord(done, ctx.comm), "cudaEventRecord");
  return done;
}

/// [A, d, B] split in n along d, as n blocks [n, A, d/n, B] (or back).
Shape blocked(const Shape &shape, int64_t dim, int64_t n) {
  Shape out = shape;
  out[size_t(dim)] /= n;
  out.insert(out.begin(), n);
  return out;
}

// ---- Compressed collectives ----------------------------------------------
//
// Under a codec a collective moves encoded segments (CodecElements.h) through
// the communicator's byte-moving primitives, as i32 words: a segment is a
// run of `count` elements (a rank's tensor, or one destination's block).
// Encoding and decoding run on the communication stream; every element
// function is the CPU runtime's (rt::roundTrip), so blocks of 128 that line
// up with the CPU's (the whole tensor for all-gather, permute and
// all-reduce; block-aligned blocks along dimension 0 for all-to-all and
// reduce-scatter) decode to the CPU's values.

/// Segments of `count` elements under `codec`, `bytes` each.
struct Wire {
  Codec codec;
  int64_t count;
  int64_t bytes;
};

Wire wireFor(const Context &ctx, Codec codec, int64_t count) {
  if (codec != Codec::BF16 && codec != Codec::FP8 && codec != Codec::Int8)
    fail(ctx, std::string("the ") + codecName(codec) +
                  " codec runs on the CPU targets only (top-k sums sparse "
                  "gradients there)");
  bool blockScales = codec != Codec::BF16;
  return Wire{codec, count,
              codec::segmentBytes(count, blockScales ? 1 : 2, blockScales)};
}

/// `segments` segments as the communicator's unit: i32 words, one row each.
DeviceTensor words(void *data, const Wire &wire, int64_t segments) {
  return DeviceTensor{data, DType::I32, {segments, wire.bytes / 4}};
}

/// The larger of two magnitudes; a NaN wins (its block is not scaled).
__device__ inline float nanMax(float a, float b) {
  return a > b || a != a ? a : b;
}

/// Segment blockIdx.y holds elements [y count, (y + 1) count) of `x` (zeros
/// past `total`); one thread per element, one thread block per codec block.
template <typename T>
__global__ void __launch_bounds__(codec::kBlock)
    encodeKernel(const T *x, int64_t total, Wire wire, char *out) {
  int64_t i = int64_t(blockIdx.x) * codec::kBlock + threadIdx.x;
  int64_t global = int64_t(blockIdx.y) * wire.count + i;
  float v = i < wire.count && global < total ? loadF(x, global) : 0.0f;
  char *segment = out + int64_t(blockIdx.y) * wire.bytes;
  if (wire.codec == Codec::BF16) {
    if (i < wire.count)
      reinterpret_cast<__nv_bfloat16 *>(segment)[i] = __float2bfloat16_rn(v);
    return;
  }
  __shared__ float amax[codec::kBlock];
  amax[threadIdx.x] = fabsf(v);
  __syncthreads();
  for (unsigned half = codec::kBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      amax[threadIdx.x] = nanMax(amax[threadIdx.x], amax[threadIdx.x + half]);
    __syncthreads();
  }
  float top = wire.codec == Codec::FP8 ? codec::kE4M3Max : codec::kInt8Max;
  float a = amax[0], scale = a / top;
  bool scaled = codec::scaled(a, scale);
  if (i < wire.count) {
    float q = scaled ? v / scale : 0.0f;
    reinterpret_cast<uint8_t *>(segment)[i] =
        wire.codec == Codec::FP8 ? codec::encodeE4M3(q)
                                 : uint8_t(codec::encodeInt8(q));
  }
  // An unscaled block decodes to zeros (scale 0) or, when it held a
  // non-finite value, to NaN, which loss scaling sees.
  if (threadIdx.x == 0)
    reinterpret_cast<float *>(segment +
                              codec::payloadBytes(wire.count, 1))[blockIdx.x] =
        scaled ? scale : (a - a == 0 ? 0.0f : NAN);
}

__device__ inline float decodeAt(const char *segment, const Wire &wire,
                                 int64_t i) {
  if (wire.codec == Codec::BF16)
    return __bfloat162float(
        reinterpret_cast<const __nv_bfloat16 *>(segment)[i]);
  uint8_t bits = reinterpret_cast<const uint8_t *>(segment)[i];
  float q =
      wire.codec == Codec::FP8 ? codec::decodeE4M3(bits) : float(int8_t(bits));
  // Rounded as the CPU's q * scale (never fused into the caller's sum).
  return __fmul_rn(
      q, reinterpret_cast<const float *>(
             segment + codec::payloadBytes(wire.count, 1))[i / codec::kBlock]);
}

/// out[s count + i] = element i of segment s, below `total`.
template <typename T>
__global__ void decodeKernel(const char *in, Wire wire, int64_t total, T *out) {
  for (int64_t at = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; at < total;
       at += int64_t(gridDim.x) * blockDim.x)
    storeF(out, at,
           decodeAt(in + at / wire.count * wire.bytes, wire, at % wire.count));
}

/// `value` as a T holds it.
template <typename T> __device__ inline float roundAs(float value) {
  T stored;
  storeF(&stored, 0, value);
  return loadF(&stored, 0);
}

/// out[i] = element i of every segment, reduced in group (segment) order as
/// the CPU communicator reduces (each partial result rounded to T).
template <typename T>
__global__ void decodeReduceKernel(const char *in, Wire wire, int64_t segments,
                                   ReduceOp op, T *out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < wire.count; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = roundAs<T>(decodeAt(in, wire, i));
    for (int64_t s = 1; s < segments; ++s) {
      float v = roundAs<T>(decodeAt(in + s * wire.bytes, wire, i));
      acc = roundAs<T>(op == ReduceOp::Max   ? (v > acc ? v : acc)
                       : op == ReduceOp::Min ? (v < acc ? v : acc)
                                             : __fadd_rn(acc, v));
    }
    if (op == ReduceOp::Avg)
      acc = acc / float(segments);
    storeF(out, i, acc);
  }
}

/// Encodes `x` as `segments` segments of `wire.count` elements (zeros past
/// its end) into `out`.
void encode(Context &ctx, const DeviceTensor &x, const Wire &wire,
            int64_t segments, void *out) {
  if (wire.count == 0 || segments == 0)
    return;
  dim3 grid(unsigned((wire.count + codec::kBlock - 1) / codec::kBlock),
            unsigned(segments));
  withFloatType(ctx, x.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    encodeKernel<T><<<grid, unsigned(codec::kBlock), 0, ctx.comm>>>(
        static_cast<const T *>(x.data), x.numel(), wire,
        static_cast<char *>(out));
  });
  checkLaunch(ctx);
}

/// Decodes consecutive segments into `out` (its elements in order).
void decode(Context &ctx, const void *in, const Wire &wire,
            const DeviceTensor &out) {
  if (out.numel() == 0)
    return;
  withFloatType(ctx, out.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    decodeKernel<T><<<blocksFor(out.numel()), kThreads, 0, ctx.comm>>>(
        static_cast<const char *>(in), wire, out.numel(),
        static_cast<T *>(out.data));
  });
  checkLaunch(ctx);
}

/// Decodes `segments` segments and reduces them elementwise into `out`
/// (`wire.count` elements).
void decodeReduce(Context &ctx, const void *in, const Wire &wire,
                  int64_t segments, ReduceOp op, const DeviceTensor &out) {
  if (wire.count == 0)
    return;
  withFloatType(ctx, out.dtype, [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    decodeReduceKernel<T><<<blocksFor(wire.count), kThreads, 0, ctx.comm>>>(
        static_cast<const char *>(in), wire, segments, op,
        static_cast<T *>(out.data));
  });
  checkLaunch(ctx);
}

bool compressed(Codec codec, const DeviceTensor &x) {
  return codec != Codec::None && isFloat(x.dtype);
}

int64_t indexIn(const Context &ctx, const std::vector<int> &group) {
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] == ctx.rank)
      return int64_t(i);
  fail(ctx, "rank " + std::to_string(ctx.rank) + " is not in its group");
}

/// Every rank's `x` stacked along a new dimension 0 of `stacked`, in group
/// order (encoded on the wire under a codec).
void gatherStacked(Context &ctx, const std::vector<int> &group,
                   const DeviceTensor &x, Codec codec,
                   const DeviceTensor &stacked) {
  if (!compressed(codec, x)) {
    ctx.communicator->allGather0(ctx, group, x, stacked);
    return;
  }
  int64_t n = int64_t(group.size());
  Wire wire = wireFor(ctx, codec, x.numel());
  void *mine = scratch(ctx, wire.bytes), *all = scratch(ctx, n * wire.bytes);
  encode(ctx, x, wire, 1, mine);
  ctx.communicator->allGather0(ctx, group, words(mine, wire, 1),
                               words(all, wire, n));
  decode(ctx, all, wire, stacked);
  check(ctx, cudaFreeAsync(mine, ctx.comm), "cudaFreeAsync");
  check(ctx, cudaFreeAsync(all, ctx.comm), "cudaFreeAsync");
}

/// Block i of `blocks` (elements [i count, (i + 1) count), zeros past its
/// end) to group rank i, encoded; `out` receives block j from group rank j
/// (decoded, in order), or, with `op`, the reduction of the n blocks this
/// rank receives (`count` elements).
void exchangeBlocks(Context &ctx, const std::vector<int> &group,
                    const DeviceTensor &blocks, int64_t count, Codec codec,
                    std::optional<ReduceOp> op, const DeviceTensor &out) {
  int64_t n = int64_t(group.size());
  Wire wire = wireFor(ctx, codec, count);
  void *sent = scratch(ctx, n * wire.bytes),
       *received = scratch(ctx, n * wire.bytes);
  encode(ctx, blocks, wire, n, sent);
  ctx.communicator->allToAll0(ctx, group, words(sent, wire, n),
                              words(received, wire, n));
  if (op)
    decodeReduce(ctx, received, wire, n, *op, out);
  else
    decode(ctx, received, wire, out);
  check(ctx, cudaFreeAsync(sent, ctx.comm), "cudaFreeAsync");
  check(ctx, cudaFreeAsync(received, ctx.comm), "cudaFreeAsync");
}

/// An all-reduce of encoded data: each rank reduces a run of whole codec
/// blocks (the last ranks' runs padded with zeros), encodes its sums again
/// and all-gathers them: 2 (n - 1) segments sent per rank, as a ring.
void compressedAllReduce(Context &ctx, const std::vector<int> &group,
                         const DeviceTensor &x, ReduceOp op, Codec codec,
                         const DeviceTensor &out) {
  int64_t n = int64_t(group.size()), total = x.numel();
  int64_t codecBlocks = (total + codec::kBlock - 1) / codec::kBlock;
  int64_t run = (codecBlocks + n - 1) / n * codec::kBlock;
  Wire wire = wireFor(ctx, codec, run);
  // The sums are held in x's type, as the CPU's (and NCCL's) are.
  void *sums = scratch(ctx, run * dtypeBytes(x.dtype)),
       *mine = scratch(ctx, wire.bytes), *all = scratch(ctx, n * wire.bytes);
  exchangeBlocks(ctx, group, x, run, codec, op,
                 DeviceTensor{sums, x.dtype, {run}});
  int64_t start = indexIn(ctx, group) * run;
  int64_t valid = std::max<int64_t>(0, std::min(run, total - start));
  encode(ctx, DeviceTensor{sums, x.dtype, {valid}}, wire, 1, mine);
  ctx.communicator->allGather0(ctx, group, words(mine, wire, 1),
                               words(all, wire, n));
  decode(ctx, all, wire, DeviceTensor{out.data, out.dtype, {total}});
  for (void *p : {sums, mine, all})
    check(ctx, cudaFreeAsync(p, ctx.comm), "cudaFreeAsync");
}

} // namespace

cudaEvent_t cuda::allReduce(Context &ctx, const DeviceTensor &x, ReduceOp op,
                            const std::vector<std::string> &axes,
                            const DeviceTensor &out, Codec codec) {
  return allReduce(ctx, x, op, axes, {}, out, codec);
}

cudaEvent_t cuda::allReduce(Context &ctx, const DeviceTensor &x, ReduceOp op,
                            const std::vector<std::string> &axes,
                            const std::vector<int64_t> &members,
                            const DeviceTensor &out, Codec codec) {
  startCollective(ctx);
  std::vector<int> group = groupOf(ctx.mesh, ctx.rank, axes, members);
  if (compressed(codec, x))
    compressedAllReduce(ctx, group, x, op, codec, out);
  else
    ctx.communicator->allReduce(ctx, group, x, op, out);
  return endCollective(ctx);
}

/// Moves the group's load-balanced (zigzag) blocks between `stacked`
/// ([n, block], group order) and `whole` (`block` times n along `dim`, in
/// natural order), from the one `fromStacked` names to the other: block
/// r = (i1, i2) is rows [i2 p, (i2 + 1) p) of the pair of chunks i1 and
/// 2 major - 1 - i1, each 2 p / minor... rows (rt::zigzagSlice's).
static void zigzagBlocks(Context &ctx, DType dtype, const Shape &block,
                         int64_t dim, int64_t n, int64_t major,
                         const void *src, void *dst, bool fromStacked) {
  const int64_t minor = n / major, piece = block[size_t(dim)];
  const int64_t chunk = piece * minor / 2;
  Shape wholeShape = block, stackedShape = block;
  wholeShape[size_t(dim)] *= n;
  stackedShape.insert(stackedShape.begin(), n);
  Strides whole = contiguous(wholeShape), stacked = contiguous(stackedShape);
  Strides inBlock{};
  for (size_t d = 0; d < block.size(); ++d)
    inBlock.stride[d] = stacked.stride[d + 1];
  for (int64_t r = 0; r < n; ++r) {
    int64_t i1 = r / minor, i2 = r % minor;
    for (int64_t row = 0; row < piece;) {
      int64_t inPair = i2 * piece + row;
      bool first = inPair < chunk;
      int64_t at = first ? i1 * chunk + inPair
                         : (2 * major - 1 - i1) * chunk + inPair - chunk;
      int64_t run =
          first ? std::min(piece - row, chunk - inPair) : piece - row;
      Shape part = block;
      part[size_t(dim)] = run;
      int64_t wholeBase = at * whole.stride[dim];
      int64_t stackedBase = r * stacked.stride[0] + row * stacked.stride[dim + 1];
      if (fromStacked)
        copyStrided(ctx, dtype, part, inBlock, stackedBase, src, whole,
                    wholeBase, dst, ctx.comm);
      else
        copyStrided(ctx, dtype, part, whole, wholeBase, src, inBlock,
                    stackedBase, dst, ctx.comm);
      row += run;
    }
  }
}

cudaEvent_t cuda::allGather(Context &ctx, const DeviceTensor &x,
                            const std::vector<std::string> &axes, int64_t dim,
                            bool zigzag, const DeviceTensor &out, Codec codec) {
  startCollective(ctx);
  std::vector<int> group = ctx.mesh.group(ctx.rank, axes);
  int64_t n = int64_t(group.size());
  if (dim == 0 && !zigzag) {
    gatherStacked(ctx, group, x, codec, out);
    return endCollective(ctx);
  }
  // Gather [n, x...], then move the group dimension next to `dim` (and, for
  // the load-balanced layout, put the chunks back in their natural order).
  Shape gathered = x.shape;
  gathered.insert(gathered.begin(), n);
  void *blocks = scratch(ctx, out.bytes());
  gatherStacked(ctx, group, x, codec, DeviceTensor{blocks, x.dtype, gathered});
  if (!zigzag) {
    moveDim(ctx, x.dtype, gathered, 0, size_t(dim), blocks, out.data);
  } else {
    // The blocks back to their places in the load-balanced order.
    zigzagBlocks(ctx, x.dtype, x.shape, dim, n,
                 ctx.mesh.axisSize(axes.front()), blocks, out.data,
                 /*fromStacked=*/true);
  }
  check(ctx, cudaFreeAsync(blocks, ctx.comm), "cudaFreeAsync");
  return endCollective(ctx);
}

cudaEvent_t cuda::heldAllGather(Context &ctx, int64_t key, int64_t block,
                                const DeviceTensor &x,
                                const std::vector<std::string> &axes,
                                int64_t dim, bool zigzag,
                                const DeviceTensor &out, Codec codec) {
  if (ctx.microBatch < 0 || block < 1)
    return allGather(ctx, x, axes, dim, zigzag, out, codec);
  const int64_t at = ctx.microBatch / block;
  Context::HeldGather &kept = ctx.held[key];
  if (kept.data && kept.step == ctx.pipelineSteps && kept.block == at &&
      kept.bytes == out.bytes()) {
    startCollective(ctx);
    check(ctx,
          cudaMemcpyAsync(out.data, kept.data.get(), size_t(kept.bytes),
                          cudaMemcpyDeviceToDevice, ctx.comm),
          "cudaMemcpyAsync (a held gather)");
    return endCollective(ctx);
  }
  cudaEvent_t gathered = allGather(ctx, x, axes, dim, zigzag, out, codec);
  check(ctx, cudaEventDestroy(gathered), "cudaEventDestroy");
  if (!kept.data || kept.bytes != out.bytes()) {
    void *data = nullptr;
    check(ctx, cudaMalloc(&data, size_t(std::max<int64_t>(out.bytes(), 1))),
          "cudaMalloc (a held gather)");
    kept.data = std::shared_ptr<void>(data, [](void *p) { cudaFree(p); });
    kept.bytes = out.bytes();
  }
  // After the gather, on its stream.
  check(ctx,
        cudaMemcpyAsync(kept.data.get(), out.data, size_t(kept.bytes),
                        cudaMemcpyDeviceToDevice, ctx.comm),
        "cudaMemcpyAsync (a held gather)");
  kept.step = ctx.pipelineSteps;
  kept.block = at;
  return endCollective(ctx);
}

cudaEvent_t cuda::reduceScatter(Context &ctx, const DeviceTensor &x,
                                ReduceOp op,
                                const std::vector<std::string> &axes,
                                int64_t dim, bool zigzag,
                                const DeviceTensor &out, Codec codec) {
  startCollective(ctx);
  std::vector<int> group = ctx.mesh.group(ctx.rank, axes);
  int64_t n = int64_t(group.size());
  auto scatter0 = [&](const DeviceTensor &blocks) {
    if (compressed(codec, x))
      exchangeBlocks(ctx, group, blocks, out.numel(), codec, op, out);
    else
      ctx.communicator->reduceScatter0(ctx, group, blocks, op, out);
  };
  if (zigzag) {
    // The load-balanced layout: each rank's zigzag block (allSlice's)
    // copied out of x in group order, then reduce-scattered.
    Shape stacked = out.shape;
    stacked.insert(stacked.begin(), n);
    void *blocks = scratch(ctx, x.bytes());
    zigzagBlocks(ctx, x.dtype, out.shape, dim, n,
                 ctx.mesh.axisSize(axes.front()), x.data, blocks,
                 /*fromStacked=*/false);
    scatter0(DeviceTensor{blocks, x.dtype, stacked});
    check(ctx, cudaFreeAsync(blocks, ctx.comm), "cudaFreeAsync");
    return endCollective(ctx);
  }
  if (dim == 0) {
    scatter0(x);
    return endCollective(ctx);
  }
  // [A, n d, B] as [A, n, d, B], the n blocks moved to the front.
  Shape split = x.shape;
  split[size_t(dim)] /= n;
  split.insert(split.begin() + dim, n);
  void *blocks = scratch(ctx, x.bytes());
  moveDim(ctx, x.dtype, split, size_t(dim), 0, x.data, blocks);
  scatter0(DeviceTensor{blocks, x.dtype, blocked(x.shape, dim, n)});
  check(ctx, cudaFreeAsync(blocks, ctx.comm), "cudaFreeAsync");
  return endCollective(ctx);
}

cudaEvent_t cuda::allToAll(Context &ctx, const DeviceTensor &x,
                           const std::vector<std::string> &axes,
                           int64_t splitDim, int64_t concatDim,
                           const DeviceTensor &out, Codec codec) {
  startCollective(ctx);
  std::vector<int> group = ctx.mesh.group(ctx.rank, axes);
  int64_t n = int64_t(group.size());
  // Send blocks: x split along splitDim, moved to the front.
  Shape split = x.shape;
  split[size_t(splitDim)] /= n;
  split.insert(split.begin() + splitDim, n);
  void *sendBlocks = scratch(ctx, x.bytes());
  moveDim(ctx, x.dtype, split, size_t(splitDim), 0, x.data, sendBlocks);
  Shape piece = x.shape;
  piece[size_t(splitDim)] /= n;
  Shape received = piece;
  received.insert(received.begin(), n);
  void *receiveBlocks = scratch(ctx, out.bytes());
  if (compressed(codec, x))
    exchangeBlocks(ctx, group, DeviceTensor{sendBlocks, x.dtype, received},
                   numElements(piece), codec, std::nullopt,
                   DeviceTensor{receiveBlocks, x.dtype, received});
  else
    ctx.communicator->allToAll0(ctx, group,
                                DeviceTensor{sendBlocks, x.dtype, received},
                                DeviceTensor{receiveBlocks, x.dtype, received});
  // Block j (from group rank j) goes to position j along concatDim.
  moveDim(ctx, x.dtype, received, 0, size_t(concatDim), receiveBlocks,
          out.data);
  check(ctx, cudaFreeAsync(sendBlocks, ctx.comm), "cudaFreeAsync");
  check(ctx, cudaFreeAsync(receiveBlocks, ctx.comm), "cudaFreeAsync");
  return endCollective(ctx);
}

cudaEvent_t cuda::permute(Context &ctx, const DeviceTensor &x,
                          const std::vector<std::string> &axes, int64_t shift,
                          const DeviceTensor &out, Codec codec) {
  startCollective(ctx);
  std::vector<int> group = ctx.mesh.group(ctx.rank, axes);
  if (!compressed(codec, x)) {
    ctx.communicator->permute(ctx, group, x, shift, out);
    return endCollective(ctx);
  }
  Wire wire = wireFor(ctx, codec, x.numel());
  void *mine = scratch(ctx, wire.bytes), *theirs = scratch(ctx, wire.bytes);
  encode(ctx, x, wire, 1, mine);
  ctx.communicator->permute(ctx, group, words(mine, wire, 1), shift,
                            words(theirs, wire, 1));
  decode(ctx, theirs, wire, out);
  check(ctx, cudaFreeAsync(mine, ctx.comm), "cudaFreeAsync");
  check(ctx, cudaFreeAsync(theirs, ctx.comm), "cudaFreeAsync");
  return endCollective(ctx);
}

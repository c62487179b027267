//===- CpuKernels.cpp - Reference CPU kernels for weft ops ----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/CpuKernels.h"

#include "Parallel.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <array>
#include <cblas.h>
#include <cmath>
#include <limits>
#include <numeric>

namespace weft::rt {
namespace {

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Strides that read `shape` broadcast to `out` (0 where it broadcasts).
std::vector<int64_t> broadcastStrides(const Shape &shape, const Shape &out) {
  std::vector<int64_t> own = stridesOf(shape), strides(out.size(), 0);
  size_t offset = out.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    strides[offset + d] = shape[d] == 1 ? 0 : own[d];
  return strides;
}

/// Calls fn(outIndex, inputOffsets...) for every element of `out`, with the
/// offsets of each input read through broadcast strides.
template <size_t N, typename Fn>
void forEachBroadcast(const Shape &out,
                      const std::array<std::vector<int64_t>, N> &strides,
                      Fn fn) {
  int64_t total = numElements(out);
  size_t rank = out.size();
  std::vector<int64_t> index(rank, 0);
  std::array<int64_t, N> offsets{};
  for (int64_t i = 0; i < total; ++i) {
    fn(i, offsets);
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      ++index[d];
      for (size_t k = 0; k < N; ++k)
        offsets[k] += strides[k][d];
      if (index[d] < out[d])
        break;
      for (size_t k = 0; k < N; ++k)
        offsets[k] -= strides[k][d] * index[d];
      index[d] = 0;
    }
  }
}

double applyBinary(BinaryKind kind, double a, double b, bool isInt) {
  switch (kind) {
  case BinaryKind::Add:
    return a + b;
  case BinaryKind::Sub:
    return a - b;
  case BinaryKind::Mul:
    return a * b;
  case BinaryKind::Div:
    if (isInt)
      return b == 0 ? 0 : std::trunc(a / b);
    return a / b;
  case BinaryKind::Pow:
    return std::pow(a, b);
  case BinaryKind::Max:
    return std::max(a, b);
  case BinaryKind::Min:
    return std::min(a, b);
  }
  return 0;
}

/// Elements (or rows times their length) below which a loop stays on one
/// thread: starting threads costs more than small loops.
constexpr int64_t kGrain = 1 << 15;

/// Rounds a computed float to the precision its type holds.
float roundTo(DType dtype, float value) {
  if (dtype == DType::BF16)
    return roundToBF16(value);
  if (dtype == DType::F16)
    return roundToF16(value);
  return value;
}

} // namespace

std::optional<Shape> broadcastShape(const Shape &a, const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    size_t fromEnd = rank - 1 - i;
    int64_t x = fromEnd < a.size() ? a[a.size() - 1 - fromEnd] : 1;
    int64_t y = fromEnd < b.size() ? b[b.size() - 1 - fromEnd] : 1;
    if (x != y && x != 1 && y != 1)
      return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

HostTensor binary(BinaryKind kind, const HostTensor &lhs,
                  const HostTensor &rhs) {
  Shape shape = *broadcastShape(lhs.shape, rhs.shape);
  HostTensor out(lhs.dtype, shape);
  if (lhs.isFloat() && lhs.shape == rhs.shape) {
    parallelFor(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out.floats[i] =
            roundTo(lhs.dtype, static_cast<float>(applyBinary(
                                   kind, lhs.floats[i], rhs.floats[i], false)));
    });
    return out;
  }
  std::array<std::vector<int64_t>, 2> strides{
      broadcastStrides(lhs.shape, shape), broadcastStrides(rhs.shape, shape)};
  if (lhs.isFloat()) {
    forEachBroadcast<2>(shape, strides, [&](int64_t i, const auto &at) {
      out.floats[i] = roundTo(
          lhs.dtype, static_cast<float>(applyBinary(kind, lhs.floats[at[0]],
                                                    rhs.floats[at[1]], false)));
    });
  } else {
    forEachBroadcast<2>(shape, strides, [&](int64_t i, const auto &at) {
      int64_t a = lhs.ints[at[0]], b = rhs.ints[at[1]];
      switch (kind) {
      case BinaryKind::Add:
        out.ints[i] = a + b;
        break;
      case BinaryKind::Sub:
        out.ints[i] = a - b;
        break;
      case BinaryKind::Mul:
        out.ints[i] = a * b;
        break;
      default:
        out.ints[i] = static_cast<int64_t>(applyBinary(
            kind, static_cast<double>(a), static_cast<double>(b), true));
      }
      if (lhs.dtype == DType::I32)
        out.ints[i] = static_cast<int32_t>(out.ints[i]);
    });
  }
  return out;
}

HostTensor compare(CompareKind kind, const HostTensor &lhs,
                   const HostTensor &rhs) {
  Shape shape = *broadcastShape(lhs.shape, rhs.shape);
  HostTensor out(DType::Bool, shape);
  std::array<std::vector<int64_t>, 2> strides{
      broadcastStrides(lhs.shape, shape), broadcastStrides(rhs.shape, shape)};
  forEachBroadcast<2>(shape, strides, [&](int64_t i, const auto &at) {
    double a = lhs.at(at[0]), b = rhs.at(at[1]);
    bool result = false;
    switch (kind) {
    case CompareKind::Eq:
      result = a == b;
      break;
    case CompareKind::Ne:
      result = a != b;
      break;
    case CompareKind::Lt:
      result = a < b;
      break;
    case CompareKind::Le:
      result = a <= b;
      break;
    case CompareKind::Gt:
      result = a > b;
      break;
    case CompareKind::Ge:
      result = a >= b;
      break;
    }
    out.ints[i] = result;
  });
  return out;
}

HostTensor where(const HostTensor &cond, const HostTensor &lhs,
                 const HostTensor &rhs) {
  Shape shape =
      *broadcastShape(*broadcastShape(cond.shape, lhs.shape), rhs.shape);
  HostTensor out(lhs.dtype, shape);
  std::array<std::vector<int64_t>, 3> strides{
      broadcastStrides(cond.shape, shape), broadcastStrides(lhs.shape, shape),
      broadcastStrides(rhs.shape, shape)};
  forEachBroadcast<3>(shape, strides, [&](int64_t i, const auto &at) {
    bool pick = cond.ints[at[0]] != 0;
    if (out.isFloat())
      out.floats[i] = pick ? lhs.floats[at[1]] : rhs.floats[at[2]];
    else
      out.ints[i] = pick ? lhs.ints[at[1]] : rhs.ints[at[2]];
  });
  return out;
}

HostTensor unary(UnaryKind kind, const HostTensor &input) {
  HostTensor out(input.dtype, input.shape);
  if (!input.isFloat()) {
    for (int64_t i = 0; i < input.numel(); ++i) {
      int64_t x = input.ints[i];
      out.ints[i] = kind == UnaryKind::Neg ? -x : std::max<int64_t>(x, 0);
    }
    return out;
  }
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  parallelFor(input.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float x = input.floats[i], y = 0;
      switch (kind) {
      case UnaryKind::Neg:
        y = -x;
        break;
      case UnaryKind::Exp:
        y = std::exp(x);
        break;
      case UnaryKind::Log:
        y = std::log(x);
        break;
      case UnaryKind::Sqrt:
        y = std::sqrt(x);
        break;
      case UnaryKind::Rsqrt:
        y = 1.0f / std::sqrt(x);
        break;
      case UnaryKind::Tanh:
        y = std::tanh(x);
        break;
      case UnaryKind::Erf:
        y = std::erf(x);
        break;
      case UnaryKind::Sigmoid:
        y = 1.0f / (1.0f + std::exp(-x));
        break;
      case UnaryKind::Relu:
        y = std::max(x, 0.0f);
        break;
      case UnaryKind::Silu:
        y = x / (1.0f + std::exp(-x));
        break;
      case UnaryKind::GeluErf:
        y = 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f));
        break;
      case UnaryKind::GeluTanh:
        y = 0.5f * x *
            (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
        break;
      }
      out.floats[i] = roundTo(input.dtype, y);
    }
  });
  return out;
}

HostTensor cast(const HostTensor &input, DType to) {
  HostTensor out(to, input.shape);
  for (int64_t i = 0; i < input.numel(); ++i) {
    double x = input.at(i);
    if (isFloat(to))
      out.floats[i] = roundTo(to, static_cast<float>(x));
    else if (to == DType::Bool)
      out.ints[i] = x != 0;
    else if (std::isnan(x))
      out.ints[i] = 0;
    else if (to == DType::I32)
      out.ints[i] = static_cast<int32_t>(std::trunc(x));
    else
      out.ints[i] = static_cast<int64_t>(std::trunc(x));
  }
  return out;
}

HostTensor reduce(ReduceKind kind, const HostTensor &input,
                  const std::vector<int64_t> &axes, bool keepDims) {
  Shape kept = input.shape;
  for (int64_t axis : axes)
    kept[axis] = 1;
  HostTensor accum(input.isFloat() ? DType::F32 : DType::I64, kept);
  std::vector<double> sums(
      accum.numel(),
      kind == ReduceKind::Max ? -std::numeric_limits<double>::infinity() : 0.0);
  std::array<std::vector<int64_t>, 1> strides{
      broadcastStrides(kept, input.shape)};
  forEachBroadcast<1>(input.shape, strides, [&](int64_t i, const auto &at) {
    double x = input.at(i);
    if (kind == ReduceKind::Max)
      sums[at[0]] = std::isnan(x) ? x : std::max(sums[at[0]], x);
    else
      sums[at[0]] += x;
  });
  int64_t count = 1;
  for (int64_t axis : axes)
    count *= input.shape[axis];
  Shape shape;
  for (int64_t d = 0; d < input.rank(); ++d)
    if (keepDims || std::find(axes.begin(), axes.end(), d) == axes.end())
      shape.push_back(kept[d]);
  HostTensor out(input.dtype, shape);
  for (size_t i = 0; i < sums.size(); ++i) {
    double value = kind == ReduceKind::Mean ? sums[i] / count : sums[i];
    if (out.isFloat())
      out.floats[i] = roundTo(out.dtype, static_cast<float>(value));
    else
      out.ints[i] = static_cast<int64_t>(value);
  }
  return out;
}

HostTensor softmax(const HostTensor &input, int64_t axis, bool logSoftmax,
                   float scale, bool causal) {
  HostTensor out(input.dtype, input.shape);
  int64_t size = input.shape[axis];
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < input.rank(); ++d)
    inner *= input.shape[d];
  int64_t outer = input.numel() / std::max<int64_t>(size * inner, 1);
  // A causal softmax runs along the last dimension: the row's position is
  // its index along the dimension before it.
  int64_t rows =
      causal && input.rank() >= 2 ? input.shape[input.rank() - 2] : 1;
  const float negInf = -std::numeric_limits<float>::infinity();
  parallelFor(
      outer * inner, std::max<int64_t>(1, kGrain / std::max<int64_t>(size, 1)),
      [&](int64_t begin, int64_t end) {
        std::vector<float> scaled(size);
        for (int64_t row = begin; row < end; ++row) {
          int64_t o = row / inner, in = row % inner;
          const float *x = input.floats.data() + o * size * inner + in;
          float *y = out.floats.data() + o * size * inner + in;
          int64_t visible = causal ? o % rows + 1 : size;
          float max = negInf;
          for (int64_t j = 0; j < size; ++j) {
            scaled[j] = j < visible ? x[j * inner] * scale : negInf;
            max = std::max(max, scaled[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < visible; ++j)
            sum += std::exp(static_cast<double>(scaled[j]) - max);
          for (int64_t j = 0; j < size; ++j) {
            double shifted = static_cast<double>(scaled[j]) - max;
            y[j * inner] = roundTo(
                input.dtype,
                static_cast<float>(logSoftmax ? shifted - std::log(sum)
                                              : std::exp(shifted) / sum));
          }
        }
      });
  return out;
}

HostTensor normalize(const HostTensor &input, const HostTensor &scale,
                     const HostTensor *bias, int64_t axis, float epsilon,
                     bool rms) {
  HostTensor out(input.dtype, input.shape);
  int64_t size = 1;
  for (int64_t d = axis; d < input.rank(); ++d)
    size *= input.shape[d];
  int64_t rows = input.numel() / std::max<int64_t>(size, 1);
  parallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(size, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const float *x = input.floats.data() + r * size;
                  float *y = out.floats.data() + r * size;
                  double mean = 0, square = 0;
                  for (int64_t j = 0; j < size; ++j) {
                    mean += x[j];
                    square += static_cast<double>(x[j]) * x[j];
                  }
                  mean /= size;
                  square /= size;
                  double center = rms ? 0.0 : mean;
                  double variance =
                      rms ? square : std::max(square - mean * mean, 0.0);
                  double inv = 1.0 / std::sqrt(variance + epsilon);
                  for (int64_t j = 0; j < size; ++j) {
                    double value = (x[j] - center) * inv * scale.floats[j];
                    if (bias)
                      value += bias->floats[j];
                    y[j] = roundTo(input.dtype, static_cast<float>(value));
                  }
                }
              });
  return out;
}

HostTensor matmul(const HostTensor &lhs, const HostTensor &rhs,
                  bool transposeLhs, bool transposeRhs) {
  int64_t lr = lhs.rank(), rr = rhs.rank();
  int64_t m = lhs.shape[lr - 2], k = lhs.shape[lr - 1];
  if (transposeLhs)
    std::swap(m, k);
  int64_t n = transposeRhs ? rhs.shape[rr - 2] : rhs.shape[rr - 1];
  Shape lhsBatch(lhs.shape.begin(), lhs.shape.end() - 2);
  Shape rhsBatch(rhs.shape.begin(), rhs.shape.end() - 2);
  Shape batch = *broadcastShape(lhsBatch, rhsBatch);
  Shape shape = batch;
  shape.push_back(m);
  shape.push_back(n);
  HostTensor out(lhs.dtype, shape);
  std::array<std::vector<int64_t>, 2> strides{
      broadcastStrides(lhsBatch, batch), broadcastStrides(rhsBatch, batch)};
  int64_t lhsMatrix = m * k, rhsMatrix = k * n;
  forEachBroadcast<2>(batch, strides, [&](int64_t b, const auto &at) {
    if (lhs.isFloat()) {
      cblas_sgemm(CblasRowMajor, transposeLhs ? CblasTrans : CblasNoTrans,
                  transposeRhs ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                  lhs.floats.data() + at[0] * lhsMatrix, transposeLhs ? m : k,
                  rhs.floats.data() + at[1] * rhsMatrix, transposeRhs ? k : n,
                  0.0f, out.floats.data() + b * m * n, n);
      return;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          int64_t a = lhs.ints[at[0] * lhsMatrix +
                               (transposeLhs ? p * m + i : i * k + p)];
          int64_t c = rhs.ints[at[1] * rhsMatrix +
                               (transposeRhs ? j * k + p : p * n + j)];
          sum += a * c;
        }
        out.ints[b * m * n + i * n + j] = sum;
      }
  });
  if (out.dtype != DType::F32 && out.isFloat())
    for (float &value : out.floats)
      value = roundTo(out.dtype, value);
  return out;
}

HostTensor linear(const HostTensor &input, const HostTensor &weight,
                  const HostTensor *bias, bool transposeWeight) {
  int64_t k = input.shape.back();
  int64_t n = transposeWeight ? weight.shape[0] : weight.shape[1];
  HostTensor flat =
      reshape(input, {input.numel() / std::max<int64_t>(k, 1), k});
  HostTensor product = matmul(flat, weight, false, transposeWeight);
  Shape shape(input.shape.begin(), input.shape.end() - 1);
  shape.push_back(n);
  product = reshape(product, shape);
  return bias ? binary(BinaryKind::Add, product, *bias) : product;
}

/// Attention per head; with `lse`, also each row's log-sum-exp, and rows
/// whose keys are all masked are zero with lse -1e30 (the block form).
static HostTensor attentionImpl(const HostTensor &q, const HostTensor &k,
                                const HostTensor &v, const HostTensor *mask,
                                const HostTensor *qPositions,
                                const HostTensor *kPositions, float scale,
                                bool causal, HostTensor *lse) {
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2],
          dim = q.shape[3];
  int64_t kvHeads = k.shape[1], kvSeq = k.shape[2], vDim = v.shape[3];
  int64_t group = heads / kvHeads;
  HostTensor out(q.dtype, {batch, heads, seq, vDim});
  if (lse)
    *lse = HostTensor(DType::F32, {batch, heads, seq, 1});
  auto hidden = [&](int64_t i, int64_t j) {
    if (!causal)
      return false;
    if (qPositions)
      return kPositions->ints[j] > qPositions->ints[i];
    return j > i;
  };
  HostTensor fullMask;
  if (mask)
    fullMask = broadcastTo(*mask, {batch, heads, seq, kvSeq});
  std::vector<float> scores(seq * kvSeq);
  const float negInf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t kvh = h / group;
      const float *qp = q.floats.data() + ((b * heads + h) * seq) * dim;
      const float *kp = k.floats.data() + ((b * kvHeads + kvh) * kvSeq) * dim;
      const float *vp = v.floats.data() + ((b * kvHeads + kvh) * kvSeq) * vDim;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, seq, kvSeq, dim,
                  scale, qp, dim, kp, dim, 0.0f, scores.data(), kvSeq);
      for (int64_t i = 0; i < seq; ++i) {
        float *row = scores.data() + i * kvSeq;
        for (int64_t j = 0; j < kvSeq; ++j) {
          int64_t at = ((b * heads + h) * seq + i) * kvSeq + j;
          if (hidden(i, j))
            row[j] = negInf;
          else if (mask && !fullMask.isFloat() && fullMask.ints[at] == 0)
            row[j] = negInf;
          else if (mask && fullMask.isFloat())
            row[j] += fullMask.floats[at];
        }
        float max = *std::max_element(row, row + kvSeq);
        if (lse && max == negInf) {
          // Every key masked: no contribution (the merge weighs it by 0).
          std::fill(row, row + kvSeq, 0.0f);
          lse->floats[(b * heads + h) * seq + i] = -1e30f;
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < kvSeq; ++j)
          sum += std::exp(static_cast<double>(row[j]) - max);
        for (int64_t j = 0; j < kvSeq; ++j)
          row[j] = static_cast<float>(
              std::exp(static_cast<double>(row[j]) - max) / sum);
        if (lse)
          lse->floats[(b * heads + h) * seq + i] =
              static_cast<float>(max + std::log(sum));
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, seq, vDim, kvSeq,
                  1.0f, scores.data(), kvSeq, vp, vDim, 0.0f,
                  out.floats.data() + ((b * heads + h) * seq) * vDim, vDim);
    }
  if (out.dtype != DType::F32)
    for (float &value : out.floats)
      value = roundTo(out.dtype, value);
  return out;
}

HostTensor attention(const HostTensor &q, const HostTensor &k,
                     const HostTensor &v, const HostTensor *mask, float scale,
                     bool causal) {
  return attentionImpl(q, k, v, mask, nullptr, nullptr, scale, causal, nullptr);
}

AttentionBlock attentionBlock(const HostTensor &q, const HostTensor &k,
                              const HostTensor &v, const HostTensor *mask,
                              const HostTensor *qPositions,
                              const HostTensor *kPositions, float scale,
                              bool causal) {
  AttentionBlock block;
  block.output = attentionImpl(q, k, v, mask, qPositions, kPositions, scale,
                               causal, &block.lse);
  return block;
}

absl::StatusOr<HostTensor> gather(const HostTensor &input,
                                  const HostTensor &indices, int64_t axis) {
  Shape shape(input.shape.begin(), input.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), input.shape.begin() + axis + 1, input.shape.end());
  HostTensor out(input.dtype, shape);
  int64_t size = input.shape[axis];
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < input.rank(); ++d)
    inner *= input.shape[d];
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= input.shape[d];
  int64_t count = indices.numel();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t n = 0; n < count; ++n) {
      int64_t index = indices.ints[n];
      if (index < 0)
        index += size;
      if (index < 0 || index >= size)
        return absl::OutOfRangeError(
            absl::StrCat("index ", indices.ints[n],
                         " is out of range for a dimension of ", size));
      int64_t from = (o * size + index) * inner, to = (o * count + n) * inner;
      if (input.isFloat())
        std::copy_n(input.floats.data() + from, inner, out.floats.data() + to);
      else
        std::copy_n(input.ints.data() + from, inner, out.ints.data() + to);
    }
  return out;
}

HostTensor reshape(const HostTensor &input, const Shape &shape) {
  HostTensor out = input;
  out.shape = shape;
  return out;
}

HostTensor transpose(const HostTensor &input,
                     const std::vector<int64_t> &perm) {
  Shape shape;
  for (int64_t d : perm)
    shape.push_back(input.shape[d]);
  HostTensor out(input.dtype, shape);
  std::vector<int64_t> own = stridesOf(input.shape);
  std::array<std::vector<int64_t>, 1> strides{{{}}};
  for (int64_t d : perm)
    strides[0].push_back(own[d]);
  forEachBroadcast<1>(shape, strides, [&](int64_t i, const auto &at) {
    if (out.isFloat())
      out.floats[i] = input.floats[at[0]];
    else
      out.ints[i] = input.ints[at[0]];
  });
  return out;
}

HostTensor slice(const HostTensor &input, const std::vector<int64_t> &starts,
                 const std::vector<int64_t> &limits,
                 const std::vector<int64_t> &steps) {
  Shape shape;
  int64_t base = 0;
  std::vector<int64_t> own = stridesOf(input.shape);
  std::array<std::vector<int64_t>, 1> strides{{{}}};
  for (int64_t d = 0; d < input.rank(); ++d) {
    shape.push_back((limits[d] - starts[d] + steps[d] - 1) / steps[d]);
    base += starts[d] * own[d];
    strides[0].push_back(own[d] * steps[d]);
  }
  HostTensor out(input.dtype, shape);
  forEachBroadcast<1>(shape, strides, [&](int64_t i, const auto &at) {
    if (out.isFloat())
      out.floats[i] = input.floats[base + at[0]];
    else
      out.ints[i] = input.ints[base + at[0]];
  });
  return out;
}

HostTensor concat(const std::vector<const HostTensor *> &inputs, int64_t axis) {
  Shape shape = inputs.front()->shape;
  shape[axis] = 0;
  for (const HostTensor *input : inputs)
    shape[axis] += input->shape[axis];
  HostTensor out(inputs.front()->dtype, shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  int64_t outRow = out.numel() / std::max<int64_t>(outer, 1);
  int64_t offset = 0;
  for (const HostTensor *input : inputs) {
    int64_t row = input->numel() / std::max<int64_t>(outer, 1);
    for (int64_t o = 0; o < outer; ++o) {
      if (out.isFloat())
        std::copy_n(input->floats.data() + o * row, row,
                    out.floats.data() + o * outRow + offset);
      else
        std::copy_n(input->ints.data() + o * row, row,
                    out.ints.data() + o * outRow + offset);
    }
    offset += row;
  }
  return out;
}

std::vector<HostTensor> split(const HostTensor &input, int64_t axis,
                              const std::vector<int64_t> &sizes) {
  std::vector<HostTensor> pieces;
  std::vector<int64_t> starts(input.rank(), 0), limits(input.shape),
      steps(input.rank(), 1);
  int64_t offset = 0;
  for (int64_t size : sizes) {
    starts[axis] = offset;
    limits[axis] = offset + size;
    pieces.push_back(slice(input, starts, limits, steps));
    offset += size;
  }
  return pieces;
}

HostTensor broadcastTo(const HostTensor &input, const Shape &shape) {
  HostTensor out(input.dtype, shape);
  std::array<std::vector<int64_t>, 1> strides{
      broadcastStrides(input.shape, shape)};
  forEachBroadcast<1>(shape, strides, [&](int64_t i, const auto &at) {
    if (out.isFloat())
      out.floats[i] = input.floats[at[0]];
    else
      out.ints[i] = input.ints[at[0]];
  });
  return out;
}

HostTensor trilu(const HostTensor &input, bool upper, int64_t diagonal) {
  HostTensor out = input;
  int64_t rows = input.shape[input.rank() - 2], cols = input.shape.back();
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    bool keep = upper ? col - row >= diagonal : col - row <= diagonal;
    if (keep)
      continue;
    if (out.isFloat())
      out.floats[i] = 0;
    else
      out.ints[i] = 0;
  }
  return out;
}

HostTensor iota(DType dtype, const Shape &shape, int64_t dim) {
  HostTensor out(dtype, shape);
  std::vector<int64_t> strides = stridesOf(shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t value = (i / strides[dim]) % shape[dim];
    if (out.isFloat())
      out.floats[i] = static_cast<float>(value);
    else
      out.ints[i] = value;
  }
  return out;
}

absl::StatusOr<HostTensor> crossEntropy(const HostTensor &logits,
                                        const HostTensor &labels,
                                        LossReduction reduction,
                                        std::optional<int64_t> ignoreIndex) {
  int64_t classes = logits.shape.back();
  int64_t rows = labels.numel();
  HostTensor losses(logits.dtype, labels.shape);
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = labels.ints[r];
    if (ignoreIndex && label == *ignoreIndex)
      continue;
    if (label < 0 || label >= classes)
      return absl::OutOfRangeError(absl::StrCat(
          "label ", label, " is not a class in [0, ", classes, ")"));
    const float *row = logits.floats.data() + r * classes;
    float max = *std::max_element(row, row + classes);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(static_cast<double>(row[c]) - max);
    double loss = std::log(sum) + max - row[label];
    losses.floats[r] = static_cast<float>(loss);
    total += loss;
    ++counted;
  }
  if (reduction == LossReduction::None)
    return losses;
  HostTensor out(logits.dtype, {});
  double value = reduction == LossReduction::Mean
                     ? (counted ? total / counted
                                : std::numeric_limits<double>::quiet_NaN())
                     : total;
  out.floats[0] = static_cast<float>(value);
  return out;
}

} // namespace weft::rt

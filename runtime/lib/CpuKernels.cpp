//===- CpuKernels.cpp - Reference CPU kernels for weft ops ----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/CpuKernels.h"

#include "Parallel.h"

#include "weft/runtime/Profile.h"

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

/// Elements (or rows times their length) below which a loop stays on one
/// thread: starting threads costs more than small loops.
constexpr int64_t kGrain = 1 << 15;

/// Calls fn(outIndex, inputOffsets...) for every element of `out`, with the
/// offsets of each input read through broadcast strides; chunks of the
/// output run in parallel (fn must then only write element outIndex)
/// unless `serial`.
template <size_t N, typename Fn>
void forEachBroadcast(const Shape &out,
                      const std::array<std::vector<int64_t>, N> &strides, Fn fn,
                      bool serial = false) {
  int64_t total = numElements(out);
  size_t rank = out.size();
  parallelFor(
      total, serial ? total + 1 : kGrain, [&](int64_t begin, int64_t end) {
        // The multi-index of `begin` and the offsets it reads.
        std::vector<int64_t> index(rank, 0);
        std::array<int64_t, N> offsets{};
        int64_t rest = begin;
        for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
          index[d] = out[d] ? rest % out[d] : 0;
          rest = out[d] ? rest / out[d] : 0;
          for (size_t k = 0; k < N; ++k)
            offsets[k] += strides[k][d] * index[d];
        }
        for (int64_t i = begin; i < end; ++i) {
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
      });
}

/// Calls fn(outOffset, inputOffsets, length) for every run of `out` along
/// its last dimension (one run of one element for a scalar), with the
/// offsets where each input's run starts; each input steps through its run
/// by its last stride. Runs are split over threads as forEachBroadcast's
/// elements are, unless `serial`. Kernels loop over a run with the
/// operation known, which the per-element callback of forEachBroadcast
/// does not let the compiler see.
template <size_t N, typename Fn>
void forEachRow(const Shape &out,
                const std::array<std::vector<int64_t>, N> &strides, Fn fn,
                bool serial = false) {
  int64_t rank = static_cast<int64_t>(out.size());
  int64_t run = rank ? out.back() : 1;
  if (run == 0)
    return;
  int64_t rows = numElements(out) / run;
  parallelFor(rows, serial ? rows + 1 : std::max<int64_t>(1, kGrain / run),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  std::array<int64_t, N> offsets{};
                  int64_t rest = r;
                  for (int64_t d = rank - 2; d >= 0; --d) {
                    int64_t index = rest % out[d];
                    rest /= out[d];
                    for (size_t k = 0; k < N; ++k)
                      offsets[k] += strides[k][d] * index;
                  }
                  fn(r * run, offsets, run);
                }
              });
}

/// Copies `input` read through `strides` (one per output dimension, from
/// element `base`) into a new tensor of `shape`: runs along the last
/// dimension are copied whole when it is contiguous in the input.
HostTensor gatherStrided(const HostTensor &input, const Shape &shape,
                         int64_t base, const std::vector<int64_t> &strides) {
  HostTensor out = HostTensor::uninitialized(input.dtype, shape);
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t run = rank ? shape.back() : 1;
  if (rank == 0 || strides.back() != 1 || run == 0) {
    std::array<std::vector<int64_t>, 1> walk{strides};
    forEachBroadcast<1>(shape, walk, [&](int64_t i, const auto &at) {
      if (out.isFloat())
        out.floats[i] = input.floats[base + at[0]];
      else
        out.ints[i] = input.ints[base + at[0]];
    });
    return out;
  }
  int64_t runs = out.numel() / run;
  parallelFor(runs, std::max<int64_t>(1, kGrain / run),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  int64_t offset = base, rest = r;
                  for (int64_t d = rank - 2; d >= 0; --d) {
                    offset += (rest % shape[d]) * strides[d];
                    rest /= shape[d];
                  }
                  if (out.isFloat())
                    std::copy_n(input.floats.data() + offset, run,
                                out.floats.data() + r * run);
                  else
                    std::copy_n(input.ints.data() + offset, run,
                                out.ints.data() + r * run);
                }
              });
  return out;
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
  ProfileScope profile("binary");
  Shape shape = *broadcastShape(lhs.shape, rhs.shape);
  HostTensor out = HostTensor::uninitialized(lhs.dtype, shape);
  std::array<std::vector<int64_t>, 2> strides{
      broadcastStrides(lhs.shape, shape), broadcastStrides(rhs.shape, shape)};
  if (lhs.isFloat()) {
    // Computed in double and rounded to the element type, as applyBinary
    // does, with the operation chosen once per call rather than per element.
    int64_t sa = shape.empty() ? 0 : strides[0].back();
    int64_t sb = shape.empty() ? 0 : strides[1].back();
    DType dtype = lhs.dtype;
    auto kernel = [&](auto op) {
      forEachRow<2>(
          shape, strides,
          [&](int64_t o, const std::array<int64_t, 2> &at, int64_t n) {
            const float *a = lhs.floats.data() + at[0];
            const float *b = rhs.floats.data() + at[1];
            float *y = out.floats.data() + o;
            if (dtype == DType::F32) {
              for (int64_t i = 0; i < n; ++i)
                y[i] = static_cast<float>(op(a[i * sa], b[i * sb]));
              return;
            }
            for (int64_t i = 0; i < n; ++i)
              y[i] =
                  roundTo(dtype, static_cast<float>(op(a[i * sa], b[i * sb])));
          });
    };
    switch (kind) {
    case BinaryKind::Add:
      kernel([](double a, double b) { return a + b; });
      break;
    case BinaryKind::Sub:
      kernel([](double a, double b) { return a - b; });
      break;
    case BinaryKind::Mul:
      kernel([](double a, double b) { return a * b; });
      break;
    case BinaryKind::Div:
      kernel([](double a, double b) { return a / b; });
      break;
    default:
      kernel([kind](double a, double b) {
        return applyBinary(kind, a, b, /*isInt=*/false);
      });
    }
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
  ProfileScope profile("compare");
  Shape shape = *broadcastShape(lhs.shape, rhs.shape);
  HostTensor out = HostTensor::uninitialized(DType::Bool, shape);
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
  ProfileScope profile("where");
  Shape shape =
      *broadcastShape(*broadcastShape(cond.shape, lhs.shape), rhs.shape);
  HostTensor out = HostTensor::uninitialized(lhs.dtype, shape);
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
  ProfileScope profile("unary");
  HostTensor out = HostTensor::uninitialized(input.dtype, input.shape);
  if (!input.isFloat()) {
    for (int64_t i = 0; i < input.numel(); ++i) {
      int64_t x = input.ints[i];
      out.ints[i] = kind == UnaryKind::Neg   ? -x
                    : kind == UnaryKind::Abs ? std::abs(x)
                                             : std::max<int64_t>(x, 0);
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
      case UnaryKind::Sin:
        y = std::sin(x);
        break;
      case UnaryKind::Cos:
        y = std::cos(x);
        break;
      case UnaryKind::Sigmoid:
        y = 1.0f / (1.0f + std::exp(-x));
        break;
      case UnaryKind::Relu:
        y = std::max(x, 0.0f);
        break;
      case UnaryKind::Abs:
        y = std::fabs(x);
        break;
      case UnaryKind::Silu:
        y = x / (1.0f + std::exp(-x));
        break;
      case UnaryKind::GeluErf:
        y = 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f));
        break;
      case UnaryKind::GeluTanh:
        // 0.5 (1 + tanh(u)) is the logistic function of 2u: one exp
        // instead of a tanh (about 4x cheaper), the same value to float
        // rounding.
        y = x / (1.0f +
                 std::exp(-2.0f * kSqrt2OverPi * (x + 0.044715f * x * x * x)));
        break;
      }
      out.floats[i] = roundTo(input.dtype, y);
    }
  });
  return out;
}

HostTensor cast(const HostTensor &input, DType to) {
  ProfileScope profile("cast");
  HostTensor out = HostTensor::uninitialized(to, input.shape);
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
  ProfileScope profile("reduce");
  Shape kept = input.shape;
  for (int64_t axis : axes)
    kept[axis] = 1;
  HostTensor accum(input.isFloat() ? DType::F32 : DType::I64, kept);
  std::vector<double> sums(
      accum.numel(),
      kind == ReduceKind::Max ? -std::numeric_limits<double>::infinity() : 0.0);
  std::array<std::vector<int64_t>, 1> strides{
      broadcastStrides(kept, input.shape)};
  // Log-sum-exp: the maxima first, then the exponentials' sums past them.
  std::vector<double> maxima;
  if (kind == ReduceKind::LogSumExp) {
    maxima.assign(accum.numel(), -std::numeric_limits<double>::infinity());
    forEachBroadcast<1>(
        input.shape, strides,
        [&](int64_t i, const auto &at) {
          double x = input.at(i);
          maxima[at[0]] = std::isnan(x) ? x : std::max(maxima[at[0]], x);
        },
        /*serial=*/true);
  }
  if (kind != ReduceKind::Max && kind != ReduceKind::LogSumExp &&
      input.isFloat()) {
    // Sums, row by row in the order of the elements (the same additions
    // as the general loop below, so the same result to the bit).
    int64_t step = input.shape.empty() ? 0 : strides[0].back();
    forEachRow<1>(
        input.shape, strides,
        [&](int64_t o, const std::array<int64_t, 1> &at, int64_t n) {
          const float *x = input.floats.data() + o;
          double *sum = sums.data() + at[0];
          if (step == 0) {
            double total = *sum;
            for (int64_t i = 0; i < n; ++i)
              total += x[i];
            *sum = total;
            return;
          }
          for (int64_t i = 0; i < n; ++i)
            sum[i * step] += x[i];
        },
        /*serial=*/true);
  } else {
    forEachBroadcast<1>(
        input.shape, strides,
        [&](int64_t i, const auto &at) {
          double x = input.at(i);
          if (kind == ReduceKind::Max)
            sums[at[0]] = std::isnan(x) ? x : std::max(sums[at[0]], x);
          else if (kind == ReduceKind::LogSumExp)
            sums[at[0]] += std::isinf(maxima[at[0]]) && maxima[at[0]] < 0
                               ? 0.0
                               : std::exp(x - maxima[at[0]]);
          else
            sums[at[0]] += x;
        },
        /*serial=*/true);
  }
  int64_t count = 1;
  for (int64_t axis : axes)
    count *= input.shape[axis];
  Shape shape;
  for (int64_t d = 0; d < input.rank(); ++d)
    if (keepDims || std::find(axes.begin(), axes.end(), d) == axes.end())
      shape.push_back(kept[d]);
  HostTensor out = HostTensor::uninitialized(input.dtype, shape);
  for (size_t i = 0; i < sums.size(); ++i) {
    double value = kind == ReduceKind::Mean ? sums[i] / count : sums[i];
    if (kind == ReduceKind::LogSumExp)
      value = std::isinf(maxima[i]) ? maxima[i] : maxima[i] + std::log(value);
    if (out.isFloat())
      out.floats[i] = roundTo(out.dtype, static_cast<float>(value));
    else
      out.ints[i] = static_cast<int64_t>(value);
  }
  return out;
}

HostTensor softmax(const HostTensor &input, int64_t axis, bool logSoftmax,
                   float scale, bool causal) {
  ProfileScope profile("softmax");
  HostTensor out = HostTensor::uninitialized(input.dtype, input.shape);
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
  ProfileScope profile("normalize");
  HostTensor out = HostTensor::uninitialized(input.dtype, input.shape);
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
  ProfileScope profile("matmul");
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
  HostTensor out = HostTensor::uninitialized(lhs.dtype, shape);
  std::array<std::vector<int64_t>, 2> strides{
      broadcastStrides(lhsBatch, batch), broadcastStrides(rhsBatch, batch)};
  int64_t lhsMatrix = m * k, rhsMatrix = k * n;
  forEachBroadcast<2>(
      batch, strides,
      [&](int64_t b, const auto &at) {
        if (lhs.isFloat()) {
          cblas_sgemm(
              CblasRowMajor, transposeLhs ? CblasTrans : CblasNoTrans,
              transposeRhs ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
              lhs.floats.data() + at[0] * lhsMatrix, transposeLhs ? m : k,
              rhs.floats.data() + at[1] * rhsMatrix, transposeRhs ? k : n, 0.0f,
              out.floats.data() + b * m * n, n);
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
      },
      /*serial=*/true);
  if (out.dtype != DType::F32 && out.isFloat())
    for (float &value : out.floats)
      value = roundTo(out.dtype, value);
  return out;
}

HostTensor linear(const HostTensor &input, const HostTensor &weight,
                  const HostTensor *bias, bool transposeWeight) {
  ProfileScope profile("linear");
  int64_t k = input.shape.back();
  int64_t n = transposeWeight ? weight.shape[0] : weight.shape[1];
  Shape shape(input.shape.begin(), input.shape.end() - 1);
  shape.push_back(n);
  bool rowBias = bias && bias->isFloat() && bias->numel() == n &&
                 (bias->rank() == 1 || bias->numel() == bias->shape.back());
  if (!input.isFloat() || !weight.isFloat() || (bias && !rowBias)) {
    // The general form: a matmul on the rows, then a broadcast add.
    HostTensor flat = input;
    flat.shape = {input.numel() / std::max<int64_t>(k, 1), k};
    HostTensor product = matmul(flat, weight, false, transposeWeight);
    product.shape = shape;
    return bias ? binary(BinaryKind::Add, product, *bias) : product;
  }
  // Rows of the input times the weight, the bias added by the GEMM itself
  // (its C, with beta 1): no copies for the reshapes, no separate add.
  int64_t m = input.numel() / std::max<int64_t>(k, 1);
  HostTensor out = HostTensor::uninitialized(input.dtype, shape);
  if (bias)
    parallelFor(m, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t r = begin; r < end; ++r)
                    std::copy_n(bias->floats.data(), n,
                                out.floats.data() + r * n);
                });
  if (m && n)
    cblas_sgemm(CblasRowMajor, CblasNoTrans,
                transposeWeight ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                input.floats.data(), k, weight.floats.data(),
                transposeWeight ? k : n, bias ? 1.0f : 0.0f, out.floats.data(),
                n);
  if (out.dtype != DType::F32)
    for (float &value : out.floats)
      value = roundTo(out.dtype, value);
  return out;
}

namespace {
/// What hides a key from a query in attention: a causal mask by position
/// (ring blocks) or by index (top-left aligned), with a sliding window
/// (keys `window` or more before the query), and a mask tensor read
/// through broadcast strides, never expanded; and ALiBi's biases, -m_h
/// times the distance of the query's and the key's positions (or indices).
struct AttentionMasks {
  AttentionMasks(const HostTensor *mask, const HostTensor *qPositions,
                 const HostTensor *kPositions, bool causal, float softcap,
                 int64_t window, const HostTensor *alibi, const Shape &space)
      : mask(mask), qPositions(qPositions), kPositions(kPositions),
        alibi(alibi), byPosition(causal && qPositions),
        byIndex(causal && !qPositions), softcap(softcap),
        window(causal ? window : 0) {
    if (mask)
      strides = broadcastStrides(mask->shape, space);
  }
  /// The keys a block of query rows from `i0` up to `i0 + rows` can see:
  /// all, or (causal by index) up to its last row.
  int64_t keysFor(int64_t i0, int64_t rows, int64_t kvSeq) const {
    return byIndex ? std::min(kvSeq, i0 + rows) : kvSeq;
  }
  /// Turns query `i`'s scaled scores over `keys` keys (of head `h` in batch
  /// `b`) into probabilities in place, zero where masked. Returns the row's
  /// log-sum-exp, or -inf, leaving the row as it is, where every key is
  /// masked.
  float softmaxRow(int64_t b, int64_t h, int64_t i, float *row, int64_t keys,
                   float *capSlope = nullptr) const {
    const float negInf = -std::numeric_limits<float>::infinity();
    int64_t visible = maskRow(b, h, i, row, keys, capSlope);
    float max = negInf;
    for (int64_t j = 0; j < visible; ++j)
      max = std::max(max, row[j]);
    if (max == negInf)
      return negInf;
    double sum = 0;
    for (int64_t j = 0; j < visible; ++j) {
      float e = std::exp(row[j] - max);
      row[j] = e;
      sum += e;
    }
    float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < visible; ++j)
      row[j] *= inv;
    std::fill(row + visible, row + keys, 0.0f);
    return static_cast<float>(max + std::log(sum));
  }

  /// Turns query `i`'s scaled scores into the probabilities of a row whose
  /// log-sum-exp over all keys (of which these are some) is `lse`: zero where
  /// masked.
  void probabilitiesRow(int64_t b, int64_t h, int64_t i, float *row,
                        int64_t keys, float lse, float *capSlope) const {
    const float negInf = -std::numeric_limits<float>::infinity();
    int64_t visible = maskRow(b, h, i, row, keys, capSlope);
    for (int64_t j = 0; j < visible; ++j)
      row[j] = row[j] == negInf ? 0.0f : std::exp(row[j] - lse);
    std::fill(row + visible, row + keys, 0.0f);
  }

  /// How many of `keys` keys query `i` reads: a causal mask by index hides
  /// the rest.
  int64_t visible(int64_t i, int64_t keys) const {
    return byIndex ? std::min(keys, i + 1) : keys;
  }

  /// Caps query `i`'s scaled scores over `keys` keys (softcap·tanh(s /
  /// softcap), with the slope 1 - tanh² in `capSlope` for the backward), adds
  /// ALiBi's biases and then applies the masks (-inf where hidden); returns
  /// how many of them a causal mask by index leaves (the rest are not read).
  int64_t maskRow(int64_t b, int64_t h, int64_t i, float *row, int64_t keys,
                  float *capSlope) const {
    const float negInf = -std::numeric_limits<float>::infinity();
    int64_t visible = this->visible(i, keys);
    if (softcap > 0)
      for (int64_t j = 0; j < visible; ++j) {
        float t = std::tanh(row[j] / softcap);
        row[j] = softcap * t;
        if (capSlope)
          capSlope[j] = 1.0f - t * t;
      }
    if (alibi) {
      const float m = alibi->floats[size_t(h)];
      const int64_t qp = qPositions ? qPositions->ints[i] : i;
      for (int64_t j = 0; j < visible; ++j) {
        const int64_t kp = qPositions ? kPositions->ints[j] : j;
        row[j] -= m * static_cast<float>(std::abs(qp - kp));
      }
    }
    if (byPosition)
      for (int64_t j = 0; j < keys; ++j) {
        int64_t kp = kPositions->ints[j], qp = qPositions->ints[i];
        if (kp > qp || (window > 0 && kp <= qp - window))
          row[j] = negInf;
      }
    if (byIndex && window > 0)
      for (int64_t j = 0; j < std::min(visible, i - window + 1); ++j)
        row[j] = negInf;
    if (mask) {
      const int64_t base = b * strides[0] + h * strides[1] + i * strides[2];
      const int64_t step = strides[3];
      if (mask->isFloat()) {
        const float *m = mask->floats.data() + base;
        for (int64_t j = 0; j < visible; ++j)
          row[j] += m[j * step];
      } else {
        const int64_t *m = mask->ints.data() + base;
        for (int64_t j = 0; j < visible; ++j)
          if (m[j * step] == 0)
            row[j] = negInf;
      }
    }
    return visible;
  }

  const HostTensor *mask, *qPositions, *kPositions, *alibi;
  bool byPosition, byIndex;
  float softcap;
  int64_t window;
  std::vector<int64_t> strides;
};
} // namespace

/// Attention's query rows go in blocks of this many.
static constexpr int64_t kAttentionRows = 128;

/// Attention per head, in blocks of query rows: for each block, the scores
/// against the keys it can see (a causal block sees keys up to its last
/// row, so the upper triangle is neither multiplied nor stored), a softmax
/// over each row with one exp per score (rows in parallel), and the block's
/// output. With `lse`, also each row's log-sum-exp, and rows whose keys are
/// all masked are zero with lse -1e30 (the block form of ring attention).
static HostTensor attentionImpl(const HostTensor &q, const HostTensor &k,
                                const HostTensor &v, const HostTensor *mask,
                                const HostTensor *qPositions,
                                const HostTensor *kPositions, float scale,
                                bool causal, float softcap, int64_t window,
                                const HostTensor *alibi, HostTensor *lse) {
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2],
          dim = q.shape[3];
  int64_t kvHeads = k.shape[1], kvSeq = k.shape[2], vDim = v.shape[3];
  int64_t group = heads / kvHeads;
  HostTensor out =
      HostTensor::uninitialized(q.dtype, {batch, heads, seq, vDim});
  if (lse)
    *lse = HostTensor::uninitialized(DType::F32, {batch, heads, seq, 1});
  AttentionMasks masks(mask, qPositions, kPositions, causal, softcap, window,
                       alibi, {batch, heads, seq, kvSeq});
  std::vector<float> scores(std::min(seq, kAttentionRows) * kvSeq);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t kvh = h / group;
      const float *qp = q.floats.data() + ((b * heads + h) * seq) * dim;
      const float *kp = k.floats.data() + ((b * kvHeads + kvh) * kvSeq) * dim;
      const float *vp = v.floats.data() + ((b * kvHeads + kvh) * kvSeq) * vDim;
      float *op = out.floats.data() + ((b * heads + h) * seq) * vDim;
      float *lp = lse ? lse->floats.data() + (b * heads + h) * seq : nullptr;
      for (int64_t i0 = 0; i0 < seq; i0 += kAttentionRows) {
        int64_t rows = std::min(kAttentionRows, seq - i0);
        int64_t keys = masks.keysFor(i0, rows, kvSeq);
        if (keys == 0) {
          std::fill(op + i0 * vDim, op + (i0 + rows) * vDim, 0.0f);
          if (lp)
            std::fill(lp + i0, lp + i0 + rows, -1e30f);
          continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, dim,
                    scale, qp + i0 * dim, dim, kp, dim, 0.0f, scores.data(),
                    keys);
        parallelFor(
            rows, std::max<int64_t>(1, kGrain / (8 * keys)),
            [&](int64_t begin, int64_t end) {
              for (int64_t r = begin; r < end; ++r) {
                int64_t i = i0 + r;
                float *row = scores.data() + r * keys;
                float rowLse = masks.softmaxRow(b, h, i, row, keys);
                if (rowLse == -std::numeric_limits<float>::infinity()) {
                  // Every key masked: a zero row in the block form (the merge
                  // weighs it by 0); otherwise NaN, as softmax(-inf, ...) is.
                  std::fill(row, row + keys,
                            lse ? 0.0f
                                : std::numeric_limits<float>::quiet_NaN());
                  if (lp)
                    lp[i] = -1e30f;
                } else if (lp) {
                  lp[i] = rowLse;
                }
              }
            });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, vDim, keys,
                    1.0f, scores.data(), keys, vp, vDim, 0.0f, op + i0 * vDim,
                    vDim);
      }
    }
  if (out.dtype != DType::F32)
    for (float &value : out.floats)
      value = roundTo(out.dtype, value);
  return out;
}

HostTensor attention(const HostTensor &q, const HostTensor &k,
                     const HostTensor &v, const HostTensor *mask, float scale,
                     bool causal, float softcap, int64_t window,
                     const HostTensor *alibi) {
  ProfileScope profile("attention");
  return attentionImpl(q, k, v, mask, nullptr, nullptr, scale, causal, softcap,
                       window, alibi, nullptr);
}

AttentionBlock attentionBlock(const HostTensor &q, const HostTensor &k,
                              const HostTensor &v, const HostTensor *mask,
                              const HostTensor *qPositions,
                              const HostTensor *kPositions, float scale,
                              bool causal, float softcap, int64_t window,
                              const HostTensor *alibi) {
  ProfileScope profile("attention_block");
  AttentionBlock block;
  block.output = attentionImpl(q, k, v, mask, qPositions, kPositions, scale,
                               causal, softcap, window, alibi, &block.lse);
  return block;
}

/// Attention's backward per head, in blocks of query rows as the forward:
/// the block's probabilities P recomputed over the keys it can see, dP =
/// dO Vᵀ, dS = P (dP - rowsum(P dP)); then dQ = scale dS K for the block's
/// rows, and dK += scale dSᵀ Q, dV += Pᵀ dO into the KV head's sums (f32),
/// so that only one block's [rows, keys] is ever held. With the forward's
/// `out` and `lse` (a ring's block of keys), P = exp(S - lse) and
/// rowsum(P dP) = rowsum(dO out) are the whole attention's. With a softcap,
/// dS is multiplied by the cap's slope 1 - tanh² at each score.
AttentionGradients attentionGrad(const HostTensor &q, const HostTensor &k,
                                 const HostTensor &v, const HostTensor &dout,
                                 const HostTensor *mask,
                                 const HostTensor *qPositions,
                                 const HostTensor *kPositions, float scale,
                                 bool causal, const HostTensor *out,
                                 const HostTensor *lse, float softcap,
                                 int64_t window, const HostTensor *alibi) {
  ProfileScope profile("attention_grad");
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2],
          dim = q.shape[3];
  int64_t kvHeads = k.shape[1], kvSeq = k.shape[2], vDim = v.shape[3];
  int64_t group = heads / kvHeads;
  AttentionGradients grads;
  grads.q = HostTensor(q.dtype, q.shape);
  grads.k = HostTensor(k.dtype, k.shape);
  grads.v = HostTensor(v.dtype, v.shape);
  AttentionMasks masks(mask, qPositions, kPositions, causal, softcap, window,
                       alibi, {batch, heads, seq, kvSeq});
  int64_t most = std::min(seq, kAttentionRows) * kvSeq;
  std::vector<float> probs(most), dprobs(most), slopes(softcap > 0 ? most : 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t kvh = h / group;
      int64_t qBase = (b * heads + h) * seq,
              kvBase = (b * kvHeads + kvh) * kvSeq;
      const float *qp = q.floats.data() + qBase * dim;
      const float *dop = dout.floats.data() + qBase * vDim;
      const float *kp = k.floats.data() + kvBase * dim;
      const float *vp = v.floats.data() + kvBase * vDim;
      float *dqp = grads.q.floats.data() + qBase * dim;
      float *dkp = grads.k.floats.data() + kvBase * dim;
      float *dvp = grads.v.floats.data() + kvBase * vDim;
      for (int64_t i0 = 0; i0 < seq; i0 += kAttentionRows) {
        int64_t rows = std::min(kAttentionRows, seq - i0);
        int64_t keys = masks.keysFor(i0, rows, kvSeq);
        if (keys == 0)
          continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, dim,
                    scale, qp + i0 * dim, dim, kp, dim, 0.0f, probs.data(),
                    keys);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, vDim,
                    1.0f, dop + i0 * vDim, vDim, vp, vDim, 0.0f, dprobs.data(),
                    keys);
        parallelFor(rows, std::max<int64_t>(1, kGrain / (8 * keys)),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t r = begin; r < end; ++r) {
                        float *p = probs.data() + r * keys;
                        float *dp = dprobs.data() + r * keys;
                        float *slope =
                            softcap > 0 ? slopes.data() + r * keys : nullptr;
                        double d = 0;
                        if (lse) {
                          int64_t row = qBase + i0 + r;
                          masks.probabilitiesRow(b, h, i0 + r, p, keys,
                                                 lse->floats[row], slope);
                          const float *o = out->floats.data() + row * vDim;
                          const float *g = dop + (i0 + r) * vDim;
                          for (int64_t e = 0; e < vDim; ++e)
                            d += double(o[e]) * g[e];
                        } else if (masks.softmaxRow(b, h, i0 + r, p, keys,
                                                    slope) ==
                                   -std::numeric_limits<float>::infinity()) {
                          // Every key masked: the row contributes nothing.
                          std::fill(p, p + keys, 0.0f);
                          std::fill(dp, dp + keys, 0.0f);
                          continue;
                        } else {
                          for (int64_t j = 0; j < keys; ++j)
                            d += double(p[j]) * dp[j];
                        }
                        for (int64_t j = 0; j < keys; ++j)
                          dp[j] = p[j] * (dp[j] - float(d));
                        // Keys past a causal row's last are not capped (their
                        // p is 0), so their slope is not read.
                        if (slope)
                          for (int64_t j = 0, e = masks.visible(i0 + r, keys);
                               j < e; ++j)
                            dp[j] *= slope[j];
                      }
                    });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, dim, keys,
                    scale, dprobs.data(), keys, kp, dim, 0.0f, dqp + i0 * dim,
                    dim);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, dim, rows,
                    scale, dprobs.data(), keys, qp + i0 * dim, dim, 1.0f, dkp,
                    dim);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, vDim, rows,
                    1.0f, probs.data(), keys, dop + i0 * vDim, vDim, 1.0f, dvp,
                    vDim);
      }
    }
  for (HostTensor *grad : {&grads.q, &grads.k, &grads.v})
    if (grad->dtype != DType::F32)
      for (float &value : grad->floats)
        value = roundTo(grad->dtype, value);
  return grads;
}

absl::StatusOr<HostTensor> gather(const HostTensor &input,
                                  const HostTensor &indices, int64_t axis) {
  ProfileScope profile("gather");
  Shape shape(input.shape.begin(), input.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), input.shape.begin() + axis + 1, input.shape.end());
  HostTensor out = HostTensor::uninitialized(input.dtype, shape);
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

HostTensor reshape(HostTensor &&input, const Shape &shape) {
  HostTensor out = std::move(input);
  out.shape = shape;
  return out;
}

HostTensor transpose(const HostTensor &input,
                     const std::vector<int64_t> &perm) {
  ProfileScope profile("transpose");
  Shape shape;
  std::vector<int64_t> own = stridesOf(input.shape), strides;
  for (int64_t d : perm) {
    shape.push_back(input.shape[d]);
    strides.push_back(own[d]);
  }
  return gatherStrided(input, shape, 0, strides);
}

HostTensor slice(const HostTensor &input, const std::vector<int64_t> &starts,
                 const std::vector<int64_t> &limits,
                 const std::vector<int64_t> &steps) {
  ProfileScope profile("slice");
  Shape shape;
  int64_t base = 0;
  std::vector<int64_t> own = stridesOf(input.shape), strides;
  for (int64_t d = 0; d < input.rank(); ++d) {
    shape.push_back((limits[d] - starts[d] + steps[d] - 1) / steps[d]);
    base += starts[d] * own[d];
    strides.push_back(own[d] * steps[d]);
  }
  return gatherStrided(input, shape, base, strides);
}

HostTensor concat(const std::vector<const HostTensor *> &inputs, int64_t axis) {
  ProfileScope profile("concat");
  Shape shape = inputs.front()->shape;
  shape[axis] = 0;
  for (const HostTensor *input : inputs)
    shape[axis] += input->shape[axis];
  HostTensor out = HostTensor::uninitialized(inputs.front()->dtype, shape);
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
  ProfileScope profile("split");
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
  ProfileScope profile("broadcast_to");
  return gatherStrided(input, shape, 0, broadcastStrides(input.shape, shape));
}

HostTensor trilu(const HostTensor &input, bool upper, int64_t diagonal) {
  ProfileScope profile("trilu");
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

HostTensor cumsum(const HostTensor &input, int64_t axis, bool exclusive,
                  bool reverse) {
  ProfileScope profile("cumsum");
  HostTensor out = HostTensor::uninitialized(input.dtype, input.shape);
  int64_t length = input.shape[axis], inner = 1;
  for (int64_t d = axis + 1; d < input.rank(); ++d)
    inner *= input.shape[d];
  int64_t lines = length ? input.numel() / length : 0;
  for (int64_t line = 0; line < lines; ++line) {
    int64_t base = (line / inner) * length * inner + line % inner;
    // Floats sum in double, each result rounded to the stored type;
    // integers exactly.
    double sum = 0;
    int64_t count = 0;
    for (int64_t k = 0; k < length; ++k) {
      int64_t at = base + (reverse ? length - 1 - k : k) * inner;
      if (out.isFloat()) {
        double x = input.floats[at];
        if (!exclusive)
          sum += x;
        out.floats[at] = roundTo(out.dtype, static_cast<float>(sum));
        if (exclusive)
          sum += x;
      } else {
        int64_t x = input.ints[at];
        if (!exclusive)
          count += x;
        out.ints[at] = count;
        if (exclusive)
          count += x;
      }
    }
  }
  return out;
}

HostTensor iota(DType dtype, const Shape &shape, int64_t dim) {
  ProfileScope profile("iota");
  HostTensor out = HostTensor::uninitialized(dtype, shape);
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
  ProfileScope profile("cross_entropy");
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

//===- CpuKernels.h - Reference CPU kernels for weft ops --------*- C++ -*-===//
//
// Part of the Weft project.
//
// One function per weft op semantics, on HostTensors. Shapes are assumed
// verified (the compiler checked them); what only data can get wrong, such as
// an out-of-range index, is reported as a Status. GEMMs go through BLAS.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CPUKERNELS_H
#define WEFT_RUNTIME_CPUKERNELS_H

#include "weft/runtime/HostTensor.h"

#include "absl/status/statusor.h"

#include <optional>

namespace weft::rt {

enum class BinaryKind { Add, Sub, Mul, Div, Pow, Max, Min };
enum class CompareKind { Eq, Ne, Lt, Le, Gt, Ge };
enum class UnaryKind {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Erf,
  Sin,
  Cos,
  Sigmoid,
  Relu,
  Abs,
  Silu,
  GeluErf,
  GeluTanh
};
enum class ReduceKind { Sum, Mean, Max, LogSumExp };
enum class LossReduction { None, Mean, Sum };

/// numpy broadcast of two shapes; std::nullopt if they do not broadcast.
std::optional<Shape> broadcastShape(const Shape &a, const Shape &b);

HostTensor binary(BinaryKind kind, const HostTensor &lhs, const HostTensor &rhs);
HostTensor compare(CompareKind kind, const HostTensor &lhs, const HostTensor &rhs);
HostTensor where(const HostTensor &cond, const HostTensor &lhs,
                 const HostTensor &rhs);
HostTensor unary(UnaryKind kind, const HostTensor &input);
HostTensor cast(const HostTensor &input, DType to);

HostTensor reduce(ReduceKind kind, const HostTensor &input,
                  const std::vector<int64_t> &axes, bool keepDims);
/// Softmax (or its log) along `axis` of `scale · input`; with `causal`,
/// entries past the diagonal of the last two dimensions (axis is the last)
/// are masked out first.
HostTensor softmax(const HostTensor &input, int64_t axis, bool logSoftmax,
                   float scale = 1.0f, bool causal = false);
/// Normalizes over dimensions [axis, rank); `bias` may be null; with `rms`,
/// the root mean square normalization of LLaMA (no centering, no bias).
HostTensor normalize(const HostTensor &input, const HostTensor &scale,
                     const HostTensor *bias, int64_t axis, float epsilon,
                     bool rms);

HostTensor matmul(const HostTensor &lhs, const HostTensor &rhs,
                  bool transposeLhs, bool transposeRhs);
HostTensor linear(const HostTensor &input, const HostTensor &weight,
                  const HostTensor *bias, bool transposeWeight);
/// softmax(scale·QKᵀ + mask)·V per head, with grouped KV heads. A positive
/// `softcap` caps the scaled scores before the mask: softcap·tanh(s/softcap)
/// (Gemma 2); 0 leaves them as they are. A positive `window` (with
/// `causal`) is a sliding window: query i sees keys i - window + 1 to i.
/// `alibi`, if given, holds one f32 slope m_h per query head: ALiBi's bias
/// -m_h |i - j| is added to the (capped) scaled scores before the mask.
HostTensor attention(const HostTensor &q, const HostTensor &k,
                     const HostTensor &v, const HostTensor *mask, float scale,
                     bool causal, float softcap = 0.0f, int64_t window = 0,
                     const HostTensor *alibi = nullptr);

/// A value of a block of keys (weft.attention_block): the attention output
/// over this block and, per query row, the log-sum-exp of its scaled, masked
/// scores (f32, [batch, heads, seq, 1]). With positions, a causal mask hides
/// key j from query i when kPositions[j] > qPositions[i], and a window when
/// kPositions[j] <= qPositions[i] - window, and ALiBi's distance is
/// |qPositions[i] - kPositions[j]|. A row whose keys are all masked gets a
/// zero output and lse = -1e30.
struct AttentionBlock {
  HostTensor output;
  HostTensor lse;
};
AttentionBlock attentionBlock(const HostTensor &q, const HostTensor &k,
                              const HostTensor &v, const HostTensor *mask,
                              const HostTensor *qPositions,
                              const HostTensor *kPositions, float scale,
                              bool causal, float softcap = 0.0f,
                              int64_t window = 0,
                              const HostTensor *alibi = nullptr);

/// Attention's gradients (weft.attention_grad) with respect to q, k and v,
/// given the output's gradient `dout`; masks and positions as in
/// attentionBlock. A query row whose keys are all masked contributes
/// nothing. With the forward's `out` and `lse` (both or neither), the
/// gradients of one block of keys of a larger attention (ring attention's
/// backward step): `dq` is the block's part of the queries' gradient.
struct AttentionGradients {
  HostTensor q, k, v;
};
AttentionGradients
attentionGrad(const HostTensor &q, const HostTensor &k, const HostTensor &v,
              const HostTensor &dout, const HostTensor *mask,
              const HostTensor *qPositions, const HostTensor *kPositions,
              float scale, bool causal, const HostTensor *out,
              const HostTensor *lse, float softcap = 0.0f, int64_t window = 0,
              const HostTensor *alibi = nullptr);

/// Gathers along `axis`; negative indices count from the end (as ONNX).
absl::StatusOr<HostTensor> gather(const HostTensor &input,
                                  const HostTensor &indices, int64_t axis);
HostTensor reshape(const HostTensor &input, const Shape &shape);
/// `input`'s elements under a new shape: the buffer moves, nothing is copied.
HostTensor reshape(HostTensor &&input, const Shape &shape);
/// Frees a tensor a program no longer reads.
inline void release(HostTensor &tensor) { tensor = HostTensor(); }
HostTensor transpose(const HostTensor &input, const std::vector<int64_t> &perm);
HostTensor slice(const HostTensor &input, const std::vector<int64_t> &starts,
                 const std::vector<int64_t> &limits,
                 const std::vector<int64_t> &strides);
HostTensor concat(const std::vector<const HostTensor *> &inputs, int64_t axis);
std::vector<HostTensor> split(const HostTensor &input, int64_t axis,
                              const std::vector<int64_t> &sizes);
HostTensor broadcastTo(const HostTensor &input, const Shape &shape);
HostTensor trilu(const HostTensor &input, bool upper, int64_t diagonal);
/// The running sum along `axis` (ONNX CumSum): of the elements before each
/// (`exclusive`) or up to it, from the end with `reverse`.
HostTensor cumsum(const HostTensor &input, int64_t axis, bool exclusive,
                  bool reverse);
HostTensor iota(DType dtype, const Shape &shape, int64_t dim);
absl::StatusOr<HostTensor> crossEntropy(const HostTensor &logits,
                                        const HostTensor &labels,
                                        LossReduction reduction,
                                        std::optional<int64_t> ignoreIndex);

} // namespace weft::rt

#endif // WEFT_RUNTIME_CPUKERNELS_H

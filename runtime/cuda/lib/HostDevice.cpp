//===- HostDevice.cpp - The CUDA backend's API on the CPU -----------------===//
//
// Part of the Weft project.
//
// Weft::WeftRuntimeCudaEmulation: a generated CUDA program compiled as C++
// runs here with its arena in host memory. Every entry point converts the
// arena's bytes to host tensors, runs the CPU kernel (the interpreter's),
// and writes the result's bytes back; a GEMM's GELU epilogue is the CPU's
// GELU on the GEMM's rounded output, as the unfused program computes it.
// Collectives go through the host communicator; events are null.
//
//===----------------------------------------------------------------------===//

#include "Bytes.h"

#include "weft/runtime/Launch.h"

#include "absl/strings/str_cat.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

using namespace weft::rt;
using namespace weft::rt::cuda;

void cuda::check(const Context &ctx, cudaError_t error, const char *call) {
  if (error != cudaSuccess)
    fail(ctx, absl::StrCat(call, " failed (", int(error), ")"));
}

void cuda::checkLaunch(const Context &) {}

void cuda::upload(Context &ctx, const HostTensor &host,
                  const DeviceTensor &out) {
  std::vector<char> bytes = toDeviceBytes(ctx, host, out);
  std::memcpy(out.data, bytes.data(), bytes.size());
}

HostTensor cuda::download(Context &ctx, const DeviceTensor &t) {
  return fromDeviceBytes(ctx, static_cast<const char *>(t.data), t);
}

void cuda::waitFor(Context &, cudaEvent_t) {}

namespace {

/// The CPU kernel's result, stored as `out` (its dtype and shape).
void store(Context &ctx, HostTensor value, const DeviceTensor &out) {
  if (value.shape != out.shape && value.numel() == out.numel())
    value = reshape(value, out.shape);
  upload(ctx, asType(value, out.dtype), out);
}

RankContext hostContext(Context &ctx) {
  if (!ctx.hostCommunicator)
    fail(ctx, "no host communicator");
  return RankContext{ctx.rank, ctx.mesh, ctx.hostCommunicator,
                     ctx.weightsDir};
}

} // namespace

void cuda::linear(Context &ctx, const DeviceTensor &x, const DeviceTensor &w,
                  const DeviceTensor *bias, bool transposeWeight,
                  Epilogue epilogue, const DeviceTensor &out) {
  HostTensor b;
  if (bias)
    b = download(ctx, *bias);
  HostTensor y = rt::linear(download(ctx, x), download(ctx, w),
                            bias ? &b : nullptr, transposeWeight);
  if (epilogue == Epilogue::Gelu || epilogue == Epilogue::GeluBias)
    y = unary(UnaryKind::GeluTanh, y);
  store(ctx, y, out);
}

void cuda::matmul(Context &ctx, const DeviceTensor &a, const DeviceTensor &b,
                  bool transposeA, bool transposeB, const DeviceTensor &out) {
  store(ctx,
        rt::matmul(download(ctx, a), download(ctx, b), transposeA, transposeB),
        out);
}

void cuda::attention(Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
                     const DeviceTensor &v, const DeviceTensor *mask,
                     float scale, bool causal, const DeviceTensor &out,
                     float softcap, int64_t window, const DeviceTensor *alibi) {
  HostTensor m, slopes;
  if (mask)
    m = download(ctx, *mask);
  if (alibi)
    slopes = download(ctx, *alibi);
  store(ctx,
        rt::attention(download(ctx, q), download(ctx, k), download(ctx, v),
                      mask ? &m : nullptr, scale, causal, softcap, window,
                      alibi ? &slopes : nullptr),
        out);
}

namespace {
/// An attention's optional mask, positions and ALiBi slopes, downloaded.
struct AttentionExtras {
  AttentionExtras(Context &ctx, const DeviceTensor *mask,
                  const DeviceTensor *qPositions,
                  const DeviceTensor *kPositions, const DeviceTensor *alibi) {
    if (mask)
      m = download(ctx, *mask);
    if (alibi)
      slopes = download(ctx, *alibi);
    hasSlopes = alibi;
    if (qPositions) {
      qp = download(ctx, *qPositions);
      kp = download(ctx, *kPositions);
    }
    hasMask = mask;
    hasPositions = qPositions;
  }
  const HostTensor *mask() const { return hasMask ? &m : nullptr; }
  const HostTensor *qPositions() const { return hasPositions ? &qp : nullptr; }
  const HostTensor *kPositions() const { return hasPositions ? &kp : nullptr; }
  const HostTensor *alibi() const { return hasSlopes ? &slopes : nullptr; }

  HostTensor m, qp, kp, slopes;
  bool hasMask = false, hasPositions = false, hasSlopes = false;
};
} // namespace

void cuda::attentionBlock(Context &ctx, const DeviceTensor &q,
                          const DeviceTensor &k, const DeviceTensor &v,
                          const DeviceTensor *mask,
                          const DeviceTensor *qPositions,
                          const DeviceTensor *kPositions, float scale,
                          bool causal, const DeviceTensor &out,
                          const DeviceTensor &lse, float softcap,
                          int64_t window, const DeviceTensor *alibi) {
  AttentionExtras extras(ctx, mask, qPositions, kPositions, alibi);
  rt::AttentionBlock block = rt::attentionBlock(
      download(ctx, q), download(ctx, k), download(ctx, v), extras.mask(),
      extras.qPositions(), extras.kPositions(), scale, causal, softcap, window,
      extras.alibi());
  store(ctx, block.output, out);
  store(ctx, block.lse, lse);
}

void cuda::attentionGrad(
    Context &ctx, const DeviceTensor &q, const DeviceTensor &k,
    const DeviceTensor &v, const DeviceTensor &dout, const DeviceTensor *mask,
    const DeviceTensor *qPositions, const DeviceTensor *kPositions,
    const DeviceTensor *out, const DeviceTensor *lse, float scale, bool causal,
    const DeviceTensor &dq, const DeviceTensor &dk, const DeviceTensor &dv,
    float softcap, int64_t window, const DeviceTensor *alibi) {
  AttentionExtras extras(ctx, mask, qPositions, kPositions, alibi);
  HostTensor saved[2];
  if (out) {
    saved[0] = download(ctx, *out);
    saved[1] = download(ctx, *lse);
  }
  rt::AttentionGradients grads = rt::attentionGrad(
      download(ctx, q), download(ctx, k), download(ctx, v), download(ctx, dout),
      extras.mask(), extras.qPositions(), extras.kPositions(), scale, causal,
      out ? &saved[0] : nullptr, out ? &saved[1] : nullptr, softcap, window,
      extras.alibi());
  store(ctx, grads.q, dq);
  store(ctx, grads.k, dk);
  store(ctx, grads.v, dv);
}

void cuda::normalize(Context &ctx, const DeviceTensor &x,
                     const DeviceTensor &scale, const DeviceTensor *bias,
                     int64_t axis, float epsilon, bool rms,
                     const DeviceTensor &out) {
  HostTensor b;
  if (bias)
    b = download(ctx, *bias);
  store(ctx,
        rt::normalize(download(ctx, x), download(ctx, scale),
                      bias ? &b : nullptr, axis, epsilon, rms),
        out);
}

void cuda::softmax(Context &ctx, const DeviceTensor &x, int64_t axis, bool log,
                   float scale, bool causal, const DeviceTensor &out) {
  store(ctx, rt::softmax(download(ctx, x), axis, log, scale, causal), out);
}

void cuda::reduce(Context &ctx, ReduceKind kind, const DeviceTensor &x,
                  const std::vector<int64_t> &axes, const DeviceTensor &out) {
  store(ctx, rt::reduce(kind, download(ctx, x), axes, false), out);
}

void cuda::transpose(Context &ctx, const DeviceTensor &x,
                     const std::vector<int64_t> &perm,
                     const DeviceTensor &out) {
  store(ctx, rt::transpose(download(ctx, x), perm), out);
}

void cuda::slice(Context &ctx, const DeviceTensor &x,
                 const std::vector<int64_t> &starts,
                 const std::vector<int64_t> &strides,
                 const DeviceTensor &out) {
  std::vector<int64_t> limits;
  for (size_t d = 0; d < starts.size(); ++d)
    limits.push_back(starts[d] + (out.shape[d] - 1) * strides[d] + 1);
  store(ctx, rt::slice(download(ctx, x), starts, limits, strides), out);
}

void cuda::insert(Context &ctx, const DeviceTensor &x, int64_t axis,
                  int64_t offset, const DeviceTensor &out) {
  // Rows of x land at [offset, offset + x's size) along `axis` of out.
  int64_t outer = 1, inner = dtypeBytes(x.dtype);
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  int64_t rows = x.shape[size_t(axis)], outRows = out.shape[size_t(axis)];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<char *>(out.data) +
                    (o * outRows + offset) * inner,
                static_cast<const char *>(x.data) + o * rows * inner,
                size_t(rows * inner));
}

void cuda::gather(Context &ctx, const DeviceTensor &x,
                  const DeviceTensor &indices, int64_t axis,
                  const DeviceTensor &out) {
  store(ctx,
        valueOrThrow(rt::gather(download(ctx, x), download(ctx, indices), axis)),
        out);
}

void cuda::crossEntropy(Context &ctx, const DeviceTensor &logits,
                        const DeviceTensor &labels, LossReduction reduction,
                        std::optional<int64_t> ignoreIndex,
                        const DeviceTensor &out) {
  store(ctx,
        valueOrThrow(rt::crossEntropy(download(ctx, logits),
                                      download(ctx, labels), reduction,
                                      ignoreIndex)),
        out);
}

void cuda::trilu(Context &ctx, const DeviceTensor &x, bool upper,
                 int64_t diagonal, const DeviceTensor &out) {
  store(ctx, rt::trilu(download(ctx, x), upper, diagonal), out);
}

void cuda::cumsum(Context &ctx, const DeviceTensor &x, int64_t axis,
                  bool exclusive, bool reverse, const DeviceTensor &out) {
  store(ctx, rt::cumsum(download(ctx, x), axis, exclusive, reverse), out);
}

void cuda::allSlice(Context &ctx, const DeviceTensor &x,
                    const std::vector<std::string> &axes, int64_t dim,
                    bool zigzag, const DeviceTensor &out) {
  RankContext host = hostContext(ctx);
  store(ctx, rt::allSlice(host, download(ctx, x), axes, dim, zigzag), out);
}

cudaEvent_t cuda::allReduce(Context &ctx, const DeviceTensor &x, ReduceOp op,
                            const std::vector<std::string> &axes,
                            const DeviceTensor &out, Codec codec) {
  return allReduce(ctx, x, op, axes, {}, out, codec);
}

cudaEvent_t cuda::allReduce(Context &ctx, const DeviceTensor &x, ReduceOp op,
                            const std::vector<std::string> &axes,
                            const std::vector<int64_t> &members,
                            const DeviceTensor &out, Codec codec) {
  RankContext host = hostContext(ctx);
  store(ctx, rt::allReduce(host, download(ctx, x), op, axes, codec, members),
        out);
  return nullptr;
}

cudaEvent_t cuda::allGather(Context &ctx, const DeviceTensor &x,
                            const std::vector<std::string> &axes, int64_t dim,
                            bool zigzag, const DeviceTensor &out, Codec codec) {
  RankContext host = hostContext(ctx);
  store(ctx, rt::allGather(host, download(ctx, x), axes, dim, zigzag, codec),
        out);
  return nullptr;
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
  if (!kept.data || kept.step != ctx.pipelineSteps || kept.block != at ||
      kept.bytes != out.bytes()) {
    allGather(ctx, x, axes, dim, zigzag, out, codec);
    if (!kept.data || kept.bytes != out.bytes()) {
      kept.data = std::shared_ptr<void>(
          new char[size_t(std::max<int64_t>(out.bytes(), 1))],
          [](void *p) { delete[] static_cast<char *>(p); });
      kept.bytes = out.bytes();
    }
    std::memcpy(kept.data.get(), out.data, size_t(kept.bytes));
    kept.step = ctx.pipelineSteps;
    kept.block = at;
    return nullptr;
  }
  std::memcpy(out.data, kept.data.get(), size_t(kept.bytes));
  return nullptr;
}

cudaEvent_t cuda::reduceScatter(Context &ctx, const DeviceTensor &x,
                                ReduceOp op,
                                const std::vector<std::string> &axes,
                                int64_t dim, bool zigzag,
                                const DeviceTensor &out, Codec codec) {
  RankContext host = hostContext(ctx);
  store(ctx,
        rt::reduceScatter(host, download(ctx, x), op, axes, dim, zigzag, codec),
        out);
  return nullptr;
}

cudaEvent_t cuda::allToAll(Context &ctx, const DeviceTensor &x,
                           const std::vector<std::string> &axes,
                           int64_t splitDim, int64_t concatDim,
                           const DeviceTensor &out, Codec codec) {
  RankContext host = hostContext(ctx);
  store(ctx,
        rt::allToAll(host, download(ctx, x), axes, splitDim, concatDim, codec),
        out);
  return nullptr;
}

cudaEvent_t cuda::permute(Context &ctx, const DeviceTensor &x,
                          const std::vector<std::string> &axes, int64_t shift,
                          const DeviceTensor &out, Codec codec) {
  RankContext host = hostContext(ctx);
  store(ctx, rt::permute(host, download(ctx, x), axes, shift, codec), out);
  return nullptr;
}

namespace {

/// One rank's arena in host memory.
struct HostArena {
  explicit HostArena(int64_t bytes)
      : data(static_cast<char *>(
            std::aligned_alloc(256, size_t((std::max<int64_t>(bytes, 1) + 255) /
                                           256 * 256)))) {}
  ~HostArena() { std::free(data); }
  char *data;
};

/// A pipelined program's rank: its arena in host memory, its collectives
/// through the host communicator.
class HostRank : public DeviceRank {
public:
  HostRank(const RankContext &rankCtx, int64_t arenaBytes) : arena(arenaBytes) {
    ctx.rank = rankCtx.rank;
    ctx.mesh = rankCtx.mesh;
    ctx.weightsDir = rankCtx.weightsDir;
    ctx.arena = arena.data;
    ctx.hostCommunicator = rankCtx.comm;
  }
  Context &context() override { return ctx; }

private:
  HostArena arena;
  Context ctx;
};

} // namespace

int cuda::programMain(int argc, char **argv, const CudaProgramSpec &spec) {
  return runProgram(
      argc, argv, spec.mesh, spec.inputs, spec.outputs,
      [&](RankContext &rankCtx, const LaunchInfo &, bool,
          const std::vector<HostTensor> &inputs, int64_t &) {
        HostArena arena(spec.arenaBytes);
        Context ctx;
        ctx.rank = rankCtx.rank;
        ctx.mesh = spec.mesh;
        ctx.weightsDir = rankCtx.weightsDir;
        ctx.arena = arena.data;
        ctx.hostCommunicator = rankCtx.comm;
        return spec.function(ctx, inputs);
      },
      spec.inputTypes);
}

std::function<std::shared_ptr<RankBackend>(RankContext &)>
cuda::deviceRankSetup(const DeviceRankSpec &spec, std::optional<int>) {
  return [arenaBytes = spec.arenaBytes](
             RankContext &rankCtx) -> std::shared_ptr<RankBackend> {
    return std::make_shared<HostRank>(rankCtx, arenaBytes);
  };
}

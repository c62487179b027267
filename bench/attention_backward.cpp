//===- attention_backward.cpp - The fused attention backward on the CPU ---===//
//
// Part of the Weft project.
//
// Times, in one run, attention's backward two ways with the CPU runtime's
// kernels:
//   fused       rt::attentionGrad, what weft.attention_grad runs (since
//               2026-11-29): blocks of 128 query rows against the keys they
//               see, nothing of size S x S;
//   decomposed  what a training step ran before: the scores Q Kᵀ, a causal
//               softmax, then dV = Pᵀ dO, dP = dO Vᵀ, dS = P (dP - Σ P dP),
//               dQ = s dS K, dK = s dSᵀ Q, each one runtime kernel over the
//               whole [batch, heads, S, S] tensors (the interpreter's ops).
// It prints each side's best of three, their ratio, the largest difference
// between the two sides' gradients, and the S x S bytes the decomposed side
// holds. Figures are measured, never compared against a bound.
//
//   build/bin/attention-backward-bench
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/CpuKernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

using namespace weft::rt;

namespace {

HostTensor randomTensor(Shape shape, unsigned seed) {
  HostTensor tensor(DType::F32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (float &value : tensor.floats)
    value = normal(rng);
  return tensor;
}

double bestSeconds(const std::function<void()> &run) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return best;
}

AttentionGradients decomposed(const HostTensor &q, const HostTensor &k,
                              const HostTensor &v, const HostTensor &dout,
                              float scale) {
  HostTensor s = HostTensor(DType::F32, {});
  s.floats[0] = scale;
  HostTensor scores = matmul(q, k, false, true);
  HostTensor probs = softmax(scores, 3, false, scale, /*causal=*/true);
  AttentionGradients g;
  g.v = matmul(probs, dout, true, false);
  HostTensor dprobs = matmul(dout, v, false, true);
  HostTensor rows = reduce(ReduceKind::Sum,
                           binary(BinaryKind::Mul, dprobs, probs), {3}, true);
  HostTensor dscores =
      binary(BinaryKind::Mul, probs, binary(BinaryKind::Sub, dprobs, rows));
  g.q = binary(BinaryKind::Mul, matmul(dscores, k, false, false), s);
  g.k = binary(BinaryKind::Mul, matmul(dscores, q, true, false), s);
  return g;
}

double largestDifference(const AttentionGradients &a,
                         const AttentionGradients &b) {
  double most = 0;
  for (auto [x, y] : {std::pair{&a.q, &b.q}, {&a.k, &b.k}, {&a.v, &b.v}})
    for (int64_t i = 0; i < x->numel(); ++i)
      most = std::max(most, double(std::fabs(x->floats[i] - y->floats[i])));
  return most;
}

} // namespace

int main() {
  struct Case {
    const char *name;
    int64_t batch, heads, seq, dim;
  };
  // GPT-2-small's attention (12 heads of 64) at three sequence lengths,
  // causal.
  const Case cases[] = {{"gpt2 heads, S=512", 1, 12, 512, 64},
                        {"gpt2 heads, S=1024", 1, 12, 1024, 64},
                        {"gpt2 heads, S=2048", 1, 12, 2048, 64}};
  std::printf("%-22s %12s %14s %8s %16s %14s\n", "case (causal)", "fused ms",
              "decomposed ms", "ratio", "S x S MiB held", "max |diff|");
  for (const Case &c : cases) {
    Shape shape = {c.batch, c.heads, c.seq, c.dim};
    HostTensor q = randomTensor(shape, 1), k = randomTensor(shape, 2),
               v = randomTensor(shape, 3), dout = randomTensor(shape, 4);
    float scale = 1.0f / std::sqrt(float(c.dim));
    AttentionGradients fusedGrads, decomposedGrads;
    double fused = bestSeconds([&] {
      fusedGrads = attentionGrad(q, k, v, dout, nullptr, nullptr, nullptr,
                                 scale, true, nullptr, nullptr);
    });
    double unfused = bestSeconds(
        [&] { decomposedGrads = decomposed(q, k, v, dout, scale); });
    // Scores, probabilities, dP and dS are alive together at the peak.
    double held =
        4.0 * double(c.batch * c.heads * c.seq * c.seq) * 4 / (1024.0 * 1024.0);
    std::printf("%-22s %12.1f %14.1f %8.2f %16.0f %14.2e\n", c.name,
                fused * 1e3, unfused * 1e3, unfused / fused, held,
                largestDifference(fusedGrads, decomposedGrads));
  }
  return 0;
}

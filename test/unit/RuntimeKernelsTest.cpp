//===- RuntimeKernelsTest.cpp - The runtime's CPU kernels -----------------===//
//
// Part of the Weft project.
//
// Large inputs take the multi-threaded paths; each result is compared with a
// plain scalar computation.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Communicator.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/NpyFile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
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

/// Expects `grads` to be the slopes of sum(forward() * dout) in q, k and v
/// (central differences, at every `stride`-th element of each): `forward`
/// computes the attention from q, k and v as they are when it is called.
void expectAttentionSlopes(HostTensor &q, HostTensor &k, HostTensor &v,
                           const HostTensor &dout,
                           const AttentionGradients &grads,
                           const std::function<HostTensor()> &forward,
                           int64_t stride) {
  auto loss = [&]() {
    HostTensor out = forward();
    double total = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      total += double(out.floats[i]) * dout.floats[i];
    return total;
  };
  HostTensor *inputs[] = {&q, &k, &v};
  const HostTensor *slopes[] = {&grads.q, &grads.k, &grads.v};
  for (int t = 0; t < 3; ++t)
    for (int64_t i = 0; i < inputs[t]->numel(); i += stride) {
      float kept = inputs[t]->floats[i];
      const float eps = 1e-2f;
      inputs[t]->floats[i] = kept + eps;
      double up = loss();
      inputs[t]->floats[i] = kept - eps;
      double down = loss();
      inputs[t]->floats[i] = kept;
      EXPECT_NEAR(slopes[t]->floats[i], (up - down) / (2 * eps), 2e-3)
          << "input " << t << " element " << i;
    }
}

TEST(RuntimeKernels, LargeUnaryAndBinaryMatchScalar) {
  HostTensor x = randomTensor({256, 512}, 1), y = randomTensor({256, 512}, 2);
  HostTensor t = unary(UnaryKind::Tanh, x);
  HostTensor s = binary(BinaryKind::Add, x, y);
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(t.floats[i], std::tanh(x.floats[i])) << i;
    ASSERT_EQ(s.floats[i], x.floats[i] + y.floats[i]) << i;
  }
}

TEST(RuntimeKernels, BroadcastingBinary) {
  HostTensor a(DType::F32, {2, 3}), b(DType::F32, {3});
  for (int i = 0; i < 6; ++i)
    a.floats[i] = static_cast<float>(i);
  b.floats = {10, 20, 30};
  HostTensor sum = binary(BinaryKind::Add, a, b);
  EXPECT_EQ(sum.shape, Shape({2, 3}));
  EXPECT_EQ(sum.floats, std::vector<float>({10, 21, 32, 13, 24, 35}));
}

TEST(RuntimeKernels, LargeSoftmaxRowsSumToOne) {
  HostTensor x = randomTensor({4096, 64}, 3);
  HostTensor p = softmax(x, 1, false);
  for (int64_t row = 0; row < 4096; ++row) {
    double sum = 0, max = -1e30;
    for (int64_t j = 0; j < 64; ++j)
      max = std::max<double>(max, x.floats[row * 64 + j]);
    for (int64_t j = 0; j < 64; ++j)
      sum += std::exp(x.floats[row * 64 + j] - max);
    for (int64_t j = 0; j < 64; ++j)
      ASSERT_NEAR(p.floats[row * 64 + j], std::exp(x.floats[row * 64 + j] - max) / sum,
                  1e-6)
          << row;
  }
}

// Over rows of logits far past exp's range (a plain sum of exponentials
// overflows), over a middle axis, and over a row of -inf (a fully masked
// row, whose log-sum-exp is -inf, not NaN).
TEST(RuntimeKernels, LogSumExpIsStable) {
  HostTensor x = randomTensor({3, 5, 7}, 5);
  for (int64_t j = 0; j < 7; ++j)
    x.floats[j] = 1000.0f + float(j);
  for (int64_t j = 0; j < 7; ++j)
    x.floats[7 + j] = -std::numeric_limits<float>::infinity();
  HostTensor rows = reduce(ReduceKind::LogSumExp, x, {2}, true);
  ASSERT_EQ(rows.shape, (Shape{3, 5, 1}));
  for (int64_t r = 0; r < 15; ++r) {
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < 7; ++j)
      max = std::max<double>(max, x.floats[r * 7 + j]);
    if (std::isinf(max)) {
      EXPECT_TRUE(std::isinf(rows.floats[r]) && rows.floats[r] < 0) << r;
      continue;
    }
    for (int64_t j = 0; j < 7; ++j)
      sum += std::exp(x.floats[r * 7 + j] - max);
    EXPECT_NEAR(rows.floats[r], max + std::log(sum), 1e-4) << r;
  }
  // 1006 + log(1 + e^-1 + ... + e^-6).
  EXPECT_NEAR(rows.floats[0], 1006.4577628, 1e-3);
  HostTensor middle = reduce(ReduceKind::LogSumExp, x, {1}, false);
  ASSERT_EQ(middle.shape, (Shape{3, 7}));
  for (int64_t b = 1; b < 3; ++b)
    for (int64_t j = 0; j < 7; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < 5; ++i)
        sum += std::exp(double(x.floats[(b * 5 + i) * 7 + j]));
      EXPECT_NEAR(middle.floats[b * 7 + j], std::log(sum), 1e-5) << b << j;
    }
}

TEST(RuntimeKernels, LargeLayerNormMatchesScalar) {
  HostTensor x = randomTensor({2048, 64}, 4), scale = randomTensor({64}, 5),
             bias = randomTensor({64}, 6);
  HostTensor y = normalize(x, scale, &bias, 1, 1e-5f, /*rms=*/false);
  for (int64_t row = 0; row < 2048; ++row) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < 64; ++j)
      mean += x.floats[row * 64 + j];
    mean /= 64;
    for (int64_t j = 0; j < 64; ++j)
      var += std::pow(x.floats[row * 64 + j] - mean, 2);
    var /= 64;
    for (int64_t j = 0; j < 64; ++j) {
      double expected = (x.floats[row * 64 + j] - mean) / std::sqrt(var + 1e-5) *
                            scale.floats[j] +
                        bias.floats[j];
      ASSERT_NEAR(y.floats[row * 64 + j], expected, 1e-4) << row;
    }
  }
}

TEST(RuntimeKernels, GatherCountsNegativeIndicesFromTheEnd) {
  HostTensor table(DType::F32, {4, 2});
  for (int i = 0; i < 8; ++i)
    table.floats[i] = static_cast<float>(i);
  HostTensor indices(DType::I64, {2});
  indices.ints = {-1, 1};
  absl::StatusOr<HostTensor> rows = gather(table, indices, 0);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->floats, std::vector<float>({6, 7, 2, 3}));
  indices.ints = {4, 0};
  EXPECT_FALSE(gather(table, indices, 0).ok());
}

TEST(RuntimeKernels, CausalGroupedQueryAttentionMatchesNaive) {
  // 4 query heads over 2 KV heads: query head h reads KV head h / 2.
  int64_t seq = 5, dim = 3;
  HostTensor q = randomTensor({1, 4, seq, dim}, 7), k = randomTensor({1, 2, seq, dim}, 8),
             v = randomTensor({1, 2, seq, dim}, 9);
  float scale = 0.5f;
  HostTensor out = attention(q, k, v, nullptr, scale, /*causal=*/true);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < seq; ++i) {
      std::vector<double> weights;
      double max = -1e30;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d)
          dot += q.floats[(h * seq + i) * dim + d] * k.floats[((h / 2) * seq + j) * dim + d];
        weights.push_back(dot * scale);
        max = std::max(max, weights.back());
      }
      double sum = 0;
      for (double &w : weights)
        sum += (w = std::exp(w - max));
      for (int64_t d = 0; d < dim; ++d) {
        double expected = 0;
        for (int64_t j = 0; j <= i; ++j)
          expected += weights[j] / sum * v.floats[((h / 2) * seq + j) * dim + d];
        ASSERT_NEAR(out.floats[(h * seq + i) * dim + d], expected, 1e-5)
            << "head " << h << " row " << i;
      }
    }
}

TEST(RuntimeKernels, CausalScaledSoftmaxIsTheMaskedSoftmax) {
  // softmax(scale x) with the entries past the diagonal masked: each row i of
  // the last two dimensions sees columns 0..i only.
  HostTensor x = randomTensor({2, 3, 6, 6}, 11);
  float scale = 0.25f;
  HostTensor p = softmax(x, 3, false, scale, /*causal=*/true);
  HostTensor logp = softmax(x, 3, true, scale, /*causal=*/true);
  for (int64_t r = 0; r < 2 * 3 * 6; ++r) {
    int64_t i = r % 6;
    double max = -1e30, sum = 0;
    for (int64_t j = 0; j <= i; ++j)
      max = std::max<double>(max, scale * x.floats[r * 6 + j]);
    for (int64_t j = 0; j <= i; ++j)
      sum += std::exp(scale * x.floats[r * 6 + j] - max);
    for (int64_t j = 0; j < 6; ++j) {
      double expected =
          j <= i ? std::exp(scale * x.floats[r * 6 + j] - max) / sum : 0.0;
      ASSERT_NEAR(p.floats[r * 6 + j], expected, 1e-6) << r << ", " << j;
      if (j <= i)
        ASSERT_NEAR(logp.floats[r * 6 + j], std::log(expected), 1e-5);
      else
        ASSERT_TRUE(std::isinf(logp.floats[r * 6 + j]));
    }
  }
}

TEST(RuntimeKernels, MergedAttentionBlocksAreAttention) {
  // Causal grouped-query attention over 8 keys equals two blocks of 4 keys
  // (with positions) merged by their log-sum-exps: what ring attention does.
  int64_t seq = 8, half = 4, dim = 3;
  HostTensor q = randomTensor({1, 4, seq, dim}, 21),
             k = randomTensor({1, 2, seq, dim}, 22),
             v = randomTensor({1, 2, seq, dim}, 23);
  float scale = 0.5f;
  HostTensor full = attention(q, k, v, nullptr, scale, /*causal=*/true);
  HostTensor qPos(DType::I64, {seq});
  for (int64_t i = 0; i < seq; ++i)
    qPos.ints[i] = i;
  std::vector<AttentionBlock> blocks;
  for (int64_t b = 0; b < 2; ++b) {
    HostTensor kb = slice(k, {0, 0, b * half, 0}, {1, 2, (b + 1) * half, dim},
                          {1, 1, 1, 1});
    HostTensor vb = slice(v, {0, 0, b * half, 0}, {1, 2, (b + 1) * half, dim},
                          {1, 1, 1, 1});
    HostTensor kPos(DType::I64, {half});
    for (int64_t j = 0; j < half; ++j)
      kPos.ints[j] = b * half + j;
    blocks.push_back(
        attentionBlock(q, kb, vb, nullptr, &qPos, &kPos, scale, true));
  }
  // Rows 0..3 see no key of the second block: zero output, lse -1e30.
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < half; ++i) {
      EXPECT_EQ(blocks[1].lse.floats[h * seq + i], -1e30f);
      for (int64_t d = 0; d < dim; ++d)
        EXPECT_EQ(blocks[1].output.floats[(h * seq + i) * dim + d], 0.0f);
    }
  for (int64_t row = 0; row < 4 * seq; ++row) {
    double a = blocks[0].lse.floats[row], b = blocks[1].lse.floats[row];
    double m = std::max(a, b);
    double lse = m + std::log(std::exp(a - m) + std::exp(b - m));
    for (int64_t d = 0; d < dim; ++d) {
      double merged =
          blocks[0].output.floats[row * dim + d] * std::exp(a - lse) +
          blocks[1].output.floats[row * dim + d] * std::exp(b - lse);
      ASSERT_NEAR(merged, full.floats[row * dim + d], 1e-5) << row << ", " << d;
    }
  }
}

TEST(RuntimeKernels, SixteenBitRounding) {
  // 1 + 2^-8 lies halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(roundToBF16(1.00390625f), 1.0f);
  EXPECT_EQ(roundToBF16(1.01171875f), 1.015625f);
  EXPECT_EQ(roundToF16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(roundToF16(65536.0f)));
  EXPECT_EQ(f16BitsToFloat(floatToF16Bits(5.96046448e-08f)), 5.96046448e-08f);
}

TEST(RuntimeKernels, NpyRoundTrip) {
  HostTensor tensor = randomTensor({3, 4}, 10);
  std::string path = ::testing::TempDir() + "weft-npy-roundtrip.npy";
  ASSERT_TRUE(writeNpy(path, tensor).ok());
  absl::StatusOr<HostTensor> read = readNpy(path);
  std::remove(path.c_str());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->shape, tensor.shape);
  EXPECT_EQ(read->floats, tensor.floats);
  EXPECT_FALSE(readNpy(path).ok());
}

TEST(RuntimeKernels, NpyShardsAreTheSlicesOfTheArray) {
  HostTensor tensor = randomTensor({4, 6, 2}, 11);
  std::string path = ::testing::TempDir() + "weft-npy-shard.npy";
  ASSERT_TRUE(writeNpy(path, tensor).ok());
  for (int64_t dim = 0; dim < 3; ++dim) {
    int64_t parts = tensor.shape[dim];
    for (int64_t index = 0; index < parts; ++index) {
      absl::StatusOr<HostTensor> shard = readNpyShard(path, dim, index, parts);
      ASSERT_TRUE(shard.ok()) << shard.status();
      HostTensor expected = sliceForRank(tensor, dim, index, parts);
      EXPECT_EQ(shard->shape, expected.shape);
      EXPECT_EQ(shard->floats, expected.floats) << dim << " " << index;
    }
  }
  // A split that does not divide, a dimension past the rank, a bad index.
  EXPECT_FALSE(readNpyShard(path, 1, 0, 4).ok());
  EXPECT_FALSE(readNpyShard(path, 3, 0, 1).ok());
  EXPECT_FALSE(readNpyShard(path, 0, 4, 4).ok());
  std::remove(path.c_str());
  EXPECT_FALSE(readNpyShard(path, 0, 0, 1).ok());
}

} // namespace

namespace {

TEST(RuntimeKernels, StorageCopiesOwnedAndBorrowedElements) {
  std::vector<float> memory = {1, 2, 3};
  Storage<float> borrowed = Storage<float>::borrow(memory.data(), 3, nullptr);
  EXPECT_TRUE(borrowed.borrowed());
  EXPECT_EQ(borrowed.data(), memory.data());
  // A copy owns its elements: writing it leaves the borrowed memory alone.
  Storage<float> copy = borrowed;
  EXPECT_FALSE(copy.borrowed());
  copy[0] = 10;
  EXPECT_EQ(memory[0], 1);
  EXPECT_EQ(copy, (std::vector<float>{10, 2, 3}));
  // A move takes the borrowed pointer as it is.
  Storage<float> moved = std::move(borrowed);
  EXPECT_EQ(moved.data(), memory.data());
  EXPECT_TRUE(borrowed.empty());
  // Kept alive by its keeper.
  auto owner = std::make_shared<std::vector<float>>(4, 7.0f);
  Storage<float> kept =
      Storage<float>::borrow(owner->data(), owner->size(), owner);
  owner.reset();
  EXPECT_EQ(kept, (std::vector<float>{7, 7, 7, 7}));
  EXPECT_EQ(Storage<float>::uninitialized(5).size(), 5u);
  EXPECT_EQ(Storage<int64_t>(3), (std::vector<int64_t>{0, 0, 0}));
}

TEST(RuntimeKernels, ReshapeOfATemporaryMovesItsBuffer) {
  HostTensor x = randomTensor({4, 6}, 3);
  const float *data = x.floats.data();
  HostTensor y = reshape(std::move(x), {2, 12});
  EXPECT_EQ(y.floats.data(), data);
  EXPECT_EQ(y.shape, (Shape{2, 12}));
}

TEST(RuntimeKernels, LinearWithBiasIsMatmulPlusBias) {
  HostTensor x = randomTensor({3, 5, 16}, 11), w = randomTensor({24, 16}, 12),
             b = randomTensor({24}, 13);
  HostTensor got = linear(x, w, &b, /*transposeWeight=*/true);
  HostTensor flat = reshape(x, {15, 16});
  HostTensor expected =
      binary(BinaryKind::Add, matmul(flat, w, false, true), b);
  ASSERT_EQ(got.shape, (Shape{3, 5, 24}));
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.floats[i], expected.floats[i], 1e-5) << i;
}

// Several blocks of query rows (the kernel works in blocks of 128): causal
// attention equals attention under the explicit tril mask, boolean or
// additive, and a padding mask of shape [b, 1, 1, kv] is read through
// broadcast strides.
TEST(RuntimeKernels, BlockedAttentionEqualsItsMasks) {
  int64_t seq = 300, dim = 8;
  HostTensor q = randomTensor({2, 4, seq, dim}, 21),
             k = randomTensor({2, 2, seq, dim}, 22),
             v = randomTensor({2, 2, seq, dim}, 23);
  HostTensor keep(DType::Bool, {1, 1, seq, seq}),
      additive(DType::F32, {1, 1, seq, seq});
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < seq; ++j) {
      keep.ints[i * seq + j] = j <= i;
      additive.floats[i * seq + j] =
          j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  HostTensor causal = attention(q, k, v, nullptr, 0.25f, true);
  HostTensor byBool = attention(q, k, v, &keep, 0.25f, false);
  HostTensor byFloat = attention(q, k, v, &additive, 0.25f, false);
  for (int64_t i = 0; i < causal.numel(); ++i) {
    ASSERT_NEAR(causal.floats[i], byBool.floats[i], 1e-5) << i;
    ASSERT_NEAR(causal.floats[i], byFloat.floats[i], 1e-5) << i;
  }
  // Padding: batch 1 sees only its first 200 keys, which equals attention
  // over those keys alone.
  HostTensor padding(DType::Bool, {2, 1, 1, seq});
  for (int64_t j = 0; j < seq; ++j) {
    padding.ints[j] = 1;
    padding.ints[seq + j] = j < 200;
  }
  HostTensor padded = attention(q, k, v, &padding, 0.25f, false);
  std::vector<int64_t> starts = {1, 0, 0, 0}, steps = {1, 1, 1, 1};
  HostTensor q1 = slice(q, starts, {2, 4, seq, dim}, steps),
             k1 = slice(k, starts, {2, 2, 200, dim}, steps),
             v1 = slice(v, starts, {2, 2, 200, dim}, steps);
  HostTensor alone = attention(q1, k1, v1, nullptr, 0.25f, false);
  for (int64_t i = 0; i < alone.numel(); ++i)
    ASSERT_NEAR(padded.floats[4 * seq * dim + i], alone.floats[i], 1e-5) << i;
}

/// Attention's gradients by the textbook formulas in double, one (batch,
/// head, row) at a time: P = softmax(scale q kᵀ + mask), dV = Pᵀ dO, dP =
/// dO Vᵀ, dS = P (dP - rowsum(P dP)), dQ = scale dS K, dK = scale dSᵀ Q.
/// `visible(b, h, i, j)` hides keys; a float `bias(b, h, i, j)` is added.
template <typename Visible, typename Bias>
static AttentionGradients
naiveAttentionGrad(const HostTensor &q, const HostTensor &k,
                   const HostTensor &v, const HostTensor &dout, float scale,
                   Visible visible, Bias bias) {
  int64_t batch = q.shape[0], heads = q.shape[1], seq = q.shape[2],
          dim = q.shape[3], kvHeads = k.shape[1], kvSeq = k.shape[2],
          vDim = v.shape[3], group = heads / kvHeads;
  AttentionGradients g{HostTensor(DType::F32, q.shape),
                       HostTensor(DType::F32, k.shape),
                       HostTensor(DType::F32, v.shape)};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        int64_t qRow = (b * heads + h) * seq + i;
        auto kRow = [&](int64_t j) {
          return (b * kvHeads + h / group) * kvSeq + j;
        };
        std::vector<double> p(kvSeq, 0.0), dp(kvSeq, 0.0);
        double max = -1e300;
        for (int64_t j = 0; j < kvSeq; ++j) {
          if (!visible(b, h, i, j))
            continue;
          double s = 0;
          for (int64_t d = 0; d < dim; ++d)
            s += double(q.floats[qRow * dim + d]) * k.floats[kRow(j) * dim + d];
          p[j] = s * scale + bias(b, h, i, j);
          max = std::max(max, p[j]);
        }
        if (max == -1e300)
          continue;
        double sum = 0;
        for (int64_t j = 0; j < kvSeq; ++j)
          if (visible(b, h, i, j))
            sum += (p[j] = std::exp(p[j] - max));
        double delta = 0;
        for (int64_t j = 0; j < kvSeq; ++j) {
          if (!visible(b, h, i, j))
            continue;
          p[j] /= sum;
          for (int64_t d = 0; d < vDim; ++d)
            dp[j] += double(dout.floats[qRow * vDim + d]) *
                     v.floats[kRow(j) * vDim + d];
          delta += p[j] * dp[j];
        }
        for (int64_t j = 0; j < kvSeq; ++j) {
          if (!visible(b, h, i, j))
            continue;
          double ds = p[j] * (dp[j] - delta) * scale;
          for (int64_t d = 0; d < dim; ++d) {
            g.q.floats[qRow * dim + d] +=
                float(ds * k.floats[kRow(j) * dim + d]);
            g.k.floats[kRow(j) * dim + d] +=
                float(ds * q.floats[qRow * dim + d]);
          }
          for (int64_t d = 0; d < vDim; ++d)
            g.v.floats[kRow(j) * vDim + d] +=
                float(p[j] * dout.floats[qRow * vDim + d]);
        }
      }
  return g;
}

static void expectGradientsNear(const AttentionGradients &got,
                                const AttentionGradients &want, double tol) {
  const char *names[] = {"dq", "dk", "dv"};
  const HostTensor *gots[] = {&got.q, &got.k, &got.v};
  const HostTensor *wants[] = {&want.q, &want.k, &want.v};
  for (int t = 0; t < 3; ++t) {
    ASSERT_EQ(gots[t]->shape, wants[t]->shape) << names[t];
    for (int64_t i = 0; i < wants[t]->numel(); ++i)
      ASSERT_NEAR(gots[t]->floats[i], wants[t]->floats[i], tol)
          << names[t] << " element " << i;
  }
}

// The fused backward against the formulas, over several blocks of query
// rows (the kernel's blocks are 128 rows), grouped KV heads, a causal mask
// by index and by position, and a padding mask that hides every key of
// some rows, which then contribute nothing.
TEST(RuntimeKernels, AttentionGradientsAreTheFormulas) {
  int64_t seq = 150, dim = 8, vDim = 4;
  HostTensor q = randomTensor({2, 4, seq, dim}, 31),
             k = randomTensor({2, 2, seq, dim}, 32),
             v = randomTensor({2, 2, seq, vDim}, 33),
             dout = randomTensor({2, 4, seq, vDim}, 34);
  float scale = 0.35f;
  auto none = [](int64_t, int64_t, int64_t, int64_t) { return 0.0; };
  auto causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; };
  AttentionGradients want =
      naiveAttentionGrad(q, k, v, dout, scale, causal, none);
  expectGradientsNear(attentionGrad(q, k, v, dout, nullptr, nullptr, nullptr,
                                    scale, true, nullptr, nullptr),
                      want, 1e-4);
  HostTensor positions(DType::I64, {seq});
  for (int64_t i = 0; i < seq; ++i)
    positions.ints[i] = i;
  expectGradientsNear(attentionGrad(q, k, v, dout, nullptr, &positions,
                                    &positions, scale, true, nullptr, nullptr),
                      want, 1e-4);
  // An additive mask [b, 1, 1, kv], and a boolean mask [1, 1, seq, 1] that
  // hides every key of rows 10..19.
  HostTensor bias = randomTensor({2, 1, 1, seq}, 35);
  HostTensor rows(DType::Bool, {1, 1, seq, 1});
  for (int64_t i = 0; i < seq; ++i)
    rows.ints[i] = i < 10 || i >= 20;
  auto added = [&](int64_t b, int64_t, int64_t, int64_t j) {
    return double(bias.floats[b * seq + j]);
  };
  auto all = [](int64_t, int64_t, int64_t, int64_t) { return true; };
  expectGradientsNear(attentionGrad(q, k, v, dout, &bias, nullptr, nullptr,
                                    scale, false, nullptr, nullptr),
                      naiveAttentionGrad(q, k, v, dout, scale, all, added),
                      1e-4);
  auto kept = [&](int64_t, int64_t, int64_t i, int64_t) {
    return rows.ints[i] != 0;
  };
  AttentionGradients masked = attentionGrad(
      q, k, v, dout, &rows, nullptr, nullptr, scale, false, nullptr, nullptr);
  expectGradientsNear(
      masked, naiveAttentionGrad(q, k, v, dout, scale, kept, none), 1e-4);
  for (int64_t d = 0; d < dim; ++d)
    EXPECT_EQ(masked.q.floats[15 * dim + d], 0.0f);
}

// Ring attention's backward step: with the whole attention's output and
// log-sum-exps, the gradients of each block of keys (positions in a
// load-balanced order, a causal mask by position, grouped heads, a padding
// mask that travels with its keys) are the whole gradient's: dK and dV
// block by block, dQ summed over the blocks.
TEST(RuntimeKernels, BlockGradientsWithSavedStatisticsSumToTheWhole) {
  int64_t seq = 12, blocks = 3, dim = 4, vDim = 3, kv = seq / blocks;
  HostTensor q = randomTensor({1, 4, seq, dim}, 51),
             k = randomTensor({1, 2, seq, dim}, 52),
             v = randomTensor({1, 2, seq, vDim}, 53),
             dout = randomTensor({1, 4, seq, vDim}, 54),
             pad = randomTensor({1, 1, 1, seq}, 55);
  pad.floats[5] = -std::numeric_limits<float>::infinity();
  HostTensor positions(DType::I64, {seq});
  // Keys in blocks {0, 11, 1, 10}, {2, 9, 3, 8}, {4, 7, 5, 6}: zigzag.
  for (int64_t i = 0; i < seq; ++i) {
    int64_t block = i / kv, r = i % kv, half = kv / 2;
    positions.ints[i] =
        r < half ? block * half + r : seq - 1 - block * half - (r - half);
  }
  float scale = 0.4f;
  for (bool causal : {false, true}) {
    AttentionBlock whole =
        attentionBlock(q, k, v, &pad, &positions, &positions, scale, causal);
    AttentionGradients want =
        attentionGrad(q, k, v, dout, &pad, &positions, &positions, scale,
                      causal, nullptr, nullptr);
    HostTensor dq(DType::F32, q.shape);
    for (int64_t block = 0; block < blocks; ++block) {
      auto slice = [&](const HostTensor &x) {
        HostTensor part(x.dtype, {x.shape[0], x.shape[1], kv, x.shape[3]});
        for (int64_t h = 0; h < x.shape[1]; ++h)
          for (int64_t j = 0; j < kv; ++j)
            for (int64_t d = 0; d < x.shape[3]; ++d)
              part.floats[(h * kv + j) * x.shape[3] + d] =
                  x.floats[(h * seq + block * kv + j) * x.shape[3] + d];
        return part;
      };
      HostTensor kPart = slice(k), vPart = slice(v);
      HostTensor padPart(DType::F32, {1, 1, 1, kv}), posPart(DType::I64, {kv});
      for (int64_t j = 0; j < kv; ++j) {
        padPart.floats[j] = pad.floats[block * kv + j];
        posPart.ints[j] = positions.ints[block * kv + j];
      }
      AttentionGradients part =
          attentionGrad(q, kPart, vPart, dout, &padPart, &positions, &posPart,
                        scale, causal, &whole.output, &whole.lse);
      for (int64_t i = 0; i < dq.numel(); ++i)
        dq.floats[i] += part.q.floats[i];
      HostTensor wantK = slice(want.k), wantV = slice(want.v);
      for (int64_t i = 0; i < wantK.numel(); ++i)
        ASSERT_NEAR(part.k.floats[i], wantK.floats[i], 1e-5)
            << "causal " << causal << " block " << block << " dk " << i;
      for (int64_t i = 0; i < wantV.numel(); ++i)
        ASSERT_NEAR(part.v.floats[i], wantV.floats[i], 1e-5)
            << "causal " << causal << " block " << block << " dv " << i;
    }
    for (int64_t i = 0; i < dq.numel(); ++i)
      ASSERT_NEAR(dq.floats[i], want.q.floats[i], 1e-5)
          << "causal " << causal << " dq " << i;
  }
}

// And against the forward kernel: the gradient of sum(attention(q, k, v) *
// dO) by central differences, for a few elements of q, k and v.
TEST(RuntimeKernels, AttentionGradientsAreTheForwardsSlopes) {
  int64_t seq = 6, dim = 4;
  HostTensor q = randomTensor({1, 2, seq, dim}, 41),
             k = randomTensor({1, 1, seq, dim}, 42),
             v = randomTensor({1, 1, seq, dim}, 43),
             dout = randomTensor({1, 2, seq, dim}, 44);
  float scale = 0.5f;
  AttentionGradients grads = attentionGrad(
      q, k, v, dout, nullptr, nullptr, nullptr, scale, true, nullptr, nullptr);
  expectAttentionSlopes(
      q, k, v, dout, grads,
      [&] { return attention(q, k, v, nullptr, scale, true); }, 5);
}

// ALiBi's slopes are the bias -m_h |i - j| on the scaled scores: the
// attention, a block with positions (a ring's zigzag layout, where the
// distance is between positions) and the gradients equal those of the same
// bias written out as a float mask [1, h, seq, kv], causal and not, and over
// query rows past the kernel's block of 128.
TEST(RuntimeKernels, AlibiIsItsBias) {
  int64_t seq = 130, dim = 4, heads = 4;
  HostTensor q = randomTensor({2, heads, seq, dim}, 71),
             k = randomTensor({2, 2, seq, dim}, 72),
             v = randomTensor({2, 2, seq, dim}, 73),
             dout = randomTensor({2, heads, seq, dim}, 74);
  HostTensor slopes(DType::F32, {heads});
  slopes.floats = {0.5f, 0.25f, 0.125f, 0.0625f};
  // Positions in a zigzag order, as the load-balanced ring holds them.
  HostTensor positions(DType::I64, {seq});
  for (int64_t i = 0; i < seq; ++i)
    positions.ints[i] = i % 2 ? seq - 1 - i / 2 : i / 2;
  auto biasOf = [&](const HostTensor *at) {
    HostTensor bias(DType::F32, {1, heads, seq, seq});
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i)
        for (int64_t j = 0; j < seq; ++j) {
          int64_t qi = at ? at->ints[i] : i, kj = at ? at->ints[j] : j;
          bias.floats[(h * seq + i) * seq + j] =
              -slopes.floats[h] * float(std::abs(qi - kj));
        }
    return bias;
  };
  HostTensor byIndex = biasOf(nullptr), byPosition = biasOf(&positions);
  auto expectNear = [](const HostTensor &got, const HostTensor &want,
                       const char *what) {
    ASSERT_EQ(got.shape, want.shape) << what;
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.floats[i], want.floats[i], 2e-5)
          << what << " element " << i;
  };
  float scale = 0.5f;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    expectNear(attention(q, k, v, nullptr, scale, causal, 0.0f, 0, &slopes),
               attention(q, k, v, &byIndex, scale, causal), "attention");
    AttentionBlock block =
        attentionBlock(q, k, v, nullptr, &positions, &positions, scale, causal,
                       0.0f, 0, &slopes);
    AttentionBlock want = attentionBlock(q, k, v, &byPosition, &positions,
                                         &positions, scale, causal);
    expectNear(block.output, want.output, "block");
    expectNear(block.lse, want.lse, "lse");
    expectGradientsNear(attentionGrad(q, k, v, dout, nullptr, nullptr, nullptr,
                                      scale, causal, nullptr, nullptr, 0.0f, 0,
                                      &slopes),
                        attentionGrad(q, k, v, dout, &byIndex, nullptr, nullptr,
                                      scale, causal, nullptr, nullptr),
                        2e-5);
    expectGradientsNear(
        attentionGrad(q, k, v, dout, nullptr, &positions, &positions, scale,
                      causal, &block.output, &block.lse, 0.0f, 0, &slopes),
        attentionGrad(q, k, v, dout, &byPosition, &positions, &positions, scale,
                      causal, &want.output, &want.lse),
        2e-5);
  }
  // The slopes matter: the output without them differs.
  HostTensor plain = attention(q, k, v, nullptr, scale, true);
  HostTensor biased =
      attention(q, k, v, nullptr, scale, true, 0.0f, 0, &slopes);
  double apart = 0;
  for (int64_t i = 0; i < plain.numel(); ++i)
    apart =
        std::max(apart, double(std::abs(plain.floats[i] - biased.floats[i])));
  EXPECT_GT(apart, 0.1);
}

// Gemma 2's soft-capping: softcap · tanh(scale q·k / softcap) before the
// mask (a boolean padding mask and causal here), against a naive loop; then
// the gradients against the forward's slopes, unfused and as a ring's block
// (the forward's output and log-sum-exps saved), which must agree.
TEST(RuntimeKernels, SoftCappedAttentionAndItsGradients) {
  int64_t seq = 6, dim = 4;
  HostTensor q = randomTensor({1, 2, seq, dim}, 61),
             k = randomTensor({1, 1, seq, dim}, 62),
             v = randomTensor({1, 1, seq, dim}, 63),
             dout = randomTensor({1, 2, seq, dim}, 64);
  for (float &x : q.floats)
    x *= 3.0f; // scores of several units, which a cap of 0.8 bends
  HostTensor keep(DType::Bool, {1, 1, 1, seq});
  keep.ints = {1, 1, 0, 1, 1, 1};
  float scale = 0.5f, cap = 0.8f;
  HostTensor out = attention(q, k, v, &keep, scale, true, cap);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < seq; ++i) {
      std::vector<double> weights(seq, 0.0);
      double max = -1e30, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        if (!keep.ints[j])
          continue;
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d)
          dot += q.floats[(h * seq + i) * dim + d] * k.floats[j * dim + d];
        weights[j] = cap * std::tanh(dot * scale / cap);
        max = std::max(max, weights[j]);
      }
      for (int64_t j = 0; j <= i; ++j)
        if (keep.ints[j])
          sum += (weights[j] = std::exp(weights[j] - max));
      for (int64_t d = 0; d < dim; ++d) {
        double expected = 0;
        for (int64_t j = 0; j <= i; ++j)
          if (keep.ints[j])
            expected += weights[j] / sum * v.floats[j * dim + d];
        ASSERT_NEAR(out.floats[(h * seq + i) * dim + d], expected, 1e-5)
            << "head " << h << " row " << i;
      }
    }
  // Without the cap the output differs: the scores are large enough.
  HostTensor uncapped = attention(q, k, v, &keep, scale, true);
  double apart = 0;
  for (int64_t i = 0; i < out.numel(); ++i)
    apart =
        std::max(apart, double(std::abs(out.floats[i] - uncapped.floats[i])));
  EXPECT_GT(apart, 1e-2);

  AttentionGradients grads =
      attentionGrad(q, k, v, dout, &keep, nullptr, nullptr, scale, true,
                    nullptr, nullptr, cap);
  AttentionBlock block =
      attentionBlock(q, k, v, &keep, nullptr, nullptr, scale, true, cap);
  AttentionGradients saved =
      attentionGrad(q, k, v, dout, &keep, nullptr, nullptr, scale, true,
                    &block.output, &block.lse, cap);
  const HostTensor *slopes[] = {&grads.q, &grads.k, &grads.v};
  const HostTensor *blockSlopes[] = {&saved.q, &saved.k, &saved.v};
  for (int t = 0; t < 3; ++t)
    for (int64_t i = 0; i < slopes[t]->numel(); ++i)
      ASSERT_NEAR(blockSlopes[t]->floats[i], slopes[t]->floats[i], 1e-5)
          << "input " << t << " element " << i;
  expectAttentionSlopes(
      q, k, v, dout, grads,
      [&] { return attention(q, k, v, &keep, scale, true, cap); }, 3);
}

// A sliding window of 3 (Mistral's, narrowed): query i sees keys i - 2 to i.
// The output against a naive loop; two blocks of keys with positions (a
// ring's steps) merged, against it; and the gradients against the
// forward's slopes.
TEST(RuntimeKernels, SlidingWindowAttentionAndItsGradients) {
  int64_t seq = 7, dim = 4, window = 3;
  HostTensor q = randomTensor({1, 2, seq, dim}, 71),
             k = randomTensor({1, 1, seq, dim}, 72),
             v = randomTensor({1, 1, seq, dim}, 73),
             dout = randomTensor({1, 2, seq, dim}, 74);
  float scale = 0.5f;
  HostTensor out = attention(q, k, v, nullptr, scale, true, 0.0f, window);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < seq; ++i) {
      int64_t first = std::max<int64_t>(0, i - window + 1);
      std::vector<double> weights;
      double max = -1e30, sum = 0;
      for (int64_t j = first; j <= i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d)
          dot += q.floats[(h * seq + i) * dim + d] * k.floats[j * dim + d];
        weights.push_back(dot * scale);
        max = std::max(max, weights.back());
      }
      for (double &w : weights)
        sum += (w = std::exp(w - max));
      for (int64_t d = 0; d < dim; ++d) {
        double expected = 0;
        for (int64_t j = first; j <= i; ++j)
          expected += weights[size_t(j - first)] / sum * v.floats[j * dim + d];
        ASSERT_NEAR(out.floats[(h * seq + i) * dim + d], expected, 1e-5)
            << "head " << h << " row " << i;
      }
    }
  // The keys in two blocks, 0..3 and 4..6, with their positions: merged by
  // their log-sum-exps, the whole attention.
  HostTensor qPos(DType::I64, {seq});
  for (int64_t i = 0; i < seq; ++i)
    qPos.ints[i] = i;
  auto keys = [&](const HostTensor &t, int64_t from, int64_t to) {
    HostTensor part(DType::F32, {1, 1, to - from, dim});
    std::copy(t.floats.begin() + from * dim, t.floats.begin() + to * dim,
              part.floats.begin());
    return part;
  };
  auto positions = [&](int64_t from, int64_t to) {
    HostTensor p(DType::I64, {to - from});
    for (int64_t j = from; j < to; ++j)
      p.ints[j - from] = j;
    return p;
  };
  HostTensor k0 = keys(k, 0, 4), v0 = keys(v, 0, 4), k1 = keys(k, 4, seq),
             v1 = keys(v, 4, seq), p0 = positions(0, 4), p1 = positions(4, seq);
  AttentionBlock a =
      attentionBlock(q, k0, v0, nullptr, &qPos, &p0, scale, true, 0.0f, window);
  AttentionBlock b =
      attentionBlock(q, k1, v1, nullptr, &qPos, &p1, scale, true, 0.0f, window);
  for (int64_t r = 0; r < 2 * seq; ++r) {
    double la = a.lse.floats[r], lb = b.lse.floats[r];
    double top = std::max(la, lb);
    double lse = top + std::log(std::exp(la - top) + std::exp(lb - top));
    for (int64_t d = 0; d < dim; ++d) {
      double merged = a.output.floats[r * dim + d] * std::exp(la - lse) +
                      b.output.floats[r * dim + d] * std::exp(lb - lse);
      ASSERT_NEAR(merged, out.floats[r * dim + d], 1e-5) << "row " << r;
    }
  }
  AttentionGradients grads =
      attentionGrad(q, k, v, dout, nullptr, nullptr, nullptr, scale, true,
                    nullptr, nullptr, 0.0f, window);
  expectAttentionSlopes(
      q, k, v, dout, grads,
      [&] { return attention(q, k, v, nullptr, scale, true, 0.0f, window); },
      3);
}

// The running sum along the middle axis of a 3-D tensor, each way, against
// a scalar sum; and the gradient weft.cumsum builds (the running sum of the
// result's gradient the other way, as exclusive) against the sum of the
// result's gradient over the results each input is summed into.
TEST(RuntimeKernels, CumSumAndItsGradient) {
  int64_t outer = 2, length = 5, inner = 3;
  HostTensor x = randomTensor({outer, length, inner}, 51),
             dy = randomTensor({outer, length, inner}, 52);
  auto at = [&](int64_t o, int64_t i, int64_t n) {
    return (o * length + i) * inner + n;
  };
  for (bool exclusive : {false, true})
    for (bool reverse : {false, true}) {
      // Whether input j is summed into result i.
      auto into = [&](int64_t j, int64_t i) {
        return reverse ? (exclusive ? j > i : j >= i)
                       : (exclusive ? j < i : j <= i);
      };
      HostTensor y = cumsum(x, 1, exclusive, reverse);
      HostTensor dx = cumsum(dy, 1, exclusive, !reverse);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t n = 0; n < inner; ++n)
          for (int64_t i = 0; i < length; ++i) {
            double sum = 0, slope = 0;
            for (int64_t j = 0; j < length; ++j) {
              if (into(j, i))
                sum += x.floats[at(o, j, n)];
              if (into(i, j))
                slope += dy.floats[at(o, j, n)];
            }
            EXPECT_NEAR(y.floats[at(o, i, n)], sum, 1e-5)
                << exclusive << reverse << " y " << o << i << n;
            EXPECT_NEAR(dx.floats[at(o, i, n)], slope, 1e-5)
                << exclusive << reverse << " dx " << o << i << n;
          }
    }
  // Integers: a left-padded mask's positions, exactly.
  HostTensor mask(DType::I64, {2, 4});
  mask.ints = {1, 1, 1, 0, 0, 1, 1, 1};
  HostTensor counts = cumsum(mask, 1, false, false);
  EXPECT_EQ(counts.ints, (std::vector<int64_t>{1, 2, 3, 3, 0, 1, 2, 3}));
}

} // namespace

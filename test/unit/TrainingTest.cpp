//===- TrainingTest.cpp - The host side of a training step ---------------===//
//
// Part of the Weft project.
//
// The pieces `weft train` and generated training programs share: the token
// file, its windows, the learning-rate schedule, the optimizer's scalars, and
// one rank's step over its micro-batches.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Training.h"
#include "weft/runtime/CpuKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

using namespace weft::rt;

namespace {

std::string writeBytes(const std::string &name, const std::string &bytes) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(TrainingTest, ReadsRawTokenFiles) {
  // Little-endian u16 words: 1, 258, 65535.
  std::string path =
      writeBytes("tokens.bin", std::string("\x01\x00\x02\x01\xff\xff", 6));
  absl::StatusOr<std::vector<int64_t>> tokens = readTokenFile(path, "u16");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, (std::vector<int64_t>{1, 258, 65535}));
  // As i32: 6 bytes is not a whole number of tokens.
  absl::StatusOr<std::vector<int64_t>> odd = readTokenFile(path, "i32");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("not a whole number of i32 tokens"),
            std::string::npos);
  EXPECT_FALSE(readTokenFile(path, "f32").ok());
  EXPECT_FALSE(readTokenFile(::testing::TempDir() + "absent.bin").ok());
  // A file named .npy must be one.
  EXPECT_FALSE(readTokenFile(writeBytes("fake.npy", "not numpy")).ok());
}

TEST(TrainingTest, WindowsWrapAroundTheFile) {
  std::vector<int64_t> tokens{10, 11, 12, 13, 14, 15, 16};
  // [batch 1, seq 3]: a window needs 4 tokens, so 4 start positions; the
  // second window starts at token 3, the third wraps to 6 % 4 = 2.
  std::vector<HostTensor> second =
      tokenWindows(tokens, 1, 3, 1, 1, {Feed::Tokens, Feed::Ones});
  ASSERT_EQ(second.size(), 3u); // ids, one mask, labels
  EXPECT_EQ(second[0].ints.toVector(), (std::vector<int64_t>{13, 14, 15}));
  EXPECT_EQ(second[1].ints.toVector(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(second[2].ints.toVector(), (std::vector<int64_t>{14, 15, 16}));
  std::vector<HostTensor> two = tokenWindows(tokens, 1, 3, 1, 2, {});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].shape, (Shape{2, 3}));
  EXPECT_EQ(two[0].ints.toVector(),
            (std::vector<int64_t>{13, 14, 15, 12, 13, 14}));
}

// Megatron-LM's blend (BlendedDataset's build_blending_indices): weights
// 1 : 3 give rows from B, A, B, B, A, B, ... (the dataset furthest below its
// share of the rows so far, at least one; the first of equals), each the
// next sample of its dataset, sample k starting at token k x seq.
TEST(TrainingTest, BlendsDrawRowsByMegatronsRule) {
  std::vector<int64_t> a(100), b(100);
  for (int i = 0; i < 100; ++i) {
    a[size_t(i)] = 100 + i;
    b[size_t(i)] = 200 + i;
  }
  TokenStream blend({a, b}, {1.0, 3.0});
  EXPECT_DOUBLE_EQ(blend.weights()[0], 0.25);
  std::vector<HostTensor> first = tokenWindows(blend, 2, 4, 0, 2, {});
  ASSERT_EQ(first.size(), 2u);
  const std::vector<int64_t> rowStarts = {200, 100, 204, 208};
  for (size_t row = 0; row < 4; ++row)
    for (int64_t c = 0; c < 4; ++c) {
      EXPECT_EQ(first[0].ints[row * 4 + size_t(c)], rowStarts[row] + c);
      // The label is the sample's next token, in its own dataset.
      EXPECT_EQ(first[1].ints[row * 4 + size_t(c)], rowStarts[row] + c + 1);
    }
  // Window 2 (rows 4 and 5): A's second sample, then B's fourth.
  std::vector<HostTensor> later = tokenWindows(blend, 2, 4, 2, 1, {});
  EXPECT_EQ(later[0].ints[0], 104);
  EXPECT_EQ(later[0].ints[4], 212);
  // Equal weights alternate; sample 24 of 100 tokens wraps to the start
  // (each sample needs seq + 1 tokens: 96 starts).
  TokenStream even({a, b}, {0.5, 0.5});
  std::vector<HostTensor> wrapped = tokenWindows(even, 2, 4, 24, 1, {});
  EXPECT_EQ(wrapped[0].ints[0], 100);
  EXPECT_EQ(wrapped[0].ints[4], 200);
  EXPECT_EQ(even.row(49), (std::pair<size_t, int64_t>(1, 24)));
}

// --shuffle-seed: each epoch draws every sample of seq tokens once, in an
// order of its own, the same for the same seed; a sample's labels are its
// next tokens; a blend's rows are samples of their own dataset.
TEST(TrainingTest, ShuffledSamplesArePermutedEachEpoch) {
  const int64_t seq = 4;
  // The order of the starts of rows [first, first + n) of `stream`.
  auto starts = [&](const TokenStream &stream, int64_t first, int64_t n) {
    std::vector<HostTensor> rows = tokenWindows(stream, 1, seq, first, n, {});
    std::vector<int64_t> out;
    for (int64_t r = 0; r < n; ++r) {
      // (The labels are the sample's next tokens.)
      for (int64_t c = 0; c < seq; ++c)
        EXPECT_EQ(rows[1].ints[size_t(r * seq + c)],
                  rows[0].ints[size_t(r * seq + c)] + 1);
      out.push_back(rows[0].ints[size_t(r * seq)]);
    }
    return out;
  };
  for (int64_t n : {1, 2, 5, 37, 300}) {
    std::vector<int64_t> tokens(size_t(n * seq + 1));
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = int64_t(i);
    TokenStream stream(tokens);
    stream.shuffle(7);
    std::vector<int64_t> expected;
    for (int64_t k = 0; k < n; ++k)
      expected.push_back(k * seq);
    std::vector<int64_t> first = starts(stream, 0, n),
                         second = starts(stream, n, n);
    std::vector<int64_t> sortedFirst = first, sortedSecond = second;
    std::sort(sortedFirst.begin(), sortedFirst.end());
    std::sort(sortedSecond.begin(), sortedSecond.end());
    EXPECT_EQ(sortedFirst, expected) << n;
    EXPECT_EQ(sortedSecond, expected) << n;
    TokenStream same(tokens), other(tokens);
    same.shuffle(7);
    other.shuffle(8);
    EXPECT_EQ(starts(same, 0, n), first);
    if (n >= 37) {
      EXPECT_NE(first, expected) << n; // shuffled
      EXPECT_NE(second, first) << n;   // a new order each epoch
      EXPECT_NE(starts(other, 0, n), first) << n;
    }
  }
  // A blend: each row a sample of its dataset (a at 1000 on, b at 2000 on),
  // dataset a's first 10 samples each once.
  std::vector<int64_t> a(41), b(41);
  for (int i = 0; i < 41; ++i) {
    a[size_t(i)] = 1000 + i;
    b[size_t(i)] = 2000 + i;
  }
  TokenStream blend({a, b}, {0.5, 0.5});
  blend.shuffle(3);
  std::vector<int64_t> fromA;
  for (int64_t start : starts(blend, 0, 20)) {
    EXPECT_EQ((start % 1000) % seq, 0);
    if (start < 2000)
      fromA.push_back(start - 1000);
  }
  std::sort(fromA.begin(), fromA.end());
  EXPECT_EQ(fromA, (std::vector<int64_t>{0, 4, 8, 12, 16, 20, 24, 28, 32, 36}));
  // Held out by --eval-split, both parts stay shuffled.
  auto [head, tail] = splitTokenStream(blend, 0.25);
  EXPECT_EQ(head.shuffleSeed(), std::optional<uint64_t>(3));
  EXPECT_EQ(tail.shuffleSeed(), std::optional<uint64_t>(3));
}

TEST(TrainingTest, FeedsFillTheInputsAfterTheTokenIds) {
  std::vector<int64_t> tokens{10, 11, 12, 13, 14, 15, 16};
  // Two windows of [batch 2, seq 3]: position ids restart in every row.
  std::vector<HostTensor> in =
      tokenWindows(tokens, 2, 3, 0, 1,
                   {Feed::Tokens, Feed::Positions, Feed::Zeros, Feed::Ones});
  ASSERT_EQ(in.size(), 5u); // ids, positions, token types, mask, labels
  EXPECT_EQ(in[1].shape, (Shape{2, 3}));
  EXPECT_EQ(in[1].ints.toVector(), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(in[2].ints.toVector(), (std::vector<int64_t>(6, 0)));
  EXPECT_EQ(in[3].ints.toVector(), (std::vector<int64_t>(6, 1)));
  EXPECT_EQ(in[4].ints.toVector(),
            (std::vector<int64_t>{11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(parseFeed("positions"), Feed::Positions);
  // A model that takes its own labels gets the same next tokens.
  std::vector<HostTensor> own =
      tokenWindows(tokens, 1, 3, 0, 1, {Feed::Tokens, Feed::Labels});
  ASSERT_EQ(own.size(), 3u);
  EXPECT_EQ(own[1].ints.toVector(), own[2].ints.toVector());
  EXPECT_EQ(own[1].ints.toVector(), (std::vector<int64_t>{11, 12, 13}));
  EXPECT_EQ(parseFeed("mask"), std::nullopt);
}

TEST(TrainingTest, AnEncodersSourceIsTheTokensBeforeEachRow) {
  std::vector<int64_t> tokens{10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  // An encoder-decoder: the source (input 0) before the decoder's ids
  // (input 1), with a source mask as long as the source. Window 1 of
  // [batch 2, seq 2] starts at token 4; its rows at 14 and 16, and each
  // row's source is the 3 tokens before it.
  std::vector<HostTensor> in = tokenWindows(
      tokens, 2, 2, 1, 1,
      {{Feed::Source, 3}, {Feed::Ones, 3}, Feed::Tokens, {Feed::Positions, 4}});
  ASSERT_EQ(in.size(), 5u); // source, its mask, ids, positions, labels
  EXPECT_EQ(in[0].shape, (Shape{2, 3}));
  EXPECT_EQ(in[0].ints.toVector(),
            (std::vector<int64_t>{11, 12, 13, 13, 14, 15}));
  EXPECT_EQ(in[1].shape, (Shape{2, 3}));
  EXPECT_EQ(in[1].ints.toVector(), (std::vector<int64_t>(6, 1)));
  EXPECT_EQ(in[2].ints.toVector(), (std::vector<int64_t>{14, 15, 16, 17}));
  EXPECT_EQ(in[3].ints.toVector(),
            (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(in[4].ints.toVector(), (std::vector<int64_t>{15, 16, 17, 18}));
  // The first window's first row starts the file: its source wraps to the
  // file's end.
  std::vector<HostTensor> first =
      tokenWindows(tokens, 1, 2, 0, 1, {{Feed::Source, 3}, Feed::Tokens});
  EXPECT_EQ(first[0].ints.toVector(), (std::vector<int64_t>{17, 18, 19}));
  EXPECT_EQ(parseFeed("source"), Feed::Source);
  EXPECT_EQ(parseFeed("tokens"), Feed::Tokens);
}

static Objective fixedSeedObjective(double probability) {
  Objective objective;
  objective.masked = true;
  objective.maskToken = 7;
  objective.vocab = 900;
  objective.probability = probability;
  return objective;
}

TEST(TrainingTest, MaskedLanguageModellingChoosesAndReplaces) {
  // 100 windows of [batch 2, seq 50] from a file of ids 1000..1999: about
  // 15 % of the positions are chosen, their labels their own tokens; of
  // those, about 80 % read the mask token, 10 % a random token below the
  // vocabulary and 10 % their own. The others count no loss (-100) and read
  // their own token.
  std::vector<int64_t> tokens(1000);
  for (int64_t i = 0; i < 1000; ++i)
    tokens[size_t(i)] = 1000 + i;
  Objective mlm;
  mlm.masked = true;
  mlm.maskToken = 7;
  mlm.vocab = 900;
  std::vector<HostTensor> in =
      tokenWindows(tokens, 2, 50, 0, 100, {Feed::Tokens, Feed::Labels}, mlm);
  ASSERT_EQ(in.size(), 3u);
  std::vector<HostTensor> plain = tokenWindows(tokens, 2, 50, 0, 100, {});
  int64_t chosen = 0, masked = 0, random = 0, kept = 0;
  for (int64_t i = 0; i < 100 * 2 * 50; ++i) {
    int64_t id = in[0].ints[i], label = in[2].ints[i];
    int64_t original = plain[0].ints[i];
    EXPECT_EQ(in[1].ints[i], label); // the model's own labels input
    if (label == -100) {
      EXPECT_EQ(id, original);
      continue;
    }
    ++chosen;
    EXPECT_EQ(label, original);
    if (id == 7)
      ++masked;
    else if (id == original)
      ++kept;
    else if (id < 900)
      ++random;
    else
      ADD_FAILURE() << "position " << i << " reads " << id;
  }
  EXPECT_NEAR(double(chosen) / 10000, 0.15, 0.015);
  EXPECT_NEAR(double(masked) / double(chosen), 0.8, 0.04);
  EXPECT_NEAR(double(random) / double(chosen), 0.1, 0.03);
  EXPECT_NEAR(double(kept) / double(chosen), 0.1, 0.03);
  // The draws belong to the position in the stream of windows: window 3
  // alone draws as the fourth of the run's.
  std::vector<HostTensor> third = tokenWindows(tokens, 2, 50, 3, 1, {}, mlm);
  for (int64_t i = 0; i < 100; ++i)
    EXPECT_EQ(third[0].ints[i], in[0].ints[300 + i]);
  // Another seed draws otherwise.
  mlm.seed = 1;
  std::vector<HostTensor> other = tokenWindows(tokens, 2, 50, 0, 100, {}, mlm);
  EXPECT_NE(other[0].ints.toVector(), in[0].ints.toVector());
  // Draws are SplitMix64 of the seed and the index, as a reimplementation
  // in Python (test/training/form_gradients.py's) gives them: of the first
  // 40 positions at seed 0, 10 keeps its token and 19, 25 and 29 read the
  // mask; 69 reads the random token 842.
  std::vector<int64_t> chosenAt;
  for (int64_t i = 0; i < 40; ++i)
    if (in[2].ints[i] != -100)
      chosenAt.push_back(i);
  EXPECT_EQ(chosenAt, (std::vector<int64_t>{10, 19, 25, 29}));
  EXPECT_EQ(in[0].ints[10], 1010);
  EXPECT_EQ(in[0].ints[19], 7);
  MaskedDraw draw = maskedDraw(fixedSeedObjective(0.15), 69, 1069);
  EXPECT_TRUE(draw.chosen);
  EXPECT_EQ(draw.input, 842);
  // Special tokens are never chosen: with every third id special, no
  // special position is a label or reads another token, and the others
  // draw as before.
  Objective special = mlm;
  special.seed = 0;
  for (int64_t id = 1000; id < 2000; id += 3)
    special.special.push_back(id);
  std::vector<HostTensor> withSpecial =
      tokenWindows(tokens, 2, 50, 0, 100, {}, special);
  int64_t specials = 0;
  for (int64_t i = 0; i < 100 * 2 * 50; ++i) {
    if ((plain[0].ints[i] - 1000) % 3 == 0) {
      ++specials;
      EXPECT_EQ(withSpecial[1].ints[i], -100);
      EXPECT_EQ(withSpecial[0].ints[i], plain[0].ints[i]);
    } else if (in[2].ints[i] != -100) {
      EXPECT_EQ(withSpecial[1].ints[i], in[2].ints[i]);
    }
  }
  EXPECT_GT(specials, 3000);
  // A row that draws no position has its nearest one chosen: at a
  // vanishing probability, every row has exactly one, its lowest draw.
  Objective rare = fixedSeedObjective(1e-12);
  std::vector<HostTensor> one = tokenWindows(tokens, 4, 8, 0, 1, {}, rare);
  for (int64_t r = 0; r < 4; ++r) {
    int64_t count = 0, at = -1;
    double lowest = 2;
    for (int64_t c = 0; c < 8; ++c) {
      count += one[1].ints[r * 8 + c] != -100;
      double u = maskedDraw(rare, r * 8 + c, 0).uniform;
      if (u < lowest) {
        lowest = u;
        at = c;
      }
    }
    EXPECT_EQ(count, 1) << "row " << r;
    EXPECT_EQ(one[1].ints[r * 8 + at], 1000 + r * 8 + at) << "row " << r;
  }
}

TEST(TrainingTest, WarmupThenCosine) {
  LrSchedule schedule{1.0, 0.1, 2, 6};
  EXPECT_DOUBLE_EQ(schedule.at(0), 0.5);
  EXPECT_DOUBLE_EQ(schedule.at(1), 1.0);
  EXPECT_DOUBLE_EQ(schedule.at(2), 1.0);
  EXPECT_NEAR(schedule.at(4), 0.55, 1e-12); // half way: (1 + 0.1) / 2
  EXPECT_NEAR(schedule.at(6), 0.1, 1e-12);
  // No floor given: constant after the warm-up.
  LrSchedule constant{0.3, -1, 0, 10};
  EXPECT_DOUBLE_EQ(constant.at(7), 0.3);
}

// Megatron-LM's OptimizerParamScheduler.get_lr, step by step: the decay
// after the warm-up reaches the floor at step `steps` (or `decaySteps`).
TEST(TrainingTest, DecayStyles) {
  LrSchedule linear{1.0, 0.2, 2, 6, 0, LrDecay::Linear};
  EXPECT_DOUBLE_EQ(linear.at(1), 1.0);
  EXPECT_DOUBLE_EQ(linear.at(2), 1.0);
  EXPECT_NEAR(linear.at(3), 0.8, 1e-12); // a quarter of 0.8 gone
  EXPECT_NEAR(linear.at(5), 0.4, 1e-12);
  EXPECT_NEAR(linear.at(6), 0.2, 1e-12);
  EXPECT_NEAR(linear.at(9), 0.2, 1e-12);
  // The decay ends at step 4 instead of the run's 6.
  LrSchedule early{1.0, 0.0, 0, 6, 4, LrDecay::Linear};
  EXPECT_NEAR(early.at(2), 0.5, 1e-12);
  EXPECT_NEAR(early.at(5), 0.0, 1e-12);
  LrSchedule constant{1.0, 0.0, 2, 6, 0, LrDecay::Constant};
  EXPECT_DOUBLE_EQ(constant.at(0), 0.5);
  EXPECT_DOUBLE_EQ(constant.at(5), 1.0);
  // peak * sqrt(warmup / (step + 1)), not below the floor.
  LrSchedule inverse{1.0, 0.3, 4, 100, 0, LrDecay::InverseSquareRoot};
  EXPECT_DOUBLE_EQ(inverse.at(3), 1.0);
  EXPECT_NEAR(inverse.at(15), 0.5, 1e-12);
  EXPECT_NEAR(inverse.at(99), 0.3, 1e-12);
  // Warmup-stable-decay: the peak until the last 4 steps before 10, then
  // each of Megatron's shapes at r = 1/4, 1/2.
  for (auto [shape, quarter, half] :
       {std::tuple{LrDecay::Linear, 0.75, 0.5},
        std::tuple{LrDecay::Cosine, 0.5 * (1 + std::cos(M_PI / 4)), 0.5},
        std::tuple{LrDecay::Exponential, 2 * std::pow(0.5, 0.25) - 1,
                   2 * std::sqrt(0.5) - 1},
        std::tuple{LrDecay::MinusSqrt, 0.5, 1 - std::sqrt(0.5)}}) {
    LrSchedule wsd{2.0, 0.0, 1, 10, 0, LrDecay::Wsd, 4, shape};
    EXPECT_DOUBLE_EQ(wsd.at(0), 2.0);
    EXPECT_DOUBLE_EQ(wsd.at(5), 2.0);
    EXPECT_DOUBLE_EQ(wsd.at(6), 2.0);
    EXPECT_NEAR(wsd.at(7), 2.0 * quarter, 1e-12);
    EXPECT_NEAR(wsd.at(8), 2.0 * half, 1e-12);
    EXPECT_NEAR(wsd.at(10), 0.0, 1e-12);
  }
  EXPECT_EQ(parseLrDecay("inverse-square-root"), LrDecay::InverseSquareRoot);
  EXPECT_EQ(parseLrDecay("minus_sqrt"), LrDecay::MinusSqrt);
  EXPECT_FALSE(parseLrDecay("step").has_value());
}

TEST(TrainingTest, OptimizerScalarsAreTorchs) {
  OptimizerConstants c{0.01, 0.9, 0.999};
  EXPECT_FLOAT_EQ(*optimizerScalar("grad_divisor", c, 0.1, 1, 4), 4.0f);
  EXPECT_FLOAT_EQ(*optimizerScalar("decay_factor", c, 0.1, 1, 4),
                  float(1 - 0.1 * 0.01));
  EXPECT_FLOAT_EQ(*optimizerScalar("step_size", c, 0.1, 2, 4),
                  float(0.1 / (1 - 0.81)));
  EXPECT_FLOAT_EQ(*optimizerScalar("bias_correction2_sqrt", c, 0.1, 2, 4),
                  float(std::sqrt(1 - 0.999 * 0.999)));
  EXPECT_FLOAT_EQ(*optimizerScalar("lr", c, 0.1, 2, 4), 0.1f);
  EXPECT_FALSE(optimizerScalar("exp_avg", c, 0.1, 2, 4).has_value());
}

// torch.cuda.amp.GradScaler's rule: an overflow halves the scale (not
// below the minimum) and restarts the count; `window` finite steps in a
// row double it. A static scale never moves.
TEST(TrainingTest, LossScaleFollowsGradScaler) {
  LossScale dynamic;
  dynamic.scale = 8;
  dynamic.window = 2;
  dynamic.minimum = 2;
  EXPECT_FALSE(dynamic.update(INFINITY));
  EXPECT_EQ(dynamic.scale, 4);
  EXPECT_TRUE(dynamic.update(1.5));
  EXPECT_EQ(dynamic.scale, 4);
  EXPECT_FALSE(dynamic.update(NAN));
  EXPECT_EQ(dynamic.scale, 2);
  EXPECT_FALSE(dynamic.update(-INFINITY));
  EXPECT_EQ(dynamic.scale, 2);
  EXPECT_TRUE(dynamic.update(0.5));
  EXPECT_TRUE(dynamic.update(0.5));
  EXPECT_EQ(dynamic.scale, 4);
  EXPECT_EQ(dynamic.goodSteps, 0);
  LossScale fixed;
  fixed.scale = 1024;
  fixed.window = 0;
  EXPECT_FALSE(fixed.update(INFINITY));
  EXPECT_TRUE(fixed.update(1.0));
  EXPECT_EQ(fixed.scale, 1024);
  // The optimizer divides the scale out with the micro-batches.
  EXPECT_EQ(*optimizerScalar("grad_divisor", {}, 1e-3, 1, 4, 1024), 4096.0f);
}

TEST(TrainingTest, ZigzagReduceScatterLeavesTheLoadBalancedBlocks) {
  // A gradient stored in the ring's load-balanced layout (ZeRO over cp x
  // ulysses): each rank gets the zigzag block of the sum, which the zigzag
  // all-gather puts back in order.
  Mesh mesh;
  mesh.axes = {"cp", "ulysses"};
  mesh.shape = {2, 2};
  auto results = runRanks(
      [&](RankContext &ctx) {
        HostTensor mine(DType::F32, {8, 1});
        for (int i = 0; i < 8; ++i)
          mine.floats[size_t(i)] = float(i * (ctx.rank + 1));
        HostTensor block =
            reduceScatter(ctx, mine, ReduceOp::Sum, {"cp", "ulysses"}, 0,
                          /*zigzag=*/true);
        HostTensor whole = allGather(ctx, block, {"cp", "ulysses"}, 0,
                                     /*zigzag=*/true);
        return std::vector<HostTensor>{block, whole};
      },
      mesh, ".");
  ASSERT_TRUE(results.ok()) << results.status();
  HostTensor sum(DType::F32, {8, 1});
  for (int i = 0; i < 8; ++i)
    sum.floats[size_t(i)] = float(i * 10);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ((*results)[size_t(r)][0].floats.toVector(),
              zigzagSlice(sum, 0, r, 2, 4).floats.toVector())
        << "rank " << r;
    EXPECT_EQ((*results)[size_t(r)][1].floats.toVector(),
              sum.floats.toVector());
  }
  // Rank (0, 1) holds the second half of chunks 0 and 3 of four (rows 0, 1
  // and 6, 7): rows 6 and 7.
  EXPECT_EQ((*results)[1][0].floats.toVector(), (std::vector<float>{60, 70}));
}

TEST(TrainingTest, StepSumsMicroBatchesThenReducesOnce) {
  Mesh mesh;
  mesh.axes = {"dp"};
  mesh.shape = {2};
  RankTrainingStep step;
  // The "step": the rank's block of its input, and that block doubled (a
  // partial gradient).
  step.step = [](RankContext &, const std::vector<HostTensor> &in) {
    HostTensor twice = binary(BinaryKind::Add, in[0], in[0]);
    return std::vector<HostTensor>{in[0], twice};
  };
  step.inputs = {Layout{{"dp"}}};
  int reductions = 0;
  step.reduce = [&](RankContext &ctx, const std::vector<HostTensor> &in) {
    ++reductions;
    return std::vector<HostTensor>{
        allReduce(ctx, in[0], ReduceOp::Sum, {"dp"})};
  };
  step.partial = {1};
  auto input = [](std::vector<float> values) {
    HostTensor t(DType::F32, {int64_t(values.size())});
    t.floats = values;
    return std::vector<HostTensor>{t};
  };
  std::vector<std::vector<HostTensor>> micro{input({1, 2}), input({3, 4})};
  for (bool every : {false, true}) {
    step.everyMicroBatch = every;
    reductions = 0;
    auto results = runRanks(
        [&](RankContext &ctx) {
          return runTrainingStepOnRank(ctx, step, micro);
        },
        mesh, ".");
    ASSERT_TRUE(results.ok()) << results.status();
    // Rank 0 sums its blocks 1 and 3; the gradient is 2 * (1 + 3) + 2 * (2 +
    // 4) = 20 on both ranks, however it was reduced.
    EXPECT_EQ((*results)[0][0].floats.toVector(), (std::vector<float>{4}));
    EXPECT_EQ((*results)[1][0].floats.toVector(), (std::vector<float>{6}));
    EXPECT_EQ((*results)[0][1].floats.toVector(), (std::vector<float>{20}));
    EXPECT_EQ((*results)[1][1].floats.toVector(), (std::vector<float>{20}));
    EXPECT_EQ(reductions, every ? 4 : 2); // per rank: per micro-batch, or once
  }
}

} // namespace

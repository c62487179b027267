//===- CodecTest.cpp - Compressed collectives -----------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Codec.h"
#include "weft/Dialect/WeftInterfaces.h"
#include "weft/Plan/Plan.h"
#include "weft/runtime/Communicator.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <thread>

using namespace weft::rt;

namespace {

HostTensor randomTensor(int64_t n, unsigned seed, float scale = 1) {
  HostTensor t(DType::F32, {n});
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0, scale);
  for (int64_t i = 0; i < n; ++i)
    t.floats[i] = normal(gen);
  return t;
}

TEST(Codec, E4M3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(roundToE4M3(1.0f), 1.0f);
  // Steps of 1/8 in [1, 2): 1.0625 is a tie, to the even 1.0; 1.1875 to 1.25.
  EXPECT_EQ(roundToE4M3(1.0625f), 1.0f);
  EXPECT_EQ(roundToE4M3(1.1875f), 1.25f);
  EXPECT_EQ(roundToE4M3(-3.3f), -3.25f);
  EXPECT_EQ(roundToE4M3(448.0f), 448.0f);
  EXPECT_EQ(roundToE4M3(1e6f), 448.0f);
  EXPECT_EQ(roundToE4M3(-1e6f), -448.0f);
  // Subnormals: steps of 2^-9 below 2^-6.
  EXPECT_EQ(roundToE4M3(std::ldexp(1.0f, -9)), std::ldexp(1.0f, -9));
  EXPECT_EQ(roundToE4M3(std::ldexp(1.0f, -10)), 0.0f);
  EXPECT_EQ(roundToE4M3(3 * std::ldexp(1.0f, -10)), std::ldexp(1.0f, -8));
  EXPECT_EQ(roundToE4M3(0.0f), 0.0f);
}

// The element functions the CUDA kernels share with the CPU round trip:
// every finite e4m3 code decodes and encodes back to itself, every float
// encodes to the nearest code (ties to the even mantissa, saturated at 448),
// and int8 rounds ties to even and clamps.
TEST(Codec, SharedElementFunctionsEncodeToTheNearestCode) {
  std::vector<std::pair<float, uint8_t>> codes;
  for (int b = 0; b < 256; ++b) {
    float v = codec::decodeE4M3(uint8_t(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(codec::encodeE4M3(v), b) << "code " << b << " = " << v;
    codes.push_back({v, uint8_t(b)});
  }
  EXPECT_EQ(codec::decodeE4M3(0x7e), 448.0f);
  EXPECT_EQ(codec::decodeE4M3(0x01), std::ldexp(1.0f, -9));
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-12, 10);
  for (int t = 0; t < 20000; ++t) {
    float v = std::ldexp(mantissa(gen), exponent(gen));
    float best = 0;
    uint8_t bestBits = 0;
    float bestDistance = INFINITY;
    for (auto [c, bits] : codes) {
      float d = std::fabs(c - v);
      if (std::signbit(c) != std::signbit(v) && c != 0)
        continue;
      if (d < bestDistance ||
          (d == bestDistance && (bits & 1) == 0 && (bestBits & 1) == 1)) {
        best = c;
        bestBits = bits;
        bestDistance = d;
      }
    }
    EXPECT_EQ(std::fabs(codec::decodeE4M3(codec::encodeE4M3(v))),
              std::fabs(best))
        << v;
  }
  EXPECT_EQ(codec::encodeE4M3(1e9f), 0x7e);
  EXPECT_EQ(codec::encodeE4M3(-1e9f), 0xfe);
  EXPECT_EQ(codec::encodeE4M3(NAN), 0x7f);
  EXPECT_EQ(codec::encodeInt8(2.5f), 2);
  EXPECT_EQ(codec::encodeInt8(-2.5f), -2);
  EXPECT_EQ(codec::encodeInt8(3.5f), 4);
  EXPECT_EQ(codec::encodeInt8(300.0f), 127);
  EXPECT_EQ(codec::encodeInt8(-300.0f), -127);
  EXPECT_EQ(codec::encodeInt8(NAN), 0);
  // A segment: the payload padded to 4 bytes, then a scale per block.
  EXPECT_EQ(codec::segmentBytes(1000, 1, true), 1000 + 4 * 8);
  EXPECT_EQ(codec::segmentBytes(1001, 1, true), 1004 + 4 * 8);
  EXPECT_EQ(codec::segmentBytes(1001, 2, false), 2004);
  // A NaN in a block leaves it unscaled: the CPU keeps its values.
  HostTensor x = randomTensor(256, 3);
  x.floats[5] = NAN;
  HostTensor back = roundTrip(x, Codec::Int8);
  EXPECT_TRUE(std::isnan(back.floats[5]));
  EXPECT_EQ(back.floats[6], x.floats[6]);
  EXPECT_NE(back.floats[200], x.floats[200]);
}

TEST(Codec, WireBytesCountPayloadAndScales) {
  EXPECT_EQ(wireBytes(1000, DType::F32, Codec::None), 4000);
  EXPECT_EQ(wireBytes(1000, DType::F32, Codec::BF16), 2000);
  EXPECT_EQ(wireBytes(1000, DType::BF16, Codec::BF16), 2000);
  // 1000 one-byte values and ceil(1000 / 128) = 8 f32 scales.
  EXPECT_EQ(wireBytes(1000, DType::F32, Codec::Int8), 1032);
  EXPECT_EQ(wireBytes(1000, DType::BF16, Codec::FP8), 1032);
  EXPECT_EQ(wireBytes(1000, DType::I64, Codec::Int8), 8000);
  // The dialect's count (what the cost model and the IR say) is the same.
  for (int64_t n : {1, 127, 128, 129, 1000, 65536})
    for (auto [codec, dialect] :
         {std::pair(Codec::None, weft::CollectiveCodec::none),
          {Codec::BF16, weft::CollectiveCodec::bf16},
          {Codec::FP8, weft::CollectiveCodec::fp8},
          {Codec::Int8, weft::CollectiveCodec::int8}})
      for (auto [dtype, width] :
           {std::pair(DType::F32, 4), {DType::BF16, 2}, {DType::F16, 2}})
        EXPECT_EQ(wireBytes(n, dtype, codec),
                  weft::codecWireBytes(n, width, true, dialect))
            << n << " " << codecName(codec);
}

TEST(Codec, RoundTripErrorIsBoundedPerBlock) {
  HostTensor x = randomTensor(1000, 7);
  // A block with a large outlier: the others lose precision in that block
  // only.
  x.floats[5] = 100;
  for (Codec codec : {Codec::BF16, Codec::FP8, Codec::Int8}) {
    HostTensor y = roundTrip(x, codec);
    ASSERT_EQ(y.shape, x.shape);
    for (int64_t block = 0; block < 1000; block += kCodecBlock) {
      float amax = 0;
      for (int64_t i = block; i < std::min<int64_t>(1000, block + kCodecBlock);
           ++i)
        amax = std::max(amax, std::fabs(x.floats[i]));
      for (int64_t i = block; i < std::min<int64_t>(1000, block + kCodecBlock);
           ++i) {
        float error = std::fabs(y.floats[i] - x.floats[i]);
        float v = std::fabs(x.floats[i]);
        switch (codec) {
        case Codec::BF16: // 8 significant bits: half an ulp of 2^-8
          EXPECT_LE(error, v * std::ldexp(1.0f, -8)) << i;
          break;
        case Codec::Int8: // half a step of amax / 127
          EXPECT_LE(error, amax / 127 / 2 * 1.0001f) << i;
          break;
        default: // e4m3: 3 mantissa bits, or the subnormal step
          EXPECT_LE(error, std::max(v * 0.0625f * 1.0001f,
                                    amax / 448 * std::ldexp(1.0f, -10)))
              << i;
        }
      }
    }
  }
  HostTensor zeros(DType::F32, {300});
  EXPECT_EQ(roundTrip(zeros, Codec::Int8).floats, zeros.floats);
  // Magnitudes whose scale would underflow go as they are (never NaN).
  HostTensor tiny(DType::F32, {4});
  tiny.floats = {1e-45f, 0.0f, -1e-45f, 0.0f};
  for (Codec codec : {Codec::FP8, Codec::Int8})
    EXPECT_EQ(roundTrip(tiny, codec).floats, tiny.floats);
  HostTensor infinite(DType::F32, {2});
  infinite.floats = {INFINITY, 1.0f};
  EXPECT_EQ(roundTrip(infinite, Codec::Int8).floats[0], INFINITY);
  HostTensor ints(DType::I64, {3});
  ints.ints = {1, 2, 3};
  EXPECT_EQ(roundTrip(ints, Codec::Int8).ints, ints.ints);
}

TEST(Codec, CompressedCollectivesAgreeOnEveryRankAndCountEncodedBytes) {
  constexpr int n = 4;
  constexpr int64_t size = 1024;
  std::vector<int> group = {0, 1, 2, 3};
  for (Codec codec : {Codec::None, Codec::BF16, Codec::FP8, Codec::Int8}) {
    InProcessCommunicator comm(n);
    std::vector<HostTensor> reduced(n), gathered(n), inputs(n);
    for (int rank = 0; rank < n; ++rank)
      inputs[rank] = randomTensor(size, 100 + rank);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < n; ++rank)
      threads.emplace_back([&, rank] {
        reduced[rank] =
            *comm.allReduce(rank, group, inputs[rank], ReduceOp::Sum, codec);
        gathered[rank] = *comm.allGather(rank, group, inputs[rank], 0, codec);
      });
    for (std::thread &t : threads)
      t.join();
    // What the ring sends: the summands encoded, then the sum encoded.
    HostTensor expected = roundTrip(inputs[0], codec);
    for (int rank = 1; rank < n; ++rank) {
      HostTensor next = roundTrip(inputs[rank], codec);
      for (int64_t i = 0; i < size; ++i)
        expected.floats[i] += next.floats[i];
    }
    expected = roundTrip(expected, codec);
    double worst = 0;
    for (int rank = 0; rank < n; ++rank) {
      EXPECT_EQ(reduced[rank].floats, expected.floats) << codecName(codec);
      EXPECT_EQ(gathered[rank].floats, gathered[0].floats);
      // Bytes: all-reduce 2(n-1)/n and all-gather (n-1) of the encoded size.
      int64_t wire = wireBytes(size, DType::F32, codec);
      EXPECT_EQ(comm.bytesSent(rank), 2 * (n - 1) * wire / n + (n - 1) * wire);
    }
    // The exact sum, for scale: every codec stays close.
    for (int64_t i = 0; i < size; ++i) {
      double exact = 0;
      for (int rank = 0; rank < n; ++rank)
        exact += inputs[rank].floats[i];
      worst = std::max(worst, std::fabs(exact - reduced[0].floats[i]));
    }
    EXPECT_LE(worst, codec == Codec::None   ? 1e-5
                     : codec == Codec::BF16 ? 0.05
                                            : 0.6)
        << codecName(codec);
  }
}

TEST(Codec, TopKKeepsTheLargestPercentAndFeedsTheRestBack) {
  HostTensor x = randomTensor(1000, 11);
  HostTensor kept = roundTrip(x, Codec::TopK);
  // ceil(1000 / 100) = 10 elements survive, the largest by magnitude.
  std::vector<float> magnitudes;
  for (int64_t i = 0; i < 1000; ++i)
    magnitudes.push_back(std::fabs(x.floats[i]));
  std::sort(magnitudes.rbegin(), magnitudes.rend());
  int nonzero = 0;
  for (int64_t i = 0; i < 1000; ++i)
    if (kept.floats[i] != 0) {
      ++nonzero;
      EXPECT_EQ(kept.floats[i], x.floats[i]);
      EXPECT_GE(std::fabs(x.floats[i]), magnitudes[9]);
    }
  EXPECT_EQ(nonzero, 10);
  EXPECT_EQ(wireBytes(1000, DType::F32, Codec::TopK), 80);
  EXPECT_EQ(weft::codecWireBytes(1000, 4, true, weft::CollectiveCodec::topk),
            80);

  // Error feedback: over steps, what was sent plus what is still held back
  // is exactly what was fed in.
  FeedbackStore store;
  int site = 0;
  HostTensor fedIn(DType::F32, {1000}), sentSum(DType::F32, {1000});
  for (int step = 0; step < 5; ++step) {
    HostTensor g = randomTensor(1000, 20 + step);
    HostTensor total = store.withFeedback(0, &site, g);
    HostTensor sent = roundTrip(total, Codec::TopK);
    for (int64_t i = 0; i < 1000; ++i) {
      fedIn.floats[i] += g.floats[i];
      sentSum.floats[i] += sent.floats[i];
    }
  }
  HostTensor residual =
      store.withFeedback(0, &site, HostTensor(DType::F32, {1000}));
  for (int64_t i = 0; i < 1000; ++i)
    EXPECT_NEAR(sentSum.floats[i] + residual.floats[i], fedIn.floats[i], 1e-5);

  // The all-reduce sums every rank's kept part and counts an all-gather of
  // them: (n - 1) x 8 bytes x 10.
  InProcessCommunicator comm(2);
  std::vector<HostTensor> out(2);
  std::vector<HostTensor> in = {randomTensor(1000, 1), randomTensor(1000, 2)};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      out[rank] =
          *comm.allReduce(rank, {0, 1}, in[rank], ReduceOp::Sum, Codec::TopK);
    });
  for (std::thread &t : threads)
    t.join();
  HostTensor a = roundTrip(in[0], Codec::TopK);
  HostTensor b = roundTrip(in[1], Codec::TopK);
  for (int64_t i = 0; i < 1000; ++i)
    EXPECT_EQ(out[0].floats[i], a.floats[i] + b.floats[i]);
  EXPECT_EQ(out[1].floats, out[0].floats);
  EXPECT_EQ(comm.bytesSent(0), 80);
  // Only summing all-reduces take top-k.
  EXPECT_FALSE(comm.allGather(0, {0}, in[0], 0, Codec::TopK).ok());
}

// A pipeline's point-to-point send under a codec: the receiver gets what
// the encoding decodes to, and the sender counts the encoded bytes (1000
// floats as int8: 1000 + 8 scales x 4).
TEST(Codec, PointToPointSendsEncoded) {
  InProcessCommunicator comm(2);
  HostTensor x = randomTensor(1000, 3);
  ASSERT_TRUE(comm.send(0, 1, x, Codec::Int8).ok());
  absl::StatusOr<HostTensor> got = comm.recv(1, 0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->floats, roundTrip(x, Codec::Int8).floats);
  EXPECT_NE(got->floats, x.floats);
  EXPECT_EQ(comm.bytesSent(0), 1000 + 8 * 4);
  ASSERT_TRUE(comm.send(0, 1, x).ok());
  EXPECT_EQ(comm.recv(1, 0)->floats, x.floats);
  EXPECT_EQ(comm.bytesSent(0), 1032 + 4000);
}

TEST(Codec, PolicyParsesAndPicksTheMildestCodecOfAGroup) {
  auto policy = weft::parseCompressPolicy("tp:bf16,dp:int8");
  ASSERT_TRUE(bool(policy));
  EXPECT_EQ(weft::formatCompressPolicy(*policy), "dp:int8,tp:bf16");
  EXPECT_EQ(weft::codecForAxes(*policy, {"dp"}), "int8");
  EXPECT_EQ(weft::codecForAxes(*policy, {"dp", "tp"}), "bf16");
  EXPECT_EQ(weft::codecForAxes(*policy, {"dp", "cp"}), "none");
  EXPECT_EQ(weft::codecForAxes(*policy, {"cp"}), "none");
  EXPECT_EQ(weft::codecForAxes(*weft::parseCompressPolicy("dp:topk,cp:int8"),
                               {"dp", "cp"}),
            "int8");
  // pp names the pipeline's sends, first in mesh order.
  auto piped = weft::parseCompressPolicy("tp:bf16,pp:int8");
  ASSERT_TRUE(bool(piped));
  EXPECT_EQ(weft::formatCompressPolicy(*piped), "pp:int8,tp:bf16");
  EXPECT_EQ(weft::codecForAxes(*piped, {"pp"}), "int8");
  for (const char *bad :
       {"dp:int4", "pp:topk", "xx:bf16", "dp:int8,dp:bf16", "dp", "tp:topk"}) {
    auto parsed = weft::parseCompressPolicy(bad);
    EXPECT_FALSE(bool(parsed)) << bad;
    if (!parsed)
      llvm::consumeError(parsed.takeError());
  }
  auto spec = weft::parsePlanSpec("dp=2,tp=2,compress=dp:int8,tp:bf16,mbs=2");
  ASSERT_TRUE(bool(spec));
  EXPECT_EQ(spec->plan.compress(), "dp:int8,tp:bf16");
  EXPECT_EQ(spec->plan.micro_batch(), 2);
  EXPECT_NE(weft::formatPlanSpec(spec->plan).find("compress=dp:int8,tp:bf16"),
            std::string::npos);
}

} // namespace

//===- HfCheckpointTest.cpp - Weights from Hugging Face safetensors -------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// The safetensors reader (dtypes, bounds, the errors of a damaged header)
// and the layout of the builder's parameters from transformers' tensors.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/HfCheckpoint.h"
#include "weft/Planner/HfConfig.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace weft;
using namespace weft::planner;

namespace {

/// A safetensors file of `header` (JSON) and `data`, at a temporary path.
std::string writeFile(const std::string &header, const std::string &data) {
  llvm::SmallString<128> path;
  int fd;
  if (llvm::sys::fs::createTemporaryFile("weft-ckpt", "safetensors", fd, path))
    return "";
  llvm::raw_fd_ostream out(fd, /*shouldClose=*/true);
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i)
    out << char((length >> (8 * i)) & 0xff);
  out << header << data;
  return path.str().str();
}

std::string bytesOf(const void *p, size_t n) {
  return std::string(static_cast<const char *>(p), n);
}

std::string errorOf(const std::string &path) {
  llvm::Expected<HfCheckpoint> checkpoint = HfCheckpoint::open(path);
  if (checkpoint)
    return "";
  return llvm::toString(checkpoint.takeError());
}

TEST(HfCheckpoint, ReadsEachDtype) {
  // 1.5 and -2 as F32, F16 (0x3e00, 0xc000), BF16 (0x3fc0, 0xc000), F64.
  float f32[] = {1.5f, -2.0f};
  uint16_t f16[] = {0x3e00, 0xc000}, bf16[] = {0x3fc0, 0xc000};
  double f64[] = {1.5, -2.0};
  std::string data =
      bytesOf(f32, 8) + bytesOf(f16, 4) + bytesOf(bf16, 4) + bytesOf(f64, 16);
  std::string path = writeFile(
      R"({"__metadata__": {"format": "pt"},
          "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F16", "shape": [1, 2], "data_offsets": [8, 12]},
          "c": {"dtype": "BF16", "shape": [2], "data_offsets": [12, 16]},
          "d": {"dtype": "F64", "shape": [2], "data_offsets": [16, 32]}})",
      data);
  llvm::Expected<HfCheckpoint> checkpoint = HfCheckpoint::open(path);
  ASSERT_TRUE(bool(checkpoint)) << llvm::toString(checkpoint.takeError());
  EXPECT_EQ(checkpoint->names(),
            (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(checkpoint->shape("b"), (llvm::ArrayRef<int64_t>{1, 2}));
  for (const char *name : {"a", "b", "c", "d"})
    EXPECT_EQ(checkpoint->read(name), (std::vector<float>{1.5f, -2.0f}))
        << name;
  llvm::sys::fs::remove(path);
}

TEST(HfCheckpoint, DamagedFilesAreRefused) {
  float two[] = {1, 2};
  std::string data = bytesOf(two, 8);
  auto refused = [&](const std::string &header, const char *why) {
    std::string path = writeFile(header, data);
    std::string error = errorOf(path);
    llvm::sys::fs::remove(path);
    EXPECT_NE(error.find(why), std::string::npos) << error;
  };
  refused("{not json", "its header is not JSON");
  refused(R"({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})",
          "is C64: Weft reads F32, F16, BF16 and F64 weights");
  refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})",
          "has data_offsets outside the file's 8 bytes of data");
  refused(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
          "has 8 bytes for 3 F32 elements");
  refused(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}})",
          "has a dimension that is not a size");
  refused(R"({"a": {"dtype": "F32", "shape": [2]}})",
          "lacks its dtype, shape or two data_offsets");
  std::string path = writeFile("", "");
  std::string truncated = path + ".short";
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(truncated, ec);
    out << "abc";
  }
  EXPECT_NE(errorOf(truncated).find("not a safetensors file"),
            std::string::npos);
  llvm::sys::fs::remove(path);
  llvm::sys::fs::remove(truncated);
}

// writeLike rounds into each tensor's dtype to nearest even: IEEE half's
// subnormals and overflow, bfloat16's ties; read back, the values are those
// roundings.
TEST(HfCheckpoint, WritesInEachDtype) {
  uint16_t zeros[6] = {};
  std::string path = writeFile(
      R"({"h": {"dtype": "F16", "shape": [6], "data_offsets": [0, 12]},
          "b": {"dtype": "BF16", "shape": [3], "data_offsets": [12, 18]}})",
      bytesOf(zeros, 12) + bytesOf(zeros, 6));
  llvm::Expected<HfCheckpoint> checkpoint = HfCheckpoint::open(path);
  ASSERT_TRUE(bool(checkpoint)) << llvm::toString(checkpoint.takeError());
  // names() order: "b" then "h".
  std::vector<float> values = {1.00390625f, 1.01171875f, -3.0f, 1.5f, 65504.0f,
                               70000.0f,    1e-7f,       0.1f,  -0.0f};
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("weft-ckpt-out", dir));
  ASSERT_FALSE(bool(checkpoint->writeLike(values, dir)));
  llvm::SmallString<128> written(dir);
  llvm::sys::path::append(written, llvm::sys::path::filename(path));
  llvm::Expected<HfCheckpoint> back = HfCheckpoint::open(written);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  // bfloat16 keeps 8 bits: 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 ties to
  // 1 + 2^-6.
  EXPECT_EQ(back->read("b"), (std::vector<float>{1.0f, 1.015625f, -3.0f}));
  // Half: 65504 is its largest, 70000 overflows, 1e-7 is 2^-23 (two of
  // its smallest subnormal), 0.1 is 1638 / 16384.
  std::vector<float> half = back->read("h");
  EXPECT_EQ(half[0], 1.5f);
  EXPECT_EQ(half[1], 65504.0f);
  EXPECT_TRUE(std::isinf(half[2]) && half[2] > 0);
  EXPECT_EQ(half[3], std::ldexp(1.0f, -23));
  EXPECT_EQ(half[4], 1638.0f / 16384.0f);
  EXPECT_TRUE(half[5] == 0.0f && std::signbit(half[5]));
  llvm::sys::fs::remove(written);
  llvm::sys::fs::remove(dir);
  llvm::sys::fs::remove(path);
}

// A sweep of magnitudes from half's subnormals past its largest: each value
// written as F16 reads back as x rounded to its quantum (11 significant
// bits, none finer than 2^-24) with ties to even, or infinity past 65520.
TEST(HfCheckpoint, HalfRoundingSweep) {
  std::vector<float> values;
  for (int e = -27; e <= 17; ++e)
    for (int k = 0; k < 64; ++k)
      values.push_back((k % 2 ? -1.0f : 1.0f) *
                       std::ldexp(1.0f + float(k) / 64.0f + 1.0f / 4096.0f, e));
  values.push_back(std::ldexp(1.0f + 1.0f / 2048.0f, 0)); // a tie: to 1
  values.push_back(std::ldexp(1.0f + 3.0f / 2048.0f, 0)); // a tie: up
  const size_t n = values.size();
  std::string zeros(n * 2, '\0');
  std::string path = writeFile(
      "{\"h\": {\"dtype\": \"F16\", \"shape\": [" + std::to_string(n) +
          "], \"data_offsets\": [0, " + std::to_string(2 * n) + "]}}",
      zeros);
  llvm::Expected<HfCheckpoint> checkpoint = HfCheckpoint::open(path);
  ASSERT_TRUE(bool(checkpoint)) << llvm::toString(checkpoint.takeError());
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("weft-ckpt-sweep", dir));
  ASSERT_FALSE(bool(checkpoint->writeLike(values, dir)));
  llvm::SmallString<128> written(dir);
  llvm::sys::path::append(written, llvm::sys::path::filename(path));
  llvm::Expected<HfCheckpoint> back = HfCheckpoint::open(written);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  std::vector<float> got = back->read("h");
  for (size_t i = 0; i < n; ++i) {
    const double x = values[i];
    double want;
    if (std::fabs(x) >= 65520.0) {
      want = std::copysign(INFINITY, x);
    } else {
      int e;
      std::frexp(x, &e);
      const double quantum = std::ldexp(1.0, std::max(e - 11, -24));
      want = std::nearbyint(x / quantum) * quantum;
    }
    EXPECT_EQ(double(got[i]), want) << "value " << x;
  }
  llvm::sys::fs::remove(written);
  llvm::sys::fs::remove(dir);
  llvm::sys::fs::remove(path);
}

// Every family the config reader builds has its checkpoint's names.
TEST(HfCheckpoint, EveryConfigFamilyIsRead) {
  for (const std::string &type : hfModelTypes()) {
    plan::ModelSpec spec;
    spec.set_hf_model_type(type);
    llvm::Error error = checkpointFamilySupported(spec);
    EXPECT_FALSE(bool(error)) << type;
    llvm::consumeError(std::move(error));
  }
  plan::ModelSpec preset;
  llvm::Error error = checkpointFamilySupported(preset);
  EXPECT_TRUE(bool(error));
  llvm::consumeError(std::move(error));
}

// Q, K and V rows of two KV heads of two query heads each (head_dim 1) go
// into the fused projection's columns as [q0 q1 k0 v0 q2 q3 k1 v1], each
// column the transposed row.
TEST(HfCheckpoint, FusedQkvGroupedByKvHead) {
  llvm::Expected<plan::ModelSpec> spec = modelFromHfConfigText(
      R"({"model_type": "llama", "hidden_size": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 1, "num_hidden_layers": 1,
          "intermediate_size": 8, "vocab_size": 8})",
      "config.json");
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  // q_proj [4, 4], k_proj and v_proj [2, 4]: row r of each is r + base.
  std::vector<float> q(16), k(8), v(8);
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 4; ++i)
      q[size_t(r * 4 + i)] = float(100 + 10 * r + i);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 4; ++i) {
      k[size_t(r * 4 + i)] = float(200 + 10 * r + i);
      v[size_t(r * 4 + i)] = float(300 + 10 * r + i);
    }
  std::string data =
      bytesOf(q.data(), 64) + bytesOf(k.data(), 32) + bytesOf(v.data(), 32);
  std::string path = writeFile(
      R"({"model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
          "model.layers.0.self_attn.k_proj.weight": {"dtype": "F32", "shape": [2, 4], "data_offsets": [64, 96]},
          "model.layers.0.self_attn.v_proj.weight": {"dtype": "F32", "shape": [2, 4], "data_offsets": [96, 128]}})",
      data);
  llvm::Expected<HfCheckpoint> checkpoint = HfCheckpoint::open(path);
  ASSERT_TRUE(bool(checkpoint)) << llvm::toString(checkpoint.takeError());
  std::vector<std::string> used;
  llvm::Expected<std::vector<float>> qkv = parameterFromCheckpoint(
      *checkpoint, *spec, "layers.0.qkv.weight", {4, 8}, used);
  ASSERT_TRUE(bool(qkv)) << llvm::toString(qkv.takeError());
  // Input feature i's row: the columns' rows' i-th entries.
  const float bases[] = {100, 110, 200, 300, 120, 130, 210, 310};
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 8; ++c)
      EXPECT_EQ((*qkv)[size_t(i * 8 + c)], bases[c] + float(i))
          << "input " << i << " column " << c;
  EXPECT_EQ(used.size(), 3u);
  // A shape the model does not have is refused by name.
  llvm::Expected<std::vector<float>> wrong = parameterFromCheckpoint(
      *checkpoint, *spec, "layers.0.qkv.weight", {4, 6}, used);
  ASSERT_FALSE(bool(wrong));
  EXPECT_NE(llvm::toString(wrong.takeError()).find("gives 32 values"),
            std::string::npos);
  llvm::sys::fs::remove(path);
}

} // namespace

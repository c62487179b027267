//===- CheckpointTest.cpp - weft train's checkpoints in the runtime ------===//
//
// Part of the Weft project.
//
// The runtime reads and writes the checkpoints `weft train --save` writes, so
// that generated training programs save and resume them: a round trip, the
// save directory's latest, and manifests that are corrupt at every length.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace weft::rt;
namespace fs = std::filesystem;

namespace {

HostTensor filled(Shape shape, float start) {
  HostTensor t(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.floats[i] = start + 0.25f * float(i);
  return t;
}

Checkpoint sample(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.optimizer = "adamw";
  c.parameters.push_back(CheckpointParameter{
      "wte.weight", filled({4, 3}, 1), filled({4, 3}, -1), filled({4, 3}, 2)});
  // A name JSON must escape, and a parameter without optimizer state.
  c.parameters.push_back(
      CheckpointParameter{"h.0\"quoted\\", filled({5}, 7), {}, {}});
  return c;
}

std::string freshDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + name;
  fs::remove_all(dir);
  return dir;
}

std::string readText(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void expectSame(const HostTensor &a, const HostTensor &b) {
  ASSERT_EQ(a.shape, b.shape);
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_EQ(a.floats[i], b.floats[i]);
}

TEST(CheckpointTest, RoundTripAndLatest) {
  std::string dir = freshDir("ckpt-roundtrip");
  Checkpoint withResiduals = sample(2);
  withResiduals.feedback = CheckpointFeedback{"dp=2,compress=dp:topk",
                                              {{1, 3, filled({6}, 0.5), ""}}};
  ASSERT_TRUE(writeCheckpoint(dir, withResiduals).ok());
  ASSERT_TRUE(writeCheckpoint(dir, sample(4)).ok());
  EXPECT_EQ(readText(dir + "/latest"), "step-4\n");
  EXPECT_FALSE(fs::exists(dir + "/step-4.tmp"));
  // The save directory reads as its latest; a step directory as itself.
  absl::StatusOr<Checkpoint> latest = readCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 4);
  EXPECT_EQ(latest->manifestPath, dir + "/step-4/manifest.json");
  absl::StatusOr<Checkpoint> two = readCheckpoint(dir + "/step-2");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->step, 2);
  EXPECT_EQ(two->optimizer, "adamw");
  // Top-k's residuals, by rank and all-reduce, with the plan.
  ASSERT_TRUE(two->feedback.has_value());
  EXPECT_EQ(two->feedback->plan, "dp=2,compress=dp:topk");
  ASSERT_EQ(two->feedback->residuals.size(), 1u);
  EXPECT_EQ(two->feedback->residuals[0].rank, 1);
  EXPECT_EQ(two->feedback->residuals[0].site, 3);
  EXPECT_EQ(two->feedback->residuals[0].file, dir + "/step-2/feedback-1-3.npy");
  expectSame(two->feedback->residuals[0].value, filled({6}, 0.5));
  EXPECT_FALSE(latest->feedback.has_value());
  Checkpoint expected = sample(2);
  ASSERT_EQ(two->parameters.size(), expected.parameters.size());
  for (size_t k = 0; k < expected.parameters.size(); ++k) {
    const CheckpointParameter &got = two->parameters[k];
    const CheckpointParameter &want = expected.parameters[k];
    EXPECT_EQ(got.name, want.name);
    expectSame(got.value, want.value);
    ASSERT_EQ(got.m.has_value(), want.m.has_value());
    ASSERT_EQ(got.v.has_value(), want.v.has_value());
    if (want.m)
      expectSame(*got.m, *want.m);
    if (want.v)
      expectSame(*got.v, *want.v);
  }
}

// Loss scaling's state reads back exactly (a scale that %g would round);
// one that does not fit the step is refused naming the manifest.
TEST(CheckpointTest, LossScale) {
  std::string dir = freshDir("ckpt-loss-scale");
  Checkpoint scaled = sample(5);
  scaled.lossScale =
      CheckpointLossScale{1048576.0 * 3 / 1024 / 1024 / 1024, 7, 4};
  ASSERT_TRUE(writeCheckpoint(dir, scaled).ok());
  absl::StatusOr<Checkpoint> read = readCheckpoint(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->lossScale.has_value());
  EXPECT_EQ(read->lossScale->scale, scaled.lossScale->scale);
  EXPECT_EQ(read->lossScale->goodSteps, 7);
  EXPECT_EQ(read->lossScale->optimizerSteps, 4);
  std::string manifest = dir + "/step-5/manifest.json";
  std::string text = readText(manifest);
  size_t at = text.find("\"optimizer_steps\":4");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 19, "\"optimizer_steps\":6");
  std::ofstream(manifest, std::ios::trunc) << text;
  absl::StatusOr<Checkpoint> bad = readCheckpoint(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(manifest + ": its loss_scale is not"),
            std::string::npos)
      << bad.status();
}

// weft train's manifest, as llvm::json prints it (keys sorted, and a name
// with a \u escape), reads the same.
TEST(CheckpointTest, ReadsWeftTrainsManifest) {
  std::string dir = freshDir("ckpt-weft-train");
  ASSERT_TRUE(writeCheckpoint(dir, sample(3)).ok());
  std::string step = dir + "/step-3";
  std::ofstream(step + "/manifest.json")
      << "{\"format\":\"weft-checkpoint-1\",\"optimizer\":\"adamw\","
         "\"parameters\":[{\"m\":\"m-0.npy\",\"name\":\"wte\\u002eweight\","
         "\"shape\":[4,3],\"v\":\"v-0.npy\",\"value\":\"param-0.npy\"},"
         "{\"name\":\"b\",\"shape\":[5],\"value\":\"param-1.npy\"}],"
         "\"step\":3, \"extra\": [true, false, null, -1.5e3, {}]}\n";
  absl::StatusOr<Checkpoint> read = readCheckpoint(step);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->parameters[0].name, "wte.weight");
  EXPECT_TRUE(read->parameters[0].v.has_value());
  EXPECT_FALSE(read->parameters[1].m.has_value());
}

// Every proper prefix of a manifest is refused with the manifest named, and
// nothing crashes; so are malformed top-k residuals and a shape that is not
// the file's.
TEST(CheckpointTest, RefusesWhatDoesNotFit) {
  std::string dir = freshDir("ckpt-bad");
  ASSERT_TRUE(writeCheckpoint(dir, sample(1)).ok());
  std::string manifest = dir + "/step-1/manifest.json";
  const std::string whole = readText(manifest);
  for (size_t n = 0; n + 1 < whole.size(); ++n) {
    std::ofstream(manifest, std::ios::trunc) << whole.substr(0, n);
    absl::StatusOr<Checkpoint> read = readCheckpoint(dir);
    ASSERT_FALSE(read.ok()) << "a manifest cut at " << n << " was read";
    EXPECT_NE(read.status().message().find(manifest), std::string::npos)
        << read.status();
  }
  std::string badFeedback = whole;
  badFeedback.insert(1, "\"feedback\":{\"plan\":\"dp=2\"},");
  std::ofstream(manifest, std::ios::trunc) << badFeedback;
  absl::StatusOr<Checkpoint> feedback = readCheckpoint(dir);
  ASSERT_FALSE(feedback.ok());
  EXPECT_NE(feedback.status().message().find("its feedback is not {plan, "
                                             "residuals}"),
            std::string::npos);
  // Malformed where a parser could go wrong: a \u escape that is not hex,
  // sizes no tensor has.
  const std::pair<const char *, const char *> edits[] = {
      {"\"name\":\"wte.weight\"", "\"name\":\"wte\\uZZZZ\""},
      {"\"shape\":[4,3]", "\"shape\":[1e300,3]"},
      {"\"shape\":[4,3]", "\"shape\":[-4,3]"},
      {"\"shape\":[4,3]", "\"shape\":[4.5,3]"}};
  for (const auto &edit : edits) {
    std::string text = whole;
    size_t at = text.find(edit.first);
    ASSERT_NE(at, std::string::npos) << edit.first;
    text.replace(at, std::string(edit.first).size(), edit.second);
    std::ofstream(manifest, std::ios::trunc) << text;
    absl::StatusOr<Checkpoint> read = readCheckpoint(dir);
    EXPECT_FALSE(read.ok()) << edit.second;
  }
  std::string reshaped = whole;
  size_t shape = reshaped.find("[4,3]");
  ASSERT_NE(shape, std::string::npos);
  reshaped.replace(shape, 5, "[3,4]");
  std::ofstream(manifest, std::ios::trunc) << reshaped;
  absl::StatusOr<Checkpoint> wrong = readCheckpoint(dir);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("param-0.npy: holds [4, 3] for "
                                          "'wte.weight', the manifest says "
                                          "[3, 4]"),
            std::string::npos)
      << wrong.status();
  absl::StatusOr<Checkpoint> missing = readCheckpoint(dir + "/nothing");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot read the checkpoint's "
                                            "manifest"),
            std::string::npos);
}

} // namespace

namespace {
// The optimizer states a checkpoint keeps, and where: weft train and
// generated programs both read this.
TEST(CheckpointTest, StatesByRole) {
  EXPECT_EQ(checkpointStateOf("exp_avg"), CheckpointState::M);
  EXPECT_EQ(checkpointStateOf("momentum_buffer"), CheckpointState::M);
  EXPECT_EQ(checkpointStateOf("exp_avg_sq"), CheckpointState::V);
  EXPECT_EQ(checkpointStateOf("param"), CheckpointState::None);
  EXPECT_EQ(checkpointStateOf("grad"), CheckpointState::None);
}
} // namespace

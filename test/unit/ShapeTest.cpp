//===- ShapeTest.cpp - Broadcasting and reduction shape rules -------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftShape.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

using Shape = SmallVector<int64_t>;

TEST(BroadcastShapes, AlignsAtTrailingDimensions) {
  EXPECT_EQ(weft::broadcastShapes({4, 1, 8}, {3, 1}), Shape({4, 3, 8}));
  EXPECT_EQ(weft::broadcastShapes({8}, {2, 4, 8}), Shape({2, 4, 8}));
  EXPECT_EQ(weft::broadcastShapes({}, {5}), Shape({5}));
  EXPECT_EQ(weft::broadcastShapes({1}, {0}), Shape({0}));
}

TEST(BroadcastShapes, RejectsMismatchedDimensions) {
  EXPECT_FALSE(weft::broadcastShapes({2}, {3}).has_value());
  EXPECT_FALSE(weft::broadcastShapes({4, 2}, {4, 3}).has_value());
}

class InferenceTest : public ::testing::Test {
protected:
  MLIRContext context;
  Location loc = UnknownLoc::get(&context);
  Type f32 = Float32Type::get(&context);

  /// Runs `infer` and returns the error it reported, or "" if none.
  template <typename Fn> std::string errorOf(Fn infer) {
    std::string message;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      message = diag.str();
      return success();
    });
    EXPECT_TRUE(failed(infer()));
    return message;
  }
};

TEST_F(InferenceTest, BroadcastResultUsesGivenElementType) {
  SmallVector<Type> inferred;
  Type a = RankedTensorType::get({4, 8}, f32);
  Type b = RankedTensorType::get({8}, f32);
  ASSERT_TRUE(succeeded(weft::inferBroadcastResultType(
      loc, {a, b}, IntegerType::get(&context, 1), inferred)));
  EXPECT_EQ(inferred.front(),
            RankedTensorType::get({4, 8}, IntegerType::get(&context, 1)));
}

TEST_F(InferenceTest, BroadcastFailureIsReported) {
  Type a = RankedTensorType::get({4, 8}, f32);
  Type b = RankedTensorType::get({3}, f32);
  SmallVector<Type> inferred;
  std::string message = errorOf([&] {
    return weft::inferBroadcastResultType(loc, {a, b}, nullptr, inferred);
  });
  EXPECT_NE(message.find("do not broadcast"), std::string::npos) << message;
}

TEST_F(InferenceTest, ReduceKeepsOrDropsDimensions) {
  Type input = RankedTensorType::get({2, 8, 16}, f32);
  SmallVector<Type> kept, dropped;
  ASSERT_TRUE(succeeded(
      weft::inferReduceResultType(loc, input, {0, 2}, true, kept)));
  ASSERT_TRUE(succeeded(
      weft::inferReduceResultType(loc, input, {0, 2}, false, dropped)));
  EXPECT_EQ(kept.front(), RankedTensorType::get({1, 8, 1}, f32));
  EXPECT_EQ(dropped.front(), RankedTensorType::get({8}, f32));
}

TEST_F(InferenceTest, ReduceRejectsBadAxes) {
  Type input = RankedTensorType::get({2, 8}, f32);
  SmallVector<Type> inferred;
  EXPECT_NE(errorOf([&] {
              return weft::inferReduceResultType(loc, input, {-1}, false,
                                                 inferred);
            }).find("out of range"),
            std::string::npos);
  EXPECT_NE(errorOf([&] {
              return weft::inferReduceResultType(loc, input, {1, 1}, false,
                                                 inferred);
            }).find("listed twice"),
            std::string::npos);
}

} // namespace

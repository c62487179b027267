//===- DialectApiTest.cpp - Building weft IR from C++ ---------------------===//
//
// Part of the Weft project.
//
// What an embedding compiler does with the dialect: build ops with inferred
// result types, fold them, read their facts, and get diagnostics (not
// crashes) from bad input.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/InitAll.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace weft;

namespace {

class DialectApiTest : public ::testing::Test {
protected:
  DialectApiTest() {
    DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    module = ModuleOp::create(UnknownLoc::get(&context));
    builder.setInsertionPointToEnd(module->getBody());
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape, element ? element : builder.getF32Type());
  }

  /// A value of the given type: an argument of a fresh function.
  Value argument(RankedTensorType type) {
    auto func = func::FuncOp::create(builder, builder.getUnknownLoc(), "f" +
                                     std::to_string(counter++),
                                     builder.getFunctionType({type}, {}));
    return func.addEntryBlock()->getArgument(0);
  }

  MLIRContext context;
  OpBuilder builder{&context};
  OwningOpRef<ModuleOp> module;
  int counter = 0;
};

TEST_F(DialectApiTest, MatmulInfersBatchedTransposedResult) {
  Value q = argument(tensor({2, 12, 128, 64}));
  Value k = argument(tensor({2, 12, 128, 64}));
  auto scores = MatmulOp::create(builder, builder.getUnknownLoc(), q, k,
                                 /*transpose_lhs=*/false,
                                 /*transpose_rhs=*/true);
  EXPECT_EQ(scores.getType(), tensor({2, 12, 128, 128}));
}

TEST_F(DialectApiTest, LinearInfersFromTorchWeightLayout) {
  Value x = argument(tensor({2, 128, 768}));
  Value w = argument(tensor({3072, 768}));
  Value b = argument(tensor({3072}));
  auto fc = LinearOp::create(builder, builder.getUnknownLoc(), x, w, b,
                             /*transpose_weight=*/true);
  EXPECT_EQ(fc.getType(), tensor({2, 128, 3072}));
}

TEST_F(DialectApiTest, AttentionInfersGroupedQueryResult) {
  Type bf16 = builder.getBF16Type();
  Value q = argument(tensor({1, 32, 16, 128}, bf16));
  Value k = argument(tensor({1, 8, 16, 128}, bf16));
  Value v = argument(tensor({1, 8, 16, 64}, bf16));
  auto attention = AttentionOp::create(builder, builder.getUnknownLoc(), q, k,
                                       v, /*mask=*/Value(),
                                       llvm::APFloat(0.125f),
                                       /*causal=*/true);
  EXPECT_EQ(attention.getType(), tensor({1, 32, 16, 64}, bf16));
  EXPECT_TRUE(succeeded(verify(attention)));
}

TEST_F(DialectApiTest, SplitInfersOneResultPerSize) {
  Value qkv = argument(tensor({2, 16, 96}));
  auto split = SplitOp::create(builder, builder.getUnknownLoc(), qkv, 2,
                               ArrayRef<int64_t>{32, 32, 32});
  ASSERT_EQ(split.getNumResults(), 3u);
  for (Value piece : split.getResults())
    EXPECT_EQ(piece.getType(), tensor({2, 16, 32}));
}

TEST_F(DialectApiTest, TransposeFoldComposesPermutations) {
  Value x = argument(tensor({2, 3, 5}));
  auto first = TransposeOp::create(builder, builder.getUnknownLoc(), x,
                                   ArrayRef<int64_t>{1, 0, 2});
  auto second = TransposeOp::create(builder, builder.getUnknownLoc(),
                                    first.getResult(),
                                    ArrayRef<int64_t>{2, 0, 1});
  SmallVector<OpFoldResult> folded;
  ASSERT_TRUE(succeeded(second->fold(folded)));
  // The fold rewrites `second` in place to read x directly.
  EXPECT_EQ(second.getInput(), x);
  EXPECT_EQ(second.getPermutation(), ArrayRef<int64_t>({2, 1, 0}));
  EXPECT_EQ(second.getType(), tensor({5, 3, 2}));
}

TEST_F(DialectApiTest, CostAtShardShapes) {
  Value x = argument(tensor({4, 512, 1024}));
  Value w = argument(tensor({1024, 4096}));
  auto fc = LinearOp::create(builder, builder.getUnknownLoc(), x, w, Value(),
                             false);
  auto costOp = cast<CostOpInterface>(fc.getOperation());
  OpCost full = costOp.getCost();
  EXPECT_DOUBLE_EQ(full.flops, 2.0 * 4 * 512 * 1024 * 4096);
  // Column-parallel over 4 ranks: each rank holds a quarter of the outputs.
  OpCost shard = costOp.estimateCost(
      {tensor({4, 512, 1024}), tensor({1024, 1024})},
      {tensor({4, 512, 1024})});
  EXPECT_DOUBLE_EQ(shard.flops * 4, full.flops);
  EXPECT_EQ(shard.bytesWritten * 4, full.bytesWritten);
}

TEST_F(DialectApiTest, ShardingRuleOfLinearNamesReductionFactor) {
  Value x = argument(tensor({8, 32}));
  Value w = argument(tensor({32, 64}));
  auto fc = LinearOp::create(builder, builder.getUnknownLoc(), x, w, Value(),
                             false);
  ShardingRule rule = cast<ShardingRuleOpInterface>(fc.getOperation())
                          .getShardingRule();
  ASSERT_EQ(rule.getNumFactors(), 3);
  // The contracting factor is the input's last dimension and a reduction.
  int64_t k = rule.operands[0][1].front();
  EXPECT_EQ(rule.factorSizes[k], 32);
  EXPECT_EQ(rule.getFactorKind(k), ShardingRule::FactorKind::Reduction);
  EXPECT_EQ(rule.getFactorKind(rule.results[0][1].front()),
            ShardingRule::FactorKind::Parallel);
  EXPECT_EQ(rule.str(), "([i, j], [j, k]) -> ([i, k]) {i=8, j=32, k=64} "
                        "reduction={j}");
}

TEST_F(DialectApiTest, MalformedTextGivesLocatedDiagnostic) {
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    llvm::raw_string_ostream os(message);
    os << diag.getLocation() << ": " << diag.str();
    return success();
  });
  OwningOpRef<ModuleOp> parsed = parseSourceString<ModuleOp>(
      "func.func @f(%x: tensor<4xf32>) {\n"
      "  %0 = weft.transpose %x permutation [1, 0] : tensor<4xf32> -> "
      "tensor<4xf32>\n"
      "  return\n}\n",
      ParserConfig(&context), "model.mlir");
  EXPECT_FALSE(parsed);
  EXPECT_NE(message.find("model.mlir\":2:8"), std::string::npos) << message;
  EXPECT_NE(message.find("permutation has 2 entries for rank 1"),
            std::string::npos)
      << message;
}

} // namespace

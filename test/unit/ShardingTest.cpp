//===- ShardingTest.cpp - Sharding attributes against a mesh --------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/InitAll.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace weft;

namespace {

class ShardingTest : public ::testing::Test {
protected:
  ShardingTest() {
    DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    module = parseSourceString<ModuleOp>(
        "weft.mesh @world(dp = 2, cp = 2, tp = 4)", ParserConfig(&context));
    mesh = cast<MeshOp>(module->getBody()->front());
  }

  ShardingAttr parse(StringRef text) {
    return dyn_cast_or_null<ShardingAttr>(parseAttribute(text, &context));
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  MeshOp mesh;
};

TEST_F(ShardingTest, MeshAnswersAxisSizes) {
  EXPECT_EQ(mesh.getNumDevices(), 16);
  EXPECT_EQ(mesh.getAxisSize("tp"), 4);
  EXPECT_EQ(mesh.getAxisSize("pp"), std::nullopt);
}

TEST_F(ShardingTest, ParsesPrintsAndQueries) {
  ShardingAttr sharding =
      parse("#weft.sharding<@world, [[dp], [cp, tp], []], partial = [\"x y\"]>");
  ASSERT_TRUE(sharding);
  EXPECT_EQ(sharding.getDimAxes(1), SmallVector<StringRef>({"cp", "tp"}));
  EXPECT_EQ(sharding.getPartialAxes(), SmallVector<StringRef>({"x y"}));
  EXPECT_FALSE(sharding.isReplicated());
  std::string printed;
  llvm::raw_string_ostream(printed) << sharding;
  EXPECT_EQ(printed, "#weft.sharding<@world, [[dp], [cp, tp], []], partial "
                     "= [\"x y\"]>");
}

TEST_F(ShardingTest, BuilderMatchesParsedForm) {
  ShardingAttr built = ShardingAttr::get(&context, "world",
                                         {{"dp"}, {"cp", "tp"}, {}}, {"tp2"});
  EXPECT_EQ(built, parse("#weft.sharding<@world, [[dp], [cp, tp], []], "
                         "partial = [tp2]>"));
  EXPECT_TRUE(ShardingAttr::get(&context, "world", {{}, {}}).isReplicated());
}

TEST_F(ShardingTest, LocalShapeDividesByAxisSizes) {
  ShardingAttr sharding = parse("#weft.sharding<@world, [[dp], [cp, tp], []]>");
  EXPECT_EQ(getLocalShape(sharding, mesh, {8, 128, 768}),
            SmallVector<int64_t>({4, 16, 768}));
}

TEST_F(ShardingTest, VerifiesAgainstMeshAndShape) {
  ShardingAttr sharding = parse("#weft.sharding<@world, [[dp], [cp, tp]]>");
  auto type = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, Float32Type::get(&context));
  };
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  auto emit = [&] { return mesh->emitError(); };
  EXPECT_TRUE(succeeded(verifyShardingFor(sharding, type({4, 8}), mesh, emit)));
  EXPECT_TRUE(failed(verifyShardingFor(sharding, type({4, 12}), mesh, emit)));
  EXPECT_NE(message.find("does not split into 8 equal parts"),
            std::string::npos)
      << message;
  EXPECT_TRUE(failed(verifyShardingFor(sharding, type({4}), mesh, emit)));
  EXPECT_NE(message.find("2 dimension entries for a tensor of rank 1"),
            std::string::npos)
      << message;
}

TEST_F(ShardingTest, RejectsAxisUsedTwice) {
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_FALSE(parse("#weft.sharding<@world, [[tp], [tp]]>"));
  EXPECT_NE(message.find("'tp' is used more than once"), std::string::npos)
      << message;
}

} // namespace

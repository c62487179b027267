//===- TrainingEmitterTest.cpp - weft compile --train's emitter ----------===//
//
// Part of the Weft project.
//
// emitCpuTrainingProgram on small hand-written modules: a rank reads each
// trained parameter as the block it holds (the optimizer step's layout), and
// a step that would read the whole of a parameter held in blocks is refused
// at the parameter.
//
//===----------------------------------------------------------------------===//

#include "weft/Codegen/CpuEmitter.h"
#include "weft/InitAll.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace mlir;

namespace {

/// A training step on a mesh of 2 over tp whose parameter `w` (8x8) the
/// optimizer step holds split over tp (4x8 per rank). `READ` is how the step
/// reads it: `%r = ...` of type tensor<R x8xf32>.
std::string module(const std::string &read, int rows) {
  std::string r = std::to_string(rows);
  return R"(
weft.mesh @mesh(tp = 2)
func.func @main(%ids: tensor<2x4xi64>, %labels: tensor<2x4xi64>)
    -> (tensor<f32> {weft.local_sharding = #weft.sharding<@mesh, []>},
        tensor<4x8xf32> {weft.gradient_of = "w",
                         weft.local_sharding = #weft.sharding<@mesh, [[tp], []]>}) {
  %w = weft.parameter "w" : tensor<8x8xf32> = dense<1.0>
)" + read +
         R"(
  %s = weft.reduce_sum %r axes [0, 1] : tensor<)" +
         r + R"(x8xf32> -> tensor<f32>
  %g = weft.constant dense<0.5> : tensor<4x8xf32>
  return %s, %g : tensor<f32>, tensor<4x8xf32>
}
func.func @optimizer_step(
    %lr: tensor<f32> {weft.local_sharding = #weft.sharding<@mesh, []>,
                      weft.optimizer_slot = {role = "lr"}},
    %p: tensor<4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[tp], []]>,
                         weft.optimizer_slot = {parameter = "w", role = "param"}},
    %gr: tensor<4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[tp], []]>,
                          weft.optimizer_slot = {parameter = "w", role = "grad"}})
    -> (tensor<4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[tp], []]>,
                         weft.optimizer_slot = {parameter = "w", role = "param"}})
    attributes {weft.optimizer = "sgd"} {
  %u = weft.mul %gr, %lr : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %n = weft.sub %p, %u : tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}
)";
}

class TrainingEmitterTest : public ::testing::Test {
protected:
  TrainingEmitterTest() {
    DialectRegistry registry;
    weft::registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }
  /// Emits `text` into a fresh directory; returns the diagnostics, and the
  /// program in `program` on success.
  std::string emit(const std::string &text, bool &ok, std::string &program) {
    std::string errors;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
      errors += d.str() + "\n";
      return success();
    });
    OwningOpRef<ModuleOp> parsed = parseSourceString<ModuleOp>(text, &context);
    EXPECT_TRUE(parsed) << errors;
    if (!parsed) {
      ok = false;
      return errors;
    }
    std::string dir = ::testing::TempDir() + "weft-training-emitter-" +
                      std::to_string(counter++);
    weft::TrainingProgramDefaults defaults;
    ok = succeeded(
        weft::emitCpuTrainingProgram(*parsed, dir, "test", ".", defaults));
    std::ifstream in(dir + "/program.cpp");
    std::stringstream buffer;
    buffer << in.rdbuf();
    program = buffer.str();
    return errors;
  }
  MLIRContext context;
  int counter = 0;
};

TEST_F(TrainingEmitterTest, ReadsTheHeldBlock) {
  bool ok = false;
  std::string program;
  std::string errors =
      emit(module("  %r = weft.all_slice %w over @mesh [\"tp\"] dim 0 : "
                  "tensor<8x8xf32> -> tensor<4x8xf32>",
                  4),
           ok, program);
  ASSERT_TRUE(ok) << errors;
  // The slice is the held block: no all_slice of the parameter is left.
  EXPECT_NE(program.find(" = viewOf(params[0]);"), std::string::npos)
      << program;
  EXPECT_EQ(program.find("allSlice("), std::string::npos) << program;
  EXPECT_NE(
      program.find("TrainedParameter{\"w\", \"w0.npy\", "
                   "std::vector<int64_t>{8, 8}, Layout{{\"tp\"}, {}}, 1}"),
      std::string::npos)
      << program;
  EXPECT_NE(program.find("p.optimizer = TrainingOptimizer{optimizerStep, "
                         "{OptimizerSlot{\"lr\", -1}, OptimizerSlot{\"param\", "
                         "0}, OptimizerSlot{\"grad\", 0}}"),
            std::string::npos)
      << program;
}

TEST_F(TrainingEmitterTest, RefusesAWholeReadOfABlock) {
  bool ok = true;
  std::string program;
  std::string errors =
      emit(module("  %r = weft.add %w, %w : tensor<8x8xf32>", 8), ok, program);
  EXPECT_FALSE(ok);
  EXPECT_NE(errors.find("the step reads parameter 'w' as [[], []], but each "
                        "rank holds it as [[tp], []]"),
            std::string::npos)
      << errors;
}

TEST_F(TrainingEmitterTest, RefusesAStepWithoutItsGradient) {
  bool ok = true;
  std::string program;
  std::string text =
      module("  %r = weft.all_slice %w over @mesh [\"tp\"] dim 0 : "
             "tensor<8x8xf32> -> tensor<4x8xf32>",
             4);
  text.replace(text.find("weft.gradient_of = \"w\""),
               std::string("weft.gradient_of = \"w\"").size(),
               "weft.gradient_of = \"v\"");
  std::string errors = emit(text, ok, program);
  EXPECT_FALSE(ok);
  EXPECT_NE(errors.find("updates 'w', whose gradient the training step does "
                        "not return"),
            std::string::npos)
      << errors;
}

} // namespace

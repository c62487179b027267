//===- onnx_import_fuzzer.cpp - libFuzzer target for the ONNX importer ----===//
//
// Part of the Weft project.
//
// Feeds arbitrary bytes to `weft import` as a binary ONNX model, then, when the
// model imports, raises it and runs it on zero inputs. Any crash, sanitizer
// report or escaping exception is a bug: bad models must get diagnostics.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Exec/Interpreter.h"
#include "weft/Import/OnnxImporter.h"
#include "weft/InitAll.h"
#include "weft/Passes/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cstdio>
#include <string>
#include <unistd.h>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path =
      "/tmp/weft-fuzz-" + std::to_string(getpid()) + ".onnx";
  if (FILE *file = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, file);
    std::fclose(file);
  }
  DialectRegistry registry;
  weft::registerAllDialects(registry);
  MLIRContext context(registry);
  context.getDiagEngine().registerHandler([](Diagnostic &) { return success(); });
  weft::OnnxImportOptions options;
  options.batchSize = 2;
  options.sequenceLength = 4;
  OwningOpRef<ModuleOp> module = weft::importOnnxModel(path, options, &context);
  if (!module)
    return 0;
  PassManager pm(&context);
  pm.addPass(weft::createWeftCanonicalize());
  pm.addPass(weft::createWeftRaise());
  if (failed(pm.run(*module)))
    return 0;
  // Run small programs on zero inputs: the interpreter must not crash either.
  for (auto func : module->getOps<func::FuncOp>()) {
    std::vector<weft::rt::HostTensor> inputs;
    int64_t elements = 0;
    for (Type type : func.getArgumentTypes()) {
      auto tensor = cast<RankedTensorType>(type);
      elements += tensor.getNumElements();
      inputs.emplace_back(weft::toDType(tensor.getElementType()),
                          weft::rt::Shape(tensor.getShape().begin(),
                                          tensor.getShape().end()));
    }
    if (elements <= (1 << 16))
      (void)weft::interpret(func, inputs, weft::InterpreterOptions());
  }
  return 0;
}

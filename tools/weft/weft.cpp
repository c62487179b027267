//===- weft.cpp - The Weft command line -----------------------------------===//
//
// Part of the Weft project.
//
//   weft import model.onnx [-o model.mlir] [--input-shape NAME=DxD...]
//                          [--batch-size N] [--seq-len N] [--no-weights] [--stats]
//
// Diagnostics name the file and, for a model, the ONNX node they concern;
// every failure exits non-zero.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Import/OnnxImporter.h"
#include "weft/InitAll.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::SubCommand importCommand("import",
                                    "Import an ONNX model into the weft dialect");

static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx | model.onnxtxt>"),
                                      cl::sub(importCommand));
static cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::sub(importCommand));
static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("Static shape of an input: NAME=DxDx... (repeatable)"),
                cl::value_desc("NAME=DIMS"), cl::sub(importCommand));
static cl::opt<int64_t> batchSize("batch-size",
                                  cl::desc("Binds dynamic batch dimensions"),
                                  cl::init(-1), cl::sub(importCommand));
static cl::opt<int64_t> seqLen("seq-len",
                               cl::desc("Binds dynamic sequence dimensions"),
                               cl::init(-1), cl::sub(importCommand));
static cl::opt<bool> noWeights(
    "no-weights",
    cl::desc("Keep only names, shapes and dtypes of weights (for planning)"),
    cl::sub(importCommand));
static cl::opt<bool> stats("stats",
                           cl::desc("Print op counts (instead of the module "
                                    "when no -o is given)"),
                           cl::sub(importCommand));

/// Prints "path: node 'name': error: message" for importer locations and
/// "path:line:col: error: message" for source locations.
static void printDiagnostic(Diagnostic &diag) {
  Location loc = diag.getLocation();
  std::string where;
  llvm::raw_string_ostream os(where);
  auto printFile = [&](FileLineColLoc file) {
    os << file.getFilename().getValue();
    if (file.getLine() != 0)
      os << ':' << file.getLine() << ':' << file.getColumn();
  };
  if (auto name = dyn_cast<NameLoc>(loc)) {
    if (auto file = dyn_cast<FileLineColLoc>(name.getChildLoc()))
      printFile(file);
    os << ": node '" << name.getName().getValue() << "'";
  } else if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    printFile(file);
  } else {
    os << loc;
  }
  llvm::raw_ostream &err = llvm::errs();
  err << where << ": ";
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Error:
    llvm::WithColor(err, llvm::HighlightColor::Error) << "error: ";
    break;
  case DiagnosticSeverity::Warning:
    llvm::WithColor(err, llvm::HighlightColor::Warning) << "warning: ";
    break;
  default:
    err << "note: ";
  }
  err << diag.str() << '\n';
}

static int runImport(MLIRContext &context) {
  weft::OnnxImportOptions options;
  for (const std::string &shape : inputShapes) {
    std::string error;
    if (failed(weft::parseInputShape(shape, options, error))) {
      llvm::WithColor::error(llvm::errs(), "weft") << error << '\n';
      return 1;
    }
  }
  if (batchSize >= 0)
    options.batchSize = batchSize;
  if (seqLen >= 0)
    options.sequenceLength = seqLen;
  options.loadWeights = !noWeights;

  OwningOpRef<ModuleOp> module =
      weft::importOnnxModel(modelPath, options, &context);
  if (!module)
    return 1;

  bool printModule = !stats || outputPath != "-";
  if (printModule) {
    std::string error;
    auto output = openOutputFile(outputPath, &error);
    if (!output) {
      llvm::WithColor::error(llvm::errs(), "weft") << error << '\n';
      return 1;
    }
    module->print(output->os());
    output->keep();
  }
  if (stats) {
    // Op counts, most frequent first.
    SmallVector<std::pair<StringRef, int64_t>> counts;
    int64_t total = 0;
    module->walk([&](Operation *op) {
      if (!isa<weft::WeftDialect>(op->getDialect()))
        return;
      ++total;
      StringRef name = op->getName().getStringRef();
      auto it = llvm::find_if(counts, [&](auto &e) { return e.first == name; });
      if (it == counts.end())
        counts.push_back({name, 1});
      else
        ++it->second;
    });
    llvm::sort(counts, [](auto &a, auto &b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    llvm::raw_ostream &os = printModule ? llvm::errs() : llvm::outs();
    for (auto &[name, count] : counts)
      os << llvm::format("%8lld  %s\n", static_cast<long long>(count),
                         name.str().c_str());
    os << llvm::format("%8lld  total weft ops\n", static_cast<long long>(total));
  }
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Weft: a graph compiler and parallelization planner for transformers\n");

  DialectRegistry registry;
  weft::registerAllDialects(registry);
  MLIRContext context(registry);
  context.getDiagEngine().registerHandler([](Diagnostic &diag) {
    printDiagnostic(diag);
    return success();
  });

  if (importCommand)
    return runImport(context);
  cl::PrintHelpMessage();
  return 1;
}

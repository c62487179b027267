//===- weft.cpp - The Weft command line -----------------------------------===//
//
// Part of the Weft project.
//
//   weft import model.onnx [-o model.mlir] [--input-shape NAME=DxD...]
//                          [--batch-size N] [--seq-len N] [--no-weights] [--stats]
//   weft run model.onnx|model.mlir [--data-dir DIR | -i FILE...] [-o DIR]
//                          [--check] [--rtol R] [--atol A] [--input-shape ...]
//
// Diagnostics name the file and, for a model, the ONNX node they concern;
// every failure exits non-zero.
//
//===----------------------------------------------------------------------===//

#include "mlir/Pass/PassRegistry.h"
#include "weft/Codegen/CpuEmitter.h"
#include "weft/Codegen/CudaEmitter.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Exec/Interpreter.h"
#include "weft/Exec/TensorFiles.h"
#include "weft/Import/OnnxImporter.h"
#include "weft/InitAll.h"
#include "weft/Passes/Passes.h"
#include "weft/Pipelines/Pipelines.h"
#include "weft/Plan/Plan.h"
#include "llvm/Support/Program.h"

#include "weft/runtime/FileWrite.h"
#include "weft/runtime/Program.h"

#include <stdexcept>

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/Path.h"
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

static cl::SubCommand runCommand("run", "Run a model on the CPU");

static cl::SubCommand compileCommand(
    "compile", "Partition a model under a plan and emit the rank program as "
               "C++ with a CMake project");

static cl::opt<std::string>
    modelPath(cl::Positional, cl::Required,
              cl::desc("<model.onnx | model.onnxtxt | model.mlir>"),
              cl::sub(importCommand), cl::sub(runCommand),
              cl::sub(compileCommand));
static cl::opt<std::string>
    outputPath("o",
               cl::desc("import: output file (default: stdout); run: "
                        "directory for output_N.pb (or .npy) files"),
               cl::value_desc("path"), cl::init("-"), cl::sub(importCommand),
               cl::sub(runCommand), cl::sub(compileCommand));
static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("Static shape of an input: NAME=DxDx... (repeatable)"),
                cl::value_desc("NAME=DIMS"), cl::sub(importCommand),
                cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<int64_t> batchSize("batch-size",
                                  cl::desc("Binds dynamic batch dimensions"),
                                  cl::init(-1), cl::sub(importCommand),
                                  cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<int64_t> seqLen("seq-len",
                               cl::desc("Binds dynamic sequence dimensions"),
                               cl::init(-1), cl::sub(importCommand),
                               cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<bool> dynamicInputs(
    "dynamic-inputs",
    cl::desc("Forget the model's input shapes and bind them from the inputs "
             "(tests the binding path)"),
    cl::Hidden, cl::sub(importCommand), cl::sub(runCommand));

static cl::opt<bool> foldSmallInputs(
    "fold-small-inputs",
    cl::desc("Make integer inputs of at most 64 elements, and scalars, "
             "constants of the model, as exported models hold shapes, axes "
             "and split sizes (the ONNX node tests pass them as inputs)"),
    cl::sub(runCommand));
static cl::opt<std::string>
    dataDir("data-dir",
            cl::desc("Directory with input_N.pb (and output_N.pb for --check), "
                     "as in the ONNX backend tests"),
            cl::value_desc("dir"), cl::sub(runCommand));
static cl::list<std::string> inputFiles("i",
                                        cl::desc("Input file (.pb or .npy), "
                                                 "in argument order"),
                                        cl::value_desc("file"),
                                        cl::sub(runCommand));
static cl::opt<bool> check("check",
                           cl::desc("Compare outputs with --data-dir's "
                                    "output_N.pb; exit 1 on a mismatch"),
                           cl::sub(runCommand));
static cl::opt<double> relativeTolerance("rtol", cl::desc("Relative tolerance of --check"),
                            cl::init(1e-3), cl::sub(runCommand));
static cl::opt<double> absoluteTolerance(
    "atol",
    cl::desc("Absolute tolerance of --check (default: 1e-5 of the expected "
             "output's largest magnitude, so that elements near zero compare "
             "at the rounding of the whole tensor)"),
    cl::init(1e-7), cl::sub(runCommand));
static cl::opt<std::string>
    outputFormat("output-format", cl::desc("pb (ONNX TensorProto) or npy"),
                 cl::init("pb"), cl::sub(runCommand));
static cl::opt<int> devices(
    "devices",
    cl::desc("Partition the model under --plan / --plan-spec and run it on N "
             "simulated devices (threads)"),
    cl::init(0), cl::sub(runCommand));
static cl::opt<double> collectiveTimeout(
    "collective-timeout",
    cl::desc("With --devices: seconds a collective waits for its group "
             "before the run fails naming the ranks that never joined"),
    cl::init(300), cl::sub(runCommand));
static cl::opt<std::string> dtype(
    "dtype",
    cl::desc("f32 (as exported), or bf16 / f16: every f32 tensor stored in 16 "
             "bits, computed with f32 accumulation (-weft-convert-float-type)"),
    cl::init("f32"), cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<std::string>
    planFile("plan", cl::desc("A plan: the JSON that weft plan --json writes"),
             cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<std::string> planSpec(
    "plan-spec",
    cl::desc("A plan written out: dp=2,tp=2,sp=1,cp=2,ulysses=2 (pp=1)"),
    cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<std::string>
    target("target",
           cl::desc("cpu (C++ on the runtime's CPU kernels) or cuda (CUDA C++ "
                    "on cuBLASLt, generated kernels and NCCL)"),
           cl::init("cpu"), cl::sub(compileCommand));
static cl::opt<bool> buildProgram(
    "build", cl::desc("Also configure and build the program with CMake"),
    cl::sub(compileCommand));
static cl::opt<bool> forceOutput(
    "force",
    cl::desc("Write the project into a non-empty directory that is not an "
             "earlier weft compile output (writing its files over what is "
             "there, removing nothing else)"),
    cl::sub(compileCommand));
static cl::opt<std::string> runtimePrefix(
    "runtime-prefix",
    cl::desc("Where the runtime is installed (cmake --install); for --build"),
    cl::sub(compileCommand));
static cl::opt<std::string> dumpPartitioned(
    "dump-partitioned",
    cl::desc("Write the partitioned program here, with its layers (weft "
             "compile --target cuda: with its kernels, the fusions the "
             "planner costs)"),
    cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<std::string> dumpEmitted(
    "dump-emitted",
    cl::desc("Write the program the emitter prints here: layers inlined, and "
             "for --target cuda its kernels, waits and buffers"),
    cl::sub(compileCommand));
static cl::opt<bool> noWeights(
    "no-weights",
    cl::desc("Keep only names, shapes and dtypes of weights (for planning)"),
    cl::sub(importCommand));
static cl::opt<bool> withLoss(
    "loss",
    cl::desc("Replace the model's logits by the per-token cross-entropy "
             "against labels (-weft-append-loss), the head of a training "
             "step; run: the last input is the labels (i64)"),
    cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<bool> noRaise(
    "no-raise",
    cl::desc("Keep the graph as the exporter wrote it (do not run "
             "-weft-canonicalize, -cse, -weft-raise and -weft-mark-layers)"),
    cl::sub(importCommand), cl::sub(runCommand));
static cl::opt<bool> explainRaise(
    "explain-raise",
    cl::desc("Say, for each softmax not raised to weft.attention, which op "
             "stopped the match (a remark naming its ONNX node)"),
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

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "weft") << message << '\n';
  return 1;
}

/// The import options that the command line gives.
static std::optional<weft::OnnxImportOptions> importOptions() {
  weft::OnnxImportOptions options;
  for (const std::string &shape : inputShapes) {
    std::string error;
    if (failed(weft::parseInputShape(shape, options, error))) {
      fail(error);
      return std::nullopt;
    }
  }
  if (batchSize >= 0)
    options.batchSize = batchSize;
  if (seqLen >= 0)
    options.sequenceLength = seqLen;
  options.makeInputsDynamic = dynamicInputs;
  return options;
}

/// Imports `path` and, unless --no-raise, folds and raises it.
OwningOpRef<ModuleOp> importModel(llvm::StringRef path,
                                         const weft::OnnxImportOptions &options,
                                         MLIRContext &context) {
  OwningOpRef<ModuleOp> module = weft::importOnnxModel(path, options, &context);
  if (!module || noRaise)
    return module;
  PassManager pm(&context);
  weft::buildPrepareModelPipeline(pm, explainRaise);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

static int runImport(MLIRContext &context) {
  std::optional<weft::OnnxImportOptions> options = importOptions();
  if (!options)
    return 1;
  options->loadWeights = !noWeights;

  OwningOpRef<ModuleOp> module = importModel(modelPath, *options, context);
  if (!module)
    return 1;

  bool printModule = !stats || outputPath != "-";
  if (printModule) {
    std::string error;
    auto output = openOutputFile(outputPath, &error);
    if (!output)
      return fail(error);
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

/// Compares as numpy.testing.assert_allclose (NaN equals NaN).
static bool compareOutput(size_t index, const weft::rt::HostTensor &actual,
                          const weft::rt::HostTensor &expected) {
  llvm::raw_ostream &os = llvm::outs();
  if (actual.shape != expected.shape) {
    os << "output #" << index << ": shape " << weft::rt::shapeString(actual.shape)
       << ", expected " << weft::rt::shapeString(expected.shape) << ": MISMATCH\n";
    return false;
  }
  double maxAbs = 0, maxRel = 0;
  int64_t bad = 0;
  // f32 results differ from a reference by rounding of the order of the
  // tensor's magnitude, not of each element's: near-zero elements (a
  // residual that cancels, a logit near 0) need an absolute tolerance.
  double atol = absoluteTolerance;
  if (!absoluteTolerance.getNumOccurrences()) {
    double scale = 0;
    for (int64_t i = 0; i < expected.numel(); ++i)
      if (std::isfinite(expected.at(i)))
        scale = std::max(scale, std::abs(expected.at(i)));
    atol = std::max(atol, 1e-5 * scale);
  }
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.at(i), e = expected.at(i);
    if (std::isnan(a) && std::isnan(e))
      continue;
    double diff = std::isinf(a) && a == e ? 0.0 : std::abs(a - e);
    maxAbs = std::max(maxAbs, diff);
    if (e != 0)
      maxRel = std::max(maxRel, diff / std::abs(e));
    if (!(diff <= atol + relativeTolerance * std::abs(e)))
      ++bad;
  }
  os << "output #" << index << ": " << actual.numel()
     << " elements, max abs error " << llvm::format("%.3g", maxAbs)
     << ", max rel error " << llvm::format("%.3g", maxRel) << " (atol "
     << llvm::format("%.3g", atol) << ", rtol "
     << llvm::format("%.3g", double(relativeTolerance)) << "): "
     << (bad ? "MISMATCH (" + std::to_string(bad) + " elements)" : "OK")
     << '\n';
  return bad == 0;
}

/// Partitions `module` under the plan given on the command line.
/// --loss: the model's logits become the per-token loss against labels.
static LogicalResult appendLoss(MLIRContext &context, ModuleOp module) {
  if (!withLoss)
    return success();
  PassManager pm(&context);
  pm.addPass(weft::createWeftAppendLoss());
  return pm.run(module);
}

/// --dtype bf16|f16: every f32 tensor of the model in 16 bits.
static LogicalResult convertDtype(MLIRContext &context, ModuleOp module) {
  if (dtype == "f32")
    return success();
  if (dtype != "bf16" && dtype != "f16") {
    fail("--dtype " + dtype + ": expected f32, bf16 or f16");
    return failure();
  }
  PassManager pm(&context);
  weft::WeftConvertFloatTypeOptions options;
  options.to = dtype;
  pm.addNestedPass<func::FuncOp>(weft::createWeftConvertFloatType(options));
  return pm.run(module);
}

/// The plan given on the command line (--plan or --plan-spec), read once.
static llvm::Expected<weft::plan::Plan> commandLinePlan() {
  if (!planFile.empty() && !planSpec.empty())
    return llvm::createStringError("give --plan or --plan-spec, not both");
  if (!planFile.empty())
    return weft::readPlanFile(planFile);
  llvm::Expected<weft::PlanSpec> spec =
      weft::parsePlanSpec(planSpec, "--plan-spec");
  if (!spec)
    return spec.takeError();
  weft::plan::Plan plan = spec->plan;
  // Without mbs, the micro-batch is whatever the model's batch over dp is.
  if (!spec->mbsGiven)
    plan.set_micro_batch(0);
  return plan;
}

/// Partitions `module` under the plan given on the command line: every field
/// of the plan is applied, or the run stops naming the fields it cannot
/// apply.
static LogicalResult partitionModule(MLIRContext &context, ModuleOp module) {
  llvm::Expected<weft::plan::Plan> plan = commandLinePlan();
  if (!plan) {
    fail(llvm::toString(plan.takeError()));
    return failure();
  }
  std::optional<int64_t> perRankBatch;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && func.getNumArguments() && plan->dp() > 0)
      if (auto type =
              dyn_cast<RankedTensorType>(func.getArgumentTypes().front()))
        if (type.getRank() > 0 && type.getDimSize(0) % plan->dp() == 0)
          perRankBatch = type.getDimSize(0) / plan->dp();
  std::vector<std::string> unapplied =
      weft::unappliedPlanFields(*plan, perRankBatch);
  if (!unapplied.empty()) {
    std::string list;
    for (const std::string &field : unapplied)
      list += "\n  " + field;
    fail("the plan has fields that a forward program does not apply:" + list);
    return failure();
  }
  PassManager pm(&context);
  weft::buildPartitionPipeline(pm, weft::applyPlanOptions(*plan));
  return pm.run(module);
}

/// Runs the partitioned `func` of `module` on the devices of its weft.mesh
/// (threads): each rank interprets it; the inputs are split and the outputs
/// assembled by their local shardings. `bytes` gets the bytes each rank sent.
FailureOr<std::vector<weft::rt::HostTensor>>
runOnMeshDevices(ModuleOp module, func::FuncOp func,
                 const std::vector<weft::rt::HostTensor> &inputs,
                 const weft::InterpreterOptions &base, int expectedDevices,
                 double timeoutSeconds, std::vector<int64_t> &bytes) {
  std::optional<weft::MeshInfo> meshInfo = weft::getMeshInfo(module);
  weft::rt::Mesh mesh;
  if (meshInfo) {
    mesh.axes.assign(meshInfo->axes.begin(), meshInfo->axes.end());
    mesh.shape.assign(meshInfo->sizes.begin(), meshInfo->sizes.end());
  }
  if (func->hasAttr(weft::WeftDialect::getLoadBalancedAttrName()))
    mesh.zigzagAxis = "cp";
  int n = int(mesh.size());
  if (expectedDevices > 0 && expectedDevices != n) {
    fail("the plan runs on " + llvm::Twine(n) + " devices, but --devices is " +
         llvm::Twine(expectedDevices));
    return failure();
  }
  auto layoutOf = [](weft::ShardingAttr attr, int64_t rank) {
    weft::rt::Layout layout(rank);
    if (!attr)
      return layout;
    weft::TensorSharding s = weft::fromAttr(attr);
    for (size_t d = 0; d < s.dims.size() && d < layout.size(); ++d)
      layout[d].assign(s.dims[d].begin(), s.dims[d].end());
    return layout;
  };
  std::vector<weft::rt::Layout> inputLayouts, outputLayouts;
  FunctionType type = func.getFunctionType();
  for (unsigned i = 0; i < type.getNumInputs(); ++i)
    inputLayouts.push_back(
        layoutOf(func.getArgAttrOfType<weft::ShardingAttr>(
                     i, weft::WeftDialect::getLocalShardingAttrName()),
                 cast<RankedTensorType>(type.getInput(i)).getRank()));
  for (unsigned o = 0; o < type.getNumResults(); ++o)
    outputLayouts.push_back(
        layoutOf(func.getResultAttrOfType<weft::ShardingAttr>(
                     o, weft::WeftDialect::getLocalShardingAttrName()),
                 cast<RankedTensorType>(type.getResult(o)).getRank()));
  // Each rank interprets the partitioned function.
  weft::rt::RankFunction rankFunction =
      [&](weft::rt::RankContext &ctx,
          const std::vector<weft::rt::HostTensor> &mine) {
        weft::InterpreterOptions options = base;
        options.rank = ctx.rank;
        options.communicator = ctx.comm;
        FailureOr<std::vector<weft::rt::HostTensor>> result =
            weft::interpret(func, mine, options);
        if (failed(result))
          throw std::runtime_error("the interpreter failed (see above)");
        return std::move(*result);
      };
  absl::StatusOr<std::vector<weft::rt::HostTensor>> outputs =
      weft::rt::runOnMesh(
          rankFunction, mesh, base.weightsDir, inputs, inputLayouts,
          outputLayouts, &bytes,
          std::chrono::milliseconds(int64_t(timeoutSeconds * 1000)));
  if (!outputs.ok()) {
    fail(std::string(outputs.status().message()));
    return failure();
  }
  return std::move(*outputs);
}

static FailureOr<std::vector<weft::rt::HostTensor>>
runPartitioned(MLIRContext &context, ModuleOp module, func::FuncOp func,
               const std::vector<weft::rt::HostTensor> &inputs,
               const weft::InterpreterOptions &base) {
  if (failed(partitionModule(context, module)))
    return failure();
  if (!dumpPartitioned.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream out(dumpPartitioned, ec);
    module.print(out);
  }
  std::vector<int64_t> bytes;
  FailureOr<std::vector<weft::rt::HostTensor>> outputs = runOnMeshDevices(
      module, func, inputs, base, devices, collectiveTimeout, bytes);
  if (failed(outputs))
    return failure();
  llvm::errs() << "weft run: " << bytes.size()
               << " devices; bytes sent per rank:";
  for (int64_t b : bytes)
    llvm::errs() << ' ' << b;
  llvm::errs() << '\n';
  return outputs;
}

/// Input files that do not fit the model are refused before anything runs:
/// a float file for an integer input (token ids would be truncated), and
/// token ids outside the vocabulary of an embedding the input feeds (the
/// partitioned, vocabulary-parallel embedding would read zeros for them).
/// Integer widths and float formats convert (int32 or uint16 token files,
/// f32 data for a bf16 model).
static LogicalResult
checkInputFiles(func::FuncOp func,
                const std::vector<weft::rt::HostTensor> &tensors,
                const std::vector<std::string> &paths) {
  FunctionType type = func.getFunctionType();
  if (tensors.size() != type.getNumInputs())
    return success(); // the interpreter says how many it takes
  for (auto [index, tensor] : llvm::enumerate(tensors)) {
    std::string file =
        index < paths.size() ? paths[index] : "input #" + std::to_string(index);
    Type element =
        cast<RankedTensorType>(type.getInput(index)).getElementType();
    std::string name = "input #" + std::to_string(index);
    if (auto onnxName = func.getArgAttrOfType<StringAttr>(index, "onnx.name"))
      name += " ('" + onnxName.getValue().str() + "')";
    if (tensor.isFloat() && !isa<FloatType>(element)) {
      std::string expected;
      llvm::raw_string_ostream os(expected);
      os << element;
      fail(file + ": holds " + weft::rt::dtypeName(tensor.dtype) +
           " values, but " + name + " of the model is " + expected +
           "; write the file with the model's integer type (float values would "
           "be "
           "truncated)");
      return failure();
    }
    BlockArgument argument = func.getArgument(index);
    for (Operation *user : argument.getUsers()) {
      auto embedding = dyn_cast<weft::EmbeddingOp>(user);
      if (!embedding || embedding.getIndices() != argument)
        continue;
      int64_t vocab = embedding.getTable().getType().getDimSize(0);
      for (int64_t i = 0; i < tensor.numel(); ++i) {
        double id = tensor.at(i);
        if (id < 0 || id >= static_cast<double>(vocab)) {
          fail(file + ": token id " + std::to_string(static_cast<int64_t>(id)) +
               " at element " + std::to_string(i) + " of " + name +
               " is outside the embedding's vocabulary [0, " +
               std::to_string(vocab) + ")");
          return failure();
        }
      }
    }
  }
  return success();
}

static int runModel(MLIRContext &context) {
  std::vector<std::string> inputs(inputFiles.begin(), inputFiles.end());
  if (devices.getNumOccurrences() && devices < 1)
    return fail(
        "--devices " + std::to_string(devices) +
        ": give at least 1 device (or leave it out to run unpartitioned)");
  if (!dataDir.empty()) {
    if (!llvm::sys::fs::is_directory(dataDir))
      return fail("--data-dir " + dataDir + " is not a directory");
    // A model without inputs has only output_N.pb files.
    llvm::SmallString<256> input(dataDir), output(dataDir);
    llvm::sys::path::append(input, "input_0.pb");
    llvm::sys::path::append(output, "output_0.pb");
    if (!llvm::sys::fs::exists(input) && !llvm::sys::fs::exists(output))
      return fail("--data-dir " + dataDir +
                  " has neither input_0.pb nor output_0.pb (ONNX's test-data "
                  "layout: input_N.pb, output_N.pb)");
    for (int i = 0;; ++i) {
      llvm::SmallString<256> path(dataDir);
      llvm::sys::path::append(path, "input_" + std::to_string(i) + ".pb");
      if (!llvm::sys::fs::exists(path))
        break;
      inputs.push_back(path.str().str());
    }
  }
  std::vector<weft::rt::HostTensor> tensors;
  for (const std::string &path : inputs) {
    weft::rt::HostTensor tensor;
    std::string error;
    if (!weft::readTensorFile(path, tensor, error))
      return fail(error);
    tensors.push_back(std::move(tensor));
  }
  // The files of the inputs the function takes (small ones may be folded).
  std::vector<std::string> tensorPaths = inputs;

  OwningOpRef<ModuleOp> module;
  llvm::StringRef path = modelPath;
  if (path.ends_with(".mlir")) {
    module = parseSourceFile<ModuleOp>(path, &context);
  } else {
    std::optional<weft::OnnxImportOptions> options = importOptions();
    if (!options)
      return 1;
    std::vector<weft::rt::HostTensor> remaining;
    // With --loss, the labels are an input of the loss, not of the model.
    std::optional<weft::rt::HostTensor> labels;
    std::string labelsPath;
    if (withLoss && !tensors.empty()) {
      labels = std::move(tensors.back());
      tensors.pop_back();
      labelsPath = tensorPaths.back();
    }
    std::vector<std::string> remainingPaths;
    for (auto [index, tensor] : llvm::enumerate(tensors)) {
      options->inputShapesByPosition.emplace_back(tensor.shape.begin(),
                                                  tensor.shape.end());
      bool small = (!tensor.isFloat() && tensor.numel() <= 64) ||
                   tensor.shape.empty();
      if (!foldSmallInputs || !small) {
        options->constantInputsByPosition.emplace_back();
        remaining.push_back(tensor);
        remainingPaths.push_back(tensorPaths[index]);
        continue;
      }
      // onnx::TensorProto::DataType codes of the runtime's element types.
      static const int32_t onnxTypes[] = {1 /*FLOAT*/,  10 /*FLOAT16*/,
                                          16 /*BFLOAT16*/, 7 /*INT64*/,
                                          6 /*INT32*/, 9 /*BOOL*/,
                                          11 /*DOUBLE*/};
      weft::OnnxImportOptions::InputValue value;
      value.shape = tensor.shape;
      value.onnxType = onnxTypes[static_cast<int>(tensor.dtype)];
      for (int64_t i = 0; i < tensor.numel(); ++i)
        value.values.push_back(tensor.at(i));
      options->constantInputsByPosition.push_back(std::move(value));
    }
    tensors = std::move(remaining);
    tensorPaths = std::move(remainingPaths);
    if (labels) {
      tensors.push_back(std::move(*labels));
      tensorPaths.push_back(labelsPath);
    }
    module = importModel(path, *options, context);
  }
  if (!module || failed(convertDtype(context, *module)) ||
      failed(appendLoss(context, *module)))
    return 1;
  func::FuncOp func = module->lookupSymbol<func::FuncOp>("main");
  if (!func)
    for (auto candidate : module->getOps<func::FuncOp>())
      if (!func)
        func = candidate;
  if (!func)
    return fail(path + " has no function to run");

  if (failed(checkInputFiles(func, tensors, tensorPaths)))
    return 1;

  weft::InterpreterOptions options;
  options.weightsDir = llvm::sys::path::parent_path(path).str();
  if (options.weightsDir.empty())
    options.weightsDir = ".";
  FailureOr<std::vector<weft::rt::HostTensor>> outputs;
  if (!(collectiveTimeout > 0))
    return fail("--collective-timeout needs a positive number of seconds");
  if (devices > 0 || !planFile.empty() || !planSpec.empty()) {
    outputs = runPartitioned(context, *module, func, tensors, options);
  } else {
    outputs = weft::interpret(func, tensors, options);
  }
  if (failed(outputs))
    return 1;

  if (outputPath != "-") {
    if (std::error_code ec = llvm::sys::fs::create_directories(outputPath))
      return fail("cannot create " + outputPath + ": " + ec.message());
    for (auto [index, tensor] : llvm::enumerate(*outputs)) {
      llvm::SmallString<256> file(outputPath);
      llvm::sys::path::append(file, "output_" + std::to_string(index) + "." +
                                        outputFormat);
      std::string error;
      if (!weft::writeTensorFile(file.str().str(), tensor, error))
        return fail(error);
    }
    if (absl::Status status = weft::rt::removeStaleOutputs(
            outputPath, outputs->size(), "." + outputFormat);
        !status.ok())
      return fail(std::string(status.message()));
  }
  if (check) {
    if (dataDir.empty())
      return fail("--check needs --data-dir with output_N.pb files");
    bool ok = true;
    for (auto [index, tensor] : llvm::enumerate(*outputs)) {
      llvm::SmallString<256> file(dataDir);
      llvm::sys::path::append(file, "output_" + std::to_string(index) + ".pb");
      weft::rt::HostTensor expected;
      std::string error;
      if (!weft::readTensorFile(file.str().str(), expected, error))
        return fail(error);
      ok &= compareOutput(index, tensor, expected);
    }
    return ok ? 0 : 1;
  }
  if (outputPath == "-")
    for (auto [index, tensor] : llvm::enumerate(*outputs)) {
      llvm::outs() << "output #" << index << ": " << weft::rt::dtypeName(tensor.dtype)
                   << weft::rt::shapeString(tensor.shape) << " =";
      for (int64_t i = 0; i < std::min<int64_t>(tensor.numel(), 8); ++i)
        llvm::outs() << ' ' << llvm::format("%g", tensor.at(i));
      llvm::outs() << (tensor.numel() > 8 ? " ...\n" : "\n");
    }
  return 0;
}

/// A model for the planner: an ONNX file imported without weights, or weft
/// IR, both raised and with their layers marked.
OwningOpRef<ModuleOp> loadModelForPlanning(llvm::StringRef path,
                                           MLIRContext &context,
                                           int64_t sequenceLength,
                                           int64_t batch,
                                           llvm::ArrayRef<std::string> shapes) {
  if (!path.ends_with(".mlir")) {
    // Shapes only: dynamic batch axes become `batch` (the planner's
    // micro-batches), dynamic sequence axes the --seq-len given; inputs
    // named in --input-shape take its shapes.
    weft::OnnxImportOptions options;
    for (const std::string &shape : shapes) {
      std::string error;
      if (failed(weft::parseInputShape(shape, options, error))) {
        emitError(UnknownLoc::get(&context)) << error;
        return nullptr;
      }
    }
    options.loadWeights = false;
    options.keepExternalData = true;
    options.batchSize = batch;
    if (sequenceLength > 0)
      options.sequenceLength = sequenceLength;
    return importModel(path, options, context);
  }
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(path, &context);
  if (!module)
    return nullptr;
  PassManager pm(&context);
  weft::buildPrepareModelPipeline(pm);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

/// The file that marks a directory as weft compile's output.
static constexpr const char *kProjectMarker = ".weft-project";

/// Makes `dir` ready for a new project: created if missing. An earlier
/// project (the marker) is cleared of what weft compile wrote there, its
/// weights and build included (stale weights of another model would
/// otherwise be read, and a stale build/program run). Any other non-empty
/// directory is refused, unless `force`: then the project's files are
/// written over and nothing else there is removed (its build/ or weights/
/// may be the user's). Returns an error message, empty on success.
static std::string prepareProjectDirectory(const std::string &dir, bool force) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return "cannot create " + dir + ": " + ec.message();
  std::error_code ec;
  bool empty = llvm::sys::fs::directory_iterator(dir, ec) ==
               llvm::sys::fs::directory_iterator();
  if (ec)
    return "cannot list " + dir + ": " + ec.message();
  if (empty)
    return "";
  if (!llvm::sys::fs::exists(dir + "/" + kProjectMarker))
    return force ? ""
                 : dir + " is not empty and is not a project weft compile "
                         "wrote; give a new or empty directory, or --force to "
                         "write the project's files over what is there";
  for (const char *generated : {"weights", "build"})
    if (std::error_code removeError =
            llvm::sys::fs::remove_directories(dir + "/" + generated))
      return "cannot remove " + dir + "/" + generated + ": " +
             removeError.message();
  for (const char *generated : {"program.cpp", "program.cu", "program_host.cpp",
                                "CMakeLists.txt", kProjectMarker})
    if (std::error_code removeError =
            llvm::sys::fs::remove(dir + "/" + generated))
      return "cannot remove " + dir + "/" + generated + ": " +
             removeError.message();
  return "";
}

static int runCompile(MLIRContext &context) {
  if (target != "cpu" && target != "cuda")
    return fail("--target " + target + ": expected cpu or cuda");
  if (outputPath == "-")
    return fail("weft compile needs -o DIR for the generated project");
  if (planFile.empty() && planSpec.empty())
    return fail("weft compile needs a plan: --plan plans.json or --plan-spec");
  llvm::StringRef path = modelPath;
  OwningOpRef<ModuleOp> module;
  if (path.ends_with(".mlir")) {
    module = parseSourceFile<ModuleOp>(path, &context);
  } else {
    std::optional<weft::OnnxImportOptions> options = importOptions();
    if (!options)
      return 1;
    module = importModel(path, *options, context);
  }
  if (!module || failed(convertDtype(context, *module)) ||
      failed(appendLoss(context, *module)) ||
      failed(partitionModule(context, *module)))
    return 1;
  auto dump = [&](const std::string &file) {
    if (file.empty())
      return;
    std::error_code ec;
    llvm::raw_fd_ostream out(file, ec);
    module->print(out);
  };
  {
    // What the target runs as kernels (what the planner costs), then what
    // its emitter needs.
    PassManager kernels(&context), prepare(&context);
    if (target == "cuda") {
      weft::buildCudaKernelPipeline(kernels);
      weft::buildCudaTargetPipeline(prepare);
    } else {
      weft::buildCpuTargetPipeline(prepare);
    }
    if (failed(kernels.run(*module)))
      return 1;
    dump(dumpPartitioned);
    if (failed(prepare.run(*module)))
      return 1;
    dump(dumpEmitted);
  }
  if (std::string error = prepareProjectDirectory(outputPath, forceOutput);
      !error.empty())
    return fail(error);
  std::string origin = path.str() + (planSpec.empty() ? " under " + planFile
                                                      : " under " + planSpec);
  // External-data locations are relative to the model's directory.
  std::string externalDir = llvm::sys::path::parent_path(path).str();
  if (externalDir.empty())
    externalDir = ".";
  // A failed emission leaves no half-written weights behind (an earlier
  // project's were cleared above; a weights/ that --force found is kept).
  std::string weightsDir = outputPath + "/weights";
  bool hadWeights = llvm::sys::fs::exists(weightsDir);
  auto emitFailed = [&]() {
    if (!hadWeights)
      llvm::sys::fs::remove_directories(weightsDir);
    return 1;
  };
  if (target == "cuda") {
    weft::CudaEmitStats stats;
    if (failed(weft::emitCudaProgram(*module, outputPath, origin, externalDir,
                                     stats)))
      return emitFailed();
    llvm::outs() << "wrote " << outputPath << "/program.cu, CMakeLists.txt, "
                 << "weights/\n"
                 << "arena: " << stats.arenaBytes << " bytes per rank for "
                 << stats.buffers << " buffers (" << stats.unsharedBytes
                 << " without reuse)\n"
                 << "kernels: " << stats.fusedKernels
                 << " generated elementwise kernels for " << stats.fusedOps
                 << " ops; " << stats.epilogues
                 << " GEMM epilogues (bias, GELU); " << stats.collectives
                 << " collectives on the communication stream\n";
  } else {
    if (failed(weft::emitCpuProgram(*module, outputPath, origin, externalDir)))
      return emitFailed();
    llvm::outs() << "wrote " << outputPath << "/program.cpp, CMakeLists.txt, "
                 << "weights/\n";
  }
  if (absl::Status status = weft::rt::writeFileAtomically(
          outputPath + "/" + kProjectMarker,
          "A project written by weft compile; weft compile -o may replace "
          "it.\n");
      !status.ok())
    return fail(std::string(status.message()));
  if (!buildProgram)
    return 0;
  auto cmake = llvm::sys::findProgramByName("cmake");
  if (!cmake)
    return fail("--build needs cmake on the PATH");
  std::string buildDir = outputPath + "/build";
  std::vector<std::string> configure = {*cmake,   "-S",     outputPath,
                                        "-B",     buildDir, "-G",
                                        "Ninja",  "--log-level=WARNING"};
  if (!runtimePrefix.empty())
    configure.push_back("-DCMAKE_PREFIX_PATH=" + runtimePrefix);
  std::vector<llvm::StringRef> configureArgs(configure.begin(), configure.end());
  if (llvm::sys::ExecuteAndWait(*cmake, configureArgs) != 0)
    return fail("configuring the generated project failed (is the runtime "
                "installed? give --runtime-prefix)");
  std::vector<std::string> build = {*cmake, "--build", buildDir};
  std::vector<llvm::StringRef> buildArgs(build.begin(), build.end());
  if (llvm::sys::ExecuteAndWait(*cmake, buildArgs) != 0)
    return fail("building the generated program failed");
  llvm::outs() << "built " << buildDir << "/program\n";
  return 0;
}

int runPlan(MLIRContext &context);
int runCalibrate();
int runTrain(MLIRContext &context);
bool trainCommandSelected();
bool planCommandSelected();
bool calibrateCommandSelected();

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
  if (runCommand)
    return runModel(context);
  if (compileCommand)
    return runCompile(context);
  if (planCommandSelected())
    return runPlan(context);
  if (calibrateCommandSelected())
    return runCalibrate();
  if (trainCommandSelected())
    return runTrain(context);
  cl::PrintHelpMessage();
  return 1;
}

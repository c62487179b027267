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
#include "weft/Driver/Driver.h"
#include "weft/Exec/Interpreter.h"
#include "weft/Exec/TensorFiles.h"
#include "weft/Import/OnnxImporter.h"
#include "weft/InitAll.h"
#include "weft/Passes/Passes.h"
#include "weft/Pipelines/Pipelines.h"
#include "weft/Plan/Plan.h"
#include "weft/Planner/Model.h"
#include "llvm/Support/Program.h"

#include "weft/runtime/FileWrite.h"
#include "weft/runtime/Profile.h"
#include "weft/runtime/Program.h"

#include <sstream>
#include <stdexcept>

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

/// The import subcommand, built on first use: PlanCommand.cpp adds the
/// built-in model's options (--model, --layers, ...) to it.
llvm::cl::SubCommand &importSubCommand() {
  static cl::SubCommand command(
      "import", "Import an ONNX model into the weft dialect, or build a "
                "built-in one (--model) with random weights");
  return command;
}
static cl::SubCommand &importCommand = importSubCommand();

static cl::SubCommand runCommand("run", "Run a model on the CPU");

/// Shared with TrainCommand.cpp, whose optimizer options `compile --train`
/// takes too.
cl::SubCommand &compileSubCommand() {
  static cl::SubCommand command(
      "compile", "Partition a model under a plan and emit the rank program "
                 "as C++ with a CMake project");
  return command;
}
static cl::SubCommand &compileCommand = compileSubCommand();
static cl::opt<bool> compileTraining(
    "train",
    cl::desc("Emit the training step instead of the forward program: loss, "
             "backward, gradient reduction and the optimizer step on every "
             "rank, with weft train's optimizer options (CPU target)"),
    cl::sub(compileCommand));

static cl::opt<std::string>
    modelPath(cl::Positional, cl::Optional,
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
static cl::opt<std::string> buildType(
    "build-type",
    cl::desc("CMAKE_BUILD_TYPE of the program --build builds: Release "
             "(default), Debug (unoptimized, with debug information: builds "
             "several times faster, for debugging a rank program and for "
             "tests), RelWithDebInfo or MinSizeRel"),
    cl::init("Release"), cl::sub(compileCommand));
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
static cl::opt<std::string> checkpointPath(
    "checkpoint",
    cl::desc("import --model CONFIG: the weights from this Hugging Face "
             "checkpoint (a .safetensors file, a model.safetensors.index.json "
             "or the directory holding either) instead of random ones"),
    cl::value_desc("path"), cl::sub(importCommand));
static cl::opt<bool> withLoss(
    "loss",
    cl::desc("Replace the model's logits by the per-token cross-entropy "
             "against labels (-weft-append-loss), the head of a training "
             "step, as the planner costs it (a model's own loss and its "
             "labels input taken out first, -weft-lift-model-loss); run: "
             "the last input is the labels (i64)"),
    cl::sub(runCommand), cl::sub(compileCommand));
static cl::opt<bool> noFixedBuffers(
    "no-fixed-buffers",
    cl::desc("Keep fixed position buffers (sinusoid tables, rotary "
             "frequencies, which the import tells by their values and "
             "makes constants, as torch never trains buffers) as weights "
             "(compile --train: trained, as weft train --no-fixed-buffers)"),
    cl::sub(importCommand), cl::sub(runCommand), cl::sub(compileCommand));
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
static cl::opt<std::string> traceFile(
    "trace",
    cl::desc("With a plan with pp > 1: write every rank's pipeline steps "
             "(forward, send, receive) as a Chrome-trace / Perfetto JSON "
             "timeline here"),
    cl::sub(runCommand));
static cl::opt<bool> profileRun(
    "profile",
    cl::desc("Print the import time, the forward time (less reading weights) "
             "and time and bytes per kernel kind, summed over ranks"),
    cl::sub(runCommand));
static cl::opt<bool> stats("stats",
                           cl::desc("Print op counts (instead of the module "
                                    "when no -o is given)"),
                           cl::sub(importCommand));

/// Prints "path: node 'name': error: message" for importer locations and
/// "path:line:col: error: message" for source locations.
static void printDiagnostic(Diagnostic &diag) {
  llvm::raw_ostream &err = llvm::errs();
  err << weft::driver::describeLocation(diag.getLocation()) << ": ";
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

/// Prints a driver's error (one whose diagnostics were printed as they came
/// adds nothing) and returns 1.
static int fail(llvm::Error error) {
  int status = 1;
  llvm::handleAllErrors(
      std::move(error), [](const weft::driver::DiagnosedError &) {},
      [&](const llvm::ErrorInfoBase &e) { status = fail(e.message()); });
  return status;
}

/// How the command line imports and prepares a model.
static weft::driver::ModelOptions modelOptions() {
  weft::driver::ModelOptions options;
  options.inputShapes.assign(inputShapes.begin(), inputShapes.end());
  options.batchSize = batchSize;
  options.seqLen = seqLen;
  options.dynamicInputs = dynamicInputs;
  options.raise = !noRaise;
  options.explainRaise = explainRaise;
  options.dtype = dtype;
  options.loss = withLoss;
  options.fixedBuffers = !noFixedBuffers;
  return options;
}

weft::driver::PlanRequest builtinModelRequest();

static cl::opt<uint64_t>
    seedOpt("seed", cl::desc("import --model: the seed of the random weights"),
            cl::init(0), cl::sub(importCommand));

/// weft import --model: the built-in model at --batch-size x --seq-len,
/// its weights drawn from --seed into <output stem>.weights beside it (with
/// --no-weights, the module alone, which the planner reads).
static int runBuildModel(MLIRContext &context,
                         const weft::driver::PlanRequest &request) {
  if (!modelPath.empty())
    return fail("give a model file or --model, not both");
  if (!noWeights &&
      (outputPath == "-" || !llvm::StringRef(outputPath).ends_with(".mlir")))
    return fail("--model writes a module and its weights: give -o "
                "DIR/NAME.mlir (the weights go to DIR/NAME.weights), or "
                "--no-weights for the module alone");
  auto spec = weft::driver::resolveModelSpec(context, request);
  if (!spec)
    return fail(spec.takeError());
  int64_t batch = batchSize.getNumOccurrences() ? int64_t(batchSize) : 1;
  int64_t seq = seqLen.getNumOccurrences() ? int64_t(seqLen) : spec->seq_len();
  // The model's context is the sequence it is built at, as the planner
  // costs it (a learned position table has that many rows).
  spec->set_seq_len(seq);
  llvm::SmallString<256> weights;
  if (!noWeights) {
    weights = outputPath;
    llvm::sys::path::replace_extension(weights, "weights");
    llvm::StringRef dir = llvm::sys::path::parent_path(outputPath);
    if (!dir.empty())
      if (std::error_code ec = llvm::sys::fs::create_directories(dir))
        return fail("cannot create '" + dir.str() + "': " + ec.message());
  }
  if (!checkpointPath.empty() && noWeights)
    return fail("--checkpoint gives the weights that --no-weights leaves "
                "out: give one of them");
  // A rope scaling the builder does not build changes every position's
  // frequencies: say so rather than compute another model quietly.
  if (!weft::planner::ropeScalingBuilt(*spec))
    llvm::errs()
        << "weft import: note: the config's rope_scaling '"
        << spec->rope_scaling().type()
        << "' is not built (linear, llama3, yarn, longrope and dynamic "
           "are): the "
           "model's rotary frequencies are the unscaled ones\n";
  auto module = weft::driver::buildModelWithWeights(
      context, *spec, batch, seq, seedOpt, weights, checkpointPath);
  if (!module)
    return fail(module.takeError());
  std::string error;
  auto output = openOutputFile(outputPath, &error);
  if (!output)
    return fail(error);
  (*module)->print(output->os());
  output->keep();
  if (noWeights) {
    llvm::errs() << llvm::formatv(
        "weft import: {0} ({1} layers; {2:e2} parameters, no weights) at "
        "batch {3} x sequence {4}\n",
        spec->name(), spec->layers(), weft::planner::parameterCount(*spec),
        batch, seq);
    return 0;
  }
  std::string from = checkpointPath.empty()
                         ? llvm::formatv("seed {0}", uint64_t(seedOpt)).str()
                         : "from " + checkpointPath;
  llvm::errs() << llvm::formatv(
      "weft import: {0} ({1} layers, hidden {2}, {3} heads, vocab {4}; {5:e2} "
      "parameters) at batch {6} x sequence {7}: {8}, weights ({9}) in "
      "{10}\n",
      spec->name(), spec->layers(), spec->hidden(), spec->heads(),
      spec->vocab(), weft::planner::parameterCount(*spec), batch, seq,
      outputPath, from, weights);
  return 0;
}

static int runImport(MLIRContext &context) {
  weft::driver::PlanRequest builtin = builtinModelRequest();
  if (!builtin.preset.empty())
    return runBuildModel(context, builtin);
  if (modelPath.empty())
    return fail("no model: give an ONNX or .mlir file, or --model (a preset, "
                "or gpt / llama with --layers, --hidden, ...)");
  llvm::Expected<weft::OnnxImportOptions> options =
      weft::driver::importOptions(modelOptions());
  if (!options)
    return fail(options.takeError());
  options->loadWeights = !noWeights;

  OwningOpRef<ModuleOp> module = weft::driver::importModel(
      modelPath, *options, context, !noRaise, explainRaise);
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
  weft::driver::RunRequest request;
  request.model = modelPath;
  request.options = modelOptions();
  request.inputNames = inputs;
  for (const std::string &path : inputs) {
    weft::rt::HostTensor tensor;
    std::string error;
    if (!weft::readTensorFile(path, tensor, error))
      return fail(error);
    request.inputs.push_back(std::move(tensor));
  }
  request.foldSmallInputs = foldSmallInputs;
  request.devices = devices;
  request.collectiveTimeoutSeconds = collectiveTimeout;
  request.dumpPartitioned = dumpPartitioned;
  request.profile = profileRun;
  request.tracePath = traceFile;
  if (devices > 0 || !planFile.empty() || !planSpec.empty()) {
    llvm::Expected<weft::plan::Plan> plan =
        weft::driver::resolvePlan(planFile, planSpec);
    if (!plan)
      return fail(plan.takeError());
    request.plan = std::move(*plan);
  }
  llvm::Expected<weft::driver::RunOutcome> outcome =
      weft::driver::runModel(context, request);
  if (!outcome)
    return fail(outcome.takeError());
  if (request.plan) {
    llvm::errs() << "weft run: " << outcome->bytesSent.size()
                 << " devices; bytes sent per rank:";
    for (int64_t b : outcome->bytesSent)
      llvm::errs() << ' ' << b;
    llvm::errs() << '\n';
  }
  std::vector<weft::rt::HostTensor> *outputs = &outcome->outputs;
  if (profileRun) {
    llvm::errs() << llvm::format("weft: import %.6f s (reading, converting "
                                 "and preparing the module)\n",
                                 outcome->importSeconds);
    std::ostringstream table;
    weft::rt::Profiler::get().print(table);
    llvm::errs() << table.str();
  }

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

llvm::Expected<weft::driver::CompileOutcome>
compileTrainingProgram(MLIRContext &context,
                       const weft::driver::CompileRequest &request);

std::vector<std::string> trainingFlagsGiven();

static int runCompile(MLIRContext &context) {
  // The target and -o are checked by the driver.
  if (std::vector<std::string> given = trainingFlagsGiven();
      !compileTraining && !given.empty())
    return fail("--" + given.front() +
                " is a training option: give --train to compile a training "
                "program, or leave it out");
  if (planFile.empty() && planSpec.empty())
    return fail("weft compile needs a plan: --plan plans.json or --plan-spec");
  llvm::Expected<weft::plan::Plan> plan =
      weft::driver::resolvePlan(planFile, planSpec);
  if (!plan)
    return fail(plan.takeError());
  weft::driver::CompileRequest request;
  request.model = modelPath;
  request.options = modelOptions();
  request.plan = std::move(*plan);
  request.planOrigin = planSpec.empty() ? planFile : planSpec;
  request.target = target;
  request.outputDir = outputPath;
  request.force = forceOutput;
  request.build = buildProgram;
  request.runtimePrefix = runtimePrefix;
  request.buildType = buildType;
  request.dumpPartitioned = dumpPartitioned;
  request.dumpEmitted = dumpEmitted;
  llvm::Expected<weft::driver::CompileOutcome> outcome =
      compileTraining ? compileTrainingProgram(context, request)
                      : weft::driver::compileModel(context, request);
  if (!outcome)
    return fail(outcome.takeError());
  llvm::outs() << outcome->summary;
  return 0;
}

int runPlan(MLIRContext &context);
int runCalibrate();
int runTrain(MLIRContext &context);
bool trainCommandSelected();
bool planCommandSelected();
bool calibrateCommandSelected();
bool exportCommandSelected();
int runExport(MLIRContext &context);

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
  if ((runCommand || compileCommand) && modelPath.empty())
    return fail("no model: give an ONNX or .mlir file");
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
  if (exportCommandSelected())
    return runExport(context);
  cl::PrintHelpMessage();
  return 1;
}

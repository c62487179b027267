//===- Driver.cpp - Models, running and compiling as library calls --------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Driver/Driver.h"
#include "weft/Codegen/CpuEmitter.h"
#include "weft/Codegen/CudaEmitter.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Exec/Interpreter.h"
#include "weft/Passes/Passes.h"
#include "weft/Pipelines/Pipelines.h"
#include "weft/Plan/Plan.h"
#include "weft/runtime/FileWrite.h"
#include "weft/runtime/Profile.h"
#include "weft/runtime/Program.h"
#include "weft/runtime/Training.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <stdexcept>
#include <tuple>

using namespace mlir;
using namespace weft;
using weft::rt::HostTensor;

char driver::DiagnosedError::ID = 0;

llvm::Error driver::diagnosed(const llvm::Twine &summary) {
  return llvm::make_error<DiagnosedError>(summary.str());
}

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

std::string driver::describeLocation(Location loc) {
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
  return where;
}

static const char *severityName(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Remark:
    return "remark";
  default:
    return "note";
  }
}

driver::DiagnosticCollector::DiagnosticCollector(MLIRContext &context)
    : handler(&context, [this](Diagnostic &diag) {
        auto add = [this](Diagnostic &d) {
          collected += describeLocation(d.getLocation()) + ": " +
                       severityName(d.getSeverity()) + ": " + d.str() + "\n";
        };
        add(diag);
        for (Diagnostic &note : diag.getNotes())
          add(note);
        return success();
      }) {}

std::string driver::DiagnosticCollector::message(llvm::Error error) const {
  std::string summary;
  bool reported = false;
  llvm::handleAllErrors(
      std::move(error),
      [&](const DiagnosedError &e) {
        summary = e.message();
        reported = true;
      },
      [&](const llvm::ErrorInfoBase &e) { summary = e.message(); });
  std::string text = collected;
  if (!(reported && !collected.empty()))
    text += summary;
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  return text;
}

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

llvm::Expected<OnnxImportOptions>
driver::importOptions(const ModelOptions &given) {
  OnnxImportOptions options;
  for (const std::string &shape : given.inputShapes) {
    std::string error;
    if (failed(parseInputShape(shape, options, error)))
      return llvm::createStringError(error);
  }
  if (given.batchSize >= 0)
    options.batchSize = given.batchSize;
  if (given.seqLen >= 0)
    options.sequenceLength = given.seqLen;
  options.makeInputsDynamic = given.dynamicInputs;
  options.fixedBuffers = given.fixedBuffers;
  return options;
}

OwningOpRef<ModuleOp> driver::importModel(llvm::StringRef path,
                                          const OnnxImportOptions &options,
                                          MLIRContext &context, bool raise,
                                          bool explainRaise) {
  OwningOpRef<ModuleOp> module = importOnnxModel(path, options, &context);
  if (!module || !raise)
    return module;
  PassManager pm(&context);
  buildPrepareModelPipeline(pm, explainRaise);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

OwningOpRef<ModuleOp> driver::loadModelForPlanning(
    llvm::StringRef path, MLIRContext &context, int64_t sequenceLength,
    int64_t batch, llvm::ArrayRef<std::string> shapes, bool fixedBuffers) {
  if (!path.ends_with(".mlir")) {
    // Shapes only: dynamic batch axes become `batch` (the planner's
    // micro-batches), dynamic sequence axes the --seq-len given; inputs
    // named in --input-shape take its shapes.
    OnnxImportOptions options;
    for (const std::string &shape : shapes) {
      std::string error;
      if (failed(parseInputShape(shape, options, error))) {
        emitError(UnknownLoc::get(&context)) << error;
        return nullptr;
      }
    }
    options.loadWeights = false;
    options.keepExternalData = true;
    options.fixedBuffers = fixedBuffers;
    options.batchSize = batch;
    if (sequenceLength > 0)
      options.sequenceLength = sequenceLength;
    return importModel(path, options, context);
  }
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(path, &context);
  if (!module)
    return nullptr;
  PassManager pm(&context);
  buildPrepareModelPipeline(pm);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

llvm::Error driver::prepareModule(MLIRContext &context, ModuleOp module,
                                  const ModelOptions &options) {
  if (options.dtype != "f32") {
    if (options.dtype != "bf16" && options.dtype != "f16")
      return llvm::createStringError("--dtype " + options.dtype +
                                     ": expected f32, bf16 or f16");
    PassManager pm(&context);
    WeftConvertFloatTypeOptions convert;
    convert.to = options.dtype;
    pm.addNestedPass<func::FuncOp>(createWeftConvertFloatType(convert));
    if (failed(pm.run(module)))
      return diagnosed("converting the model to " + options.dtype + " failed");
  }
  if (options.loss) {
    PassManager pm(&context);
    pm.addPass(createWeftLiftModelLoss());
    pm.addPass(createWeftAppendLoss());
    if (failed(pm.run(module)))
      return diagnosed("appending the loss failed");
  }
  return llvm::Error::success();
}

/// A model file's module: weft IR parsed, or ONNX imported with
/// `onnxOptions` (and raised unless `options` say not), then converted to
/// the dtype and given the loss that `options` ask for.
static llvm::Expected<OwningOpRef<ModuleOp>>
loadModule(MLIRContext &context, llvm::StringRef path,
           const OnnxImportOptions &onnxOptions,
           const driver::ModelOptions &options) {
  OwningOpRef<ModuleOp> module =
      path.ends_with(".mlir")
          ? parseSourceFile<ModuleOp>(path, &context)
          : driver::importModel(path, onnxOptions, context, options.raise);
  if (!module)
    return driver::diagnosed("could not load '" + path + "'");
  if (llvm::Error error = driver::prepareModule(context, *module, options))
    return error;
  return module;
}

func::FuncOp driver::entryFunction(ModuleOp module) {
  if (auto main = module.lookupSymbol<func::FuncOp>("main"))
    return main;
  for (auto candidate : module.getOps<func::FuncOp>())
    return candidate;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

llvm::Expected<plan::Plan> driver::resolvePlan(llvm::StringRef planFile,
                                               llvm::StringRef planSpec) {
  if (!planFile.empty() && !planSpec.empty())
    return llvm::createStringError("give --plan or --plan-spec, not both");
  if (!planFile.empty())
    return readPlanFile(planFile);
  llvm::Expected<PlanSpec> spec = parsePlanSpec(planSpec, "--plan-spec");
  if (!spec)
    return spec.takeError();
  plan::Plan plan = spec->plan;
  // Without mbs, the micro-batch is whatever the model's batch over dp is.
  if (!spec->mbsGiven)
    plan.set_micro_batch(0);
  return plan;
}

llvm::Error driver::partitionModule(MLIRContext &context, ModuleOp module,
                                    const plan::Plan &plan, bool pipelined) {
  std::optional<int64_t> perRankBatch;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && func.getNumArguments() && plan.dp() > 0)
      if (auto type =
              dyn_cast<RankedTensorType>(func.getArgumentTypes().front()))
        if (type.getRank() > 0 && type.getDimSize(0) % plan.dp() == 0)
          perRankBatch = type.getDimSize(0) / plan.dp();
  std::vector<std::string> unapplied =
      unappliedPlanFields(plan, perRankBatch, pipelined);
  if (!unapplied.empty()) {
    std::string list;
    for (const std::string &field : unapplied)
      list += "\n  " + field;
    return llvm::createStringError(
        "the plan has fields that a forward program does not apply:" + list);
  }
  PassManager pm(&context);
  if (plan.pp() > 1) {
    pm.addPass(createWeftSplitStages(splitStagesOptions(plan)));
    WeftSchedulePipelineOptions schedule;
    schedule.schedule = scheduleName(plan.schedule());
    schedule.microBatches = std::max(1, plan.num_micro_batches());
    pm.addPass(createWeftSchedulePipeline(schedule));
  }
  buildPartitionPipeline(pm, applyPlanOptions(plan), plan.compress());
  if (failed(pm.run(module)))
    return diagnosed("partitioning the model under the plan failed");
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

/// The mesh `func` runs on, checked against the devices asked for.
static llvm::Expected<rt::Mesh> meshOf(ModuleOp module, func::FuncOp func,
                                       int expectedDevices) {
  std::optional<MeshInfo> meshInfo = getMeshInfo(module);
  rt::Mesh mesh;
  if (meshInfo) {
    mesh.axes.assign(meshInfo->axes.begin(), meshInfo->axes.end());
    mesh.shape.assign(meshInfo->sizes.begin(), meshInfo->sizes.end());
  }
  if (func->hasAttr(WeftDialect::getLoadBalancedAttrName()))
    mesh.zigzagAxis = "cp";
  int n = int(mesh.size());
  if (expectedDevices > 0 && expectedDevices != n)
    return llvm::createStringError("the plan runs on " + llvm::Twine(n) +
                                   " devices, but --devices is " +
                                   llvm::Twine(expectedDevices));
  return mesh;
}

/// Where each argument and result of a partitioned function sits on the
/// mesh (its weft.local_sharding).
static std::pair<std::vector<rt::Layout>, std::vector<rt::Layout>>
layoutsOf(func::FuncOp func) {
  std::vector<rt::Layout> inputs, outputs;
  FunctionType type = func.getFunctionType();
  for (unsigned i = 0; i < type.getNumInputs(); ++i)
    inputs.push_back(
        driver::layoutOf(func.getArgAttrOfType<ShardingAttr>(
                             i, WeftDialect::getLocalShardingAttrName()),
                         cast<RankedTensorType>(type.getInput(i)).getRank()));
  for (unsigned o = 0; o < type.getNumResults(); ++o)
    outputs.push_back(
        driver::layoutOf(func.getResultAttrOfType<ShardingAttr>(
                             o, WeftDialect::getLocalShardingAttrName()),
                         cast<RankedTensorType>(type.getResult(o)).getRank()));
  return {std::move(inputs), std::move(outputs)};
}

/// `func` interpreted on one rank; throws if the interpreter fails.
static std::vector<HostTensor>
interpretOnRank(func::FuncOp func, const std::vector<HostTensor> &in,
                const InterpreterOptions &base, rt::RankContext &ctx) {
  InterpreterOptions options = base;
  options.rank = ctx.rank;
  options.communicator = ctx.comm;
  FailureOr<std::vector<HostTensor>> result = interpret(func, in, options);
  if (failed(result))
    throw std::runtime_error("the interpreter failed (see the errors "
                             "reported)");
  return std::move(*result);
}

llvm::Expected<std::vector<HostTensor>>
driver::runOnMeshDevices(ModuleOp module, func::FuncOp func,
                         const std::vector<HostTensor> &inputs,
                         const InterpreterOptions &base, int expectedDevices,
                         double timeoutSeconds, std::vector<int64_t> &bytes) {
  llvm::Expected<rt::Mesh> mesh = meshOf(module, func, expectedDevices);
  if (!mesh)
    return mesh.takeError();
  auto [inputLayouts, outputLayouts] = layoutsOf(func);
  // Each rank interprets the partitioned function.
  rt::RankFunction rankFunction = [&](rt::RankContext &ctx,
                                      const std::vector<HostTensor> &mine) {
    return interpretOnRank(func, mine, base, ctx);
  };
  absl::StatusOr<std::vector<HostTensor>> outputs = rt::runOnMesh(
      rankFunction, *mesh, base.weightsDir, inputs, inputLayouts, outputLayouts,
      &bytes, std::chrono::milliseconds(int64_t(timeoutSeconds * 1000)));
  if (!outputs.ok())
    return llvm::createStringError(std::string(outputs.status().message()));
  return std::move(*outputs);
}

llvm::Expected<GradientReduction>
driver::gradientReductionOf(func::FuncOp step) {
  std::string why;
  FailureOr<GradientReduction> found = readGradientReduction(step, why);
  if (failed(found))
    return llvm::createStringError(why);
  return *found;
}

llvm::Expected<std::vector<HostTensor>> driver::runTrainingStepOnMeshDevices(
    ModuleOp module, func::FuncOp func,
    const std::vector<std::vector<HostTensor>> &microBatches,
    const InterpreterOptions &base, int expectedDevices, double timeoutSeconds,
    std::vector<int64_t> &bytes, const MeshOptimizerStep *optimizer,
    HeldTrainingState *held) {
  llvm::Expected<rt::Mesh> mesh = meshOf(module, func, expectedDevices);
  if (!mesh)
    return mesh.takeError();
  // (Not structured bindings: a lambda below captures them, which C++17
  // does not allow.)
  std::vector<rt::Layout> inputLayouts, outputLayouts;
  std::tie(inputLayouts, outputLayouts) = layoutsOf(func);
  llvm::Expected<GradientReduction> deferred = gradientReductionOf(func);
  if (!deferred)
    return deferred.takeError();
  func::FuncOp reduce = deferred->function;
  const std::vector<int> &partial = deferred->partial;
  if (reduce) {
    auto reduced = layoutsOf(reduce).second;
    for (auto [k, o] : llvm::enumerate(partial))
      outputLayouts[size_t(o)] = reduced[k];
  }
  for (const std::vector<HostTensor> &micro : microBatches)
    if (micro.size() != inputLayouts.size())
      return llvm::createStringError(
          "the training step takes " + llvm::Twine(inputLayouts.size()) +
          " inputs, got " + llvm::Twine(micro.size()));
  // The optimizer step's layouts, and the step's results it consumes.
  std::vector<rt::Layout> optimizerIn, optimizerOut;
  std::vector<bool> consumed(outputLayouts.size(), false);
  if (optimizer) {
    std::tie(optimizerIn, optimizerOut) = layoutsOf(optimizer->function);
    if (optimizer->inputs.size() != optimizerIn.size() ||
        optimizer->gradientOf.size() != optimizerIn.size())
      return llvm::createStringError(
          "the optimizer step takes " + llvm::Twine(optimizerIn.size()) +
          " arguments, got " + llvm::Twine(optimizer->inputs.size()));
    for (int o : optimizer->gradientOf) {
      if (o >= int(consumed.size()))
        return llvm::createStringError(
            "the optimizer step takes result #" + llvm::Twine(o) +
            " of a step that returns " + llvm::Twine(consumed.size()));
      if (o >= 0)
        consumed[size_t(o)] = true;
    }
  }
  // Each rank runs the step on every micro-batch, sums its results (the
  // loss, and the gradients: partial ones on the rank), then reduces the
  // partial sums once; or, with weft.reduce_every_micro_batch (ZeRO-2),
  // reduces each micro-batch's and sums the reduced blocks.
  rt::RankTrainingStep onRank;
  onRank.step = [&](rt::RankContext &ctx, const std::vector<HostTensor> &in) {
    return interpretOnRank(func, in, base, ctx);
  };
  onRank.inputs = inputLayouts;
  if (reduce)
    onRank.reduce = [&](rt::RankContext &ctx,
                        const std::vector<HostTensor> &in) {
      return interpretOnRank(reduce, in, base, ctx);
    };
  onRank.partial = partial;
  onRank.everyMicroBatch = deferred->everyMicroBatch;
  for (unsigned r = 0; r < func.getNumResults(); ++r)
    if (func.getResultAttr(r, WeftDialect::getGradientOfAttrName()))
      onRank.gradients.push_back(int(r));
  // The optimizer step's arguments that are a parameter's block (1) or its
  // state (2; not a gradient, not one of the step's scalars).
  std::vector<int> kindOf(optimizerIn.size(), 0);
  for (size_t i = 0; optimizer && i < optimizerIn.size(); ++i)
    kindOf[i] =
        int(optimizerArgumentSlot(optimizer->function, unsigned(i)).held());
  if (held) {
    held->gradients.assign(size_t(mesh->size()), 0);
    held->parameters.assign(size_t(mesh->size()), 0);
    held->optimizer.assign(size_t(mesh->size()), 0);
  }
  rt::RankBody body = [&](rt::RankContext &ctx) {
    int64_t gradientBytes = 0;
    std::vector<HostTensor> sums = rt::runTrainingStepOnRank(
        ctx, onRank, microBatches, held ? &gradientBytes : nullptr);
    if (held)
      held->gradients[size_t(ctx.rank)] = gradientBytes;
    if (optimizer) {
      std::vector<HostTensor> in;
      int64_t bytes[3] = {0, 0, 0};
      for (size_t i = 0; i < optimizerIn.size(); ++i) {
        int o = optimizer->gradientOf[i];
        in.push_back(o >= 0 ? std::move(sums[size_t(o)])
                            : rt::scatterBlock(optimizer->inputs[i],
                                               optimizerIn[i], ctx.mesh,
                                               ctx.rank));
        if (o < 0)
          bytes[kindOf[i]] += rt::storageBytes(in.back());
      }
      if (held) {
        held->parameters[size_t(ctx.rank)] = bytes[1];
        held->optimizer[size_t(ctx.rank)] = bytes[2];
      }
      std::vector<HostTensor> out =
          interpretOnRank(optimizer->function, in, base, ctx);
      for (HostTensor &result : out)
        sums.push_back(std::move(result));
    }
    return sums;
  };
  auto results =
      rt::runRanks(body, *mesh, base.weightsDir, &bytes,
                   std::chrono::milliseconds(int64_t(timeoutSeconds * 1000)));
  if (!results.ok())
    return llvm::createStringError(std::string(results.status().message()));
  outputLayouts.insert(outputLayouts.end(), optimizerOut.begin(),
                       optimizerOut.end());
  consumed.resize(outputLayouts.size(), false);
  std::vector<HostTensor> outputs;
  for (size_t o = 0; o < outputLayouts.size(); ++o) {
    if (consumed[o]) {
      outputs.emplace_back();
      continue;
    }
    std::vector<HostTensor> blocks;
    for (std::vector<HostTensor> &rank : *results) {
      if (o >= rank.size())
        return llvm::createStringError("a rank returned too few results");
      blocks.push_back(std::move(rank[o]));
    }
    outputs.push_back(rt::gatherBlocks(blocks, outputLayouts[o], *mesh));
  }
  return outputs;
}

/// Inputs that do not fit the model are refused before anything runs: a
/// float tensor for an integer input (token ids would be truncated), and
/// token ids outside the vocabulary of an embedding the input feeds (the
/// partitioned, vocabulary-parallel embedding would read zeros for them).
/// Integer widths and float formats convert (int32 or uint16 token files,
/// f32 data for a bf16 model).
static llvm::Error checkInputs(func::FuncOp func,
                               const std::vector<HostTensor> &tensors,
                               const std::vector<std::string> &paths) {
  FunctionType type = func.getFunctionType();
  if (tensors.size() != type.getNumInputs())
    return llvm::Error::success(); // the interpreter says how many it takes
  for (auto [index, tensor] : llvm::enumerate(tensors)) {
    std::string file = index < paths.size() && !paths[index].empty()
                           ? paths[index]
                           : "input #" + std::to_string(index);
    Type element =
        cast<RankedTensorType>(type.getInput(index)).getElementType();
    std::string name = "input #" + std::to_string(index);
    if (auto onnxName = func.getArgAttrOfType<StringAttr>(index, "onnx.name"))
      name += " ('" + onnxName.getValue().str() + "')";
    if (tensor.isFloat() && !isa<FloatType>(element)) {
      std::string expected;
      llvm::raw_string_ostream os(expected);
      os << element;
      return llvm::createStringError(
          file + ": holds " + rt::dtypeName(tensor.dtype) + " values, but " +
          name + " of the model is " + expected +
          "; write the file with the model's integer type (float values would "
          "be truncated)");
    }
    BlockArgument argument = func.getArgument(index);
    for (Operation *user : argument.getUsers()) {
      auto embedding = dyn_cast<EmbeddingOp>(user);
      if (!embedding || embedding.getIndices() != argument)
        continue;
      int64_t vocab = embedding.getTable().getType().getDimSize(0);
      for (int64_t i = 0; i < tensor.numel(); ++i) {
        double id = tensor.at(i);
        if (id < 0 || id >= static_cast<double>(vocab))
          return llvm::createStringError(
              file + ": token id " + std::to_string(static_cast<int64_t>(id)) +
              " at element " + std::to_string(i) + " of " + name +
              " is outside the embedding's vocabulary [0, " +
              std::to_string(vocab) + ")");
      }
    }
  }
  return llvm::Error::success();
}

/// Writes `module` to `path` when a path is given.
static llvm::Error dumpModule(ModuleOp module, llvm::StringRef path) {
  if (path.empty())
    return llvm::Error::success();
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec);
  if (ec)
    return llvm::createStringError("cannot write " + path + ": " +
                                   ec.message());
  module.print(out);
  return llvm::Error::success();
}

llvm::Expected<driver::RunOutcome> driver::runModel(MLIRContext &context,
                                                    const RunRequest &request) {
  if (request.devices < 0)
    return llvm::createStringError(
        "--devices " + std::to_string(request.devices) +
        ": give at least 1 device (or leave it out to run unpartitioned)");
  if (!(request.collectiveTimeoutSeconds > 0))
    return llvm::createStringError(
        "--collective-timeout needs a positive number of seconds");
  std::vector<HostTensor> tensors = request.inputs;
  std::vector<std::string> names = request.inputNames;
  names.resize(tensors.size());

  llvm::StringRef path = request.model;
  const int microBatches = request.plan && request.plan->pp() > 1
                               ? std::max(1, request.plan->num_micro_batches())
                               : 1;
  // The whole batches, which a pipeline cuts into micro-batches.
  std::vector<HostTensor> wholeBatches;
  OnnxImportOptions onnxOptions;
  if (!path.ends_with(".mlir")) {
    auto parsed = importOptions(request.options);
    if (!parsed)
      return parsed.takeError();
    onnxOptions = std::move(*parsed);
    OnnxImportOptions *options = &onnxOptions;
    std::vector<HostTensor> remaining;
    std::vector<std::string> remainingNames;
    // With a loss, the labels are an input of the loss, not of the model.
    std::optional<HostTensor> labels;
    std::string labelsName;
    if (request.options.loss && !tensors.empty()) {
      labels = std::move(tensors.back());
      tensors.pop_back();
      labelsName = names.back();
      names.pop_back();
    }
    for (auto [index, tensor] : llvm::enumerate(tensors)) {
      options->inputShapesByPosition.emplace_back(tensor.shape.begin(),
                                                  tensor.shape.end());
      // A pipeline's stages run one micro-batch at a time: the model is
      // imported at the micro-batch's shape.
      if (microBatches > 1 && !tensor.shape.empty()) {
        if (tensor.shape[0] % microBatches)
          return llvm::createStringError(
              names[index] + ": the batch (" + std::to_string(tensor.shape[0]) +
              ") does not divide into m=" + std::to_string(microBatches) +
              " micro-batches");
        options->inputShapesByPosition.back()[0] /= microBatches;
      }
      bool small =
          (!tensor.isFloat() && tensor.numel() <= 64) || tensor.shape.empty();
      if (!request.foldSmallInputs || !small) {
        options->constantInputsByPosition.emplace_back();
        remaining.push_back(tensor);
        remainingNames.push_back(names[index]);
        continue;
      }
      // onnx::TensorProto::DataType codes of the runtime's element types.
      static const int32_t onnxTypes[] = {
          1 /*FLOAT*/, 10 /*FLOAT16*/, 16 /*BFLOAT16*/,
          7 /*INT64*/, 6 /*INT32*/,    9 /*BOOL*/,
          11 /*DOUBLE*/};
      OnnxImportOptions::InputValue value;
      value.shape = tensor.shape;
      value.onnxType = onnxTypes[static_cast<int>(tensor.dtype)];
      for (int64_t i = 0; i < tensor.numel(); ++i)
        value.values.push_back(tensor.at(i));
      options->constantInputsByPosition.push_back(std::move(value));
    }
    tensors = std::move(remaining);
    names = std::move(remainingNames);
    if (labels) {
      tensors.push_back(std::move(*labels));
      names.push_back(labelsName);
    }
  }
  wholeBatches = tensors;
  if (microBatches > 1)
    for (HostTensor &tensor : tensors)
      if (!tensor.shape.empty() && tensor.shape[0] % microBatches == 0)
        tensor = rt::sliceForRank(tensor, 0, 0, microBatches);
  auto started = std::chrono::steady_clock::now();
  auto secondsSinceStart = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         started)
        .count();
  };
  auto loaded = loadModule(context, path, onnxOptions, request.options);
  if (!loaded && microBatches > 1 && !path.ends_with(".mlir"))
    return llvm::joinErrors(
        loaded.takeError(),
        llvm::createStringError(
            "the plan's pipeline runs m=" + std::to_string(microBatches) +
            " micro-batches, so the model is imported at the batch over m; "
            "an export that fixes its batch needs m=1 (or export it with a "
            "dynamic batch axis)"));
  if (!loaded)
    return loaded.takeError();
  OwningOpRef<ModuleOp> module = std::move(*loaded);
  func::FuncOp func = entryFunction(*module);
  if (!func)
    return llvm::createStringError(path + " has no function to run");
  if (request.profile)
    rt::Profiler::get().enable();
  if (llvm::Error error = checkInputs(func, tensors, names))
    return error;

  InterpreterOptions options;
  options.weightsDir = llvm::sys::path::parent_path(path).str();
  if (options.weightsDir.empty())
    options.weightsDir = ".";
  RunOutcome outcome;
  if (request.plan && request.plan->pp() > 1) {
    if (llvm::Error error = partitionModule(context, *module, *request.plan,
                                            /*pipelined=*/true))
      return error;
    if (llvm::Error error = dumpModule(*module, request.dumpPartitioned))
      return error;
    outcome.importSeconds = secondsSinceStart();
    std::vector<TraceEvent> trace;
    auto outputs = runPipelineOnMeshDevices(
        *module, *request.plan, wholeBatches, options, request.devices,
        request.collectiveTimeoutSeconds, outcome.bytesSent,
        request.tracePath.empty() ? nullptr : &trace);
    if (!outputs)
      return outputs.takeError();
    if (!request.tracePath.empty()) {
      std::error_code ec;
      llvm::raw_fd_ostream out(request.tracePath, ec);
      if (ec)
        return llvm::createStringError("cannot write " + request.tracePath +
                                       ": " + ec.message());
      out << chromeTrace(trace, int(outcome.bytesSent.size()),
                         request.plan->pp());
    }
    outcome.outputs = std::move(*outputs);
    return outcome;
  }
  if (!request.tracePath.empty())
    return llvm::createStringError(
        "--trace records a pipeline's steps: give a plan with pp > 1");
  if (request.plan) {
    if (llvm::Error error = partitionModule(context, *module, *request.plan))
      return error;
    if (llvm::Error error = dumpModule(*module, request.dumpPartitioned))
      return error;
    outcome.importSeconds = secondsSinceStart();
    auto outputs =
        runOnMeshDevices(*module, func, tensors, options, request.devices,
                         request.collectiveTimeoutSeconds, outcome.bytesSent);
    if (!outputs)
      return outputs.takeError();
    outcome.outputs = std::move(*outputs);
    return outcome;
  }
  outcome.importSeconds = secondsSinceStart();
  FailureOr<std::vector<HostTensor>> outputs = failure();
  {
    rt::RankProfile profile;
    outputs = interpret(func, tensors, options);
  }
  if (failed(outputs))
    return diagnosed("running '" + path + "' failed");
  outcome.outputs = std::move(*outputs);
  return outcome;
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

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

llvm::Expected<driver::CompileOutcome>
driver::compileModel(MLIRContext &context, const CompileRequest &request) {
  const std::string &target = request.target;
  const std::string &outputPath = request.outputDir;
  if (target != "cpu" && target != "cuda")
    return llvm::createStringError("--target " + target +
                                   ": expected cpu or cuda");
  if (!llvm::is_contained(llvm::ArrayRef<llvm::StringRef>{"Release", "Debug",
                                                          "RelWithDebInfo",
                                                          "MinSizeRel"},
                          request.buildType))
    return llvm::createStringError(
        "--build-type " + request.buildType +
        ": expected Release, Debug, RelWithDebInfo or MinSizeRel");
  if (outputPath.empty() || outputPath == "-")
    return llvm::createStringError(
        "weft compile needs -o DIR for the generated project");
  llvm::StringRef path = request.model;
  auto onnxOptions = importOptions(request.options);
  if (!onnxOptions)
    return onnxOptions.takeError();
  const bool training = bool(request.buildTrainingStep);
  // Pipeline stages run one micro-batch at a time: with m > 1 the model is
  // imported at --batch-size over m; the program takes whole batches. (A
  // training program's --batch-size is one micro-batch's, as weft train's:
  // each step reads m windows of it.)
  const bool pipelined = request.plan.pp() > 1;
  const int microBatches =
      pipelined ? std::max(1, request.plan.num_micro_batches()) : 1;
  if (microBatches > 1 && !training) {
    if (request.options.batchSize < 1 ||
        request.options.batchSize % microBatches)
      return llvm::createStringError(
          "the plan's pipeline runs m=" + std::to_string(microBatches) +
          " micro-batches: give --batch-size, the whole batch the program "
          "takes, "
          "as a multiple of m (each stage runs batch/m at a time; an "
          "export that fixes its batch needs m=1)");
    onnxOptions->batchSize = request.options.batchSize / microBatches;
  }
  auto loaded = loadModule(context, path, *onnxOptions, request.options);
  if (!loaded)
    return loaded.takeError();
  OwningOpRef<ModuleOp> module = std::move(*loaded);
  // The training program's defaults, which building the step completes
  // (what the labels are).
  TrainingProgramDefaults defaults = request.training;
  if (training) {
    if (llvm::Error error =
            request.buildTrainingStep(context, *module, defaults))
      return error;
  } else if (llvm::Error error =
                 partitionModule(context, *module, request.plan, pipelined)) {
    return error;
  }
  {
    // What the target runs as kernels (what the planner costs), then what
    // its emitter needs.
    PassManager kernels(&context), prepare(&context);
    if (target == "cuda") {
      buildCudaKernelPipeline(kernels);
      buildCudaTargetPipeline(prepare);
    } else {
      buildCpuTargetPipeline(prepare);
    }
    if (failed(kernels.run(*module)))
      return diagnosed("building the kernels failed");
    if (llvm::Error error = dumpModule(*module, request.dumpPartitioned))
      return error;
    if (failed(prepare.run(*module)))
      return diagnosed("preparing the program for its emitter failed");
    if (llvm::Error error = dumpModule(*module, request.dumpEmitted))
      return error;
  }
  if (std::string error = prepareProjectDirectory(outputPath, request.force);
      !error.empty())
    return llvm::createStringError(error);
  std::string origin = path.str() + " under " + request.planOrigin;
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
    return diagnosed("emitting the program failed");
  };
  CompileOutcome outcome;
  llvm::raw_string_ostream os(outcome.summary);
  if (target == "cuda") {
    CudaEmitStats stats;
    if (failed(training ? emitCudaTrainingProgram(*module, outputPath, origin,
                                                  externalDir, defaults, stats)
                        : emitCudaProgram(*module, outputPath, origin,
                                          externalDir, stats)))
      return emitFailed();
    os << "wrote " << outputPath << "/program.cu"
       << (training ? " (the training step)" : "") << ", CMakeLists.txt, "
       << "weights/\n"
       << "arena: " << stats.arenaBytes << " bytes per rank for "
       << stats.buffers << " buffers (" << stats.unsharedBytes
       << " without reuse)\n"
       << "kernels: " << stats.fusedKernels
       << " generated elementwise kernels (" << stats.distinctKernels
       << " distinct) for " << stats.fusedOps << " ops; " << stats.epilogues
       << " GEMM epilogues (bias, GELU); " << stats.collectives
       << " collectives on the communication stream\n";
  } else if (training) {
    if (failed(emitCpuTrainingProgram(*module, outputPath, origin, externalDir,
                                      defaults)))
      return emitFailed();
    os << "wrote " << outputPath << "/program.cpp (the training step), "
       << "CMakeLists.txt, weights/\n";
  } else {
    if (failed(emitCpuProgram(*module, outputPath, origin, externalDir)))
      return emitFailed();
    os << "wrote " << outputPath << "/program.cpp, CMakeLists.txt, "
       << "weights/\n";
  }
  if (absl::Status status = rt::writeFileAtomically(
          outputPath + "/" + kProjectMarker,
          "A project written by weft compile; weft compile -o may replace "
          "it.\n");
      !status.ok())
    return llvm::createStringError(std::string(status.message()));
  if (!request.build)
    return outcome;
  auto cmake = llvm::sys::findProgramByName("cmake");
  if (!cmake)
    return llvm::createStringError("--build needs cmake on the PATH");
  std::string buildDir = outputPath + "/build";
  std::vector<std::string> configure = {
      *cmake,   "-S", outputPath, "-B",
      buildDir, "-G", "Ninja",    "--log-level=WARNING"};
  if (!request.runtimePrefix.empty())
    configure.push_back("-DCMAKE_PREFIX_PATH=" + request.runtimePrefix);
  configure.push_back("-DCMAKE_BUILD_TYPE=" + request.buildType);
  std::vector<llvm::StringRef> configureArgs(configure.begin(),
                                             configure.end());
  if (llvm::sys::ExecuteAndWait(*cmake, configureArgs) != 0)
    return llvm::createStringError(
        "configuring the generated project failed (is the runtime "
        "installed? give --runtime-prefix)");
  std::vector<std::string> build = {*cmake, "--build", buildDir};
  std::vector<llvm::StringRef> buildArgs(build.begin(), build.end());
  if (llvm::sys::ExecuteAndWait(*cmake, buildArgs) != 0)
    return llvm::createStringError("building the generated program failed");
  outcome.program = buildDir + "/program";
  os << "built " << outcome.program << "\n";
  return outcome;
}

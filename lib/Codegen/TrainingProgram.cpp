//===- TrainingProgram.cpp - What the training emitters share -------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "TrainingProgram.h"

#include "EmitterCommon.h"

#include "weft/Codegen/PipelineProgram.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <tuple>

using namespace mlir;
using namespace weft;
using namespace weft::codegen;

static TensorSharding localShardingOf(DictionaryAttr attrs, Type type) {
  auto attr =
      attrs ? attrs.getAs<ShardingAttr>(WeftDialect::getLocalShardingAttrName())
            : ShardingAttr();
  return attr ? fromAttr(attr)
              : TensorSharding::replicated(
                    cast<RankedTensorType>(type).getRank());
}

/// The parameters an optimizer step updates, added to `order` and `held` (in
/// the step's layout); a parameter already there (a pipeline's tied one)
/// must be held in the same layout.
static LogicalResult addHeldParameters(func::FuncOp optimizer,
                                       std::vector<std::string> &order,
                                       llvm::StringMap<HeldParameter> &held) {
  for (unsigned i = 0; i < optimizer.getNumArguments(); ++i) {
    OptimizerSlot slot = optimizerArgumentSlot(optimizer, i);
    if (slot.role != "param")
      continue;
    TensorSharding layout = localShardingOf(optimizer.getArgAttrDict(i),
                                            optimizer.getArgumentTypes()[i]);
    if (auto found = held.find(slot.parameter); found != held.end()) {
      if (found->second.held.dims != layout.dims)
        return optimizer.emitError("parameter '")
               << slot.parameter << "' is held as " << layout.str()
               << " here and as " << found->second.held.str()
               << " by another pipeline rank's optimizer step";
      continue;
    }
    HeldParameter &p = held[slot.parameter];
    p.index = int(order.size());
    p.held = layout;
    order.push_back(slot.parameter);
  }
  return success();
}

FailureOr<TrainingFunctions>
codegen::readTrainingFunctions(ModuleOp module, StringRef externalDir) {
  TrainingFunctions f;
  // The optimizer step, the training step, and the step's gradient
  // reduction (if any).
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr(WeftDialect::getOptimizerAttrName()))
      f.optimizer = func;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func->hasAttr(WeftDialect::getEvaluationStepAttrName()))
      f.evaluate = func;
    else if (!f.step && func != f.optimizer && !func.isExternal())
      f.step = func;
  }
  if (!f.optimizer || !f.step)
    return module.emitError("weft compile --train needs a training step and "
                            "its optimizer step (-weft-differentiate, "
                            "-weft-build-optimizer)");
  std::string why;
  FailureOr<GradientReduction> reduction = readGradientReduction(f.step, why);
  if (failed(reduction))
    return f.step.emitError(why);
  f.reduce = reduction->function;
  f.partial = reduction->partial;
  if (f.reduce == f.step)
    return f.step.emitError("the step names itself as its gradient reduction");
  if (f.evaluate && f.evaluate.getArgumentTypes() != f.step.getArgumentTypes())
    return f.evaluate.emitError("the evaluation step takes the training "
                                "step's arguments");
  for (func::FuncOp func : {f.step, f.reduce, f.optimizer, f.evaluate})
    if (func && (failed(checkProgramFunction(func)) ||
                 failed(checkWeights(func, externalDir))))
      return failure();
  // The trained parameters, in the optimizer step's order, and where the
  // step returns each one's gradient.
  if (failed(addHeldParameters(f.optimizer, f.order, f.held)))
    return failure();
  f.gradientOf.assign(f.order.size(), -1);
  for (unsigned r = 0; r < f.step.getNumResults(); ++r)
    if (auto name = f.step.getResultAttrOfType<StringAttr>(
            r, WeftDialect::getGradientOfAttrName()))
      if (auto it = f.held.find(name.getValue()); it != f.held.end())
        f.gradientOf[size_t(it->second.index)] = int(r);
  for (auto [k, name] : llvm::enumerate(f.order))
    if (f.gradientOf[k] < 0)
      return f.optimizer.emitError("the optimizer step updates '")
             << name << "', whose gradient the training step does not return";
  if (f.step.getNumArguments() < 2)
    return f.step.emitError("a training step takes the token ids and the "
                            "labels");
  return f;
}

FailureOr<SmallVector<HeldRead>>
codegen::findHeldReads(Block &body, llvm::StringMap<HeldParameter> &held,
                       StringRef weightsDir, StringRef externalDir,
                       int &weightCounter) {
  SmallVector<HeldRead> reads;
  for (Operation &op : body) {
    auto param = dyn_cast<ParameterOp>(op);
    auto found = param ? held.find(param.getName()) : held.end();
    if (found == held.end())
      continue;
    HeldParameter &heldParam = found->second;
    // Follow the all_slices that are the only user of what they cut, until
    // the block is the one the rank holds.
    Value value = param.getResult();
    TensorSharding layout =
        TensorSharding::replicated(param.getType().getRank());
    SmallVector<Operation *> chain{param};
    while (layout.dims != heldParam.held.dims && value.hasOneUse()) {
      auto slice = dyn_cast<AllSliceOp>(*value.getUsers().begin());
      if (!slice || slice->getBlock() != &body)
        break;
      // A zigzag cut is the block the runtime lays out for a split that cp
      // leads (a load-balanced ring's, ZeRO-3 storing over cp).
      if (slice.getZigzag() &&
          (!layout.dims[size_t(slice.getDim())].empty() ||
           slice.getAxes().empty() ||
           cast<StringAttr>(slice.getAxes()[0]).getValue() != "cp"))
        break;
      for (Attribute axis : slice.getAxes())
        layout.dims[size_t(slice.getDim())].push_back(
            cast<StringAttr>(axis).getValue().str());
      chain.push_back(slice);
      value = slice.getResult();
    }
    if (layout.dims != heldParam.held.dims) {
      TensorSharding wanted = heldParam.held;
      wanted.partial.clear();
      return param.emitError("weft compile --train: the step reads parameter '")
             << param.getName() << "' as " << layout.str()
             << ", but each rank holds it as " << wanted.str()
             << " (the optimizer step's layout); the program would have to "
                "gather it";
    }
    if (heldParam.file.empty()) {
      FailureOr<std::string> file =
          writeWeight(param, weightsDir, externalDir, weightCounter);
      if (failed(file))
        return failure();
      heldParam.file = *file;
    }
    reads.push_back(HeldRead{chain, value, heldParam.index});
  }
  return reads;
}

LogicalResult
codegen::checkHeldRead(Operation *at, const std::vector<std::string> &order,
                       const llvm::StringMap<HeldParameter> &held) {
  for (const std::string &name : order)
    if (held.lookup(name).file.empty())
      return at->emitError("the training step never reads parameter '")
             << name << "'";
  return success();
}

FailureOr<PipelineTrainingFunctions> codegen::readPipelineTrainingFunctions(
    ModuleOp module, const PipelineInfo &info, StringRef externalDir) {
  PipelineTrainingFunctions f;
  f.info = info;
  llvm::Expected<rt::PipelineProgram> pipeline = pipelineProgram(module, info);
  if (!pipeline)
    return module.emitError(llvm::toString(pipeline.takeError()));
  f.pipeline = std::move(*pipeline);
  if (!f.pipeline.training())
    return module.emitError("weft compile --train: the pipeline's stages "
                            "return no gradients (-weft-differentiate)");
  for (const PipelineStageInfo &from : info.virtualStages) {
    PipelineTrainingFunctions::Stage &stage = f.stages.emplace_back();
    stage.forward = from.func;
    stage.backward = from.backward;
    stage.weight = from.weight;
    stage.evaluation = from.evaluation;
    for (auto [piece, reduce] :
         {std::make_pair(from.backward, &stage.backwardReduce),
          std::make_pair(from.weight, &stage.weightReduce)}) {
      if (!piece)
        continue;
      std::string why;
      FailureOr<GradientReduction> reduction =
          readGradientReduction(piece, why);
      if (failed(reduction))
        return piece.emitError(why);
      *reduce = reduction->function;
    }
    for (func::FuncOp func :
         {stage.forward, stage.backward, stage.weight, stage.backwardReduce,
          stage.weightReduce, stage.evaluation})
      if (func && (failed(checkProgramFunction(func)) ||
                   failed(checkWeights(func, externalDir))))
        return failure();
  }
  // The evaluation: every stage's, or none.
  f.evaluation = evaluationPipeline(info);
  for (PipelineStageInfo stage : info.virtualStages)
    if (stage.evaluation && !f.evaluation)
      return stage.evaluation.emitError(
          "the pipeline's evaluation has this stage's function, but not "
          "every stage's or no evaluation steps; run "
          "-weft-extract-evaluation on the whole training step");
  // Each pipeline rank's optimizer step.
  f.optimizers.resize(size_t(info.stages));
  for (auto func : module.getOps<func::FuncOp>()) {
    auto rank = func->getAttrOfType<IntegerAttr>(
        WeftDialect::getPipelineRankAttrName());
    if (!rank)
      continue;
    if (rank.getInt() < 0 || rank.getInt() >= info.stages ||
        f.optimizers[size_t(rank.getInt())])
      return func.emitError("pipeline rank ")
             << rank.getInt()
             << " has several optimizer steps, or the pipeline has no such "
                "rank";
    f.optimizers[size_t(rank.getInt())] = func;
  }
  for (auto [s, optimizer] : llvm::enumerate(f.optimizers)) {
    if (!optimizer)
      return module.emitError("weft compile --train: pipeline rank ")
             << s
             << " has no optimizer step (-weft-build-optimizer="
                "rank-local=true)";
    if (failed(checkProgramFunction(optimizer)) ||
        failed(checkWeights(optimizer, externalDir)) ||
        failed(addHeldParameters(optimizer, f.order, f.held)))
      return failure();
  }
  for (const std::string &name : f.order) {
    auto found = llvm::find(f.pipeline.gradientNames, name);
    if (found == f.pipeline.gradientNames.end())
      return module.emitError("an optimizer step updates '")
             << name << "', whose gradient no pipeline stage returns";
    f.gradientOf.push_back(int(found - f.pipeline.gradientNames.begin()));
  }
  return f;
}

std::string codegen::stageFunctionName(size_t k, StringRef piece) {
  return "stage" + std::to_string(k) + (piece.empty() ? "" : "_") + piece.str();
}

std::string codegen::pipelineOptimizerName(size_t s) {
  return "optimizer_pp" + std::to_string(s);
}

std::vector<PipelineFunction>
codegen::pipelineFunctions(const PipelineTrainingFunctions &f) {
  std::vector<PipelineFunction> all;
  for (size_t k = 0; k < f.stages.size(); ++k) {
    const PipelineTrainingFunctions::Stage &stage = f.stages[k];
    for (auto [func, piece, held] :
         {std::make_tuple(stage.forward, "", true),
          std::make_tuple(stage.backward, "backward", true),
          std::make_tuple(stage.weight, "weight", true),
          std::make_tuple(stage.backwardReduce, "backward_reduce", false),
          std::make_tuple(stage.weightReduce, "weight_reduce", false),
          std::make_tuple(stage.evaluation, "evaluation", true)})
      if (func)
        all.push_back({func, stageFunctionName(k, piece), held});
  }
  for (size_t s = 0; s < f.optimizers.size(); ++s)
    all.push_back({f.optimizers[s], pipelineOptimizerName(s), false});
  return all;
}

std::string codegen::pipelineReduceName(const PipelineTrainingFunctions &f,
                                        size_t k, bool weight) {
  func::FuncOp reduce =
      weight ? f.stages[k].weightReduce : f.stages[k].backwardReduce;
  return reduce ? stageFunctionName(k, weight ? "weight_reduce"
                                              : "backward_reduce")
                : std::string();
}

/// A float as C++ that reads back the same double.
static std::string number(double value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::format("%.17g", value);
  return text;
}

/// The optimizer step's argument or result slots:
/// "{OptimizerSlot{"lr", -1}, OptimizerSlot{"param", 0}, ...}".
static std::string slotsLiteral(func::FuncOp optimizer,
                                const llvm::StringMap<HeldParameter> &held,
                                bool results) {
  std::string text = "{";
  unsigned n =
      results ? optimizer.getNumResults() : optimizer.getNumArguments();
  for (unsigned i = 0; i < n; ++i) {
    OptimizerSlot slot = results ? optimizerResultSlot(optimizer, i)
                                 : optimizerArgumentSlot(optimizer, i);
    auto it = held.find(slot.parameter);
    text += std::string(i ? ", " : "") + "OptimizerSlot{" + quoted(slot.role) +
            ", " + std::to_string(it == held.end() ? -1 : it->second.index) +
            "}";
  }
  return text + "}";
}

/// "TrainingOptimizer{function, arguments, results, types, layouts}".
static std::string optimizerLiteral(func::FuncOp optimizer,
                                    const llvm::StringMap<HeldParameter> &held,
                                    const std::string &function) {
  return "TrainingOptimizer{" + function + ", " +
         slotsLiteral(optimizer, held, false) + ", " +
         slotsLiteral(optimizer, held, true) + ",\n      " +
         inputTypesLiteral(optimizer) + ",\n      " +
         layoutsLiteral(optimizer, false) + "}";
}

/// The LrDecay enumerator's C++ name, as the program prints it.
static const char *lrDecayName(rt::LrDecay decay) {
  switch (decay) {
  case rt::LrDecay::Linear:
    return "LrDecay::Linear";
  case rt::LrDecay::Constant:
    return "LrDecay::Constant";
  case rt::LrDecay::InverseSquareRoot:
    return "LrDecay::InverseSquareRoot";
  case rt::LrDecay::Wsd:
    return "LrDecay::Wsd";
  case rt::LrDecay::Exponential:
    return "LrDecay::Exponential";
  case rt::LrDecay::MinusSqrt:
    return "LrDecay::MinusSqrt";
  case rt::LrDecay::Cosine:
    break;
  }
  return "LrDecay::Cosine";
}

/// What both training literals end with: the held parameters (their whole
/// shapes from the module's weft.parameter ops, `gradientOf[k]` where the
/// k-th one's gradient is), the optimizer's constants, one micro-batch's
/// [batch, seq] from the token ids' block, how each model input is filled
/// (the module's weft.feeds) with its length, from `inputs` (each model
/// input's block and layout on the first function that reads it; null
/// where none does), the loss scale (`scaled`: the step's last input), and
/// the run's defaults (`gradAccum` micro-batches a step).
static void
runLiteral(llvm::raw_ostream &out, ModuleOp module,
           const std::vector<std::string> &order,
           const llvm::StringMap<HeldParameter> &held,
           const std::vector<int> &gradientOf,
           ArrayRef<std::pair<RankedTensorType, TensorSharding>> inputs,
           bool scaled, const TrainingProgramDefaults &d, int64_t gradAccum) {
  llvm::StringMap<Type> types;
  module.walk([&](ParameterOp param) {
    types.try_emplace(param.getName(), param.getType());
  });
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string &name = order[k];
    const HeldParameter &p = held.find(name)->second;
    out << "  p.parameters.push_back(TrainedParameter{" << quoted(name) << ", "
        << quoted(p.file) << ", "
        << ints(cast<RankedTensorType>(types.lookup(name)).getShape()) << ", "
        << layoutLiteral(p.held) << ", " << gradientOf[k] << "});\n";
  }
  // The token windows' [batch, seq] and each input's length: a rank's block
  // times the mesh axes it is split over.
  std::optional<MeshInfo> mesh = getMeshInfo(module);
  auto whole = [&](unsigned input, unsigned dim) -> int64_t {
    if (input >= inputs.size() || !inputs[input].first)
      return 0;
    auto [block, layout] = inputs[input];
    int64_t size = block.getDimSize(dim);
    if (mesh && dim < layout.dims.size())
      size *= mesh->product(layout.dims[dim]);
    return size;
  };
  const unsigned tokens = unsigned(tokensInput(module));
  out << "  p.constants = OptimizerConstants{" << number(d.weightDecay) << ", "
      << number(d.beta1) << ", " << number(d.beta2) << "};\n"
      << "  p.batch = " << whole(tokens, 0) << ";\n"
      << "  p.seq = " << whole(tokens, 1) << ";\n"
      << "  p.feeds = {";
  for (auto [i, feed] : llvm::enumerate(trainingFeeds(module))) {
    std::string kind = feed;
    kind[0] = char(std::toupper(kind[0]));
    out << (i ? ", " : "") << "{Feed::" << kind << ", " << whole(unsigned(i), 1)
        << "}";
  }
  out << "};\n";
  if (const rt::Objective &o = d.objective; o.masked) {
    out << "  p.objective = Objective{true, " << o.maskToken << ", " << o.vocab
        << ", " << number(o.probability) << ", " << o.ignore << ", " << o.seed
        << "u";
    if (!o.special.empty()) {
      out << ", {";
      for (size_t i = 0; i < o.special.size(); ++i)
        out << (i ? ", " : "") << o.special[i];
      out << "}";
    }
    out << "};\n";
  }
  if (const rt::Objective &o = d.objective; o.eod >= 0)
    out << "  p.objective.eod = " << o.eod << ";\n"
        << "  p.objective.resetPositions = "
        << (o.resetPositions ? "true" : "false") << ";\n"
        << "  p.objective.eodMaskLoss = " << (o.eodMaskLoss ? "true" : "false")
        << ";\n  p.objective.ignore = " << o.ignore << ";\n";
  out << "  p.classes = " << d.classes << ";\n"
      << "  p.embeddingRows = " << d.embeddingRows << ";\n";
  if (scaled) {
    rt::LossScale rule = d.lossScale.value_or(rt::LossScale());
    out << "  p.lossScale = LossScale{" << number(rule.scale) << ", "
        << number(rule.growth) << ", " << number(rule.backoff) << ", "
        << number(rule.minimum) << ", " << rule.window << ", 0};\n";
  }
  out << "  // The run it was compiled for (the command line may change "
         "these).\n"
      << "  p.steps = " << d.steps << ";\n"
      << "  p.gradAccum = " << gradAccum << ";\n"
      << "  p.schedule = LrSchedule{" << number(d.schedule.peak) << ", "
      << number(d.schedule.floor) << ", " << d.schedule.warmup << ", "
      << d.steps << ", " << d.schedule.decaySteps << ", "
      << lrDecayName(d.schedule.style) << ", " << d.schedule.wsdSteps << ", "
      << lrDecayName(d.schedule.wsdStyle) << "};\n"
      << "  return p;\n}\n";
}

std::string codegen::trainingProgramLiteral(
    ModuleOp module, const TrainingFunctions &f,
    const TrainingProgramDefaults &d,
    llvm::function_ref<std::string(StringRef)> function) {
  // (Op handles are values; their methods are not const.)
  func::FuncOp step = f.step, reduce = f.reduce, optimizer = f.optimizer;
  std::string text;
  llvm::raw_string_ostream out(text);
  out << "TrainingProgram makeProgram() {\n"
      << "  TrainingProgram p;\n"
      << "  p.mesh = " << meshLiteral(module, step) << ";\n"
      << "  p.step = " << function("trainingStep") << ";\n"
      << "  p.stepInputs = " << layoutsLiteral(step, false) << ";\n"
      << "  p.stepInputTypes = " << inputTypesLiteral(step) << ";\n";
  if (f.evaluate)
    out << "  p.evaluate = " << function("evaluationStep") << ";\n";
  if (reduce) {
    out << "  p.reduce = " << function("reduceGradients")
        << ";\n  p.partial = {";
    for (auto [i, o] : llvm::enumerate(f.partial))
      out << (i ? ", " : "") << o;
    out << "};\n";
  }
  out << "  p.everyMicroBatch = "
      << (step->hasAttr(WeftDialect::getReduceEveryMicroBatchAttrName())
              ? "true"
              : "false")
      << ";\n"
      << "  p.optimizer = "
      << optimizerLiteral(optimizer, f.held, function("optimizerStep"))
      << ";\n";
  const unsigned numArgs = step.getNumArguments();
  // Loss scaling: the step's last argument is the scale.
  const bool scaled =
      numArgs &&
      step.getArgAttr(numArgs - 1, WeftDialect::getLossScaleAttrName());
  // The step's arguments: the model's inputs, the labels, the scale.
  std::vector<std::pair<RankedTensorType, TensorSharding>> inputs;
  for (unsigned a = 0; a + 1 + scaled < numArgs; ++a)
    inputs.emplace_back(
        dyn_cast<RankedTensorType>(step.getArgumentTypes()[a]),
        localShardingOf(step.getArgAttrDict(a), step.getArgumentTypes()[a]));
  runLiteral(out, module, f.order, f.held, f.gradientOf, inputs, scaled, d,
             d.gradAccum);
  return text;
}

std::string codegen::pipelineTrainingProgramLiteral(
    ModuleOp module, const PipelineTrainingFunctions &f,
    const TrainingProgramDefaults &d,
    llvm::function_ref<std::string(StringRef)> function) {
  std::string text;
  llvm::raw_string_ostream out(text);
  auto named = [&](const std::string &name) {
    return name.empty() ? std::string("RankFunction()") : function(name);
  };
  out << pipelineLiteral(
             module, f.info,
             [](size_t) { return std::string("RankFunction()"); },
             "makePipeline", &f.pipeline,
             [&](size_t k, bool weight) {
               return named(pipelineReduceName(f, k, weight));
             })
      << "\n";
  if (f.evaluation)
    out << "// The evaluation: each stage's forward in eval mode, on the "
           "forward steps of\n// the schedule (-weft-extract-evaluation).\n"
        << pipelineLiteral(
               module, *f.evaluation,
               [](size_t) { return std::string("RankFunction()"); },
               "makeEvaluationPipeline")
        << "\n";
  func::FuncOp first = f.stages.front().forward;
  out << "TrainingProgram makeProgram() {\n"
      << "  TrainingProgram p;\n"
      << "  p.mesh = " << meshLiteral(module, first) << ";\n"
      << "  p.pipeline = makePipeline();\n";
  if (f.evaluation)
    out << "  p.evaluationPipeline = makeEvaluationPipeline();\n";
  out << "  // Each virtual stage's forward, backward and weight-gradient "
         "steps"
      << (f.evaluation ? ", and its evaluation" : "") << ".\n";
  for (size_t k = 0; k < f.stages.size(); ++k) {
    const PipelineTrainingFunctions::Stage &stage = f.stages[k];
    // (A structured binding cannot be captured in C++17.)
    auto piece = [&, k](func::FuncOp func, StringRef name) {
      return func ? function(stageFunctionName(k, name))
                  : std::string("TrainingStepFunction()");
    };
    out << "  p.stageSteps.push_back(PipelineStageSteps{"
        << piece(stage.forward, "") << ", " << piece(stage.backward, "backward")
        << ", " << piece(stage.weight, "weight");
    if (stage.evaluation)
      out << ", " << piece(stage.evaluation, "evaluation");
    out << "});\n";
  }
  out << "  // Each pipeline rank's optimizer step, on its stages' "
         "parameters.\n";
  for (auto [s, optimizer] : llvm::enumerate(f.optimizers))
    out << "  p.pipelineOptimizers.push_back("
        << optimizerLiteral(optimizer, f.held,
                            function(pipelineOptimizerName(s)))
        << ");\n";
  // Each model input on the first stage that reads it; the loss scale: an
  // argument a stage's step marks (the model's last input).
  std::vector<std::pair<RankedTensorType, TensorSharding>> inputs;
  bool scaled = false;
  for (const PipelineTrainingFunctions::Stage &stage : f.stages)
    for (func::FuncOp func : {stage.forward, stage.backward, stage.weight}) {
      if (!func)
        continue;
      for (unsigned a = 0; a < func.getNumArguments(); ++a) {
        scaled |= bool(func.getArgAttr(a, WeftDialect::getLossScaleAttrName()));
        auto input = func.getArgAttrOfType<IntegerAttr>(
            a, WeftDialect::getModelInputAttrName());
        if (func != stage.forward || !input || input.getInt() < 0)
          continue;
        size_t index = size_t(input.getInt());
        if (inputs.size() <= index)
          inputs.resize(index + 1);
        if (!inputs[index].first)
          inputs[index] = {cast<RankedTensorType>(func.getArgumentTypes()[a]),
                           localShardingOf(func.getArgAttrDict(a),
                                           func.getArgumentTypes()[a])};
      }
    }
  runLiteral(out, module, f.order, f.held, f.gradientOf, inputs, scaled, d,
             std::max(1, f.info.microBatches));
  return text;
}

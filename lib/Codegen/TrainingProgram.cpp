//===- TrainingProgram.cpp - What the training emitters share -------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "TrainingProgram.h"

#include "EmitterCommon.h"

#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

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

FailureOr<TrainingFunctions>
codegen::readTrainingFunctions(ModuleOp module, StringRef externalDir) {
  TrainingFunctions f;
  // The optimizer step, the training step, and the step's gradient
  // reduction (if any).
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr(WeftDialect::getOptimizerAttrName()))
      f.optimizer = func;
  for (auto func : module.getOps<func::FuncOp>())
    if (!f.step && func != f.optimizer && !func.isExternal())
      f.step = func;
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
  for (func::FuncOp func : {f.step, f.reduce, f.optimizer})
    if (func && (failed(checkProgramFunction(func)) ||
                 failed(checkWeights(func, externalDir))))
      return failure();
  // The trained parameters, in the optimizer step's order, and where the
  // step returns each one's gradient.
  for (unsigned i = 0; i < f.optimizer.getNumArguments(); ++i) {
    OptimizerSlot slot = optimizerArgumentSlot(f.optimizer, i);
    if (slot.role != "param" || f.held.count(slot.parameter))
      continue;
    HeldParameter &p = f.held[slot.parameter];
    p.index = int(f.order.size());
    p.held = localShardingOf(f.optimizer.getArgAttrDict(i),
                             f.optimizer.getArgumentTypes()[i]);
    f.order.push_back(slot.parameter);
  }
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
      if (!slice || slice.getZigzag() || slice->getBlock() != &body)
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

LogicalResult codegen::checkHeldRead(const TrainingFunctions &f) {
  for (const std::string &name : f.order)
    if (f.held.lookup(name).file.empty())
      return func::FuncOp(f.step).emitError(
                 "the training step never reads parameter '")
             << name << "'";
  return success();
}

std::string codegen::trainingProgramLiteral(
    ModuleOp module, const TrainingFunctions &f,
    const TrainingProgramDefaults &d,
    llvm::function_ref<std::string(StringRef)> function) {
  // (Op handles are values; their methods are not const.)
  func::FuncOp step = f.step, reduce = f.reduce, optimizer = f.optimizer;
  auto slots = [&](bool results) {
    std::string text = "{";
    unsigned n =
        results ? optimizer.getNumResults() : optimizer.getNumArguments();
    for (unsigned i = 0; i < n; ++i) {
      OptimizerSlot slot = results ? optimizerResultSlot(optimizer, i)
                                   : optimizerArgumentSlot(optimizer, i);
      auto it = f.held.find(slot.parameter);
      text += std::string(i ? ", " : "") + "OptimizerSlot{" +
              quoted(slot.role) + ", " +
              std::to_string(it == f.held.end() ? -1 : it->second.index) + "}";
    }
    return text + "}";
  };
  auto number = [](double value) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::format("%.17g", value);
    return text;
  };
  std::string text;
  llvm::raw_string_ostream out(text);
  out << "TrainingProgram makeProgram() {\n"
      << "  TrainingProgram p;\n"
      << "  p.mesh = " << meshLiteral(module, step) << ";\n"
      << "  p.step = " << function("trainingStep") << ";\n"
      << "  p.stepInputs = " << layoutsLiteral(step, false) << ";\n"
      << "  p.stepInputTypes = " << inputTypesLiteral(step) << ";\n";
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
      << "  p.optimizer = " << function("optimizerStep") << ";\n"
      << "  p.optimizerArguments = " << slots(false) << ";\n"
      << "  p.optimizerResults = " << slots(true) << ";\n"
      << "  p.optimizerArgumentTypes = " << inputTypesLiteral(optimizer)
      << ";\n"
      << "  p.optimizerArgumentLayouts = " << layoutsLiteral(optimizer, false)
      << ";\n";
  for (size_t k = 0; k < f.order.size(); ++k) {
    const std::string &name = f.order[k];
    const HeldParameter &p = f.held.find(name)->second;
    Type type;
    step.walk([&](ParameterOp param) {
      if (param.getName() == name)
        type = param.getType();
    });
    out << "  p.parameters.push_back(TrainedParameter{" << quoted(name) << ", "
        << quoted(p.file) << ", "
        << ints(cast<RankedTensorType>(type).getShape()) << ", "
        << layoutLiteral(p.held) << ", " << f.gradientOf[k] << "});\n";
  }
  // The token windows' [batch, seq]: the step's first argument (a rank's
  // block) times the mesh axes it is split over.
  auto ids = cast<RankedTensorType>(step.getArgumentTypes().front());
  TensorSharding idsLayout =
      localShardingOf(step.getArgAttrDict(0), step.getArgumentTypes()[0]);
  std::optional<MeshInfo> mesh = getMeshInfo(module);
  auto whole = [&](unsigned dim) {
    int64_t size = ids.getDimSize(dim);
    if (mesh && dim < idsLayout.dims.size())
      size *= mesh->product(idsLayout.dims[dim]);
    return size;
  };
  // Loss scaling: the step's last argument is the scale.
  const unsigned numArgs = step.getNumArguments();
  const bool scaled =
      numArgs &&
      step.getArgAttr(numArgs - 1, WeftDialect::getLossScaleAttrName());
  out << "  p.constants = OptimizerConstants{" << number(d.weightDecay) << ", "
      << number(d.beta1) << ", " << number(d.beta2) << "};\n"
      << "  p.batch = " << whole(0) << ";\n"
      << "  p.seq = " << whole(1) << ";\n"
      << "  p.masks = " << numArgs - 2 - (scaled ? 1 : 0) << ";\n";
  if (scaled) {
    rt::LossScale rule = d.lossScale.value_or(rt::LossScale());
    out << "  p.lossScale = LossScale{" << number(rule.scale) << ", "
        << number(rule.growth) << ", " << number(rule.backoff) << ", "
        << number(rule.minimum) << ", " << rule.window << ", 0};\n";
  }
  out << "  // The run it was compiled for (the command line may change "
         "these).\n"
      << "  p.steps = " << d.steps << ";\n"
      << "  p.gradAccum = " << d.gradAccum << ";\n"
      << "  p.schedule = LrSchedule{" << number(d.lr) << ", " << number(d.minLr)
      << ", " << d.warmup << ", " << d.steps << "};\n"
      << "  return p;\n}\n";
  return text;
}

//===- WeftDialect.cpp - The weft dialect ---------------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Plan/Plan.h"
#include "weft/Planner/PipelineSchedule.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace weft;

#include "dialects/weft/WeftDialect.cpp.inc"
#include "dialects/weft/WeftEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/weft/WeftAttrs.cpp.inc"

void WeftDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/weft/WeftOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/weft/WeftAttrs.cpp.inc"
      >();
}

Operation *WeftDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                            Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

/// Checks a `weft.sharding` attribute attached to a value of `type`.
static LogicalResult verifyShardingAttachment(Operation *op, Attribute attr,
                                              Type type, const Twine &what) {
  auto sharding = dyn_cast<ShardingAttr>(attr);
  if (!sharding)
    return op->emitError() << "'" << WeftDialect::getShardingAttrName()
                           << "' on " << what
                           << " must be a #weft.sharding, got " << attr;
  return verifyShardingFor(sharding, type, op, [&] {
    return op->emitError() << "invalid sharding of " << what << ": ";
  });
}

/// `weft.local_sharding` on a partitioned function's argument or result: how
/// the per-rank value (its type is local) sits in the global tensor.
static LogicalResult verifyLocalSharding(Operation *op, Attribute attr,
                                         Type type, const Twine &what) {
  auto sharding = dyn_cast<ShardingAttr>(attr);
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!sharding || !tensor ||
      int64_t(sharding.getDims().size()) != tensor.getRank())
    return op->emitError() << "weft.local_sharding of " << what
                           << " must be a #weft.sharding with one entry per "
                              "dimension";
  return success();
}

/// The schedule in a module's `weft.pipeline` (-weft-schedule-pipeline):
/// `schedule`, `micro_batches` and `steps` (one list of step names per
/// pipeline rank), all or none; and -weft-extract-evaluation's
/// `evaluation_steps` (forward steps only).
static LogicalResult verifyPipelineSchedule(Operation *op,
                                            DictionaryAttr pipeline) {
  auto name = pipeline.getAs<StringAttr>("schedule");
  auto micro = pipeline.getAs<IntegerAttr>("micro_batches");
  auto steps = pipeline.getAs<ArrayAttr>("steps");
  if (!name && !micro && !steps && !pipeline.get("schedule") &&
      !pipeline.get("micro_batches") && !pipeline.get("steps") &&
      !pipeline.get("evaluation_steps"))
    return success();
  const int64_t p = pipeline.getAs<IntegerAttr>("stages").getInt();
  const int64_t v = pipeline.getAs<IntegerAttr>("chunks").getInt();
  if (!name || !parseScheduleName(name.getValue()) || !micro ||
      micro.getInt() < 1 || !steps || int64_t(steps.size()) != p)
    return op->emitError() << "'" << WeftDialect::getPipelineAttrName()
                           << "' with a schedule needs schedule (a schedule's "
                              "name), micro_batches (i64 >= 1) and steps (one "
                              "list per stage, "
                           << p << ")";
  // -weft-extract-evaluation's: the forward steps an evaluation runs.
  Attribute evaluation = pipeline.get("evaluation_steps");
  auto evaluationSteps = dyn_cast_or_null<ArrayAttr>(evaluation);
  if (evaluation && (!evaluationSteps || int64_t(evaluationSteps.size()) != p))
    return op->emitError() << "'" << WeftDialect::getPipelineAttrName()
                           << "' has evaluation_steps, which must be one list "
                              "of step names per stage ("
                           << p << ")";
  for (ArrayAttr lists : {steps, evaluationSteps}) {
    if (!lists)
      continue;
    const bool forwardOnly = lists == evaluationSteps;
    for (auto [rank, list] : llvm::enumerate(lists)) {
      auto names = dyn_cast<ArrayAttr>(list);
      if (!names)
        return op->emitError() << "the steps of pipeline rank " << rank
                               << " are not a list of step names";
      for (Attribute entry : names) {
        auto text = dyn_cast<StringAttr>(entry);
        std::optional<planner::PipelineStep> step =
            text ? planner::parseStepName(text.str()) : std::nullopt;
        bool transfer = step && (step->kind == planner::PipelineStep::Send ||
                                 step->kind == planner::PipelineStep::Recv);
        if (!step || step->chunk >= v || step->microBatch >= micro.getInt() ||
            (transfer && (step->peer >= p || step->peer == int64_t(rank))))
          return op->emitError()
                 << "pipeline rank " << rank << " has the step " << entry
                 << ", which is not F/B/W<mb>[.chunk] or "
                    ">a|<a|>g|<g<peer>:<mb>[.chunk] with micro-batch < "
                 << micro.getInt() << ", chunk < " << v
                 << " and another pipeline rank < " << p << " as peer";
        if (forwardOnly && !planner::isForwardStep(*step))
          return op->emitError()
                 << "pipeline rank " << rank << "'s evaluation step " << entry
                 << " is not a forward or a send or receive of activations";
      }
    }
  }
  return success();
}

LogicalResult WeftDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == getPipelineAttrName() ||
      attr.getName() == getPipelineStageAttrName()) {
    bool onModule = attr.getName() == getPipelineAttrName();
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    SmallVector<StringRef, 3> keys =
        onModule ? SmallVector<StringRef, 3>{"stages", "chunks"}
                 : SmallVector<StringRef, 3>{"stage", "rank", "chunk"};
    bool good =
        dict && (onModule ? isa<ModuleOp>(op) : isa<FunctionOpInterface>(op));
    for (StringRef key : keys) {
      auto value = dict ? dict.getAs<IntegerAttr>(key) : IntegerAttr();
      good &= value && value.getInt() >= (onModule ? 1 : 0);
    }
    if (!good)
      return op->emitError()
             << "'" << attr.getName().getValue() << "' is "
             << (onModule ? "{stages, chunks} (i64 >= 1) on a module"
                          : "{stage, rank, chunk} (i64 >= 0) on a function");
    if (onModule) {
      if (Attribute codec = dict.get("codec")) {
        auto text = dyn_cast<StringAttr>(codec);
        std::optional<CollectiveCodec> parsed =
            text ? symbolizeCollectiveCodec(text.getValue()) : std::nullopt;
        if (!parsed || *parsed == CollectiveCodec::topk ||
            *parsed == CollectiveCodec::topk_noef)
          return op->emitError()
                 << "'" << attr.getName().getValue() << "' has codec " << codec
                 << ": a pipeline's sends take \"none\", \"bf16\", \"fp8\" "
                    "or \"int8\" (top-k compresses summed gradients only)";
      }
      return verifyPipelineSchedule(op, dict);
    }
    if (Attribute role = dict.get("role")) {
      auto text = dyn_cast<StringAttr>(role);
      if (!text ||
          !llvm::is_contained({"forward", "backward", "weight", "evaluation"},
                              text.getValue()))
        return op->emitError()
               << "'" << attr.getName().getValue() << "' has role " << role
               << ", not \"forward\", \"backward\", \"weight\" or "
                  "\"evaluation\"";
    }
    return success();
  }
  if (attr.getName() == getFeedsAttrName()) {
    auto feeds = dyn_cast<ArrayAttr>(attr.getValue());
    bool good = feeds && isa<ModuleOp>(op) && !feeds.empty();
    int tokens = 0;
    for (Attribute feed : good ? feeds.getValue() : ArrayRef<Attribute>()) {
      auto text = dyn_cast<StringAttr>(feed);
      good &= text && llvm::is_contained({"tokens", "source", "ones", "zeros",
                                          "positions", "labels", "documents"},
                                         text.getValue());
      tokens += text && text.getValue() == "tokens";
    }
    if (!good || tokens != 1)
      return op->emitError()
             << "'" << getFeedsAttrName()
             << "' is one fill per model input on a module: \"tokens\" "
                "for exactly one, \"source\", \"ones\", \"zeros\", "
                "\"positions\", \"labels\" or \"documents\" for the "
                "others";
    return success();
  }
  if (attr.getName() == getFixedBuffersAttrName()) {
    auto names = dyn_cast<ArrayAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !names || names.empty() ||
        !llvm::all_of(names, [](Attribute name) {
          auto text = dyn_cast<StringAttr>(name);
          return text && !text.getValue().empty();
        }))
      return op->emitError() << "'" << getFixedBuffersAttrName()
                             << "' is a non-empty list of initializer names "
                                "on a module";
    return success();
  }
  if (attr.getName() == getOptimizerAttrName()) {
    auto rule = dyn_cast<StringAttr>(attr.getValue());
    if (!rule || !isa<FunctionOpInterface>(op) ||
        (rule.getValue() != "adamw" && rule.getValue() != "sgd"))
      return op->emitError() << "'" << getOptimizerAttrName()
                             << "' is \"adamw\" or \"sgd\" on a function";
    return success();
  }
  if (attr.getName() == getPipelineRankAttrName()) {
    auto rank = dyn_cast<IntegerAttr>(attr.getValue());
    auto module = op->getParentOfType<ModuleOp>();
    auto pipeline =
        module ? module->getAttrOfType<DictionaryAttr>(getPipelineAttrName())
               : DictionaryAttr();
    auto stages =
        pipeline ? pipeline.getAs<IntegerAttr>("stages") : IntegerAttr();
    if (!rank || !isa<FunctionOpInterface>(op) ||
        !op->hasAttr(getOptimizerAttrName()) || !stages || rank.getInt() < 0 ||
        rank.getInt() >= stages.getInt())
      return op->emitError()
             << "'" << getPipelineRankAttrName()
             << "' is a pipeline rank (i64 >= 0, below the stages of the "
                "module's '"
             << getPipelineAttrName() << "') on an optimizer step";
    return success();
  }
  if (attr.getName() == getGradientReductionAttrName()) {
    auto ref = dyn_cast<FlatSymbolRefAttr>(attr.getValue());
    auto func = dyn_cast<FunctionOpInterface>(op);
    if (!ref || !func)
      return op->emitError() << "'" << getGradientReductionAttrName()
                             << "' names a function (@symbol) on a function";
    auto module = op->getParentOfType<ModuleOp>();
    auto target = module
                      ? dyn_cast_or_null<FunctionOpInterface>(
                            SymbolTable::lookupSymbolIn(module, ref.getAttr()))
                      : FunctionOpInterface();
    if (!target)
      return op->emitError()
             << "'" << getGradientReductionAttrName() << "' names " << ref
             << ", which is not a function of the module";
    return success();
  }
  if (attr.getName() == getEvaluationStepAttrName()) {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << getEvaluationStepAttrName()
                             << "' is a unit attribute on a function";
    return success();
  }
  if (attr.getName() == getReduceEveryMicroBatchAttrName()) {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<FunctionOpInterface>(op) ||
        !op->hasAttr(getGradientReductionAttrName()))
      return op->emitError() << "'" << getReduceEveryMicroBatchAttrName()
                             << "' is a unit attribute on a function that has "
                                "a '"
                             << getGradientReductionAttrName() << "'";
    return success();
  }
  if (attr.getName() == getMicroBatchBlockAttrName()) {
    auto block = dyn_cast<IntegerAttr>(attr.getValue());
    if (!block || block.getInt() < 1 || !isa<FunctionOpInterface>(op) ||
        !op->hasAttr(getReduceEveryMicroBatchAttrName()))
      return op->emitError() << "'" << getMicroBatchBlockAttrName()
                             << "' is a positive integer on a function that "
                                "has '"
                             << getReduceEveryMicroBatchAttrName() << "'";
    return success();
  }
  if (attr.getName() == WeftDialect::getLoadBalancedAttrName()) {
    if (!isa<FunctionOpInterface>(op) || !isa<ArrayAttr>(attr.getValue()))
      return op->emitError() << "'weft.load_balanced' is a list of mesh axes "
                                "on a function";
    return success();
  }
  if (attr.getName() == WeftDialect::getStoredOverAttrName()) {
    auto axes = dyn_cast<ArrayAttr>(attr.getValue());
    auto type = op->getNumResults() == 1
                    ? dyn_cast<RankedTensorType>(op->getResult(0).getType())
                    : RankedTensorType();
    if (!isa<ParameterOp>(op) || !axes || axes.empty() ||
        !llvm::all_of(axes, [](Attribute a) { return isa<StringAttr>(a); }))
      return op->emitError() << "'weft.stored_over' is a non-empty list of "
                                "mesh axes on a weft.parameter";
    if (!type || type.getRank() < 1)
      return op->emitError() << "'weft.stored_over' splits a weight's first "
                                "dimension; a scalar weight has none";
    return success();
  }
  if (attr.getName() == WeftDialect::getContextParallelAttrName()) {
    if (!isa<AttentionOp, AttentionGradOp>(op) ||
        !isa<ArrayAttr>(attr.getValue()))
      return op->emitError() << "'weft.context_parallel' is a list of mesh "
                                "axes on a weft.attention or "
                                "weft.attention_grad";
    return success();
  }
  if (attr.getName() == WeftDialect::getContextParallelGatherAttrName()) {
    if (!isa<AttentionOp, AttentionGradOp>(op) ||
        !isa<UnitAttr>(attr.getValue()) ||
        !op->hasAttr(WeftDialect::getContextParallelAttrName()))
      return op->emitError() << "'weft.context_parallel_gather' is a unit "
                                "attribute on a weft.attention or "
                                "weft.attention_grad that has "
                                "'weft.context_parallel'";
    return success();
  }
  if (attr.getName() == getRepeatedKvHeadsAttrName()) {
    if (!isa<BroadcastToOp>(op) || !isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' is a unit attribute on a weft.broadcast_to";
    return success();
  }
  if (attr.getName() == getAttentionCoreAttrName() ||
      attr.getName() == getDecomposedAttrName()) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError()
             << "'" << attr.getName().getValue() << "' is a unit attribute";
    return success();
  }
  if (attr.getName() == getBufferOffsetsAttrName()) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!offsets || offsets.size() != int64_t(op->getNumResults()))
      return op->emitError() << "'" << getBufferOffsetsAttrName()
                             << "' is an array of i64 with one offset per "
                                "result";
    for (int64_t offset : offsets.asArrayRef())
      if (offset < -1)
        return op->emitError() << "'" << getBufferOffsetsAttrName()
                               << "' holds offsets >= 0, or -1 for no buffer";
    return success();
  }
  if (attr.getName() == getArenaBytesAttrName() ||
      attr.getName() == getBuffersAttrName() ||
      attr.getName() == getUnsharedBytesAttrName()) {
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<FunctionOpInterface>(op) || !value || value.getInt() < 0)
      return op->emitError() << "'" << attr.getName().getValue()
                             << "' is a count (i64 >= 0) on a function";
    return success();
  }
  if (attr.getName() == getInputShardingsAttrName()) {
    auto layer = dyn_cast<LayerOp>(op);
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    if (!layer || !list || list.size() != layer.getInputs().size())
      return op->emitError() << "'" << getInputShardingsAttrName()
                             << "' is an array with one #weft.sharding per "
                                "input of a weft.layer";
    for (auto [index, entry] : llvm::enumerate(list))
      if (!isa<UnitAttr>(entry) &&
          failed(verifyShardingAttachment(op, entry,
                                          layer.getInputs()[index].getType(),
                                          "layer input #" + Twine(index))))
        return failure();
    return success();
  }
  if (attr.getName() != getShardingAttrName())
    return op->emitError() << "unknown weft attribute '" << attr.getName().getValue()
                           << "' (the dialect defines '"
                           << getShardingAttrName() << "')";
  auto list = dyn_cast<ArrayAttr>(attr.getValue());
  if (!list || list.size() != op->getNumResults())
    return op->emitError() << "'" << getShardingAttrName()
                           << "' on an op must be an array with one "
                              "#weft.sharding per result ("
                           << op->getNumResults() << ")";
  // `unit`: a result whose sharding is not decided yet (another result of
  // the op is annotated).
  for (auto [index, entry] : llvm::enumerate(list))
    if (!isa<UnitAttr>(entry) && failed(verifyShardingAttachment(
                                     op, entry, op->getResult(index).getType(),
                                     "result #" + Twine(index))))
      return failure();
  return success();
}

/// A pipeline stage's argument or result attribute: an index (i64 >= 0).
static LogicalResult verifyStageIndex(Operation *op, NamedAttribute attr) {
  auto index = dyn_cast<IntegerAttr>(attr.getValue());
  if (!index || index.getInt() < 0 || !isa<FunctionOpInterface>(op))
    return op->emitError() << "'" << attr.getName().getValue()
                           << "' is an index (i64 >= 0) on a function's "
                              "argument or result";
  return success();
}

/// A `weft.optimizer_slot`: {role, parameter} for a parameter's tensors,
/// {role} for a step scalar; `result` says which side of the function.
static LogicalResult verifyOptimizerSlot(Operation *op, NamedAttribute attr,
                                         bool result) {
  auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
  auto role = dict ? dict.getAs<StringAttr>("role") : StringAttr();
  static const char *const perParameter[] = {"param", "grad", "exp_avg",
                                             "exp_avg_sq", "momentum_buffer"};
  static const char *const scalarArgs[] = {"grad_divisor", "decay_factor",
                                           "step_size", "bias_correction2_sqrt",
                                           "lr"};
  bool isParameter = role &&
                     llvm::is_contained(perParameter, role.getValue()) &&
                     !(result && role.getValue() == "grad");
  bool isScalar =
      role && (result ? role.getValue() == "grad_norm"
                      : llvm::is_contained(scalarArgs, role.getValue()));
  Attribute parameter = dict ? dict.get("parameter") : Attribute();
  auto name = dyn_cast_or_null<StringAttr>(parameter);
  if (!isa<FunctionOpInterface>(op) || (!isParameter && !isScalar) ||
      (isParameter && (!name || name.getValue().empty())) ||
      (isScalar && parameter))
    return op->emitError()
           << "'" << attr.getName().getValue() << "' is {role, parameter} on "
           << "a function's " << (result ? "result" : "argument")
           << ": role is one of param, " << (result ? "" : "grad, ")
           << "exp_avg, exp_avg_sq, momentum_buffer (with a parameter name) "
              "or "
           << (result ? "grad_norm"
                      : "grad_divisor, decay_factor, step_size, "
                        "bias_correction2_sqrt, lr")
           << " (without one)";
  return success();
}

LogicalResult WeftDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned regionIndex,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  if (attr.getName() == getModelInputAttrName() ||
      attr.getName() == getReceivedFromAttrName() ||
      attr.getName() == getCotangentOfAttrName() ||
      attr.getName() == getSavedAttrName())
    return verifyStageIndex(op, attr);
  if (attr.getName() == getOptimizerSlotAttrName())
    return verifyOptimizerSlot(op, attr, /*result=*/false);
  if (attr.getName() == getLossScaleAttrName()) {
    auto func = dyn_cast<FunctionOpInterface>(op);
    auto type =
        func ? dyn_cast<RankedTensorType>(func.getArgumentTypes()[argIndex])
             : RankedTensorType();
    if (!isa<UnitAttr>(attr.getValue()) || !type || type.getRank() != 0 ||
        !type.getElementType().isF32())
      return op->emitError()
             << "'" << getLossScaleAttrName()
             << "' marks a function's f32 scalar argument (a unit attribute)";
    return success();
  }
  if (attr.getName() == getBufferOffsetAttrName()) {
    auto offset = dyn_cast<IntegerAttr>(attr.getValue());
    if (!offset || offset.getInt() < 0)
      return op->emitError() << "'" << getBufferOffsetAttrName()
                             << "' is an arena offset (i64 >= 0)";
    return success();
  }
  if (attr.getName() != getShardingAttrName() &&
      attr.getName() != WeftDialect::getLocalShardingAttrName())
    return op->emitError() << "unknown weft argument attribute '"
                           << attr.getName().getValue() << "'";
  Region &region = op->getRegion(regionIndex);
  Type type;
  if (!region.empty())
    type = region.getArgument(argIndex).getType();
  else if (auto func = dyn_cast<FunctionOpInterface>(op))
    type = func.getArgumentTypes()[argIndex];
  else
    return op->emitError() << "cannot find the type of argument #" << argIndex;
  if (attr.getName() == WeftDialect::getLocalShardingAttrName())
    return verifyLocalSharding(op, attr.getValue(), type,
                               "argument #" + Twine(argIndex));
  return verifyShardingAttachment(op, attr.getValue(), type,
                                  "argument #" + Twine(argIndex));
}

LogicalResult WeftDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned regionIndex,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  if (attr.getName() == getModelOutputAttrName() ||
      attr.getName() == getSentToAttrName() ||
      attr.getName() == getGradientToAttrName() ||
      attr.getName() == getSavedAttrName())
    return verifyStageIndex(op, attr);
  if (attr.getName() == getOptimizerSlotAttrName())
    return verifyOptimizerSlot(op, attr, /*result=*/true);
  if (attr.getName() == getGradientOfAttrName()) {
    auto name = dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty())
      return op->emitError() << "'" << getGradientOfAttrName()
                             << "' names a parameter (a non-empty string)";
    return success();
  }
  if (attr.getName() != getShardingAttrName() &&
      attr.getName() != WeftDialect::getLocalShardingAttrName())
    return op->emitError() << "unknown weft result attribute '"
                           << attr.getName().getValue() << "'";
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (func && attr.getName() == WeftDialect::getLocalShardingAttrName())
    return verifyLocalSharding(op, attr.getValue(),
                               func.getResultTypes()[resultIndex],
                               "result #" + Twine(resultIndex));
  if (!func)
    return op->emitError() << "'" << getShardingAttrName()
                           << "' result attributes are only meaningful on "
                              "functions";
  return verifyShardingAttachment(op, attr.getValue(),
                                  func.getResultTypes()[resultIndex],
                                  "result #" + Twine(resultIndex));
}

//===- RankProgram.cpp - The program the cost model costs -----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/RankProgram.h"

#include "llvm/ADT/StringSwitch.h"
#include <array>
#include <functional>
#include <set>

#include "weft/Dialect/Gradients.h"
#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Pipelines/Pipelines.h"
#include "weft/Plan/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Regex.h"

using namespace mlir;
using namespace weft;
using namespace weft::planner;

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

RankProgramBuilder::RankProgramBuilder(MLIRContext &context, ModelSource source,
                                       plan::TrainingConfig training)
    : context(context), source(std::move(source)),
      training(std::move(training)) {}

static func::FuncOp entryFunction(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal())
      return func;
  return {};
}

/// The layers of the kind that repeats most, in order.
static SmallVector<LayerOp> repeatedLayers(func::FuncOp func) {
  llvm::StringMap<SmallVector<LayerOp>> byKind;
  SmallVector<std::string> kinds;
  for (LayerOp layer : func.getBody().getOps<LayerOp>()) {
    auto &list = byKind[layer.getKind()];
    if (list.empty())
      kinds.push_back(layer.getKind().str());
    list.push_back(layer);
  }
  SmallVector<LayerOp> best;
  for (const std::string &kind : kinds)
    if (byKind[kind].size() > best.size())
      best = byKind[kind];
  return best;
}

/// The sliding windows of a layer's attentions, in walk order.
static SmallVector<std::optional<uint64_t>> layerWindows(LayerOp layer) {
  SmallVector<std::optional<uint64_t>> windows;
  layer.getBody().walk(
      [&](AttentionOp op) { windows.push_back(op.getWindow()); });
  return windows;
}

/// Gives every attention of `layers` the windows of `windows`, in walk
/// order: the layer a rank program keeps then is a layer of that variant.
static void setLayerWindows(ArrayRef<LayerOp> layers,
                            ArrayRef<std::optional<uint64_t>> windows) {
  for (LayerOp layer : layers) {
    size_t i = 0;
    layer.getBody().walk([&](AttentionOp op) {
      std::optional<uint64_t> window =
          i < windows.size() ? windows[i] : std::nullopt;
      ++i;
      if (window)
        op.setWindow(window);
      else
        op.removeWindowAttr();
    });
  }
}

/// Keeps the first `keep` layers of the repeated kind: the layers of a kind
/// are one structure, so the cost model costs one and multiplies. The
/// layers must form a chain (each the next one's first input), which the
/// last one's users then read from the last layer kept.
static LogicalResult keepLayers(func::FuncOp func, size_t keep,
                                std::string &error) {
  SmallVector<LayerOp> layers = repeatedLayers(func);
  if (layers.size() <= keep)
    return success();
  for (size_t i = 1; i < layers.size(); ++i) {
    LayerOp before = layers[i - 1], layer = layers[i];
    if (layer.getInputs().empty() ||
        layer.getInputs().front() != before->getResult(0) ||
        layer.getResultTypes() != before.getResultTypes()) {
      error = "layer " + std::to_string(i) + " of kind '" +
              layer.getKind().str() +
              "' does not take the previous layer's output as its first "
              "input; the planner costs repeated layers that form a chain";
      return failure();
    }
    // A layer's other results may be returned too (hidden states, a KV
    // cache's present keys and values), which a training step discards.
    for (size_t r = 0; r < before->getNumResults(); ++r)
      for (Operation *user : before->getResult(r).getUsers())
        if (user != layer.getOperation() &&
            !(r > 0 && isa<func::ReturnOp>(user))) {
          error = "the output of layer " + std::to_string(i - 1) +
                  " is used outside the chain of layers";
          return failure();
        }
  }
  // The returned values of the layers dropped come from the last one kept,
  // of the same types.
  for (size_t i = keep; i < layers.size(); ++i)
    layers[i]->replaceAllUsesWith(layers[keep - 1]->getResults());
  for (size_t i = layers.size(); i-- > keep;)
    layers[i].erase();
  return success();
}

OwningOpRef<ModuleOp> RankProgramBuilder::model(int64_t batch, size_t variant,
                                                std::string &error) {
  auto found = models.find({batch, variant});
  if (found == models.end()) {
    OwningOpRef<ModuleOp> module =
        source.build(context, batch, training.seq_len());
    if (!module) {
      error = "the model cannot be built at batch " + std::to_string(batch) +
              " and sequence " + std::to_string(training.seq_len());
      return nullptr;
    }
    func::FuncOp func = entryFunction(*module);
    if (!func) {
      error = "the model has no function";
      return nullptr;
    }
    // The kinds of repeated layer, by their attentions' sliding windows
    // (Gemma 2 alternates local and global layers), read once: a layer of
    // each kind is costed for the fraction of the layers it stands for.
    SmallVector<LayerOp> layers = repeatedLayers(func);
    if (variantWeights.empty()) {
      for (LayerOp layer : layers) {
        SmallVector<std::optional<uint64_t>> windows = layerWindows(layer);
        auto it = llvm::find(variantWindows, windows);
        if (it == variantWindows.end()) {
          variantWindows.push_back(windows);
          variantWeights.push_back(0.0);
          it = variantWindows.end() - 1;
        }
        variantWeights[size_t(it - variantWindows.begin())] += 1.0;
        layerVariant.push_back(uint32_t(it - variantWindows.begin()));
      }
      if (variantWeights.empty()) {
        variantWindows.emplace_back();
        variantWeights.push_back(1.0);
      }
      for (double &weight : variantWeights)
        weight /= double(std::max<size_t>(1, layers.size()));
    }
    if (variant >= variantWindows.size()) {
      error = "the model has " + std::to_string(variantWindows.size()) +
              " kinds of layer, not " + std::to_string(variant + 1);
      return nullptr;
    }
    if (variantWindows.size() > 1)
      setLayerWindows(layers, variantWindows[variant]);
    if (failed(keepLayers(func, 1, error)))
      return nullptr;
    // The training step's dtype and loss, which no plan changes: the
    // model's own loss, if it computes one, taken out first.
    {
      PassManager lift(&context);
      lift.addPass(createWeftLiftModelLoss());
      if (failed(lift.run(*module))) {
        error = "the model's own loss is not one a training step computes";
        return nullptr;
      }
    }
    PassManager pm(&context);
    pm.enableVerifier(false);
    WeftConvertFloatTypeOptions dtype;
    dtype.to = training.dtype() == "fp16" ? "f16" : "bf16";
    pm.addNestedPass<func::FuncOp>(createWeftConvertFloatType(dtype));
    // The training step ends in its loss, appended as weft train and
    // buildTrainingStep append it: to the first result, logits of a float
    // type and rank >= 2 over whatever classes they have (an encoder's
    // hidden states, a token classifier's labels), not only the vocabulary.
    auto logits = dyn_cast<RankedTensorType>(
        func.getResultTypes().empty() ? Type() : func.getResultTypes()[0]);
    if (logits && logits.getRank() >= 2 &&
        isa<FloatType>(logits.getElementType()))
      pm.addPass(createWeftAppendLoss());
    if (failed(pm.run(*module))) {
      error = "the model's training step cannot be built";
      return nullptr;
    }
    found =
        models.emplace(std::make_pair(batch, variant), std::move(module)).first;
  }
  return found->second->clone();
}

bool RankProgramBuilder::hasMicroBatch(int64_t microBatch,
                                       std::string &error) const {
  if (microBatch > 0 &&
      (!source.staticBatch || *source.staticBatch % microBatch == 0))
    return true;
  error = "the model's batch is static (" +
          std::to_string(source.staticBatch.value_or(0)) +
          "): a micro-batch of " + std::to_string(microBatch) +
          " does not divide it; export it with a dynamic batch axis";
  return false;
}

OwningOpRef<ModuleOp> RankProgramBuilder::build(const ProgramShape &given,
                                                int64_t microBatch,
                                                std::string &error,
                                                size_t variant) {
  if (!hasMicroBatch(microBatch, error))
    return nullptr;
  ProgramShape shape = given;
  if (source.staticBatch)
    shape.dp = *source.staticBatch / microBatch;
  OwningOpRef<ModuleOp> module = model(microBatch * shape.dp, variant, error);
  if (!module)
    return nullptr;
  // Capture diagnostics as the error instead of printing them.
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error && error.empty())
      error = diag.str();
    return success();
  });
  PassManager pm(&context);
  // The same passes are verified in weft run, weft compile and the tests;
  // the planner builds hundreds of these programs.
  pm.enableVerifier(false);
  plan::Plan degrees;
  degrees.set_dp(int(shape.dp));
  degrees.set_tp(int(shape.tp));
  degrees.set_cp(int(shape.cp));
  degrees.set_ulysses(int(shape.ulysses));
  degrees.set_sequence_parallel(shape.sp);
  if (shape.cpGather)
    degrees.set_cp_comm(plan::CP_COMM_ALL_GATHER);
  degrees.set_gx(int(shape.gx));
  degrees.set_gy(int(shape.gy));
  degrees.set_gz(int(shape.gz));
  buildPartitionPipeline(pm, applyPlanOptions(degrees), shape.compress);
  if (!training.flash_attention())
    pm.addNestedPass<func::FuncOp>(createWeftDecomposeAttention());
  // The kernels the GPU runs (weft compile --target cuda makes the same).
  buildCudaKernelPipeline(pm);
  if (failed(pm.run(*module))) {
    if (error.empty())
      error = "partitioning failed";
    return nullptr;
  }
  return module;
}

OwningOpRef<ModuleOp>
RankProgramBuilder::buildTrainingStep(const plan::Plan &plan, int64_t layers,
                                      std::string &error) {
  // A pipeline's step keeps `layers` in each of its pp x v model chunks
  // (or, with 0, the plan's stage_layers of the whole model).
  plan::Plan cut = plan;
  int64_t kept = layers;
  if (plan.pp() > 1) {
    const int64_t chunks =
        int64_t(plan.pp()) * std::max(1, plan.virtual_stages());
    if (layers > 0) {
      cut.clear_stage_layers();
      for (int r = 0; r < plan.pp(); ++r)
        cut.add_stage_layers(
            int32_t(layers * std::max(1, plan.virtual_stages())));
      kept = layers * chunks;
    } else {
      kept = 0;
      for (int32_t n : plan.stage_layers())
        kept += n;
    }
  }
  const int64_t microBatch = std::max(1, plan.micro_batch());
  const int64_t batch = microBatch * std::max(1, plan.dp());
  if (source.staticBatch && *source.staticBatch != batch) {
    error = "the model's batch is static (" +
            std::to_string(*source.staticBatch) + "), not micro-batch x dp (" +
            std::to_string(batch) + ")";
    return nullptr;
  }
  OwningOpRef<ModuleOp> module =
      source.buildLayers && kept > 2
          ? source.buildLayers(context, batch, training.seq_len(), kept)
          : source.build(context, batch, training.seq_len());
  func::FuncOp func = module ? entryFunction(*module) : func::FuncOp();
  if (!func) {
    error = "the model cannot be built at batch " + std::to_string(batch) +
            " and sequence " + std::to_string(training.seq_len());
    return nullptr;
  }
  if (plan.pp() > 1 && int64_t(repeatedLayers(func).size()) < kept) {
    error = "the model has " + std::to_string(repeatedLayers(func).size()) +
            " repeated layers; its pipeline's step is counted with " +
            std::to_string(kept);
    return nullptr;
  }
  if (kept > 0 &&
      failed(keepLayers(func, size_t(std::max<int64_t>(1, kept)), error)))
    return nullptr;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error && error.empty())
      error = diag.str();
    return success();
  });
  TrainingStepOptions options;
  options.dtype = training.dtype() == "fp16" ? "f16" : "bf16";
  options.recompute = recomputeName(plan.recompute());
  options.optimizer.maxGradNorm = 1.0;
  options.optimizer.freeze = training.freeze();
  // The planner counts the step; it feeds it no data.
  options.assignFeeds = false;
  // Verified once, at the end (weft train and weft compile verify the same
  // passes after each).
  options.verifyEachPass = false;
  FunctionType type;
  if (failed(weft::buildTrainingStep(context, *module, cut, options, type)) ||
      failed(weft::buildPartitionedStep(context, *module, cut,
                                        /*partitioned=*/true, options)) ||
      failed(mlir::verify(*module))) {
    if (error.empty())
      error = "the training step cannot be built";
    return nullptr;
  }
  return module;
}

/// Bytes one rank sends in the communicating collectives under `root` (NCCL
/// ring counts, as encoded).
/// With `microBatch`, a pipelined step's function on that micro-batch: a
/// gather held over blocks of N micro-batches (`hold N`) sends on a block's
/// first micro-batch only.
static int64_t sent(Operation *root, std::optional<int> microBatch = {}) {
  int64_t bytes = 0;
  root->walk([&](CollectiveOpInterface collective) {
    if (auto gather = dyn_cast<AllGatherOp>(collective.getOperation());
        gather && gather.getHold() && microBatch &&
        *microBatch % int64_t(*gather.getHold()) != 0)
      return;
    if (collective.communicates())
      bytes += getCollectiveBytesSent(collective,
                                      getCollectiveGroupSize(collective));
  });
  return bytes;
}

plan::StepCommunication planner::countStepCommunication(ModuleOp step,
                                                        int64_t *layers) {
  plan::StepCommunication comm;
  func::FuncOp main, reduction, optimizer;
  for (auto func : step.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    if (func->hasAttr(WeftDialect::getOptimizerAttrName()))
      optimizer = func;
    else if (!main)
      main = func;
  }
  if (!main) {
    comm.set_missing("the module has no step function");
    return comm;
  }
  if (auto name = main->getAttrOfType<FlatSymbolRefAttr>(
          WeftDialect::getGradientReductionAttrName()))
    reduction = step.lookupSymbol<func::FuncOp>(name.getValue());
  comm.set_reduction_per_micro_batch(
      main->hasAttr(WeftDialect::getReduceEveryMicroBatchAttrName()));
  // Before the first layer: the embedding; from the first forward layer to
  // the first backward one: the output layer and the loss, both ways;
  // after: the embedding's backward.
  int forwardLayers = 0, backwardLayers = 0;
  for (Operation &op : main.getBody().front()) {
    if (auto layer = dyn_cast<LayerOp>(op)) {
      bool backward = layer.getKind().ends_with(".backward");
      (backward ? backwardLayers : forwardLayers)++;
      int64_t bytes = sent(layer);
      if (backward)
        comm.set_layer_backward(comm.layer_backward() + bytes);
      else
        comm.set_layer_forward(comm.layer_forward() + bytes);
      continue;
    }
    int64_t bytes = sent(&op);
    if (forwardLayers == 0)
      comm.set_embedding_forward(comm.embedding_forward() + bytes);
    else if (backwardLayers == 0)
      comm.set_head(comm.head() + bytes);
    else
      comm.set_embedding_backward(comm.embedding_backward() + bytes);
  }
  if (layers)
    *layers = forwardLayers;
  if (reduction)
    comm.set_gradient_reduction(sent(reduction));
  if (optimizer)
    comm.set_optimizer(sent(optimizer));
  return comm;
}

LogicalResult planner::countPipelinedStepCommunication(
    ModuleOp step, std::vector<int64_t> &perRank, std::vector<int64_t> &p2p,
    std::string &error) {
  ScopedDiagnosticHandler handler(step.getContext(), [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error && error.empty())
      error = diag.str();
    return success();
  });
  FailureOr<std::optional<PipelineInfo>> read = readPipeline(step);
  if (failed(read) || !*read) {
    if (error.empty())
      error = "the step is not cut into pipeline stages";
    return failure();
  }
  const PipelineInfo &info = **read;
  const int p = info.stages;
  std::optional<CollectiveCodec> codec = symbolizeCollectiveCodec(info.codec);
  if (!codec) {
    error = "the pipeline's sends have an unknown codec '" + info.codec + "'";
    return failure();
  }
  // What a step sends: the forward's values for the next stage (results
  // that are not model outputs or kept), the backward's gradients for the
  // previous one (weft.gradient_to), as the runner sends them.
  auto wire = [&](func::FuncOp func, llvm::function_ref<bool(unsigned)> sends) {
    int64_t bytes = 0;
    for (auto [o, type] : llvm::enumerate(func.getResultTypes()))
      if (sends(unsigned(o)))
        bytes += getWireBytes(type, *codec);
    return bytes;
  };
  perRank.assign(size_t(p), 0);
  p2p.assign(size_t(p), 0);
  for (int r = 0; r < p; ++r) {
    for (const auto &[s, name] : info.steps[size_t(r)]) {
      const int k = s.chunk * p + r;
      if (k < 0 || k >= int(info.virtualStages.size())) {
        error = "step " + name + " of pipeline rank " + std::to_string(r) +
                " names no stage";
        return failure();
      }
      const PipelineStageInfo &stage = info.virtualStages[size_t(k)];
      func::FuncOp piece;
      switch (s.kind) {
      case PipelineStep::Forward:
        piece = stage.func;
        break;
      case PipelineStep::Backward:
        piece = stage.backward;
        break;
      case PipelineStep::WeightGrad:
        piece = stage.weight;
        break;
      case PipelineStep::Recv:
        break;
      case PipelineStep::Send: {
        func::FuncOp backward = stage.backward;
        int64_t bytes = 0;
        if (!s.gradient)
          bytes = wire(stage.func,
                       [&](unsigned o) { return stage.modelOutput[o] == -1; });
        else if (backward)
          bytes = wire(backward, [&](unsigned o) {
            return bool(backward.getResultAttr(
                o, WeftDialect::getGradientToAttrName()));
          });
        p2p[size_t(r)] += bytes;
        perRank[size_t(r)] += bytes;
        break;
      }
      }
      if (!piece)
        continue;
      perRank[size_t(r)] += sent(piece, s.microBatch);
      // ZeRO-2 and 3: the step's partial gradients reduced after it, as the
      // executor runs the reduction on each micro-batch's (ZeroPP: after
      // the last micro-batch of each block).
      if (s.kind != PipelineStep::Forward) {
        FailureOr<GradientReduction> deferred =
            readGradientReduction(piece, error);
        if (failed(deferred))
          return failure();
        const int block = std::max(1, deferred->block);
        const bool blockEnds = s.microBatch % block == block - 1 ||
                               s.microBatch == info.microBatches - 1;
        if (deferred->everyMicroBatch && deferred->function &&
            !deferred->partial.empty() && blockEnds)
          perRank[size_t(r)] += sent(deferred->function);
      }
    }
    // Each chunk's partial gradients, otherwise reduced once per step.
    for (int c = 0; c < info.chunks; ++c) {
      const PipelineStageInfo &stage = info.virtualStages[size_t(c * p + r)];
      for (func::FuncOp piece : {stage.backward, stage.weight}) {
        if (!piece)
          continue;
        FailureOr<GradientReduction> deferred =
            readGradientReduction(piece, error);
        if (failed(deferred))
          return failure();
        if (!deferred->everyMicroBatch && deferred->function &&
            !deferred->partial.empty())
          perRank[size_t(r)] += sent(deferred->function);
      }
    }
  }
  // Each pipeline rank's optimizer step.
  for (auto func : step.getOps<func::FuncOp>())
    if (auto rank = func->getAttrOfType<IntegerAttr>(
            WeftDialect::getPipelineRankAttrName());
        rank && rank.getInt() >= 0 && rank.getInt() < p)
      perRank[size_t(rank.getInt())] += sent(func);
  return success();
}

//===----------------------------------------------------------------------===//
// Profiling
//===----------------------------------------------------------------------===//

/// Weights and constants: held by the rank, not produced per micro-batch
/// (an all_slice of one is the shard the rank holds). `known` remembers the
/// values already classified, so a shared subexpression is visited once.
static bool isPersistent(Value value, llvm::DenseMap<Value, bool> &known) {
  if (auto it = known.find(value); it != known.end())
    return it->second;
  auto classify = [&]() -> bool {
    // A layer's argument is what the layer is given.
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      auto layer = dyn_cast_or_null<LayerOp>(arg.getOwner()->getParentOp());
      return layer && arg.getArgNumber() < layer.getInputs().size() &&
             isPersistent(layer.getInputs()[arg.getArgNumber()], known);
    }
    Operation *def = value.getDefiningOp();
    if (!def)
      return false;
    if (isa<ParameterOp>(def) || matchPattern(value, m_Constant()))
      return true;
    if (auto slice = dyn_cast<AllSliceOp>(def))
      return isPersistent(slice.getInput(), known);
    // A weight stored in shards (weft.stored_over) and gathered before use
    // is still a weight: gathered again when needed, not kept as an
    // activation.
    if (auto gather = dyn_cast<AllGatherOp>(def))
      return isPersistent(gather.getInput(), known);
    // What weights and constants alone compute (a rotary table's slice for
    // the sequence) is computed again, not kept: the differentiated program
    // keeps only what the step's inputs flow into.
    if (def->getNumRegions() == 0 && def->getNumOperands() > 0 &&
        !isa<CollectiveOpInterface>(def))
      return llvm::all_of(def->getOperands(), [&](Value operand) {
        return isPersistent(operand, known);
      });
    return false;
  };
  bool persistent = classify();
  known[value] = persistent;
  return persistent;
}

/// Whether a partition rule built `op` as part of one op's decomposition
/// (weft.decomposed).
static bool isDecomposed(Operation *op) {
  return op && op->hasAttr(WeftDialect::getDecomposedAttrName());
}

/// Where an activation lives: a reshape is a view of its input; a value
/// all-gathered from shards (Megatron SP) is kept as the shard and gathered
/// again in backward.
/// `*gathered`, when given, is set to the all-gather nearest `value` (the
/// one the backward runs again), or null.
static Value storedAs(Value value, Operation **gathered = nullptr) {
  if (gathered)
    *gathered = nullptr;
  while (true) {
    if (auto reshape = value.getDefiningOp<ReshapeOp>()) {
      value = reshape.getInput();
      continue;
    }
    if (auto gather = value.getDefiningOp<CollectiveOpInterface>())
      if (gather.getCollectiveKind() == CollectiveKind::AllGather) {
        if (gathered && !*gathered)
          *gathered = gather;
        value = gather->getOperand(0);
        continue;
      }
    return value;
  }
}

/// Where the gradient that reaches `value` lives from a backward step to its
/// weight-gradient step: the gradient of a value the forward
/// reduce-scatters over the mesh (Megatron SP's row-parallel linear) is the
/// gather of the block's gradient, and the W step gathers it again from the
/// block it keeps (-weft-split-backward), as for a linear's input.
/// `*scattered`, when given, is set to the first reduce-scatter on the way
/// (whose transpose the backward runs, and a W step again), or null.
static Value gradientStoredAs(Value value, Operation **scattered = nullptr) {
  if (scattered)
    *scattered = nullptr;
  while (value.hasOneUse()) {
    Operation *user = *value.getUsers().begin();
    auto collective = dyn_cast<CollectiveOpInterface>(user);
    bool scatter = collective && collective.getCollectiveKind() ==
                                     CollectiveKind::ReduceScatter;
    if (!isa<ReshapeOp>(user) && !scatter)
      break;
    if (scatter && scattered && !*scattered)
      *scattered = user;
    value = user->getResult(0);
  }
  return value;
}

static double bytesOf(Value value, int form) {
  return double(
      SavedTensor::bytes(cast<RankedTensorType>(value.getType()), form));
}

ProgramShape ProgramShape::of(const plan::Plan &plan, int64_t dp) {
  ProgramShape shape;
  shape.dp = dp;
  shape.tp = std::max(1, plan.tp());
  shape.cp = std::max(1, plan.cp());
  shape.ulysses = std::max(1, plan.ulysses());
  shape.sp = plan.sequence_parallel();
  shape.cpGather = shape.cp > 1 && plan.cp_comm() == plan::CP_COMM_ALL_GATHER;
  shape.compress = plan.compress();
  shape.gx = std::max(1, plan.gx());
  shape.gy = std::max(1, plan.gy());
  shape.gz = std::max(1, plan.gz());
  return shape;
}

AxisSizes AxisSizes::of(const plan::Plan &plan) {
  AxisSizes sizes;
  sizes.dp = std::max(1, plan.dp());
  sizes.cp = std::max(1, plan.cp());
  sizes.ulysses = std::max(1, plan.ulysses());
  sizes.tp = std::max(1, plan.tp());
  sizes.gx = std::max(1, plan.gx());
  sizes.gy = std::max(1, plan.gy());
  sizes.gz = std::max(1, plan.gz());
  return sizes;
}

unsigned planner::meshAxisBit(llvm::StringRef axis) {
  return llvm::StringSwitch<unsigned>(axis)
      .Case("dp", kDpAxis)
      .Case("cp", kCpAxis)
      .Case("ulysses", kUlyssesAxis)
      .Case("tp", kTpAxis)
      .Case("gx", kGxAxis)
      .Case("gy", kGyAxis)
      .Case("gz", kGzAxis)
      .Default(0);
}

/// The axes major to minor, with their bits and sizes.
static std::array<std::pair<unsigned, int64_t>, 7>
orderedAxes(const AxisSizes &s) {
  return {{{kDpAxis, s.dp},
           {kGzAxis, s.gz},
           {kCpAxis, s.cp},
           {kUlyssesAxis, s.ulysses},
           {kGyAxis, s.gy},
           {kGxAxis, s.gx},
           {kTpAxis, s.tp}}};
}

int64_t planner::groupSize(unsigned axes, const AxisSizes &sizes) {
  int64_t size = 1;
  for (auto [bit, n] : orderedAxes(sizes))
    if (axes & bit)
      size *= n;
  return size;
}

int64_t planner::groupStride(unsigned axes, const AxisSizes &sizes) {
  // Row-major: the axes minor to the group's minor axis set the distance.
  int64_t stride = 1;
  auto ordered = orderedAxes(sizes);
  for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
    if (axes & it->first)
      return stride;
    stride *= it->second;
  }
  return stride;
}

namespace {
/// Accumulates what a block saves for backward.
struct SavedSet {
  llvm::DenseSet<std::pair<Value, int>> all, selective;
  /// What is kept for a reason other than an elementwise op's gradient (a
  /// GEMM's, a norm's, a decomposition's reads, the operands of a
  /// recomputed attention core): never rematerialized.
  llvm::DenseSet<std::pair<Value, int>> heldAll, heldSelective;
  void keep(std::pair<Value, int> key, bool elementwise) {
    all.insert(key);
    selective.insert(key);
    if (!elementwise) {
      heldAll.insert(key);
      heldSelective.insert(key);
    }
  }
  double bytes(const llvm::DenseSet<std::pair<Value, int>> &set) const {
    double total = 0;
    for (auto [value, form] : set)
      total += bytesOf(value, form);
    return total;
  }
};
} // namespace

ProgramProfile planner::profileProgram(ModuleOp rankProgram,
                                       llvm::StringRef freeze) {
  ProgramProfile profile;
  std::optional<llvm::Regex> frozen;
  if (!freeze.empty())
    frozen.emplace(freeze);
  func::FuncOp func = entryFunction(rankProgram);
  std::optional<MeshInfo> mesh = getMeshInfo(rankProgram);
  MeshInfo noMesh;
  const MeshInfo &meshInfo = mesh ? *mesh : noMesh;
  SmallVector<LayerOp> layers = repeatedLayers(func);
  LayerOp layer = layers.empty() ? LayerOp() : layers.front();
  SavedSet saved[3];
  // What the trained weights' gradients read: what the backward computes
  // (gradients, a norm's normalized input) and values of the forward
  // program.
  struct WeightReads {
    llvm::DenseSet<std::pair<Value, int>> computed;
    llvm::DenseSet<Value> forward;
  } weightReads[3];
  llvm::DenseSet<Operation *> parameters[3];
  // One memo for the whole program: an activation's classification walks
  // back to the step's inputs, so a memo per query would make the walk
  // quadratic in the program's length.
  llvm::DenseMap<Value, bool> persistentMemo;
  auto isPersistent = [&](Value value) {
    return ::isPersistent(value, persistentMemo);
  };

  AxisSizes sizes;
  sizes.dp = meshInfo.size("dp");
  sizes.cp = meshInfo.size("cp");
  sizes.ulysses = meshInfo.size("ulysses");
  sizes.tp = meshInfo.size("tp");
  sizes.gx = meshInfo.size("gx");
  sizes.gy = meshInfo.size("gy");
  sizes.gz = meshInfo.size("gz");

  // Whether a value depends on a trained (not frozen) weight: what
  // -weft-differentiate gives a gradient.
  llvm::DenseMap<Value, bool> activeMemo;
  std::function<bool(Value)> isActive = [&](Value value) -> bool {
    if (auto it = activeMemo.find(value); it != activeMemo.end())
      return it->second;
    activeMemo[value] = false; // (no cycles in SSA; a guard all the same)
    bool active = false;
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      // A region's argument is what its op is given (a layer's inputs).
      Operation *owner = arg.getOwner()->getParentOp();
      if (owner && !isa<func::FuncOp>(owner) &&
          arg.getArgNumber() < owner->getNumOperands())
        active = isActive(owner->getOperand(arg.getArgNumber()));
    } else {
      Operation *def = value.getDefiningOp();
      if (auto param = dyn_cast<ParameterOp>(def)) {
        active = !frozen || !frozen->match(param.getName());
      } else if (def->getNumRegions() && !def->getRegion(0).empty() &&
                 def->getRegion(0).front().mightHaveTerminator()) {
        // A layer's (or fusion's) result is what its body yields.
        Operation *yield = def->getRegion(0).front().getTerminator();
        unsigned r = cast<OpResult>(value).getResultNumber();
        active = r < yield->getNumOperands() && isActive(yield->getOperand(r));
      } else {
        active = llvm::any_of(def->getOperands(),
                              [&](Value operand) { return isActive(operand); });
      }
    }
    activeMemo[value] = active;
    return active;
  };

  // A partition rule's decomposition of one op (weft.decomposed: a
  // vocabulary-parallel cross-entropy or embedding): the training step was
  // differentiated before it was partitioned, so the backward is the op's
  // and reads its operands, not what its pieces would keep one by one.
  // Connected such ops (a fusion of some of them counts as one) are one op:
  // it keeps what they read from outside, if any of that depends on a
  // trained weight.
  llvm::DenseMap<Operation *, Operation *> groupParent;
  std::function<Operation *(Operation *)> groupOf = [&](Operation *op) {
    Operation *parent = groupParent.lookup(op);
    if (parent == op)
      return op;
    Operation *root = groupOf(parent);
    groupParent[op] = root;
    return root;
  };
  // What each part reads (fusion inputs for what its marked ops read).
  SmallVector<std::pair<Operation *, SmallVector<Value>>> parts;
  func.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (auto fusion = dyn_cast<FusionOp>(op)) {
      Block &body = fusion.getBody().front();
      llvm::SetVector<Value> reads;
      for (Operation &inner : body.without_terminator())
        if (isDecomposed(&inner))
          for (Value operand : inner.getOperands()) {
            auto arg = dyn_cast<BlockArgument>(operand);
            if (arg && arg.getOwner() == &body)
              reads.insert(fusion.getInputs()[arg.getArgNumber()]);
            else if (!isDecomposed(operand.getDefiningOp()))
              reads.insert(operand);
          }
      if (!reads.empty())
        parts.push_back({op, SmallVector<Value>(reads.begin(), reads.end())});
      return WalkResult::skip();
    }
    if (isDecomposed(op))
      parts.push_back({op, SmallVector<Value>(op->getOperands())});
    return WalkResult::advance();
  });
  for (auto &[op, reads] : parts)
    groupParent[op] = op;
  // (Connected through activations: two decompositions may share a
  // constant.)
  for (auto &[op, reads] : parts)
    for (Value read : reads)
      if (Operation *def = read.getDefiningOp();
          def && groupParent.count(def) && !isPersistent(read))
        groupParent[groupOf(def)] = groupOf(op);
  llvm::DenseMap<Operation *, llvm::SetVector<Value>> groupReads;
  for (auto &[op, reads] : parts)
    for (Value read : reads)
      if (Operation *def = read.getDefiningOp();
          !def || !groupParent.count(def) || isPersistent(read))
        groupReads[groupOf(op)].insert(read);
  llvm::DenseSet<Operation *> groupsCounted;
  // A ring's backward (the partitioned weft.attention_grad) also reads the
  // ring's output and its rows' log-sum-exps, which a forward program does
  // not keep as values (the merged log-sum-exp is read by nothing there):
  // the last step's results have their types.
  llvm::DenseMap<Operation *, AttentionBlockOp> ringLastStep;
  for (auto &[op, reads] : parts)
    if (auto step = dyn_cast<AttentionBlockOp>(op))
      ringLastStep[groupOf(op)] = step;
  // The ring's output goes to the backward once (-weft-partition): in a
  // layout of it that the layer keeps anyway (the output projection's input;
  // under recompute=op the output itself), else as it is.
  auto ringOutputKept = [&](Operation *group,
                            const llvm::DenseSet<std::pair<Value, int>> &set) {
    for (auto &[op, reads] : parts) {
      if (groupOf(op) != group)
        continue;
      for (Value result : op->getResults())
        for (OpOperand &use : result.getUses())
          if (!groupParent.count(use.getOwner()) ||
              groupOf(use.getOwner()) != group)
            for (Value layout : layoutChain(result))
              if (set.contains({storedAs(layout), SavedTensor::Whole}))
                return true;
    }
    return false;
  };
  SmallVector<std::pair<int, Operation *>> ringsKept;

  // What an op keeps for the gradients the differentiated program builds:
  // an operand that depends on no trained weight (a frozen rotary table)
  // gets none, so what only its gradient reads (q in q * cos) is not kept.
  // A fusion keeps what its body's ops keep, each by the same rule (the
  // program is differentiated before it is fused), its arguments read as
  // its operands.
  // Each tensor comes with the op whose gradient reads it (for a fusion,
  // the op of its body).
  using KeptBy = std::pair<SavedTensor, Operation *>;
  std::function<void(Operation *, SmallVectorImpl<KeptBy> &)> savedFor =
      [&](Operation *op, SmallVectorImpl<KeptBy> &out) {
        if (auto fusion = dyn_cast<FusionOp>(op)) {
          Block &body = fusion.getBody().front();
          for (Operation &inner : body.without_terminator()) {
            if (!isa<DifferentiableOpInterface>(inner) ||
                isDecomposed(&inner) ||
                llvm::none_of(inner.getOperands(),
                              [&](Value operand) { return isActive(operand); }))
              continue;
            SmallVector<KeptBy> kept;
            savedFor(&inner, kept);
            for (KeptBy entry : kept) {
              if (auto arg = dyn_cast<BlockArgument>(entry.first.value);
                  arg && arg.getOwner() == &body)
                entry.first.value = fusion.getInputs()[arg.getArgNumber()];
              out.push_back(entry);
            }
          }
          return;
        }
        auto differentiable = cast<DifferentiableOpInterface>(op);
        SmallVector<SavedTensor> all;
        differentiable.getSavedForBackward(all);
        bool everyOperand = llvm::all_of(op->getOperands(), [&](Value value) {
          auto type = dyn_cast<RankedTensorType>(value.getType());
          return !type || !isa<FloatType>(type.getElementType()) ||
                 isActive(value);
        });
        if (everyOperand) {
          for (const SavedTensor &tensor : all)
            out.push_back({tensor, op});
          return;
        }
        llvm::SmallDenseSet<Value, 8> read;
        for (OpOperand &operand : op->getOpOperands()) {
          if (!isActive(operand.get()))
            continue;
          SmallVector<GradientRead> reads;
          differentiable.getGradientReads(operand.getOperandNumber(), reads);
          for (const GradientRead &r : reads)
            if (r.kind == GradientRead::Forward)
              read.insert(r.value);
        }
        for (const SavedTensor &tensor : all)
          if (read.contains(tensor.value))
            out.push_back({tensor, op});
      };

  // The records of the collectives, by op, to mark those a backward runs
  // again (OpRecord::regathered, gradientRegathered); the scatters are
  // marked once the walk has recorded them (they follow their reader).
  llvm::DenseMap<Operation *, size_t> collectiveRecords;
  SmallVector<Operation *> scattersRegathered;
  // The bytes of K and V each attention reads gathered over cp, by block.
  llvm::DenseMap<Operation *, double> gatheredKeys[3];
  // Each op's record, and what the backward reads of each block's forward
  // values, as they are (before storedAs): recompute=op's starting point.
  llvm::DenseMap<Operation *, size_t> recordOf;
  SmallVector<Value> backwardReads[3];
  auto markRegathered = [&](Operation *gather) {
    auto found = collectiveRecords.find(gather);
    if (found != collectiveRecords.end() &&
        profile.ops[found->second].commClass != CommClass::WeightGather)
      profile.ops[found->second].regathered = true;
  };
  auto visit = [&](Operation *op, BlockKind block) {
    int b = int(block);
    if (auto param = dyn_cast<ParameterOp>(op))
      parameters[b].insert(op);
    // Computation and communication.
    if (auto collective = dyn_cast<CollectiveOpInterface>(op);
        collective && collective.communicates()) {
      OpRecord record{block, op->getName()};
      record.collective = true;
      record.kind = collective.getCollectiveKind();
      record.group = 1;
      for (StringRef axis : collective.getAxes().getAsValueRange<StringAttr>())
        record.group *= meshInfo.size(axis);
      int64_t in = op->getNumOperands()
                       ? getTensorBytes(op->getOperand(0).getType())
                       : 0;
      record.operandBytes = in;
      if (op->getNumOperands()) {
        auto operand = cast<RankedTensorType>(op->getOperand(0).getType());
        record.elementBytes =
            std::max<int64_t>(1, operand.getElementTypeBitWidth() / 8);
        record.floatOperand = isa<FloatType>(operand.getElementType());
      }
      record.codec = collective.getWireCodec();
      int64_t out =
          op->getNumResults() ? getTensorBytes(op->getResult(0).getType()) : 0;
      record.fullBytes = std::max(in, out);
      for (StringRef axis : collective.getAxes().getAsValueRange<StringAttr>())
        record.axes |= meshAxisBit(axis);
      record.stride = groupStride(record.axes, sizes);
      bool overTp = record.axes & kTensorAxes, overCp = record.axes & kCpAxis;
      record.commClass = record.kind == CollectiveKind::AllGather &&
                                 op->getNumOperands() &&
                                 isPersistent(op->getOperand(0))
                             ? CommClass::WeightGather
                         : overTp ? CommClass::TensorParallel
                         : overCp && record.kind == CollectiveKind::Permute
                             ? CommClass::Ring
                             : CommClass::Sequence;
      if (record.commClass == CommClass::Ring)
        for (OpOperand &use : op->getResult(0).getUses())
          if (auto step = dyn_cast<AttentionBlockOp>(use.getOwner())) {
            if (use.get() == step.getK() || use.get() == step.getV())
              record.ringRole = OpRecord::RingRole::KeyValue;
            else if (use.get() == step.getKPositions())
              record.ringRole = OpRecord::RingRole::Positions;
          }
      if (record.commClass == CommClass::Sequence &&
          record.kind == CollectiveKind::AllGather && overCp) {
        llvm::SmallPtrSet<Operation *, 2> readers;
        for (OpOperand &use : op->getResult(0).getUses())
          if (auto attention = dyn_cast<AttentionBlockOp>(use.getOwner()))
            if (use.get() == attention.getK() ||
                use.get() == attention.getV()) {
              record.keysGathered = true;
              if (readers.insert(attention).second)
                gatheredKeys[b][attention] += double(out);
            }
      }
      collectiveRecords[op] = profile.ops.size();
      recordOf[op] = profile.ops.size();
      profile.ops.push_back(std::move(record));
    } else if (auto costed = dyn_cast<CostOpInterface>(op)) {
      // The shard of a weight is the rank's to hold: no work per step.
      bool load =
          isa<CollectiveOpInterface>(op) && isPersistent(op->getOperand(0));
      if (!load && !isa<LayerOp, YieldOp, MeshOp>(op)) {
        OpRecord record{block, op->getName()};
        record.forward = costed.getCost();
        if (auto differentiable = dyn_cast<DifferentiableOpInterface>(op)) {
          record.backward = differentiable.estimateBackwardCost(
              op->getOperandTypes(), op->getResultTypes());
          record.attentionCore = differentiable.isAttentionCore();
        } else {
          record.backward.inputGradient = record.forward;
          record.backward.weightGradient.kernels = 0;
        }
        record.ringStep = isa<AttentionBlockOp>(op);
        recordOf[op] = profile.ops.size();
        profile.ops.push_back(std::move(record));
      }
    }
    // A decomposition keeps, once, what it reads from outside.
    if (groupParent.count(op)) {
      Operation *group = groupOf(op);
      const llvm::SetVector<Value> &reads = groupReads[group];
      if (groupsCounted.insert(group).second &&
          llvm::any_of(reads, [&](Value value) { return isActive(value); })) {
        for (Value value : reads)
          if (!isPersistent(value)) {
            saved[b].keep({storedAs(value), SavedTensor::Whole}, false);
            backwardReads[b].push_back(value);
          }
        // (Selective recomputation keeps them too: the fused gradient reads
        // q, k and v, so the step does not run the ring again.) The output
        // is kept once, below, when all the layer keeps is known.
        if (AttentionBlockOp step = ringLastStep.lookup(group)) {
          saved[b].keep({step.getLse(), 0}, false);
          ringsKept.push_back({b, group});
        }
      }
    }
    // Saved for backward, by what the differentiated program differentiates:
    // an op none of whose operands depends on a trained weight (a mask made
    // from an input, a frozen table's slice) has no backward.
    auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
    if (!differentiable || llvm::none_of(op->getOperands(), [&](Value operand) {
          return isActive(operand);
        }))
      return;
    SmallVector<KeptBy> values;
    if (!isDecomposed(op))
      savedFor(op, values);
    bool core = differentiable.isAttentionCore();
    for (const auto &[tensor, by] : values) {
      if (isPersistent(tensor.value))
        continue;
      Operation *gathered;
      auto key =
          std::make_pair(storedAs(tensor.value, &gathered), tensor.form());
      markRegathered(gathered);
      bool elementwise = by->hasTrait<weft::OpTrait::Elementwise>();
      saved[b].all.insert(key);
      if (!elementwise)
        saved[b].heldAll.insert(key);
      backwardReads[b].push_back(tensor.value);
      if (!core) {
        saved[b].selective.insert(key);
        if (!elementwise)
          saved[b].heldSelective.insert(key);
      }
    }
    // Selective recomputation reruns the core from its inputs: those made
    // outside the core stay. (A decomposition's blocks, the ring's, are
    // its own: it keeps what it reads from outside, above.)
    if (core && !isDecomposed(op))
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        auto producer = dyn_cast_or_null<DifferentiableOpInterface>(def);
        if (isPersistent(operand) || (producer && producer.isAttentionCore()))
          continue;
        saved[b].selective.insert({storedAs(operand), SavedTensor::Whole});
        saved[b].heldSelective.insert({storedAs(operand), SavedTensor::Whole});
      }
    // What the trained weights' gradients read, where the op mixes weights
    // with activations (a weight's cast is the weight's).
    if (llvm::all_of(op->getResults(),
                     [&](Value result) { return isPersistent(result); }))
      return;
    for (OpOperand &operand : op->getOpOperands()) {
      if (!isPersistent(operand.get()) || !isActive(operand.get()))
        continue;
      SmallVector<GradientRead> reads;
      differentiable.getGradientReads(operand.getOperandNumber(), reads);
      for (const GradientRead &read : reads) {
        if (read.kind == GradientRead::ResultGradient) {
          Operation *scattered;
          weightReads[b].computed.insert(
              {gradientStoredAs(read.value, &scattered), int(read.kind)});
          if (scattered)
            scattersRegathered.push_back(scattered);
        } else if (read.kind != GradientRead::Forward)
          weightReads[b].computed.insert({read.value, int(read.kind)});
        else if (!isPersistent(read.value))
          weightReads[b].forward.insert(storedAs(read.value));
      }
    }
  };

  // A fusion is one kernel: it is costed as a whole, not its body's ops.
  auto visitAll = [&](Operation *root, BlockKind kind) {
    root->walk<WalkOrder::PreOrder>([&](Operation *inner) {
      if (inner == root && isa<LayerOp>(inner))
        return WalkResult::advance();
      visit(inner, kind);
      return isa<FusionOp>(inner) ? WalkResult::skip() : WalkResult::advance();
    });
  };
  BlockKind block = BlockKind::Embedding;
  for (Operation &op : func.getBody().front()) {
    if (layer && &op == layer.getOperation()) {
      visitAll(&op, BlockKind::Layer);
      block = BlockKind::Head;
      continue;
    }
    visitAll(&op, block);
  }
  for (auto [b, group] : ringsKept) {
    Value output = ringLastStep.lookup(group).getResult();
    if (!ringOutputKept(group, saved[b].all)) {
      saved[b].all.insert({output, SavedTensor::Whole});
      saved[b].heldAll.insert({output, SavedTensor::Whole});
    }
    if (!ringOutputKept(group, saved[b].selective)) {
      saved[b].selective.insert({output, SavedTensor::Whole});
      saved[b].heldSelective.insert({output, SavedTensor::Whole});
    }
  }

  // What the weights' gradients read: what the backward computes and the
  // forward values, kept or recomputed alike.
  for (int b = 0; b < 3; ++b) {
    BlockMemory &memory = profile.memory[b];
    for (auto [value, kind] : weightReads[b].computed)
      memory.weightGradientReadBytes += bytesOf(value, 0);
    for (Value value : weightReads[b].forward)
      memory.weightGradientReadBytes += bytesOf(value, 0);
  }

  // An activation the layers read besides the residual stream (an attention
  // mask) is one tensor for every layer: the backward layers take it as their
  // forward did, whatever the recomputation. It is counted once per
  // micro-batch (sharedInputBytes), not with each layer.
  if (layer) {
    BlockMemory &memory = profile.memory[int(BlockKind::Layer)];
    SavedSet &kept = saved[int(BlockKind::Layer)];
    Block &body = layer.getBody().front();
    for (auto [input, arg] :
         llvm::zip(layer.getInputs(), body.getArguments())) {
      if (arg.getArgNumber() == 0 || isPersistent(input))
        continue;
      for (int mask = 0; mask < 2; ++mask) {
        kept.all.erase({storedAs(arg), mask});
        kept.selective.erase({storedAs(arg), mask});
      }
      memory.sharedInputBytes += bytesOf(arg, 0);
    }
    // Rematerialized (isCheapToRematerialize, as -weft-differentiate applies
    // it without full recomputation): an elementwise op's result that only
    // elementwise ops' gradients read, from an activation that is kept
    // anyway, is recomputed in backward, not kept. Walking backward as the
    // sweep does, what a rematerialized op reads stays kept.
    auto rematerialize =
        [&](llvm::DenseSet<std::pair<Value, int>> &set,
            const llvm::DenseSet<std::pair<Value, int>> &held) {
          llvm::DenseSet<Value> readByRecomputed;
          llvm::DenseSet<std::pair<Value, int>> dropped;
          std::function<void(Block &, FusionOp)> walk = [&](Block &block,
                                                            FusionOp fusion) {
            // A fusion's argument is the fusion's operand.
            auto outside = [&](Value value) -> Value {
              if (auto arg = dyn_cast<BlockArgument>(value);
                  fusion && arg && arg.getOwner() == &block)
                return fusion.getInputs()[arg.getArgNumber()];
              return value;
            };
            for (Operation &op : llvm::reverse(block.without_terminator())) {
              if (auto inner = dyn_cast<FusionOp>(op)) {
                walk(inner.getBody().front(), inner);
                continue;
              }
              if (op.getNumResults() != 1)
                continue;
              Value result = op.getResult(0);
              std::pair<Value, int> key{storedAs(result), SavedTensor::Whole};
              Value activation;
              if (!set.contains(key) || held.contains(key) ||
                  readByRecomputed.contains(outside(result)) ||
                  !isCheapToRematerialize(
                      &op, [&](Value v) { return !isPersistent(outside(v)); },
                      activation) ||
                  !set.contains(
                      {storedAs(outside(activation)), SavedTensor::Whole}))
                continue;
              dropped.insert(key);
              for (Value operand : op.getOperands())
                readByRecomputed.insert(outside(operand));
            }
          };
          walk(layer.getBody().front(), FusionOp());
          for (auto key : dropped)
            set.erase(key);
        };
    rematerialize(kept.all, kept.heldAll);
    rematerialize(kept.selective, kept.heldSelective);
  }
  // recompute=op (keptByOpPolicy, as -weft-differentiate applies it): the
  // layer keeps the results of the ops the policy keeps that the backward
  // reads, directly or through the ops it recomputes from them and from the
  // layer's input; those ops (and collectives) run again. A decomposition
  // (a ring's steps and merges) is its attention: kept whole, its merged
  // output kept for what reads it, and for the ring's backward the output
  // (once) and the log-sum-exps, as in the other modes.
  for (int b = 0; b < 3; ++b)
    profile.memory[b].savedBytesOps = saved[b].bytes(saved[b].all);
  if (layer) {
    const int b = int(BlockKind::Layer);
    Block &body = layer.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    llvm::DenseSet<Operation *> kept, keptGroups;
    keptByOpPolicy(
        ops,
        [&](Value value) {
          auto type = dyn_cast<RankedTensorType>(value.getType());
          return type && isa<FloatType>(type.getElementType()) &&
                 isPersistent(value);
        },
        kept);
    for (Operation *op : kept)
      if (groupParent.count(op))
        keptGroups.insert(groupOf(op));
    auto isKept = [&](Operation *op) {
      return kept.contains(op) ||
             (groupParent.count(op) && keptGroups.contains(groupOf(op)));
    };
    // A value read inside a fusion (what an inner op's gradient reads) is
    // the fusion's to recompute: the op of the layer's body it is in.
    llvm::DenseSet<Value> needed;
    llvm::DenseSet<Operation *> neededOps;
    auto need = [&](Value value) {
      if (!needed.insert(value).second)
        return;
      if (Operation *def = value.getDefiningOp())
        if (Operation *top = body.findAncestorOpInBlock(*def))
          neededOps.insert(top);
    };
    for (Value value : backwardReads[b])
      need(value);
    for (Operation *op : llvm::reverse(ops)) {
      if (isKept(op) || !neededOps.contains(op))
        continue;
      if (auto found = recordOf.find(op); found != recordOf.end())
        profile.ops[found->second].recomputedByOps = true;
      for (Value operand : op->getOperands())
        if (!isPersistent(operand))
          need(operand);
    }
    llvm::DenseSet<std::pair<Value, int>> keptValues;
    for (Value value : needed) {
      if (auto arg = dyn_cast<BlockArgument>(value)) {
        if (arg.getOwner() == &body && arg.getArgNumber() == 0)
          keptValues.insert({value, 0});
        continue;
      }
      // A kept op keeps its results: a GEMM fused with what follows it (a
      // GELU) keeps the fusion's result, as many bytes as the GEMM's, which
      // the differentiated program keeps and recomputes the GELU from.
      Operation *top = body.findAncestorOpInBlock(*value.getDefiningOp());
      if (!top || !isKept(top))
        continue;
      for (Value result : top->getResults())
        keptValues.insert({storedAs(result), SavedTensor::Whole});
      // And what it keeps of its rows besides (a fused attention's
      // log-sum-exps, which -weft-keep-attention-statistics keeps with it).
      if (auto differentiable = dyn_cast<DifferentiableOpInterface>(top)) {
        SmallVector<SavedTensor> own;
        differentiable.getSavedForBackward(own);
        for (const SavedTensor &tensor : own)
          if (tensor.rowStatistics)
            keptValues.insert({storedAs(tensor.value), tensor.form()});
      }
    }
    // A ring kept whole hands its backward ring the output and the rows'
    // log-sum-exps (-weft-partition).
    for (Operation *group : keptGroups) {
      AttentionBlockOp step = ringLastStep.lookup(group);
      if (!step)
        continue;
      keptValues.insert({step.getLse(), 0});
      if (!ringOutputKept(group, keptValues))
        keptValues.insert({step.getResult(), 0});
    }
    profile.memory[b].savedBytesOps = saved[b].bytes(keptValues);
  }
  for (int b = 0; b < 3; ++b) {
    for (auto [attention, bytes] : gatheredKeys[b])
      profile.memory[b].gatheredKeysBytes =
          std::max(profile.memory[b].gatheredKeysBytes, bytes);
    profile.memory[b].savedBytes = saved[b].bytes(saved[b].all);
    profile.memory[b].savedBytesSelective = saved[b].bytes(saved[b].selective);
  }
  if (layer) {
    Value input = layer.getBody().front().getArgument(0);
    BlockMemory &memory = profile.memory[int(BlockKind::Layer)];
    memory.inputBytes = bytesOf(input, 0);
    memory.weightGradientReadsInput =
        weightReads[int(BlockKind::Layer)].forward.count(storedAs(input));
  }
  // Parameters: the shard each rank holds; a weight that another block also
  // reads (a tied embedding) is also counted as shared by that block.
  // The shard a rank keeps: the end of the chain of all_slices the weight
  // goes through (one per dimension it is split along). A slice an op's
  // partition made as part of its decomposition (a norm over a split
  // dimension slicing its whole weights) is where that op reads the weight,
  // not what the rank keeps.
  auto heldElements = [](Operation *param) {
    Value value = param->getResult(0);
    while (value.hasOneUse())
      if (auto slice = dyn_cast<AllSliceOp>(*value.getUsers().begin());
          slice && !isDecomposed(slice))
        value = slice.getResult();
      else
        break;
    return double(cast<RankedTensorType>(value.getType()).getNumElements());
  };
  mlir::Block &body = func.getBody().front();
  auto blockOf = [&](Operation *op) {
    if (layer && layer->isAncestor(op))
      return BlockKind::Layer;
    Operation *top = body.findAncestorOpInBlock(*op);
    if (layer && top && layer->isBeforeInBlock(top))
      return BlockKind::Head;
    return BlockKind::Embedding;
  };
  // What the inputs, constants and weights alone compute outside the
  // layers (position ids, a rotary table cut from a cached buffer, the
  // embedding lookup): -weft-split-stages rebuilds it on every stage that
  // reads it, so a weight it reads is on each of those stages.
  llvm::DenseMap<Operation *, bool> rebuilt;
  std::function<bool(Operation *)> isRebuilt = [&](Operation *op) {
    if (isa<ParameterOp, ConstantOp>(op))
      return true;
    if (op->getNumRegions() || (layer && layer->isAncestor(op)) ||
        op->getBlock() != &body)
      return false;
    auto known = rebuilt.find(op);
    if (known != rebuilt.end())
      return known->second;
    rebuilt[op] = false; // (no cycles in SSA; a guard all the same)
    bool all = llvm::all_of(op->getOperands(), [&](Value operand) {
      Operation *def = operand.getDefiningOp();
      return !def || isRebuilt(def);
    });
    rebuilt[op] = all;
    return all;
  };
  for (int b = 0; b < 3; ++b)
    for (Operation *param : parameters[b]) {
      double elements = heldElements(param);
      std::set<int> readers;
      SmallVector<Value> frontier = {param->getResult(0)};
      while (!frontier.empty()) {
        Value value = frontier.pop_back_val();
        for (OpOperand &use : value.getUses()) {
          Operation *user = use.getOwner();
          if (isa<AllSliceOp>(user)) {
            frontier.push_back(user->getResult(0));
            continue;
          }
          // What a layer takes as its first operand is the residual stream
          // (the embedding's output, for the first layer: that stage's
          // alone); any other operand every layer takes alike (a rotary
          // table, a mask): every stage with layers rebuilds it.
          if (isa<LayerOp>(user) && user->getBlock() == &body) {
            readers.insert(int(use.getOperandNumber() == 0
                                   ? BlockKind::Embedding
                                   : BlockKind::Layer));
            continue;
          }
          if (!isa<AllGatherOp>(user) && isRebuilt(user)) {
            for (Value result : user->getResults())
              frontier.push_back(result);
            continue;
          }
          // A weight stored in shards and all-gathered where it is used
          // (weft.stored_over; then perhaps over more axes): the gathered
          // copy is held while the ops that read it run.
          if (auto gather = dyn_cast<AllGatherOp>(user)) {
            BlockMemory &memory = profile.memory[int(blockOf(user))];
            memory.gatheredWeight = std::max(
                memory.gatheredWeight,
                double(cast<RankedTensorType>(gather.getResult().getType())
                           .getNumElements()));
            // (Where the partitioner puts the gather is not a reader: the
            // output layer's weight is gathered among the initializers.)
            frontier.push_back(gather.getResult());
            continue;
          }
          readers.insert(int(blockOf(user)));
        }
      }
      // A weight that its block does not read belongs to the block that
      // does: an importer puts every initializer before the layers, the
      // output layer's too, and -weft-split-stages gives each stage the
      // weights it reads. (One that layers read stays a single tensor
      // where it is, not one per layer.)
      int owner = b;
      if (!readers.empty() && !readers.count(b) &&
          !readers.count(int(BlockKind::Layer)))
        owner = *readers.begin();
      // Not trained (--freeze): held, with no gradient or optimizer state.
      const bool isFrozen =
          frozen && frozen->match(cast<ParameterOp>(param).getName());
      profile.memory[owner].parameters += elements;
      if (isFrozen)
        profile.memory[owner].frozenParameters += elements;
      // (The stage of the head holds a weight the layers read through its
      // layers: one copy.)
      for (int reader : readers)
        if (reader != owner && !(reader == int(BlockKind::Head) &&
                                 readers.count(int(BlockKind::Layer)))) {
          profile.memory[reader].sharedParameters += elements;
          if (isFrozen)
            profile.memory[reader].frozenSharedParameters += elements;
        }
    }
  for (Operation *scatter : scattersRegathered)
    if (auto found = collectiveRecords.find(scatter);
        found != collectiveRecords.end())
      profile.ops[found->second].gradientRegathered = true;
  profile.counts.reserve(profile.ops.size() * kCountFields);
  for (const OpRecord &op : profile.ops) {
    for (const OpCost *cost : {&op.forward, &op.backward.inputGradient,
                               &op.backward.weightGradient}) {
      profile.counts.push_back(cost->flops);
      profile.counts.push_back(double(cost->bytesRead));
      profile.counts.push_back(double(cost->bytesWritten));
    }
    profile.counts.push_back(double(op.fullBytes));
    profile.counts.push_back(double(op.operandBytes));
  }
  return profile;
}

OpCost planner::atMicroBatch(const OpCost &one, const OpCost &two, int64_t k) {
  OpCost cost = one;
  cost.flops = atMicroBatch(one.flops, two.flops, k);
  cost.bytesRead =
      int64_t(atMicroBatch(double(one.bytesRead), double(two.bytesRead), k));
  cost.bytesWritten = int64_t(
      atMicroBatch(double(one.bytesWritten), double(two.bytesWritten), k));
  return cost;
}

void planner::mergeVariant(ProgramProfile &merged, const ProgramProfile &kind,
                           unsigned variant) {
  const unsigned bit = variant < 32 ? 1u << variant : 0u;
  auto same = [&](const OpRecord &a, const OpRecord &b) {
    return a.name == b.name && a.block == b.block &&
           a.collective == b.collective;
  };
  const std::vector<OpRecord> &a = merged.ops, &b = kind.ops;
  const size_t n = a.size(), m = b.size();
  // The common ends, then the longest common subsequence of the middles
  // (where the layers differ: a few ring steps); middles too long to align
  // are kept whole, one after the other.
  size_t prefix = 0;
  while (prefix < n && prefix < m && same(a[prefix], b[prefix]))
    ++prefix;
  size_t suffix = 0;
  while (suffix < n - prefix && suffix < m - prefix &&
         same(a[n - 1 - suffix], b[m - 1 - suffix]))
    ++suffix;
  const size_t rows = n - prefix - suffix, cols = m - prefix - suffix;
  // (index in a or -1, index in b or -1), in order.
  std::vector<std::pair<int64_t, int64_t>> aligned;
  for (size_t i = 0; i < prefix; ++i)
    aligned.push_back({int64_t(i), int64_t(i)});
  constexpr size_t kMaxCells = size_t(1) << 22;
  if (rows * cols <= kMaxCells) {
    std::vector<uint32_t> lcs((rows + 1) * (cols + 1), 0);
    auto at = [&](size_t i, size_t j) -> uint32_t & {
      return lcs[i * (cols + 1) + j];
    };
    for (size_t i = rows; i-- > 0;)
      for (size_t j = cols; j-- > 0;)
        at(i, j) = same(a[prefix + i], b[prefix + j])
                       ? at(i + 1, j + 1) + 1
                       : std::max(at(i + 1, j), at(i, j + 1));
    size_t i = 0, j = 0;
    while (i < rows || j < cols) {
      if (i < rows && j < cols && same(a[prefix + i], b[prefix + j])) {
        aligned.push_back({int64_t(prefix + i++), int64_t(prefix + j++)});
      } else if (j == cols || (i < rows && at(i + 1, j) >= at(i, j + 1))) {
        aligned.push_back({int64_t(prefix + i++), -1});
      } else {
        aligned.push_back({-1, int64_t(prefix + j++)});
      }
    }
  } else {
    for (size_t i = 0; i < rows; ++i)
      aligned.push_back({int64_t(prefix + i), -1});
    for (size_t j = 0; j < cols; ++j)
      aligned.push_back({-1, int64_t(prefix + j)});
  }
  for (size_t k = 0; k < suffix; ++k)
    aligned.push_back({int64_t(n - suffix + k), int64_t(m - suffix + k)});

  std::vector<OpRecord> ops;
  std::vector<std::vector<double>> counts(merged.variantCounts.size() + 1);
  for (auto [i, j] : aligned) {
    if (i >= 0) {
      ops.push_back(a[size_t(i)]);
      if (j < 0)
        ops.back().variants &= ~bit;
      else
        ops.back().variants |= bit;
    } else {
      ops.push_back(b[size_t(j)]);
      ops.back().variants = bit;
    }
    for (size_t v = 0; v < counts.size(); ++v) {
      const double *from = nullptr;
      if (v + 1 < counts.size() && i >= 0)
        from = merged.variantCounts[v].data() + size_t(i) * kCountFields;
      else if (v + 1 == counts.size() && j >= 0)
        from = kind.counts.data() + size_t(j) * kCountFields;
      for (unsigned f = 0; f < kCountFields; ++f)
        counts[v].push_back(from ? from[f] : 0.0);
    }
  }
  merged.ops = std::move(ops);
  merged.variantCounts = std::move(counts);
}

bool planner::sameOps(const ProgramProfile &one, const ProgramProfile &two) {
  if (one.ops.size() != two.ops.size())
    return false;
  for (auto [a, b] : llvm::zip(one.ops, two.ops))
    if (a.name != b.name || a.block != b.block || a.collective != b.collective)
      return false;
  return true;
}

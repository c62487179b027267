//===- Pipelines.cpp - The pass pipelines Weft runs -----------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Pipelines/Pipelines.h"

#include "weft/Dialect/Sharding.h"
#include "weft/Plan/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace weft;

WeftApplyPlanOptions weft::applyPlanOptions(const plan::Plan &plan) {
  WeftApplyPlanOptions options;
  options.dp = std::max(1, plan.dp());
  options.tp = std::max(1, plan.tp());
  options.cp = std::max(1, plan.cp());
  options.ulysses = std::max(1, plan.ulysses());
  options.sp = plan.sequence_parallel();
  options.cpComm =
      plan.cp_comm() == plan::CP_COMM_ALL_GATHER ? "all-gather" : "ring";
  options.gx = std::max(1, plan.gx());
  options.gy = std::max(1, plan.gy());
  options.gz = std::max(1, plan.gz());
  return options;
}

WeftSplitStagesOptions weft::splitStagesOptions(const plan::Plan &plan) {
  WeftSplitStagesOptions split;
  split.stages = plan.pp();
  split.chunks = std::max(1, plan.virtual_stages());
  for (int32_t layers : plan.stage_layers())
    split.stageLayers +=
        (split.stageLayers.empty() ? "" : "/") + std::to_string(layers);
  return split;
}

void weft::buildPrepareModelPipeline(OpPassManager &pm, bool explainRaise) {
  pm.addPass(createWeftCanonicalize());
  pm.addPass(createCSEPass());
  WeftRaiseOptions raise;
  raise.explain = explainRaise;
  pm.addPass(createWeftRaise(raise));
  pm.addPass(createWeftCanonicalize());
  pm.addPass(createCSEPass());
  pm.addNestedPass<func::FuncOp>(createWeftMarkLayers());
}

void weft::buildPartitionPipeline(OpPassManager &pm,
                                  const WeftApplyPlanOptions &options,
                                  llvm::StringRef compress, int zeroStage) {
  pm.addNestedPass<func::FuncOp>(createWeftUnfuseProjections());
  pm.addPass(createWeftApplyPlan(options));
  pm.addPass(createWeftPropagateSharding());
  // ZeRO-3: the weights stored in blocks over the data-parallel group.
  if (zeroStage >= 3)
    pm.addPass(createWeftShardParameters());
  pm.addPass(createWeftPartition());
  WeftDeferGradientReductionOptions defer;
  defer.scatter = zeroStage >= 1;
  defer.everyMicroBatch = zeroStage >= 2;
  pm.addPass(createWeftDeferGradientReduction(defer));
  pm.addNestedPass<func::FuncOp>(createWeftOptimizeCollectives());
  pm.addPass(createWeftCanonicalize());
  // Megatron's scatter/gather: on a module cut into pipeline stages, each tp
  // rank sends its 1/tp of what a stage passes on whole, and the receiver
  // gathers it over tp (without stages, nothing to do).
  pm.addPass(createWeftSplitStageSends());
  if (!compress.empty()) {
    WeftCompressCollectivesOptions codecs;
    codecs.policy = compress.str();
    pm.addPass(createWeftCompressCollectives(codecs));
  }
}

void weft::buildCpuTargetPipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createWeftInlineLayers());
}

void weft::buildCudaKernelPipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createWeftFuseElementwise());
}

void weft::buildCudaTargetPipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createWeftInlineLayers());
  pm.addNestedPass<func::FuncOp>(createWeftScheduleCollectives());
  pm.addNestedPass<func::FuncOp>(createWeftAssignBuffers());
}

void weft::registerWeftPipelines() {
  PassPipelineRegistration<>(
      "weft-prepare-model",
      "Fold what exporters leave, raise decomposed forms, mark layers",
      [](OpPassManager &pm) { buildPrepareModelPipeline(pm); });
  PassPipelineRegistration<PartitionPipelineOptions>(
      "weft-partition-with-plan",
      "Apply a plan's degrees and partition into the rank program "
      "(-weft-unfuse-projections, -weft-apply-plan, -weft-propagate-sharding, "
      "-weft-partition, -weft-defer-gradient-reduction, "
      "-weft-optimize-collectives, -weft-canonicalize, "
      "-weft-split-stage-sends, and "
      "with compress=, -weft-compress-collectives; with zero=1, 2 or 3 the "
      "gradients are reduce-scattered, with 2 and 3 after every micro-batch, "
      "and with 3 the weights stored in blocks, -weft-shard-parameters)",
      [](OpPassManager &pm, const PartitionPipelineOptions &options) {
        WeftApplyPlanOptions apply;
        apply.dp = options.dp;
        apply.tp = options.tp;
        apply.cp = options.cp;
        apply.ulysses = options.ulysses;
        apply.sp = options.sp;
        apply.gx = options.gx;
        apply.gy = options.gy;
        apply.gz = options.gz;
        apply.loadBalance = options.loadBalance;
        apply.cpComm = options.cpComm;
        apply.planFile = options.planFile;
        buildPartitionPipeline(pm, apply, options.compress, int(options.zero));
      });
  PassPipelineRegistration<>("weft-prepare-cpu",
                             "What the CPU emitter prints: layers inlined",
                             buildCpuTargetPipeline);
  PassPipelineRegistration<>(
      "weft-cuda-kernels",
      "The kernels the CUDA backend runs, which the planner costs "
      "(-weft-fuse-elementwise)",
      buildCudaKernelPipeline);
  PassPipelineRegistration<>(
      "weft-prepare-cuda",
      "What the CUDA emitter prints, after -weft-cuda-kernels: layers "
      "inlined, collectives scheduled, buffers assigned "
      "(-weft-inline-layers, -weft-schedule-collectives, "
      "-weft-assign-buffers)",
      buildCudaTargetPipeline);
}

//===----------------------------------------------------------------------===//
// The training step
//===----------------------------------------------------------------------===//

LogicalResult weft::buildEvaluationStep(MLIRContext &context, ModuleOp module,
                                        const TrainingStepOptions &options) {
  PassManager pm(&context);
  pm.enableVerifier(options.verifyEachPass);
  // A model that computes its own loss gives it up, with its labels input.
  pm.addPass(createWeftLiftModelLoss());
  // How each input is filled, while the model's function still has only
  // its own inputs.
  if (options.assignFeeds) {
    WeftAssignFeedsOptions feeds;
    feeds.feeds.assign(options.feeds.begin(), options.feeds.end());
    pm.addPass(createWeftAssignFeeds(feeds));
  }
  // Attention within each packed document: the document ids are one more
  // input, filled as the feeds say.
  if (options.documentMask)
    pm.addPass(createWeftDocumentMask());
  // (Projections are cut while the weights are read directly; the loss
  // comes after the 16-bit forward, which it widens.)
  pm.addNestedPass<func::FuncOp>(createWeftUnfuseProjections());
  if (options.dtype != "f32") {
    WeftMixedPrecisionOptions mixed;
    mixed.compute = options.dtype;
    pm.addNestedPass<func::FuncOp>(createWeftMixedPrecision(mixed));
  }
  WeftAppendLossOptions loss;
  loss.reduction = "mean";
  loss.ignoreIndex = options.ignoreIndex;
  pm.addPass(createWeftAppendLoss(loss));
  return pm.run(module);
}

LogicalResult weft::buildTrainingStep(MLIRContext &context, ModuleOp module,
                                      const plan::Plan &plan,
                                      const TrainingStepOptions &options,
                                      FunctionType &type) {
  const bool pipelined = plan.pp() > 1;
  if (failed(buildEvaluationStep(context, module, options)))
    return failure();
  func::FuncOp func;
  for (auto candidate : module.getOps<func::FuncOp>())
    if (!func && !candidate.isExternal())
      func = candidate;
  if (!func)
    return module.emitError("the model has no function to train");
  type = func.getFunctionType();
  PassManager pm(&context);
  pm.enableVerifier(options.verifyEachPass);
  // KV heads fewer than the plan's head split are repeated before the step
  // is differentiated: the backward then reads the copy a rank holds, which
  // its forward keeps, instead of every KV head (3-D tensor parallelism
  // splits heads over gy, which must divide them).
  if (int64_t ways =
          int64_t(std::max(1, plan.tp())) * std::max(1, plan.ulysses());
      ways > 1) {
    WeftRepeatKvHeadsOptions repeat;
    repeat.ways = ways;
    pm.addNestedPass<func::FuncOp>(createWeftRepeatKvHeads(repeat));
  }
  if (pipelined) {
    pm.addPass(createWeftSplitStages(splitStagesOptions(plan)));
  }
  WeftDifferentiateOptions differentiate;
  differentiate.recompute = options.recompute;
  differentiate.scaleLoss = options.scaleLoss;
  // Frozen parameters get no gradient (and the optimizer step, below, no
  // update).
  differentiate.freeze = options.optimizer.freeze;
  pm.addPass(createWeftDifferentiate(differentiate));
  if (pipelined) {
    WeftSchedulePipelineOptions schedule;
    schedule.schedule = scheduleName(plan.schedule());
    schedule.microBatches = std::max(1, plan.num_micro_batches());
    pm.addPass(createWeftSchedulePipeline(schedule));
  }
  return pm.run(module);
}

LogicalResult weft::buildPartitionedStep(MLIRContext &context, ModuleOp module,
                                         const plan::Plan &plan,
                                         bool partitioned,
                                         const TrainingStepOptions &options) {
  const bool pipelined = plan.pp() > 1;
  {
    PassManager pm(&context);
    pm.enableVerifier(options.verifyEachPass);
    // ZeRO: the gradients are reduce-scattered and each rank updates its
    // block (the optimizer step below); ZeRO-3 stores the weights in blocks.
    if (partitioned)
      buildPartitionPipeline(pm, applyPlanOptions(plan), plan.compress(),
                             plan.zero_stage());
    // Each attention keeps its log-sum-exp for its gradient (on the
    // partitioned program: a ring's steps keep theirs already).
    WeftKeepAttentionStatisticsOptions statistics;
    statistics.recomputeAttention = options.recompute == "selective";
    pm.addPass(createWeftKeepAttentionStatistics(statistics));
    // Each stage's forward, backward and weight-gradient steps apart, and
    // their data-parallel gradient reductions once per step.
    if (partitioned && pipelined) {
      pm.addPass(createWeftSplitBackward());
      // ZeRO-1: each stage's gradients reduce-scattered, the optimizer state
      // in blocks.
      WeftDeferGradientReductionOptions defer;
      defer.scatter = plan.zero_stage() >= 1;
      defer.everyMicroBatch = plan.zero_stage() >= 2;
      pm.addPass(createWeftDeferGradientReduction(defer));
      pm.addNestedPass<func::FuncOp>(createWeftOptimizeCollectives());
      // ZeroPP: the stored weights gathered, and their gradients reduced,
      // once per block of min(p, m) micro-batches.
      if (plan.schedule() == plan::SCHEDULE_ZEROPP) {
        WeftHoldGatheredWeightsOptions hold;
        hold.block = zeroPPBlock(plan);
        pm.addPass(createWeftHoldGatheredWeights(hold));
      }
    }
    if (failed(pm.run(module)))
      return failure();
  }
  // The optimizer step, as IR: run once per step on the summed gradients.
  PassManager pm(&context);
  pm.enableVerifier(options.verifyEachPass);
  WeftBuildOptimizerOptions rule = options.optimizer;
  rule.skipNonFinite = options.scaleLoss;
  // Partitioned, each rank updates its blocks on the mesh (with pipeline
  // stages, each pipeline rank its stages' parameters); otherwise the
  // update runs once on whole tensors.
  rule.rankLocal = partitioned;
  rule.storedOver.clear();
  if (rule.rankLocal && plan.zero_stage() >= 3)
    for (const std::string &axis : zeroGroupAxes())
      rule.storedOver.push_back(axis);
  pm.addPass(createWeftBuildOptimizer(rule));
  // (A stored block's gather, cut to the gradient's block, is no collective
  // at all.)
  pm.addNestedPass<func::FuncOp>(createWeftOptimizeCollectives());
  return pm.run(module);
}

//===- Pipelines.cpp - The pass pipelines Weft runs -----------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Pipelines/Pipelines.h"

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
  options.gx = std::max(1, plan.gx());
  options.gy = std::max(1, plan.gy());
  options.gz = std::max(1, plan.gz());
  return options;
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
      "-weft-optimize-collectives, -weft-canonicalize, and "
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

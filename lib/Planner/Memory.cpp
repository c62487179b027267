//===- Memory.cpp - Memory of a pipeline stage ----------------------------===//
//
// Part of the Weft project. The model is described in docs/cost-model.md.
//
// The memory part of the cost model: per pipeline stage, the weights,
// gradients and optimizer states each ZeRO stage leaves a rank, the
// activations the schedule keeps in flight (as the rank program saves them,
// less what recomputation drops), and workspace.
//
//===----------------------------------------------------------------------===//

#include "weft/Plan/Plan.h"
#include "weft/Planner/CostModel.h"

#include "CostModelDetail.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>

using namespace weft;
using namespace weft::planner;
using namespace weft::planner::detail;

double CostModel::dataParallelShard(const plan::Plan &plan) const {
  return double(plan.dp()) * plan.cp() * plan.ulysses();
}

CostModel::StageParameters CostModel::stageParameters(const plan::Plan &plan,
                                                      int stage,
                                                      const Blocks &b) const {
  double layers = plan.stage_layers_size()
                      ? plan.stage_layers(stage)
                      : double(modelSpec.layers()) / plan.pp();
  // The shards this rank holds, as the rank program declares them, and the
  // frozen part of them.
  double params = layers * b.layer.parameters;
  double frozen = layers * b.layer.frozenParameters;
  if (stage == 0) {
    params += b.embedding.parameters;
    frozen += b.embedding.frozenParameters;
  }
  // A model-wide weight that every layer reads (rotary tables, or equal
  // initializers an exporter merged): a copy on every other stage with
  // layers.
  else if (layers > 0) {
    params += b.layer.sharedParameters;
    frozen += b.layer.frozenSharedParameters;
  }
  if (stage == plan.pp() - 1) {
    params += b.head.parameters;
    frozen += b.head.frozenParameters;
    // A weight the head shares with the embedding (tied) is a second copy
    // on another stage.
    if (plan.pp() > 1) {
      params += b.head.sharedParameters;
      frozen += b.head.frozenSharedParameters;
    }
  }
  return {params, params - frozen};
}

CostModel::StageMemory CostModel::stageMemory(const plan::Plan &plan, int s,
                                              const Blocks &b) const {
  const int p = plan.pp(), v = virtualStages(plan);
  const int m = plan.num_micro_batches();
  const double shard = dataParallelShard(plan);
  double perLayer = b.layer.savedUnder(plan.recompute());
  StageMemory mem;
  const StageParameters params = stageParameters(plan, s, b);
  mem.weights = params.held * kWeightBytes;
  mem.frozenWeights = (params.held - params.trained) * kWeightBytes;
  // ZeroPP's blocks of micro-batches (-weft-hold-gathered-weights): a
  // chunk's gathers and gradient reductions once per block.
  const bool blockwise =
      plan.zero_stage() >= 3 && shard > 1 && zeroPPBlock(plan) > 1;
  if (plan.zero_stage() >= 3 && shard > 1) {
    mem.weights /= shard;
    mem.frozenWeights /= shard;
    if (blockwise) {
      // Every gather of the stage's chunks held over a block: their whole
      // weights for the forwards and their layers' for the backwards
      // (which keep the embedding's and the head's from the forward).
      double layers = plan.stage_layers_size() ? plan.stage_layers(s)
                                               : double(modelSpec.layers()) / p;
      mem.weights += (params.held + layers * b.layer.parameters) * kWeightBytes;
    } else {
      // Two layers' gathered weights (the one running and the prefetch).
      mem.weights += 2 * b.layer.parameters * kWeightBytes;
    }
  }
  // Weights stored in shards over AxoNN's depth axis are gathered one
  // ahead (-weft-schedule-collectives): the one in use and the prefetched
  // one, at most two of the stage's largest.
  double gathered = b.layer.gatheredWeight;
  if (s == 0)
    gathered = std::max(gathered, b.embedding.gatheredWeight);
  if (s == p - 1)
    gathered = std::max(gathered, b.head.gatheredWeight);
  mem.weights += 2 * gathered * kWeightBytes;
  mem.gradients =
      params.trained * kGradBytes / (plan.zero_stage() >= 2 ? shard : 1);
  // A block's gradients are summed whole and reduced after its last
  // micro-batch: a chunk's at a time (the schedule runs a block's backwards
  // of one chunk before the next's).
  if (blockwise) {
    double most = 0;
    for (int c = 0; c < v; ++c) {
      const int vs = c * p + s;
      const double layers =
          double(chunkLayerCount(plan.stage_layers(s), v, s, p, c));
      double trained =
          v == 1 ? params.trained
                 : layers * (b.layer.parameters - b.layer.frozenParameters);
      if (v > 1 && vs == 0)
        trained += b.embedding.parameters - b.embedding.frozenParameters;
      if (v > 1 && vs == p * v - 1)
        trained +=
            b.head.parameters - b.head.frozenParameters +
            (p > 1 ? b.head.sharedParameters - b.head.frozenSharedParameters
                   : 0);
      if (v > 1 && vs > 0 && layers > 0)
        trained += b.layer.sharedParameters - b.layer.frozenSharedParameters;
      most = std::max(most, trained);
    }
    mem.gradients += most * kGradBytes;
  }
  mem.optimizer =
      params.trained * kOptimizerBytes / (plan.zero_stage() >= 1 ? shard : 1);
  // What each chunk keeps per micro-batch: its layers' saved activations,
  // what they read besides the residual stream (an attention mask: one
  // tensor per chunk's micro-batch), the embedding's on the first virtual
  // stage and the head's (and the loss's) on the last.
  llvm::SmallVector<double, 8> chunkBytes(size_t(v), 0);
  // Under ZB-H1, what each chunk keeps from its B step to its W step: what
  // W reads. (The first virtual stage sends no gradient, yet its B computes
  // the input gradients as the others' do, down to the embedding's, which
  // its W reads: -weft-split-backward.)
  llvm::SmallVector<double, 8> pastBackwardBytes(size_t(v), 0);
  const bool weightSteps = plan.schedule() == plan::SCHEDULE_ZB_H1 && p > 1;
  // A send cut over tp (-weft-split-stage-sends) is kept as its block where
  // a later step reads it, and gathered again there (-weft-split-backward):
  // a chunk's received input, and under ZB-H1 the gradient its W step reads
  // at its last layer's output.
  const int64_t cut =
      stageSendSplit(plan, trainingConfig.seq_len(), modelSpec.hidden());
  const double blockSaving =
      cut > 1 ? b.layer.inputBytes * (1 - 1.0 / double(cut)) : 0;
  for (int c = 0; c < v; ++c) {
    const int vs = c * p + s;
    const double layers =
        double(chunkLayerCount(plan.stage_layers(s), v, s, p, c));
    double &bytes = chunkBytes[size_t(c)];
    bytes = layers * perLayer;
    if (layers > 0)
      bytes += b.layer.sharedInputBytes;
    if (layers > 0 && vs > 0)
      bytes -= blockSaving;
    if (vs == 0)
      bytes += b.embedding.savedBytes;
    if (vs == p * v - 1)
      bytes += b.head.savedBytes;
    // The first stage's W also runs the embedding's whole backward, from
    // the gradient B leaves at the first layer's input.
    pastBackwardBytes[size_t(c)] =
        layers * b.layer.weightGradientReadBytes +
        (vs == 0 ? b.embedding.savedBytes + b.layer.inputBytes : 0) +
        (vs == p * v - 1 ? b.head.weightGradientReadBytes : 0) -
        (layers > 0 && vs < p * v - 1 ? blockSaving : 0) -
        (layers > 0 && vs > 0 && b.layer.weightGradientReadsInput ? blockSaving
                                                                  : 0);
  }
  // The micro-batches the schedule keeps at once (from a forward to the
  // micro-batch's last backward step), as its step list runs on this rank.
  if (weightSteps) {
    // (ZB-H1 has no chunks.)
    for (const std::array<int, 2> &count : zeroBubbleCounts(p, m, s))
      mem.activations =
          std::max(mem.activations,
                   count[0] * chunkBytes[0] + count[1] * pastBackwardBytes[0]);
  } else if (p == 1) {
    // One stage: each micro-batch's backward follows its forward.
    mem.activations = chunkBytes[0];
  } else if (std::all_of(
                 chunkBytes.begin(), chunkBytes.end(),
                 [&](double bytes) { return bytes == chunkBytes[0]; })) {
    // Chunks alike (a middle stage's): the most micro-batches in flight.
    mem.activations = mostInFlight(plan.schedule(), p, v, m, s) * chunkBytes[0];
  } else {
    for (const std::vector<int> &count :
         inFlightCounts(plan.schedule(), p, v, m, s)) {
      double kept = 0;
      for (int c = 0; c < v; ++c)
        kept += count[size_t(c)] * chunkBytes[size_t(c)];
      mem.activations = std::max(mem.activations, kept);
    }
  }
  // One layer's full activations and gradients while it runs backward;
  // under all-gather context parallelism with the K and V it gathers again
  // and their gradients' partial sums, all of the sequence long, until the
  // reduce-scatter.
  mem.workspace =
      kWorkspaceBytes + b.layer.savedBytes + 2 * b.layer.gatheredKeysBytes;
  return mem;
}

void CostModel::fillMemory(plan::Plan &plan) {
  double capacity =
      clusterSpec.gpu().hbm_gib() - trainingConfig.memory_reserve_gib();
  plan.clear_stage_memory();
  plan::MemoryBreakdown worst;
  for (int s = 0; s < plan.pp(); ++s) {
    StageMemory stage = stageMemory(plan, s, blocks(plan));
    plan::MemoryBreakdown mem;
    mem.set_weights_gib(stage.weights / kGiB);
    mem.set_frozen_weights_gib(stage.frozenWeights / kGiB);
    mem.set_gradients_gib(stage.gradients / kGiB);
    mem.set_optimizer_gib(stage.optimizer / kGiB);
    mem.set_activations_gib(stage.activations / kGiB);
    mem.set_workspace_gib(stage.workspace / kGiB);
    mem.set_total_gib(stage.total() / kGiB);
    mem.set_capacity_gib(capacity);
    *plan.add_stage_memory() = mem;
    if (mem.total_gib() > worst.total_gib())
      worst = mem;
  }
  *plan.mutable_memory() = worst;
  plan.set_fits(worst.total_gib() <= capacity);
}

double CostModel::peakMemoryBytes(const plan::Plan &plan) {
  // A stage holds no more than the one before it when it has as many layers
  // (it keeps fewer micro-batches in flight); the first and last stages also
  // hold the embedding and the output layer.
  // Under ZB-H1 (mostInFlight) a later stage keeps one micro-batch fewer
  // from forward to B, and one more whose W waits while 2p - 1 - s < m: no
  // more, unless a layer keeps more for W than for its backward (full
  // recomputation). Then, among stages of as many layers, the most is at
  // s = 2p - 1 - m or at the ends of the run.
  double peak = 0;
  const int p = plan.pp(), m = plan.num_micro_batches();
  const Blocks &b = blocks(plan);
  const bool rising =
      plan.schedule() == plan::SCHEDULE_ZB_H1 &&
      b.layer.weightGradientReadBytes > b.layer.savedUnder(plan.recompute());
  for (int s = 0; s < p; ++s) {
    const int64_t layers = plan.stage_layers(s);
    if (s > 0 && s < p - 1) {
      if (!rising && layers <= plan.stage_layers(s - 1))
        continue;
      if (rising && s != 2 * p - 1 - m && layers == plan.stage_layers(s - 1) &&
          layers == plan.stage_layers(s + 1))
        continue;
    }
    peak = std::max(peak, stageMemory(plan, s, b).total());
  }
  return peak;
}

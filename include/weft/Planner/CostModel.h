//===- CostModel.h - Time and memory of a training step ---------*- C++ -*-===//
//
// Part of the Weft project.
//
// An analytical, calibrated cost model (docs/cost-model.md). Compute comes
// from the ops' CostOpInterface applied to the program one rank runs, built
// by the partition pipeline (RankProgram.h), turned into time by a roofline
// with a GEMM efficiency curve; collectives in that IR are timed by an
// alpha-beta model per algorithm and link; the pipeline is costed by simulating
// the schedule's timeline; memory counts weights, gradients, optimizer states
// per ZeRO stage, the activations the schedule keeps in flight and workspace.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_COSTMODEL_H
#define WEFT_PLANNER_COSTMODEL_H

#include "weft/Plan/Plan.h"
#include "weft/Planner/Model.h"
#include "weft/Planner/Network.h"
#include "weft/Planner/PipelineSchedule.h"
#include "weft/Planner/RankProgram.h"
#include "weft/plan.pb.h"

#include "mlir/IR/MLIRContext.h"

#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace weft::planner {

/// What one layer (or the embedding, or the head) costs one rank for one
/// micro-batch, in seconds and bytes.
struct BlockCost {
  /// Launches block (TrainingConfig::launch_blocking): the host waits for
  /// each kernel, so no collective overlaps compute and every overlap below
  /// is exposed whole.
  bool serial = false;
  double forward = 0;        // compute
  double backwardInput = 0;  // gradients of activations
  double backwardWeight = 0; // gradients of weights
  double attentionCore = 0;  // forward of the attention core (selective)
  /// What recompute=op runs again: the forward of the ops (and the time of
  /// the collectives) OpRecord::recomputedByOps marks.
  double recomputedByOps = 0;
  double tpComm = 0;         // forward; backward repeats it
  // All-gathers of weights stored in shards (3-D tensor parallelism's gz),
  // forward; backward reduce-scatters their gradients in the same time.
  // Prefetched: only what exceeds the block's compute is exposed.
  double weightGather = 0;
  double seqComm = 0;        // Ulysses all-to-all and ring steps, exposed
  double seqCommTotal = 0;   // and the ring's sends whole, hidden or not
  /// The backward's: the all-to-alls' transposes, under all-gather context
  /// parallelism the K/V blocks gathered again and their gradients
  /// reduce-scattered (OpRecord::keysGathered), and for a ring what
  /// weft.attention_grad's partition sends, exposed: the backward ring
  /// passes K and V blocks again with the running sums of their gradients,
  /// behind the blocks' gradient steps, and sends the sums home after the
  /// last step.
  double seqCommBackward = 0;
  double seqCommBackwardTotal = 0; // and the backward ring's sends whole
  /// The backward's all-gathers of activations kept as blocks (Megatron SP:
  /// the linears' inputs, gathered again for their weight gradients), and
  /// under ZB-H1 the weight-gradient step's gathers of the output
  /// gradients it keeps as blocks (OpRecord::regathered,
  /// gradientRegathered). Not in tpComm, which the backward repeats as the
  /// forward collectives' transposes.
  double regather = 0;
  double gradientRegather = 0;
  double savedBytes = 0;     // activations kept for backward, no recompute
  double savedBytesSelective = 0;
  double savedBytesOps = 0;  // kept under recompute=op (keptByOpPolicy)
  double inputBytes = 0;     // the block's input (kept by full recompute)
  double sharedInputBytes = 0; // other activation inputs, once per micro-batch
  /// What the block keeps for backward under `mode`: everything (none), all
  /// but the attention core's (selective), its input (full).
  double savedUnder(plan::Recompute mode) const {
    return mode == plan::RECOMPUTE_FULL        ? inputBytes
           : mode == plan::RECOMPUTE_SELECTIVE ? savedBytesSelective
           : mode == plan::RECOMPUTE_OP        ? savedBytesOps
                                               : savedBytes;
  }
  /// What the weights' gradients read, kept from B to W per micro-batch
  /// under ZB-H1 (BlockMemory::weightGradientReadBytes).
  double weightGradientReadBytes = 0;
  bool weightGradientReadsInput = false; // (BlockMemory's)
  /// The kernel launch overhead (CostModel::launchTime) included in
  /// forward, backwardInput and backwardWeight: a fixed cost that a smaller
  /// problem does not shrink (CostModel::relativeWorkBound).
  double launches = 0;
  double flops = 0;          // forward FLOPs executed
  double linearForward = 0;  // forward time of the linear layers
  /// Bytes one rank sends in the block's forward collectives, counted like
  /// NCCL's ring algorithms (the in-process communicator counts the same).
  double commBytes = 0;
  /// Parameters (elements) the rank holds for the block, and those of them
  /// another block also reads (a tied embedding's table, in the head).
  double parameters = 0;
  double sharedParameters = 0;
  /// The part of each that the training config freezes (BlockMemory).
  double frozenParameters = 0;
  double frozenSharedParameters = 0;
  /// The largest weight the block gathers from its stored shards before
  /// use (elements of the gathered form; BlockMemory::gatheredWeight).
  double gatheredWeight = 0;
  /// K and V gathered over cp for one attention (all-gather context
  /// parallelism), bytes (BlockMemory::gatheredKeysBytes).
  double gatheredKeysBytes = 0;
};

class CostModel {
public:
  /// `source` builds the model's IR; without one, the cost model builds the
  /// transformer that `model` describes (buildTransformer).
  CostModel(plan::ModelSpec model, plan::Cluster cluster,
            plan::TrainingConfig training, ModelSource source = {});
  ~CostModel();

  const plan::ModelSpec &model() const { return modelSpec; }
  const plan::Cluster &cluster() const { return clusterSpec; }
  const plan::TrainingConfig &training() const { return trainingConfig; }

  /// Why `plan` cannot run (a shape it does not divide, more GPUs than the
  /// cluster has, an unknown combination), or "" when it can.
  std::string checkPlan(const plan::Plan &plan) const;

  /// Fills `plan`'s stage_layers (when empty), time, memory, throughput and
  /// MFU. With `timeline`, also returns the simulated pipeline. The plan must
  /// pass checkPlan.
  void evaluate(plan::Plan &plan, std::vector<TimelineEvent> *timeline = nullptr);

  /// Fills `plan`'s step_comm: the bytes one rank sends in a training step,
  /// counted on the step weft train builds for the plan
  /// (RankProgramBuilder::buildTrainingStep), or why not in its `missing`.
  /// Builds and differentiates a program: for the plans a user evaluates,
  /// not for the search.
  void countStepCommunication(plan::Plan &plan);

  /// Peak memory per GPU in bytes (the worst stage) without simulating;
  /// stage_layers must be set.
  double peakMemoryBytes(const plan::Plan &plan);

  /// The part of stepLowerBound that ZeRO and data parallelism do not
  /// change: each stage's computation and the pipeline's fill and drain.
  /// Recomputation only adds to it.
  double workLowerBound(const plan::Plan &plan);

  /// A lower bound on workLowerBound for every schedule, virtual-stage count
  /// and stage boundaries of `plan`'s other fields (the layers' work split
  /// evenly over the stages: the slowest does at least the average; no
  /// fill or drain; the plan's own ZeRO stage and recomputation).
  double averageWorkBound(const plan::Plan &plan);

  /// True if the rank programs that cost `plan` are already measured.
  bool isMeasured(const plan::Plan &plan) const;

  /// For a context-parallel plan whose programs are not measured yet: a
  /// lower bound on workLowerBound from a measured plan that differs only in
  /// a smaller cp of at least 2, without building a program. The two
  /// programs have the same kinds of ops (a ring of fused attention
  /// blocks), and splitting the sequence c/c' times more splits each op's
  /// work no more than that: its flops, its activation bytes and its
  /// tensor-parallel bytes shrink by c/c'; its weights, kernel launches and
  /// latencies do not; a ring step's merge runs c times on 1/c of the
  /// output. So the relative's ops are costed op by op at c'/c of their
  /// counts (relativeBlocks) with their kernel counts kept: at least as
  /// many kernels run (the same ops, and c steps of the ring instead of c'),
  /// each no larger, and a smaller kernel is no more efficient (the GEMM
  /// efficiency curve, the launch overhead). The ring's sends are left out.
  /// Beyond the average over stages, the slowest stage holds at least
  /// ceil(layers / pp) layers. 0 when no such plan is measured.
  double relativeWorkBound(const plan::Plan &plan);

  /// A lower bound on the step time that is cheap to compute (no bubble
  /// beyond the pipeline's fill and drain); returns early once it reaches
  /// `stopAt`.
  double stepLowerBound(const plan::Plan &plan,
                        double stopAt = std::numeric_limits<double>::infinity());

  /// Balanced stage boundaries: layers per pipeline stage minimizing the
  /// slowest stage, over the layers' times with the embedding on the first
  /// stage and the output layer on the last (an exact min-max contiguous
  /// partition: binary search on the bound, greedy packing). With
  /// interleaved chunks (v > 1) whose layers do not divide evenly, each rank
  /// then gets at least one layer per chunk (the first and last rank one
  /// fewer), as weft::chunkLayers lays them out.
  std::vector<int32_t> balanceStages(const plan::Plan &plan);

  /// Costs of one layer, the embedding and the head for the plan's shapes.
  const BlockCost &layerCost(const plan::Plan &plan);
  const BlockCost &embeddingCost(const plan::Plan &plan);
  const BlockCost &headCost(const plan::Plan &plan);

  /// The program one rank runs for `plan` (one layer of the repeated kind):
  /// the IR the cost model costs, built with the plan's dp (the costed one
  /// is built with dp = 1: a rank's program does not depend on dp beyond
  /// the batch it gets). Null with `error` set if it cannot be built.
  mlir::OwningOpRef<mlir::ModuleOp> rankProgram(const plan::Plan &plan,
                                                std::string &error);
  /// rankProgram, printed (for --print-rank-ir).
  std::string rankProgramText(const plan::Plan &plan);
  /// The step lists of `plan`'s pipeline schedule, as the cost model times
  /// them (ZB-H1's weight gradients where its stage times put them). The
  /// plan must pass checkPlan.
  PipelineSchedule pipelineSchedule(const plan::Plan &plan);
  /// Why the rank program of `plan` cannot be built, or "".
  std::string programError(const plan::Plan &plan);
  /// True if the cost model costs the model's own IR (an import), false if
  /// it costs the transformer its ModelSpec describes.
  bool costsOwnModel() const { return ownModel; }
  /// Builds every rank program at its exact sizes instead of deriving a
  /// family's members from its corners (for tests; slower).
  void setExactPrograms(bool exact) { exactPrograms = exact; }

  /// What costing has done so far: rank programs built and measured, and
  /// the time that took.
  struct Statistics {
    int64_t programs = 0;
    double programSeconds = 0;
    /// Plan shapes (micro-batch, tp, ulysses, cp, sp) costed from them.
    int64_t shapes = 0;
    double shapeSeconds = 0;
  };
  const Statistics &statistics() const { return stats; }

  /// Time of a collective of `bytes` (the full, gathered size for all_gather
  /// and reduce_scatter) over a group of `size` ranks placed `stride` apart.
  double collectiveTime(CollectiveKind kind, double bytes, int64_t size,
                        int64_t stride) const;

  /// The codec the plan's compression policy gives a collective over `axes`
  /// (codecForAxes, which -weft-compress-collectives applies too).
  static CollectiveCodec codecFor(const plan::Plan &plan,
                                  llvm::ArrayRef<std::string> axes);
  /// Bytes of `bytes` in elements of `width` bytes as `codec` sends them.
  static double wireBytes(double bytes, double width, CollectiveCodec codec);
  /// Time to encode what a collective of `kind` sends (`bytes` raw, `wire`
  /// encoded) and decode what it receives: memory-bound passes, two per
  /// phase (an all-reduce has two phases); none when the codec does not
  /// narrow the data (`wire` >= `bytes`: bf16 on bf16).
  double codecTime(CollectiveKind kind, double bytes, double wire,
                   CollectiveCodec codec) const;
  /// The data-parallel gradient group's axes: dp, with cp and ulysses (whose
  /// ranks hold the same weights) where the plan has them.
  static std::vector<std::string> gradientAxes(const plan::Plan &plan);
  /// The codec the plan's compression policy gives the gradient group
  /// (none without a policy, without building the axes: the search asks
  /// once per candidate).
  static CollectiveCodec gradientCodec(const plan::Plan &plan);

private:
  struct Blocks {
    BlockCost layer, embedding, head;
    /// For a model whose layers differ (local and global attention): each
    /// variant's layer (RankProgramBuilder::layerVariants), of which
    /// `layer` is the weighted mean. Empty for a model of one kind.
    std::vector<BlockCost> layerKinds;
    std::string error;
  };
  const Blocks &blocks(const plan::Plan &plan);
  /// Measured profiles with weights whose weighted sums are a rank
  /// program's counts (every count of a program is a weighted sum of
  /// theirs).
  using ProfileTerms =
      llvm::SmallVector<std::pair<const ProgramProfile *, double>, 8>;
  /// The program of `shape` at `microBatch` from programs of that shape
  /// (at micro-batches 1 and 2, or built at `microBatch` when its ops
  /// depend on the batch).
  /// Builds the rank program of `shape` at `microBatch` and profiles it.
  bool measure(const ProgramShape &shape, int64_t microBatch,
               ProgramProfile &profile, std::string &error);
  bool exactProfile(const ProgramShape &shape, int64_t microBatch,
                    ProfileTerms &terms, std::string &error);
  /// The program of `plan` from its family's corners (see CostModel.cpp),
  /// or false when that does not apply.
  bool familyProfile(const plan::Plan &plan, ProfileTerms &terms);
  /// Costs the program whose counts are `terms`' weighted sum, each count
  /// that grows with the tokens times `scale` (1: the program itself), as
  /// `plan` runs it; sets byDp when it communicates over dp. A `ring`
  /// other than plan.cp() bounds the exposed sends of a ring that long
  /// instead (relativeBlocks). A `variant` >= 0 costs the counts of the
  /// programs that keep a layer of that variant (their variantCounts)
  /// instead of the weighted mean.
  void costProfile(const plan::Plan &plan, const ProfileTerms &terms,
                   double scale, int64_t ring, Blocks &result, bool &byDp,
                   int variant = -1);
  /// relativeWorkBound's blocks for context-parallel `plan`: a measured
  /// relative with a shorter ring, costed at the plan's share of the
  /// tokens; null when none is measured (or its program depends on dp).
  const Blocks *relativeBlocks(const plan::Plan &plan);
  /// Time of one op's work: a roofline with the GPU's efficiency curves,
  /// plus its kernels' launch overhead.
  double opTime(const OpCost &cost) const;
  /// The launch-overhead part of opTime: the kernels' fixed cost.
  double launchTime(const OpCost &cost) const;
  double dataParallelShard(const plan::Plan &plan) const;
  /// The parameters (elements) a rank of `stage` holds, and those of them
  /// it trains (all but what the training config freezes): the trained
  /// ones have gradients, optimizer state and a gradient reduction.
  struct StageParameters {
    double held = 0, trained = 0;
  };
  StageParameters stageParameters(const plan::Plan &plan, int stage,
                                  const Blocks &blocks) const;
  struct StageTimes {
    std::vector<double> forward, backward, weight; // per stage, per chunk
    /// ZeRO-3 per micro-batch and chunk: the parameter all-gathers (forward
    /// and backward) and gradient reduce-scatter, and the part of them that
    /// compute does not hide (already inside forward and backward).
    std::vector<double> shardComm, shardExposed;
    /// ZeRO-3: the bytes one rank sends in them per micro-batch and chunk.
    std::vector<double> shardBytes;
    double p2p = 0;
  };
  /// Every virtual stage's times, or only pipeline rank `onlyRank`'s (the
  /// others left 0).
  void stageTimes(const plan::Plan &plan, StageTimes &times, int onlyRank = -1);
  StageTimes scratchTimes;
  double simulate(const plan::Plan &plan, const StageTimes &times,
                  std::vector<TimelineEvent> *timeline);
  std::map<std::vector<double>, double> simulationCache;
  struct StageMemory {
    double weights = 0, gradients = 0, optimizer = 0, activations = 0,
           workspace = 0;
    /// The part of `weights` that is not trained.
    double frozenWeights = 0;
    double total() const {
      return weights + gradients + optimizer + activations + workspace;
    }
  };
  StageMemory stageMemory(const plan::Plan &plan, int stage,
                          const Blocks &blocks) const;
  void fillMemory(plan::Plan &plan);

  plan::ModelSpec modelSpec;
  plan::Cluster clusterSpec;
  plan::TrainingConfig trainingConfig;
  std::unique_ptr<mlir::MLIRContext> context;
  std::unique_ptr<RankProgramBuilder> programs;
  bool ownModel = false;
  struct ShapeProfiles {
    ProgramProfile one, two;
    bool affine = false;
    std::map<int64_t, ProgramProfile> exact;
    std::string error;
  };
  std::map<ProgramShape, ShapeProfiles> exactCache;
  struct FamilyKey {
    bool tp, ulysses;
    int64_t cp;
    bool sp;
    std::string compress;
    bool cpGather = false;
    bool operator<(const FamilyKey &o) const {
      return std::tie(tp, ulysses, cp, sp, compress, cpGather) <
             std::tie(o.tp, o.ulysses, o.cp, o.sp, o.compress, o.cpGather);
    }
  };
  struct Family {
    std::vector<ProgramProfile> corners;
    bool valid = false;
  };
  std::map<FamilyKey, Family> familyCache;
  bool exactPrograms = false;
  Statistics stats;
  std::vector<double> scratchCounts;
  /// stageTimes' and workLowerBound's chunkKindCounts.
  std::vector<double> scratchKindCounts;
  /// (micro-batch, tp, ulysses, cp, sp, dp, compression policy): dp is 0
  /// for the programs
  /// that have no collective over dp in forward (their costs do not
  /// depend on it), which are most.
  /// (mbs, tp, ulysses, cp, sp, dp when the program depends on it, the
  /// compression policy as its index in `policyNames`, the 3-D grid's gx,
  /// gy, gz or zeros, whether cp gathers K and V): integers, compared many
  /// times per candidate.
  using BlockKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int64_t,
                              int64_t, int64_t, int64_t, int64_t, bool>;
  BlockKey blockKey(const plan::Plan &plan) const;
  static FamilyKey familyKey(const plan::Plan &plan);
  mutable std::vector<std::string> policyNames;
  std::map<BlockKey, Blocks> cache;
  /// relativeBlocks' answers, by the plan's key (no entry: not yet; a null
  /// one: no relative).
  std::map<BlockKey, std::unique_ptr<Blocks>> relativeCache;
  std::set<BlockKey> dpDependent;
  BlockKey lastKey;
  bool lastDpDependent = false;
  const Blocks *lastBlocks = nullptr;
  /// The layers of each kind in each of the plan's pp x v model chunks (in
  /// its stage_layers, as weft::chunkLayers lays them out), at
  /// counts[vs * kinds + k], kinds as `b.layerKinds` (one kind, the mean
  /// layer, when it is empty); returns the number of kinds.
  size_t chunkKindCounts(const plan::Plan &plan, const Blocks &b,
                         std::vector<double> &counts) const;
  std::map<std::tuple<int, int, int, int64_t, int64_t, std::vector<int64_t>>,
           std::vector<int32_t>>
      stageCache;
};

/// The bytes of the activations one rank sends to the next pipeline stage
/// for one micro-batch on one chunk: its block of the residual stream (the
/// micro-batch x the sequence over cp, ulysses and, with Megatron SP, tp x
/// hidden) in bf16, cut stageSendSplit ways.
double stageActivationBytes(const plan::Plan &plan, int64_t sequenceLength,
                            int64_t hidden);

/// How many ways -weft-split-stage-sends cuts a rank's block of what a stage
/// sends on: tp without Megatron SP (whose block is already cut over tp)
/// when tp divides the block's sequence, hidden or micro-batch dimension;
/// otherwise 1.
int64_t stageSendSplit(const plan::Plan &plan, int64_t sequenceLength,
                       int64_t hidden);

/// True if a ring over the sequence of `model` (`seq` positions) takes the
/// load-balanced layout: -weft-apply-plan's rule (weft::ringNeedsLoadBalance)
/// for a decoder, whose layers are causal; layers of two kinds (a window on
/// some) keep it for the global ones.
bool ringLoadBalanced(const plan::ModelSpec &model, int64_t seq);

/// A plan written for `--evaluate` (weft::parsePlanSpec's form) with what the
/// text leaves out filled in from the cluster and the batch: dp takes the
/// GPUs the other degrees leave, m the micro-batches of the global batch.
llvm::Expected<plan::Plan> parsePlanSpec(llvm::StringRef text,
                                         const CostModel &model);

} // namespace weft::planner

#endif // WEFT_PLANNER_COSTMODEL_H

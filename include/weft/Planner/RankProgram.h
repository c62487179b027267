//===- RankProgram.h - The program the cost model costs ---------*- C++ -*-===//
//
// Part of the Weft project.
//
// The planner costs the program a rank runs, built by the same passes that
// `weft compile` runs: the model (a built-in transformer or an import) with
// one layer of its repeated kind, in the training dtype, with its
// cross-entropy loss, partitioned by the partition pipeline under the plan's
// degrees. What the cost model then reads of it is a ProgramProfile: every
// op's cost, backward cost and collective facts, and what each block saves
// for backward, all from op interfaces.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_RANKPROGRAM_H
#define WEFT_PLANNER_RANKPROGRAM_H

#include "weft/Dialect/WeftInterfaces.h"
#include "weft/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace weft::planner {

/// Where the model's IR comes from.
struct ModelSource {
  /// Builds the model's forward program (f32, layers marked with weft.layer)
  /// for a batch and sequence length, or returns null when it cannot.
  std::function<mlir::OwningOpRef<mlir::ModuleOp>(mlir::MLIRContext &context,
                                                  int64_t batch, int64_t seq)>
      build;
  /// For a model built from its spec (not a file): the same with at most
  /// `layers` repeated layers, for a training step that needs more of them
  /// than `build` gives (a pipeline's chunks). Null for a file's model.
  std::function<mlir::OwningOpRef<mlir::ModuleOp>(
      mlir::MLIRContext &context, int64_t batch, int64_t seq, int64_t layers)>
      buildLayers;
  /// The one batch it builds, for a model whose batch is static (an export
  /// without a dynamic batch axis, a .mlir module). A rank's micro-batch m
  /// is then this batch split over B / m data-parallel ranks.
  std::optional<int64_t> staticBatch;
  explicit operator bool() const { return bool(build); }
};

/// What a rank program depends on besides its micro-batch.
struct ProgramShape {
  int64_t dp = 1, tp = 1, cp = 1, ulysses = 1;
  bool sp = false;
  /// K and V all-gathered over cp (plan::CP_COMM_ALL_GATHER), not a ring.
  bool cpGather = false;
  /// The plan's compression policy (plan::Plan::compress): the program's
  /// collectives carry its codecs.
  std::string compress;
  /// AxoNN's 3-D tensor-parallel grid (plan::Plan::gx, gy, gz).
  int64_t gx = 1, gy = 1, gz = 1;
  static ProgramShape of(const plan::Plan &plan, int64_t dp);
  bool operator<(const ProgramShape &other) const {
    return std::tie(dp, tp, cp, ulysses, sp, cpGather, compress, gx, gy, gz) <
           std::tie(other.dp, other.tp, other.cp, other.ulysses, other.sp,
                    other.cpGather, other.compress, other.gx, other.gy,
                    other.gz);
  }
};

/// Builds rank programs: the model at a batch (cached), cut to one layer of
/// its repeated kind, prepared for a training step and partitioned.
class RankProgramBuilder {
public:
  RankProgramBuilder(mlir::MLIRContext &context, ModelSource source,
                     plan::TrainingConfig training);

  /// The program one rank runs for `shape` at micro-batch `microBatch`
  /// (the model built at batch microBatch x dp; a static-batch model at its
  /// batch, with dp = batch / microBatch), or null with `error` set.
  ///
  /// The program keeps one of the model's repeated layers, which stands for
  /// all of them. Where they differ in their attention's sliding window
  /// (Gemma 2 and 3: local layers with one, global layers without), the
  /// program of `variant` keeps a layer with the windows of the model's
  /// variant-th kind of layer (layerVariants).
  mlir::OwningOpRef<mlir::ModuleOp> build(const ProgramShape &shape,
                                          int64_t microBatch,
                                          std::string &error,
                                          size_t variant = 0);
  /// The fraction of the repeated layers that each variant of build stands
  /// for, in the order of the layers' first appearance: {1} for a model
  /// whose layers attend alike. Known once a program is built (empty
  /// before).
  llvm::ArrayRef<double> layerVariants() const { return variantWeights; }
  /// Each repeated layer's variant, in program order (the order pipeline
  /// stages take them): empty for a model whose layers attend alike.
  llvm::ArrayRef<uint32_t> layerVariantSequence() const {
    return variantWeights.size() > 1 ? llvm::ArrayRef<uint32_t>(layerVariant)
                                     : llvm::ArrayRef<uint32_t>();
  }
  /// Whether the model has programs at `microBatch` (a static-batch model
  /// only at divisors of its batch); if not, why in `error`.
  bool hasMicroBatch(int64_t microBatch, std::string &error) const;

  /// The training step weft train builds for `plan` at its micro-batch,
  /// the model's repeated layers cut to the first `layers` (0: all of
  /// them); with pp > 1, cut to `layers` in each of the pp x v model chunks
  /// (0: the plan's stage_layers), in stages under the plan's schedule:
  /// the loss, the backward under the plan's recomputation, the step
  /// partitioned under the plan (ZeRO stage included), its gradient
  /// reduction and the optimizer step (AdamW, gradients clipped at norm 1),
  /// computed in the training dtype from f32 weights; the parameters the
  /// training config freezes get no gradient and no update. Null with `error`
  /// set when it cannot be built.
  mlir::OwningOpRef<mlir::ModuleOp>
  buildTrainingStep(const plan::Plan &plan, int64_t layers, std::string &error);

private:
  mlir::OwningOpRef<mlir::ModuleOp> model(int64_t batch, size_t variant,
                                          std::string &error);

  mlir::MLIRContext &context;
  ModelSource source;
  plan::TrainingConfig training;
  std::map<std::pair<int64_t, size_t>, mlir::OwningOpRef<mlir::ModuleOp>>
      models;
  /// Each variant's windows, one per attention of a layer in walk order
  /// (none: the attention has no window), and the fraction of the layers
  /// that have them.
  std::vector<llvm::SmallVector<std::optional<uint64_t>>> variantWindows;
  std::vector<double> variantWeights;
  std::vector<uint32_t> layerVariant;
};

/// Counts the bytes one rank sends in a training step built by
/// RankProgramBuilder::buildTrainingStep (NCCL ring counts of its
/// collectives, as encoded), by function and, in the step's function, by
/// block: its layers' forward and backward (summed), what runs before the
/// first layer, between the layers' forward and backward, and after. The
/// step total is left to the caller (it depends on the layers cut away).
/// `layers`, if given, gets the number of forward layers in the step.
plan::StepCommunication countStepCommunication(mlir::ModuleOp step,
                                               int64_t *layers = nullptr);

/// Counts, per pipeline rank, the bytes one of its ranks sends in a
/// pipelined training step built by RankProgramBuilder::buildTrainingStep:
/// the collectives of each forward, backward and weight-gradient step of its
/// schedule (weft.pipeline's step lists), the activations and gradients its
/// sends carry (their wire bytes under the pipeline's codec; also in `p2p`),
/// each chunk's gradient reduction once, and its optimizer step. Fails with
/// `error` set when the module is not a scheduled pipeline.
mlir::LogicalResult
countPipelinedStepCommunication(mlir::ModuleOp step,
                                std::vector<int64_t> &perRank,
                                std::vector<int64_t> &p2p, std::string &error);

/// The blocks of a rank program: the ops before its (one) transformer
/// layer, the layer, the ops after it.
enum class BlockKind { Embedding = 0, Layer = 1, Head = 2 };

/// Which parallel dimension a collective serves, for the time breakdown and
/// the overlap rules: tensor parallelism (its group spans "tp"), the ring
/// of context parallelism (a permute over "cp"), other sequence parallelism
/// (Ulysses' all-to-all, gathers over cp).
/// What a collective is for: tensor parallelism's activations, a ring's
/// K/V steps, Ulysses' all-to-alls, or the all-gather of a weight stored in
/// shards (3-D tensor parallelism's gz axis), which does not depend on the
/// activations and is prefetched behind compute.
enum class CommClass { TensorParallel, Ring, Sequence, WeightGather };

/// One op of a rank program, as the cost model reads it.
struct OpRecord {
  OpRecord(BlockKind block, mlir::OperationName name)
      : block(block), name(name) {}
  BlockKind block = BlockKind::Embedding;
  /// Which op it is (profiles of one shape at two batches have the same).
  mlir::OperationName name;
  bool collective = false;
  // Computation (collective == false).
  OpCost forward;
  BackwardCost backward;
  bool attentionCore = false;
  /// A fused attention step of a ring (its time hides the ring's sends).
  bool ringStep = false;
  // Communication (collective == true).
  CollectiveKind kind = CollectiveKind::AllReduce;
  CommClass commClass = CommClass::TensorParallel;
  int64_t group = 1, stride = 1;
  /// The mesh axes of the group (MeshAxes bits), to place it on another
  /// mesh of the same axes.
  unsigned axes = 0;
  /// The operand's bytes, and the full (gathered) size the time model
  /// takes; the bytes one rank sends follow from the first and the group
  /// (collectiveBytesSent).
  int64_t operandBytes = 0, fullBytes = 0;
  /// The operand's element width in bytes, and whether it is a float (what
  /// a compression codec applies to).
  int64_t elementBytes = 0;
  bool floatOperand = false;
  /// For a ring's send (CommClass::Ring), what the attention steps read it
  /// as, which decides what the training step's backward sends for it
  /// (weft.attention_grad partitioned over cp): keys or values are
  /// all-gathered and their gradients reduce-scattered, a mask is
  /// all-gathered, positions are computed again.
  enum class RingRole { KeyValue, Mask, Positions } ringRole = RingRole::Mask;
  /// For a model whose layers differ (ProgramProfile::variantCounts): the
  /// variants whose program has the op, one bit each (a windowed layer's
  /// ring skips steps a full one takes); every bit otherwise.
  unsigned variants = ~0u;
  /// An all-gather over cp of the keys or values an attention reads whole
  /// (all-gather context parallelism): the forward keeps the blocks, so the
  /// backward gathers them again and reduce-scatters their gradients.
  bool keysGathered = false;
  /// How the collective encodes what it sends (its codec in the IR).
  CollectiveCodec codec = CollectiveCodec::none;
  /// An all-gather of an activation that a backward reads gathered: the
  /// rank keeps the block and the backward gathers it again (Megatron SP: a
  /// linear's input, for its weight gradient).
  bool regathered = false;
  /// A reduce-scatter of a result whose gradient a weight gradient reads:
  /// the backward gathers the gradient (the scatter's transpose), and a
  /// weight-gradient step split from it (ZB-H1) gathers it again from the
  /// block it keeps.
  bool gradientRegathered = false;
  /// Recomputed in backward under recompute=op: not kept by the policy, and
  /// read by the backward or by another op it recomputes.
  bool recomputedByOps = false;
};

/// The partition pipeline's mesh axes as bits. Its meshes are (dp, cp,
/// ulysses, tp) and, with AxoNN's 3-D tensor parallelism, (dp, gz, gy, gx):
/// both are the order dp, gz, cp, ulysses, gy, gx, tp with the unused axes
/// of size 1.
enum MeshAxes : unsigned {
  kDpAxis = 1,
  kCpAxis = 2,
  kUlyssesAxis = 4,
  kTpAxis = 8,
  kGxAxis = 16,
  kGyAxis = 32,
  kGzAxis = 64,
  /// The axes of one model replica's tensor parallelism.
  kTensorAxes = kTpAxis | kGxAxis | kGyAxis | kGzAxis
};

/// The sizes of the mesh axes (1 for an axis a mesh does not have).
struct AxisSizes {
  int64_t dp = 1, cp = 1, ulysses = 1, tp = 1, gx = 1, gy = 1, gz = 1;
  static AxisSizes of(const plan::Plan &plan);
};

/// The bit of a mesh axis by name (0 for pp and unknown names).
unsigned meshAxisBit(llvm::StringRef axis);

/// The size of a group over `axes` on a mesh of the given sizes, and the
/// distance between its consecutive ranks.
int64_t groupSize(unsigned axes, const AxisSizes &sizes);
int64_t groupStride(unsigned axes, const AxisSizes &sizes);

/// What a block keeps for backward and holds as weights, in bytes/elements.
struct BlockMemory {
  /// Activations saved for backward without recomputation, and with
  /// selective recomputation (the attention core recomputed from its
  /// inputs).
  double savedBytes = 0, savedBytesSelective = 0;
  /// And under recompute=op (keptByOpPolicy): the policy's kept results that
  /// the backward reads, directly or through what it recomputes, and the
  /// layer's input (the embedding and head keep what they keep without
  /// recomputation).
  double savedBytesOps = 0;
  /// The layer's input, which full recomputation keeps.
  double inputBytes = 0;
  /// What the trained weights' gradients read (getGradientReads): the
  /// gradients that reached the results of ops with trained weights, a
  /// norm's normalized input, and the forward values they read (a linear's
  /// input), kept since the forward or recomputed by the backward. Under a
  /// schedule with weight-gradient steps (ZB-H1) this is what a
  /// micro-batch keeps from its B step to its W step, whatever the
  /// recomputation (a recomputed value is as large as a kept one).
  double weightGradientReadBytes = 0;
  /// Whether the weights' gradients read the block's input (a post-norm
  /// layer's first linear does; a pre-norm one reads the norm's output).
  bool weightGradientReadsInput = false;
  /// Activations the layers read besides the residual stream (an attention
  /// mask): one tensor all layers' backward reads, kept once per micro-batch.
  double sharedInputBytes = 0;
  /// Parameters (elements) this rank holds for the block, and those of them
  /// that another block also uses (a tied embedding, in the head; a weight
  /// outside the layers that they read, in the layer).
  double parameters = 0, sharedParameters = 0;
  /// The part of each that `frozen` (profileProgram) names: not trained.
  double frozenParameters = 0, frozenSharedParameters = 0;
  /// The largest weight the block all-gathers from the shards it is stored
  /// in before using it (weft.stored_over, AxoNN's depth axis), in elements
  /// of its gathered form; 0 when it gathers none.
  double gatheredWeight = 0;
  /// Under all-gather context parallelism, the bytes of the K and V one
  /// attention reads gathered over cp (OpRecord::keysGathered), the most of
  /// any attention in the block: working memory while it runs, which its
  /// backward needs again with the partial sums of their gradients.
  double gatheredKeysBytes = 0;
};

/// The counts of an op that vary with sizes, in the order ProgramProfile
/// lays them out.
enum CountField : unsigned {
  kForwardFlops,
  kForwardRead,
  kForwardWritten,
  kInputGradientFlops,
  kInputGradientRead,
  kInputGradientWritten,
  kWeightGradientFlops,
  kWeightGradientRead,
  kWeightGradientWritten,
  kFullBytes,
  kOperandBytes,
  kCountFields
};

struct ProgramProfile {
  std::vector<OpRecord> ops;
  BlockMemory memory[3];
  /// ops[i]'s counts at counts[i * kCountFields + field]: a weighted sum of
  /// profiles is a sum of these arrays.
  std::vector<double> counts;
  /// For a model whose layers differ (RankProgramBuilder::layerVariants):
  /// each variant's counts, of the program that keeps a layer of that
  /// variant (the ops are the same; `counts` is their weighted sum). Empty
  /// otherwise.
  std::vector<std::vector<double>> variantCounts;
};

/// Reads `rankProgram` (from RankProgramBuilder) through the op interfaces.
/// The parameters whose names `freeze` matches (a regex, as weft train's
/// --freeze; empty: none) are counted as frozen as well as held.
ProgramProfile profileProgram(mlir::ModuleOp rankProgram,
                              llvm::StringRef freeze = {});

/// True if the two profiles have the same ops, block by block: the program
/// of one shape at two batches, whose counts are then affine in the batch
/// (weights do not grow with it, the rest grows linearly).
bool sameOps(const ProgramProfile &one, const ProgramProfile &two);

/// Adds `kind`, the profile of variant `variant` of a model whose layers
/// differ, to `merged` (variants 0 .. variant - 1, their counts in its
/// variantCounts): ops of both, in order, are one op; an op of one only is
/// kept, with zero counts in the variants that lack it and its `variants`
/// bits saying which have it.
void mergeVariant(ProgramProfile &merged, const ProgramProfile &kind,
                  unsigned variant);

/// A count at micro-batch `k` from its values at micro-batches 1 and 2.
inline double atMicroBatch(double one, double two, int64_t k) {
  return one + double(k - 1) * (two - one);
}
/// An op's cost at micro-batch `k` from its costs at 1 and 2.
OpCost atMicroBatch(const OpCost &one, const OpCost &two, int64_t k);

} // namespace weft::planner

#endif // WEFT_PLANNER_RANKPROGRAM_H

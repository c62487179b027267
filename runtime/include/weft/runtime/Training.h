//===- Training.h - A training step on a rank, and its host side -*- C++
//-*-===//
//
// Part of the Weft project.
//
// What `weft train` and the programs `weft compile --train` generates share:
// the token file and the windows cut from it, the learning-rate schedule,
// the optimizer step's scalar arguments, and one rank's training step (its
// micro-batches, their sum, and the deferred gradient reduction). The
// functions a rank runs are given: interpreted by `weft train`, compiled in
// a generated program.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_TRAINING_H
#define WEFT_RUNTIME_TRAINING_H

#include "weft/runtime/Checkpoint.h"
#include "weft/runtime/Pipeline.h"
#include "weft/runtime/Program.h"

#include "absl/status/statusor.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace weft::rt {

/// Reads a token file: a C-order .npy of uint16, uint32, int32 or int64, or
/// raw little-endian words of `rawType` (u16, u32, i32 or i64).
absl::StatusOr<std::vector<int64_t>>
readTokenFile(const std::string &path, const std::string &rawType = "u16");

/// The token stream a run reads: one file, or Megatron-LM's blend of
/// several (--data-path "0.3 A 0.7 B"). A single file's windows are
/// consecutive through it. In a blend, each row of a window (one sequence)
/// comes from the dataset whose count of rows so far falls furthest below
/// its weight's share (BlendedDataset's build_blending_indices: the first of
/// equals), as that dataset's next sample: sample k starts at token
/// k x seq, wrapping around before its last seq + 1 tokens. Shuffled
/// (shuffle), every stream's rows are samples, each dataset's drawn in the
/// order of a permutation of its samples, a new one each epoch.
class TokenStream {
public:
  TokenStream() = default;
  explicit TokenStream(std::vector<int64_t> tokens);
  /// `weights` are normalized to sum 1.
  TokenStream(std::vector<std::vector<int64_t>> datasets,
              std::vector<double> weights);
  const std::vector<std::vector<int64_t>> &datasets() const {
    return datasets_;
  }
  const std::vector<double> &weights() const { return weights_; }
  bool blended() const { return datasets_.size() > 1; }
  /// The dataset and its sample of the run's `index`-th row (from 0), in a
  /// blend (one file: sample `index`). Thread-safe: the ranks of a run
  /// share a stream.
  std::pair<size_t, int64_t> row(int64_t index) const;

  /// Draws each dataset's samples of `seq` tokens (and a label) in a
  /// shuffled order (Megatron-LM's GPTDataset shuffle_idx, torch's
  /// DataLoader(shuffle=True)): epoch e of a dataset of n samples (its
  /// tokens but the last, over seq) reads them in the order of a
  /// permutation drawn from `seed`, the dataset and e. Without it, one
  /// file's windows are consecutive and a blend's samples in order.
  void shuffle(uint64_t seed) { shuffleSeed_ = seed; }
  std::optional<uint64_t> shuffleSeed() const { return shuffleSeed_; }
  /// Where `dataset`'s `sample`-th sample of `seq` tokens starts.
  int64_t sampleStart(size_t dataset, int64_t sample, int64_t seq) const;

private:
  std::vector<std::vector<int64_t>> datasets_;
  std::vector<double> weights_;
  std::optional<uint64_t> shuffleSeed_;
  struct Index;
  std::shared_ptr<Index> index_;
};

/// `stream` cut into what trains and what is held out: the last `heldOut`
/// share of each dataset's tokens (0 < heldOut < 1) is the second stream, a
/// blend of the same weights; the rest the first.
std::pair<TokenStream, TokenStream> splitTokenStream(const TokenStream &stream,
                                                     double heldOut);

/// A token file (readTokenFile), or a blend "W1 PATH1 W2 PATH2 ..." of
/// them (Megatron-LM's --data-path: positive weights, whitespace apart).
absl::StatusOr<TokenStream> readTokenStream(const std::string &spec,
                                            const std::string &rawType = "u16");

/// Why `stream` (read from `spec`) does not fit a model whose output has
/// `classes` per position (the labels index them): its largest token id, and
/// what to do; empty if every id is below `classes`, or `classes` is 0
/// (unknown). `embeddingRows`, when given and not `classes`, says the
/// output is hidden states (a model exported without its head).
std::string tokenIdsBeyond(const TokenStream &stream, const std::string &spec,
                           int64_t classes, int64_t embeddingRows = 0);

struct InputFeed;
/// Why `stream` (read from `spec`) is too short for windows of
/// [batch, seq] filled as `feeds` say (one file: a micro-batch and its last
/// label; each dataset of a blend: a sequence and its label; both with an
/// encoder's source before them); empty if it is long enough.
std::string tokenStreamShortfall(const TokenStream &stream,
                                 const std::string &spec, int64_t batch,
                                 int64_t seq,
                                 const std::vector<InputFeed> &feeds);

/// How a training run fills each model input: the module's weft.feeds
/// (-weft-assign-feeds).
/// Tokens: the window's token ids, whose next tokens are the labels (one
/// input has them).
/// Source: each row's `length` tokens just before its window, as an
/// encoder-decoder's encoder reads them (prefix language modelling: the
/// encoder reads a text and the decoder continues it).
/// Labels: the next tokens, as the labels the step's own loss reads (a
/// model that takes `labels` and computes a loss of its own).
/// Documents: each position's document in its row, the end-of-document
/// tokens (Objective::eod) before it (-weft-document-mask's document ids).
enum class Feed { Tokens, Source, Ones, Zeros, Positions, Labels, Documents };

/// The Feed a weft.feeds entry names ("tokens", "source", "ones", "zeros",
/// "positions", "labels", "documents").
std::optional<Feed> parseFeed(const std::string &name);

/// One model input's fill and its columns (0: the window's seq; the source
/// and the masks, positions and zeros that go with it may be longer or
/// shorter).
struct InputFeed {
  InputFeed(Feed fill, int64_t length = 0) : fill(fill), length(length) {}
  Feed fill;
  int64_t length;
};

/// What a window's labels are: its next tokens (causal language modelling,
/// the default), or BERT's masked language modelling, for a model whose
/// attention sees every position (where a next token is in view).
struct Objective {
  /// Masked: each position is chosen with `probability`. A chosen position's
  /// label is its token, and its input `maskToken` (80 % of them), a random
  /// token below `vocab` (10 %) or its own (10 %); an unchosen one's label is
  /// `ignore` (the loss's ignore index), as Hugging Face's
  /// DataCollatorForLanguageModeling does. A row that draws no position has
  /// the one that came nearest chosen, as BERT's and Megatron-LM's data
  /// always predict at least one token per sequence (a micro-batch with
  /// none would have a loss of 0/0). The draws are a hash of `seed` and
  /// the position's index in the run's stream of windows (maskedDraw), so
  /// weft train and every compiled program choose alike, and each step's
  /// windows anew. Positions holding one of `special` (BERT's [CLS], [SEP]
  /// and [PAD]) are never chosen, as the collator's special_tokens_mask
  /// keeps them out.
  bool masked = false;
  int64_t maskToken = 0;
  int64_t vocab = 0;
  double probability = 0.15;
  int64_t ignore = -100;
  uint64_t seed = 0;
  std::vector<int64_t> special = {};
  /// Packed documents (Megatron-LM's get_ltor_masks_and_position_ids): the
  /// end-of-document token (-1: none). A document ends with its `eod`, and
  /// the next starts after it, within each row. With `resetPositions`,
  /// position ids count from 0 in each document (--reset-position-ids);
  /// with `eodMaskLoss`, a position whose input is `eod` counts no loss
  /// (its label is `ignore`: --eod-mask-loss).
  int64_t eod = -1;
  bool resetPositions = false;
  bool eodMaskLoss = false;
};

/// Masked language modelling's draw for the `index`-th position of the
/// stream of windows (window w's i-th token is w * batch * seq + i): whether
/// it is chosen (or, with `force`, chosen whatever it drew), its input
/// (`token`, the mask token or a random one), and the uniform it drew for
/// being chosen (the lowest of a row is the nearest to it).
struct MaskedDraw {
  bool chosen;
  int64_t input;
  double uniform;
};
MaskedDraw maskedDraw(const Objective &objective, int64_t index, int64_t token,
                      bool force = false);

/// The inputs of `count` micro-batches of [batch, seq] token windows from
/// window `first` on, consecutive through the file and wrapping around: one
/// per `inputs` entry in the model's order (the token ids, the tokens before
/// each row, all ones, all zeros, 0..length-1 in every row, or the labels),
/// then the labels (each id's next token, or under a masked `objective`
/// the chosen positions' own tokens, whose ids it replaces), each
/// [count * batch, length] of i64. An empty `inputs` is {Tokens}.
/// In a blend (TokenStream), the rows are its rows in order instead.
std::vector<HostTensor> tokenWindows(const TokenStream &tokens, int64_t batch,
                                     int64_t seq, int64_t first, int64_t count,
                                     const std::vector<InputFeed> &inputs,
                                     const Objective &objective = {});
std::vector<HostTensor> tokenWindows(const std::vector<int64_t> &tokens,
                                     int64_t batch, int64_t seq, int64_t first,
                                     int64_t count,
                                     const std::vector<InputFeed> &inputs,
                                     const Objective &objective = {});

/// How the learning rate falls after the warm-up (Megatron-LM's
/// --lr-decay-style; the last four are --lr-wsd-decay-style's).
enum class LrDecay {
  Cosine,
  Linear,
  Constant,
  InverseSquareRoot,
  Wsd,
  Exponential,
  MinusSqrt
};

/// The LrDecay named "cosine", "linear", "constant", "inverse-square-root",
/// "wsd", "exponential" or "minus_sqrt" (Megatron-LM's names).
std::optional<LrDecay> parseLrDecay(const std::string &name);

/// Linear warm-up to `peak` over `warmup` steps, then a decay to `floor`
/// (the peak when negative) that ends at step `decaySteps` (0: `steps`, the
/// run's), as Megatron-LM's OptimizerParamScheduler: cosine, linear,
/// constant, or inverse-square-root (peak x sqrt(warmup / (step + 1)), not
/// below `floor`); or warmup-stable-decay (WSD: MiniCPM, DeepSeek), which
/// stays at the peak until its last `wsdSteps` steps and falls to `floor`
/// over them by `wsdStyle` (linear, cosine, exponential: 2 x 0.5^r - 1, or
/// minus_sqrt: 1 - sqrt(r)).
struct LrSchedule {
  double peak = 1e-3;
  double floor = -1;
  int64_t warmup = 0;
  int64_t steps = 1;
  int64_t decaySteps = 0;
  LrDecay style = LrDecay::Cosine;
  int64_t wsdSteps = 0;
  LrDecay wsdStyle = LrDecay::Exponential;
  /// The learning rate of step `step` (0-based).
  double at(int64_t step) const;
};

/// The rule's constants the optimizer step's scalar arguments need.
struct OptimizerConstants {
  double weightDecay = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
};

/// The value of the optimizer step's scalar argument with slot `role`
/// (-weft-build-optimizer's weft.optimizer_slot) at step `t` (1-based) with
/// learning rate `lr`, on gradients summed over `windows` micro-batches:
/// what torch.optim computes in Python. Nullopt for a tensor role (param,
/// grad, exp_avg, exp_avg_sq, momentum_buffer).
std::optional<float> optimizerScalar(const std::string &role,
                                     const OptimizerConstants &constants,
                                     double lr, int64_t t, int64_t windows,
                                     double lossScale = 1.0);

/// Loss scaling (-weft-differentiate=scale-loss=true), as
/// torch.cuda.amp.GradScaler runs it: each step's loss gradient is seeded
/// with `scale`, and the optimizer step divides it out (its grad_divisor)
/// and skips a step whose gradients overflowed. Dynamic (`window` > 0): an
/// overflow multiplies the scale by `backoff` (not below `minimum`),
/// `window` finite steps in a row by `growth`. Static (`window` == 0): the
/// scale never changes.
struct LossScale {
  double scale = 65536;
  double growth = 2, backoff = 0.5, minimum = 1;
  int64_t window = 2000;
  /// Finite steps since the scale last changed.
  int64_t goodSteps = 0;
  /// After a step whose global gradient norm was `norm`: whether the step
  /// was taken (its norm finite); moves the scale.
  bool update(double norm);
};

/// What a run carries from step to step for the optimizer, and keeps in its
/// checkpoints: the optimizer steps taken (AdamW's bias corrections count
/// these, as torch.optim's state['step'] under GradScaler: a skipped step is
/// not one) and, with loss scaling, the scale. weft train and the programs
/// weft compile --train writes keep it alike.
struct LossScaling {
  std::optional<LossScale> scale;
  int64_t optimizerSteps = 0;
  /// What this step's loss gradient is seeded with (1 without scaling).
  double factor() const { return scale ? scale->scale : 1.0; }
  /// After a step whose global gradient norm was `norm`: whether it was
  /// taken.
  bool afterStep(double norm);
  /// What a checkpoint keeps (nothing without loss scaling).
  std::optional<CheckpointLossScale> checkpointed() const;
  /// Continues from a checkpoint written after `step` steps: a run without
  /// loss scaling took every step; a dynamic scale goes on from the saved
  /// one (a static scale stays the one given).
  void resume(int64_t step, const std::optional<CheckpointLossScale> &saved);
};

/// The functions of one training step on a rank: the step itself
/// (-weft-differentiate, partitioned), and the function that reduces the
/// gradients it returns as partial sums (-weft-defer-gradient-reduction):
/// the results at `partial`, in that order.
struct RankTrainingStep {
  RankFunction step;
  /// Where each of the step's arguments sits on the mesh: each micro-batch's
  /// whole inputs are cut by these.
  std::vector<Layout> inputs;
  RankFunction reduce; ///< empty when nothing is reduced after the step
  std::vector<int> partial;
  /// ZeRO-2 and 3 (weft.reduce_every_micro_batch): reduce each micro-batch's
  /// gradients and sum the reduced blocks, instead of reducing the sum once.
  bool everyMicroBatch = false;
  /// The step's results that are gradients: with `heldGradientBytes`, what
  /// the rank holds of them between micro-batches is measured.
  std::vector<int> gradients;
};

/// Runs `step` on this rank's block of each micro-batch's inputs and sums
/// the results (the loss, and the gradients), reducing the partial ones as
/// the step says. With `heldGradientBytes`, sets it to the most bytes of
/// summed gradients (`step.gradients`) the rank held at once: the
/// accumulators a micro-batch adds into (with `everyMicroBatch`, the reduced
/// blocks), before the step's reduction. Throws std::runtime_error on
/// failure.
std::vector<HostTensor>
runTrainingStepOnRank(RankContext &ctx, const RankTrainingStep &step,
                      const std::vector<std::vector<HostTensor>> &microBatches,
                      int64_t *heldGradientBytes = nullptr);

//===----------------------------------------------------------------------===//
// A generated training program
//===----------------------------------------------------------------------===//

/// A generated step: the inputs, and the blocks of the trained parameters
/// the rank holds.
using TrainingStepFunction = std::function<std::vector<HostTensor>(
    RankContext &, const std::vector<HostTensor> &inputs,
    const std::vector<HostTensor> &parameters)>;

/// One argument or result of the optimizer step: its weft.optimizer_slot
/// role and the trained parameter it belongs to (-1 for a scalar).
struct OptimizerSlot {
  std::string role;
  int parameter = -1;
};

/// A trained parameter: its first value (a file next to the program, whole),
/// the block of it a rank holds (the optimizer step's layout), and the step's
/// result that is its gradient.
struct TrainedParameter {
  std::string name;
  std::string file;
  Shape shape;
  Layout layout;
  int gradient = -1;
};

/// An optimizer step as a generated program runs it: its function, the
/// slots of its arguments and results, its arguments as each rank holds them
/// (the state starts as zeros of these) and where they sit on the mesh
/// (checkpoints gather and cut the state by these).
struct TrainingOptimizer {
  RankFunction function;
  std::vector<OptimizerSlot> arguments, results;
  std::vector<TensorType> argumentTypes;
  std::vector<Layout> argumentLayouts;
};

/// A pipeline stage's steps in a training program: the forward, backward
/// and weight-gradient functions (an empty one where the stage has no such
/// step), each taking the rank's parameter blocks as its third input.
struct PipelineStageSteps {
  TrainingStepFunction forward, backward, weight;
  /// The forward in eval mode (-weft-extract-evaluation): what the stage
  /// sends on and the model's outputs, not what it keeps for a backward;
  /// empty where the program has no evaluation.
  TrainingStepFunction evaluate;
};

/// What `weft compile --train` generates: the three functions and how they
/// fit, and the defaults of the run it was compiled for.
struct TrainingProgram {
  Mesh mesh;
  TrainingStepFunction step;
  /// The step's evaluation step (-weft-extract-evaluation): the forward to
  /// the loss, with the step's inputs and the rank's parameter blocks, its
  /// first result the loss; empty where the program has none (with a
  /// pipeline, see evaluationPipeline).
  TrainingStepFunction evaluate;
  std::vector<Layout> stepInputs;
  std::vector<TensorType> stepInputTypes;
  RankFunction reduce;
  std::vector<int> partial;
  bool everyMicroBatch = false;
  TrainingOptimizer optimizer;
  /// A trained parameter's `gradient` is the step's result that is its
  /// gradient (with a pipeline: its index in the pipeline's gradientNames).
  std::vector<TrainedParameter> parameters;
  OptimizerConstants constants;
  /// One micro-batch's [batch, seq].
  int64_t batch = 1, seq = 1;
  /// The model output's classes per position and its token embedding's
  /// rows (0: unknown): token files with ids beyond the classes are refused
  /// (tokenIdsBeyond), as weft train refuses them.
  int64_t classes = 0, embeddingRows = 0;
  /// How each model input is filled (the step's inputs before the labels).
  std::vector<InputFeed> feeds;
  /// What the labels are.
  Objective objective;
  /// Defaults, which the command line may change.
  int64_t steps = 1, gradAccum = 1;
  LrSchedule schedule;
  /// Called by each rank before it loads its parameters: the state its
  /// functions find in RankContext::backend (a GPU program's device, arena
  /// and communicators; see PipelineProgram::rankSetup). Empty on the CPU.
  std::function<std::shared_ptr<RankBackend>(RankContext &)> rankSetup;
  /// Loss scaling (f16): the step's last input is the scale, which starts
  /// here and moves by this rule; none without it.
  std::optional<LossScale> lossScale;

  /// With pp > 1: the pipeline whose schedule each step runs on the m
  /// micro-batches (gradAccum is m), its stages' functions the `stageSteps`
  /// (by virtual stage) on the rank's parameter blocks, and per pipeline
  /// rank the optimizer step its ranks run after the schedule, on the
  /// parameters of its stages (a rank holds only those). `step`,
  /// `stepInputs`, `reduce` and `optimizer` are then unused.
  std::optional<PipelineProgram> pipeline;
  std::vector<PipelineStageSteps> stageSteps;
  /// With pp > 1 and an evaluation: the pipeline that evaluates held-out
  /// tokens, its stages' functions the stageSteps' `evaluate`, its steps
  /// the forward steps of the schedule (-weft-extract-evaluation). An
  /// evaluation of K micro-batches runs it on m of them at a time, the last
  /// time on the steps of the first K mod m.
  std::optional<PipelineProgram> evaluationPipeline;
  std::vector<TrainingOptimizer> pipelineOptimizers;
};

/// The `main` of a generated training program:
///   program [--steps N] [--grad-accum N] [--lr X] [--min-lr X] [--warmup N]
///           [--data-dtype T] [--log FILE] [--save DIR] [--save-every N]
///           [--resume DIR] [--collective-timeout S]
///           [--eval-data FILE | --eval-split F] [--eval-every N]
///           [--eval-iters K] [--shuffle-seed N]
///           WEIGHTS_DIR OUTPUT_DIR TOKENS
/// With --eval-data (or --eval-split, the last share of TOKENS held out),
/// every rank runs the evaluation step on the first K windows of the
/// held-out tokens after every N steps and after the last, as weft train
/// --eval-data does, and the printing rank prints their mean loss.
/// With --shuffle-seed, TOKENS and the held-out tokens are read in a
/// shuffled order (TokenStream::shuffle), as weft train --shuffle-seed
/// reads them.
/// Each rank holds its blocks of the parameters and of the optimizer state,
/// and runs the steps: the micro-batches, the gradient reduction, the
/// optimizer step (with a pipeline: the schedule's steps on the m
/// micro-batches, then the rank's pipeline-rank optimizer step; a rank holds
/// only its stages' parameters). Rank 0 (with a pipeline, the last stage's
/// first rank, which has the loss) prints a line per step, and with --log
/// writes weft train's loss log (.csv, or .jsonl); --save writes weft train's
/// checkpoints (weft/runtime/Checkpoint.h: every --save-every steps and at
/// the end), which --resume continues, from this program or weft train;
/// at the end OUTPUT_DIR gets each trained parameter whole
/// (`param-<i>.npy`, their names in `parameters.txt`). Alone, the ranks are
/// threads; under mpirun, srun or torchrun, one process each.
int trainingProgramMain(int argc, char **argv, const TrainingProgram &program);

} // namespace weft::rt

#endif // WEFT_RUNTIME_TRAINING_H

//===- TrainCommand.cpp - weft train
//---------------------------------------===//
//
// Part of the Weft project.
//
//   weft train model.onnx|model.mlir --data tokens.bin [--plan-spec ...]
//              [--steps N] [--batch-size B] [--seq-len S] [--lr ...]
//
// Builds the training step as IR (-weft-append-loss=reduction=mean,
// -weft-unfuse-projections, -weft-differentiate), partitions it under the
// plan like any program, and runs it step by step on simulated devices; the
// optimizer (AdamW or SGD with momentum, with global-norm clipping and a
// warm-up + cosine schedule) updates the weights between steps, as
// torch.optim does. Checkpoints are written to a temporary directory and
// renamed, so a crash never leaves a half checkpoint.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Driver/Driver.h"
#include "weft/Exec/Interpreter.h"
#include "weft/Exec/TensorFiles.h"
#include "weft/Import/OnnxImporter.h"
#include "weft/Passes/Passes.h"
#include "weft/Pipelines/Pipelines.h"
#include "weft/Plan/Plan.h"
#include "weft/runtime/Checkpoint.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/Training.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

using namespace mlir;
namespace cl = llvm::cl;
using weft::rt::HostTensor;

llvm::cl::SubCommand &compileSubCommand();

static cl::SubCommand trainCommand(
    "train", "Train a model on simulated devices under a plan, from a token "
             "file");

static cl::opt<std::string> model(cl::Positional, cl::Required,
                                  cl::desc("<model.onnx | model.mlir>"),
                                  cl::sub(trainCommand));
static cl::opt<std::string> dataPath(
    "data",
    cl::desc("Tokens: .npy (integer), Megatron-LM's indexed dataset "
             "(PREFIX, PREFIX.bin or PREFIX.idx, as preprocess_data.py "
             "writes it), or raw binary (--data-dtype), the files GPT "
             "training scripts write"),
    cl::value_desc("file"), cl::sub(trainCommand));
static cl::opt<std::string>
    dataDtype("data-dtype",
              cl::desc("Element type of a raw token file: u16 (default), "
                       "u32, i32 or i64"),
              cl::init("u16"), cl::sub(trainCommand));
static cl::opt<int64_t>
    batch("batch-size",
          cl::desc("Sequences per micro-batch (default: the "
                   "model's static shape, else 2)"),
          cl::init(2), cl::sub(trainCommand));
static cl::opt<int64_t> seqLen("seq-len",
                               cl::desc("Tokens per sequence (default: the "
                                        "model's static shape, else 8)"),
                               cl::init(8), cl::sub(trainCommand));
static cl::list<std::string> trainInputShapes(
    "input-shape",
    cl::desc("Static shape of an input: NAME=DxDx... (repeatable); an "
             "encoder-decoder's source, e.g. src_ids=2x12"),
    cl::value_desc("NAME=DIMS"), cl::sub(trainCommand));
static cl::opt<int64_t> steps("steps", cl::desc("Optimizer steps to run"),
                              cl::init(20), cl::sub(trainCommand),
                              cl::sub(compileSubCommand()));
static cl::opt<int64_t>
    gradAccum("grad-accum",
              cl::desc("Micro-batches whose gradients one step averages"),
              cl::init(1), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<std::string> optimizer("optimizer",
                                      cl::desc("adamw (default) or sgd"),
                                      cl::init("adamw"), cl::sub(trainCommand),
                                      cl::sub(compileSubCommand()));
static cl::opt<double> learningRate("lr", cl::desc("Peak learning rate"),
                                    cl::init(1e-3), cl::sub(trainCommand),
                                    cl::sub(compileSubCommand()));
static cl::opt<double>
    minLr("min-lr",
          cl::desc("Learning rate at the end of the decay (default: the peak, "
                   "no decay, for cosine; 0 for another --lr-decay-style, as "
                   "Megatron-LM's)"),
          cl::init(-1), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<std::string> lrDecayStyle(
    "lr-decay-style",
    cl::desc("How the learning rate falls after the warm-up (Megatron-LM's "
             "names): cosine (default), linear, constant, "
             "inverse-square-root, or wsd (warmup-stable-decay: the peak "
             "until the last --lr-wsd-decay-steps)"),
    cl::init("cosine"), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<int64_t> lrDecaySteps(
    "lr-decay-steps",
    cl::desc("The step at which the decay reaches --min-lr (default: "
             "--steps), as Megatron-LM's --lr-decay-iters"),
    cl::init(0), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<int64_t> lrWsdDecaySteps(
    "lr-wsd-decay-steps",
    cl::desc("--lr-decay-style wsd: the last steps of the decay, over which "
             "the learning rate falls from the peak to --min-lr"),
    cl::init(0), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<std::string> lrWsdDecayStyle(
    "lr-wsd-decay-style",
    cl::desc("--lr-decay-style wsd: how it falls: exponential (default, "
             "Megatron-LM's), linear, cosine or minus_sqrt"),
    cl::init("exponential"), cl::sub(trainCommand),
    cl::sub(compileSubCommand()));
static cl::opt<int64_t> warmup("warmup", cl::desc("Steps of linear warm-up"),
                               cl::init(0), cl::sub(trainCommand),
                               cl::sub(compileSubCommand()));
static cl::opt<double> weightDecay("weight-decay",
                                   cl::desc("AdamW's decoupled weight decay; "
                                            "SGD's L2 term"),
                                   cl::init(0.01), cl::sub(trainCommand),
                                   cl::sub(compileSubCommand()));
static cl::opt<std::string> decayRule(
    "decay",
    cl::desc(
        "Which parameters --weight-decay shrinks: all (default, "
        "torch.optim.AdamW(model.parameters())) or matrices (rank >= 2: "
        "no decay for biases and norm weights, as nanoGPT, Megatron-LM and "
        "Hugging Face's Trainer group them)"),
    cl::init("all"), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<double> beta1("beta1", cl::init(0.9), cl::sub(trainCommand),
                             cl::sub(compileSubCommand()),
                             cl::desc("AdamW's first-moment decay"));
static cl::opt<double> beta2("beta2", cl::init(0.999), cl::sub(trainCommand),
                             cl::sub(compileSubCommand()),
                             cl::desc("AdamW's second-moment decay"));
static cl::opt<double> adamEps("eps", cl::init(1e-8), cl::sub(trainCommand),
                               cl::sub(compileSubCommand()),
                               cl::desc("AdamW's epsilon"));
static cl::opt<double> momentum("momentum", cl::init(0.9),
                                cl::sub(trainCommand),
                                cl::sub(compileSubCommand()),
                                cl::desc("SGD's momentum"));
static cl::opt<double>
    clipGrad("clip-grad",
             cl::desc("Scale gradients whose global L2 norm exceeds this "
                      "(0: no clipping)"),
             cl::init(0), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<int64_t>
    ignoreIndex("ignore-index",
                cl::desc("A label that counts no loss (PyTorch: -100)"),
                cl::init(std::numeric_limits<int64_t>::min()),
                cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<std::string> objectiveFlag(
    "objective",
    cl::desc("What the labels are: next-token (default: each position's "
             "next token, causal language modelling) or mlm (BERT's masked "
             "language modelling: --mlm-probability of the positions chosen, "
             "their labels their own tokens, their inputs --mask-token-id "
             "(80 %), a random token (10 %) or their own (10 %))"),
    cl::init("next-token"), cl::sub(trainCommand),
    cl::sub(compileSubCommand()));
static cl::opt<int64_t>
    maskTokenId("mask-token-id",
                cl::desc("--objective mlm: the mask token's id (BERT's "
                         "[MASK]: 103)"),
                cl::init(-1), cl::sub(trainCommand),
                cl::sub(compileSubCommand()));
static cl::opt<double>
    mlmProbability("mlm-probability",
                   cl::desc("--objective mlm: the share of positions chosen "
                            "(default 0.15)"),
                   cl::init(0.15), cl::sub(trainCommand),
                   cl::sub(compileSubCommand()));
static cl::list<int64_t> specialTokenIds(
    "special-token-ids", cl::CommaSeparated,
    cl::desc("--objective mlm: token ids never chosen (BERT's [CLS], [SEP] "
             "and [PAD]: 101,102,0), as Hugging Face's collator leaves "
             "special tokens out"),
    cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<int64_t>
    eodToken("eod-token",
             cl::desc("The end-of-document token of packed documents (GPT-2's "
                      "<|endoftext|>: 50256), for --reset-attention-mask, "
                      "--reset-position-ids and --eod-mask-loss"),
             cl::init(-1), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<bool> resetAttentionMask(
    "reset-attention-mask",
    cl::desc("Each token attends within its document only (Megatron-LM's "
             "--reset-attention-mask, torchtitan's block_causal): the model "
             "takes each position's document as one more input "
             "(-weft-document-mask)"),
    cl::init(false), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<bool> resetPositionIds(
    "reset-position-ids",
    cl::desc("Position ids count from 0 in each document (Megatron-LM's "
             "--reset-position-ids): for a model that takes position ids"),
    cl::init(false), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<bool>
    eodMaskLoss("eod-mask-loss",
                cl::desc("A position whose input is --eod-token counts no loss "
                         "(Megatron-LM's --eod-mask-loss)"),
                cl::init(false), cl::sub(trainCommand),
                cl::sub(compileSubCommand()));
static cl::opt<std::string>
    freeze("freeze",
           cl::desc("Parameters whose names match this regex are not trained "
                    "(buffers that ONNX stores as initializers and the import "
                    "does not recognise; fixed position buffers, such as "
                    "rotary tables, are constants already)"),
           cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<bool> noFixedBuffers(
    "no-fixed-buffers",
    cl::desc("Keep fixed position buffers (sinusoid tables, rotary "
             "frequencies, which the import tells by their values and "
             "makes constants, as torch never trains buffers) as weights, "
             "trained: for a model that learns what starts as one"),
    cl::init(false), cl::sub(trainCommand));
static cl::list<std::string>
    feed("feed",
         cl::desc("NAME=FILL: fill the model input NAME (or #INDEX) with "
                  "tokens (the ids whose next tokens are the labels), "
                  "source (each row's tokens before its window: an "
                  "encoder's input), ones, zeros, positions (0..seq-1) or "
                  "labels (the next tokens), where its name does not say "
                  "(attention_mask: ones, position_ids: positions, "
                  "token_type_ids: zeros, labels: labels, decoder_input_ids "
                  "or tgt...: tokens, then input_ids or src...: source)"),
         cl::CommaSeparated, cl::sub(trainCommand),
         cl::sub(compileSubCommand()));
static cl::opt<std::string>
    recompute("recompute",
              cl::desc("What backward recomputes of each layer: full "
                       "(default), selective (the attention core), op "
                       "(torchtitan's per-op policy: all but the attentions' "
                       "and every other weight GEMM's outputs) or none"),
              cl::init("full"), cl::sub(trainCommand),
              cl::sub(compileSubCommand()));
static cl::opt<std::string> computeType(
    "dtype",
    cl::desc("f32, or bf16 / f16: forward and backward compute in 16 bits "
             "while the weights, their gradients' sums and the optimizer stay "
             "f32 (-weft-mixed-precision)"),
    cl::init("f32"), cl::sub(trainCommand));
static cl::opt<double> lossScaleFlag(
    "loss-scale",
    cl::desc("A static loss scale (any --dtype; default: none, or dynamic "
             "with --dtype f16)"),
    cl::init(0), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<double> initialLossScale(
    "initial-loss-scale",
    cl::desc("Dynamic loss scaling (--dtype f16): the first scale"),
    cl::init(65536), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<int64_t> lossScaleWindow(
    "loss-scale-window",
    cl::desc("Dynamic loss scaling: double the scale after this many steps "
             "without overflow (an overflow halves it and skips the step)"),
    cl::init(2000), cl::sub(trainCommand), cl::sub(compileSubCommand()));
static cl::opt<double>
    minLossScale("min-loss-scale",
                 cl::desc("Dynamic loss scaling: the scale never drops below "
                          "this"),
                 cl::init(1), cl::sub(trainCommand),
                 cl::sub(compileSubCommand()));
static cl::opt<std::string> planSpec("plan-spec",
                                     cl::desc("dp=2,tp=2,sp=1,ulysses=2"),
                                     cl::sub(trainCommand));
static cl::opt<std::string> planFile("plan",
                                     cl::desc("A plan (weft plan --json)"),
                                     cl::sub(trainCommand));
static cl::opt<int> devices("devices",
                            cl::desc("Simulated devices (must match the plan)"),
                            cl::init(0), cl::sub(trainCommand));
static cl::opt<double>
    collectiveTimeout("collective-timeout",
                      cl::desc("Seconds a collective waits for its group"),
                      cl::init(300), cl::sub(trainCommand));
static cl::opt<std::string>
    logPath("log", cl::desc("Loss log: .csv or .jsonl, one line per step"),
            cl::sub(trainCommand));
static cl::opt<std::string>
    saveDir("save", cl::desc("Checkpoint directory (step-N/ and latest)"),
            cl::sub(trainCommand));
static cl::opt<int64_t>
    saveEvery("save-every",
              cl::desc("Write a checkpoint every N steps (and at the end)"),
              cl::init(0), cl::sub(trainCommand));
static cl::opt<std::string>
    resumeDir("resume",
              cl::desc("Continue from a checkpoint: a step-N directory, or a "
                       "--save directory (its latest)"),
              cl::sub(trainCommand));
static cl::opt<std::string>
    dumpStep("dump-step", cl::desc("Write the training step's IR here"),
             cl::sub(trainCommand));
static cl::opt<std::string> evalDataPath(
    "eval-data",
    cl::desc("Held-out tokens (as --data, in --data-dtype): the loss of the "
             "model's forward on them, without a backward or an update, "
             "after every --eval-every steps and after the last"),
    cl::sub(trainCommand));
static cl::opt<double> evalSplit(
    "eval-split",
    cl::desc("Hold out the last share of --data (of each dataset of a "
             "blend) as the held-out tokens instead of --eval-data, as "
             "Megatron-LM's --split does: 0.01 trains on the first 99 % and "
             "evaluates on the rest"),
    cl::init(0), cl::sub(trainCommand));
static cl::opt<int64_t> evalEvery(
    "eval-every",
    cl::desc("--eval-data: evaluate after every N steps (0: after the last "
             "only)"),
    cl::init(0), cl::sub(trainCommand));
static cl::opt<int64_t> evalIters(
    "eval-iters",
    cl::desc("--eval-data: the micro-batches an evaluation averages, the "
             "same ones each time (the file's first windows, wrapping "
             "around)"),
    cl::init(8), cl::sub(trainCommand));
static cl::opt<uint64_t> shuffleSeed(
    "shuffle-seed",
    cl::desc("Draw the samples (rows of --seq-len tokens) of --data and of "
             "the held-out tokens in a shuffled order, a new permutation of "
             "each dataset's samples every epoch, from this seed "
             "(Megatron-LM's GPTDataset shuffle, torch's "
             "DataLoader(shuffle=True)); without it, windows are read in "
             "order"),
    cl::sub(trainCommand));
static cl::opt<std::string> tracePath(
    "trace",
    cl::desc("With pp > 1: write the first step's executed pipeline steps "
             "per rank here (Chrome trace / Perfetto JSON)"),
    cl::sub(trainCommand));
static cl::opt<std::string> dumpPartitioned(
    "dump-partitioned",
    cl::desc("Write the partitioned training step's IR here (with pp > 1: "
             "each stage's forward, backward and weight-gradient functions "
             "and the schedule)"),
    cl::sub(trainCommand));

bool trainCommandSelected() { return bool(trainCommand); }

static int trainError(const llvm::Twine &message) {
  llvm::errs() << "weft train: error: " << message << '\n';
  return 1;
}

/// The training state each rank held in `step` (0-based), as the CPU
/// runtime allocates it (f32): its summed gradients, its optimizer step's
/// parameters (master weights) and optimizer state, the figures the cost
/// model predicts per pipeline stage as gradients and optimizer memory.
static void printHeldState(int64_t step,
                           const weft::driver::HeldTrainingState &held) {
  llvm::errs() << "weft train: gradients, optimizer's parameters and "
                  "optimizer state per rank in step "
               << step + 1 << " (bytes held):";
  for (size_t r = 0; r < held.gradients.size(); ++r)
    llvm::errs() << ' ' << held.gradients[r] << '/' << held.parameters[r] << '/'
                 << held.optimizer[r];
  llvm::errs() << '\n';
}

//===----------------------------------------------------------------------===//
// The optimizer (torch.optim's update rules, single-tensor form)
//===----------------------------------------------------------------------===//

struct ParamState {
  std::string name;
  HostTensor value;
  std::vector<float> m, v; // AdamW's moments; SGD's momentum buffer in m
  bool loaded = false;
};

using Scaling = weft::rt::LossScaling;

/// Loss scaling as the flags ask: static with --loss-scale, dynamic under
/// f16, none otherwise. Returns why the flags are wrong, or "".
static std::string lossScaleOf(llvm::StringRef dtype,
                               std::optional<weft::rt::LossScale> &scale) {
  scale.reset();
  if (!lossScaleFlag.getNumOccurrences() && dtype != "f16")
    return "";
  weft::rt::LossScale rule;
  if (lossScaleFlag.getNumOccurrences()) {
    rule.scale = lossScaleFlag;
    rule.window = 0;
  } else {
    rule.scale = initialLossScale;
    rule.window = lossScaleWindow;
    rule.minimum = minLossScale;
  }
  if (!(rule.scale > 0) || !std::isfinite(rule.scale) || rule.window < 0 ||
      !(rule.minimum > 0))
    return "--loss-scale, --initial-loss-scale and --min-loss-scale must be "
           "positive and --loss-scale-window not negative";
  scale = rule;
  return "";
}

/// The learning-rate schedule from the command line (--lr, --min-lr,
/// --warmup, --steps, --lr-decay-style and its options), or why it is not
/// one.
static llvm::Expected<weft::rt::LrSchedule> lrSchedule() {
  weft::rt::LrSchedule schedule;
  schedule.peak = learningRate;
  schedule.floor = minLr;
  schedule.warmup = warmup;
  schedule.steps = steps;
  schedule.decaySteps = lrDecaySteps;
  std::optional<weft::rt::LrDecay> style = weft::rt::parseLrDecay(lrDecayStyle);
  if (!style || *style == weft::rt::LrDecay::Exponential ||
      *style == weft::rt::LrDecay::MinusSqrt)
    return llvm::createStringError(
        "--lr-decay-style " + lrDecayStyle +
        ": expected cosine, linear, constant, inverse-square-root or wsd");
  schedule.style = *style;
  std::optional<weft::rt::LrDecay> wsd =
      weft::rt::parseLrDecay(lrWsdDecayStyle);
  if (!wsd || *wsd == weft::rt::LrDecay::Constant ||
      *wsd == weft::rt::LrDecay::InverseSquareRoot ||
      *wsd == weft::rt::LrDecay::Wsd)
    return llvm::createStringError(
        "--lr-wsd-decay-style " + lrWsdDecayStyle +
        ": expected exponential, linear, cosine or minus_sqrt");
  schedule.wsdStyle = *wsd;
  schedule.wsdSteps = lrWsdDecaySteps;
  const int64_t end = lrDecaySteps > 0 ? int64_t(lrDecaySteps) : int64_t(steps);
  if (lrDecaySteps < 0 || lrWsdDecaySteps < 0)
    return llvm::createStringError(
        "--lr-decay-steps and --lr-wsd-decay-steps must not be negative");
  if ((lrWsdDecaySteps.getNumOccurrences() ||
       lrWsdDecayStyle.getNumOccurrences()) &&
      *style != weft::rt::LrDecay::Wsd)
    return llvm::createStringError("--lr-wsd-decay-steps and "
                                   "--lr-wsd-decay-style are for "
                                   "--lr-decay-style wsd");
  if (*style == weft::rt::LrDecay::Wsd &&
      (lrWsdDecaySteps <= 0 || lrWsdDecaySteps > end - warmup))
    return llvm::createStringError(
        "--lr-decay-style wsd needs --lr-wsd-decay-steps, from 1 to the " +
        std::to_string(std::max<int64_t>(end - warmup, 0)) +
        " steps between the warm-up and the end of the decay");
  // Megatron-LM decays to 0 unless told; the cosine default here has no
  // decay without --min-lr, as before the other styles came.
  if (!minLr.getNumOccurrences() && *style != weft::rt::LrDecay::Cosine &&
      *style != weft::rt::LrDecay::Constant)
    schedule.floor = 0;
  return schedule;
}
/// The arguments of the optimizer step (-weft-build-optimizer's
/// `@optimizer_step`) at step `t` (1-based) with learning rate `lr`, on the
/// summed gradients of `windows` micro-batches: the scalars torch.optim
/// computes in Python on the host, the tensors from `params` and `grads`.
/// Without `grads` (a rank-local step on the mesh), a gradient argument is
/// an empty tensor and `gradientOf` gets the step's result that holds it
/// (1 + the parameter's index; -1 for the other arguments).
static FailureOr<std::vector<HostTensor>>
optimizerInputs(func::FuncOp step, const std::vector<ParamState> &params,
                const llvm::StringMap<unsigned> &index,
                const std::vector<std::vector<float>> *grads, int64_t windows,
                double lr, int64_t t, double lossScale,
                std::vector<int> &gradientOf) {
  auto scalar = [](double value) {
    HostTensor tensor(weft::rt::DType::F32, {});
    tensor.floats[0] = float(value);
    return tensor;
  };
  weft::rt::OptimizerConstants constants;
  constants.weightDecay = weightDecay;
  constants.beta1 = beta1;
  constants.beta2 = beta2;
  std::vector<HostTensor> inputs;
  gradientOf.clear();
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto [role, parameter] = weft::optimizerArgumentSlot(step, i);
    gradientOf.push_back(-1);
    if (std::optional<float> value = weft::rt::optimizerScalar(
            role, constants, lr, t, windows, lossScale))
      inputs.push_back(scalar(*value));
    else if (index.count(parameter)) {
      unsigned k = index.lookup(parameter);
      const ParamState &p = params[k];
      if (role == "grad" && !grads) {
        gradientOf.back() = int(k) + 1;
        inputs.emplace_back();
        continue;
      }
      // The state as checkpoints keep it (m, v).
      weft::rt::CheckpointState state = weft::rt::checkpointStateOf(role);
      const std::vector<float> *values =
          role == "grad"                          ? &(*grads)[k]
          : state == weft::rt::CheckpointState::M ? &p.m
          : state == weft::rt::CheckpointState::V ? &p.v
                                                  : nullptr;
      if (role == "param")
        inputs.push_back(p.value);
      else if (values) {
        HostTensor tensor(weft::rt::DType::F32, p.value.shape);
        if (!values->empty())
          tensor.floats = *values; // state starts at zero
        inputs.push_back(std::move(tensor));
      }
    }
    if (inputs.size() != i + 1)
      return step.emitError()
             << "argument #" << i << " of the optimizer step (" << role
             << " of '" << parameter << "') is not something weft train holds";
  }
  return inputs;
}

/// Takes the optimizer step's results (from `outputs[offset]` on): the new
/// values and state go back into `params`. Returns the gradients' global L2
/// norm.
static double applyOptimizerOutputs(func::FuncOp step,
                                    std::vector<ParamState> &params,
                                    const llvm::StringMap<unsigned> &index,
                                    std::vector<HostTensor> &outputs,
                                    size_t offset) {
  double norm = 0;
  for (unsigned r = 0; r < step.getNumResults(); ++r) {
    auto [role, parameter] = weft::optimizerResultSlot(step, r);
    HostTensor &out = outputs[offset + r];
    if (role == "grad_norm") {
      norm = out.at(0);
      continue;
    }
    ParamState &p = params[index.lookup(parameter)];
    if (role == "param")
      p.value = std::move(out);
    else if (weft::rt::checkpointStateOf(role) == weft::rt::CheckpointState::V)
      p.v = out.floats.toVector();
    else
      p.m = out.floats.toVector();
  }
  return norm;
}

/// Runs the optimizer step on the host on the summed gradients `grads`.
static FailureOr<double>
runOptimizer(func::FuncOp step, std::vector<ParamState> &params,
             const llvm::StringMap<unsigned> &index,
             const std::vector<std::vector<float>> &grads, int64_t windows,
             double lr, int64_t t, double lossScale,
             const weft::InterpreterOptions &options) {
  std::vector<int> gradientOf;
  FailureOr<std::vector<HostTensor>> inputs = optimizerInputs(
      step, params, index, &grads, windows, lr, t, lossScale, gradientOf);
  if (failed(inputs))
    return failure();
  FailureOr<std::vector<HostTensor>> outputs =
      weft::interpret(step, *inputs, options);
  if (failed(outputs))
    return failure();
  return applyOptimizerOutputs(step, params, index, *outputs, 0);
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

static HostTensor vectorTensor(const std::vector<float> &values,
                               const weft::rt::Shape &shape) {
  HostTensor t(weft::rt::DType::F32, shape);
  if (!values.empty())
    t.floats = values;
  return t;
}

static bool writeText(llvm::StringRef path, llvm::StringRef text,
                      std::string &error) {
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec);
  if (!ec) {
    out << text;
    out.close();
    ec = out.error();
  }
  if (ec)
    error = "cannot write " + path.str() + ": " + ec.message();
  return !ec;
}

/// Top-k's error feedback in a checkpoint: each rank's residual of each
/// top-k all-reduce with error feedback (`sites`, numbered in the
/// partitioned module's walk order, which the same model and plan give
/// again), for the plan they belong to.
struct Residuals {
  weft::rt::FeedbackStore *store = nullptr;
  std::vector<Operation *> sites;
  std::string plan;
};

/// Writes step-N/ with the runtime's writer (weft/runtime/Checkpoint.h, which
/// generated training programs share): under a temporary name, renamed, then
/// `latest` renamed into place, so a reader sees a whole checkpoint or the
/// previous one.
static bool saveCheckpoint(const std::vector<ParamState> &params, int64_t step,
                           const Residuals &residuals, const Scaling &scaling,
                           std::string &error) {
  weft::rt::Checkpoint checkpoint;
  checkpoint.step = step;
  checkpoint.optimizer = optimizer;
  checkpoint.lossScale = scaling.checkpointed();
  for (const ParamState &p : params) {
    weft::rt::CheckpointParameter entry{p.name, p.value, {}, {}};
    if (!p.m.empty())
      entry.m = vectorTensor(p.m, p.value.shape);
    if (!p.v.empty())
      entry.v = vectorTensor(p.v, p.value.shape);
    checkpoint.parameters.push_back(std::move(entry));
  }
  if (!residuals.sites.empty()) {
    // By rank and site, so that the manifest does not depend on addresses.
    std::map<std::pair<int, int64_t>, HostTensor> ordered;
    for (auto &[key, residual] : residuals.store->residualsKept()) {
      auto site = llvm::find(residuals.sites, key.second);
      if (site != residuals.sites.end())
        ordered[{key.first, site - residuals.sites.begin()}] = residual;
    }
    weft::rt::CheckpointFeedback feedback;
    feedback.plan = residuals.plan;
    for (auto &[key, residual] : ordered)
      feedback.residuals.push_back({key.first, key.second, residual, ""});
    checkpoint.feedback = std::move(feedback);
  }
  absl::Status status = weft::rt::writeCheckpoint(saveDir, checkpoint);
  if (!status.ok())
    error = std::string(status.message());
  return status.ok();
}

/// Loads a checkpoint (the runtime's reader) into `params` (which name the
/// model's parameters); returns the step it was written after, or -1 with
/// `error` naming the file that is missing, corrupt or does not match the
/// model.
static int64_t loadCheckpoint(std::vector<ParamState> &params,
                              const Residuals &residuals, Scaling &scaling,
                              std::string &error) {
  absl::StatusOr<weft::rt::Checkpoint> read =
      weft::rt::readCheckpoint(resumeDir);
  if (!read.ok()) {
    error = std::string(read.status().message());
    return -1;
  }
  const std::string &manifest = read->manifestPath;
  if (!read->optimizer.empty() && read->optimizer != optimizer) {
    error = manifest + ": written by --optimizer " + read->optimizer +
            ", resumed with --optimizer " + optimizer;
    return -1;
  }
  llvm::StringMap<const weft::rt::CheckpointParameter *> byName;
  for (const weft::rt::CheckpointParameter &entry : read->parameters)
    byName[entry.name] = &entry;
  if (byName.size() != params.size()) {
    error = manifest + ": holds " + std::to_string(byName.size()) +
            " parameters, the model trains " + std::to_string(params.size());
    return -1;
  }
  for (ParamState &p : params) {
    const weft::rt::CheckpointParameter *entry = byName.lookup(p.name);
    if (!entry) {
      error = manifest + ": has no parameter '" + p.name + "'";
      return -1;
    }
    if (entry->value.shape != p.value.shape) {
      error = manifest + ": holds " +
              weft::rt::shapeString(entry->value.shape) + " for '" + p.name +
              "', the model's is " + weft::rt::shapeString(p.value.shape);
      return -1;
    }
    p.value.floats = entry->value.floats;
    p.m = entry->m ? entry->m->floats.toVector() : std::vector<float>();
    p.v = entry->v ? entry->v->floats.toVector() : std::vector<float>();
  }
  scaling.resume(read->step, read->lossScale);
  if (residuals.sites.empty())
    return read->step;
  // Top-k's residuals: each rank's, for each all-reduce, as they were.
  if (!read->feedback) {
    error = manifest + ": holds no top-k error-feedback residuals (written by "
                       "a run without compress=dp:topk), so resuming with "
                       "dp:topk would not continue it; resume with the codec "
                       "it was written with";
    return -1;
  }
  if (read->feedback->plan != residuals.plan) {
    error = manifest + ": its top-k residuals belong to the plan " +
            read->feedback->plan + ", not " + residuals.plan +
            " (they are per rank and per all-reduce): resume with that plan";
    return -1;
  }
  for (const weft::rt::CheckpointResidual &residual :
       read->feedback->residuals) {
    if (residual.rank >= devices ||
        residual.site >= int64_t(residuals.sites.size())) {
      error = residual.file + ": a top-k residual of rank " +
              std::to_string(residual.rank) + " and all-reduce " +
              std::to_string(residual.site) + ", where the run has " +
              std::to_string(devices) + " ranks and " +
              std::to_string(residuals.sites.size()) + " top-k all-reduces";
      return -1;
    }
    Operation *op = residuals.sites[size_t(residual.site)];
    auto type = cast<RankedTensorType>(op->getOperand(0).getType());
    weft::rt::Shape shape(type.getShape().begin(), type.getShape().end());
    if (residual.value.shape != shape) {
      error = residual.file + ": holds " +
              weft::rt::shapeString(residual.value.shape) +
              " for a top-k all-reduce of " + weft::rt::shapeString(shape);
      return -1;
    }
    residuals.store->restore(residual.rank, op, residual.value);
  }
  return read->step;
}

//===----------------------------------------------------------------------===//
// The training step and the optimizer step as IR (weft train and
// weft compile --train build them alike)
//===----------------------------------------------------------------------===//

/// Why the model's inputs (`type`: the model's, then the labels) are not
/// what a training step feeds, as the module's weft.feeds (-weft-assign-feeds)
/// fills them: the token ids and the labels [batch, seq], the others
/// [batch, length] integers. Empty if they are; then `feeds` gets each
/// model input's fill and length.
static std::string
checkTrainingInputs(ModuleOp module, FunctionType type, int64_t batch,
                    int64_t seq,
                    std::vector<weft::rt::InputFeed> *feeds = nullptr) {
  std::vector<std::string> fills = weft::trainingFeeds(module);
  if (feeds)
    feeds->clear();
  for (unsigned i = 0; i < type.getNumInputs(); ++i) {
    const bool labels = i + 1 == type.getNumInputs();
    std::string fill = labels             ? "labels"
                       : i < fills.size() ? fills[i]
                       : i == 0           ? "tokens"
                                          : "";
    const bool window =
        fill == "tokens" || fill == "labels" || fill == "documents";
    auto input = dyn_cast<RankedTensorType>(type.getInput(i));
    if (!input || !input.getElementType().isInteger() || input.getRank() != 2 ||
        input.getDimSize(0) != batch ||
        (window ? input.getDimSize(1) != seq : input.isDynamicDim(1)))
      return "the model's input #" + std::to_string(i) +
             (window ? " is not [batch, seq] integers (the token ids): "
                     : " is not [batch, length] integers (an encoder's "
                       "source, attention mask, positions): ") +
             "training feeds token windows of [" + std::to_string(batch) +
             ", " + std::to_string(seq) +
             "] (import the model with these shapes, or give --batch-size "
             "and --seq-len, and --input-shape for an encoder's source)";
    if (feeds && !labels)
      feeds->emplace_back(*weft::rt::parseFeed(fill), input.getDimSize(1));
  }
  return "";
}

/// A self-attention of the token ids (input `tokens` of `func`) that sees
/// every position: not causal, and masked at most per key (a padding mask,
/// BERT's). Next-token labels are then in view of the model; null if there
/// is none. (Values are followed into weft.layer bodies argument by
/// argument, so an encoder-decoder's cross-attention, whose keys are the
/// source's, is not one.)
static weft::AttentionOp bidirectionalAttention(func::FuncOp func,
                                                unsigned tokens) {
  if (func.isExternal() || tokens >= func.getNumArguments())
    return {};
  llvm::DenseSet<Value> reached;
  SmallVector<Value> work{func.getArgument(tokens)};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (!reached.insert(value).second)
      continue;
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (auto layer = dyn_cast<weft::LayerOp>(user)) {
        Block &body = layer.getBody().front();
        unsigned i = use.getOperandNumber();
        if (i < body.getNumArguments())
          work.push_back(body.getArgument(i));
      }
      // A value yielded by a layer's body is the layer's result.
      if (isa<weft::YieldOp>(user))
        if (Operation *parent = user->getParentOp();
            parent && use.getOperandNumber() < parent->getNumResults())
          work.push_back(parent->getResult(use.getOperandNumber()));
      if (!isa<weft::LayerOp, weft::YieldOp>(user))
        for (Value result : user->getResults())
          work.push_back(result);
    }
  }
  weft::AttentionOp found;
  func.walk([&](weft::AttentionOp attention) {
    if (found || attention.getCausal() || !reached.contains(attention.getK()))
      return;
    auto mask = attention.getMask()
                    ? dyn_cast<RankedTensorType>(attention.getMask().getType())
                    : RankedTensorType();
    if (attention.getMask() && (!mask || mask.getRank() < 2 ||
                                mask.getDimSize(mask.getRank() - 2) != 1))
      return;
    found = attention;
  });
  return found;
}

/// The labels' rule from the command line (--objective, --mask-token-id,
/// --mlm-probability) for a model of `vocab` tokens whose token ids are
/// input `tokens` of `func`; `warning` gets the attention that puts
/// next-token labels in the model's view, if one does.
static llvm::Expected<weft::rt::Objective>
trainingObjective(func::FuncOp func, unsigned tokens, int64_t vocab,
                  weft::AttentionOp &warning) {
  weft::rt::Objective objective;
  if (objectiveFlag != "next-token" && objectiveFlag != "mlm")
    return llvm::createStringError("--objective " + objectiveFlag +
                                   ": expected next-token or mlm");
  if (objectiveFlag == "next-token") {
    if (maskTokenId.getNumOccurrences() || mlmProbability.getNumOccurrences() ||
        specialTokenIds.getNumOccurrences())
      return llvm::createStringError(
          "--mask-token-id, --mlm-probability and --special-token-ids are for "
          "--objective mlm");
    if (weft::AttentionOp attention = bidirectionalAttention(func, tokens))
      warning = attention;
    return objective;
  }
  if (maskTokenId < 0 || (vocab > 0 && maskTokenId >= vocab))
    return llvm::createStringError(
        "--objective mlm needs --mask-token-id, an id below the model's " +
        std::to_string(vocab) + " tokens (BERT's [MASK] is 103)");
  if (!(mlmProbability > 0 && mlmProbability <= 1))
    return llvm::createStringError("--mlm-probability must be in (0, 1]");
  objective.masked = true;
  objective.maskToken = maskTokenId;
  objective.vocab = vocab;
  objective.probability = mlmProbability;
  objective.special.assign(specialTokenIds.begin(), specialTokenIds.end());
  objective.ignore =
      ignoreIndex.getNumOccurrences() ? int64_t(ignoreIndex) : int64_t(-100);
  return objective;
}

/// The number of tokens of a model: its token embedding's rows (of the
/// token ids, input `tokens`), else its output's classes.
static int64_t modelVocab(func::FuncOp func, unsigned tokens) {
  int64_t vocab = 0;
  if (func.isExternal())
    return 0;
  func.walk([&](weft::EmbeddingOp op) {
    auto arg = dyn_cast<BlockArgument>(op.getIndices());
    if (!vocab && arg && arg.getArgNumber() == tokens &&
        arg.getOwner() == &func.getBody().front())
      vocab = cast<RankedTensorType>(op.getTable().getType()).getDimSize(0);
  });
  if (!vocab && func.getNumResults())
    if (auto logits = dyn_cast<RankedTensorType>(func.getResultTypes()[0]);
        logits && logits.getRank() >= 2 &&
        !logits.isDynamicDim(logits.getRank() - 1))
      vocab = logits.getShape().back();
  return vocab;
}

/// Packed documents from the command line (--eod-token,
/// --reset-attention-mask, --reset-position-ids, --eod-mask-loss) into
/// `objective`, for the model `entry` of `module` (after -weft-assign-feeds)
/// of `vocab` tokens.
static llvm::Error packedDocuments(ModuleOp module, func::FuncOp entry,
                                   int64_t vocab,
                                   weft::rt::Objective &objective) {
  const bool any = resetAttentionMask || resetPositionIds || eodMaskLoss;
  if (!any && eodToken.getNumOccurrences())
    return llvm::createStringError(
        "--eod-token says where documents end, for --reset-attention-mask, "
        "--reset-position-ids or --eod-mask-loss; give one of them");
  if (!any)
    return llvm::Error::success();
  if (eodToken < 0 || (vocab > 0 && eodToken >= vocab))
    return llvm::createStringError(
        "--reset-attention-mask, --reset-position-ids and --eod-mask-loss "
        "need --eod-token, the end-of-document token: an id below the "
        "model's " +
        std::to_string(vocab) + " tokens (GPT-2's <|endoftext|> is 50256)");
  if (eodMaskLoss && objective.masked)
    return llvm::createStringError(
        "--eod-mask-loss is for next-token labels: under --objective mlm "
        "only the chosen positions count, and --special-token-ids keeps the "
        "end-of-document token from being chosen");
  objective.eod = eodToken;
  objective.resetPositions = resetPositionIds;
  objective.eodMaskLoss = eodMaskLoss;
  if (eodMaskLoss)
    objective.ignore =
        ignoreIndex.getNumOccurrences() ? int64_t(ignoreIndex) : int64_t(-100);
  if (!resetPositionIds)
    return llvm::Error::success();
  // Positions restart only where the model reads them from an input.
  std::vector<std::string> fills = weft::trainingFeeds(module);
  const unsigned ids = unsigned(weft::tokensInput(module));
  auto tokens = ids < entry.getNumArguments()
                    ? dyn_cast<RankedTensorType>(entry.getArgumentTypes()[ids])
                    : RankedTensorType();
  bool found = false;
  for (unsigned i = 0; i < fills.size() && i < entry.getNumArguments(); ++i) {
    if (fills[i] != "positions")
      continue;
    found = true;
    auto type = dyn_cast<RankedTensorType>(entry.getArgumentTypes()[i]);
    if (tokens && type && type.getRank() == 2 && tokens.getRank() == 2 &&
        !type.isDynamicDim(1) && !tokens.isDynamicDim(1) &&
        type.getDimSize(1) != tokens.getDimSize(1))
      return llvm::createStringError(
          "--reset-position-ids: the model's position ids (input #" +
          std::to_string(i) + ") are not as long as its token ids");
  }
  if (!found)
    return llvm::createStringError(
        "--reset-position-ids: no input of the model takes position ids (it "
        "computes its positions itself, as a GPT-2 export without "
        "position_ids does); export the forward with position_ids as an "
        "input, or train without --reset-position-ids");
  return llvm::Error::success();
}

/// The norms (weft.layer_norm, weft.rms_norm) whose scale or bias is `value`,
/// followed into the weft.layers it is passed to.
static unsigned normsReading(Value value) {
  unsigned norms = 0;
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (isa<weft::LayerNormOp, weft::RMSNormOp>(user) &&
        use.getOperandNumber() > 0)
      ++norms;
    else if (auto layer = dyn_cast<weft::LayerOp>(user))
      norms += normsReading(
          layer.getBody().front().getArgument(use.getOperandNumber()));
  }
  return norms;
}

/// Warns, as `tool`, of a parameter that is the scale or bias of several
/// norms: torch.onnx.export in eval mode merges initializers of equal values
/// (every norm's weight starts as ones), so that training the file trains
/// one weight where the module has one per norm. (A module may share one on
/// purpose, as ALBERT shares its layers': only the user knows.)
static void warnMergedNormWeights(func::FuncOp entry, llvm::StringRef tool) {
  for (auto parameter : entry.getBody().getOps<weft::ParameterOp>()) {
    unsigned norms = normsReading(parameter.getResult());
    if (norms < 2)
      continue;
    parameter.emitWarning()
        << tool << ": parameter '" << parameter.getName() << "' is the scale "
        << "or bias of " << norms
        << " norms, so training trains one weight for all of them; "
           "torch.onnx.export in eval mode merges initializers of equal "
           "values (every norm's weight starts alike): export for training "
           "(training=torch.onnx.TrainingMode.TRAINING, "
           "do_constant_folding=False) for one weight per norm, unless the "
           "module shares it on purpose";
  }
}

/// What the labels of the model in `module` are, from the command line
/// (trainingObjective), once -weft-assign-feeds (which building the step
/// runs again alike) says which input takes the token ids. Prints, as
/// `tool`, why next-token labels are in the model's view, if they are.
static llvm::Expected<weft::rt::Objective>
objectiveOf(MLIRContext &context, ModuleOp module, llvm::StringRef tool) {
  PassManager pm(&context);
  // A model that computes its own loss gives it up (the step computes it),
  // and says so once here.
  weft::WeftLiftModelLossOptions lift;
  lift.explain = true;
  pm.addPass(weft::createWeftLiftModelLoss(lift));
  weft::WeftAssignFeedsOptions given;
  given.feeds.assign(feed.begin(), feed.end());
  pm.addPass(weft::createWeftAssignFeeds(given));
  if (failed(pm.run(module)))
    return weft::driver::diagnosed("assigning the inputs' fills failed");
  func::FuncOp entry;
  for (auto candidate : module.getOps<func::FuncOp>())
    if (!entry && !candidate.isExternal())
      entry = candidate;
  const unsigned ids = unsigned(weft::tokensInput(module));
  // A label per token needs logits at every position. An export for
  // generation keeps the last position's (nanoGPT's forward without
  // targets: lm_head(x[:, [-1], :])), whose training would fit one token of
  // each row, if its gradient were built at all.
  if (entry.getNumResults() && ids < entry.getNumArguments())
    if (auto logits = dyn_cast<RankedTensorType>(entry.getResultTypes()[0]),
        tokens = dyn_cast<RankedTensorType>(entry.getArgumentTypes()[ids]);
        logits && tokens && logits.hasStaticShape() &&
        tokens.hasStaticShape() && logits.getRank() == tokens.getRank() + 1 &&
        logits.getShape().drop_back() != tokens.getShape()) {
      std::string got, want;
      llvm::raw_string_ostream(got) << logits;
      llvm::raw_string_ostream(want) << tokens;
      return llvm::createStringError(
          "the model's first result, " + got +
          ", has logits at other "
          "positions than its token ids, " +
          want +
          ": a training step "
          "scores a label at every position. An export for generation keeps "
          "fewer (the last position's, as nanoGPT's forward does without "
          "targets); export the forward that training runs (nanoGPT's with "
          "targets, whose loss Weft takes over, or the logits of every "
          "position)");
    }
  weft::AttentionOp attention;
  const int64_t vocab = modelVocab(entry, ids);
  llvm::Expected<weft::rt::Objective> objective =
      trainingObjective(entry, ids, vocab, attention);
  if (objective)
    if (llvm::Error error = packedDocuments(module, entry, vocab, *objective))
      return error;
  if (objective)
    warnMergedNormWeights(entry, tool);
  if (objective && attention)
    attention.emitWarning()
        << tool
        << ": this attention sees every position of the token ids (it is "
           "not causal), so each position's label, its next token, is in the "
           "model's view and the loss falls by copying it; train an encoder "
           "such as BERT with --objective mlm --mask-token-id ID";
  return objective;
}

/// The step's build options from the command line.
static weft::TrainingStepOptions stepOptions(llvm::StringRef dtype,
                                             bool scaleLoss) {
  weft::TrainingStepOptions options;
  options.dtype = dtype.str();
  options.scaleLoss = scaleLoss;
  options.recompute = recompute;
  options.ignoreIndex = ignoreIndex;
  // Masked language modelling's unchosen positions, and the end of each
  // document under --eod-mask-loss, count no loss.
  if ((objectiveFlag == "mlm" || eodMaskLoss) &&
      !ignoreIndex.getNumOccurrences())
    options.ignoreIndex = -100;
  options.documentMask = resetAttentionMask;
  weft::WeftBuildOptimizerOptions &rule = options.optimizer;
  rule.optimizer = optimizer;
  rule.weightDecay = weightDecay;
  rule.decay = decayRule;
  rule.beta1 = beta1;
  rule.beta2 = beta2;
  rule.eps = adamEps;
  rule.momentum = momentum;
  rule.maxGradNorm = clipGrad;
  rule.freeze = freeze;
  options.feeds.assign(feed.begin(), feed.end());
  return options;
}

/// Whether `plan` splits anything over devices (else one rank runs the
/// unpartitioned step).
static bool partitions(const weft::plan::Plan &plan) {
  return plan.dp() > 1 || plan.tp() > 1 || plan.ulysses() > 1 ||
         weft::uses3dTensorParallel(plan) || plan.cp() > 1 ||
         plan.sequence_parallel() || plan.pp() > 1;
}

//===----------------------------------------------------------------------===//
// The command
//===----------------------------------------------------------------------===//

static OwningOpRef<ModuleOp> loadModel(MLIRContext &context) {
  llvm::StringRef path = model;
  if (path.ends_with(".mlir"))
    return parseSourceFile<ModuleOp>(path, &context);
  weft::OnnxImportOptions options;
  options.batchSize = batch;
  options.sequenceLength = seqLen;
  options.fixedBuffers = !noFixedBuffers;
  for (const std::string &shape : trainInputShapes)
    if (std::string error;
        failed(weft::parseInputShape(shape, options, error))) {
      trainError(error);
      return nullptr;
    }
  return weft::driver::importModel(path, options, context);
}

/// What a pipelined training step does not apply, as the plan's fields
/// (weft train and weft compile --train refuse them alike).
static std::vector<std::string> pipelineRefusals(const weft::plan::Plan &plan) {
  std::vector<std::string> refused;
  if (plan.pp() > 1 && gradAccum > 1 &&
      gradAccum != std::max(1, plan.num_micro_batches()))
    refused.push_back(
        "m=" + std::to_string(std::max(1, plan.num_micro_batches())) +
        ": a pipeline step runs the plan's m micro-batches, so --grad-accum " +
        std::to_string(gradAccum) + " must be 1 or m");
  return refused;
}

static std::optional<weft::plan::Plan> trainingPlan() {
  if (!planFile.empty() && !planSpec.empty()) {
    trainError("give --plan or --plan-spec, not both");
    return std::nullopt;
  }
  weft::plan::Plan plan;
  if (!planFile.empty()) {
    llvm::Expected<weft::plan::Plan> read = weft::readPlanFile(planFile);
    if (!read) {
      trainError(llvm::toString(read.takeError()));
      return std::nullopt;
    }
    plan = *read;
  } else if (!planSpec.empty()) {
    llvm::Expected<weft::PlanSpec> spec =
        weft::parsePlanSpec(planSpec, "--plan-spec");
    if (!spec) {
      trainError(llvm::toString(spec.takeError()));
      return std::nullopt;
    }
    plan = spec->plan;
  }
  // What a training step does not apply yet is refused by name.
  std::vector<std::string> refused = pipelineRefusals(plan);
  if (!refused.empty()) {
    std::string list;
    for (const std::string &field : refused)
      list += "\n  " + field;
    trainError("the plan has fields that weft train does not apply:" + list);
    return std::nullopt;
  }
  return plan;
}

/// Why the token ids of `tokens` (read from `path`) cannot be the labels of
/// the model in `module`, or "": each must be a class of the model's
/// output. A model exported without its language-model head returns hidden
/// states, whose width the ids would index; the first step failed on the
/// first id beyond it.
/// The classes per position of the model's output (its first result's last
/// dimension: logits over the vocabulary) and the rows of the token
/// embedding that reads the ids (0 where either is unknown).
static std::pair<int64_t, int64_t> outputClasses(ModuleOp module) {
  for (auto entry : module.getOps<func::FuncOp>()) {
    if (entry.isExternal() || entry.getNumResults() == 0)
      break;
    auto logits = dyn_cast<RankedTensorType>(entry.getResultTypes().front());
    if (!logits || logits.getRank() < 2 ||
        logits.isDynamicDim(logits.getRank() - 1))
      break;
    int64_t vocab = 0;
    entry.walk([&](weft::EmbeddingOp op) {
      if (!vocab && isa<BlockArgument>(op.getIndices()))
        vocab = cast<RankedTensorType>(op.getTable().getType()).getDimSize(0);
    });
    return {logits.getShape().back(), vocab};
  }
  return {0, 0};
}

/// Why the token ids of `stream` do not fit the model (rt::tokenIdsBeyond).
static std::string checkTokenIds(ModuleOp module,
                                 const weft::rt::TokenStream &stream,
                                 llvm::StringRef path) {
  auto [classes, vocab] = outputClasses(module);
  return weft::rt::tokenIdsBeyond(stream, path.str(), classes, vocab);
}

int runTrain(MLIRContext &context) {
  if (dataPath.empty())
    return trainError("--data is required: a token file (.npy or raw "
                      "u16/u32 binary)");
  if (steps <= 0 || batch <= 0 || seqLen <= 0 || gradAccum <= 0)
    return trainError("--steps, --batch-size, --seq-len and --grad-accum "
                      "must be positive");
  if (optimizer != "adamw" && optimizer != "sgd")
    return trainError("--optimizer " + optimizer + ": expected adamw or sgd");
  if (decayRule != "all" && decayRule != "matrices")
    return trainError("--decay " + decayRule + ": expected all or matrices");
  if (computeType != "f32" && computeType != "bf16" && computeType != "f16")
    return trainError("--dtype " + computeType + ": expected f32, bf16 or f16");
  Scaling scaling;
  if (std::string why = lossScaleOf(computeType, scaling.scale); !why.empty())
    return trainError(why);
  if (!(collectiveTimeout > 0))
    return trainError("--collective-timeout needs a positive number");
  if (evalEvery < 0 || evalIters <= 0)
    return trainError("--eval-every must be 0 or more and --eval-iters "
                      "positive");
  if (evalSplit.getNumOccurrences() &&
      (!(evalSplit > 0 && evalSplit < 1) || !evalDataPath.empty()))
    return trainError("--eval-split holds out a share of --data, above 0 and "
                      "below 1, in place of --eval-data (give one of them)");
  const bool evaluating = !evalDataPath.empty() || evalSplit > 0;
  if (!evaluating &&
      (evalEvery.getNumOccurrences() || evalIters.getNumOccurrences()))
    return trainError("--eval-every and --eval-iters evaluate --eval-data or "
                      "--eval-split: give one");
  llvm::Expected<weft::rt::LrSchedule> schedule = lrSchedule();
  if (!schedule)
    return trainError(llvm::toString(schedule.takeError()));
  // (The optimizer step leaves the frozen parameters out.)
  if (std::string why; !freeze.empty() && !llvm::Regex(freeze).isValid(why))
    return trainError("--freeze: " + why);
  std::optional<weft::plan::Plan> plan = trainingPlan();
  if (!plan)
    return 1;
  llvm::Expected<weft::CompressPolicy> policy =
      weft::parseCompressPolicy(plan->compress());
  if (!policy)
    return trainError(llvm::toString(policy.takeError()));
  if (!tracePath.empty() && plan->pp() <= 1)
    return trainError("--trace records a pipeline's steps: give a plan with "
                      "pp > 1");
  absl::StatusOr<weft::rt::TokenStream> read =
      weft::rt::readTokenStream(dataPath, dataDtype);
  if (!read.ok())
    return trainError(std::string(read.status().message()));
  weft::rt::TokenStream tokens = std::move(*read);
  std::string error;
  OwningOpRef<ModuleOp> module = loadModel(context);
  if (!module)
    return 1;
  // Buffers the file stores as weights, which torch does not train.
  if (auto fixed = (*module)->getAttrOfType<ArrayAttr>(
          weft::WeftDialect::getFixedBuffersAttrName())) {
    llvm::errs() << "weft train: not trained: " << fixed.size()
                 << " fixed position buffer(s) (sinusoid tables, rotary "
                    "frequencies), constants since the import:";
    for (Attribute name : fixed)
      llvm::errs() << ' ' << cast<StringAttr>(name).getValue();
    llvm::errs() << '\n';
  }
  // What the labels are.
  llvm::Expected<weft::rt::Objective> objective =
      objectiveOf(context, *module, "weft train");
  if (!objective) {
    llvm::handleAllErrors(
        objective.takeError(), [](const weft::driver::DiagnosedError &) {},
        [](const llvm::ErrorInfoBase &e) { trainError(e.message()); });
    return 1;
  }
  if (std::string why = checkTokenIds(*module, tokens, dataPath); !why.empty())
    return trainError(why);
  // Held-out data: its loss under the forward the step differentiates
  // (built by the same passes, before the backward), on one device with
  // the step's whole weights.
  weft::rt::TokenStream evalTokens;
  OwningOpRef<ModuleOp> evalModule;
  // What evaluations name: the file, or the share of --data held out.
  std::string evalName = evalDataPath;
  if (evalSplit > 0) {
    std::tie(tokens, evalTokens) =
        weft::rt::splitTokenStream(tokens, evalSplit);
    llvm::raw_string_ostream(evalName = "the last ")
        << llvm::format("%g", evalSplit * 100) << "% of --data";
  }
  if (!evalDataPath.empty()) {
    absl::StatusOr<weft::rt::TokenStream> held =
        weft::rt::readTokenStream(evalDataPath, dataDtype);
    if (!held.ok())
      return trainError(std::string(held.status().message()));
    evalTokens = std::move(*held);
    if (std::string why = checkTokenIds(*module, evalTokens, evalDataPath);
        !why.empty())
      return trainError(why);
  }
  if (shuffleSeed.getNumOccurrences()) {
    tokens.shuffle(shuffleSeed);
    evalTokens.shuffle(shuffleSeed);
  }
  if (evaluating) {
    evalModule = cast<ModuleOp>((*module)->clone());
    if (failed(weft::buildEvaluationStep(context, *evalModule,
                                         stepOptions(computeType, false))))
      return 1;
  }
  // The training step as IR: the loss, then (with pp > 1) the stages, the
  // backward, and the pipeline's schedule.
  const bool pipelined = plan->pp() > 1;
  FunctionType type;
  if (failed(weft::buildTrainingStep(
          context, *module, *plan,
          stepOptions(computeType, bool(scaling.scale)), type)))
    return 1;
  // The model's token input gives the micro-batch and sequence unless they
  // are given: a .mlir module's, or an ONNX export's static shape (the import
  // binds dynamic axes to --batch-size and --seq-len, whose defaults then
  // stand), as weft compile --train reads them.
  if (!batch.getNumOccurrences() && !seqLen.getNumOccurrences())
    if (auto ids = dyn_cast<RankedTensorType>(
            type.getInput(unsigned(weft::tokensInput(*module))));
        ids && ids.getRank() == 2 && ids.hasStaticShape()) {
      batch = ids.getDimSize(0);
      seqLen = ids.getDimSize(1);
    }
  // How each model input is filled (weft.feeds), with its length.
  std::vector<weft::rt::InputFeed> feeds;
  if (std::string why =
          checkTrainingInputs(*module, type, batch, seqLen, &feeds);
      !why.empty())
    return trainError(why);
  // Each row's source is the tokens before its window: the file must hold
  // the longest with a micro-batch (each dataset of a blend, a sequence).
  if (std::string why = weft::rt::tokenStreamShortfall(tokens, dataPath, batch,
                                                       seqLen, feeds);
      !why.empty())
    return trainError(why);
  if (std::string why = weft::rt::tokenStreamShortfall(evalTokens, evalName,
                                                       batch, seqLen, feeds);
      evalModule && !why.empty())
    return trainError(why);
  // The step's function (split into stages' functions with pp > 1).
  func::FuncOp func =
      pipelined ? func::FuncOp() : *module->getOps<func::FuncOp>().begin();
  // The trained parameters and their first values.
  weft::InterpreterOptions options;
  // Top-k's error feedback: what each rank's gradient all-reduce did not
  // send, carried from step to step (and in checkpoints).
  weft::rt::FeedbackStore feedback;
  options.feedback = &feedback;
  options.weightsDir = llvm::sys::path::parent_path(model).str();
  if (options.weightsDir.empty())
    options.weightsDir = ".";
  std::vector<ParamState> params;
  llvm::StringMap<unsigned> index;
  // The trained parameters: those whose gradients the step returns (each
  // stage's, with pp > 1; a tied weight once).
  for (auto candidate : module->getOps<func::FuncOp>())
    for (unsigned r = 0; r < candidate.getNumResults(); ++r) {
      auto name = candidate.getResultAttrOfType<StringAttr>(
          r, weft::WeftDialect::getGradientOfAttrName());
      if (!name || index.count(name.getValue()))
        continue;
      ParamState p;
      p.name = name.getValue().str();
      index[p.name] = params.size();
      params.push_back(std::move(p));
    }
  bool missing = false;
  module->walk([&](weft::ParameterOp param) {
    auto it = index.find(param.getName());
    if (it == index.end() || params[it->second].loaded || missing)
      return;
    FailureOr<std::vector<HostTensor>> value =
        weft::evaluate({param.getOperation()}, param->getResults(), options);
    if (failed(value)) {
      missing = true;
      return;
    }
    params[it->second].value =
        weft::rt::cast((*value)[0], weft::rt::DType::F32);
    params[it->second].loaded = true;
  });
  if (missing)
    return 1;
  if (!dumpStep.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream out(dumpStep, ec);
    module->print(out);
  }
  bool partitioned = partitions(*plan) || devices > 1;
  if (failed(weft::buildPartitionedStep(
          context, *module, *plan, partitioned,
          stepOptions(computeType, bool(scaling.scale)))))
    return 1;
  func::FuncOp optimizerStep;
  for (auto candidate : module->getOps<func::FuncOp>())
    if (candidate->hasAttr(weft::WeftDialect::getOptimizerAttrName()))
      optimizerStep = candidate;
  if (!dumpPartitioned.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream out(dumpPartitioned, ec);
    if (ec)
      return trainError("cannot write " + dumpPartitioned + ": " +
                        ec.message());
    module->print(out);
  }
  // The top-k all-reduces whose residuals checkpoints keep.
  Residuals residuals;
  residuals.store = &feedback;
  residuals.plan = weft::formatPlanSpec(*plan);
  module->walk([&](weft::CollectiveOpInterface collective) {
    if (collective.getWireCodec() == weft::CollectiveCodec::topk)
      residuals.sites.push_back(collective.getOperation());
  });
  int64_t start = 0;
  if (!resumeDir.empty()) {
    start = loadCheckpoint(params, residuals, scaling, error);
    if (start < 0)
      return trainError(error);
    llvm::errs() << "weft train: resumed from " << resumeDir << " at step "
                 << start << '\n';
  }

  std::unique_ptr<llvm::raw_fd_ostream> log;
  bool jsonl = llvm::StringRef(logPath).ends_with(".jsonl");
  if (!logPath.empty()) {
    uint64_t existing = 0;
    if (start > 0 && llvm::sys::fs::file_size(logPath, existing))
      existing = 0;
    std::error_code ec;
    log = std::make_unique<llvm::raw_fd_ostream>(
        logPath, ec,
        start > 0 ? llvm::sys::fs::OF_Append : llvm::sys::fs::OF_None);
    if (ec)
      return trainError("cannot write " + logPath + ": " + ec.message());
    if (!jsonl && existing == 0)
      *log << "step,loss,lr,grad_norm,tokens,seconds"
           << (scaling.scale ? ",loss_scale,skipped" : "")
           << (evalModule ? ",val_loss" : "") << "\n";
  }
  // The held-out loss: the mean of the first --eval-iters windows' losses.
  func::FuncOp evalFunc;
  if (evalModule)
    for (auto candidate : evalModule->getOps<func::FuncOp>())
      if (!evalFunc && !candidate.isExternal())
        evalFunc = candidate;
  weft::InterpreterOptions evalOptions;
  evalOptions.weightsDir = options.weightsDir;
  auto evaluateHeldOut =
      [&](const std::vector<ParamState> &weights) -> FailureOr<double> {
    llvm::StringMap<HostTensor> whole;
    for (const ParamState &p : weights)
      whole[p.name] = p.value;
    evalOptions.parameters = &whole;
    double sum = 0;
    for (int64_t w = 0; w < evalIters; ++w) {
      FailureOr<std::vector<HostTensor>> outputs =
          weft::interpret(evalFunc,
                          weft::rt::tokenWindows(evalTokens, batch, seqLen, w,
                                                 1, feeds, *objective),
                          evalOptions);
      if (failed(outputs))
        return failure();
      sum += (*outputs)[0].at(0);
    }
    return sum / double(evalIters);
  };

  llvm::StringMap<HostTensor> current;
  options.parameters = &current;
  // With pp > 1: the pipeline the runtime executes, its stages interpreted.
  std::optional<weft::rt::PipelineProgram> pipeline;
  std::optional<weft::PipelineInfo> pipelineInfo;
  // With pp > 1 (partitioned): each pipeline rank's optimizer step, which
  // its ranks run on their blocks after the pipeline's steps.
  std::vector<func::FuncOp> pipelineOptimizers;
  std::vector<weft::rt::PipelineOptimizerStep> pipelineUpdates;
  const int64_t windows =
      pipelined ? std::max(1, plan->num_micro_batches()) : gradAccum;
  if (pipelined) {
    FailureOr<std::optional<weft::PipelineInfo>> read =
        weft::readPipeline(*module);
    if (failed(read) || !*read)
      return 1;
    pipelineInfo = **read;
    llvm::Expected<weft::rt::PipelineProgram> program =
        weft::driver::pipelineProgram(*module, *pipelineInfo);
    if (!program)
      return trainError(llvm::toString(program.takeError()));
    if (devices > 0 && int64_t(program->mesh.size()) != devices)
      return trainError(
          "the plan runs on " + std::to_string(program->mesh.size()) +
          " devices, but --devices is " + std::to_string(devices));
    weft::driver::interpretStages(*program, *pipelineInfo, options);
    llvm::Expected<std::vector<func::FuncOp>> found =
        weft::driver::pipelineOptimizers(*module, *program, options,
                                         pipelineUpdates);
    if (!found)
      return trainError(llvm::toString(found.takeError()));
    // (A plan with stages is partitioned: buildPartitionedStep gave each
    // pipeline rank its optimizer step.)
    if (pipelineUpdates.empty())
      return trainError(
          "the pipelined step has no optimizer step per "
          "pipeline rank (-weft-build-optimizer=rank-local=true)");
    pipelineOptimizers = std::move(*found);
    pipeline = std::move(*program);
  }
  auto begin = std::chrono::steady_clock::now();
  int64_t tokensSeen = 0;
  for (int64_t step = start; step < steps; ++step) {
    auto stepBegin = std::chrono::steady_clock::now();
    for (const ParamState &p : params)
      current[p.name] = p.value;
    std::vector<std::vector<float>> grads(params.size());
    double lossSum = 0;
    std::vector<int64_t> bytes;
    // The first step measures what each rank keeps from its forward for its
    // backward (not with pipeline stages, whose stage functions hand it over
    // through the executor's slots).
    std::vector<int64_t> savedPeak;
    options.savedActivationPeak = nullptr;
    if (step == start && !pipeline) {
      savedPeak.assign(size_t(partitioned ? devices : 1), 0);
      options.savedActivationPeak = &savedPeak;
    }
    // Consecutive windows through the file, wrapping around: one per
    // micro-batch, `count` of them from window `first`.
    // With loss scaling, the step's last argument is the scale.
    auto windowInputs = [&](int64_t first, int64_t count) {
      std::vector<HostTensor> inputs = weft::rt::tokenWindows(
          tokens, batch, seqLen, first, count, feeds, *objective);
      if (scaling.scale) {
        HostTensor scale(weft::rt::DType::F32, {});
        scale.floats[0] = float(scaling.factor());
        inputs.push_back(std::move(scale));
      }
      return inputs;
    };
    const double lr = schedule->at(step);
    std::optional<double> norm;
    if (pipeline) {
      // Each pipeline rank's optimizer step's arguments (whole; the ranks
      // cut their blocks), but the gradients, which its ranks have.
      for (auto [s, update] : llvm::enumerate(pipelineUpdates)) {
        std::vector<int> unused;
        FailureOr<std::vector<HostTensor>> inputs = optimizerInputs(
            pipelineOptimizers[s], params, index, nullptr, windows, lr,
            scaling.optimizerSteps + 1, scaling.factor(), unused);
        if (failed(inputs))
          return 1;
        update.inputs = std::move(*inputs);
      }
      // One pipeline step runs the m micro-batches of the schedule.
      std::vector<weft::driver::TraceEvent> trace;
      std::mutex traceMutex;
      weft::rt::StepObserver observe = [&](int rank,
                                           const weft::rt::PipelineStep &ran,
                                           double start, double end) {
        std::lock_guard<std::mutex> lock(traceMutex);
        bool compute = ran.kind != weft::rt::PipelineStep::Send &&
                       ran.kind != weft::rt::PipelineStep::Recv;
        trace.push_back(
            {rank, ran.name, compute ? "compute" : "p2p", start, end});
      };
      const bool tracing = !tracePath.empty() && step == start;
      auto ran = weft::rt::runPipelineTrainingOnMesh(
          *pipeline, options.weightsDir, windowInputs(step * windows, windows),
          &bytes, std::chrono::milliseconds(int64_t(collectiveTimeout * 1000)),
          tracing ? &observe : nullptr, pipelineUpdates);
      if (!ran.ok())
        return trainError(std::string(ran.status().message()));
      if (tracing) {
        std::string error;
        if (!writeText(tracePath,
                       weft::driver::chromeTrace(
                           trace, int(pipeline->mesh.size()), pipeline->stages),
                       error))
          return trainError(error);
      }
      if (step == start) {
        weft::driver::HeldTrainingState held;
        for (const weft::rt::PipelineHeld &rank : ran->held) {
          held.gradients.push_back(rank.gradients);
          held.parameters.push_back(rank.parameters);
          held.optimizer.push_back(rank.optimizer);
        }
        printHeldState(step, held);
        // What the schedule kept in flight: the figure the cost model
        // predicts per stage as activations (at the tensors' element types).
        llvm::errs() << "weft train: saved activations per rank in step "
                     << step + 1
                     << " (peak bytes at their element types, the schedule's "
                        "micro-batches in flight):";
        for (const weft::rt::PipelineHeld &rank : ran->held)
          llvm::errs() << ' ' << rank.activations;
        llvm::errs() << '\n';
      }
      if (ran->outputs.empty() || int64_t(ran->outputs[0].size()) != windows)
        return trainError("the pipeline returned no loss per micro-batch");
      for (const HostTensor &microLoss : ran->outputs[0])
        lossSum += microLoss.at(0);
      // (A tied parameter comes back from each pipeline rank that holds
      // it, the same.)
      for (auto [s, updated] : llvm::enumerate(ran->updated))
        norm = applyOptimizerOutputs(pipelineOptimizers[s], params, index,
                                     updated, 0);
      tokensSeen += windows * batch * seqLen;
    }
    if (!pipeline && partitioned) {
      // The step's micro-batches on the mesh, summed on each rank, the
      // partial gradients reduced once (-weft-defer-gradient-reduction), and
      // each rank's optimizer step on its blocks.
      std::vector<std::vector<HostTensor>> micro;
      for (int64_t w = 0; w < gradAccum; ++w)
        micro.push_back(windowInputs(step * gradAccum + w, 1));
      weft::driver::MeshOptimizerStep update;
      update.function = optimizerStep;
      FailureOr<std::vector<HostTensor>> inputs = optimizerInputs(
          optimizerStep, params, index, nullptr, windows, lr,
          scaling.optimizerSteps + 1, scaling.factor(), update.gradientOf);
      if (failed(inputs))
        return 1;
      update.inputs = std::move(*inputs);
      weft::driver::HeldTrainingState held;
      llvm::Expected<std::vector<HostTensor>> outputs =
          weft::driver::runTrainingStepOnMeshDevices(
              *module, func, micro, options, devices, collectiveTimeout, bytes,
              &update, step == start ? &held : nullptr);
      if (!outputs)
        return trainError(llvm::toString(outputs.takeError()));
      if (step == start)
        printHeldState(step, held);
      lossSum += (*outputs)[0].at(0);
      norm = applyOptimizerOutputs(optimizerStep, params, index, *outputs,
                                   func.getNumResults());
      tokensSeen += gradAccum * batch * seqLen;
    }
    for (int64_t micro = 0; !pipeline && !partitioned && micro < gradAccum;
         ++micro) {
      std::vector<HostTensor> inputs =
          windowInputs(step * gradAccum + micro, 1);
      FailureOr<std::vector<HostTensor>> outputs =
          weft::interpret(func, inputs, options);
      if (failed(outputs))
        return 1;
      lossSum += (*outputs)[0].at(0);
      for (size_t k = 0; k < params.size(); ++k) {
        const weft::rt::Storage<float> &g = (*outputs)[k + 1].floats;
        if (grads[k].empty())
          grads[k] = g.toVector();
        else
          for (size_t i = 0; i < g.size(); ++i)
            grads[k][i] += g[i];
      }
      tokensSeen += batch * seqLen;
    }
    if (step == start && !bytes.empty()) {
      // What each rank sent in the step (one count per rank): the figure the
      // cost model predicts.
      const std::vector<int64_t> &perRank = bytes;
      llvm::errs() << "weft train: bytes sent per rank in step " << step + 1
                   << ":";
      for (int64_t sent : perRank)
        llvm::errs() << ' ' << sent;
      llvm::errs() << '\n';
    }
    if (options.savedActivationPeak) {
      // The memory figure the cost model predicts (its saved_bytes_*), as
      // the CPU runtime allocates it (f32 floats, i64 integers).
      llvm::errs() << "weft train: saved activations per rank in step "
                   << step + 1 << " (peak bytes, one micro-batch):";
      for (int64_t held : savedPeak)
        llvm::errs() << ' ' << held;
      llvm::errs() << '\n';
      options.savedActivationPeak = nullptr;
    }
    double loss = lossSum / double(windows);
    if (!std::isfinite(loss))
      return trainError("step " + std::to_string(step + 1) +
                        ": the loss is not finite (" + std::to_string(loss) +
                        "); lower --lr or clip gradients (--clip-grad)");
    if (!norm) {
      FailureOr<double> ran =
          runOptimizer(optimizerStep, params, index, grads, windows, lr,
                       scaling.optimizerSteps + 1, scaling.factor(), options);
      if (failed(ran))
        return 1;
      norm = *ran;
    }
    // Loss scaling: an overflow skipped the update (the optimizer step kept
    // everything) and moves the scale.
    const double usedScale = scaling.factor();
    const bool taken = scaling.afterStep(*norm);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
            .count();
    double stepSeconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - stepBegin)
                             .count();
    double rate = double(tokensSeen) / std::max(seconds, 1e-9);
    double eta = stepSeconds * double(steps - step - 1);
    llvm::outs() << llvm::format("step %lld/%lld  loss %.6f  lr %.3e  "
                                 "grad_norm %.4f  tokens/s %.0f  eta %.0fs",
                                 (long long)(step + 1),
                                 (long long)steps.getValue(), loss, lr, *norm,
                                 rate, eta);
    if (scaling.scale)
      llvm::outs() << llvm::format("  loss_scale %g", usedScale)
                   << (taken ? "" : "  skipped: the gradients overflowed");
    llvm::outs() << '\n';
    bool last = step + 1 == steps;
    std::optional<double> heldOut;
    if (evalModule &&
        (last || (evalEvery > 0 && (step + 1) % evalEvery == 0))) {
      FailureOr<double> evaluated = evaluateHeldOut(params);
      if (failed(evaluated))
        return 1;
      heldOut = *evaluated;
      llvm::outs() << llvm::format(
          "eval after step %lld/%lld  val_loss %.6f  val_ppl %.4g  (%lld "
          "micro-batches of %s)\n",
          (long long)(step + 1), (long long)steps.getValue(), *heldOut,
          std::exp(*heldOut), (long long)evalIters.getValue(),
          evalName.c_str());
    }
    llvm::outs().flush();
    if (log) {
      std::string scaled;
      if (scaling.scale) {
        llvm::raw_string_ostream os(scaled);
        if (jsonl)
          os << ", \"loss_scale\": " << llvm::format("%.17g", usedScale)
             << ", \"skipped\": " << (taken ? "false" : "true");
        else
          os << ',' << llvm::format("%.17g", usedScale) << ',' << !taken;
      }
      if (evalModule) {
        llvm::raw_string_ostream os(scaled);
        if (jsonl && heldOut)
          os << ", \"val_loss\": " << llvm::format("%.9f", *heldOut);
        else if (!jsonl)
          os << ',';
        if (!jsonl && heldOut)
          os << llvm::format("%.9f", *heldOut);
      }
      if (jsonl)
        *log << llvm::formatv("{{\"step\": {0}, \"loss\": {1:f9}, \"lr\": "
                              "{2:e6}, \"grad_norm\": {3:f6}, \"tokens\": "
                              "{4}, \"seconds\": {5:f3}{6}}\n",
                              step + 1, loss, lr, *norm, tokensSeen, seconds,
                              scaled);
      else
        *log << llvm::formatv("{0},{1:f9},{2:e6},{3:f6},{4},{5:f3}{6}\n",
                              step + 1, loss, lr, *norm, tokensSeen, seconds,
                              scaled);
      log->flush();
    }
    if (!saveDir.empty() &&
        (last || (saveEvery > 0 && (step + 1) % saveEvery == 0))) {
      if (!saveCheckpoint(params, step + 1, residuals, scaling, error))
        return trainError(error);
    }
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// weft compile --train
//===----------------------------------------------------------------------===//

/// The training options given on a weft compile command line (each means
/// something only with --train).
std::vector<std::string> trainingFlagsGiven() {
  const cl::Option *options[] = {&steps,
                                 &gradAccum,
                                 &optimizer,
                                 &learningRate,
                                 &minLr,
                                 &warmup,
                                 &lrDecayStyle,
                                 &lrDecaySteps,
                                 &lrWsdDecaySteps,
                                 &lrWsdDecayStyle,
                                 &weightDecay,
                                 &decayRule,
                                 &beta1,
                                 &beta2,
                                 &adamEps,
                                 &momentum,
                                 &clipGrad,
                                 &ignoreIndex,
                                 &objectiveFlag,
                                 &maskTokenId,
                                 &mlmProbability,
                                 std::addressof(specialTokenIds),
                                 &eodToken,
                                 &resetAttentionMask,
                                 &resetPositionIds,
                                 &eodMaskLoss,
                                 &freeze,
                                 std::addressof(feed),
                                 &recompute,
                                 &lossScaleFlag,
                                 &initialLossScale,
                                 &lossScaleWindow,
                                 &minLossScale};
  std::vector<std::string> given;
  for (const cl::Option *option : options)
    if (option->getNumOccurrences())
      given.push_back(option->ArgStr.str());
  return given;
}

llvm::Expected<weft::driver::CompileOutcome>
compileTrainingProgram(MLIRContext &context,
                       const weft::driver::CompileRequest &given) {
  if (optimizer != "adamw" && optimizer != "sgd")
    return llvm::createStringError("--optimizer " + optimizer +
                                   ": expected adamw or sgd");
  if (decayRule != "all" && decayRule != "matrices")
    return llvm::createStringError("--decay " + decayRule +
                                   ": expected all or matrices");
  if (const std::string &dtype = given.options.dtype;
      dtype != "f32" && dtype != "bf16" && dtype != "f16")
    return llvm::createStringError("--dtype " + dtype +
                                   ": expected f32, bf16 or f16");
  std::optional<weft::rt::LossScale> scale;
  if (std::string why = lossScaleOf(given.options.dtype, scale); !why.empty())
    return llvm::createStringError(why);
  if (steps <= 0 || gradAccum <= 0)
    return llvm::createStringError("--steps and --grad-accum must be positive");
  if (std::string why; !freeze.empty() && !llvm::Regex(freeze).isValid(why))
    return llvm::createStringError("--freeze: " + why);
  if (std::vector<std::string> refused = pipelineRefusals(given.plan);
      !refused.empty())
    return llvm::createStringError("the plan has fields that weft compile "
                                   "--train does not apply: " +
                                   refused.front());
  llvm::Expected<weft::rt::LrSchedule> schedule = lrSchedule();
  if (!schedule)
    return schedule.takeError();
  weft::driver::CompileRequest request = given;
  request.training.steps = steps;
  request.training.gradAccum = gradAccum;
  request.training.schedule = *schedule;
  request.training.weightDecay = weightDecay;
  request.training.beta1 = beta1;
  request.training.beta2 = beta2;
  request.training.lossScale = scale;
  weft::plan::Plan plan = given.plan;
  // The model is imported in f32: the step computes in --dtype from f32
  // weights (not a 16-bit model's).
  std::string dtype = given.options.dtype;
  request.options.dtype = "f32";
  const bool scaleLoss = scale.has_value();
  request.buildTrainingStep =
      [plan, dtype,
       scaleLoss](MLIRContext &ctx, ModuleOp module,
                  weft::TrainingProgramDefaults &defaults) -> llvm::Error {
    llvm::Expected<weft::rt::Objective> objective =
        objectiveOf(ctx, module, "weft compile");
    if (!objective)
      return objective.takeError();
    defaults.objective = *objective;
    // (The model's own output: the program checks its token files by it.)
    std::tie(defaults.classes, defaults.embeddingRows) = outputClasses(module);
    FunctionType type;
    if (failed(weft::buildTrainingStep(ctx, module, plan,
                                       stepOptions(dtype, scaleLoss), type)))
      return weft::driver::diagnosed("building the training step failed");
    const unsigned tokens = unsigned(weft::tokensInput(module));
    auto ids = tokens < type.getNumInputs()
                   ? dyn_cast<RankedTensorType>(type.getInput(tokens))
                   : RankedTensorType();
    if (!ids || ids.getRank() != 2 || !ids.hasStaticShape())
      return llvm::createStringError(
          "the model's input #" + std::to_string(tokens) +
          " is not [batch, seq] token ids with a static shape: give "
          "--batch-size and --seq-len");
    if (std::string why = checkTrainingInputs(module, type, ids.getDimSize(0),
                                              ids.getDimSize(1));
        !why.empty())
      return llvm::createStringError(why);
    if (failed(weft::buildPartitionedStep(ctx, module, plan, partitions(plan),
                                          stepOptions(dtype, scaleLoss))))
      return weft::driver::diagnosed("partitioning the training step failed");
    // The held-out loss (the program's --eval-data): the step's forward to
    // its loss, partitioned as the step is (with a pipeline, each stage's
    // forward, on the schedule's forward steps).
    PassManager pm(&ctx);
    pm.addPass(weft::createWeftExtractEvaluation());
    if (failed(pm.run(module)))
      return weft::driver::diagnosed("extracting the evaluation step failed");
    return llvm::Error::success();
  };
  return weft::driver::compileModel(context, request);
}

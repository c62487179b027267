//===- PlanCommand.cpp - `weft plan` and `weft calibrate` -----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Driver/Driver.h"
#include "weft/Import/OnnxImporter.h"
#include "weft/Planner/Cluster.h"
#include "weft/Planner/CostModel.h"
#include "weft/Planner/HfConfig.h"
#include "weft/Planner/Model.h"
#include "weft/Planner/Report.h"
#include "weft/Planner/Risk.h"
#include "weft/Planner/Search.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <fstream>
#include <sstream>

using namespace mlir;
using namespace weft;
using namespace weft::planner;
namespace cl = llvm::cl;

static cl::SubCommand planCommand(
    "plan", "Choose a parallelization plan for training a model on a cluster");
static cl::SubCommand calibrateCommand(
    "calibrate",
    "Compare the cost model with published training runs (per-row error)");

bool planCommandSelected() { return bool(planCommand); }
llvm::cl::SubCommand &importSubCommand();
bool calibrateCommandSelected() { return bool(calibrateCommand); }

static cl::OptionCategory planCategory("weft plan options");
static cl::opt<std::string>
    planModelFile(cl::Positional, cl::Optional,
                  cl::desc("[model.onnx | model.mlir]"), cl::sub(planCommand),
                  cl::cat(planCategory));
static cl::opt<std::string> presetName(
    "model",
    cl::desc("A built-in model: gpt3-125m ... gpt3-175b, megatron-1.7b ... "
             "megatron-1t, llama2-7b/13b/70b, llama3-8b/70b/405b, ...; a "
             "Hugging Face config.json (or a directory holding one: a "
             "checkpoint's, save_pretrained's); or 'gpt' / 'llama' with "
             "--layers, --hidden, ..."),
    cl::sub(planCommand), cl::sub(importSubCommand()), cl::cat(planCategory));
static cl::opt<int64_t> layersOpt("layers", cl::desc("Builder: layers"),
                                  cl::init(0), cl::sub(planCommand),
                                  cl::sub(importSubCommand()));
static cl::opt<int64_t> hiddenOpt("hidden", cl::desc("Builder: hidden size"),
                                  cl::init(0), cl::sub(planCommand),
                                  cl::sub(importSubCommand()));
static cl::opt<int64_t> headsOpt("heads", cl::desc("Builder: attention heads"),
                                 cl::init(0), cl::sub(planCommand),
                                 cl::sub(importSubCommand()));
static cl::opt<int64_t> kvHeadsOpt("kv-heads",
                                   cl::desc("Builder: KV heads (GQA)"),
                                   cl::init(0), cl::sub(planCommand),
                                   cl::sub(importSubCommand()));
static cl::opt<int64_t> headDimOpt(
    "head-dim",
    cl::desc("Builder: each head's width where it is not hidden / heads "
             "(Gemma 3 27B: 128 at hidden 5376 and 32 heads; Megatron-LM's "
             "--kv-channels)"),
    cl::init(0), cl::sub(planCommand), cl::sub(importSubCommand()));
static cl::opt<int64_t> slidingWindowOpt(
    "sliding-window",
    cl::desc("A causal sliding window: keys each query attends to, itself "
             "included (Mistral's 4096); 0 for none"),
    cl::init(0), cl::sub(planCommand), cl::sub(importSubCommand()));
static cl::opt<int64_t> globalEveryOpt(
    "global-every",
    cl::desc("With --sliding-window: every N-th layer attends to all keys "
             "before it (full causal), the others through the window, as "
             "Gemma's local and global layers (Gemma 2: 2, Gemma 3: 6)"),
    cl::init(0), cl::sub(planCommand), cl::sub(importSubCommand()));
static cl::opt<int64_t> ffnOpt("ffn", cl::desc("Builder: FFN hidden size"),
                               cl::init(0), cl::sub(planCommand),
                               cl::sub(importSubCommand()));
static cl::opt<std::string>
    ffnKindOpt("ffn-kind", cl::desc("Builder: gelu, swiglu or geglu"),
               cl::init(""), cl::sub(planCommand), cl::sub(importSubCommand()));
static cl::opt<int64_t> vocabOpt("vocab", cl::desc("Builder: vocabulary"),
                                 cl::init(0), cl::sub(planCommand),
                                 cl::sub(importSubCommand()));
static cl::opt<std::string>
    tiedOpt("tied", cl::desc("Builder: tied embeddings (yes/no)"), cl::init(""),
            cl::sub(planCommand), cl::sub(importSubCommand()));
static cl::opt<std::string> clusterOpt(
    "cluster",
    cl::desc("GPU:PERNODExNODES (e.g. h100:8x128, a100-80g:8x8) or a "
             "cluster file (.json or protobuf text)"),
    cl::sub(planCommand));
static cl::opt<int64_t> globalBatch("global-batch",
                                    cl::desc("Sequences per step"),
                                    cl::init(0), cl::sub(planCommand));
static cl::opt<int64_t> planSeqLen(
    "seq-len", cl::desc("Sequence length (default: the model's)"),
    cl::init(0), cl::sub(planCommand));
static cl::list<std::string> planInputShapes(
    "input-shape",
    cl::desc("Shape of a model input, as for import: NAME=DxDx..., where a "
             "dimension may be 'batch' (the micro-batch the planner chooses) "
             "or 'seq' (--seq-len); repeatable"),
    cl::value_desc("NAME=DIMS"), cl::sub(planCommand));
static cl::opt<std::string>
    dtypeOpt("dtype",
             cl::desc("bf16 or fp16 (default: bf16, or fp16 on a GPU without "
                      "bf16 tensor cores, such as V100)"),
             cl::init(""), cl::sub(planCommand));
static cl::opt<double>
    reserveOpt("memory-reserve",
               cl::desc("GiB kept free per GPU (CUDA context, allocator)"),
               cl::init(2.0), cl::sub(planCommand));
static cl::opt<bool>
    flashOpt("flash-attention",
             cl::desc("Fused attention (default, except on GPUs before "
                      "Ampere such as V100); =false keeps the S x S scores "
                      "in memory"),
             cl::init(true), cl::sub(planCommand));
static cl::opt<bool> dropoutOpt("dropout",
                                cl::desc("Dropout masks kept for backward"),
                                cl::init(false), cl::sub(planCommand));
static cl::opt<bool> gradReduce16(
    "grad-reduce-16bit",
    cl::desc("Reduce data-parallel gradients in bf16/fp16 (default fp32)"),
    cl::init(false), cl::sub(planCommand));
static cl::opt<bool> launchBlockingOpt(
    "launch-blocking",
    cl::desc("Kernels launch synchronously (CUDA_LAUNCH_BLOCKING=1): each "
             "costs the GPU's blocking_launch_us of host time more, and no "
             "communication overlaps compute"),
    cl::init(false), cl::sub(planCommand));
static cl::opt<std::string> freezeOpt(
    "freeze",
    cl::desc("Parameters not trained (a regular expression over their names, "
             "as weft train's --freeze): the training step --evaluate counts "
             "(step_comm) gives them no gradient and no update, and memory "
             "counts them as weights only (no gradients or optimizer state)"),
    cl::value_desc("regex"), cl::init(""), cl::sub(planCommand));
static cl::opt<bool> noFixedBuffersOpt(
    "no-fixed-buffers",
    cl::desc("Keep fixed position buffers (sinusoid tables, rotary "
             "frequencies, which the import tells by their values and "
             "makes constants, as torch never trains buffers) as weights "
             "that are trained, as weft train --no-fixed-buffers does"),
    cl::init(false), cl::sub(planCommand));
static cl::opt<int> topOpt("top", cl::desc("Plans to print"), cl::init(5),
                           cl::sub(planCommand));
static cl::opt<double> riskToleranceOpt(
    "risk-tolerance",
    cl::desc("Plans predicted within this fraction of the fastest count as "
             "equal and the one with fewer risks goes first (default: the "
             "model's measured spread; 0: fastest first)"),
    cl::init(-1), cl::sub(planCommand));
static cl::opt<std::string> jsonOpt("json",
                                    cl::desc("Write the plans as JSON here"),
                                    cl::sub(planCommand));
static cl::opt<std::string>
    reportOpt("report", cl::desc("Write a self-contained HTML report here"),
              cl::sub(planCommand));
static cl::opt<std::string> traceOpt(
    "trace",
    cl::desc("Write the first plan's predicted timeline here as a "
             "Chrome-trace / Perfetto JSON: one track per pipeline rank, "
             "the schedule's F/B/W steps named as weft run/train --trace "
             "names the executed ones, then data-parallel communication and "
             "the optimizer"),
    cl::value_desc("trace.json"), cl::sub(planCommand));
static cl::opt<bool> explainOpt("explain",
                                cl::desc("Explain why the first plan wins"),
                                cl::sub(planCommand));
static cl::opt<std::string> evaluateOpt(
    "evaluate",
    cl::desc("Cost a given plan instead of searching, e.g. "
             "\"tp=8,pp=8,dp=16,mbs=1,v=3,schedule=interleaved,"
             "recompute=full\""),
    cl::sub(planCommand));
static cl::opt<bool> allowOom(
    "allow-oom",
    cl::desc("With --evaluate: cost a plan that does not fit in memory and "
             "exit 0"),
    cl::init(false), cl::sub(planCommand));
static cl::opt<std::string>
    evaluateJson("evaluate-json",
                 cl::desc("Cost the first plan of a --json file again"),
                 cl::sub(planCommand));
static cl::opt<std::string>
    exportOpt("export",
              cl::desc("Print launch arguments for megatron, deepspeed or "
                       "torchtitan"),
              cl::sub(planCommand));
static cl::opt<std::string> compressOpt(
    "compress",
    cl::desc("Compressed collectives: cost every plan under a policy "
             "(dp:int8,tp:fp8; codecs bf16, fp8, int8; axes dp, tp, cp, "
             "ulysses, gx, gy, gz), or 'auto' to also search with "
             "compression and say what it gains"),
    cl::value_desc("policy|auto"), cl::init(""), cl::sub(planCommand));
static cl::opt<bool> tpAcross("tp-across-nodes",
                              cl::desc("Let tensor parallelism span nodes"),
                              cl::sub(planCommand));
static cl::opt<bool> tensor3dOpt(
    "tp3d",
    cl::desc("Also search AxoNN's 3-D tensor parallelism (grids Gx x Gy x "
             "Gz; on by default, --tp3d=false searches Megatron's tp only)"),
    cl::init(true), cl::sub(planCommand));
static cl::opt<std::string> bandFromOpt(
    "band-from",
    cl::desc("Take the model's error band (the expected-step range and the "
             "spread within which the plan with fewer risks goes first) from "
             "your own measured runs, a CSV as weft calibrate --runs reads "
             "(at least 3 rows), instead of the published runs'"),
    cl::value_desc("runs.csv"), cl::init(""), cl::sub(planCommand));
static cl::opt<int> maxMicroBatchOpt(
    "max-micro-batch",
    cl::desc("Largest micro-batch size searched (default: 16 with pipeline "
             "stages, 64 without)"),
    cl::init(0), cl::sub(planCommand));
static cl::opt<bool> printIr(
    "print-rank-ir",
    cl::desc("Print the weft IR one rank runs for a micro-batch of the first "
             "plan, one layer of each kind: the program the cost model "
             "measured"),
    cl::sub(planCommand));
static cl::opt<bool> printSchedule(
    "print-schedule",
    cl::desc("Print the first plan's pipeline schedule as each pipeline rank "
             "runs it: forward (F), backward (B) and weight-gradient (W) "
             "steps by micro-batch, sends (>) and receives (<) of "
             "activations (a) and gradients (g) by peer rank"),
    cl::sub(planCommand));
static cl::opt<bool> noRelativeBounds(
    "no-relative-bounds",
    cl::desc("Build and measure every plan shape instead of bounding "
             "context-parallel ones from shorter rings (to check the bound)"),
    cl::Hidden, cl::sub(planCommand));
static cl::opt<bool> noProgress("no-progress", cl::desc("No progress bar"),
                                cl::sub(planCommand));
static cl::opt<int> progressAfterMs(
    "progress-after-ms",
    cl::desc("Show the progress bar once the search has run this long"),
    cl::init(1000), cl::Hidden, cl::sub(planCommand));

static cl::opt<std::string> calibrationDir(
    "data", cl::desc("Directory with the calibration CSV files"),
    cl::init(WEFT_CALIBRATION_DIR), cl::sub(calibrateCommand));
static cl::opt<std::string> calibrateRuns(
    "runs",
    cl::desc("Cost your own measured runs instead of the published ones: a "
             "CSV in bench/calibration/validation.csv's columns (optional "
             "gpus_per_node, default 8; optional config, a Hugging Face "
             "config.json for the model's columns), printed with the model's "
             "error on "
             "them and how it compares with the band weft plan prints"),
    cl::value_desc("runs.csv"), cl::init(""), cl::sub(calibrateCommand));
static cl::opt<bool> calibrateSearch(
    "search",
    cl::desc("Also search each row's plan from model, GPUs, batch and "
             "sequence only, and compare with the published one"),
    cl::sub(calibrateCommand));

static cl::opt<bool> calibrateVerbose(
    "layer-times", cl::desc("Also print one layer's forward and backward time"),
    cl::sub(calibrateCommand));
static cl::opt<bool> calibrateBreakdown(
    "breakdown",
    cl::desc("Also print each row's predicted step as its parts (compute, "
             "recomputation, tp/cp/pp communication, bubble, exposed "
             "data-parallel communication, optimizer), in seconds"),
    cl::sub(calibrateCommand));
static cl::list<std::string> calibrateSet(
    "set", cl::desc("Override a GPU field for every row, or for one GPU: "
                    "[GPU.]NAME=VALUE (e.g. h100.gemm_efficiency=0.7)"),
    cl::sub(calibrateCommand));

static cl::opt<bool> calibrateGrad16(
    "h100-grad-reduce-16bit",
    cl::desc("Assume the Megatron-Core H100 runs reduce gradients in bf16"),
    cl::init(false), cl::sub(calibrateCommand));

static cl::opt<int> calibratePp1Mbs(
    "h100-pp1-mbs", cl::desc("Micro-batch size assumed for the Megatron-Core "
                             "H100 rows without pipeline parallelism"),
    cl::init(1), cl::sub(calibrateCommand));

static cl::opt<int> calibrateLayersPerChunk(
    "h100-layers-per-chunk",
    cl::desc("Layers per virtual pipeline stage assumed for the pipelined "
             "Megatron-Core H100 rows (interleaved 1F1B; 0: "
             "non-interleaved 1F1B)"),
    cl::init(1), cl::sub(calibrateCommand));

static int planError(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "weft plan") << message << '\n';
  return 1;
}

static int calibrateError(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "weft calibrate") << message << '\n';
  return 1;
}

static int planError(llvm::Error error) {
  int status = 1;
  llvm::handleAllErrors(
      std::move(error),
      [](const weft::driver::DiagnosedError &e) {
        // The diagnostics were printed; say what they stopped.
        planError(e.message() + " (see the errors above)");
      },
      [&](const llvm::ErrorInfoBase &e) { status = planError(e.message()); });
  return status;
}

static void drawProgress(double fraction) {
  static bool drawn = false;
  if (fraction >= 1.0) {
    if (drawn)
      llvm::errs() << "\r" << std::string(60, ' ') << "\r";
    return;
  }
  drawn = true;
  int filled = int(fraction * 40);
  llvm::errs() << "\rsearching [" << std::string(filled, '#')
               << std::string(40 - filled, ' ') << "] "
               << int(fraction * 100) << "%";
  llvm::errs().flush();
}

/// The built-in model the command line names (import --model).
weft::driver::PlanRequest builtinModelRequest() {
  weft::driver::PlanRequest request;
  request.preset = presetName;
  request.layers = layersOpt;
  request.hidden = hiddenOpt;
  request.heads = headsOpt;
  request.kvHeads = kvHeadsOpt;
  request.headDim = headDimOpt;
  request.slidingWindow = slidingWindowOpt;
  request.globalEvery = globalEveryOpt;
  request.ffn = ffnOpt;
  request.ffnKind = ffnKindOpt;
  request.vocab = vocabOpt;
  request.tied = tiedOpt;
  return request;
}

/// The request the command line makes.
static weft::driver::PlanRequest planRequest() {
  weft::driver::PlanRequest request = builtinModelRequest();
  request.modelFile = planModelFile;
  request.inputShapes.assign(planInputShapes.begin(), planInputShapes.end());
  request.cluster = clusterOpt;
  request.globalBatch = globalBatch;
  request.seqLen = planSeqLen;
  request.dtype = dtypeOpt;
  request.memoryReserveGib = reserveOpt;
  request.flashAttention = flashOpt;
  request.flashAttentionDefault = flashOpt.getNumOccurrences() == 0;
  request.dropout = dropoutOpt;
  request.gradReduce16bit = gradReduce16;
  request.launchBlocking = launchBlockingOpt;
  request.freeze = freezeOpt;
  request.fixedBuffers = !noFixedBuffersOpt;
  request.top = topOpt;
  request.riskTolerance = riskToleranceOpt;
  request.tpAcrossNodes = tpAcross;
  request.tensor3d = tensor3dOpt;
  request.maxMicroBatch = maxMicroBatchOpt;
  request.compress = compressOpt;
  request.boundFromRelatives = !noRelativeBounds;
  request.evaluate = evaluateOpt;
  request.evaluateJson = evaluateJson;
  request.allowOom = allowOom;
  request.exportFramework = exportOpt;
  bool terminal = llvm::sys::Process::StandardErrIsDisplayed();
  if (terminal && !noProgress) {
    auto start = std::chrono::steady_clock::now();
    auto after = std::chrono::milliseconds(int(progressAfterMs));
    request.progress = [start, after](double fraction) {
      if (fraction >= 1.0 || std::chrono::steady_clock::now() - start > after)
        drawProgress(fraction);
    };
  }
  return request;
}

static llvm::Expected<planner::ErrorBand> bandFromRuns(const std::string &path);

/// How sure the model is of the first plan's time, what the plan risks,
/// and whether a near-equal plan with fewer risks was put first.
static void printConfidence(llvm::raw_ostream &os,
                            const weft::driver::PlanOutcome &outcome,
                            const plan::Plan &first) {
  const planner::ErrorBand &band = outcome.band;
  if (bandFromOpt.empty())
    os << llvm::format("expected step %.3f-%.3f s: published runs measured "
                       "%.2f-%.2fx the model's step (10th-90th percentile of "
                       "%d validation rows, weft calibrate)\n",
                       first.time().step_low_s(), first.time().step_high_s(),
                       band.low, band.high, band.rows);
  else
    os << llvm::format("expected step %.3f-%.3f s: your runs (%s) measured "
                       "%.2f-%.2fx the model's step (10th-90th percentile of "
                       "%d runs, median %.2fx)\n",
                       first.time().step_low_s(), first.time().step_high_s(),
                       bandFromOpt.c_str(), band.low, band.high, band.rows,
                       band.median);
  if (first.risks_size()) {
    os << "risks:";
    for (const std::string &why : first.risks())
      os << "\n  - " << why;
    os << "\n";
  }
  const planner::RobustChoice &robust = outcome.robust;
  if (robust.chosen == 0)
    return;
  os << llvm::format("preferred to the fastest plan (%s, predicted %.1f%% "
                     "faster: within the model's %.1f%% spread between "
                     "plans) for fewer risks (score %.1f vs %.1f); the "
                     "fastest risks:",
                     robust.fastest.c_str(),
                     100 * (robust.chosenStep / robust.fastestStep - 1),
                     100 * robust.tolerance, robust.chosenRisk.score,
                     robust.fastestRisk.score);
  for (const std::string &why : robust.fastestRisk.reasons)
    os << "\n  - " << why;
  os << "\n  (--risk-tolerance=0 puts the fastest first)\n";
}

int runPlan(MLIRContext &context) {
  weft::driver::PlanRequest request = planRequest();
  if (!bandFromOpt.empty()) {
    auto band = bandFromRuns(bandFromOpt);
    if (!band)
      return planError("--band-from: " + llvm::toString(band.takeError()));
    request.band = *band;
  }
  llvm::Expected<weft::driver::PlanOutcome> outcome =
      weft::driver::planModel(context, request);
  if (!outcome)
    return planError(outcome.takeError());
  CostModel &costModel = *outcome->costModel;
  const plan::PlanSet &set = outcome->set;
  llvm::raw_ostream &os = llvm::outs();
  os << outcome->header;
  if (outcome->evaluated) {
    printPlanBreakdown(os, set.plans(0));
  } else {
    if (!exportOpt.empty())
      os << "plans restricted to what " << exportOpt << " can run\n";
    // The time goes to stderr so that stdout is the same, byte for byte,
    // for the same input.
    os << "searched " << set.candidates_evaluated() << " candidate plans ("
       << set.candidates_simulated() << " fully costed)\n";
    llvm::errs() << llvm::format(
        "weft plan: search took %.3f s, of which %.3f s building and "
        "measuring %lld rank programs and %.3f s costing %lld plan shapes "
        "from them\n",
        set.search_seconds(), costModel.statistics().programSeconds,
        (long long)costModel.statistics().programs,
        costModel.statistics().shapeSeconds,
        (long long)costModel.statistics().shapes);
    printPlanTable(
        os, std::vector<plan::Plan>(set.plans().begin(), set.plans().end()));
  }
  const plan::Plan &first = set.plans(0);
  // The search tries every pp and gives dp what is left as far as the batch
  // divides, so a plan may leave GPUs idle; frameworks launch dp x tp x pp
  // ranks, so say how many.
  const int64_t clusterGpus = planner::totalGpus(costModel.cluster());
  if (first.gpus_used() > 0 && first.gpus_used() < clusterGpus)
    os << llvm::format("uses %lld of the cluster's %lld GPUs (%lld idle): "
                       "launch it on %lld\n",
                       (long long)first.gpus_used(), (long long)clusterGpus,
                       (long long)(clusterGpus - first.gpus_used()),
                       (long long)first.gpus_used());
  printConfidence(os, *outcome, first);
  os << outcome->compression << outcome->tensor3d;
  if (explainOpt)
    explainPlans(os, costModel, std::vector<plan::Plan>(set.plans().begin(),
                                                        set.plans().end()));
  if (printIr)
    os << costModel.rankProgramText(first);
  if (printSchedule) {
    planner::PipelineSchedule schedule = costModel.pipelineSchedule(first);
    std::string problem = planner::checkPipelineSchedule(schedule);
    if (!problem.empty())
      return planError("the pipeline schedule does not run: " + problem);
    os << "pipeline schedule: " << scheduleName(first.schedule()) << ", "
       << schedule.stages << " ranks x " << schedule.chunks << " chunks, "
       << schedule.microBatches << " micro-batches\n"
       << schedule.str();
    // The bubble in units of one step: the schedule simulated with every
    // forward, backward and weight-gradient step one slot long.
    bool weightSteps = false;
    for (const auto &steps : schedule.ranks)
      for (const planner::PipelineStep &step : steps)
        weightSteps |= step.kind == planner::PipelineStep::WeightGrad;
    const size_t k = size_t(schedule.stages) * schedule.chunks;
    std::vector<double> ones(k, 1.0), weight(k, weightSteps ? 1.0 : 0.0);
    std::vector<planner::TimelineEvent> timeline;
    double makespan = planner::simulatePipelineExactly(
        first.schedule(), schedule.stages, schedule.chunks,
        schedule.microBatches, ones, ones, weight, 0.0, &timeline);
    std::vector<double> busy(size_t(schedule.stages), 0.0);
    for (const planner::TimelineEvent &event : timeline)
      if (event.stage >= 0 && event.stage < schedule.stages &&
          event.kind <= planner::TimelineEvent::WeightGrad)
        busy[size_t(event.stage)] += event.end - event.start;
    os << "idle slots per rank:";
    for (double b : busy)
      os << ' ' << llvm::format("%.0f", makespan - b);
    os << '\n';
  }
  if (!exportOpt.empty()) {
    auto text = exportPlan(costModel, first, exportOpt);
    if (!text)
      return planError(llvm::toString(text.takeError()));
    os << *text;
  }
  auto writeFile = [&](llvm::StringRef path, llvm::StringRef text) {
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    if (ec)
      return false;
    out << text;
    return true;
  };
  if (!jsonOpt.empty()) {
    if (!writeFile(jsonOpt, toJson(set)))
      return planError("cannot write '" + jsonOpt + "'");
    os << "wrote " << jsonOpt << "\n";
  }
  if (!traceOpt.empty()) {
    // The cost model's simulation of the plan's schedule (the list the
    // pipeline pass writes into the IR), in microseconds.
    plan::Plan first = set.plans(0);
    std::vector<planner::TimelineEvent> timeline;
    costModel.evaluate(first, &timeline);
    const int stages = std::max(1, int(first.pp()));
    const int chunks =
        std::max(1, int(costModel.pipelineSchedule(first).chunks));
    std::vector<weft::driver::TraceEvent> events;
    for (const planner::TimelineEvent &event : timeline) {
      if (event.stage < 0 || event.stage >= stages)
        continue;
      std::string name;
      std::string category = "compute";
      switch (event.kind) {
      case planner::TimelineEvent::Forward:
      case planner::TimelineEvent::Backward:
      case planner::TimelineEvent::WeightGrad:
        name =
            planner::stepName({event.kind == planner::TimelineEvent::Forward
                                   ? planner::PipelineStep::Forward
                               : event.kind == planner::TimelineEvent::Backward
                                   ? planner::PipelineStep::Backward
                                   : planner::PipelineStep::WeightGrad,
                               event.microBatch, event.chunk},
                              chunks);
        break;
      case planner::TimelineEvent::DataParallelComm:
        name = "dp comm";
        category = "collective";
        break;
      case planner::TimelineEvent::Optimizer:
        name = "optimizer";
        break;
      }
      events.push_back(
          {event.stage, name, category, event.start * 1e6, event.end * 1e6});
    }
    if (!writeFile(traceOpt, weft::driver::chromeTrace(events, stages, stages)))
      return planError("cannot write '" + traceOpt + "'");
    os << "wrote " << traceOpt << " (predicted timeline of "
       << describePlan(first) << ")\n";
  }
  if (!reportOpt.empty()) {
    if (!writeFile(reportOpt, renderHtmlReport(costModel, set)))
      return planError("cannot write '" + reportOpt + "'");
    os << "wrote " << reportOpt << "\n";
  }
  // A plan that does not fit would fail on the cluster: say by how much, and
  // fail, unless the user asked to cost it anyway.
  if (outcome->overMemoryGib > 0) {
    os.flush();
    return planError(weft::driver::overMemoryMessage(*outcome));
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// weft calibrate
//===----------------------------------------------------------------------===//

namespace {
/// A CSV file with a header row; quoted fields may hold commas.
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int column(llvm::StringRef name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name)
        return int(i);
    return -1;
  }
};

std::vector<std::string> splitCsvLine(const std::string &line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (char c : line) {
    if (c == '"')
      quoted = !quoted;
    else if (c == ',' && !quoted) {
      fields.push_back(field);
      field.clear();
    } else
      field += c;
  }
  fields.push_back(field);
  return fields;
}

llvm::Expected<Csv> readCsv(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return llvm::createStringError("cannot read '" + path + "'");
  Csv csv;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty())
      continue;
    if (csv.header.empty()) {
      csv.header = splitCsvLine(line);
      continue;
    }
    csv.rows.push_back(splitCsvLine(line));
    if (csv.rows.back().size() != csv.header.size())
      return llvm::createStringError(
          llvm::formatv("{0}:{1}: {2} fields where the header has {3}", path,
                        number, csv.rows.back().size(), csv.header.size())
              .str());
  }
  return csv;
}

/// Checks that `csv` (read from `path`) has each of `columns` and that each
/// row holds a positive number below 1e9 in them, so that reading them
/// cannot fail.
llvm::Error requireNumbers(const Csv &csv, const std::string &path,
                           llvm::ArrayRef<const char *> columns) {
  for (const char *name : columns) {
    int column = csv.column(name);
    if (column < 0)
      return llvm::createStringError(path + ": no column '" + name + "'");
    for (size_t i = 0; i < csv.rows.size(); ++i) {
      double value = 0;
      llvm::StringRef text = csv.rows[i][size_t(column)];
      if (text.getAsDouble(value) || !(value > 0) || !(value < 1e9))
        return llvm::createStringError(
            llvm::formatv("{0}: row {1}: {2} '{3}' is not a positive number",
                          path, i + 1, name, text)
                .str());
    }
  }
  return llvm::Error::success();
}

/// A field that requireNumbers checked.
double checkedNumber(llvm::StringRef text) {
  double value = 0;
  (void)text.getAsDouble(value);
  return value;
}

struct CalibrationRow {
  std::string name;
  /// Validation rows are never fitted to: they report the model's error on
  /// data it was not tuned on.
  bool validation = false;
  /// A row of the user's --runs file.
  bool yours = false;
  /// Set for validation rows: the plan as --evaluate text, parsed once the
  /// row's cost model exists.
  std::string planSpec;
  plan::ModelSpec model;
  plan::Cluster cluster;
  plan::TrainingConfig training;
  plan::Plan plan;
  double measured = 0;
  std::string note;
};
} // namespace

static plan::ModelSpec gptSpec(const std::string &name, int64_t heads,
                               int64_t hidden, int64_t layers, int64_t vocab,
                               int64_t seq) {
  plan::ModelSpec spec;
  spec.set_name(name);
  spec.set_layers(layers);
  spec.set_hidden(hidden);
  spec.set_heads(heads);
  spec.set_kv_heads(heads);
  spec.set_ffn_hidden(4 * hidden);
  spec.set_ffn_kind(plan::FFN_GELU);
  spec.set_vocab(vocab);
  spec.set_seq_len(seq);
  spec.set_tied_embeddings(true);
  spec.set_source("calibration");
  return spec;
}

/// A row's cluster (nodes of `perNode` of `gpu`) and training setup.
static llvm::Error setUpRow(CalibrationRow &row, const std::string &gpu,
                            int64_t gpus, int64_t batch, int64_t seq,
                            bool flash, bool dropout, int64_t perNode = 8) {
  auto cluster = parseClusterShorthand(
      gpu + ":" + std::to_string(perNode) + "x" +
      std::to_string(std::max<int64_t>(1, gpus / perNode)));
  if (!cluster)
    return cluster.takeError();
  row.cluster = *cluster;
  row.training.set_global_batch(batch);
  row.training.set_seq_len(seq);
  row.training.set_dtype("bf16");
  row.training.set_memory_reserve_gib(2);
  row.training.set_flash_attention(flash);
  row.training.set_dropout(dropout);
  return llvm::Error::success();
}

static llvm::Expected<std::vector<CalibrationRow>>
loadCalibrationRows(const std::string &dir) {
  std::vector<CalibrationRow> rows;
  auto num = [](const std::string &s) { return checkedNumber(s); };
  {
    std::string path = dir + "/korthikanti2022_table5_end_to_end.csv";
    auto csv = readCsv(path);
    if (!csv)
      return csv.takeError();
    if (llvm::Error error = requireNumbers(
            *csv, path,
            {"gpus", "heads", "hidden", "layers", "vocab", "seq_len",
             "global_batch", "TP", "PP", "DP", "micro_batch",
             "pipeline_interleaving_calculon", "iter_time_seqpar_selective_s",
             "iter_time_full_recompute_s"}))
      return error;
    if (csv->column("model") < 0)
      return llvm::createStringError(path + ": no column 'model'");
    for (auto &r : csv->rows) {
      auto get = [&](const char *name) { return r.at(csv->column(name)); };
      for (int mode = 0; mode < 2; ++mode) {
        CalibrationRow row;
        row.name = "Korthikanti " + get("model") +
                   (mode ? " SP+selective" : " full recompute");
        int64_t gpus = int64_t(num(get("gpus")));
        row.model = gptSpec(get("model"), int64_t(num(get("heads"))),
                            int64_t(num(get("hidden"))),
                            int64_t(num(get("layers"))),
                            int64_t(num(get("vocab"))),
                            int64_t(num(get("seq_len"))));
        if (llvm::Error error = validateModel(row.model))
          return llvm::createStringError(path + ": " +
                                         llvm::toString(std::move(error)));
        // Megatron 2022: unfused attention, dropout.
        if (llvm::Error error = setUpRow(
                row, "a100-80g", gpus, int64_t(num(get("global_batch"))),
                int64_t(num(get("seq_len"))), /*flash=*/false,
                /*dropout=*/true))
          return error;
        plan::Plan &p = row.plan;
        p.set_tp(int(num(get("TP"))));
        p.set_pp(int(num(get("PP"))));
        p.set_dp(int(num(get("DP"))));
        p.set_cp(1);
        p.set_ulysses(1);
        p.set_micro_batch(int(num(get("micro_batch"))));
        p.set_num_micro_batches(row.training.global_batch() / p.dp() /
                                p.micro_batch());
        int v = int(num(get("pipeline_interleaving_calculon")));
        p.set_schedule(v > 1 ? plan::SCHEDULE_INTERLEAVED
                             : plan::SCHEDULE_1F1B);
        p.set_virtual_stages(v);
        p.set_sequence_parallel(mode == 1);
        p.set_recompute(mode ? plan::RECOMPUTE_SELECTIVE
                             : plan::RECOMPUTE_FULL);
        row.measured = num(get(mode ? "iter_time_seqpar_selective_s"
                                    : "iter_time_full_recompute_s"));
        rows.push_back(row);
      }
    }
  }
  {
    std::string path = dir + "/megatron_core_h100_weak_scaling.csv";
    auto csv = readCsv(path);
    if (!csv)
      return csv.takeError();
    if (llvm::Error error = requireNumbers(
            *csv, path,
            {"num_gpus", "attention_heads", "hidden_size", "layers", "vocab",
             "seq_len", "global_batch", "tensor_parallel", "pipeline_parallel",
             "data_parallel", "tflops_per_gpu"}))
      return error;
    if (csv->column("model") < 0)
      return llvm::createStringError(path + ": no column 'model'");
    for (auto &r : csv->rows) {
      auto get = [&](const char *name) { return r.at(csv->column(name)); };
      CalibrationRow row;
      row.name = "Megatron-Core H100 " + get("model");
      int64_t gpus = int64_t(num(get("num_gpus")));
      row.model = gptSpec(get("model"), int64_t(num(get("attention_heads"))),
                          int64_t(num(get("hidden_size"))),
                          int64_t(num(get("layers"))),
                          int64_t(num(get("vocab"))),
                          int64_t(num(get("seq_len"))));
      if (llvm::Error error = validateModel(row.model))
        return llvm::createStringError(path + ": " +
                                       llvm::toString(std::move(error)));
      if (llvm::Error error =
              setUpRow(row, "h100", gpus, int64_t(num(get("global_batch"))),
                       int64_t(num(get("seq_len"))), /*flash=*/true,
                       /*dropout=*/false))
        return error;
      row.training.set_grad_reduce_16bit(calibrateGrad16);
      plan::Plan &p = row.plan;
      p.set_tp(int(num(get("tensor_parallel"))));
      p.set_pp(int(num(get("pipeline_parallel"))));
      p.set_dp(int(num(get("data_parallel"))));
      p.set_cp(1);
      p.set_ulysses(1);
      // Not published: micro-batch 1, SP with TP and TP communication
      // overlap, distributed optimizer, no recomputation, and the pipeline
      // schedule (docs/cost-model.md lists these). The source overlaps
      // pipeline communication with computation, which Megatron does only
      // in its interleaved schedule; 23 and 7 layers per stage (119B, 462B)
      // admit only one layer per virtual stage, assumed for every row.
      int64_t perRank = row.training.global_batch() / p.dp();
      p.set_micro_batch(p.pp() == 1 ? calibratePp1Mbs : 1);
      p.set_num_micro_batches(perRank / p.micro_batch());
      int64_t perStage = row.model.layers() / p.pp();
      int chunk = calibrateLayersPerChunk;
      if (p.pp() > 1 && chunk > 0 && perStage % chunk == 0 &&
          perStage / chunk > 1) {
        p.set_schedule(plan::SCHEDULE_INTERLEAVED);
        p.set_virtual_stages(int(perStage / chunk));
      } else {
        p.set_schedule(plan::SCHEDULE_1F1B);
        p.set_virtual_stages(1);
      }
      p.set_sequence_parallel(p.tp() > 1);
      p.set_tp_comm_overlap(p.tp() > 1);
      p.set_zero_stage(1);
      p.set_recompute(plan::RECOMPUTE_NONE);
      // Measured: model FLOPs per step over the published TFLOP/s per GPU.
      row.measured = modelFlopsPerStep(row.model, row.training.global_batch(),
                                       row.training.seq_len()) /
                     (num(get("tflops_per_gpu")) * 1e12 * gpus);
      rows.push_back(row);
    }
  }
  return rows;
}

/// published.csv files (calibration.csv, validation.csv): one published run
/// per row with its model, cluster, batch, sequence and plan (as --evaluate
/// text); `measured_step_s` is seconds, or `tflops:X` for a published X model
/// TFLOP/s per GPU. Rows of validation.csv are never fitted to; rows of
/// calibration.csv are fitted to like the two files above.
static llvm::Error loadPublishedRows(const std::string &path, bool validation,
                                     std::vector<CalibrationRow> &rows) {
  auto csv = readCsv(path);
  if (!csv)
    return csv.takeError();
  // The model's columns, which an optional `config` column (a Hugging Face
  // config.json, relative to the CSV's directory) stands in for.
  const bool configs = csv->column("config") >= 0;
  for (const char *name :
       {"name", "gpu", "gpus", "layers", "hidden", "heads", "kv_heads", "ffn",
        "ffn_kind", "vocab", "tied", "seq_len", "global_batch", "flash", "plan",
        "measured_step_s"})
    if (csv->column(name) < 0 &&
        !(configs &&
          llvm::is_contained({"layers", "hidden", "heads", "kv_heads", "ffn",
                              "ffn_kind", "vocab", "tied"},
                             llvm::StringRef(name))))
      return llvm::createStringError(path + ": no column '" + name + "'");
  for (auto &r : csv->rows) {
    auto get = [&](const char *name) -> std::string {
      int column = csv->column(name);
      return column < 0 ? std::string() : r.at(column);
    };
    const bool fromConfig = configs && !get("config").empty();
    auto integer = [&](const char *name) -> llvm::Expected<int64_t> {
      int64_t value = 0;
      if (llvm::StringRef(get(name)).getAsInteger(10, value) || value < 0)
        return llvm::createStringError(path + ": row '" + get("name") +
                                       "': " + name + " '" + get(name) +
                                       "' is not a count");
      return value;
    };
    CalibrationRow row;
    row.validation = validation;
    row.name = get("name");
    // Counts by column name; the words in ffn_kind and tied are checked, so
    // a typo in the data is an error, not a different model.
    llvm::StringMap<int64_t> n;
    for (const char *name :
         {"gpus", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
          "seq_len", "global_batch", "flash"}) {
      if (fromConfig && get(name).empty())
        continue;
      auto value = integer(name);
      if (!value)
        return value.takeError();
      n[name] = *value;
    }
    auto word = [&](const char *name, const char *yes,
                    const char *no) -> llvm::Expected<bool> {
      if (get(name) != yes && get(name) != no)
        return llvm::createStringError(path + ": row '" + row.name +
                                       "': " + name + " '" + get(name) +
                                       "' is not " + yes + " or " + no);
      return get(name) == yes;
    };
    plan::ModelSpec &m = row.model;
    if (fromConfig) {
      // The model of a config.json, as weft plan --model reads it; the
      // row's sequence is the one it trained at.
      llvm::SmallString<256> config(get("config"));
      if (!llvm::sys::path::is_absolute(config)) {
        config = llvm::sys::path::parent_path(path);
        llvm::sys::path::append(config, get("config"));
      }
      llvm::Expected<plan::ModelSpec> read = modelFromHfConfig(config);
      if (!read)
        return llvm::createStringError(path + ": row '" + row.name + "': " +
                                       llvm::toString(read.takeError()));
      m = *read;
      m.set_name(row.name);
      m.set_seq_len(n["seq_len"]);
      m.set_source(validation ? "validation" : "calibration");
      if (llvm::Error error = validateModel(m))
        return error;
    } else {
      auto swiglu = word("ffn_kind", "swiglu", "gelu");
      if (!swiglu)
        return swiglu.takeError();
      auto tied = word("tied", "yes", "no");
      if (!tied)
        return tied.takeError();
      m.set_name(row.name);
      m.set_layers(n["layers"]);
      m.set_hidden(n["hidden"]);
      m.set_heads(n["heads"]);
      m.set_kv_heads(n["kv_heads"]);
      m.set_ffn_hidden(n["ffn"]);
      m.set_ffn_kind(*swiglu ? plan::FFN_SWIGLU : plan::FFN_GELU);
      m.set_vocab(n["vocab"]);
      m.set_seq_len(n["seq_len"]);
      m.set_tied_embeddings(*tied);
      m.set_source(validation ? "validation" : "calibration");
      // Optional: each head's width where it is not hidden / heads (Gemma's,
      // Megatron-LM's --kv-channels); empty or 0 for hidden / heads.
      if (csv->column("head_dim") >= 0 && !get("head_dim").empty()) {
        auto value = integer("head_dim");
        if (!value)
          return value.takeError();
        if (*value * m.heads() != m.hidden())
          m.set_head_dim(*value);
      }
      // Optional: how the model encodes positions, which the builder builds
      // and the model costs: learned (GPT's table; the default), alibi
      // (BLOOM's and MPT's biases on the scores: nothing built) or
      // rope=BASE (LLaMA's rotary embedding at that base).
      if (csv->column("positions") >= 0 && !get("positions").empty()) {
        const std::string positions = get("positions");
        llvm::StringRef kind = positions;
        double theta = 0;
        if (kind == "alibi")
          m.set_alibi(true);
        else if (kind.consume_front("rope=") && !kind.getAsDouble(theta) &&
                 theta > 0)
          m.set_rope_theta(theta);
        else if (kind != "learned")
          return llvm::createStringError(
              path + ": row '" + row.name + "': positions '" + positions +
              "' is not learned, alibi or rope=BASE");
      }
      if (llvm::Error error = validateModel(m))
        return error;
    }
    // Optional columns: dropout (Megatron's default 0.1 on hidden states and
    // attention probabilities, which its published scripts leave on) and
    // network (the cluster's NICs where they differ from the GPU's default
    // node, as nics_per_node=N;nic_gbits=G).
    bool dropout = false;
    if (csv->column("dropout") >= 0) {
      auto value = word("dropout", "yes", "no");
      if (!value)
        return value.takeError();
      dropout = *value;
    }
    int64_t perNode = 8;
    if (csv->column("gpus_per_node") >= 0 && !get("gpus_per_node").empty()) {
      auto value = integer("gpus_per_node");
      if (!value)
        return value.takeError();
      perNode = *value;
    }
    if (n["gpus"] < 1 || perNode < 1 || n["gpus"] % perNode)
      return llvm::createStringError(
          llvm::formatv("{0}: row '{1}': {2} GPUs are not whole nodes of {3}",
                        path, row.name, n["gpus"], perNode)
              .str());
    if (llvm::Error error =
            setUpRow(row, get("gpu"), n["gpus"], n["global_batch"],
                     n["seq_len"], n["flash"] != 0, dropout, perNode))
      return error;
    // Optional column launch: async (default) or blocking
    // (CUDA_LAUNCH_BLOCKING=1, TrainingConfig::launch_blocking).
    if (csv->column("launch") >= 0 && !get("launch").empty()) {
      auto blocking = word("launch", "blocking", "async");
      if (!blocking)
        return blocking.takeError();
      row.training.set_launch_blocking(*blocking);
    }
    if (csv->column("network") >= 0 && !get("network").empty()) {
      std::string network = get("network");
      llvm::SmallVector<llvm::StringRef> settings;
      llvm::StringRef(network).split(settings, ';');
      for (llvm::StringRef setting : settings) {
        auto [key, value] = setting.split('=');
        double number = 0;
        if (value.getAsDouble(number) || number <= 0 ||
            (key != "nics_per_node" && key != "nic_gbits"))
          return llvm::createStringError(
              path + ": row '" + row.name + "': network '" + setting.str() +
              "' is not nics_per_node=N or nic_gbits=G");
        if (key == "nics_per_node")
          row.cluster.set_nics_per_node(int32_t(number));
        else
          row.cluster.set_nic_gbits(number);
      }
    }
    row.planSpec = get("plan");
    std::string measuredText = get("measured_step_s");
    llvm::StringRef measured = measuredText;
    double number = 0;
    bool tflops = measured.consume_front("tflops:");
    if (measured.getAsDouble(number) || number <= 0)
      return llvm::createStringError(
          path + ": row '" + row.name + "': measured_step_s '" +
          get("measured_step_s") + "' is not seconds or tflops:X");
    // A published TFLOP/s per GPU: the step that model FLOPs take at it.
    row.measured = tflops
                       ? modelFlopsPerStep(m, n["global_batch"], n["seq_len"]) /
                             (number * 1e12 * n["gpus"])
                       : number;
    rows.push_back(row);
  }
  return llvm::Error::success();
}

/// Costs a row's published plan with `model` (the row's): parsed from its
/// --evaluate text where it has one, then checked.
static llvm::Error evaluateRow(CostModel &model, CalibrationRow &row) {
  if (!row.planSpec.empty()) {
    auto parsed = parsePlanSpec(row.planSpec, model);
    if (!parsed)
      return llvm::createStringError(row.name + ": " +
                                     llvm::toString(parsed.takeError()));
    row.plan = *parsed;
  }
  std::string why = model.checkPlan(row.plan);
  if (!why.empty())
    return llvm::createStringError(
        row.name + ": the published plan does not check: " + why);
  model.evaluate(row.plan);
  return llvm::Error::success();
}

/// A user's measured runs (weft calibrate --runs, weft plan --band-from).
static llvm::Expected<std::vector<CalibrationRow>>
loadUserRuns(const std::string &path) {
  if (!llvm::sys::fs::exists(path))
    return llvm::createStringError("no file '" + path + "'");
  std::vector<CalibrationRow> rows;
  if (llvm::Error error = loadPublishedRows(path, false, rows))
    return error;
  if (rows.empty())
    return llvm::createStringError("'" + path + "' has no rows");
  for (CalibrationRow &row : rows)
    row.yours = true;
  return rows;
}

static llvm::Expected<planner::ErrorBand>
bandFromRuns(const std::string &path) {
  auto loaded = loadUserRuns(path);
  if (!loaded)
    return loaded.takeError();
  std::vector<CalibrationRow> &rows = *loaded;
  // A 10th and a 90th percentile of fewer runs would be their extremes.
  if (rows.size() < 3)
    return llvm::createStringError(
        llvm::formatv("'{0}' has {1} runs; a band needs at least 3", path,
                      rows.size())
            .str());
  std::vector<double> ratios;
  for (CalibrationRow &row : rows) {
    CostModel model(row.model, row.cluster, row.training);
    if (llvm::Error error = evaluateRow(model, row))
      return error;
    ratios.push_back(row.measured / row.plan.time().step_s());
  }
  return errorBandOf(ratios);
}

/// A plan in a calibration row's few words ("tp8 pp35 dp8 mbs1 1F1B full").
static std::string shortPlanText(const plan::Plan &p) {
  return "tp" + std::to_string(p.tp()) + " pp" + std::to_string(p.pp()) +
         " dp" + std::to_string(p.dp()) +
         (p.cp() > 1 ? " cp" + std::to_string(p.cp()) : "") +
         (p.cp() > 1 && p.cp_comm() == plan::CP_COMM_ALL_GATHER ? "ag" : "") +
         (p.ulysses() > 1 ? " uly" + std::to_string(p.ulysses()) : "") +
         (p.gx() * p.gy() * p.gz() > 1
              ? " 3d" + std::to_string(p.gx()) + "x" + std::to_string(p.gy()) +
                    "x" + std::to_string(p.gz())
              : "") +
         (p.zero_stage() > 1 ? " zero" + std::to_string(p.zero_stage()) : "") +
         " mbs" + std::to_string(p.micro_batch()) + " " +
         scheduleName(p.schedule()) +
         (p.virtual_stages() > 1 ? " v" + std::to_string(p.virtual_stages())
                                 : "") +
         (p.sequence_parallel() ? " sp" : "") + " " +
         recomputeName(p.recompute());
}

int runCalibrate() {
  std::vector<CalibrationRow> rows;
  if (!calibrateRuns.empty()) {
    // Only the user's runs: how the model does on their cluster.
    auto loaded = loadUserRuns(calibrateRuns);
    if (!loaded)
      return calibrateError("--runs: " + llvm::toString(loaded.takeError()));
    rows = std::move(*loaded);
  } else {
    auto loaded = loadCalibrationRows(calibrationDir);
    if (!loaded)
      return calibrateError(llvm::toString(loaded.takeError()));
    rows = std::move(*loaded);
    for (bool validation : {false, true}) {
      std::string path = calibrationDir + "/" +
                         (validation ? "validation.csv" : "calibration.csv");
      if (!llvm::sys::fs::exists(path))
        continue;
      if (llvm::Error error = loadPublishedRows(path, validation, rows))
        return calibrateError(llvm::toString(std::move(error)));
    }
  }
  llvm::raw_ostream &os = llvm::outs();
  os << llvm::format("%-36s %-44s %10s %10s %8s", "row", "published plan",
                     "measured", "predicted", "error");
  if (calibrateSearch)
    os << llvm::format(" %10s %6s", "searched", "inside");
  os << "\n";
  struct Stats {
    double sum = 0, signedSum = 0, max = 0;
    int count = 0, searchedNotSlower = 0, inside = 0;
  } sets[3];
  bool headed[3] = {false, false, false};
  std::vector<double> validationRatios, yourRatios;
  for (CalibrationRow &row : rows) {
    const int set = row.yours ? 2 : row.validation;
    Stats &stats = sets[set];
    if (!headed[set] && set == 1)
      os << "-- validation rows (other sources; never fitted to) --\n";
    if (!headed[set] && set == 2)
      os << "-- your runs (" << calibrateRuns << ") --\n";
    headed[set] = true;
    for (const std::string &setting : calibrateSet) {
      auto [key, value] = llvm::StringRef(setting).split('=');
      // "h100.gemm_efficiency=0.7" applies to one GPU only.
      if (key.contains('.')) {
        auto [gpu, field] = key.split('.');
        if (!llvm::StringRef(row.cluster.gpu().name()).starts_with(gpu))
          continue;
        key = field;
      }
      double number = 0;
      if (value.getAsDouble(number))
        return calibrateError("--set " + setting + ": not NAME=NUMBER");
      const auto *field =
          plan::Gpu::descriptor()->FindFieldByName(key.str());
      if (field && field->cpp_type() ==
                       google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE)
        plan::Gpu::GetReflection()->SetDouble(row.cluster.mutable_gpu(), field,
                                              number);
      else if (key == "nic_efficiency")
        row.cluster.set_nic_efficiency(number);
      else
        return calibrateError("--set: no GPU field '" + key.str() + "'");
    }
    CostModel model(row.model, row.cluster, row.training);
    if (llvm::Error error = evaluateRow(model, row))
      return calibrateError(llvm::toString(std::move(error)));
    double predicted = row.plan.time().step_s();
    double error = predicted / row.measured - 1;
    if (row.validation)
      validationRatios.push_back(row.measured / predicted);
    if (row.yours)
      yourRatios.push_back(row.measured / predicted);
    stats.sum += std::abs(error);
    stats.signedSum += error;
    stats.max = std::max(stats.max, std::abs(error));
    ++stats.count;
    std::string planText = shortPlanText(row.plan);
    os << llvm::format("%-36s %-44s %9.3fs %9.3fs %+7.2f%%", row.name.c_str(),
                       planText.c_str(), row.measured, predicted, 100 * error);
    if (calibrateVerbose) {
      const BlockCost &layer = model.layerCost(row.plan);
      os << llvm::format(" layer fwd %.2f ms (tp %.2f) bwd %.2f ms core %.2f "
                         "ms",
                         1e3 * (layer.forward + layer.tpComm),
                         1e3 * layer.tpComm,
                         1e3 * (layer.backwardInput + layer.backwardWeight +
                                layer.tpComm),
                         1e3 * layer.attentionCore);
    }
    if (calibrateBreakdown) {
      const plan::TimeBreakdown &t = row.plan.time();
      os << llvm::format(" compute %.3f recompute %.3f tp %.3f cp %.3f pp "
                         "%.3f bubble %.3f dp %.3f/%.3f optimizer %.3f",
                         t.compute_s(), t.recompute_s(), t.tp_comm_s(),
                         t.cp_comm_s(), t.pp_comm_s(), t.bubble_s(),
                         t.dp_comm_exposed_s(), t.dp_comm_total_s(),
                         t.optimizer_s());
    }
    if (calibrateSearch) {
      // From model, GPU count, batch and sequence only: the same training
      // setup, the search picks everything else.
      SearchOptions options;
      options.top = 1;
      SearchResult result = searchPlans(model, options);
      double searched = result.plans.empty()
                            ? std::numeric_limits<double>::infinity()
                            : result.plans[0].time().step_s();
      bool notSlower = searched <= predicted * (1 + 1e-9);
      stats.searchedNotSlower += notSlower;
      std::string outside = outsideSearchSpace(model, row.plan, options);
      bool isInside = outside.empty() && row.plan.fits();
      stats.inside += isInside;
      os << llvm::format(" %9.3fs %6s", searched, isInside ? "yes" : "NO");
      if (!outside.empty())
        os << " (" << outside << ")";
      else if (!row.plan.fits())
        os << " (does not fit in memory in the model)";
      if (!result.plans.empty())
        os << "  searched: " << shortPlanText(result.plans[0]);
    }
    os << "\n";
  }
  for (int set = 0; set < 3; ++set) {
    const Stats &stats = sets[set];
    if (!stats.count)
      continue;
    const char *names[] = {"calibration rows", "validation rows", "your runs"};
    os << llvm::format("%s: %d, mean |error| %.2f%%, max |error| %.2f%%, "
                       "signed mean %+.2f%%",
                       names[set], stats.count, 100 * stats.sum / stats.count,
                       100 * stats.max, 100 * stats.signedSum / stats.count);
    os << (set ? "\n"
               : " (Calculon on Korthikanti Table 5: mean 3.65%, max "
                 "8.87%)\n");
    if (calibrateSearch)
      os << llvm::format("  searched plan at least as fast as the published "
                         "one: %d of %d rows; published plan inside the "
                         "search space (divides and fits): %d of %d\n",
                         stats.searchedNotSlower, stats.count, stats.inside,
                         stats.count);
  }
  if (!yourRatios.empty()) {
    // Where the user's cluster falls against the band weft plan prints.
    ErrorBand yours = errorBandOf(yourRatios);
    ErrorBand used = validationErrorBand();
    os << llvm::format("measured/predicted on your %d runs: median %.3f, "
                       "range %.3f-%.3f; weft plan's band (%d published "
                       "runs): %.3f-%.3f, median %.3f\n",
                       yours.rows, yours.median,
                       *std::min_element(yourRatios.begin(), yourRatios.end()),
                       *std::max_element(yourRatios.begin(), yourRatios.end()),
                       used.rows, used.low, used.high, used.median);
    double shift = yours.median / used.median;
    if (shift > used.high / used.median || shift < used.low / used.median)
      os << llvm::format("  your runs take %.2fx the steps the model's band "
                         "centres on, outside it: scale weft plan's steps by "
                         "that, or find the GPU fields that fit your runs "
                         "(--runs with --set GPU.FIELD=X) and give weft plan "
                         "a cluster file with them\n",
                         shift);
    else
      os << "  your runs fall inside the band weft plan prints\n";
  }
  if (!validationRatios.empty()) {
    // The band `weft plan` prints with every plan; it is compiled in
    // (planner::validationErrorBand) and must follow the model.
    ErrorBand band = errorBandOf(validationRatios);
    ErrorBand used = validationErrorBand();
    os << llvm::format("error band: measured/predicted on %d validation rows: "
                       "10th percentile %.3f, median %.3f, 90th percentile "
                       "%.3f, spread (sd of log) %.3f\n",
                       band.rows, band.low, band.median, band.high,
                       band.spread);
    auto same = [](double a, double b) { return std::abs(a - b) < 5e-4; };
    bool current = band.rows == used.rows && same(band.low, used.low) &&
                   same(band.median, used.median) &&
                   same(band.high, used.high) && same(band.spread, used.spread);
    os << (current ? "  the planner's band is current\n"
                   : "  STALE: the planner's band (lib/Planner/Risk.cpp) "
                     "differs; copy these figures there\n");
  }
  return 0;
}

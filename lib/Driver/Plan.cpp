//===- Plan.cpp - weft plan as a library call -----------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Plan/Plan.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Driver/Driver.h"
#include "weft/Planner/Cluster.h"
#include "weft/Planner/HfCheckpoint.h"
#include "weft/Planner/HfConfig.h"
#include "weft/Planner/Model.h"
#include "weft/Planner/Report.h"
#include "weft/Planner/Risk.h"
#include "weft/Planner/Search.h"

#include "google/protobuf/util/message_differencer.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>
#include <random>
#include <set>

using namespace mlir;
using namespace weft;
using namespace weft::planner;

namespace {
/// Bounds far beyond any training run, so that every input the search
/// accepts it answers in seconds.
constexpr int64_t kMaxGlobalBatch = int64_t(1) << 24;
constexpr int64_t kMaxSeqLen = int64_t(1) << 24;

llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(message);
}

/// The [batch, seq] that a model's first input is bound to.
std::pair<int64_t, int64_t> inputShape(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && func.getNumArguments())
      if (auto type =
              dyn_cast<RankedTensorType>(func.getArgumentTypes().front()))
        if (type.getRank() >= 2)
          return {type.getDimSize(0), type.getDimSize(1)};
  return {0, 0};
}

/// True if one of the model's inputs is bound to [batch, seq, ...]: the
/// first, or, in an encoder-decoder (whose source comes first), another;
/// or, for a model that reads features (a vision transformer's pixels,
/// whose sequence its patches make), its first repeated layer's input.
bool hasInputShape(ModuleOp module, int64_t batch, int64_t seq) {
  auto matches = [&](Type type) {
    auto ranked = dyn_cast<RankedTensorType>(type);
    return ranked && ranked.getRank() >= 2 &&
           ranked.getShape().take_front(2) == ArrayRef<int64_t>{batch, seq};
  };
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal()) {
      for (Type type : func.getArgumentTypes())
        if (matches(type))
          return true;
      bool features = func.getNumArguments() > 0;
      for (Type type : func.getArgumentTypes())
        if (auto ranked = dyn_cast<RankedTensorType>(type);
            !ranked || !isa<FloatType>(ranked.getElementType()))
          features = false;
      if (features)
        for (LayerOp layer : func.getBody().getOps<LayerOp>())
          return layer->getNumOperands() > 0 &&
                 matches(layer->getOperand(0).getType());
    }
  return false;
}

/// The model file as the cost model's source of IR: imported (without
/// weights) at each batch it asks for, or at its own batch when that is
/// static. Import errors while building are the cost model's, not reported.
ModelSource fileModelSource(llvm::StringRef path,
                            const std::vector<std::string> &shapes, int64_t seq,
                            bool fixedBuffers, MLIRContext &probeContext) {
  ModelSource source;
  std::string file = path.str();
  source.build = [file, shapes,
                  fixedBuffers](MLIRContext &context, int64_t batch,
                                int64_t seqLen) -> OwningOpRef<ModuleOp> {
    ScopedDiagnosticHandler quiet(&context,
                                  [](Diagnostic &) { return success(); });
    OwningOpRef<ModuleOp> module = driver::loadModelForPlanning(
        file, context, seqLen, batch, shapes, fixedBuffers);
    if (!module || !hasInputShape(*module, batch, seqLen))
      return nullptr;
    return module;
  };
  // A batch the importer binds is dynamic; a .mlir module's is its own.
  ScopedDiagnosticHandler quiet(&probeContext,
                                [](Diagnostic &) { return success(); });
  OwningOpRef<ModuleOp> probe = driver::loadModelForPlanning(
      path, probeContext, seq, 3, shapes, fixedBuffers);
  if (probe && inputShape(*probe).first != 3)
    source.staticBatch = inputShape(*probe).first;
  return source;
}

} // namespace

/// The model from a file, a preset, or the builder fields.
llvm::Expected<plan::ModelSpec>
driver::resolveModelSpec(MLIRContext &context, const driver::PlanRequest &r) {
  plan::ModelSpec spec;
  if (!r.inputShapes.empty() &&
      (r.modelFile.empty() || llvm::StringRef(r.modelFile).ends_with(".mlir")))
    return planError(
        "--input-shape binds the inputs of an ONNX model; a .mlir module or "
        "a built-in model has its shapes already");
  for (const std::string &shape : r.inputShapes) {
    OnnxImportOptions unused;
    std::string error;
    if (failed(parseInputShape(shape, unused, error)))
      return planError(error);
  }
  if (!r.modelFile.empty()) {
    if (!r.preset.empty())
      return planError("give a model file or --model, not both");
    if (!llvm::sys::fs::exists(r.modelFile))
      return planError("cannot read '" + r.modelFile + "': no such file");
    OwningOpRef<ModuleOp> module = driver::loadModelForPlanning(
        r.modelFile, context, r.seqLen, 1, r.inputShapes, r.fixedBuffers);
    if (!module)
      return driver::diagnosed("could not import '" + r.modelFile + "'");
    auto extracted = extractModelSpec(*module, r.modelFile);
    if (!extracted)
      return extracted.takeError();
    spec = *extracted;
  } else if (r.preset == "gpt" || r.preset == "llama") {
    spec.set_name(r.preset);
    spec.set_source("builder");
    bool llama = r.preset == "llama";
    spec.set_ffn_kind(llama ? plan::FFN_SWIGLU : plan::FFN_GELU);
    spec.set_vocab(llama ? 32000 : 51200);
    spec.set_seq_len(2048);
    spec.set_tied_embeddings(!llama);
    // LLaMA's rotary embedding at LLaMA 1's and 2's base.
    if (llama)
      spec.set_rope_theta(1e4);
  } else if (!r.preset.empty()) {
    // A preset's name, even where a directory of that name is at hand; else
    // a config.json or a checkpoint directory.
    auto preset = lookupPreset(r.preset);
    if (!preset && isHfConfigPath(r.preset)) {
      llvm::consumeError(preset.takeError());
      preset = modelFromHfConfig(r.preset);
    }
    if (!preset)
      return preset.takeError();
    spec = *preset;
  } else {
    return planError(
        "no model: give an ONNX or .mlir file, or --model (a preset, or gpt / "
        "llama with --layers, --hidden, --heads, ...)");
  }
  // Builder fields override (and complete) what was given.
  if (r.layers)
    spec.set_layers(r.layers);
  if (r.hidden)
    spec.set_hidden(r.hidden);
  // A multi-head model (as many KV heads as heads) stays one when --heads
  // changes its heads and --kv-heads is not given.
  if (r.heads && !r.kvHeads && spec.kv_heads() == spec.heads())
    spec.set_kv_heads(r.heads);
  if (r.heads)
    spec.set_heads(r.heads);
  if (r.kvHeads)
    spec.set_kv_heads(r.kvHeads);
  else if (!spec.kv_heads())
    spec.set_kv_heads(spec.heads());
  if (r.headDim < 0)
    return planError("--head-dim is each head's width (0 for hidden / "
                     "heads), not " +
                     std::to_string(r.headDim));
  if (r.headDim)
    spec.set_head_dim(spec.heads() > 0 &&
                              r.headDim * spec.heads() == spec.hidden()
                          ? 0
                          : r.headDim);
  if (r.ffn)
    spec.set_ffn_hidden(r.ffn);
  else if (!spec.ffn_hidden())
    spec.set_ffn_hidden(4 * spec.hidden());
  if (!r.ffnKind.empty()) {
    if (r.ffnKind != "gelu" && r.ffnKind != "swiglu" && r.ffnKind != "geglu")
      return planError("--ffn-kind is gelu, swiglu or geglu, not '" +
                       r.ffnKind + "'");
    spec.set_ffn_kind(r.ffnKind == "gelu"    ? plan::FFN_GELU
                      : r.ffnKind == "geglu" ? plan::FFN_GEGLU
                                             : plan::FFN_SWIGLU);
  }
  if (r.vocab)
    spec.set_vocab(r.vocab);
  if (r.slidingWindow < 0)
    return planError("--sliding-window is a number of keys (0 for none), not " +
                     std::to_string(r.slidingWindow));
  if (r.slidingWindow)
    spec.set_sliding_window(r.slidingWindow);
  if (r.globalEvery) {
    if (r.globalEvery < 2 || r.slidingWindow <= 0)
      return planError(
          "--global-every N makes every N-th layer global among layers with "
          "--sliding-window W: give W, and N of 2 or more (not " +
          std::to_string(r.globalEvery) + ")");
    spec.set_mixed_sliding_window(spec.sliding_window());
    spec.clear_sliding_window();
    spec.set_global_every(r.globalEvery);
    spec.clear_global_first();
  }
  // A model of local and global layers (a preset's, a config's, or the
  // flags') keeps every global_every-th layer global at any depth.
  if (spec.global_every() > 0)
    spec.set_windowed_layers(planner::windowedLayerCount(
        spec.layers(), spec.global_every(), spec.global_first()));
  if (!r.tied.empty()) {
    if (r.tied != "yes" && r.tied != "no" && r.tied != "true" &&
        r.tied != "false" && r.tied != "1" && r.tied != "0")
      return planError("--tied is yes or no, not '" + r.tied + "'");
    spec.set_tied_embeddings(r.tied == "yes" || r.tied == "true" ||
                             r.tied == "1");
  }
  // A file's own parameter count describes the file, not a model the
  // builder fields changed.
  if (r.layers || r.hidden || r.heads || r.kvHeads || r.headDim || r.ffn ||
      !r.ffnKind.empty() || r.vocab || r.slidingWindow || r.globalEvery ||
      !r.tied.empty())
    spec.clear_parameters();
  if (llvm::Error error = validateModel(spec))
    return error;
  return spec;
}

namespace {
/// The training setup of the request, checked.
llvm::Expected<plan::TrainingConfig>
resolveTraining(const driver::PlanRequest &r, const plan::ModelSpec &model,
                const plan::Cluster &cluster) {
  plan::TrainingConfig training;
  training.set_seq_len(r.seqLen ? r.seqLen : model.seq_len());
  if (training.seq_len() <= 0)
    return planError("no sequence length: give --seq-len");
  if (r.globalBatch <= 0)
    return planError("--global-batch (sequences per step) must be positive");
  if (r.globalBatch > kMaxGlobalBatch)
    return planError("--global-batch " + std::to_string(r.globalBatch) +
                     " is more sequences per step than the planner takes (at "
                     "most " +
                     std::to_string(kMaxGlobalBatch) + ")");
  if (training.seq_len() > kMaxSeqLen)
    return planError("--seq-len " + std::to_string(training.seq_len()) +
                     " is longer than the planner takes (at most " +
                     std::to_string(kMaxSeqLen) + " tokens)");
  training.set_global_batch(r.globalBatch);
  // By default bf16, and fp16 where the GPU has no bf16 tensor cores (V100).
  std::string dtype = r.dtype;
  if (dtype.empty())
    dtype = lacksBf16TensorCores(cluster.gpu()) ? "fp16" : "bf16";
  if (dtype != "bf16" && dtype != "fp16")
    return planError(
        "--dtype is bf16 or fp16 (with fp32 master weights), not '" + dtype +
        "'");
  training.set_dtype(dtype);
  training.set_optimizer("adam");
  if (!(r.memoryReserveGib >= 0 &&
        r.memoryReserveGib < cluster.gpu().hbm_gib()))
    return planError("--memory-reserve must be between 0 and the GPU's " +
                     std::to_string(cluster.gpu().hbm_gib()) + " GiB");
  training.set_memory_reserve_gib(r.memoryReserveGib);
  training.set_flash_attention(
      r.flashAttention &&
      !(r.flashAttentionDefault && predatesAmpere(cluster.gpu())));
  training.set_dropout(r.dropout);
  training.set_grad_reduce_16bit(r.gradReduce16bit);
  training.set_launch_blocking(r.launchBlocking);
  if (std::string why; !r.freeze.empty() && !llvm::Regex(r.freeze).isValid(why))
    return planError("--freeze '" + r.freeze +
                     "' is not a regular expression: " + why);
  training.set_freeze(r.freeze);
  return training;
}

/// The plan to cost instead of searching: from a --json file or the short
/// form, checked against the model and cluster.
llvm::Expected<plan::Plan> givenPlan(const driver::PlanRequest &r,
                                     CostModel &costModel) {
  plan::Plan given;
  if (!r.evaluateJson.empty()) {
    auto buffer = llvm::MemoryBuffer::getFile(r.evaluateJson);
    if (!buffer)
      return planError("cannot read '" + r.evaluateJson + "'");
    plan::PlanSet saved;
    if (llvm::Error error =
            fromJson((*buffer)->getBuffer(), saved, r.evaluateJson))
      return error;
    if (saved.plans().empty())
      return planError(r.evaluateJson + ": the file holds no plans");
    given = saved.plans(0);
  } else {
    auto parsed = parsePlanSpec(r.evaluate, costModel);
    if (!parsed)
      return parsed.takeError();
    given = *parsed;
  }
  std::string why = costModel.checkPlan(given);
  if (why.empty())
    why = costModel.programError(given);
  if (!why.empty())
    return planError("the plan cannot run: " + why);
  return given;
}
} // namespace

llvm::Expected<driver::PlanOutcome>
driver::planModel(MLIRContext &context, const PlanRequest &request) {
  if (!request.evaluate.empty() && !request.evaluateJson.empty())
    return planError("give --evaluate or --evaluate-json, not both");
  auto model = driver::resolveModelSpec(context, request);
  if (!model)
    return model.takeError();
  if (request.cluster.empty())
    return planError("no cluster: give --cluster GPU:PERNODExNODES (e.g. "
                     "h100:8x16) or a cluster file");
  auto cluster = resolveCluster(request.cluster);
  if (!cluster)
    return cluster.takeError();
  auto training = resolveTraining(request, *model, *cluster);
  if (!training)
    return training.takeError();
  model->set_seq_len(training->seq_len());

  PlanOutcome outcome;
  ModelSource source;
  if (!request.modelFile.empty())
    source =
        fileModelSource(request.modelFile, request.inputShapes,
                        training->seq_len(), request.fixedBuffers, context);
  outcome.costModel =
      std::make_unique<CostModel>(*model, *cluster, *training, source);
  CostModel &costModel = *outcome.costModel;
  plan::PlanSet &set = outcome.set;
  *set.mutable_model() = *model;
  *set.mutable_cluster() = *cluster;
  *set.mutable_training() = *training;

  llvm::raw_string_ostream os(outcome.header);
  os << "model " << model->name() << ": " << model->layers()
     << " layers, hidden " << model->hidden() << ", " << model->heads()
     << " heads (" << model->kv_heads() << " KV), FFN " << model->ffn_hidden()
     << " "
     << (model->ffn_kind() == plan::FFN_GELU
             ? (model->ffn_activation().empty() ? "GELU"
                                                : model->ffn_activation())
         : model->ffn_kind() == plan::FFN_GEGLU ? "GeGLU"
                                                : "SwiGLU")
     << (model->vocab() > 0 ? ", vocab " + std::to_string(model->vocab())
                            : std::string(", reads features (no vocabulary)"));
  if (model->sliding_window())
    os << ", sliding window " << model->sliding_window();
  if (model->mixed_sliding_window())
    os << ", sliding window " << model->mixed_sliding_window() << " on "
       << model->windowed_layers() << " of " << model->layers() << " layers";
  if (model->attention_softcap() > 0)
    os << llvm::format(", scores soft-capped at %g",
                       model->attention_softcap());
  if (model->logit_softcap() > 0)
    os << llvm::format(", logits soft-capped at %g", model->logit_softcap());
  if (model->sandwich_norms())
    os << ", norms before and after each branch";
  if (model->post_norms())
    os << ", norms after each branch";
  if (model->qk_norm())
    os << (model->qk_norm_layout() == plan::QK_NORM_WHOLE
               ? ", queries and keys normed across heads"
           : model->qk_norm_layout() == plan::QK_NORM_PER_HEAD
               ? ", queries and keys normed per head with a weight each"
               : ", queries and keys normed per head");
  if (model->rotary_interleaved())
    os << ", rotary on adjacent pairs";
  if (!model->rope_scaling().type().empty())
    os << llvm::format(", rope scaling %s x%g",
                       model->rope_scaling().type().c_str(),
                       model->rope_scaling().factor());
  if (model->nope_layers_size() > 0)
    os << ", no rotary on " << model->nope_layers_size() << " of "
       << model->layers() << " layers";
  if (model->rope_local_theta() > 0)
    os << llvm::format(", local layers' rotary base %g",
                       model->rope_local_theta());
  if (model->embedding_scale() > 0)
    os << llvm::format(", embeddings times %g", model->embedding_scale());
  if (model->embedding_norm())
    os << ", embeddings normed";
  switch (model->norm()) {
  case plan::NORM_RMS:
    os << ", RMSNorm";
    break;
  case plan::NORM_LAYER:
    os << ", LayerNorm";
    break;
  case plan::NORM_LAYER_NO_BIAS:
    os << ", LayerNorm without bias";
    break;
  case plan::NORM_LAYER_NO_AFFINE:
    os << ", LayerNorm without scale or bias";
    break;
  default:
    break;
  }
  if (model->no_linear_bias())
    os << ", no linear biases";
  if (model->no_attention_bias())
    os << (model->attention_output_bias() ? ", no QKV biases"
                                          : ", no attention biases");
  if (model->qkv_bias() && !hasLinearBiases(*model))
    os << (model->attention_output_bias() ? ", attention biases"
                                          : ", QKV biases");
  if (model->mlp_bias())
    os << ", MLP biases";
  if (model->output_bias())
    os << ", output bias";
  if (model->qkv_clip() > 0)
    os << llvm::format(", QKV clipped at %g", model->qkv_clip());
  if (model->alibi())
    os << ", ALiBi";
  if (model->attention_scale() > 0)
    os << llvm::format(", scores times %g", model->attention_scale());
  if (model->residual_scale() > 0)
    os << llvm::format(", branches times %g", model->residual_scale());
  if (model->logit_divisor() > 0)
    os << llvm::format(", logits divided by %g", model->logit_divisor());
  if (model->parallel_block())
    os << (model->one_block_norm()
               ? ", attention and MLP in parallel on one norm"
               : ", attention and MLP in parallel");
  if (model->head_dim())
    os << ", heads of " << model->head_dim();
  if (model->value_head_dim())
    os << ", values of " << model->value_head_dim() << " per head";
  os << llvm::format(", %.3g B parameters", parameterCount(*model) / 1e9);
  // What the cost model costs: a file's own IR, or the transformer a
  // preset or the builder fields describe.
  if (source)
    os << "; costed from its own IR"
       << (source.staticBatch
               ? " (a static batch of " + std::to_string(*source.staticBatch) +
                     ": micro-batches that divide it)"
               : std::string());
  os << "\n";
  os << "cluster " << cluster->name() << ": " << totalGpus(*cluster) << " x "
     << cluster->gpu().name() << " (" << cluster->gpus_per_node()
     << " per node); global batch " << training->global_batch() << ", sequence "
     << training->seq_len() << ", " << training->dtype()
     << (training->launch_blocking()
             ? ", launches blocking (CUDA_LAUNCH_BLOCKING=1)"
             : "")
     << "\n";
  const plan::Gpu &gpu = cluster->gpu();
  if (lacksBf16TensorCores(gpu) && training->dtype() == "bf16")
    os << llvm::format("note: %s has no bf16 tensor cores: its bf16 GEMMs are "
                       "costed at %g TFLOP/s against fp16's %g; its published "
                       "runs trained in fp16 (--dtype fp16)\n",
                       gpu.name().c_str(), gpu.bf16_tflops(),
                       gpu.fp16_tflops());
  if (predatesAmpere(gpu) && !training->flash_attention() &&
      request.flashAttentionDefault)
    os << "note: FlashAttention needs Ampere or later: attention on "
       << gpu.name()
       << " is costed with its S x S scores in memory (as "
          "--flash-attention=false)\n";
  if (std::string note = uncalibratedGpuNote(gpu); !note.empty())
    os << "note: " << note << "\n";
  // A config's context is what the model attends over at most (Qwen2.5's
  // 131,072), often longer than it trains at.
  if (!request.seqLen && request.modelFile.empty() &&
      model->source() != "preset" && model->source() != "builder")
    os << "note: sequence " << training->seq_len()
       << " is the config's context (its max_position_embeddings, or a rope "
          "scaling's original length): --seq-len for the length you train "
          "at\n";

  // Cost one plan given by hand (or from a JSON file).
  if (!request.evaluate.empty() || !request.evaluateJson.empty()) {
    auto given = givenPlan(request, costModel);
    if (!given)
      return given.takeError();
    costModel.evaluate(*given);
    costModel.countStepCommunication(*given);
    outcome.evaluated = true;
    outcome.band = request.band.rows > 0 ? request.band : validationErrorBand();
    annotateRisk(*given, costModel, outcome.band);
    if (!given->fits() && !request.allowOom)
      outcome.overMemoryGib =
          given->memory().total_gib() - given->memory().capacity_gib();
    *set.add_plans() = std::move(*given);
    return outcome;
  }

  SearchOptions options;
  options.top = request.top;
  options.tpAcrossNodes = request.tpAcrossNodes;
  options.tensor3d = request.tensor3d;
  if (request.maxMicroBatch > 0)
    options.maxMicroBatch = options.maxMicroBatchUnpipelined =
        request.maxMicroBatch;
  options.boundFromRelatives = request.boundFromRelatives;
  options.progress = request.progress;
  if (!request.exportFramework.empty()) {
    std::string framework = request.exportFramework;
    if (framework != "megatron" && framework != "deepspeed" &&
        framework != "torchtitan")
      return planError("unknown framework '" + framework +
                       "'; use megatron, deepspeed or torchtitan");
    // Search only what the framework can run.
    options.accept = [framework](const plan::Plan &p) {
      return exportRestriction(p, framework) == nullptr;
    };
  }
  if (request.top < 1)
    return planError("--top must be at least 1");
  if (request.maxMicroBatch < 0 || request.maxMicroBatch > 1024)
    return planError("--max-micro-batch must be between 1 and 1024");
  // The compression policies plans are costed under: one (none, or the
  // user's), or with "auto" the ones worth trying on a bf16 run: int8
  // gradients, and fp8 activations besides, the pipeline's sends included
  // (bf16 activations are already 16-bit); bf16 gradients where they reduce
  // in fp32.
  std::vector<std::string> policies = {""};
  if (request.compress == "auto") {
    policies = {"", "dp:int8", "pp:fp8,dp:int8,cp:fp8,ulysses:fp8,tp:fp8"};
    if (!training->grad_reduce_16bit())
      policies.insert(policies.begin() + 1, "dp:bf16");
  } else if (!request.compress.empty()) {
    llvm::Expected<CompressPolicy> parsed =
        parseCompressPolicy(request.compress);
    if (!parsed)
      return planError("--compress: " + llvm::toString(parsed.takeError()) +
                       " (or --compress=auto)");
    policies = {formatCompressPolicy(*parsed)};
  }
  auto search = [&](const SearchOptions &base,
                    const std::vector<std::string> &policies) {
    SearchResult merged;
    for (size_t i = 0; i < policies.size(); ++i) {
      SearchOptions each = base;
      each.compress = policies[i];
      if (base.progress)
        each.progress = [&, i](double done) {
          base.progress((double(i) + done) / double(policies.size()));
        };
      SearchResult found = searchPlans(costModel, each);
      if (i == 0) {
        merged = std::move(found);
        continue;
      }
      merged.candidates += found.candidates;
      merged.simulated += found.simulated;
      merged.seconds += found.seconds;
      merged.anyFits |= found.anyFits;
      if (merged.programError.empty())
        merged.programError = found.programError;
      for (plan::Plan &p : found.plans)
        merged.plans.push_back(std::move(p));
      for (plan::Plan &p : found.near)
        merged.near.push_back(std::move(p));
    }
    std::stable_sort(merged.plans.begin(), merged.plans.end(), planBefore);
    return merged;
  };
  outcome.band = request.band.rows > 0 ? request.band : validationErrorBand();
  double tolerance =
      request.riskTolerance < 0 ? outcome.band.spread : request.riskTolerance;
  // The plans within the tolerance of the fastest are kept as the search
  // costs them, for the lower-risk alternatives below.
  options.nearFastest = std::max(0.0, tolerance);
  SearchResult result = search(options, policies);
  set.set_candidates_evaluated(result.candidates);
  set.set_candidates_simulated(result.simulated);
  set.set_search_seconds(result.seconds);
  if (result.candidates == 0)
    return planError(
        "no plan divides this model on this cluster: check that the "
        "global batch, the heads (" +
        llvm::Twine(model->heads()) + ") and the sequence (" +
        llvm::Twine(training->seq_len()) + ") divide by the parallel degrees");
  if (!result.anyFits && result.smallestMemory.pp() == 0)
    return planError(
        "no plan could be costed" +
        (result.programError.empty()
             ? std::string(": every candidate's rank program failed")
             : ": " + result.programError));
  if (!result.anyFits) {
    const plan::Plan &small = result.smallestMemory;
    std::string message;
    llvm::raw_string_ostream error(message);
    error << "no plan fits in "
          << llvm::format("%.1f", small.memory().capacity_gib())
          << " GiB per GPU. The smallest-memory plan needs "
          << llvm::format(
                 "%.1f GiB (%.1f GiB over)", small.memory().total_gib(),
                 small.memory().total_gib() - small.memory().capacity_gib())
          << ":\n";
    printPlanBreakdown(error, small);
    error << "Use more GPUs, GPUs with more memory, or a smaller global "
             "batch or sequence.";
    return planError(message);
  }
  // Plans with fewer risks than the fastest, predicted within the
  // tolerance of it, among those the search that found `found` costed near
  // the fastest (so within the same space: without grids when that search
  // had none): the best eight (per mesh shape and schedule), and the best
  // of each lower risk score, so that preferRobust sees the least risky.
  auto addSafer = [&](SearchResult &found) {
    double fastestRisk =
        assessRisk(found.plans.front(), costModel, false).score;
    if (tolerance <= 0 || fastestRisk <= 0)
      return;
    std::vector<plan::Plan> alternatives =
        lowerRiskPlans(costModel, found.near,
                       found.plans.front().time().step_s() * (1 + tolerance),
                       fastestRisk, options.nearCount);
    // A plan both lists hold is listed once.
    for (plan::Plan &p : alternatives)
      if (llvm::none_of(found.plans, [&](const plan::Plan &q) {
            return google::protobuf::util::MessageDifferencer::Equals(p, q);
          }))
        found.plans.push_back(std::move(p));
    std::stable_sort(found.plans.begin(), found.plans.end(), planBefore);
  };
  addSafer(result);
  // What weft plan answers without compression, for --compress=auto to
  // compare with: the same search and choice among uncompressed plans.
  std::vector<plan::Plan> uncompressed;
  if (request.compress == "auto") {
    SearchResult plain = search(options, {""});
    set.set_search_seconds(set.search_seconds() + plain.seconds);
    if (!plain.plans.empty()) {
      addSafer(plain);
      uncompressed = std::move(plain.plans);
    }
  }
  outcome.robust =
      preferRobust(result.plans, costModel, outcome.band, tolerance);
  if (request.compress == "auto" && !result.plans.empty()) {
    preferRobust(uncompressed, costModel, outcome.band, tolerance);
    const plan::Plan &answer = result.plans.front();
    std::string tried;
    for (const std::string &policy : policies)
      if (!policy.empty())
        tried += (tried.empty() ? "" : "; ") + policy;
    llvm::raw_string_ostream note(outcome.compression);
    if (uncompressed.empty())
      note << "compression: only compressed plans were found";
    else if (answer.compress().empty())
      note << "compression does not change the answer: no compressed plan is "
              "predicted faster by more than the model's spread between "
              "plans, and compression changes the numerics";
    else {
      // The answer may be slower than the uncompressed one when it went
      // first for fewer risks (the uncompressed answer's may be a grid).
      double gain =
          uncompressed.front().time().step_s() / answer.time().step_s() - 1;
      note << llvm::format(
          "compression changes the answer: with compress=%s it is predicted "
          "%.4g s, %.1f%% %s than the answer without compression (%s, "
          "%.4g s)%s",
          answer.compress().c_str(), answer.time().step_s(),
          100 * std::fabs(gain), gain >= 0 ? "faster" : "slower",
          describePlan(uncompressed.front()).c_str(),
          uncompressed.front().time().step_s(),
          gain >= 0 ? "" : "; it is first for fewer risks");
    }
    note << " (tried " << tried
         << "). Codecs change the training numerics: compare the loss with "
            "an uncompressed run before relying on it.\n";
  }
  // When the answer is AxoNN's grid: what Megatron's tensor parallelism
  // would have given (the same search without grids).
  if (!result.plans.empty() && uses3dTensorParallel(result.plans.front())) {
    SearchOptions megatron = options;
    megatron.tensor3d = false;
    megatron.progress = nullptr;
    SearchResult plain = search(megatron, policies);
    set.set_search_seconds(set.search_seconds() + plain.seconds);
    llvm::raw_string_ostream note(outcome.tensor3d);
    const plan::Plan &answer = result.plans.front();
    if (plain.plans.empty()) {
      note << "3-D tensor parallelism changes the answer: no plan without it "
              "fits\n";
    } else {
      addSafer(plain);
      preferRobust(plain.plans, costModel, outcome.band, tolerance);
      double gain =
          plain.plans.front().time().step_s() / answer.time().step_s() - 1;
      note << llvm::format(
          "3-D tensor parallelism changes the answer: AxoNN's grid "
          "tp3d=%dx%dx%d is predicted %.4g s, %.1f%% %s than the answer "
          "with Megatron's tensor parallelism (%s, %.4g s)%s\n",
          answer.gx(), answer.gy(), answer.gz(), answer.time().step_s(),
          100 * std::fabs(gain), gain >= 0 ? "faster" : "slower",
          describePlan(plain.plans.front()).c_str(),
          plain.plans.front().time().step_s(),
          gain >= 0 ? "" : "; it is first for fewer risks");
    }
  }
  if (int(result.plans.size()) > request.top)
    result.plans.resize(request.top);
  for (plan::Plan &p : result.plans)
    *set.add_plans() = p;
  return outcome;
}

std::string driver::overMemoryMessage(const PlanOutcome &outcome) {
  const plan::MemoryBreakdown &m = outcome.set.plans(0).memory();
  return llvm::formatv(
      "the plan does not fit: {0:F1} GiB per GPU on its worst stage, "
      "{1:F1} GiB over the {2:F1} GiB available (the GPU's memory less "
      "--memory-reserve); use more memory-saving degrees (tp, pp, zero, "
      "recompute) or a smaller micro-batch, or give --allow-oom to cost it "
      "anyway",
      m.total_gib(), outcome.overMemoryGib, m.capacity_gib());
}

llvm::Expected<OwningOpRef<ModuleOp>> driver::buildModelWithWeights(
    MLIRContext &context, const plan::ModelSpec &model, int64_t batch,
    int64_t seq, uint64_t seed, llvm::StringRef weightsPath,
    llvm::StringRef checkpointPath) {
  if (batch <= 0 || seq <= 0 || batch > kMaxGlobalBatch || seq > kMaxSeqLen)
    return planError("the model's batch and sequence must be from 1 to 2^24 "
                     "(they are " +
                     llvm::Twine(batch) + " and " + llvm::Twine(seq) + ")");
  TransformerShape shape;
  shape.batch = batch;
  shape.seq = seq;
  if (weightsPath.empty())
    return buildTransformer(context, model, shape);
  // Refuse what would not fit in memory here before writing a byte.
  double elements = parameterCount(model);
  if (elements * 4 > double(int64_t(1) << 36))
    return planError(llvm::formatv("the model has {0:e2} parameters ({1:f1} "
                                   "GiB in f32); weights are written for "
                                   "models of at most 64 GiB",
                                   elements, elements * 4 / (1 << 30))
                         .str());
  std::optional<HfCheckpoint> checkpoint;
  if (!checkpointPath.empty()) {
    if (llvm::Error error = checkpointFamilySupported(model))
      return error;
    llvm::Expected<HfCheckpoint> opened = HfCheckpoint::open(checkpointPath);
    if (!opened)
      return opened.takeError();
    checkpoint = std::move(*opened);
  }
  OwningOpRef<ModuleOp> module = buildTransformer(context, model, shape);
  // Written under a temporary name and renamed when whole, so that an
  // interrupted import never leaves weights that look complete.
  std::string partial = (weightsPath + ".partial").str();
  std::error_code ec;
  llvm::raw_fd_ostream out(partial, ec);
  if (ec)
    return planError("cannot write '" + partial + "': " + ec.message());
  // Normal deviates by Box-Muller over a fixed 64-bit generator, so that a
  // seed gives the same weights with every standard library.
  std::mt19937_64 random(seed);
  auto uniform = [&] { return (double(random() >> 11) + 0.5) * 0x1.0p-53; };
  auto normal = [&] {
    double radius = std::sqrt(-2.0 * std::log(uniform()));
    return radius * std::cos(2.0 * M_PI * uniform());
  };
  std::string location = llvm::sys::path::filename(weightsPath).str();
  int64_t offset = 0;
  std::vector<float> values;
  std::vector<std::string> used;
  std::optional<llvm::Error> failed;
  module->walk([&](ParameterOp param) -> WalkResult {
    auto type = cast<RankedTensorType>(param.getType());
    if (checkpoint) {
      llvm::Expected<std::vector<float>> read = parameterFromCheckpoint(
          *checkpoint, model, param.getName(), type.getShape(), used);
      if (!read) {
        failed = read.takeError();
        return WalkResult::interrupt();
      }
      values = std::move(*read);
    } else {
      values.assign(size_t(type.getNumElements()), 0.0f);
      bool matrix = type.getRank() >= 2;
      bool scale = type.getRank() == 1 && param.getName().ends_with(".weight");
      for (float &value : values)
        value = matrix ? float(0.02 * normal()) : scale ? 1.0f : 0.0f;
    }
    int64_t length = int64_t(values.size()) * 4;
    // The module is built little-endian; raw f32 as the runtime reads it.
    out.write(reinterpret_cast<const char *>(values.data()), size_t(length));
    param.setExternalAttr(
        ExternalDataAttr::get(&context, location, offset, length));
    offset += length;
    return WalkResult::advance();
  });
  // What the model has no place for is another model: refuse it rather
  // than run the checkpoint without some of its weights.
  if (checkpoint && !failed) {
    std::set<std::string> read(used.begin(), used.end());
    std::vector<std::string> left;
    for (const std::string &name : checkpoint->names()) {
      llvm::StringRef tensor(name);
      // Tied output layers saved anyway, and older checkpoints' rotary
      // inv_freq buffers and GPT-2's and GPT-NeoX's causal masks
      // (attn.bias, attention.masked_bias), are not weights.
      if (read.count(name) || tensor.ends_with("rotary_emb.inv_freq") ||
          tensor.ends_with(".attn.bias") ||
          tensor.ends_with(".attn.masked_bias") ||
          tensor.ends_with(".attention.bias") ||
          tensor.ends_with(".attention.masked_bias") ||
          (tensor == "lm_head.weight" && model.tied_embeddings()))
        continue;
      left.push_back(name);
    }
    if (!left.empty()) {
      std::string names;
      for (size_t i = 0; i < left.size() && i < 4; ++i)
        names += (i ? ", " : "") + left[i];
      if (left.size() > 4)
        names += llvm::formatv(" and {0} more", left.size() - 4).str();
      failed = planError(llvm::formatv(
          "the checkpoint has {0} tensor{2} the model its config describes has "
          "no place for ({1}): it is another model, or one with parts Weft "
          "does not build (check the config against the checkpoint)",
          left.size(), names, left.size() == 1 ? "" : "s"));
    }
  }
  out.close();
  if (failed) {
    llvm::sys::fs::remove(partial);
    return std::move(*failed);
  }
  if (out.has_error()) {
    std::string why = out.error().message();
    out.clear_error();
    llvm::sys::fs::remove(partial);
    return planError("cannot write '" + partial + "': " + why);
  }
  if (std::error_code renamed = llvm::sys::fs::rename(partial, weightsPath))
    return planError("cannot rename '" + partial + "' to '" + weightsPath +
                     "': " + renamed.message());
  return module;
}

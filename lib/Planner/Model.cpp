//===- Model.cpp - Transformer shapes, presets and per-rank layer IR ------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/Model.h"

#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <optional>

using namespace mlir;
using namespace weft;
using namespace weft::planner;

namespace {
struct Preset {
  const char *name;
  int64_t layers, hidden, heads, kvHeads, ffn;
  plan::FfnKind kind;
  int64_t vocab, seq;
  bool tied;
  /// Heads of their own width (0: hidden / heads); a sliding window, on
  /// every layer or, with globalEvery, on all but every globalEvery-th; the
  /// attention scores' soft cap (0: none).
  int64_t headDim = 0, window = 0, globalEvery = 0;
  float softcap = 0;
};
constexpr plan::FfnKind kGelu = plan::FFN_GELU;
constexpr plan::FfnKind kSwiglu = plan::FFN_SWIGLU;
constexpr plan::FfnKind kGeglu = plan::FFN_GEGLU;
// GPT-3 (Brown et al. 2020, Table 2.1; vocabulary padded to 51200 as Megatron
// does); Megatron-LM (Narayanan et al. 2021, Table 1, and Korthikanti et al.
// 2022's 22B); LLaMA-2 (Touvron et al. 2023); LLaMA-3 (Dubey et al. 2024).
const Preset kPresets[] = {
    {"gpt3-125m", 12, 768, 12, 12, 3072, kGelu, 51200, 2048, true},
    {"gpt3-350m", 24, 1024, 16, 16, 4096, kGelu, 51200, 2048, true},
    {"gpt3-1.3b", 24, 2048, 16, 16, 8192, kGelu, 51200, 2048, true},
    {"gpt3-2.7b", 32, 2560, 32, 32, 10240, kGelu, 51200, 2048, true},
    {"gpt3-6.7b", 32, 4096, 32, 32, 16384, kGelu, 51200, 2048, true},
    {"gpt3-13b", 40, 5120, 40, 40, 20480, kGelu, 51200, 2048, true},
    {"gpt3-175b", 96, 12288, 96, 96, 49152, kGelu, 51200, 2048, true},
    {"megatron-1.7b", 24, 2304, 24, 24, 9216, kGelu, 51200, 2048, true},
    {"megatron-3.6b", 30, 3072, 32, 32, 12288, kGelu, 51200, 2048, true},
    {"megatron-7.5b", 36, 4096, 32, 32, 16384, kGelu, 51200, 2048, true},
    {"megatron-18b", 40, 6144, 48, 48, 24576, kGelu, 51200, 2048, true},
    {"megatron-22b", 48, 6144, 64, 64, 24576, kGelu, 51200, 2048, true},
    {"megatron-39b", 48, 8192, 64, 64, 32768, kGelu, 51200, 2048, true},
    {"megatron-76b", 60, 10240, 80, 80, 40960, kGelu, 51200, 2048, true},
    {"megatron-145b", 80, 12288, 96, 96, 49152, kGelu, 51200, 2048, true},
    {"megatron-310b", 96, 16384, 128, 128, 65536, kGelu, 51200, 2048, true},
    {"megatron-530b", 105, 20480, 128, 128, 81920, kGelu, 51200, 2048, true},
    {"megatron-1t", 128, 25600, 160, 160, 102400, kGelu, 51200, 2048, true},
    {"llama2-7b", 32, 4096, 32, 32, 11008, kSwiglu, 32000, 4096, false},
    {"llama2-13b", 40, 5120, 40, 40, 13824, kSwiglu, 32000, 4096, false},
    {"llama2-70b", 80, 8192, 64, 8, 28672, kSwiglu, 32000, 4096, false},
    {"llama3-8b", 32, 4096, 32, 8, 14336, kSwiglu, 128256, 8192, false},
    {"llama3-70b", 80, 8192, 64, 8, 28672, kSwiglu, 128256, 8192, false},
    {"llama3-405b", 126, 16384, 128, 8, 53248, kSwiglu, 128256, 8192, false},
    // Mistral 7B (Jiang et al. 2023, Table 1: a 4,096-key window on every
    // layer, 8,192-token context); Mistral NeMo 12B (its config.json: heads
    // of 128 at hidden 5120, a 131,072-token vocabulary; 8,192 tokens here,
    // --seq-len for more).
    {"mistral-7b", 32, 4096, 32, 8, 14336, kSwiglu, 32000, 8192, false, 0,
     4096},
    {"mistral-nemo-12b", 40, 5120, 32, 8, 14336, kSwiglu, 131072, 8192, false,
     128},
    // Gemma 2 (Gemma Team 2024, Table 1: local layers of a 4,096-key window
    // alternating with global ones, the first local; scores soft-capped at
    // 50; GeGLU; the embedding tied to the output; 8,192 tokens); Gemma 3
    // 27B (Gemma Team 2025: five local layers of a 1,024-key window to each
    // global one, no soft cap; pre-trained at 32,768 tokens).
    {"gemma2-9b", 42, 3584, 16, 8, 14336, kGeglu, 256000, 8192, true, 256, 4096,
     2, 50},
    {"gemma2-27b", 46, 4608, 32, 16, 36864, kGeglu, 256000, 8192, true, 128,
     4096, 2, 50},
    {"gemma3-27b", 62, 5376, 32, 16, 21504, kGeglu, 262144, 32768, true, 128,
     1024, 6},
    // Qwen2.5 (Qwen Team 2024, Table 1 and config.json; their QKV biases
    // below, kRotary): 32,768 tokens.
    {"qwen2.5-7b", 28, 3584, 28, 4, 18944, kSwiglu, 152064, 32768, false},
    {"qwen2.5-72b", 80, 8192, 64, 8, 29568, kSwiglu, 152064, 32768, false},
};

/// The rotary base, QKV biases and norm epsilon of the presets whose
/// families have them (their config.json files), for the launchers
/// exported (Megatron-LM's --rotary-base, --add-qkv-bias, --norm-epsilon)
/// and the builder. GPT-3's and Megatron's learned positions have none.
struct Rotary {
  const char *prefix;
  double theta;
  bool qkvBias;
  double normEpsilon;
};
const Rotary kRotary[] = {
    {"llama2-", 1e4, false, 0},    {"llama3-", 5e5, false, 0},
    {"mistral-7b", 1e4, false, 0}, {"mistral-nemo-", 1e6, false, 0},
    {"gemma2-", 1e4, false, 1e-6}, {"gemma3-", 1e6, false, 1e-6},
    {"qwen2.5-", 1e6, true, 1e-6},
};

/// Gemma's own arithmetic (its config.json files): the embeddings times
/// sqrt(hidden), a norm after each branch as well as before (sandwich), the
/// scores scaled by query_pre_attn_scalar^-1/2 (hidden / heads for the 27B
/// models, whose heads are 128 wide), Gemma 2's logits soft-capped at 30 and
/// Gemma 3's queries and keys normed per head.
struct GemmaArithmetic {
  const char *name;
  double queryPreAttnScalar;
  float logitSoftcap;
};
const GemmaArithmetic kGemma[] = {
    {"gemma2-9b", 256, 30}, {"gemma2-27b", 144, 30}, {"gemma3-27b", 168, 0}};
} // namespace

std::vector<std::string> planner::presetNames() {
  std::vector<std::string> names;
  for (const Preset &preset : kPresets)
    names.push_back(preset.name);
  return names;
}

llvm::Expected<plan::ModelSpec> planner::lookupPreset(llvm::StringRef name) {
  std::string key = name.lower();
  // Accept the names people write: "gpt3-175B", "llama-2-70b", "1T".
  llvm::StringRef ref(key);
  std::string normalized = ref.str();
  if (ref.starts_with("llama-"))
    normalized = "llama" + ref.drop_front(6).str();
  normalized.erase(std::remove(normalized.begin(), normalized.end(), '_'),
                   normalized.end());
  for (const Preset &preset : kPresets) {
    if (normalized != preset.name)
      continue;
    plan::ModelSpec spec;
    spec.set_name(preset.name);
    spec.set_layers(preset.layers);
    spec.set_hidden(preset.hidden);
    spec.set_heads(preset.heads);
    spec.set_kv_heads(preset.kvHeads);
    spec.set_ffn_hidden(preset.ffn);
    spec.set_ffn_kind(preset.kind);
    spec.set_vocab(preset.vocab);
    spec.set_seq_len(preset.seq);
    spec.set_tied_embeddings(preset.tied);
    spec.set_head_dim(preset.headDim);
    if (preset.window > 0 && preset.globalEvery > 0) {
      spec.set_mixed_sliding_window(preset.window);
      spec.set_global_every(preset.globalEvery);
      spec.set_windowed_layers(preset.layers -
                               preset.layers / preset.globalEvery);
    } else if (preset.window > 0) {
      spec.set_sliding_window(preset.window);
    }
    spec.set_attention_softcap(preset.softcap);
    for (const Rotary &rotary : kRotary)
      if (llvm::StringRef(preset.name).starts_with(rotary.prefix)) {
        spec.set_rope_theta(rotary.theta);
        spec.set_qkv_bias(rotary.qkvBias);
        spec.set_norm_epsilon(rotary.normEpsilon);
      }
    for (const GemmaArithmetic &gemma : kGemma)
      if (llvm::StringRef(preset.name) == gemma.name) {
        spec.set_embedding_scale(std::sqrt(float(preset.hidden)));
        spec.set_norm_one_plus(true);
        spec.set_sandwich_norms(true);
        spec.set_attention_scale(
            float(1.0 / std::sqrt(gemma.queryPreAttnScalar)));
        spec.set_logit_softcap(gemma.logitSoftcap);
        spec.set_qk_norm(llvm::StringRef(gemma.name).starts_with("gemma3"));
      }
    spec.set_source("preset");
    return spec;
  }
  // A model file given where a preset's name goes: say where it goes.
  if (name.ends_with(".mlir") || name.ends_with(".onnx"))
    return llvm::createStringError(
        "'" + name.str() +
        "' is a model file, not a preset: give it as the first argument "
        "(weft plan " +
        name.str() + " --cluster ...), not with --model");
  return llvm::createStringError("unknown model preset '" + name.str() +
                                 "'; the presets are " +
                                 llvm::join(presetNames(), ", "));
}

llvm::Error planner::validateModel(const plan::ModelSpec &model) {
  auto fail = [&](const llvm::Twine &why) {
    return llvm::createStringError("model '" + model.name() + "': " +
                                   why.str());
  };
  if (model.layers() <= 0 || model.hidden() <= 0 || model.heads() <= 0 ||
      model.kv_heads() <= 0 || model.ffn_hidden() <= 0 || model.vocab() < 0 ||
      (model.vocab() == 0 && model.parameters() <= 0))
    return fail("layers, hidden, heads, kv_heads, ffn_hidden and vocab must "
                "all be positive (vocab 0 only for an imported model that "
                "reads features, not token ids)");
  if (model.head_dim() < 0 || model.value_head_dim() < 0)
    return fail("head widths are positive, or 0 for hidden / heads (head_dim "
                "is " +
                llvm::Twine(model.head_dim()) + ", value_head_dim " +
                llvm::Twine(model.value_head_dim()) + ")");
  if (model.head_dim() == 0 && model.hidden() % model.heads())
    return fail("hidden (" + llvm::Twine(model.hidden()) +
                ") is not a multiple of heads (" + llvm::Twine(model.heads()) +
                "): give each head's width (--head-dim, Megatron-LM's "
                "--kv-channels)");
  if (model.head_dim() > (1 << 14) || model.value_head_dim() > (1 << 14))
    return fail("heads wider than 16384 (head_dim " +
                llvm::Twine(model.head_dim()) + ", value_head_dim " +
                llvm::Twine(model.value_head_dim()) + ")");
  if (model.heads() % model.kv_heads())
    return fail("heads (" + llvm::Twine(model.heads()) +
                ") is not a multiple of kv_heads (" +
                llvm::Twine(model.kv_heads()) + ")");
  // Far beyond any model trained (a few hundred layers), and what the search
  // answers in seconds (4,096 layers on 1,024 GPUs: about 8 s; 100,000 took
  // minutes).
  if (model.layers() > kMaxLayers || model.hidden() > (1 << 20) ||
      model.ffn_hidden() > (1 << 22) || model.vocab() > (1 << 24))
    return fail("sizes beyond any model Weft plans for (at most 4096 layers, "
                "hidden 2^20, FFN 2^22, vocabulary 2^24; this one has " +
                llvm::Twine(model.layers()) + " layers, hidden " +
                llvm::Twine(model.hidden()) + ", FFN " +
                llvm::Twine(model.ffn_hidden()) + ", vocabulary " +
                llvm::Twine(model.vocab()) + ")");
  return llvm::Error::success();
}

static bool isGelu(const plan::ModelSpec &model) {
  return model.ffn_kind() == plan::FFN_GELU;
}

plan::NormKind planner::normKind(const plan::ModelSpec &model) {
  if (model.norm() != plan::NORM_DEFAULT)
    return model.norm();
  return isGelu(model) ? plan::NORM_LAYER : plan::NORM_RMS;
}

bool planner::hasLinearBiases(const plan::ModelSpec &model) {
  return isGelu(model) && !model.no_linear_bias();
}

/// The parameters of one of the model's norms over `width` features.
static double normParameters(const plan::ModelSpec &model, double width) {
  switch (normKind(model)) {
  case plan::NORM_LAYER:
    return 2 * width;
  case plan::NORM_LAYER_NO_AFFINE:
    return 0;
  default:
    return width;
  }
}

int64_t planner::headDim(const plan::ModelSpec &model) {
  if (model.head_dim() > 0)
    return model.head_dim();
  return model.heads() > 0 ? model.hidden() / model.heads() : 0;
}

int64_t planner::valueHeadDim(const plan::ModelSpec &model) {
  return model.value_head_dim() > 0 ? model.value_head_dim() : headDim(model);
}

/// The widths of the attention's projections: queries, keys and values
/// together, and the values alone (the output projection's input).
static std::pair<double, double> attentionWidths(const plan::ModelSpec &model) {
  double d = double(headDim(model)), dv = double(valueHeadDim(model));
  double values = model.heads() * dv;
  return {(model.heads() + model.kv_heads()) * d + model.kv_heads() * dv,
          values};
}

int64_t planner::rotatedFeatures(const plan::ModelSpec &model) {
  if (model.rope_theta() <= 0)
    return 0;
  int64_t d = headDim(model);
  if (model.rotary_percent() > 0 && model.rotary_percent() < 1)
    d = int64_t(double(d) * model.rotary_percent());
  return d - d % 2;
}

int64_t planner::layerWindow(const plan::ModelSpec &model, int64_t index) {
  if (model.mixed_sliding_window() <= 0 || model.global_every() <= 0)
    return model.sliding_window();
  const int64_t every = model.global_every();
  const bool global =
      model.global_first() ? index % every == 0 : (index + 1) % every == 0;
  return global ? 0 : model.mixed_sliding_window();
}

int64_t planner::windowedLayerCount(int64_t layers, int64_t every,
                                    bool globalFirst) {
  if (every <= 0)
    return layers;
  return layers - (globalFirst ? (layers + every - 1) / every : layers / every);
}

double planner::layerParameterCount(const plan::ModelSpec &model) {
  double h = model.hidden();
  auto [qkvWidth, valueWidth] = attentionWidths(model);
  double qkv = h * qkvWidth;
  double out = valueWidth * h;
  double ffn = model.ffn_hidden();
  double mlp = isGelu(model) ? 2 * h * ffn : 3 * h * ffn;
  // The linears' biases (GPT's; GPT-J's MLP's alone), or a gated model's:
  // Qwen2's QKV biases alone, LLaMA's attention_bias (the output
  // projection's too) and mlp_bias.
  // (GPT-Neo's attention biases its output projection alone.)
  double attentionBiases = model.no_attention_bias()
                               ? (model.qkv_bias() ? qkvWidth : 0) +
                                     (model.attention_output_bias() ? h : 0)
                               : qkvWidth + h;
  double biases =
      hasLinearBiases(model)
          ? attentionBiases + ffn + h
          : (model.qkv_bias() ? qkvWidth : 0) +
                (model.attention_output_bias() ? h : 0) +
                (model.mlp_bias() ? (isGelu(model) ? ffn : 2 * ffn) + h : 0);
  // Two norms (four with Gemma's, one for a parallel block's two branches
  // where they share it, two after the branches with OLMo 2's), and the QK
  // norms where they lie.
  double blockNorms = model.sandwich_norms()                             ? 4
                      : model.parallel_block() && model.one_block_norm() ? 1
                                                                         : 2;
  double norms = blockNorms * normParameters(model, h);
  if (model.qk_norm()) {
    const double d = double(headDim(model));
    switch (model.qk_norm_layout()) {
    case plan::QK_NORM_PER_HEAD:
      norms += double(model.heads() + model.kv_heads()) * d;
      break;
    case plan::QK_NORM_WHOLE:
      norms += normParameters(model, double(model.heads()) * d) +
               normParameters(model, double(model.kv_heads()) * d);
      break;
    default:
      norms += 2 * normParameters(model, d);
      break;
    }
  }
  return qkv + out + mlp + biases + norms;
}

std::vector<float> planner::alibiSlopes(int64_t heads) {
  std::vector<float> slopes;
  if (heads <= 0)
    return slopes;
  int64_t n = 1;
  while (n * 2 <= heads)
    n *= 2;
  for (int64_t k = 1; k <= n; ++k)
    slopes.push_back(float(std::exp2(-8.0 * double(k) / double(n))));
  for (int64_t k = 1; int64_t(slopes.size()) < heads; k += 2)
    slopes.push_back(float(std::exp2(-4.0 * double(k) / double(n))));
  return slopes;
}

bool planner::hasLearnedPositions(const plan::ModelSpec &model) {
  return model.parameters() <= 0 && model.rope_theta() <= 0 && !model.alibi();
}

double planner::parameterCount(const plan::ModelSpec &model) {
  if (model.parameters() > 0)
    return double(model.parameters());
  double h = model.hidden();
  double embedding = double(model.vocab()) * h;
  double output = (model.tied_embeddings() ? 0 : embedding) +
                  (model.output_bias() ? double(model.vocab()) : 0);
  // The learned position table, of the model's context.
  double positions =
      hasLearnedPositions(model) ? double(model.seq_len()) * h : 0;
  double finalNorm = normParameters(model, h);
  // BLOOM's norm of the embeddings, as the final one.
  double embeddingNorm = model.embedding_norm() ? finalNorm : 0;
  return embedding + positions + output + finalNorm + embeddingNorm +
         model.layers() * layerParameterCount(model);
}

double planner::modelFlopsPerStep(const plan::ModelSpec &model,
                                  int64_t globalBatch, int64_t seqLen) {
  double h = model.hidden();
  auto [qkvWidth, valueWidth] = attentionWidths(model);
  double gemmParams = h * qkvWidth + valueWidth * h +
                      (isGelu(model) ? 2 : 3) * h * model.ffn_hidden();
  // What the scores (Q Kᵀ) and the values (P V) multiply per key, which is
  // h each where the heads are hidden / heads wide.
  double attentionWidth =
      0.5 * model.heads() * double(headDim(model) + valueHeadDim(model));
  double tokens = double(globalBatch) * seqLen;
  // Megatron's count of attention, 12 s h per token and layer (every query
  // against every key; h is the heads' mean width of keys and values,
  // heads x d where they are hidden / heads wide); with a sliding window,
  // against the window's keys, on the layers that have it.
  auto keys = [&](int64_t window) {
    return window > 0 ? double(std::min(seqLen, window)) : double(seqLen);
  };
  double windowed = double(std::min(model.windowed_layers(), model.layers()));
  double attention =
      model.mixed_sliding_window() > 0
          ? windowed * keys(model.mixed_sliding_window()) +
                (double(model.layers()) - windowed) * keys(0)
          : double(model.layers()) * keys(model.sliding_window());
  double perToken = model.layers() * 6 * gemmParams +
                    12.0 * attention * attentionWidth + 6.0 * model.vocab() * h;
  return tokens * perToken;
}

//===----------------------------------------------------------------------===//
// Reading a spec out of an imported module
//===----------------------------------------------------------------------===//

llvm::Expected<plan::ModelSpec>
planner::extractModelSpec(ModuleOp module, llvm::StringRef source) {
  // A model without a single weight is most likely an export whose
  // parameters are graph inputs (torch.onnx.export(..., export_params=False)):
  // linears and embeddings are raised from weights only.
  bool weightless = true;
  module.walk([&](ParameterOp) {
    weightless = false;
    return WalkResult::interrupt();
  });
  auto fail = [&](const llvm::Twine &why) {
    std::string hint =
        weightless ? "; the model has no weights: if its parameters are graph "
                     "inputs (torch.onnx.export(..., export_params=False)), "
                     "export them (export_params=True, with external data "
                     "for a large model; weft plan reads no weight bytes)"
                   : "";
    return llvm::createStringError(
        source.str() + ": " + why.str() + hint +
        "; the planner needs a transformer: repeated blocks (weft.layer, from "
        "-weft-mark-layers) with attention and an MLP, or a built-in model "
        "(--model)");
  };
  func::FuncOp entry;
  module.walk([&](func::FuncOp func) {
    if (!entry)
      entry = func;
  });
  if (!entry)
    return fail("no function");
  llvm::StringMap<SmallVector<LayerOp>> byKind;
  for (LayerOp layer : entry.getBody().getOps<LayerOp>())
    byKind[layer.getKind()].push_back(layer);
  if (byKind.empty())
    return fail("no weft.layer blocks were found");
  SmallVector<LayerOp> *layers = nullptr;
  for (auto &entry : byKind)
    if (!layers || entry.second.size() > layers->size())
      layers = &entry.second;
  LayerOp first = layers->front();

  plan::ModelSpec spec;
  spec.set_name(llvm::sys::path::stem(source).str());
  spec.set_source(source.str());
  spec.set_layers(layers->size());
  auto input = dyn_cast<RankedTensorType>(first->getOperand(0).getType());
  if (!input || input.getRank() < 2)
    return fail("the first layer's input is not a [batch, seq, hidden] tensor");
  int64_t hidden = input.getShape().back();
  spec.set_hidden(hidden);

  AttentionOp attention;
  first.getBody().walk([&](AttentionOp op) {
    if (!attention)
      attention = op;
  });
  if (!attention)
    return fail("layer '" + first.getKind() +
                "' has no weft.attention (the import did not recognize its "
                "attention, such as one whose scores pass through a function "
                "other than a scale, a soft cap or a mask: `weft import "
                "--explain-raise MODEL` names the op that stopped the match)");
  auto q = cast<RankedTensorType>(attention.getQ().getType());
  auto k = cast<RankedTensorType>(attention.getK().getType());
  spec.set_heads(q.getDimSize(1));
  spec.set_kv_heads(k.getDimSize(1));
  spec.set_seq_len(q.getDimSize(2));
  // A sliding window that every layer has (Mistral) is the model's; where
  // layers differ (Gemma 2 alternates local and global ones), the number of
  // layers whose attention has it (the planner costs a layer of each kind).
  std::optional<uint64_t> window = attention.getWindow();
  bool same = true;
  for (LayerOp layer : *layers)
    layer.getBody().walk([&](AttentionOp op) {
      if (op.getWindow() != window)
        same = false;
      if (!window)
        window = op.getWindow();
    });
  if (window && same) {
    spec.set_sliding_window(int64_t(*window));
  } else if (window) {
    spec.set_mixed_sliding_window(int64_t(*window));
    int64_t windowed = 0;
    for (LayerOp layer : *layers) {
      bool has = false;
      layer.getBody().walk(
          [&](AttentionOp op) { has |= op.getWindow() == window; });
      windowed += has;
    }
    spec.set_windowed_layers(windowed);
  }
  int64_t headDim = q.getDimSize(3);
  if (spec.heads() * headDim != hidden)
    spec.set_head_dim(headDim);
  if (int64_t valueDim =
          cast<RankedTensorType>(attention.getV().getType()).getDimSize(3);
      valueDim != headDim)
    spec.set_value_head_dim(valueDim);
  for (LayerOp layer : *layers)
    layer.getBody().walk([&](AttentionOp op) {
      if (spec.attention_softcap() == 0)
        spec.set_attention_softcap(softcapOrZero(op.getSoftcap()));
    });
  // The MLP: its activation (GELU, SiLU, ReLU) of a projection, or of a
  // slice of one (a fused gate/up projection, Phi-3's gate_up_proj), whose
  // width is the MLP's. It is gated (SwiGLU, GeGLU: three matrices) when the
  // activation is multiplied by another projection; otherwise it has two
  // matrices, whatever its activation (GPT-2's GELU, OPT's ReLU).
  auto projection = [](Value value) {
    while (auto slice = value.getDefiningOp<SliceOp>())
      value = slice->getOperand(0);
    return value.getDefiningOp<LinearOp>();
  };
  int64_t ffn = 0;
  plan::FfnKind kind = plan::FFN_GELU;
  Operation *activation = nullptr;
  first.getBody().walk([&](Operation *op) {
    if (ffn || !isa<GeluOp, SiluOp, ReluOp>(op) ||
        !projection(op->getOperand(0)))
      return;
    activation = op;
    ffn = cast<RankedTensorType>(op->getResult(0).getType()).getShape().back();
    for (Operation *user : op->getResult(0).getUsers()) {
      if (!isa<MulOp>(user))
        continue;
      Value other = user->getOperand(user->getOperand(0) == op->getResult(0));
      if (projection(other))
        kind = isa<SiluOp>(op) ? plan::FFN_SWIGLU : plan::FFN_GEGLU;
    }
  });
  spec.set_ffn_kind(kind);
  // A parallel block (GPT-J, GPT-NeoX): the MLP's first projection reads a
  // norm of the layer's input itself, not of the residual after attention.
  if (activation)
    if (LinearOp up = projection(activation->getOperand(0))) {
      Operation *normed = up->getOperand(0).getDefiningOp();
      if (normed && isa<LayerNormOp, RMSNormOp>(normed) &&
          normed->getOperand(0) == first.getBody().getArgument(0))
        spec.set_parallel_block(true);
    }
  if (kind == plan::FFN_GELU && activation && !isa<GeluOp>(activation)) {
    // A ReLU squared (its product with itself): Nemotron's.
    const bool squared =
        llvm::any_of(activation->getUsers(), [&](Operation *u) {
          return isa<MulOp>(u) &&
                 u->getOperand(0) == activation->getResult(0) &&
                 u->getOperand(1) == activation->getResult(0);
        });
    spec.set_ffn_activation(!isa<ReluOp>(activation) ? "SiLU"
                            : squared                ? kSquaredRelu
                                                     : "ReLU");
  }
  llvm::SmallDenseSet<int64_t> attentionWidths = {
      hidden, spec.heads() * headDim, spec.kv_heads() * headDim,
      (spec.heads() + 2 * spec.kv_heads()) * headDim};
  first.getBody().walk([&](LinearOp linear) {
    int64_t width = linear.getType().getShape().back();
    if (!ffn && !attentionWidths.contains(width))
      ffn = width;
  });
  if (!ffn)
    return fail("layer '" + first.getKind() +
                "' has no MLP projection wider or narrower than the hidden "
                "size");
  spec.set_ffn_hidden(ffn);

  // Vocabulary: the embedding of a weight whose indices come from the
  // function's input (not a constant table, such as rotary caches gathered
  // at the positions).
  EmbeddingOp tokens;
  entry.walk([&](EmbeddingOp op) {
    if (!tokens && isa<BlockArgument>(op.getIndices()) &&
        op.getTable().getDefiningOp<ParameterOp>())
      tokens = op;
  });
  // A model that reads features, not token ids (a vision transformer's
  // pixels, through its patch embedding), has no vocabulary: vocab 0. One
  // that reads integers and embeds none is a token model whose embedding
  // the import did not find.
  bool readsFeatures = entry.getNumArguments() > 0;
  for (Type type : entry.getArgumentTypes())
    if (auto ranked = dyn_cast<RankedTensorType>(type);
        !ranked || !isa<FloatType>(ranked.getElementType()))
      readsFeatures = false;
  if (!tokens && !readsFeatures)
    return fail("no token embedding (weft.embedding of a function input)");
  if (tokens) {
    auto table = cast<RankedTensorType>(tokens.getTable().getType());
    spec.set_vocab(table.getDimSize(0));
    // Tied when the output projection reads the embedding table.
    bool tied = false;
    for (Operation *user : tokens.getTable().getUsers())
      if (isa<LinearOp, MatmulOp>(user))
        tied = true;
    spec.set_tied_embeddings(tied);
  }
  int64_t parameters = 0;
  module.walk([&](ParameterOp op) {
    if (auto type = dyn_cast<RankedTensorType>(op.getType()))
      parameters += type.getNumElements();
  });
  spec.set_parameters(parameters);
  if (llvm::Error error = validateModel(spec))
    return error;
  return spec;
}

//===----------------------------------------------------------------------===//
// The model as IR
//===----------------------------------------------------------------------===//

double planner::rotaryFrequency(const plan::ModelSpec &model, int64_t i,
                                int64_t rotated, int64_t seq) {
  double base = model.rope_theta();
  const plan::RopeScaling &rope = model.rope_scaling();
  const double factor = rope.factor() > 0 ? rope.factor() : 1.0;
  const double exponent = double(2 * i) / double(rotated);
  // _compute_dynamic_ntk_parameters: past the context, the base raised by
  // (factor seq / context - (factor - 1))^(rotated / (rotated - 2)).
  if (rope.type() == "dynamic" && rotated > 2 && rope.original_context() > 0 &&
      seq > rope.original_context())
    base *= std::pow(factor * double(seq) / double(rope.original_context()) -
                         (factor - 1),
                     double(rotated) / double(rotated - 2));
  const double plain = 1.0 / std::pow(base, exponent);
  if (rope.type() == "linear")
    return plain / factor;
  // _compute_longrope_parameters: each frequency divided by its factor, the
  // long ones for a sequence beyond the trained context.
  if (rope.type() == "longrope") {
    const auto &divisors = seq > rope.original_context() ? rope.long_factor()
                                                         : rope.short_factor();
    // One factor for all of them, as torch broadcasts a list of one.
    const int64_t at = divisors.size() == 1 ? 0 : i;
    return at < divisors.size() && divisors[at] > 0 ? plain / divisors[at]
                                                    : plain;
  }
  if (rope.type() == "llama3") {
    // transformers' _compute_llama3_parameters: wavelengths longer than the
    // trained context over low_freq_factor are interpolated (divided by
    // factor), shorter than over high_freq_factor kept, blended between.
    const double context = double(rope.original_context());
    const double wavelength = 2 * M_PI / plain;
    const double lowWavelength = context / rope.low_freq_factor();
    const double highWavelength = context / rope.high_freq_factor();
    if (wavelength > lowWavelength)
      return plain / factor;
    if (wavelength < highWavelength)
      return plain;
    const double smooth = (context / wavelength - rope.low_freq_factor()) /
                          (rope.high_freq_factor() - rope.low_freq_factor());
    return (1 - smooth) * plain / factor + smooth * plain;
  }
  if (rope.type() == "yarn") {
    // _compute_yarn_parameters: a linear ramp, over the dimensions between
    // those that turn beta_fast and beta_slow times in the trained context,
    // from extrapolated (plain) to interpolated (plain / factor)
    // frequencies.
    const double dim = double(rotated);
    const double context = double(rope.original_context());
    auto correction = [&](double rotations) {
      return dim * std::log(context / (rotations * 2 * M_PI)) /
             (2 * std::log(base));
    };
    double low = correction(rope.beta_fast()),
           high = correction(rope.beta_slow());
    if (!rope.no_truncate()) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high)
      high += 0.001;
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;
    return plain / factor * (1 - extrapolation) + plain * extrapolation;
  }
  return plain;
}

double planner::rotaryScale(const plan::ModelSpec &model) {
  const plan::RopeScaling &rope = model.rope_scaling();
  if (rope.type() != "yarn" && rope.type() != "longrope")
    return 1.0;
  if (rope.attention_factor() > 0)
    return rope.attention_factor();
  if (rope.factor() <= 1)
    return 1.0;
  if (rope.type() == "longrope")
    return rope.original_context() > 1
               ? std::sqrt(1 + std::log(rope.factor()) /
                                   std::log(double(rope.original_context())))
               : 1.0;
  return 0.1 * std::log(rope.factor()) + 1.0;
}

bool planner::ropeScalingBuilt(const plan::ModelSpec &model) {
  const std::string &type = model.rope_scaling().type();
  return llvm::is_contained(
      {"", "linear", "llama3", "yarn", "longrope", "dynamic"},
      llvm::StringRef(type));
}

namespace {
/// Builds the global (unpartitioned) ops of a transformer in f32.
class TransformerBuilder {
public:
  TransformerBuilder(OpBuilder &builder, const plan::ModelSpec &model)
      : b(builder), loc(builder.getUnknownLoc()), model(model) {}

  RankedTensorType type(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape, element ? element : b.getF32Type());
  }
  /// A rank-0 f32 constant, broadcast by the elementwise op that reads it.
  Value scalar(float value) {
    auto scalarType = type({});
    return ConstantOp::create(b, loc, scalarType,
                              DenseElementsAttr::get(scalarType, value));
  }
  Value param(const llvm::Twine &name, ArrayRef<int64_t> shape) {
    return ParameterOp::create(b, loc, type(shape), b.getStringAttr(name),
                               ElementsAttr(), ExternalDataAttr());
  }
  Value linear(Value x, int64_t out, const llvm::Twine &name, bool bias) {
    auto in = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(in.getShape());
    int64_t inner = shape.back();
    shape.back() = out;
    Value w = param(name + ".weight", {inner, out});
    Value biasValue = bias ? param(name + ".bias", {out}) : Value();
    return LinearOp::create(b, loc, type(shape), x, w, biasValue, UnitAttr());
  }
  /// The model's norm over the last dimension: RMSNorm, or LayerNorm with
  /// a scale and a bias, a scale alone (Cohere's, MPT's), or neither
  /// (OLMo's non-parametric one: a scale of ones, a constant).
  Value norm(Value x, const llvm::Twine &name,
             plan::NormKind kind = plan::NORM_DEFAULT) {
    auto in = cast<RankedTensorType>(x.getType());
    int64_t h = in.getShape().back();
    llvm::APFloat epsilon(model.norm_epsilon() > 0 ? float(model.norm_epsilon())
                                                   : 1e-5f);
    if (kind == plan::NORM_DEFAULT)
      kind = normKind(model);
    if (kind == plan::NORM_RMS)
      return RMSNormOp::create(b, loc, in, x, param(name + ".weight", {h}),
                               in.getRank() - 1, epsilon);
    Value scale;
    if (kind == plan::NORM_LAYER_NO_AFFINE) {
      auto onesType = type({h});
      scale = ConstantOp::create(b, loc, onesType,
                                 DenseElementsAttr::get(onesType, 1.0f));
    } else {
      scale = param(name + ".weight", {h});
    }
    Value bias =
        kind == plan::NORM_LAYER ? param(name + ".bias", {h}) : Value();
    return LayerNormOp::create(b, loc, in, x, scale, bias, in.getRank() - 1,
                               epsilon);
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return ReshapeOp::create(b, loc, type(shape), x);
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    auto in = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(in.getDimSize(p));
    return TransposeOp::create(b, loc, type(shape), x,
                               b.getDenseI64ArrayAttr(perm));
  }
  Value dropout(Value x, std::optional<double> ratio) {
    if (!ratio)
      return x;
    return DropoutOp::create(b, loc, x, llvm::APFloat(*ratio));
  }
  bool gelu() const { return model.ffn_kind() == plan::FFN_GELU; }

  /// The rotary tables of `seq` positions, cos and sin as [1, 1, seq,
  /// rotated], computed in the forward pass as Hugging Face's
  /// LlamaRotaryEmbedding does since transformers 4.38: the positions
  /// times the inverse frequencies base^(-2i / rotated), each frequency
  /// twice (the halves of a head turn by the same angles; with
  /// rotary_interleaved, each pair of adjacent features, as GPT-J's
  /// duplicate_interleave has them).
  std::pair<Value, Value> rotaryTables(int64_t seq, int64_t rotated,
                                       bool local) {
    std::vector<float> inverse(rotated);
    for (int64_t i = 0; i < rotated / 2; ++i) {
      // Gemma 3's local (windowed) layers turn at their own base, unscaled.
      float frequency =
          local ? float(1.0 / std::pow(model.rope_local_theta(),
                                       double(2 * i) / double(rotated)))
                : float(rotaryFrequency(model, i, rotated, seq));
      if (model.rotary_interleaved())
        inverse[2 * i] = inverse[2 * i + 1] = frequency;
      else
        inverse[i] = inverse[i + rotated / 2] = frequency;
    }
    auto frequencyType = type({1, 1, 1, rotated});
    Value frequencies = ConstantOp::create(
        b, loc, frequencyType,
        DenseElementsAttr::get(frequencyType, llvm::ArrayRef<float>(inverse)));
    Value positions =
        IotaOp::create(b, loc, type({1, 1, seq, 1}), b.getI64IntegerAttr(2));
    Value angles = MulOp::create(b, loc, type({1, 1, seq, rotated}), positions,
                                 frequencies);
    Value cos = CosOp::create(b, loc, angles),
          sin = SinOp::create(b, loc, angles);
    // YaRN and LongRoPE scale cos and sin by their attention factor.
    if (double scale = local ? 1.0 : rotaryScale(model); scale != 1.0) {
      cos = MulOp::create(b, loc, cos, scalar(float(scale)));
      sin = MulOp::create(b, loc, sin, scalar(float(scale)));
    }
    return {cos, sin};
  }
  /// Features start, start + step, ... before limit of the last dimension.
  Value slice(Value x, int64_t start, int64_t limit, int64_t step = 1) {
    auto in = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> starts(in.getRank(), 0), limits(in.getShape());
    starts.back() = start;
    limits.back() = limit;
    SmallVector<int64_t> shape(in.getShape());
    shape.back() = (limit - start + step - 1) / step;
    DenseI64ArrayAttr strides;
    if (step != 1) {
      SmallVector<int64_t> all(in.getRank(), 1);
      all.back() = step;
      strides = b.getDenseI64ArrayAttr(all);
    }
    return SliceOp::create(b, loc, type(shape), x,
                           b.getDenseI64ArrayAttr(starts),
                           b.getDenseI64ArrayAttr(limits), strides);
  }
  Value concat(ValueRange parts) {
    auto first = cast<RankedTensorType>(parts.front().getType());
    SmallVector<int64_t> shape(first.getShape());
    shape.back() = 0;
    for (Value part : parts)
      shape.back() += cast<RankedTensorType>(part.getType()).getShape().back();
    return ConcatOp::create(b, loc, type(shape), parts,
                            b.getI64IntegerAttr(first.getRank() - 1));
  }
  /// `x` ([batch, heads, seq, head_dim]) with its first `rotated` features
  /// turned by the tables as halves (LLaMA's and GPT-NeoX's rotate_half),
  /// the rest passed through: the form exporters write, which every plan
  /// splits like the heads and the positions.
  Value rotate(Value x, Value cos, Value sin, int64_t rotated) {
    auto in = cast<RankedTensorType>(x.getType());
    const int64_t d = in.getShape().back();
    Value part = rotated < d ? slice(x, 0, rotated) : x;
    Value turned;
    if (model.rotary_interleaved()) {
      // GPT-J's rotate_every_two: (-x1, x0, -x3, x2, ...), each odd
      // feature negated before the even one it pairs with.
      auto pairs = cast<RankedTensorType>(part.getType()).getShape();
      SmallVector<int64_t> column(pairs.drop_back());
      column.append({rotated / 2, 1});
      SmallVector<int64_t> shape(pairs);
      Value odd =
          reshape(NegOp::create(b, loc, slice(part, 1, rotated, 2)), column);
      Value even = reshape(slice(part, 0, rotated, 2), column);
      SmallVector<int64_t> stacked(column);
      stacked.back() = 2;
      turned = reshape(
          ConcatOp::create(b, loc, type(stacked), ValueRange{odd, even},
                           b.getI64IntegerAttr(int64_t(column.size()) - 1)),
          shape);
    } else {
      turned = concat({NegOp::create(b, loc, slice(part, rotated / 2, rotated)),
                       slice(part, 0, rotated / 2)});
    }
    Value out =
        AddOp::create(b, loc, MulOp::create(b, loc, part.getType(), part, cos),
                      MulOp::create(b, loc, part.getType(), turned, sin));
    return rotated < d ? concat({out, slice(x, rotated, d)}) : out;
  }

  /// One transformer block on [batch, seq, hidden], in the body of a
  /// weft.layer: pre-norm attention and MLP with residuals, as GPT-2/3
  /// (LayerNorm, GELU, biases) or LLaMA (RMSNorm, SwiGLU) write it.
  Value block(Value x, int64_t index, std::optional<double> dropoutRatio);

  OpBuilder &b;
  Location loc;
  const plan::ModelSpec &model;
};
} // namespace

Value TransformerBuilder::block(Value x, int64_t index,
                                std::optional<double> dropoutRatio) {
  auto in = cast<RankedTensorType>(x.getType());
  const int64_t batch = in.getDimSize(0), seq = in.getDimSize(1);
  const int64_t h = model.hidden(), heads = model.heads(),
                kvHeads = model.kv_heads(), d = headDim(model);
  const int64_t group = heads / kvHeads;
  std::string prefix = "layers." + std::to_string(index);
  // GPT-J's attention projections have no biases where its MLP's have.
  const bool attentionBiases =
      hasLinearBiases(model) && !model.no_attention_bias();
  // The window, or none on a global layer among windowed ones.
  const int64_t window = layerWindow(model, index);
  // Q, K and V from one GEMM whose columns are grouped by KV head
  // ([kv_heads, group + 2, head_dim], Megatron's layout): splitting the
  // columns over tensor-parallel ranks gives each rank whole heads.
  // OLMo 2 norms the branches' outputs alone: each reads the stream as is.
  Value normed = model.post_norms() ? x : norm(x, prefix + ".attn_norm");
  Value qkv = linear(normed, kvHeads * (group + 2) * d, prefix + ".qkv",
                     attentionBiases || model.qkv_bias());
  // OLMo's and MPT's clip_qkv.
  if (model.qkv_clip() > 0) {
    qkv = MaximumOp::create(b, loc, qkv, scalar(-model.qkv_clip()));
    qkv = MinimumOp::create(b, loc, qkv, scalar(model.qkv_clip()));
  }
  Value grouped = reshape(qkv, {batch, seq, kvHeads, group + 2, d});
  auto split = SplitOp::create(b, loc,
                               TypeRange{type({batch, seq, kvHeads, group, d}),
                                         type({batch, seq, kvHeads, 1, d}),
                                         type({batch, seq, kvHeads, 1, d})},
                               grouped, b.getI64IntegerAttr(3),
                               b.getDenseI64ArrayAttr({group, 1, 1}));
  Value qHeads = reshape(split.getResult(0), {batch, seq, heads, d});
  Value kHeads = reshape(split.getResult(1), {batch, seq, kvHeads, d});
  // OLMo 2's QK norm: the queries (and the keys) of every head normed
  // together, over the projection's width, before they turn. Under tensor
  // parallelism that width is split: the norm all-reduces its statistics.
  const plan::QkNormLayout qkLayout = model.qk_norm_layout();
  if (model.qk_norm() && qkLayout == plan::QK_NORM_WHOLE) {
    qHeads = reshape(
        norm(reshape(qHeads, {batch, seq, heads * d}), prefix + ".q_norm"),
        {batch, seq, heads, d});
    kHeads = reshape(
        norm(reshape(kHeads, {batch, seq, kvHeads * d}), prefix + ".k_norm"),
        {batch, seq, kvHeads, d});
  }
  Value q = transpose(qHeads, {0, 2, 1, 3});
  Value k = transpose(kHeads, {0, 2, 1, 3});
  Value v = transpose(reshape(split.getResult(2), {batch, seq, kvHeads, d}),
                      {0, 2, 1, 3});
  // Qwen3's and Gemma 3's QK norm: each head's query and key normed before
  // they turn, with one weight of head_dim; Cohere's and StableLM's with a
  // weight per head (a LayerNorm without one, times the heads' weights).
  if (model.qk_norm() && qkLayout == plan::QK_NORM_SHARED) {
    q = norm(q, prefix + ".q_norm");
    k = norm(k, prefix + ".k_norm");
  } else if (model.qk_norm() && qkLayout == plan::QK_NORM_PER_HEAD) {
    auto perHead = [&](Value x, int64_t n, const std::string &name) {
      Value normed = norm(x, name, plan::NORM_LAYER_NO_AFFINE);
      return Value(MulOp::create(b, loc, x.getType(), normed,
                                 param(name + ".weight", {n, 1, d})));
    };
    q = perHead(q, heads, prefix + ".q_norm");
    k = perHead(k, kvHeads, prefix + ".k_norm");
  }
  // Positions as LLaMA's (and GPT-NeoX's, on part of each head) rotary
  // embedding gives them to queries and keys; none on SmolLM3's NoPE
  // layers.
  if (int64_t rotated = planner::rotatedFeatures(model);
      rotated && !llvm::is_contained(model.nope_layers(), index)) {
    auto [cos, sin] =
        rotaryTables(seq, rotated, window > 0 && model.rope_local_theta() > 0);
    q = rotate(q, cos, sin, rotated);
    k = rotate(k, cos, sin, rotated);
  }
  // BLOOM's and MPT's positions: ALiBi's biases on the scores, one slope
  // per head (split with the heads), in the attention as FlashAttention's
  // alibi_slopes.
  Value slopes;
  if (model.alibi()) {
    std::vector<float> values = alibiSlopes(heads);
    auto slopesType = type({heads});
    slopes = ConstantOp::create(
        b, loc, slopesType,
        DenseElementsAttr::get(slopesType, llvm::ArrayRef<float>(values)));
  }
  FloatAttr attentionDropout =
      dropoutRatio ? b.getF64FloatAttr(*dropoutRatio) : FloatAttr();
  Value attended = AttentionOp::create(
      b, loc, type({batch, heads, seq, d}), q, k, v, Value(), slopes,
      b.getF32FloatAttr(model.attention_scale() > 0
                            ? model.attention_scale()
                            : 1.0f / std::sqrt(float(d))),
      b.getUnitAttr(), attentionDropout,
      model.attention_softcap() > 0
          ? b.getF32FloatAttr(model.attention_softcap())
          : FloatAttr(),
      window > 0 ? b.getI64IntegerAttr(window) : IntegerAttr());
  Value merged =
      reshape(transpose(attended, {0, 2, 1, 3}), {batch, seq, heads * d});
  Value projected = linear(merged, h, prefix + ".attn_out",
                           attentionBiases || model.attention_output_bias());
  // Gemma 2 and 3 norm each branch's output too, before the residual adds;
  // OLMo 2 only there.
  if (model.sandwich_norms() || model.post_norms())
    projected = norm(projected, prefix + ".attn_post_norm");
  // Granite scales each branch before the residual adds it.
  if (model.residual_scale() > 0)
    projected =
        MulOp::create(b, loc, projected, scalar(model.residual_scale()));
  // A parallel block's MLP reads the layer's input too, and both add to
  // the residual at the end (GPT-J, GPT-NeoX, Falcon).
  Value residual = AddOp::create(b, loc, x, dropout(projected, dropoutRatio));
  // A parallel block's MLP reads the layer's input, normed by its own norm
  // (GPT-NeoX's) or by the attention's (GPT-J's, Falcon-7B's, Cohere's).
  Value normed2 =
      model.parallel_block() && model.one_block_norm() ? normed
      : model.post_norms()
          ? (model.parallel_block() ? x : residual)
          : norm(model.parallel_block() ? x : residual, prefix + ".mlp_norm");
  int64_t ffn = model.ffn_hidden();
  Value activated;
  if (gelu()) {
    Value up = linear(normed2, ffn, prefix + ".mlp_up",
                      hasLinearBiases(model) || model.mlp_bias());
    // OPT's ReLU between the two matrices, as the spec names it;
    // Nemotron's squared.
    if (model.ffn_activation() == "ReLU" ||
        model.ffn_activation() == kSquaredRelu) {
      activated = ReluOp::create(b, loc, up);
      if (model.ffn_activation() == kSquaredRelu)
        activated = MulOp::create(b, loc, activated, activated);
    } else if (model.ffn_activation() == "SiLU") {
      activated = SiluOp::create(b, loc, up);
    } else {
      activated = GeluOp::create(
          b, loc, up,
          GeluApproximationAttr::get(b.getContext(),
                                     model.ffn_activation() == kExactGelu
                                         ? GeluApproximation::erf
                                         : GeluApproximation::tanh));
    }
  } else {
    Value gate = linear(normed2, ffn, prefix + ".mlp_gate", model.mlp_bias());
    Value up = linear(normed2, ffn, prefix + ".mlp_up", model.mlp_bias());
    Value act = model.ffn_kind() == plan::FFN_GEGLU
                    ? Value(GeluOp::create(
                          b, loc, gate,
                          GeluApproximationAttr::get(b.getContext(),
                                                     GeluApproximation::tanh)))
                    : Value(SiluOp::create(b, loc, gate));
    activated = MulOp::create(b, loc, act, up);
  }
  Value down = linear(activated, h, prefix + ".mlp_down",
                      hasLinearBiases(model) || model.mlp_bias());
  if (model.sandwich_norms() || model.post_norms())
    down = norm(down, prefix + ".mlp_post_norm");
  if (model.residual_scale() > 0)
    down = MulOp::create(b, loc, down, scalar(model.residual_scale()));
  return AddOp::create(b, loc, residual, dropout(down, dropoutRatio));
}

OwningOpRef<ModuleOp> planner::buildTransformer(MLIRContext &context,
                                                const plan::ModelSpec &model,
                                                const TransformerShape &shape) {
  context.loadDialect<WeftDialect, func::FuncDialect>();
  OpBuilder builder(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(module->getBody());
  TransformerBuilder tb(builder, model);
  const int64_t batch = shape.batch, seq = shape.seq, h = model.hidden(),
                vocab = model.vocab();
  auto tokens = RankedTensorType::get({batch, seq}, builder.getI64Type());
  auto logitsType = tb.type({batch, seq, vocab});
  auto func = func::FuncOp::create(
      builder, tb.loc, "main", builder.getFunctionType({tokens}, {logitsType}));
  builder.setInsertionPointToStart(func.addEntryBlock());
  Value table = tb.param("embedding.weight", {vocab, h});
  Value x = EmbeddingOp::create(builder, tb.loc, tb.type({batch, seq, h}),
                                table, func.getArgument(0));
  // Learned absolute positions (GPT-2's and GPT-3's wpe, Megatron-LM's
  // learned_absolute, OPT's) where the model has neither a rotary embedding
  // nor ALiBi: a table of the model's context, read at 0 .. seq - 1 and
  // added to the tokens' embeddings.
  if (hasLearnedPositions(model)) {
    Value positions = tb.param("position_embedding.weight",
                               {std::max(model.seq_len(), seq), h});
    Value ids = IotaOp::create(
        builder, tb.loc, RankedTensorType::get({1, seq}, builder.getI64Type()),
        builder.getI64IntegerAttr(1));
    Value embedded = EmbeddingOp::create(builder, tb.loc, tb.type({1, seq, h}),
                                         positions, ids);
    x = AddOp::create(builder, tb.loc, tb.type({batch, seq, h}), x, embedded);
  }
  // Gemma's normalizer, the embeddings times sqrt(hidden); Granite's
  // embedding_multiplier.
  if (model.embedding_scale() > 0)
    x = MulOp::create(builder, tb.loc, x, tb.scalar(model.embedding_scale()));
  // BLOOM's word_embeddings_layernorm.
  if (model.embedding_norm())
    x = tb.norm(x, "embedding_norm");
  int64_t layers = shape.layers > 0 ? shape.layers : model.layers();
  for (int64_t i = 0; i < layers; ++i) {
    auto layer = LayerOp::create(builder, tb.loc, "block", i, ValueRange{x},
                                 TypeRange{x.getType()});
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&layer.getBody().front());
    Value out =
        tb.block(layer.getBody().front().getArgument(0), i, shape.dropout);
    YieldOp::create(builder, tb.loc, out);
    x = layer.getResult(0);
  }
  Value normed = tb.norm(x, "final_norm");
  Value logits;
  // GPT-J's and Phi's lm_head has a bias.
  if (model.tied_embeddings())
    logits = LinearOp::create(
        builder, tb.loc, logitsType, normed, table,
        model.output_bias() ? tb.param("output.bias", {vocab}) : Value(),
        builder.getUnitAttr());
  else
    logits = tb.linear(normed, vocab, "output", model.output_bias());
  // Granite's logits_scaling divides the logits.
  if (float divisor = model.logit_divisor(); divisor > 0)
    logits = DivOp::create(builder, tb.loc, logits, tb.scalar(divisor));
  // Gemma 2's final soft-cap: cap * tanh(logits / cap).
  if (float cap = model.logit_softcap(); cap > 0)
    logits = MulOp::create(
        builder, tb.loc,
        TanhOp::create(builder, tb.loc, logitsType,
                       DivOp::create(builder, tb.loc, logits, tb.scalar(cap))),
        tb.scalar(cap));
  func::ReturnOp::create(builder, tb.loc, logits);
  return module;
}

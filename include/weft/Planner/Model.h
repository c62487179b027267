//===- Model.h - Transformer shapes for the planner -------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_MODEL_H
#define WEFT_PLANNER_MODEL_H

#include "weft/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace weft::planner {

/// Names of the built-in presets (gpt3-*, megatron-*, llama2-*, llama3-*,
/// mistral-*, gemma2-*, gemma3-*, qwen2.5-*).
std::vector<std::string> presetNames();

/// The preset `name`, or an error that lists the presets.
llvm::Expected<plan::ModelSpec> lookupPreset(llvm::StringRef name);

/// Checks a spec: positive sizes, heads divisible by KV heads, hidden by heads
/// (where the spec gives no head width of its own).
llvm::Error validateModel(const plan::ModelSpec &model);

/// Each head's query and key width: the spec's head_dim, or hidden / heads.
int64_t headDim(const plan::ModelSpec &model);
/// How many of each head's features the rotary embedding turns (0 without
/// one): all of them, or rotary_percent of them rounded down to an even
/// count (GPT-NeoX's rotary_ndims, Megatron-LM's rotary_dim).
int64_t rotatedFeatures(const plan::ModelSpec &model);
/// The sliding window of layer `index` (from 0): the model's window on
/// every layer, or on all but its global layers (every global_every-th,
/// counted from the first layer with global_first); 0 for full attention.
int64_t layerWindow(const plan::ModelSpec &model, int64_t index);
/// How many of `layers` layers are local where every `every`-th is global
/// (the first among them with `globalFirst`, else the every-th).
int64_t windowedLayerCount(int64_t layers, int64_t every, bool globalFirst);

/// Each head's value width: the spec's value_head_dim, or headDim.
int64_t valueHeadDim(const plan::ModelSpec &model);

/// Whether the built model has a learned position table (GPT's): a built
/// model without a rotary embedding or ALiBi. Its rows are the model's
/// context (seq_len).
bool hasLearnedPositions(const plan::ModelSpec &model);

/// The kind of the model's norms: its spec's, or its FFN kind's (LayerNorm
/// with a bias for GELU models, RMSNorm for gated ones).
plan::NormKind normKind(const plan::ModelSpec &model);

/// The rotary embedding's i-th inverse frequency (of `rotated` features
/// turned) in a sequence of `seq` positions, with the model's rope_scaling
/// applied (linear, llama3, yarn, longrope, dynamic; the last two depend
/// on whether `seq` is beyond the trained context, as transformers'
/// longrope_frequency_update and dynamic_frequency_update have it).
double rotaryFrequency(const plan::ModelSpec &model, int64_t i, int64_t rotated,
                       int64_t seq);
/// The factor cos and sin are scaled by (YaRN's and LongRoPE's attention
/// factor; else 1).
double rotaryScale(const plan::ModelSpec &model);
/// Whether the model's rope_scaling (if any) is one the builder builds.
bool ropeScalingBuilt(const plan::ModelSpec &model);

/// ModelSpec.ffn_activation of an ungated MLP whose GELU is the exact (erf)
/// one (transformers' "gelu": GPT-NeoX's, Falcon's, MPT's; Megatron-LM's
/// F.gelu); an empty one is tanh's approximation (GPT-2's gelu_new).
/// The most layers a model Weft plans may have (validateModel's bound; the
/// config reader refuses more before it lists anything per layer).
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr const char *kExactGelu = "GELU (erf)";
/// The ffn_activation of Nemotron's MLP, relu(x)^2 (transformers' relu2,
/// Megatron-LM's --squared-relu; So et al. 2021's Primer).
inline constexpr const char *kSquaredRelu = "squared ReLU";

/// Whether the model's linear layers have biases (GELU models', unless the
/// spec says none).
bool hasLinearBiases(const plan::ModelSpec &model);

/// ALiBi's slopes for `heads` heads (Press et al. 2022), as BLOOM's
/// build_alibi_tensor, MPT's gen_slopes and FlashAttention's tests compute
/// them: 2^(-8k/n) for k = 1 .. n with n the largest power of two not above
/// `heads`, then, where heads is no power of two, 2^(-4k/n) for the first
/// heads - n odd k.
std::vector<float> alibiSlopes(int64_t heads);

/// Parameters of the whole model (embedding and, where it has one, its
/// learned position table; layers, final norm, output layer).
double parameterCount(const plan::ModelSpec &model);

/// Parameters of one transformer layer.
double layerParameterCount(const plan::ModelSpec &model);

/// Model FLOPs of one training step (forward + backward, no recomputation),
/// Narayanan et al.'s count generalized to GQA, SwiGLU and heads of any
/// width: 6 FLOPs per parameter of the GEMMs per token, plus 6·s·heads·(d +
/// d_v) per token per layer for the attention's scores and values (12·s·h
/// where heads · d = h).
double modelFlopsPerStep(const plan::ModelSpec &model, int64_t globalBatch,
                         int64_t seqLen);

/// Reads the transformer shape out of an imported weft module: the number of
/// `weft.layer` blocks, the attention and linear shapes inside the first,
/// the embedding table and the output projection. Errors name what is
/// missing (e.g. a module without layer markers).
llvm::Expected<plan::ModelSpec> extractModelSpec(mlir::ModuleOp module,
                                                 llvm::StringRef source);

/// What the builder makes of a ModelSpec.
struct TransformerShape {
  int64_t batch = 1;
  int64_t seq = 1;
  /// Layers to build (0: the model's count).
  int64_t layers = 0;
  /// Dropout after attention, its output projection and the MLP, at this
  /// ratio, as Megatron-LM trains GPT (none when not given).
  std::optional<double> dropout;
};

/// The model as a module of the weft dialect, as an import would give it:
/// `func.func @main(tokens: [batch, seq] i64) -> logits [batch, seq, vocab]`
/// in f32, the embedding, each transformer block a `weft.layer "block"`, the
/// final norm and the output projection (the embedding table when tied).
/// Weights are shape-only parameters.
mlir::OwningOpRef<mlir::ModuleOp>
buildTransformer(mlir::MLIRContext &context, const plan::ModelSpec &model,
                 const TransformerShape &shape);

} // namespace weft::planner

#endif // WEFT_PLANNER_MODEL_H

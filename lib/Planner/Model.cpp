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

#include <cmath>

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
};
constexpr plan::FfnKind kGelu = plan::FFN_GELU;
constexpr plan::FfnKind kSwiglu = plan::FFN_SWIGLU;
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
};
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
    spec.set_source("preset");
    return spec;
  }
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
      model.kv_heads() <= 0 || model.ffn_hidden() <= 0 || model.vocab() <= 0)
    return fail("layers, hidden, heads, kv_heads, ffn_hidden and vocab must "
                "all be positive");
  if (model.hidden() % model.heads())
    return fail("hidden (" + llvm::Twine(model.hidden()) +
                ") is not a multiple of heads (" + llvm::Twine(model.heads()) +
                ")");
  if (model.heads() % model.kv_heads())
    return fail("heads (" + llvm::Twine(model.heads()) +
                ") is not a multiple of kv_heads (" +
                llvm::Twine(model.kv_heads()) + ")");
  if (model.layers() > 100000 || model.hidden() > (1 << 20) ||
      model.vocab() > (1 << 24))
    return fail("sizes beyond any model Weft plans for");
  return llvm::Error::success();
}

static bool isGelu(const plan::ModelSpec &model) {
  return model.ffn_kind() == plan::FFN_GELU;
}

double planner::layerParameterCount(const plan::ModelSpec &model) {
  double h = model.hidden(), d = double(model.hidden()) / model.heads();
  double qkv = h * (model.heads() + 2 * model.kv_heads()) * d;
  double out = model.heads() * d * h;
  double ffn = model.ffn_hidden();
  double mlp = isGelu(model) ? 2 * h * ffn : 3 * h * ffn;
  double extra = 0;
  if (isGelu(model)) // biases and two LayerNorms with bias
    extra = (model.heads() + 2 * model.kv_heads()) * d + h + ffn + h + 4 * h;
  else // two RMSNorms
    extra = 2 * h;
  return qkv + out + mlp + extra;
}

double planner::parameterCount(const plan::ModelSpec &model) {
  double h = model.hidden();
  double embedding = double(model.vocab()) * h;
  double output = model.tied_embeddings() ? 0 : embedding;
  double finalNorm = isGelu(model) ? 2 * h : h;
  return embedding + output + finalNorm +
         model.layers() * layerParameterCount(model);
}

double planner::modelFlopsPerStep(const plan::ModelSpec &model,
                                  int64_t globalBatch, int64_t seqLen) {
  double h = model.hidden(), d = h / model.heads();
  double gemmParams = h * (model.heads() + 2 * model.kv_heads()) * d +
                      model.heads() * d * h +
                      (isGelu(model) ? 2 : 3) * h * model.ffn_hidden();
  double tokens = double(globalBatch) * seqLen;
  double perToken = model.layers() * (6 * gemmParams + 12.0 * seqLen * h) +
                    6.0 * model.vocab() * h;
  return tokens * perToken;
}

//===----------------------------------------------------------------------===//
// Reading a spec out of an imported module
//===----------------------------------------------------------------------===//

llvm::Expected<plan::ModelSpec>
planner::extractModelSpec(ModuleOp module, llvm::StringRef source) {
  auto fail = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        source.str() + ": " + why.str() +
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
    return fail("layer '" + first.getKind() + "' has no weft.attention");
  auto q = cast<RankedTensorType>(attention.getQ().getType());
  auto k = cast<RankedTensorType>(attention.getK().getType());
  spec.set_heads(q.getDimSize(1));
  spec.set_kv_heads(k.getDimSize(1));
  spec.set_seq_len(q.getDimSize(2));
  int64_t headDim = q.getDimSize(3);
  bool swiglu = false;
  first.getBody().walk([&](SiluOp) { swiglu = true; });
  spec.set_ffn_kind(swiglu ? plan::FFN_SWIGLU : plan::FFN_GELU);
  int64_t ffn = 0;
  // The MLP's width: what its activation (GELU, SiLU) reads.
  first.getBody().walk([&](Operation *op) {
    if (ffn || !isa<GeluOp, SiluOp>(op))
      return;
    if (auto linear = op->getOperand(0).getDefiningOp<LinearOp>())
      ffn = linear.getType().getShape().back();
  });
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

  // Vocabulary: the embedding whose indices come from the function's input.
  EmbeddingOp tokens;
  entry.walk([&](EmbeddingOp op) {
    if (!tokens && isa<BlockArgument>(op.getIndices()))
      tokens = op;
  });
  if (!tokens)
    return fail("no token embedding (weft.embedding of a function input)");
  auto table = cast<RankedTensorType>(tokens.getTable().getType());
  spec.set_vocab(table.getDimSize(0));
  // Tied when the output projection reads the embedding table.
  bool tied = false;
  for (Operation *user : tokens.getTable().getUsers())
    if (isa<LinearOp, MatmulOp>(user))
      tied = true;
  spec.set_tied_embeddings(tied);
  if (llvm::Error error = validateModel(spec))
    return error;
  return spec;
}

//===----------------------------------------------------------------------===//
// One rank's program
//===----------------------------------------------------------------------===//

namespace {
/// Builds weft ops with the planner's local shapes.
class RankBuilder {
public:
  RankBuilder(OpBuilder &builder, Type elementType)
      : b(builder), loc(builder.getUnknownLoc()), elementType(elementType) {}

  RankedTensorType type(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape, element ? element : elementType);
  }
  Value param(llvm::StringRef name, ArrayRef<int64_t> shape) {
    return ParameterOp::create(b, loc, type(shape), b.getStringAttr(name),
                               ElementsAttr(), ExternalDataAttr());
  }
  Value linear(Value x, int64_t out, llvm::StringRef name, bool bias) {
    auto in = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(in.getShape());
    int64_t inner = shape.back();
    shape.back() = out;
    Value w = param(name, {inner, out});
    Value biasValue = bias ? param((name + ".bias").str(), {out}) : Value();
    return LinearOp::create(b, loc, type(shape), x, w, biasValue, UnitAttr());
  }
  Value norm(Value x, bool layerNorm, llvm::StringRef name) {
    auto in = cast<RankedTensorType>(x.getType());
    int64_t h = in.getShape().back();
    Value scale = param(name, {h});
    if (layerNorm)
      return LayerNormOp::create(b, loc, in, x, scale,
                                 param((name + ".bias").str(), {h}),
                                 in.getRank() - 1, llvm::APFloat(1e-5f));
    return RMSNormOp::create(b, loc, in, x, scale, in.getRank() - 1,
                             llvm::APFloat(1e-5f));
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
  Value dropout(Value x) {
    // Dropout multiplies by a saved mask (counted as a tensor of x's type).
    Value mask = param("dropout.mask", cast<RankedTensorType>(x.getType()).getShape());
    return MulOp::create(b, loc, x, mask);
  }
  Value collective(llvm::StringRef kind, Value x, llvm::StringRef axis,
                   int64_t groupSize, int64_t dim, int64_t concatDim = 0) {
    if (groupSize <= 1)
      return x;
    auto in = cast<RankedTensorType>(x.getType());
    auto mesh = FlatSymbolRefAttr::get(b.getContext(), "mesh");
    ArrayAttr axes = b.getStrArrayAttr({axis});
    SmallVector<int64_t> shape(in.getShape());
    if (kind == "all_reduce")
      return AllReduceOp::create(b, loc, in,
                                 ReductionKindAttr::get(b.getContext(),
                                                        ReductionKind::sum),
                                 x, mesh, axes);
    if (kind == "all_gather") {
      shape[dim] *= groupSize;
      return AllGatherOp::create(b, loc, type(shape), x, mesh, axes,
                                 b.getI64IntegerAttr(dim), UnitAttr());
    }
    if (kind == "reduce_scatter") {
      shape[dim] /= groupSize;
      return ReduceScatterOp::create(
          b, loc, type(shape),
          ReductionKindAttr::get(b.getContext(), ReductionKind::sum), x, mesh,
          axes, b.getI64IntegerAttr(dim));
    }
    if (kind == "all_to_all") {
      shape[dim] /= groupSize;
      shape[concatDim] *= groupSize;
      return AllToAllOp::create(b, loc, type(shape), x, mesh, axes,
                                b.getI64IntegerAttr(dim),
                                b.getI64IntegerAttr(concatDim));
    }
    // One step of the ring: every rank passes its block to the next.
    return CollectivePermuteOp::create(b, loc, in, x, mesh, axes,
                                       b.getI64IntegerAttr(1));
  }

  OpBuilder &b;
  Location loc;
  Type elementType;
};
} // namespace

OwningOpRef<ModuleOp> planner::buildRankProgram(MLIRContext &context,
                                                const plan::ModelSpec &model,
                                                const LayerShape &shape) {
  context.loadDialect<WeftDialect, func::FuncDialect>();
  OpBuilder builder(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(module->getBody());
  RankBuilder rb(builder, builder.getBF16Type());
  MeshOp::create(builder, rb.loc, "mesh",
                 builder.getStrArrayAttr({"tp", "ulysses", "cp"}),
                 ArrayRef<int64_t>{shape.tp, shape.ulysses, shape.cp});

  const int64_t b = shape.batch, h = model.hidden();
  const int64_t t = shape.tp, u = shape.ulysses, c = shape.cp;
  const int64_t d = h / model.heads();
  const int64_t seqRank = shape.seq / c;      // tokens of a rank's chunk
  const int64_t seqDense = seqRank / u;       // tokens outside attention
  const int64_t seqNorm = shape.sequenceParallel ? seqDense / t : seqDense;
  const int64_t heads = model.heads() / t;
  const int64_t kvHeads = std::max<int64_t>(1, model.kv_heads() / t);
  const bool gelu = model.ffn_kind() == plan::FFN_GELU;

  auto makeFunc = [&](llvm::StringRef name, ArrayRef<Type> inputs) {
    auto func = func::FuncOp::create(builder, rb.loc, name,
                                     builder.getFunctionType(inputs, {}));
    Block *entry = func.addEntryBlock();
    builder.setInsertionPointToStart(entry);
    return func;
  };
  auto finish = [&](func::FuncOp func, Value result) {
    func::ReturnOp::create(builder, rb.loc, result);
    func.setType(builder.getFunctionType(func.getArgumentTypes(),
                                         {result.getType()}));
    builder.setInsertionPointToEnd(module->getBody());
  };
  // Megatron's f and g: gather the sequence (SP) before a column-parallel
  // region, reduce (or reduce-scatter with SP) after a row-parallel one.
  auto enterTensorParallel = [&](Value x) {
    return shape.sequenceParallel ? rb.collective("all_gather", x, "tp", t, 1)
                                  : x;
  };
  auto leaveTensorParallel = [&](Value x) {
    return shape.sequenceParallel
               ? rb.collective("reduce_scatter", x, "tp", t, 1)
               : rb.collective("all_reduce", x, "tp", t, 0);
  };

  // @layer: one transformer block.
  {
    func::FuncOp func = makeFunc("layer", {rb.type({b, seqNorm, h})});
    Value x = func.getArgument(0);
    Value normed = rb.norm(x, gelu, "attn_norm");
    Value full = enterTensorParallel(normed);
    int64_t qkvWidth = (heads + 2 * kvHeads) * d;
    Value qkv = rb.linear(full, qkvWidth, "qkv", gelu);
    auto split = SplitOp::create(
        builder, rb.loc,
        TypeRange{rb.type({b, seqDense, heads * d}),
                  rb.type({b, seqDense, kvHeads * d}),
                  rb.type({b, seqDense, kvHeads * d})},
        qkv, builder.getI64IntegerAttr(2),
        builder.getDenseI64ArrayAttr({heads * d, kvHeads * d, kvHeads * d}));
    auto toHeads = [&](Value v, int64_t n) {
      Value r = rb.reshape(v, {b, seqDense, n, d});
      // Ulysses: sequence-split to head-split.
      r = rb.collective("all_to_all", r, "ulysses", u, 2, 1);
      return rb.transpose(r, {0, 2, 1, 3});
    };
    Value q = toHeads(split.getResult(0), heads);
    Value k = toHeads(split.getResult(1), kvHeads);
    Value v = toHeads(split.getResult(2), kvHeads);
    int64_t headsLocal = heads / u, kvLocal = std::max<int64_t>(1, kvHeads / u);
    Value attended;
    auto scale = builder.getF32FloatAttr(1.0f / std::sqrt(float(d)));
    if (c > 1) {
      // Ring attention: K and V blocks go around the ring; each step attends
      // to one block (the cost model multiplies a step by the ring size).
      Value kNext = rb.collective("permute", k, "cp", c, 2);
      Value vNext = rb.collective("permute", v, "cp", c, 2);
      (void)kNext;
      (void)vNext;
    }
    // Ring attention is blockwise with an online softmax, fused by nature.
    if (shape.flashAttention || c > 1) {
      attended = AttentionOp::create(
          builder, rb.loc, rb.type({b, headsLocal, seqRank, d}), q, k, v,
          Value(), scale,
          shape.causal && c == 1 ? builder.getUnitAttr() : UnitAttr(),
          FloatAttr());
    } else {
      // Megatron's unfused path: scores and probabilities in memory.
      Value kv = k, vv = v;
      if (kvLocal != headsLocal) {
        kv = BroadcastToOp::create(builder, rb.loc,
                                   rb.type({b, headsLocal, seqRank, d}), k);
        vv = BroadcastToOp::create(builder, rb.loc,
                                   rb.type({b, headsLocal, seqRank, d}), v);
      }
      Value scores = MatmulOp::create(
          builder, rb.loc, rb.type({b, headsLocal, seqRank, seqRank}), q, kv,
          UnitAttr(), builder.getUnitAttr());
      // The 1/sqrt(d) scale and the mask are fused into the softmax kernel
      // (Megatron's scaled_masked_softmax), so they add no pass.
      Value probs =
          SoftmaxOp::create(builder, rb.loc, scores, 3, llvm::APFloat(1.0f));
      if (shape.dropout)
        probs = rb.dropout(probs);
      attended = MatmulOp::create(builder, rb.loc,
                                  rb.type({b, headsLocal, seqRank, d}), probs,
                                  vv, UnitAttr(), UnitAttr());
    }
    Value back = rb.transpose(attended, {0, 2, 1, 3});
    back = rb.collective("all_to_all", back, "ulysses", u, 1, 2);
    back = rb.reshape(back, {b, seqDense, heads * d});
    Value projected = rb.linear(back, h, "attn_out", gelu);
    projected = leaveTensorParallel(projected);
    if (shape.dropout)
      projected = rb.dropout(projected);
    Value residual = AddOp::create(builder, rb.loc, x, projected);
    Value normed2 = rb.norm(residual, gelu, "mlp_norm");
    Value full2 = enterTensorParallel(normed2);
    int64_t ffn = model.ffn_hidden() / t;
    Value hiddenAct;
    if (gelu) {
      Value up = rb.linear(full2, ffn, "mlp_up", true);
      hiddenAct = GeluOp::create(builder, rb.loc, up,
                                 GeluApproximationAttr::get(
                                     &context, GeluApproximation::tanh));
    } else {
      Value gate = rb.linear(full2, ffn, "mlp_gate", false);
      Value up = rb.linear(full2, ffn, "mlp_up", false);
      hiddenAct = MulOp::create(builder, rb.loc,
                                SiluOp::create(builder, rb.loc, gate), up);
    }
    Value down = rb.linear(hiddenAct, h, "mlp_down", gelu);
    down = leaveTensorParallel(down);
    if (shape.dropout)
      down = rb.dropout(down);
    finish(func, AddOp::create(builder, rb.loc, residual, down));
  }

  // @embedding: vocabulary-parallel token embedding.
  {
    Type indexType = RankedTensorType::get({b, seqDense},
                                           builder.getI64Type());
    func::FuncOp func = makeFunc("embedding", {indexType});
    Value table = rb.param("embedding", {model.vocab() / t, h});
    Value rows = EmbeddingOp::create(builder, rb.loc, rb.type({b, seqDense, h}),
                                     table, func.getArgument(0));
    finish(func, leaveTensorParallel(rows));
  }

  // @head: final norm, vocabulary-parallel output layer, cross-entropy.
  {
    Type labelType = RankedTensorType::get({b, seqDense}, builder.getI64Type());
    func::FuncOp func =
        makeFunc("head", {rb.type({b, seqNorm, h}), labelType});
    Value normed = rb.norm(func.getArgument(0), gelu, "final_norm");
    Value full = enterTensorParallel(normed);
    Value logits = rb.linear(full, model.vocab() / t, "output", false);
    Value logits32 = CastOp::create(
        builder, rb.loc, rb.type({b, seqDense, model.vocab() / t},
                                 builder.getF32Type()),
        logits);
    Value labels = func.getArgument(1);
    // Vocabulary-parallel cross-entropy: max and sum of exp over the shards.
    Value loss = CrossEntropyOp::create(
        builder, rb.loc,
        RankedTensorType::get({b, seqDense}, builder.getF32Type()), logits32,
        labels, LossReductionAttr::get(&context, LossReduction::none),
        IntegerAttr());
    loss = rb.collective("all_reduce", loss, "tp", t, 0);
    loss = rb.collective("all_reduce", loss, "tp", t, 0);
    finish(func, loss);
  }
  return module;
}

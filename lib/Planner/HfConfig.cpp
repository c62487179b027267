//===- HfConfig.cpp - Models from Hugging Face config.json ----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// Each decoder family names its sizes its own way (GPT-2's n_embd, MPT's
// d_model, Falcon's multi_query) and leaves out what its config class
// defaults (tie_word_embeddings, a head width); the table below says, for
// each model_type, whether its MLP is gated and what the class defaults are,
// so that a key absent from the file means what it means to transformers.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/HfConfig.h"
#include "weft/Planner/Model.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <optional>

using namespace weft;
using namespace weft::planner;
namespace json = llvm::json;

namespace {
/// How a family's MLP multiplies: a gated one (LLaMA's SwiGLU, Gemma's
/// GeGLU: gate, up and down projections) or two matrices around an
/// activation (GPT-2's).
enum class Mlp { Gated, Plain };

/// Where a family's layers slide a window over the keys.
enum class Window {
  EveryLayer,  ///< sliding_window on every layer (Mistral, Phi-3)
  Alternating, ///< Gemma 2: even layers local, odd ones global
  Pattern,     ///< Gemma 3: sliding_window_pattern - 1 local, then a global
  Qwen,        ///< only with use_sliding_window, from max_window_layers on
  Listed,      ///< GPT-Neo: attention_layers lists each layer's kind
  Exaone, ///< EXAONE 4: every sliding_window_pattern-th full (4, or "LLLG")
  Olmo3,  ///< OLMo 3: three local, then a global (without layer_types)
};

struct Family {
  const char *type;
  Mlp mlp;
  /// The config class's tie_word_embeddings where the file leaves it out.
  bool tied;
  /// The class's activation where the file names none.
  const char *activation;
  Window window = Window::EveryLayer;
  /// The class's vocab_size and context where the file leaves them out (0:
  /// none, the file must say).
  int64_t vocab = 0, seq = 0;
};

const Family kFamilies[] = {
    {"llama", Mlp::Gated, false, "silu"},
    {"mistral", Mlp::Gated, false, "silu"},
    {"qwen2", Mlp::Gated, false, "silu", Window::Qwen},
    {"qwen3", Mlp::Gated, false, "silu", Window::Qwen},
    {"phi3", Mlp::Gated, false, "silu"},
    {"glm", Mlp::Gated, false, "silu"},
    {"glm4", Mlp::Gated, false, "silu"},
    {"smollm3", Mlp::Gated, true, "silu"},
    {"seed_oss", Mlp::Gated, false, "silu"},
    {"olmo", Mlp::Gated, false, "silu"},
    {"olmo2", Mlp::Gated, false, "silu"},
    {"olmo3", Mlp::Gated, false, "silu", Window::Olmo3},
    {"granite", Mlp::Gated, false, "silu"},
    {"stablelm", Mlp::Gated, false, "silu"},
    {"cohere", Mlp::Gated, true, "silu"},
    {"gemma", Mlp::Gated, true, "gelu_pytorch_tanh"},
    {"gemma2", Mlp::Gated, true, "gelu_pytorch_tanh", Window::Alternating},
    {"gemma3_text", Mlp::Gated, true, "gelu_pytorch_tanh", Window::Pattern,
     262208, 131072},
    {"gpt2", Mlp::Plain, true, "gelu_new"},
    {"gpt_neox", Mlp::Plain, false, "gelu"},
    {"gpt_neo", Mlp::Plain, true, "gelu_new", Window::Listed},
    {"nemotron", Mlp::Plain, false, "relu2"},
    {"exaone4", Mlp::Gated, false, "silu", Window::Exaone},
    {"ernie4_5", Mlp::Gated, true, "silu"},
    {"gptj", Mlp::Plain, false, "gelu_new"},
    // Falcon's rotary positions leave the context out of older configs:
    // the 2,048 tokens it trained at (Almazrouei et al. 2023).
    {"falcon", Mlp::Plain, true, "gelu", Window::EveryLayer, 0, 2048},
    {"opt", Mlp::Plain, true, "relu"},
    // BLOOM's ALiBi has no position table, so no context in its config:
    // its 2,048 training tokens (BigScience 2022). Its bloom_gelu_forward
    // is tanh's approximation.
    {"bloom", Mlp::Plain, true, "gelu_pytorch_tanh", Window::EveryLayer, 0,
     2048},
    {"mpt", Mlp::Plain, true, "gelu"},
    {"starcoder2", Mlp::Plain, true, "gelu_pytorch_tanh"},
    {"gpt_bigcode", Mlp::Plain, true, "gelu_pytorch_tanh"},
    {"phi", Mlp::Plain, false, "gelu_new"},
};

/// Model types that are not decoders the planner's transformer describes,
/// and why.
const std::pair<const char *, const char *> kRefusedTypes[] = {
    {"bert", "an encoder"},
    {"roberta", "an encoder"},
    {"xlm-roberta", "an encoder"},
    {"deberta-v2", "an encoder"},
    {"distilbert", "an encoder"},
    {"electra", "an encoder"},
    {"vit", "a vision encoder"},
    {"clip", "a text and a vision encoder"},
    {"t5", "an encoder-decoder"},
    {"mt5", "an encoder-decoder"},
    {"bart", "an encoder-decoder"},
    {"mbart", "an encoder-decoder"},
    {"whisper", "an encoder-decoder"},
};

/// Reads fields of one JSON object, the first error kept.
class Fields {
public:
  static constexpr int64_t kLimit = int64_t(1) << 31;

  Fields(const json::Object &object, llvm::StringRef file,
         llvm::StringRef where = "")
      : object(object), file(file.str()), where(where.str()) {}

  /// The first of `keys` present and not null, as an integer (a float that
  /// is whole counts: `"expansion_ratio": 4.0`).
  std::optional<int64_t> integer(std::initializer_list<const char *> keys) {
    for (const char *key : keys) {
      const json::Value *value = object.get(key);
      if (!value || value->getAsNull())
        continue;
      std::optional<int64_t> read = value->getAsInteger();
      if (std::optional<double> d = value->getAsNumber();
          !read && d && std::fabs(*d) < kLimit && *d == std::floor(*d))
        read = int64_t(*d);
      if (!read) {
        fail(key, "is not an integer");
        return std::nullopt;
      }
      // Far past any model, and small enough that the products of two
      // sizes (heads x head width) cannot overflow.
      if (*read > kLimit || *read < -kLimit) {
        fail(key, "is " + llvm::Twine(*read) + ", beyond any model's size");
        return std::nullopt;
      }
      return read;
    }
    return std::nullopt;
  }
  std::optional<double> number(const char *key) {
    const json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return std::nullopt;
    if (std::optional<double> d = value->getAsNumber()) {
      if (std::isfinite(*d) && std::fabs(*d) <= kLimit)
        return *d;
      fail(key, "is " + std::to_string(*d) + ", beyond any model's size");
      return std::nullopt;
    }
    fail(key, "is not a number");
    return std::nullopt;
  }
  std::optional<bool> boolean(const char *key) {
    const json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return std::nullopt;
    if (std::optional<bool> b = value->getAsBoolean())
      return *b;
    fail(key, "is not true or false");
    return std::nullopt;
  }
  std::optional<std::string> string(const char *key) {
    const json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return std::nullopt;
    if (std::optional<llvm::StringRef> s = value->getAsString())
      return s->str();
    fail(key, "is not a string");
    return std::nullopt;
  }
  const json::Object *nested(const char *key) {
    const json::Value *value = object.get(key);
    return value ? value->getAsObject() : nullptr;
  }
  const json::Array *array(const char *key) {
    const json::Value *value = object.get(key);
    return value ? value->getAsArray() : nullptr;
  }
  /// A list of finite numbers.
  std::optional<std::vector<double>> numbers(const char *key) {
    const json::Value *value = object.get(key);
    if (!value || value->getAsNull())
      return std::nullopt;
    const json::Array *list = value->getAsArray();
    std::vector<double> out;
    for (size_t i = 0; list && i < list->size(); ++i)
      if (std::optional<double> d = (*list)[i].getAsNumber();
          d && std::isfinite(*d))
        out.push_back(*d);
    if (!list || out.size() != list->size()) {
      fail(key, "is not a list of numbers");
      return std::nullopt;
    }
    return out;
  }
  bool has(const char *key) const {
    const json::Value *value = object.get(key);
    return value && !value->getAsNull();
  }
  void fail(llvm::StringRef key, const llvm::Twine &why) {
    if (!error.empty())
      return;
    error = file + ": \"" + where + key.str() + "\" " + why.str();
  }

  const json::Object &object;
  std::string file, where, error;
};

llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError(message.str());
}

const Family *findFamily(llvm::StringRef type) {
  for (const Family &family : kFamilies)
    if (type == family.type)
      return &family;
  return nullptr;
}

/// The context the model was pre-trained at: a rope scaling's original
/// length where it extends one (Llama 3.1's 8,192 scaled to 131,072), else
/// the position table's.
std::optional<int64_t> contextLength(Fields &fields) {
  for (const char *key : {"rope_scaling", "rope_parameters"})
    if (const json::Object *rope = fields.nested(key)) {
      Fields scaling(*rope, fields.file, fields.where + key + ".");
      std::optional<int64_t> original =
          scaling.integer({"original_max_position_embeddings"});
      if (!scaling.error.empty() && fields.error.empty())
        fields.error = scaling.error;
      if (original)
        return original;
    }
  // Phi-3's long-context configs keep it beside the scaling.
  if (std::optional<int64_t> original =
          fields.integer({"original_max_position_embeddings"}))
    return original;
  return fields.integer(
      {"max_position_embeddings", "n_positions", "max_seq_len", "seq_length"});
}

/// The sliding window of each layer: none, every layer, or every
/// global_every-th global among local ones (counted from the first layer
/// or ending at the every-th).
llvm::Error readWindow(Fields &fields, const Family &family, int64_t layers,
                       plan::ModelSpec &spec) {
  std::optional<int64_t> window = fields.integer({"sliding_window"});
  // GPT-Neo's local layers see window_size keys.
  if (!window && family.window == Window::Listed)
    window = fields.integer({"window_size"});
  auto everyLayer = [&] {
    if (window && *window > 0)
      spec.set_sliding_window(*window);
  };
  auto globalEvery = [&](int64_t every, bool first = false) {
    if (!window || *window <= 0)
      return;
    spec.set_mixed_sliding_window(*window);
    spec.set_global_every(every);
    spec.set_global_first(first);
    spec.set_windowed_layers(planner::windowedLayerCount(layers, every, first));
  };
  // Each layer's kind, listed: transformers' layer_types (4.53 on: full or
  // sliding attention), GPT-Neo's attention_layers (global or local), or
  // its attention_types ([[kinds, repeats], ...]) that expand to them.
  std::optional<std::vector<bool>> global;
  std::string key = "layer_types";
  auto kindsOf = [&](const json::Array &kinds, llvm::StringRef full,
                     llvm::StringRef local) -> llvm::Error {
    global.emplace();
    for (const json::Value &kind : kinds) {
      std::optional<llvm::StringRef> name = kind.getAsString();
      if (name == full || name == local) {
        global->push_back(name == full);
        continue;
      }
      return configError(
          fields.file + ": \"" + fields.where + key + "\" has a layer of " +
          (name ? "'" + name->str() + "'" : std::string("no name")) +
          ": Weft plans " + full + " and " + local + " layers");
    }
    return llvm::Error::success();
  };
  if (const json::Array *kinds = fields.array("layer_types")) {
    if (llvm::Error error =
            kindsOf(*kinds, "full_attention", "sliding_attention"))
      return error;
  } else if (family.window == Window::Listed) {
    json::Array expanded;
    if (const json::Array *kinds = fields.array("attention_layers")) {
      key = "attention_layers";
      expanded = *kinds;
    } else if (const json::Array *types = fields.array("attention_types")) {
      key = "attention_types";
      // Expanded no further than the layers (a count past them is an error
      // below, whatever the repeats say).
      int64_t listed = 0;
      for (const json::Value &item : *types) {
        const json::Array *pair = item.getAsArray();
        const json::Array *kinds =
            pair && pair->size() == 2 ? (*pair)[0].getAsArray() : nullptr;
        std::optional<int64_t> repeats = pair && pair->size() == 2
                                             ? (*pair)[1].getAsInteger()
                                             : std::nullopt;
        if (!kinds || !repeats || *repeats < 0)
          return configError(fields.file + ": \"" + fields.where +
                             "attention_types\" is not a list of [[kinds], "
                             "repeats] pairs");
        for (int64_t r = 0; r < *repeats && listed <= layers; ++r)
          for (const json::Value &kind : *kinds) {
            expanded.push_back(kind);
            ++listed;
          }
        if (*repeats > 0 && listed > layers)
          return configError(fields.file + ": \"" + fields.where +
                             "attention_types\" lists more than the " +
                             llvm::Twine(layers) + " layers");
      }
    } else {
      // GPTNeoConfig's default: global and local layers alternate.
      for (int64_t i = 0; i < layers; ++i)
        expanded.push_back(i % 2 ? "local" : "global");
    }
    if (llvm::Error error = kindsOf(expanded, "global", "local"))
      return error;
  }
  if (family.window == Window::Exaone && !global) {
    // EXAONE 4: a window of 4,096 where the key is absent (none where it
    // is null), every sliding_window_pattern-th layer full (4), or the
    // pattern spelt in letters ("LLLG": L local, G global).
    if (!fields.object.get("sliding_window"))
      window = 4096;
    if (window && *window > 0) {
      key = "sliding_window_pattern";
      global.emplace();
      const json::Value *pattern = fields.object.get(key);
      if (std::optional<llvm::StringRef> letters =
              pattern ? pattern->getAsString() : std::nullopt) {
        if (letters->empty() ||
            letters->find_first_not_of("LG") != llvm::StringRef::npos)
          return configError(fields.file + ": \"" + fields.where + key +
                             "\" '" + *letters +
                             "' is not a pattern of L (local) and G (global) "
                             "layers");
        for (int64_t i = 0; i < layers; ++i)
          global->push_back((*letters)[size_t(i) % letters->size()] == 'G');
      } else {
        const int64_t every =
            fields.integer({"sliding_window_pattern"}).value_or(4);
        if (every <= 0)
          return configError(fields.file + ": \"" + fields.where + key +
                             "\" is not a positive count of layers");
        for (int64_t i = 0; i < layers; ++i)
          global->push_back((i + 1) % every == 0);
      }
    }
  }
  if (global) {
    if (int64_t(global->size()) != layers)
      return configError(fields.file + ": \"" + fields.where + key +
                         "\" lists " + llvm::Twine(global->size()) +
                         " layers of " + llvm::Twine(layers));
    auto isGlobal = [](bool g) { return g; };
    if (llvm::all_of(*global, isGlobal))
      return llvm::Error::success();
    if (!window || *window <= 0)
      return configError(fields.file + ": \"" + fields.where + key +
                         "\" has windowed layers but no \"sliding_window\" "
                         "(or \"window_size\") gives their window");
    if (llvm::none_of(*global, isGlobal)) {
      everyLayer();
      return llvm::Error::success();
    }
    // Every N-th layer global: the N-th, 2N-th, ... (Gemma's), or the
    // first, the (N+1)-th, ... (GPT-Neo's).
    const int64_t first = llvm::find(*global, true) - global->begin();
    const bool globalFirst = first == 0;
    const int64_t every =
        globalFirst ? std::find(global->begin() + 1, global->end(), true) -
                          global->begin()
                    : first + 1;
    for (int64_t i = 0; i < layers; ++i)
      if ((*global)[size_t(i)] !=
          (globalFirst ? i % every == 0 : (i + 1) % every == 0))
        return configError(
            fields.file + ": \"" + fields.where + key +
            "\" mixes full and windowed layers other than every N-th full "
            "(the first full one is layer " +
            llvm::Twine(first) + ", but layer " + llvm::Twine(i) +
            " differs): Weft plans a window on every layer, or on all but "
            "every N-th (--sliding-window W --global-every N)");
    globalEvery(every, globalFirst);
    return llvm::Error::success();
  }
  switch (family.window) {
  case Window::EveryLayer:
    everyLayer();
    break;
  case Window::Alternating:
    globalEvery(2);
    break;
  case Window::Pattern: {
    int64_t pattern = fields.integer({"sliding_window_pattern"}).value_or(6);
    if (pattern <= 1)
      everyLayer();
    else
      globalEvery(pattern);
    break;
  }
  case Window::Olmo3:
    globalEvery(4);
    break;
  case Window::Listed:
  case Window::Exaone:
    break;
  case Window::Qwen: {
    if (!fields.boolean("use_sliding_window").value_or(false))
      break;
    // Layers from max_window_layers on slide (transformers' Qwen2).
    int64_t from = fields.integer({"max_window_layers"}).value_or(layers);
    if (from >= layers)
      break;
    if (from > 0)
      return configError(
          fields.file + ": \"use_sliding_window\" with \"max_window_layers\" " +
          llvm::Twine(from) + " of " + llvm::Twine(layers) +
          " layers: Weft plans a window on every layer or on none; give "
          "--sliding-window to cost one on every layer");
    everyLayer();
    break;
  }
  }
  return llvm::Error::success();
}
} // namespace

std::vector<std::string> planner::hfModelTypes() {
  std::vector<std::string> types;
  for (const Family &family : kFamilies)
    types.push_back(family.type);
  return types;
}

bool planner::isHfConfigPath(llvm::StringRef model) {
  return model.ends_with_insensitive(".json") ||
         llvm::sys::fs::is_directory(model);
}

llvm::Expected<plan::ModelSpec>
planner::modelFromHfConfig(llvm::StringRef path) {
  llvm::SmallString<256> file(path);
  if (llvm::sys::fs::is_directory(path)) {
    llvm::sys::path::append(file, "config.json");
    if (!llvm::sys::fs::exists(file))
      return configError("--model " + path +
                         ": a directory without config.json (give a "
                         "save_pretrained directory, a config.json, or a "
                         "preset's name)");
  }
  auto buffer = llvm::MemoryBuffer::getFile(file);
  if (!buffer)
    return configError("cannot read '" + file +
                       "': " + buffer.getError().message());
  llvm::Expected<plan::ModelSpec> spec =
      modelFromHfConfigText((*buffer)->getBuffer(), file);
  // Unnamed in the file: the directory's name (a save_pretrained
  // directory's, a hub snapshot's), or the file's.
  if (spec && spec->name().empty()) {
    llvm::StringRef name = llvm::sys::path::stem(file);
    if (name == "config" && !llvm::sys::path::parent_path(file).empty())
      name = llvm::sys::path::filename(llvm::sys::path::parent_path(file));
    spec->set_name(name.str());
  }
  return spec;
}

llvm::Expected<plan::ModelSpec>
planner::modelFromHfConfigText(llvm::StringRef text, llvm::StringRef file) {
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return configError(file +
                       ": not JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *top = parsed->getAsObject();
  if (!top)
    return configError(file + ": not a JSON object (a Hugging Face "
                              "config.json is one)");
  Fields outer(*top, file);
  // A multimodal checkpoint (Gemma 3, LLaVA): its language model.
  const json::Object *config = top;
  std::string where;
  if (!outer.has("hidden_size") && !outer.has("n_embd") &&
      !outer.has("d_model"))
    if (const json::Object *text = outer.nested("text_config")) {
      config = text;
      where = "text_config.";
    }
  Fields fields(*config, file, where);
  std::string type = fields.string("model_type").value_or("");
  if (type.empty() && config != top)
    type = outer.string("model_type").value_or("") + "_text";
  for (Fields *f : {&outer, &fields})
    if (!f->error.empty())
      return configError(f->error);
  if (type.empty())
    return configError(file + ": no \"" + where +
                       "model_type\": not a Hugging Face config.json (give "
                       "one, a preset's name, or gpt / llama with --layers, "
                       "--hidden, ...)");
  if (type == "gemma3" && config != top)
    type = "gemma3_text";
  // Model types whose language model is another family's, as transformers
  // builds it: Qwen2-VL's (QKV biases and all), InternLM2's LLaMA blocks
  // (under its own checkpoint names, kept in hf_model_type).
  const std::string hfType = type == "internlm2" ? type : std::string();
  for (auto [alias, family] :
       {std::pair{"qwen2_vl", "qwen2"}, std::pair{"qwen2_5_vl", "qwen2"},
        std::pair{"internlm2", "llama"}})
    if (type == alias)
      type = family;

  // What the planner's transformer does not describe: say so rather than
  // plan another model.
  for (const char *key :
       {"num_local_experts", "num_experts", "n_routed_experts",
        "moe_num_experts", "num_experts_per_tok"})
    if (std::optional<int64_t> experts = fields.integer({key});
        experts && *experts > 0)
      return configError(file + ": \"" + where + key + "\" is " +
                         llvm::Twine(*experts) +
                         ": a mixture-of-experts "
                         "model (" +
                         type +
                         "), which Weft does not plan: its "
                         "transformer has one dense MLP per layer");
  if (fields.has("kv_lora_rank"))
    return configError(file + ": \"" + where + "kv_lora_rank\": " + type +
                       "'s multi-head latent attention, which the planner's "
                       "built-in transformer does not build: export the "
                       "model to ONNX and plan the file");
  if (outer.boolean("is_encoder_decoder").value_or(false))
    return configError(file + ": \"is_encoder_decoder\": " + type +
                       " is an encoder-decoder; the planner builds decoders "
                       "from a config: export the model to ONNX and plan the "
                       "file");
  for (auto [refused, what] : kRefusedTypes)
    if (type == refused)
      return configError(file + ": model_type '" + type + "' is " + what +
                         "; the planner builds decoders from a config: "
                         "export the model to ONNX and plan the file");
  const Family *family = findFamily(type);
  if (!family)
    return configError(
        file + ": model_type '" + type + "' is not one Weft reads (it reads " +
        llvm::join(hfModelTypes(), ", ") +
        "): give --model llama or gpt with --layers, --hidden, --heads, "
        "--kv-heads, --ffn and --vocab, or export the model to ONNX");

  auto required =
      [&](std::initializer_list<const char *> keys) -> llvm::Expected<int64_t> {
    std::optional<int64_t> value = fields.integer(keys);
    if (!fields.error.empty())
      return configError(fields.error);
    if (!value || *value <= 0)
      return configError(file + ": " + type + " config without a positive \"" +
                         where + *keys.begin() + "\"");
    return *value;
  };
  llvm::Expected<int64_t> layers =
      required({"num_hidden_layers", "n_layer", "n_layers", "num_layers"});
  if (!layers)
    return layers.takeError();
  // Per-layer lists (windows, NoPE layers) are read against the count:
  // bound it first.
  if (*layers > planner::kMaxLayers)
    return configError(file + ": " + type + " config of " +
                       llvm::Twine(*layers) +
                       " layers: Weft plans models of at most " +
                       llvm::Twine(planner::kMaxLayers));
  llvm::Expected<int64_t> hidden =
      required({"hidden_size", "n_embd", "d_model", "n_embed"});
  if (!hidden)
    return hidden.takeError();
  llvm::Expected<int64_t> heads =
      required({"num_attention_heads", "n_head", "n_heads", "num_heads"});
  if (!heads)
    return heads.takeError();

  plan::ModelSpec spec;
  spec.set_name(outer.string("_name_or_path").value_or(""));
  spec.set_source(file.str());
  spec.set_layers(*layers);
  spec.set_hidden(*hidden);
  spec.set_heads(*heads);

  // KV heads: GQA's count; Falcon's and StarCoder's multi-query one; MPT's
  // in its attention config.
  std::optional<int64_t> kvHeads =
      fields.integer({"num_key_value_heads", "num_kv_heads"});
  // MPT's attention config: its KV heads, and whether it has ALiBi (every
  // MPT checkpoint has).
  std::optional<bool> mptAlibi;
  if (type == "mpt")
    if (const json::Object *attention = fields.nested("attn_config")) {
      Fields mpt(*attention, file, where + "attn_config.");
      kvHeads = mpt.integer({"kv_n_heads"});
      mptAlibi = mpt.boolean("alibi");
      if (std::optional<double> clip = mpt.number("clip_qkv");
          clip && *clip > 0)
        spec.set_qkv_clip(float(*clip));
      if (!mpt.error.empty())
        return configError(mpt.error);
    }
  if (type == "falcon" &&
      !fields.boolean("new_decoder_architecture").value_or(false))
    kvHeads = fields.boolean("multi_query").value_or(true) ? 1 : *heads;
  if (type == "gpt_bigcode")
    kvHeads = fields.boolean("multi_query").value_or(true) ? 1 : *heads;
  spec.set_kv_heads(kvHeads && *kvHeads > 0 ? *kvHeads : *heads);

  if (std::optional<int64_t> headDim = fields.integer({"head_dim"});
      headDim && *headDim > 0 && *headDim * *heads != *hidden)
    spec.set_head_dim(*headDim);
  else if (type == "gemma" && !fields.has("head_dim") &&
           *hidden != 256 * *heads)
    spec.set_head_dim(256); // GemmaConfig's default
  else if (type == "ernie4_5" && !fields.object.get("head_dim") &&
           *hidden != 128 * *heads)
    spec.set_head_dim(128); // Ernie4_5Config's (null: hidden / heads)

  // The MLP's width: its own key, MPT's ratio, else 4 x hidden.
  std::optional<int64_t> ffn = fields.integer(
      {"intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"});
  if (type == "mpt")
    if (std::optional<double> ratio = fields.number("expansion_ratio"))
      ffn = int64_t(*ratio * double(*hidden));
  spec.set_ffn_hidden(ffn && *ffn > 0 ? *ffn : 4 * *hidden);

  // The activation decides GeGLU from SwiGLU, and a plain MLP's name.
  std::string activation = family->activation;
  for (const char *key :
       {"hidden_activation", "hidden_act", "activation_function"})
    if (std::optional<std::string> name = fields.string(key)) {
      activation = *name;
      break;
    }
  llvm::StringRef act(activation);
  // gelu, gelu_new, gelu_fast, gelu_pytorch_tanh: GELU exactly or by tanh.
  bool gelu = act.starts_with("gelu");
  if (family->mlp == Mlp::Gated) {
    if (act == "silu" || act == "swish")
      spec.set_ffn_kind(plan::FFN_SWIGLU);
    else if (gelu)
      spec.set_ffn_kind(plan::FFN_GEGLU);
    else
      return configError(file + ": \"" + where + "hidden_act\" '" + activation +
                         "' in " + type +
                         "'s gated MLP: Weft builds SiLU "
                         "(SwiGLU) and GELU (GeGLU) gates");
  } else {
    spec.set_ffn_kind(plan::FFN_GELU);
    // transformers' "gelu" is the exact (erf) GELU, GPT-NeoX's, Falcon's
    // and MPT's; gelu_new, gelu_fast and gelu_pytorch_tanh are tanh's.
    if (act == "gelu" || act == "gelu_python")
      spec.set_ffn_activation(planner::kExactGelu);
    // relu2: Nemotron's squared ReLU.
    if (act == "relu")
      spec.set_ffn_activation("ReLU");
    else if (act == "relu2")
      spec.set_ffn_activation(planner::kSquaredRelu);
    else if (!gelu)
      return configError(file + ": \"" + where + "activation\" '" + activation +
                         "' in " + type +
                         "'s MLP: Weft builds GELU, ReLU and squared ReLU "
                         "between its two matrices");
  }

  std::optional<int64_t> vocab = fields.integer({"vocab_size"});
  if (!vocab && family->vocab)
    vocab = family->vocab;
  if (!vocab || *vocab <= 0)
    return configError(file + ": " + type + " config without a positive \"" +
                       where + "vocab_size\"");
  spec.set_vocab(*vocab);
  std::optional<int64_t> seq = contextLength(fields);
  spec.set_seq_len(seq && *seq > 0 ? *seq : family->seq);

  std::optional<bool> tied = fields.boolean("tie_word_embeddings");
  if (!tied && config != top)
    tied = outer.boolean("tie_word_embeddings");
  spec.set_tied_embeddings(tied.value_or(family->tied));

  if (llvm::Error error = readWindow(fields, *family, *layers, spec))
    return error;
  // The rotary base (Megatron-LM's --rotary-base): each config class's
  // default where the file has none; no rotary embedding in the families of
  // learned positions or ALiBi.
  bool rotary = !llvm::is_contained(
      {"gpt2", "gpt_neo", "opt", "bloom", "mpt", "gpt_bigcode"}, type);
  // ALiBi: BLOOM's always, MPT's unless its attention config says not,
  // Falcon's where it says.
  bool alibi = type == "bloom" || (type == "mpt" && mptAlibi.value_or(true)) ||
               (type == "falcon" && fields.boolean("alibi").value_or(false));
  spec.set_alibi(alibi);
  if (alibi)
    rotary = false;
  if (rotary) {
    std::optional<double> theta = fields.number("rope_theta");
    if (!theta)
      theta = fields.number("rotary_emb_base"); // GPT-NeoX
    if (const json::Object *rope = fields.nested("rope_parameters");
        rope && !theta) {
      Fields parameters(*rope, file, where + "rope_parameters.");
      theta = parameters.number("rope_theta");
      if (!parameters.error.empty())
        return configError(parameters.error);
    }
    // Ernie4_5Config's default_theta is 500,000.
    spec.set_rope_theta(theta && *theta > 0  ? *theta
                        : type == "ernie4_5" ? 500000.0
                                             : 10000.0);
    // Gemma 3's local layers turn at rope_local_base_freq, unscaled.
    if (type == "gemma3_text")
      spec.set_rope_local_theta(
          fields.number("rope_local_base_freq").value_or(10000.0));
    // rope_scaling (rope_parameters since transformers 4.56): the
    // frequencies the model computes with at every position.
    for (const char *key : {"rope_scaling", "rope_parameters"}) {
      const json::Object *rope = fields.nested(key);
      if (!rope)
        continue;
      Fields scaling(*rope, file, where + key + ".");
      std::optional<std::string> kind = scaling.string("rope_type");
      if (!kind)
        kind = scaling.string("type");
      // Qwen2-VL's mrope turns text tokens as the default embedding does
      // (their temporal, height and width positions are one; transformers
      // reads it as "default").
      if (!kind || *kind == "default" || *kind == "mrope")
        continue;
      // Phi-3's first long-context configs call LongRoPE "su".
      if (*kind == "su")
        kind = "longrope";
      plan::RopeScaling &out = *spec.mutable_rope_scaling();
      out.set_type(*kind);
      out.set_factor(scaling.number("factor").value_or(1.0));
      out.set_low_freq_factor(scaling.number("low_freq_factor").value_or(1.0));
      out.set_high_freq_factor(
          scaling.number("high_freq_factor").value_or(4.0));
      out.set_original_context(
          scaling.integer({"original_max_position_embeddings"})
              .value_or(
                  fields.integer({"max_position_embeddings"}).value_or(0)));
      out.set_beta_fast(scaling.number("beta_fast").value_or(32.0));
      out.set_beta_slow(scaling.number("beta_slow").value_or(1.0));
      out.set_attention_factor(
          scaling.number("attention_factor").value_or(0.0));
      out.set_no_truncate(!scaling.boolean("truncate").value_or(true));
      const std::optional<int64_t> maxPositions =
          fields.integer({"max_position_embeddings"});
      // Dynamic NTK measures a sequence against max_position_embeddings.
      if (*kind == "dynamic")
        out.set_original_context(maxPositions.value_or(0));
      if (*kind == "longrope") {
        // Phi-3 keeps the trained length beside rope_scaling (transformers
        // 5 inside it); where it is given, the factor is how far
        // max_position_embeddings extends it.
        std::optional<int64_t> original =
            fields.integer({"original_max_position_embeddings"});
        if (!original)
          original = scaling.integer({"original_max_position_embeddings"});
        if (original && *original > 0) {
          out.set_original_context(*original);
          if (maxPositions && *maxPositions > 0)
            out.set_factor(double(*maxPositions) / double(*original));
        }
        std::optional<std::vector<double>> shortFactor =
            scaling.numbers("short_factor");
        std::optional<std::vector<double>> longFactor =
            scaling.numbers("long_factor");
        if (scaling.error.empty() && (!shortFactor || !longFactor))
          scaling.fail("short_factor", "and long_factor are both needed by "
                                       "longrope");
        for (auto [key, list] : {std::pair{"short_factor", &shortFactor},
                                 std::pair{"long_factor", &longFactor}})
          if (*list && llvm::any_of(**list, [](double f) { return f <= 0; }))
            scaling.fail(key, "has a factor that is not positive");
        if (shortFactor)
          out.mutable_short_factor()->Add(shortFactor->begin(),
                                          shortFactor->end());
        if (longFactor)
          out.mutable_long_factor()->Add(longFactor->begin(),
                                         longFactor->end());
      }
      if (!scaling.error.empty())
        return configError(scaling.error);
      if (out.factor() <= 0 ||
          (*kind == "llama3" &&
           (out.high_freq_factor() <= out.low_freq_factor() ||
            out.original_context() <= 0)))
        return configError(file + ": \"" + where + key +
                           "\" has a factor that is not positive, or llama3 "
                           "frequency factors or context that do not make "
                           "a range");
      break;
    }
  }
  // Attention and MLP in parallel: GPT-J's and Phi's always, GPT-NeoX's
  // use_parallel_residual, Falcon's parallel_attn (or its new decoder
  // architecture), Cohere's.
  bool parallel = type == "gptj" || type == "phi" || type == "cohere";
  if (type == "gpt_neox")
    parallel = fields.boolean("use_parallel_residual").value_or(true);
  if (type == "falcon")
    parallel = fields.boolean("parallel_attn").value_or(true) ||
               fields.boolean("new_decoder_architecture").value_or(false);
  if (type == "stablelm")
    parallel = fields.boolean("use_parallel_residual").value_or(false);
  spec.set_parallel_block(parallel);
  // One norm for both branches, except GPT-NeoX's two and the two of
  // Falcon's new decoder architecture (ln_attn, ln_mlp).
  spec.set_one_block_norm(
      parallel &&
      (type == "gptj" || type == "phi" || type == "cohere" ||
       type == "stablelm" ||
       (type == "falcon" &&
        !fields.boolean("new_decoder_architecture").value_or(false))));
  // Rotary on part of each head: GPT-NeoX's rotary_pct, Phi's and
  // StableLM's partial_rotary_factor, GPT-J's rotary_dim.
  if (rotary) {
    std::optional<double> share = fields.number("rotary_pct");
    if (!share)
      share = fields.number("partial_rotary_factor");
    if (!share && type == "gpt_neox")
      share = 0.25;
    if (!share && (type == "phi" || type == "glm" || type == "glm4" ||
                   type == "nemotron"))
      share = 0.5;
    if (std::optional<int64_t> dims = fields.integer({"rotary_dim"});
        !share && dims && *dims > 0)
      share = double(*dims) * double(*heads) /
              double(spec.head_dim() > 0 ? spec.head_dim() * *heads : *hidden);
    if (share && *share > 0 && *share < 1)
      spec.set_rotary_percent(float(*share));
    // GPT-J, Cohere, GLM and ERNIE 4.5 turn pairs of adjacent features
    // (rotate_every_two; Cohere's and GLM's rotate_half interleave, and
    // ERNIE 4.5 uses GLM's with cos and sin repeated per pair).
    spec.set_rotary_interleaved(type == "gptj" || type == "cohere" ||
                                type == "glm" || type == "glm4" ||
                                type == "ernie4_5");
    // LongRoPE's factors: one per pair of rotated features, or one for all
    // (as torch broadcasts it).
    const int64_t rotated = planner::rotatedFeatures(spec);
    const plan::RopeScaling &rope = spec.rope_scaling();
    for (auto [key, list] : {std::pair{"short_factor", &rope.short_factor()},
                             std::pair{"long_factor", &rope.long_factor()}})
      if (list->size() > 1 && list->size() != rotated / 2)
        return configError(
            file + ": \"" + where +
            (fields.nested("rope_scaling") ? "rope_scaling."
                                           : "rope_parameters.") +
            key + "\" has " + llvm::Twine(list->size()) +
            " factors where the rotary embedding turns " +
            llvm::Twine(rotated / 2) +
            " pairs of features: give one per pair, or one for all");
  }
  // Biases in a gated model, whose linears have none by default: Qwen2's
  // on Q, K and V always, StableLM's use_qkv_bias there; the
  // attention_bias of LLaMA, Qwen3, Gemma, OLMo, Cohere and Granite on
  // all four projections (their o_proj too); LLaMA's and Granite's
  // mlp_bias on the MLP's three.
  if (family->mlp == Mlp::Gated) {
    const bool attentionBias =
        llvm::is_contained({"llama", "qwen3", "gemma", "gemma2", "gemma3_text",
                            "olmo", "olmo2", "olmo3", "cohere", "granite",
                            "smollm3"},
                           llvm::StringRef(type)) &&
        fields.boolean("attention_bias").value_or(false);
    // GLM's attention_bias (true by default) leaves its o_proj without.
    const bool glm = type == "glm" || type == "glm4";
    spec.set_qkv_bias(
        type == "qwen2" || attentionBias ||
        (glm && fields.boolean("attention_bias").value_or(true)) ||
        (type == "stablelm" && fields.boolean("use_qkv_bias").value_or(false)));
    spec.set_attention_output_bias(attentionBias);
    // Seed-OSS biases Q, K and V (attention_bias, true by default) and
    // o_proj (attention_out_bias) apart.
    if (type == "seed_oss") {
      spec.set_qkv_bias(fields.boolean("attention_bias").value_or(true));
      spec.set_attention_output_bias(
          fields.boolean("attention_out_bias").value_or(false));
    }
    // ERNIE 4.5's use_bias on all seven projections (none by default).
    if (type == "ernie4_5") {
      const bool bias = fields.boolean("use_bias").value_or(false);
      spec.set_qkv_bias(bias);
      spec.set_attention_output_bias(bias);
      spec.set_mlp_bias(bias);
    }
    // InternLM2's bias (true by default) on its wqkv and wo.
    if (hfType == "internlm2") {
      const bool bias = fields.boolean("bias").value_or(true);
      spec.set_qkv_bias(bias);
      spec.set_attention_output_bias(bias);
    }
    if (type != "ernie4_5")
      spec.set_mlp_bias((type == "llama" || type == "granite" ||
                         type == "smollm3" || type == "seed_oss") &&
                        fields.boolean("mlp_bias").value_or(false));
  }
  // The norms' epsilon: the file's, else its config class's (1e-6 for
  // LLaMA's and most of its kin, GLM's 1.5625e-7; 1e-5, the spec's
  // default, for the others).
  bool epsilonGiven = false;
  for (const char *key :
       {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps"})
    if (std::optional<double> epsilon = fields.number(key)) {
      if (*epsilon > 0 && *epsilon != 1e-5)
        spec.set_norm_epsilon(*epsilon);
      epsilonGiven = true;
      break;
    }
  if (!epsilonGiven && llvm::is_contained({"llama", "mistral", "qwen2", "qwen3",
                                           "gemma", "gemma2", "gemma3_text",
                                           "granite", "smollm3", "seed_oss"},
                                          llvm::StringRef(type)))
    spec.set_norm_epsilon(1e-6);
  if (!epsilonGiven && (type == "glm" || type == "glm4"))
    spec.set_norm_epsilon(1.5625e-7);
  if (std::optional<double> cap = fields.number("attn_logit_softcapping");
      cap && *cap > 0)
    spec.set_attention_softcap(float(*cap));
  // Gemma's arithmetic: the embeddings times sqrt(hidden) (every Gemma), a
  // norm after each branch as well as before it (Gemma 2 and 3), the scores
  // scaled by query_pre_attn_scalar^-1/2, Gemma 2's logits soft-capped.
  if (type == "gemma" || type == "gemma2" || type == "gemma3_text")
    spec.set_embedding_scale(std::sqrt(float(spec.hidden())));
  // Gemma's RMSNorms and Nemotron's LayerNorm1P scale by 1 + w.
  spec.set_norm_one_plus(type == "gemma" || type == "gemma2" ||
                         type == "gemma3_text" || type == "nemotron");
  // GLM-4-0414's post_self_attn_layernorm and post_mlp_layernorm as well.
  if (type == "gemma2" || type == "gemma3_text" || type == "glm4")
    spec.set_sandwich_norms(true);
  // BLOOM norms the embeddings before the first block.
  spec.set_embedding_norm(type == "bloom");
  if (std::optional<double> scalar = fields.number("query_pre_attn_scalar");
      scalar && *scalar > 0)
    spec.set_attention_scale(float(1.0 / std::sqrt(*scalar)));
  if (std::optional<double> cap = fields.number("final_logit_softcapping");
      cap && *cap > 0)
    spec.set_logit_softcap(float(*cap));
  // Granite's multipliers: of the embeddings, the scores (in place of
  // 1 / sqrt(head_dim)), each branch before the residual adds it, and the
  // logits' divisor.
  if (type == "granite") {
    auto positive = [&](const char *key) -> float {
      std::optional<double> v = fields.number(key);
      return v && *v > 0 ? float(*v) : 0.0f;
    };
    spec.set_embedding_scale(positive("embedding_multiplier"));
    spec.set_attention_scale(positive("attention_multiplier"));
    spec.set_residual_scale(positive("residual_multiplier"));
    spec.set_logit_divisor(positive("logits_scaling"));
  }
  // Norms that are not the FFN kind's: StableLM's LayerNorm with a bias
  // (SwiGLU), Cohere's LayerNorm without one, OLMo's non-parametric one,
  // MPT's without a bias where it has none (no_bias, true by default).
  if (type == "stablelm")
    spec.set_norm(plan::NORM_LAYER);
  if (type == "cohere")
    spec.set_norm(plan::NORM_LAYER_NO_BIAS);
  if (type == "olmo")
    spec.set_norm(plan::NORM_LAYER_NO_AFFINE);
  // Linear layers without biases in families whose kind has them: MPT's
  // no_bias, Falcon's bias (false by default), StarCoder2's use_bias,
  // OPT's enable_bias.
  bool linearBiases = true;
  if (type == "mpt")
    linearBiases = !fields.boolean("no_bias").value_or(true);
  if (type == "falcon")
    linearBiases = fields.boolean("bias").value_or(false);
  if (type == "starcoder2")
    linearBiases = fields.boolean("use_bias").value_or(true);
  if (type == "opt")
    linearBiases = fields.boolean("enable_bias").value_or(true);
  // Nemotron biases its attention's four projections (attention_bias) and
  // its MLP's two (mlp_bias) apart, neither by default.
  if (type == "nemotron") {
    linearBiases = false;
    const bool attentionBias = fields.boolean("attention_bias").value_or(false);
    spec.set_qkv_bias(attentionBias);
    spec.set_attention_output_bias(attentionBias);
    spec.set_mlp_bias(fields.boolean("mlp_bias").value_or(false));
  }
  if (family->mlp != Mlp::Gated && !linearBiases) {
    spec.set_no_linear_bias(true);
    if (type == "mpt")
      spec.set_norm(plan::NORM_LAYER_NO_BIAS);
  }
  // OLMo's and MPT's clip_qkv: the QKV projection clamped.
  if (type == "olmo")
    if (std::optional<double> clip = fields.number("clip_qkv");
        clip && *clip > 0)
      spec.set_qkv_clip(float(*clip));
  // Cohere multiplies its logits by logit_scale (0.0625 for Command R).
  if (type == "cohere")
    if (std::optional<double> scale = fields.number("logit_scale");
        !scale || *scale > 0)
      spec.set_logit_divisor(float(1.0 / scale.value_or(0.0625)));
  // Each head's query and key RMS-normed before the rotary embedding with
  // one weight of head_dim (Qwen3, Gemma 3); with a weight per head, as
  // LayerNorms without a bias (Cohere's use_qk_norm, Command R+'s;
  // StableLM's qk_layernorm, StableLM 2 12B's); the whole projection's
  // width at once (OLMo 2 and 3's q_norm and k_norm).
  const bool olmo2 = type == "olmo2" || type == "olmo3";
  if (type == "qwen3" || type == "gemma3_text" || olmo2 || type == "exaone4")
    spec.set_qk_norm(true);
  if ((type == "cohere" && fields.boolean("use_qk_norm").value_or(false)) ||
      (type == "stablelm" && fields.boolean("qk_layernorm").value_or(false))) {
    spec.set_qk_norm(true);
    spec.set_qk_norm_layout(plan::QK_NORM_PER_HEAD);
  }
  if (olmo2)
    spec.set_qk_norm_layout(plan::QK_NORM_WHOLE);
  spec.set_hf_model_type(hfType.empty() ? type : hfType);
  // OLMo 2 and 3 norm each branch's output, not its input; EXAONE 4 too.
  spec.set_post_norms(olmo2 || type == "exaone4");
  // EXAONE 4 with a window turns its global layers by no rotary embedding
  // (Exaone4Attention: rotary where sliding_window is None or the layer
  // slides).
  if (type == "exaone4" && spec.rope_theta() > 0 &&
      (!fields.object.get("sliding_window") ||
       fields.integer({"sliding_window"}).value_or(0) > 0))
    for (int64_t i = 0; i < spec.layers(); ++i)
      if (planner::layerWindow(spec, i) == 0)
        spec.add_nope_layers(i);
  // SmolLM3's NoPE layers: a 0 in no_rope_layers (one flag per layer), or
  // every no_rope_layer_interval-th layer (4) where the list is absent.
  if (type == "smollm3" && spec.rope_theta() > 0) {
    std::optional<std::vector<double>> flags = fields.numbers("no_rope_layers");
    const int64_t interval =
        fields.integer({"no_rope_layer_interval"}).value_or(4);
    if (flags && int64_t(flags->size()) < spec.layers())
      return configError(file + ": \"" + where + "no_rope_layers\" has " +
                         llvm::Twine(flags->size()) + " flags for " +
                         llvm::Twine(spec.layers()) +
                         " layers: give one per layer (1: rotary, 0: none)");
    if (!flags && interval <= 0)
      return configError(file + ": \"" + where +
                         "no_rope_layer_interval\" is not positive");
    for (int64_t i = 0; i < spec.layers(); ++i)
      if (flags ? (*flags)[size_t(i)] == 0 : (i + 1) % interval == 0)
        spec.add_nope_layers(i);
  }
  // GPT-J's attention projections have no biases (its MLP's have); its
  // and Phi's lm_head has one.
  spec.set_no_attention_bias(type == "gptj" || type == "gpt_neo");
  // GPT-Neo's out_proj alone has a bias, and its scores are not scaled
  // (GPTNeoSelfAttention._attn: q k^T, no 1 / sqrt(head_dim)).
  if (type == "gpt_neo") {
    spec.set_attention_output_bias(true);
    spec.set_attention_scale(1.0f);
  }
  spec.set_output_bias(type == "gptj" || type == "phi");
  for (Fields *f : {&outer, &fields})
    if (!f->error.empty())
      return configError(f->error);
  return spec;
}

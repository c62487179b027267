//===- HfCheckpoint.cpp - Weights from Hugging Face safetensors -----------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// A safetensors file is an 8-byte little-endian header length, a JSON header
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": ...})
// and the tensors' bytes, row-major, offsets relative to the header's end.
// A sharded checkpoint's index (model.safetensors.index.json) maps each
// tensor to its file in "weight_map".
//
// The builder's layout differs from transformers' in three ways the reader
// undoes: linears are [in, out] (nn.Linear's weight is [out, in]); Q, K and
// V are one projection whose columns are grouped by KV head ([kv_heads,
// group + 2, head_dim]: the group's query heads, then the key, then the
// value); Gemma's RMSNorm (and Nemotron's LayerNorm1P) scales by 1 + w where
// the builder's scale is the factor itself.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/HfCheckpoint.h"
#include "weft/Planner/Model.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <type_traits>

using namespace weft;
using namespace weft::planner;

static llvm::Error checkpointError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The bytes of one element of a safetensors dtype (0: not one Weft reads).
/// Integer and boolean tensors (a checkpoint's mask buffers) are read for
/// their bounds and copied by an export; weights are floating-point.
static int64_t dtypeBytes(llvm::StringRef dtype) {
  return llvm::StringSwitch<int64_t>(dtype)
      .Case("F32", 4)
      .Case("F16", 2)
      .Case("BF16", 2)
      .Case("F64", 8)
      .Cases({"BOOL", "U8", "I8"}, 1)
      .Cases({"U16", "I16"}, 2)
      .Cases({"U32", "I32"}, 4)
      .Cases({"U64", "I64"}, 8)
      .Default(0);
}
static bool isFloatDtype(llvm::StringRef dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

/// One safetensors file's tensors into `tensors` (file index `index`).
static llvm::Error readHeader(
    llvm::StringRef path, const llvm::MemoryBuffer &buffer,
    llvm::function_ref<void(llvm::StringRef, llvm::StringRef,
                            llvm::SmallVector<int64_t, 4>, uint64_t, uint64_t)>
        add) {
  llvm::StringRef bytes = buffer.getBuffer();
  if (bytes.size() < 8)
    return checkpointError(path + ": not a safetensors file (" +
                           llvm::Twine(bytes.size()) +
                           " bytes, shorter than its header's length)");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i)
    length = (length << 8) | uint8_t(bytes[size_t(i)]);
  if (length > bytes.size() - 8)
    return checkpointError(path + ": its header is " + llvm::Twine(length) +
                           " bytes long, past the file's end");
  llvm::Expected<llvm::json::Value> header =
      llvm::json::parse(bytes.substr(8, size_t(length)));
  if (!header)
    return checkpointError(path + ": its header is not JSON (" +
                           llvm::toString(header.takeError()) + ")");
  const llvm::json::Object *object = header->getAsObject();
  if (!object)
    return checkpointError(path + ": its header is not a JSON object");
  const uint64_t data = 8 + length, size = bytes.size() - data;
  for (const auto &entry : *object) {
    const llvm::StringRef key = entry.first;
    if (key == "__metadata__")
      continue;
    const llvm::json::Object *tensor = entry.second.getAsObject();
    auto fail = [&](const llvm::Twine &why) {
      return checkpointError(path + ": tensor '" + key + "' " + why);
    };
    if (!tensor)
      return fail("is not a JSON object");
    std::optional<llvm::StringRef> dtype = tensor->getString("dtype");
    const llvm::json::Array *shape = tensor->getArray("shape");
    const llvm::json::Array *offsets = tensor->getArray("data_offsets");
    if (!dtype || !shape || !offsets || offsets->size() != 2)
      return fail("lacks its dtype, shape or two data_offsets");
    if (!dtypeBytes(*dtype))
      return fail("is " + *dtype +
                  ": Weft reads F32, F16, BF16 and F64 weights (and integer "
                  "or boolean buffers)");
    llvm::SmallVector<int64_t, 4> dims;
    int64_t elements = 1;
    for (const llvm::json::Value &dim : *shape) {
      std::optional<int64_t> n = dim.getAsInteger();
      if (!n || *n < 0 || *n > (int64_t(1) << 40))
        return fail("has a dimension that is not a size");
      dims.push_back(*n);
      if (*n > 0 && elements > (int64_t(1) << 40) / *n)
        return fail("is too large");
      elements *= *n;
    }
    std::optional<int64_t> begin = (*offsets)[0].getAsInteger(),
                           end = (*offsets)[1].getAsInteger();
    if (!begin || !end || *begin < 0 || *end < *begin || uint64_t(*end) > size)
      return fail("has data_offsets outside the file's " + llvm::Twine(size) +
                  " bytes of data");
    if (*end - *begin != elements * dtypeBytes(*dtype))
      return fail("has " + llvm::Twine(*end - *begin) + " bytes for " +
                  llvm::Twine(elements) + " " + *dtype + " elements");
    add(key, *dtype, dims, data + uint64_t(*begin), data + uint64_t(*end));
  }
  return llvm::Error::success();
}

llvm::Expected<HfCheckpoint> HfCheckpoint::open(llvm::StringRef path) {
  std::string root = path.str();
  std::vector<std::string> paths;
  if (llvm::sys::fs::is_directory(path)) {
    llvm::SmallString<256> single(path), index(path);
    llvm::sys::path::append(single, "model.safetensors");
    llvm::sys::path::append(index, "model.safetensors.index.json");
    if (llvm::sys::fs::exists(single))
      root = single.str().str();
    else if (llvm::sys::fs::exists(index))
      root = index.str().str();
    else
      return checkpointError(
          path + ": no model.safetensors or model.safetensors.index.json in "
                 "it; give the checkpoint's directory or file");
  }
  if (llvm::StringRef(root).ends_with(".json")) {
    auto buffer = llvm::MemoryBuffer::getFile(root);
    if (!buffer)
      return checkpointError("cannot read '" + root +
                             "': " + buffer.getError().message());
    llvm::Expected<llvm::json::Value> json =
        llvm::json::parse((*buffer)->getBuffer());
    if (!json)
      return checkpointError(root + ": not JSON (" +
                             llvm::toString(json.takeError()) + ")");
    const llvm::json::Object *object = json->getAsObject();
    const llvm::json::Object *map =
        object ? object->getObject("weight_map") : nullptr;
    if (!map)
      return checkpointError(root + ": no \"weight_map\" object: not a "
                                    "safetensors index");
    std::set<std::string> shards;
    for (const auto &[name, file] : *map) {
      std::optional<llvm::StringRef> shard = file.getAsString();
      if (!shard || shard->contains('/') || shard->contains('\\'))
        return checkpointError(root + ": \"weight_map\" gives '" + name.str() +
                               "' no file name of this directory");
      shards.insert(shard->str());
    }
    llvm::StringRef dir = llvm::sys::path::parent_path(root);
    for (const std::string &shard : shards) {
      llvm::SmallString<256> full(dir);
      llvm::sys::path::append(full, shard);
      paths.push_back(full.str().str());
    }
  } else {
    paths.push_back(root);
  }
  HfCheckpoint checkpoint;
  for (const std::string &file : paths) {
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return checkpointError("cannot read '" + file +
                             "': " + buffer.getError().message());
    unsigned index = unsigned(checkpoint.files.size());
    checkpoint.files.push_back(std::move(*buffer));
    std::string duplicate;
    if (llvm::Error error = readHeader(
            file, *checkpoint.files.back(),
            [&](llvm::StringRef name, llvm::StringRef dtype,
                llvm::SmallVector<int64_t, 4> shape, uint64_t begin,
                uint64_t end) {
              if (!checkpoint.tensors
                       .try_emplace(name, Tensor{index, dtype.str(),
                                                 std::move(shape), begin, end})
                       .second &&
                  duplicate.empty())
                duplicate = name.str();
            }))
      return error;
    checkpoint.paths.push_back(file);
    if (!duplicate.empty())
      return checkpointError(file + ": tensor '" + duplicate +
                             "' is in more than one file");
  }
  if (llvm::StringRef(root).ends_with(".json"))
    checkpoint.index = root;
  for (const std::string &name : checkpoint.names()) {
    Tensor &tensor = checkpoint.tensors.find(name)->second;
    tensor.first = checkpoint.total;
    checkpoint.total +=
        int64_t(tensor.end - tensor.begin) / dtypeBytes(tensor.dtype);
  }
  return checkpoint;
}

int64_t HfCheckpoint::firstIndex(llvm::StringRef name) const {
  return tensors.find(name)->second.first;
}

/// f32 to a 16-bit float's bits, rounded to nearest even: bfloat16 (the
/// upper half) or IEEE half (subnormals, overflow to infinity, NaN kept).
static uint16_t toBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}
static uint16_t toHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u)
    return sign | 0x7e00;
  if (magnitude >= 0x477ff000u) // rounds past 65504
    return sign | 0x7c00;
  if (magnitude < 0x38800000u) { // below 2^-14: a subnormal half
    if (magnitude < 0x33000000u)
      return sign;
    const uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000;
    // The value is M 2^(e - 150), M the 24-bit mantissa: M 2^(e - 126) of
    // the half's 2^-24.
    const int shift = 126 - int(magnitude >> 23);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1),
                   midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1)))
      ++half;
    return sign | uint16_t(half);
  }
  uint32_t rebased = magnitude - (uint32_t(127 - 15) << 23);
  rebased += 0xfff + ((rebased >> 13) & 1);
  return sign | uint16_t(rebased >> 13);
}

llvm::Error HfCheckpoint::writeLike(llvm::ArrayRef<float> values,
                                    llvm::StringRef directory) const {
  if (int64_t(values.size()) != total)
    return checkpointError("writing a checkpoint of " + llvm::Twine(total) +
                           " elements from " + llvm::Twine(values.size()));
  if (std::error_code ec = llvm::sys::fs::create_directories(directory))
    return checkpointError("cannot create '" + directory +
                           "': " + ec.message());
  std::vector<std::string> all = names();
  for (unsigned file = 0; file < paths.size(); ++file) {
    // The tensors of this file, with offsets in the order of the names.
    llvm::json::Object header;
    header["__metadata__"] = llvm::json::Object{{"format", "pt"}};
    std::vector<const std::string *> mine;
    uint64_t offset = 0;
    for (const std::string &name : all) {
      const Tensor &tensor = tensors.find(name)->second;
      if (tensor.file != file)
        continue;
      mine.push_back(&name);
      const uint64_t bytes = tensor.end - tensor.begin;
      llvm::json::Array shape;
      for (int64_t dim : tensor.shape)
        shape.push_back(dim);
      header[name] = llvm::json::Object{
          {"dtype", tensor.dtype},
          {"shape", std::move(shape)},
          {"data_offsets",
           llvm::json::Array{int64_t(offset), int64_t(offset + bytes)}}};
      offset += bytes;
    }
    std::string text;
    llvm::raw_string_ostream(text) << llvm::json::Value(std::move(header));
    text.append((8 - text.size() % 8) % 8, ' ');
    llvm::SmallString<256> out(directory);
    llvm::sys::path::append(out, llvm::sys::path::filename(paths[file]));
    std::string partial = (out + ".partial").str();
    std::error_code ec;
    llvm::raw_fd_ostream stream(partial, ec);
    if (ec)
      return checkpointError("cannot write '" + partial + "': " + ec.message());
    const uint64_t length = text.size();
    for (int i = 0; i < 8; ++i)
      stream << char((length >> (8 * i)) & 0xff);
    stream << text;
    for (const std::string *name : mine) {
      const Tensor &tensor = tensors.find(*name)->second;
      if (!isFloatDtype(tensor.dtype)) {
        // Buffers, not weights: their bytes as they were.
        stream.write(files[tensor.file]->getBufferStart() + tensor.begin,
                     size_t(tensor.end - tensor.begin));
        continue;
      }
      const int64_t n =
          int64_t(tensor.end - tensor.begin) / dtypeBytes(tensor.dtype);
      for (int64_t i = 0; i < n; ++i) {
        const float value = values[size_t(tensor.first + i)];
        if (tensor.dtype == "F32") {
          stream.write(reinterpret_cast<const char *>(&value), 4);
        } else if (tensor.dtype == "F64") {
          const double wide = value;
          stream.write(reinterpret_cast<const char *>(&wide), 8);
        } else {
          const uint16_t narrow =
              tensor.dtype == "BF16" ? toBf16(value) : toHalf(value);
          stream.write(reinterpret_cast<const char *>(&narrow), 2);
        }
      }
    }
    stream.close();
    if (stream.has_error()) {
      std::string why = stream.error().message();
      stream.clear_error();
      llvm::sys::fs::remove(partial);
      return checkpointError("cannot write '" + partial + "': " + why);
    }
    if (std::error_code renamed = llvm::sys::fs::rename(partial, out))
      return checkpointError("cannot rename '" + partial +
                             "': " + renamed.message());
  }
  if (!index.empty()) {
    llvm::SmallString<256> out(directory);
    llvm::sys::path::append(out, llvm::sys::path::filename(index));
    if (std::error_code ec = llvm::sys::fs::copy_file(index, out))
      return checkpointError("cannot copy '" + index + "' to '" + out +
                             "': " + ec.message());
  }
  return llvm::Error::success();
}

llvm::ArrayRef<int64_t> HfCheckpoint::shape(llvm::StringRef name) const {
  return tensors.find(name)->second.shape;
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> all;
  for (const auto &entry : tensors)
    all.push_back(entry.getKey().str());
  llvm::sort(all);
  return all;
}

/// IEEE half to float, subnormals and infinities included.
static float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {
      // Normalize the subnormal.
      exponent = 127 - 15 + 1;
      while (!(mantissa & 0x400)) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

std::vector<float> HfCheckpoint::read(llvm::StringRef name) const {
  const Tensor &tensor = tensors.find(name)->second;
  const char *bytes = files[tensor.file]->getBufferStart() + tensor.begin;
  const int64_t width = dtypeBytes(tensor.dtype);
  const size_t n = size_t(int64_t(tensor.end - tensor.begin) / width);
  std::vector<float> values(n);
  // The files are little-endian, as the hosts Weft runs on.
  for (size_t i = 0; i < n; ++i) {
    const char *at = bytes + i * size_t(width);
    if (tensor.dtype == "F32") {
      std::memcpy(&values[i], at, 4);
    } else if (tensor.dtype == "F64") {
      double d;
      std::memcpy(&d, at, 8);
      values[i] = float(d);
    } else if (!isFloatDtype(tensor.dtype)) {
      // An integer or boolean buffer's elements, little-endian.
      int64_t v = 0;
      std::memcpy(&v, at, size_t(width));
      if (tensor.dtype[0] == 'I' && width < 8 && (v >> (8 * width - 1)) & 1)
        v -= int64_t(1) << (8 * width);
      values[i] = float(v);
    } else {
      uint16_t h;
      std::memcpy(&h, at, 2);
      if (tensor.dtype == "BF16") {
        uint32_t bits = uint32_t(h) << 16;
        std::memcpy(&values[i], &bits, 4);
      } else {
        values[i] = halfToFloat(h);
      }
    }
  }
  return values;
}

//===----------------------------------------------------------------------===//
// transformers' names for the builder's parameters
//===----------------------------------------------------------------------===//

static const char *const kReadFamilies[] = {
    "llama",    "mistral",     "qwen2",     "qwen3",       "gemma",
    "gemma2",   "gemma3_text", "olmo",      "olmo2",       "olmo3",
    "granite",  "cohere",      "stablelm",  "phi3",        "gpt2",
    "gpt_neox", "bloom",       "falcon",    "opt",         "starcoder2",
    "gptj",     "phi",         "mpt",       "gpt_bigcode", "glm",
    "glm4",     "smollm3",     "internlm2", "seed_oss",    "gpt_neo",
    "nemotron", "exaone4",     "ernie4_5"};

llvm::Error planner::checkpointFamilySupported(const plan::ModelSpec &model) {
  llvm::StringRef type = model.hf_model_type();
  if (type.empty())
    return checkpointError(
        "--checkpoint reads the weights of a model read from a Hugging Face "
        "config.json (give --model DIR or CONFIG.json), not of a preset or "
        "of the gpt / llama builders");
  if (llvm::is_contained(kReadFamilies, type))
    return llvm::Error::success();
  std::string known;
  for (const char *name : kReadFamilies)
    known += (known.empty() ? "" : ", ") + std::string(name);
  return checkpointError("--checkpoint does not read '" + type +
                         "' checkpoints yet (their tensors are named and laid "
                         "out otherwise); it reads " +
                         known +
                         "; export the model to ONNX for weft import instead");
}

bool HfCheckpoint::isWeight(llvm::StringRef name) const {
  return isFloatDtype(tensors.find(name)->second.dtype);
}

/// A tensor's values as T: f32 values, or (T = int64_t) each element's
/// index among all the checkpoint's (HfCheckpoint::firstIndex on), which
/// traces where each of a parameter's elements comes from.
template <typename T>
static std::vector<T> readAs(const HfCheckpoint &checkpoint,
                             llvm::StringRef name) {
  if constexpr (std::is_same_v<T, float>) {
    return checkpoint.read(name);
  } else {
    int64_t n = 1;
    for (int64_t dim : checkpoint.shape(name))
      n *= dim;
    std::vector<T> indices(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      indices[size_t(i)] = checkpoint.firstIndex(name) + i;
    return indices;
  }
}

/// `values` ([rows, cols], row-major) transposed.
template <typename T>
static std::vector<T> transposed(const std::vector<T> &values, int64_t rows,
                                 int64_t cols) {
  std::vector<T> out(values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[size_t(c * rows + r)] = values[size_t(r * cols + c)];
  return out;
}

namespace {
/// Reads one of the builder's parameters from a checkpoint: its tensors by
/// name, checked against the shapes the config gives, as T (values, or
/// their indices for planner::parameterSources); `used` collects the
/// tensors read, and every error names the parameter.
template <typename T> class ParameterReader {
public:
  ParameterReader(const HfCheckpoint &checkpoint, llvm::StringRef param,
                  std::vector<std::string> &used)
      : checkpoint(checkpoint), param(param), used(used) {}

  llvm::Error fail(const llvm::Twine &why) const {
    return checkpointError("parameter '" + param + "': " + why);
  }
  /// The tensor `name`, of the shape `want`.
  llvm::Expected<std::vector<T>> get(const std::string &name,
                                     llvm::ArrayRef<int64_t> want) const {
    if (!checkpoint.has(name))
      return fail("the checkpoint has no tensor '" + name + "'");
    if (checkpoint.shape(name) != want)
      return fail("'" + name + "' is " + shapeText(checkpoint.shape(name)) +
                  " where the config gives " + shapeText(want));
    if (!checkpoint.isWeight(name))
      return fail("'" + name + "' is not floating-point: not a weight");
    used.push_back(name);
    return readAs<T>(checkpoint, name);
  }
  /// An nn.Linear weight `name` ([out, in]) as the builder's [in, out].
  llvm::Expected<std::vector<T>> linearT(const std::string &name, int64_t out,
                                         int64_t in) const {
    auto values = get(name, {out, in});
    if (!values)
      return values.takeError();
    return transposed(*values, out, in);
  }
  /// The first `rows` rows of [`offset` + rows or more, width] position
  /// table `name` from row `offset` on.
  llvm::Expected<std::vector<T>> positions(const std::string &name,
                                           int64_t rows, int64_t width,
                                           int64_t offset = 0) const {
    if (!checkpoint.has(name) || checkpoint.shape(name).size() != 2 ||
        checkpoint.shape(name)[1] != width ||
        checkpoint.shape(name)[0] < rows + offset || !checkpoint.isWeight(name))
      return fail("the checkpoint has no position table '" + name + "' of " +
                  llvm::Twine(rows + offset) + " rows or more");
    used.push_back(name);
    std::vector<T> table = readAs<T>(checkpoint, name);
    return std::vector<T>(table.begin() + offset * width,
                          table.begin() + (rows + offset) * width);
  }
  /// A layer's parameter ("layers.N.rest"): N, and `rest` the name within
  /// the layer.
  llvm::Expected<int64_t> layer(llvm::StringRef &rest) const {
    rest = param;
    int64_t index = -1;
    if (!rest.consume_front("layers.") || rest.consumeInteger(10, index) ||
        !rest.consume_front("."))
      return unknown();
    return index;
  }
  llvm::Error unknown() const {
    return fail("no tensor of the checkpoint is known to be it");
  }

private:
  static std::string shapeText(llvm::ArrayRef<int64_t> shape) {
    std::string out;
    for (int64_t n : shape)
      out += (out.empty() ? "" : " x ") + std::to_string(n);
    return "[" + out + "]";
  }

  const HfCheckpoint &checkpoint;
  llvm::StringRef param;
  std::vector<std::string> &used;
};
} // namespace

/// GPT-2's names (GPT2LMHeadModel's, under "transformer.", or GPT2Model's
/// bare): Conv1D weights already [in, out]; c_attn's columns [q | k | v],
/// each heads x head_dim, regrouped per head; the position table's first
/// rows, as many as the model is built for.
template <typename T>
static llvm::Expected<std::vector<T>>
lookupGpt2(const HfCheckpoint &checkpoint, const plan::ModelSpec &model,
           llvm::StringRef param, llvm::ArrayRef<int64_t> shape,
           std::vector<std::string> &used) {
  const int64_t h = model.hidden(), heads = model.heads(), d = headDim(model),
                ffn = model.ffn_hidden(), vocab = model.vocab();
  const ParameterReader<T> reader(checkpoint, param, used);
  const std::string prefix =
      checkpoint.has("transformer.wte.weight") ? "transformer." : "";
  auto get = [&](const std::string &suffix, llvm::ArrayRef<int64_t> want) {
    return reader.get(prefix + suffix, want);
  };
  if (param == "embedding.weight")
    return get("wte.weight", {vocab, h});
  if (param == "position_embedding.weight")
    return reader.positions(prefix + "wpe.weight", shape.empty() ? 0 : shape[0],
                            h);
  if (param == "final_norm.weight")
    return get("ln_f.weight", {h});
  if (param == "final_norm.bias")
    return get("ln_f.bias", {h});
  llvm::StringRef rest;
  llvm::Expected<int64_t> layer = reader.layer(rest);
  if (!layer)
    return layer.takeError();
  const std::string at = "h." + std::to_string(*layer) + ".";
  if (rest == "attn_norm.weight" || rest == "attn_norm.bias")
    return get(at + "ln_1." + rest.rsplit('.').second.str(), {h});
  if (rest == "mlp_norm.weight" || rest == "mlp_norm.bias")
    return get(at + "ln_2." + rest.rsplit('.').second.str(), {h});
  if (rest == "attn_out.weight")
    return get(at + "attn.c_proj.weight", {h, h});
  if (rest == "attn_out.bias")
    return get(at + "attn.c_proj.bias", {h});
  if (rest == "mlp_up.weight")
    return get(at + "mlp.c_fc.weight", {h, ffn});
  if (rest == "mlp_up.bias")
    return get(at + "mlp.c_fc.bias", {ffn});
  if (rest == "mlp_down.weight")
    return get(at + "mlp.c_proj.weight", {ffn, h});
  if (rest == "mlp_down.bias")
    return get(at + "mlp.c_proj.bias", {h});
  if (rest == "qkv.weight" || rest == "qkv.bias") {
    const bool bias = rest == "qkv.bias";
    const int64_t in = bias ? 1 : h, width = 3 * heads * d;
    auto fused = bias ? get(at + "attn.c_attn.bias", {width})
                      : get(at + "attn.c_attn.weight", {h, width});
    if (!fused)
      return fused.takeError();
    // Head g's q, k and v columns side by side.
    std::vector<T> out(fused->size());
    for (int64_t i = 0; i < in; ++i)
      for (int64_t g = 0; g < heads; ++g)
        for (int64_t part = 0; part < 3; ++part)
          for (int64_t j = 0; j < d; ++j)
            out[size_t(i * width + (g * 3 + part) * d + j)] =
                (*fused)[size_t(i * width + part * heads * d + g * d + j)];
    return out;
  }
  return reader.unknown();
}

/// GPT-NeoX's, BLOOM's and Falcon's names: one query_key_value projection
/// whose rows are grouped by KV head as the builder's columns are ([heads,
/// 3, head_dim] for GPT-NeoX, BLOOM and Falcon without multi-query;
/// [heads + 2, head_dim] for Falcon-7B's one KV head; [kv_heads, group + 2,
/// head_dim] for Falcon's new decoder architecture), so it is transposed
/// as it is; nn.Linear weights otherwise.
template <typename T>
static llvm::Expected<std::vector<T>>
lookupFused(const HfCheckpoint &checkpoint, const plan::ModelSpec &model,
            llvm::StringRef param, std::vector<std::string> &used) {
  const llvm::StringRef type = model.hf_model_type();
  const int64_t h = model.hidden(), heads = model.heads(),
                kvHeads = model.kv_heads(), d = headDim(model),
                ffn = model.ffn_hidden(), vocab = model.vocab();
  const ParameterReader<T> reader(checkpoint, param, used);
  const bool neox = type == "gpt_neox";
  // GPT-NeoX's under gpt_neox.; BLOOM's and Falcon's under transformer.
  // (a bare BloomModel's without).
  const std::string prefix =
      neox ? "gpt_neox."
           : (checkpoint.has("word_embeddings.weight") ? "" : "transformer.");
  if (param == "embedding.weight")
    return reader.get(prefix +
                          (neox ? "embed_in.weight" : "word_embeddings.weight"),
                      {vocab, h});
  if (param == "embedding_norm.weight" || param == "embedding_norm.bias")
    return reader.get(prefix + "word_embeddings_layernorm." +
                          param.rsplit('.').second.str(),
                      {h});
  if (param == "final_norm.weight" || param == "final_norm.bias")
    return reader.get(prefix + (neox ? "final_layer_norm." : "ln_f.") +
                          param.rsplit('.').second.str(),
                      {h});
  if (param == "output.weight")
    return reader.linearT(neox ? "embed_out.weight" : "lm_head.weight", vocab,
                          h);
  llvm::StringRef rest;
  llvm::Expected<int64_t> layer = reader.layer(rest);
  if (!layer)
    return layer.takeError();
  const std::string at =
      prefix + (neox ? "layers." : "h.") + std::to_string(*layer) + ".";
  const std::string attention = neox ? "attention." : "self_attention.";
  const std::string kind = rest.rsplit('.').second.str(); // weight or bias
  // Falcon's new decoder architecture norms each branch (ln_attn, ln_mlp);
  // the others name them input_layernorm and post_attention_layernorm.
  const bool falconTwo =
      type == "falcon" && checkpoint.has(at + "ln_attn.weight");
  if (rest.starts_with("attn_norm."))
    return reader.get(at + (falconTwo ? "ln_attn." : "input_layernorm.") + kind,
                      {h});
  if (rest.starts_with("mlp_norm."))
    return reader.get(
        at + (falconTwo ? "ln_mlp." : "post_attention_layernorm.") + kind, {h});
  const int64_t width = (heads + 2 * kvHeads) * d;
  if (rest == "qkv.weight")
    return reader.linearT(at + attention + "query_key_value.weight", width, h);
  if (rest == "qkv.bias")
    return reader.get(at + attention + "query_key_value.bias", {width});
  if (rest == "attn_out.weight")
    return reader.linearT(at + attention + "dense.weight", h, heads * d);
  if (rest == "attn_out.bias")
    return reader.get(at + attention + "dense.bias", {h});
  if (rest == "mlp_up.weight")
    return reader.linearT(at + "mlp.dense_h_to_4h.weight", ffn, h);
  if (rest == "mlp_up.bias")
    return reader.get(at + "mlp.dense_h_to_4h.bias", {ffn});
  if (rest == "mlp_down.weight")
    return reader.linearT(at + "mlp.dense_4h_to_h.weight", h, ffn);
  if (rest == "mlp_down.bias")
    return reader.get(at + "mlp.dense_4h_to_h.bias", {h});
  return reader.unknown();
}

/// Where a family's checkpoint has the builder's parameters: LLaMA's names
/// by default (under model.), and the few each other family differs in.
namespace {
struct Names {
  std::string top = "model.";
  std::string layers = "layers.";
  std::string embed = "embed_tokens.weight";
  /// A learned position table, whose row `p + positionOffset` is position p.
  std::string positions;
  int64_t positionOffset = 0;
  std::string finalNorm = "norm.";
  /// Q, K and V apart (q_proj, k_proj, v_proj under it), or fused into one
  /// projection of [q; k; v] rows.
  std::string attention = "self_attn.";
  std::string fusedQkv = "self_attn.qkv_proj.";
  std::string attnNorm = "input_layernorm.";
  std::string mlpNorm = "post_attention_layernorm.";
  /// The norms after each branch (Gemma 2's and 3's, OLMo 2's, GLM-4's).
  std::string attnPostNorm = "post_attention_layernorm.";
  std::string mlpPostNorm = "post_feedforward_layernorm.";
  std::string outProj = "self_attn.o_proj.";
  std::string gateProj = "mlp.gate_proj.";
  std::string upProj = "mlp.up_proj.";
  std::string downProj = "mlp.down_proj.";
  std::string head = "lm_head.";
  /// The fused QKV projection's rows already grouped by KV head as the
  /// builder's columns are (InternLM2's wqkv), not [q; k; v].
  bool qkvGrouped = false;
};
} // namespace

static Names namesOf(llvm::StringRef type) {
  Names n;
  if (type == "opt") {
    // model.decoder.; the norms before attention and the MLP are
    // self_attn_layer_norm and (each layer's) final_layer_norm; a position
    // table of context + 2 rows.
    n.top = "model.decoder.";
    n.positions = "embed_positions.weight";
    n.positionOffset = 2;
    n.finalNorm = "final_layer_norm.";
    n.attnNorm = "self_attn_layer_norm.";
    n.mlpNorm = "final_layer_norm.";
    n.outProj = "self_attn.out_proj.";
    n.upProj = "fc1.";
    n.downProj = "fc2.";
  } else if (type == "gemma2" || type == "gemma3_text") {
    n.mlpNorm = "pre_feedforward_layernorm.";
  } else if (type == "internlm2") {
    // InternLM2's own names (its trust_remote_code modeling): one wqkv
    // whose rows are [kv_heads, group + 2, head_dim], feed_forward's w1
    // (gate), w3 (up) and w2 (down), and the head as output.
    n.embed = "tok_embeddings.weight";
    n.fusedQkv = "attention.wqkv.";
    n.qkvGrouped = true;
    n.attnNorm = "attention_norm.";
    n.mlpNorm = "ffn_norm.";
    n.outProj = "attention.wo.";
    n.gateProj = "feed_forward.w1.";
    n.upProj = "feed_forward.w3.";
    n.downProj = "feed_forward.w2.";
    n.head = "output.";
  } else if (type == "glm4") {
    n.attnPostNorm = "post_self_attn_layernorm.";
    n.mlpPostNorm = "post_mlp_layernorm.";
  } else if (type == "starcoder2") {
    n.upProj = "mlp.c_fc.";
    n.downProj = "mlp.c_proj.";
  } else if (type == "gptj") {
    n.top = "transformer.";
    n.layers = "h.";
    n.embed = "wte.weight";
    n.finalNorm = "ln_f.";
    n.attention = "attn.";
    n.attnNorm = "ln_1.";
    n.outProj = "attn.out_proj.";
    n.upProj = "mlp.fc_in.";
    n.downProj = "mlp.fc_out.";
  } else if (type == "phi") {
    n.finalNorm = "final_layernorm.";
    n.outProj = "self_attn.dense.";
    n.upProj = "mlp.fc1.";
    n.downProj = "mlp.fc2.";
  } else if (type == "mpt") {
    n.top = "transformer.";
    n.layers = "blocks.";
    n.embed = "wte.weight";
    n.positions = "wpe.weight";
    n.finalNorm = "norm_f.";
    n.fusedQkv = "attn.Wqkv.";
    n.attnNorm = "norm_1.";
    n.mlpNorm = "norm_2.";
    n.outProj = "attn.out_proj.";
    n.upProj = "ffn.up_proj.";
    n.downProj = "ffn.down_proj.";
  } else if (type == "gpt_neo") {
    // GPT-2's names with nn.Linear projections: q, k, v and out_proj
    // under attn.attention.
    n.top = "transformer.";
    n.layers = "h.";
    n.embed = "wte.weight";
    n.positions = "wpe.weight";
    n.finalNorm = "ln_f.";
    n.attention = "attn.attention.";
    n.attnNorm = "ln_1.";
    n.mlpNorm = "ln_2.";
    n.outProj = "attn.attention.out_proj.";
    n.upProj = "mlp.c_fc.";
    n.downProj = "mlp.c_proj.";
  } else if (type == "gpt_bigcode") {
    n.top = "transformer.";
    n.layers = "h.";
    n.embed = "wte.weight";
    n.positions = "wpe.weight";
    n.finalNorm = "ln_f.";
    n.fusedQkv = "attn.c_attn.";
    n.attnNorm = "ln_1.";
    n.mlpNorm = "ln_2.";
    n.outProj = "attn.c_proj.";
    n.upProj = "mlp.c_fc.";
    n.downProj = "mlp.c_proj.";
  }
  return n;
}

template <typename T>
static llvm::Expected<std::vector<T>>
lookup(const HfCheckpoint &checkpoint, const plan::ModelSpec &model,
       llvm::StringRef param, llvm::ArrayRef<int64_t> shape,
       std::vector<std::string> &used) {
  if (model.hf_model_type() == "gpt2")
    return lookupGpt2<T>(checkpoint, model, param, shape, used);
  if (llvm::is_contained({"gpt_neox", "bloom", "falcon"},
                         llvm::StringRef(model.hf_model_type())))
    return lookupFused<T>(checkpoint, model, param, used);

  const llvm::StringRef type = model.hf_model_type();
  const bool onePlus = storedAsOnePlus(model, "final_norm.weight");
  const Names names = namesOf(type);
  const std::string &top = names.top;
  const int64_t h = model.hidden(), heads = model.heads(),
                kvHeads = model.kv_heads(), d = headDim(model),
                group = heads / std::max<int64_t>(kvHeads, 1),
                ffn = model.ffn_hidden(), vocab = model.vocab();
  const ParameterReader<T> reader(checkpoint, param, used);
  auto norm = [&](llvm::Expected<std::vector<T>> values)
      -> llvm::Expected<std::vector<T>> {
    if constexpr (std::is_same_v<T, float>)
      if (values && onePlus)
        for (float &v : *values)
          v += 1.0f;
    return values;
  };
  if (param == "embedding.weight")
    return reader.get(top + names.embed, {vocab, h});
  // The rows of the built sequence's positions (OPT's
  // OPTLearnedPositionalEmbedding reads row p + 2 for position p).
  if (param == "position_embedding.weight" && !names.positions.empty())
    return reader.positions(top + names.positions, shape.empty() ? 0 : shape[0],
                            h, names.positionOffset);
  if (param == "final_norm.weight")
    return norm(reader.get(top + names.finalNorm + "weight", {h}));
  if (param == "final_norm.bias")
    return reader.get(top + names.finalNorm + "bias", {h});
  if (param == "output.weight")
    return reader.linearT(names.head + "weight", vocab, h);
  if (param == "output.bias")
    return reader.get(names.head + "bias", {vocab});
  llvm::StringRef rest;
  llvm::Expected<int64_t> layer = reader.layer(rest);
  if (!layer)
    return layer.takeError();
  const std::string at = top + names.layers + std::to_string(*layer) + ".";
  if (rest == "attn_norm.weight")
    return norm(reader.get(at + names.attnNorm + "weight", {h}));
  if (rest == "attn_norm.bias")
    return reader.get(at + names.attnNorm + "bias", {h});
  if (rest == "mlp_norm.weight")
    return norm(reader.get(at + names.mlpNorm + "weight", {h}));
  if (rest == "mlp_norm.bias")
    return reader.get(at + names.mlpNorm + "bias", {h});
  if (rest == "attn_post_norm.weight")
    return norm(reader.get(at + names.attnPostNorm + "weight", {h}));
  if (rest == "mlp_post_norm.weight")
    return norm(reader.get(at + names.mlpPostNorm + "weight", {h}));
  // Q, K and V: separate projections, or Phi-3's fused qkv_proj ([q; k;
  // v] rows); grouped by KV head into the builder's columns. InternLM2's
  // wqkv has them so already.
  const int64_t qkvWidth = (heads + 2 * kvHeads) * d;
  if (names.qkvGrouped && rest == "qkv.weight")
    return reader.linearT(at + names.fusedQkv + "weight", qkvWidth, h);
  if (names.qkvGrouped && rest == "qkv.bias")
    return reader.get(at + names.fusedQkv + "bias", {qkvWidth});
  if (rest == "qkv.weight" || rest == "qkv.bias") {
    const bool bias = rest == "qkv.bias";
    const int64_t in = bias ? 1 : h;
    auto rows = [&](llvm::StringRef which,
                    int64_t count) -> llvm::Expected<std::vector<T>> {
      std::string name = at + names.attention + which.str() + "_proj." +
                         (bias ? "bias" : "weight");
      if (bias)
        return reader.get(name, {count});
      return reader.get(name, {count, in});
    };
    std::vector<T> q, k, v;
    if (checkpoint.has(at + names.fusedQkv + "weight")) {
      auto fused =
          bias ? reader.get(at + names.fusedQkv + "bias", {qkvWidth})
               : reader.get(at + names.fusedQkv + "weight", {qkvWidth, h});
      if (!fused)
        return fused.takeError();
      auto begin = fused->begin();
      q.assign(begin, begin + heads * d * in);
      k.assign(begin + heads * d * in, begin + (heads + kvHeads) * d * in);
      v.assign(begin + (heads + kvHeads) * d * in, fused->end());
    } else {
      auto qr = rows("q", heads * d);
      if (!qr)
        return qr.takeError();
      auto kr = rows("k", kvHeads * d);
      if (!kr)
        return kr.takeError();
      auto vr = rows("v", kvHeads * d);
      if (!vr)
        return vr.takeError();
      q = std::move(*qr);
      k = std::move(*kr);
      v = std::move(*vr);
    }
    // Output columns in the builder's order, each a row of a projection.
    const int64_t columns = kvHeads * (group + 2) * d;
    std::vector<T> out(size_t(columns * in));
    int64_t column = 0;
    auto place = [&](const std::vector<T> &from, int64_t row) {
      for (int64_t i = 0; i < in; ++i)
        out[size_t(i * columns + column)] = from[size_t(row * in + i)];
      ++column;
    };
    for (int64_t g = 0; g < kvHeads; ++g) {
      for (int64_t j = 0; j < group * d; ++j)
        place(q, g * group * d + j);
      for (int64_t j = 0; j < d; ++j)
        place(k, g * d + j);
      for (int64_t j = 0; j < d; ++j)
        place(v, g * d + j);
    }
    return out;
  }
  if (rest == "attn_out.weight")
    return reader.linearT(at + names.outProj + "weight", h, heads * d);
  if (rest == "attn_out.bias")
    return reader.get(at + names.outProj + "bias", {h});
  // QK norms: one weight of head_dim (Qwen3, Gemma 3), of the projection's
  // width (OLMo 2), or one per head (Cohere's [heads, head_dim], StableLM's
  // q_layernorm.norms.i).
  if (rest == "q_norm.weight" || rest == "k_norm.weight") {
    const bool query = rest == "q_norm.weight";
    const int64_t n = query ? heads : kvHeads;
    switch (model.qk_norm_layout()) {
    case plan::QK_NORM_WHOLE:
      return norm(reader.get(at + "self_attn." + rest.str(), {n * d}));
    case plan::QK_NORM_PER_HEAD: {
      if (type == "stablelm") {
        std::vector<T> all;
        for (int64_t i = 0; i < n; ++i) {
          auto one = reader.get(at + "self_attn." +
                                    (query ? "q_layernorm" : "k_layernorm") +
                                    ".norms." + std::to_string(i) + ".weight",
                                {d});
          if (!one)
            return one.takeError();
          all.insert(all.end(), one->begin(), one->end());
        }
        return all;
      }
      return reader.get(at + "self_attn." + rest.str(), {n, d});
    }
    default:
      return norm(reader.get(at + "self_attn." + rest.str(), {d}));
    }
  }
  // The MLP: gate and up (Phi-3's fused gate_up_proj, [gate; up] rows),
  // down.
  if (rest == "mlp_gate.weight" || rest == "mlp_up.weight") {
    const bool gate = rest == "mlp_gate.weight";
    if (checkpoint.has(at + "mlp.gate_up_proj.weight")) {
      auto fused = reader.get(at + "mlp.gate_up_proj.weight", {2 * ffn, h});
      if (!fused)
        return fused.takeError();
      std::vector<T> half(fused->begin() + (gate ? 0 : ffn * h),
                          fused->begin() + (gate ? ffn * h : 2 * ffn * h));
      return transposed(half, ffn, h);
    }
    return reader.linearT(
        at + (gate ? names.gateProj : names.upProj) + "weight", ffn, h);
  }
  if (rest == "mlp_down.weight")
    return reader.linearT(at + names.downProj + "weight", h, ffn);
  if (rest == "mlp_gate.bias")
    return reader.get(at + names.gateProj + "bias", {ffn});
  if (rest == "mlp_up.bias")
    return reader.get(at + names.upProj + "bias", {ffn});
  if (rest == "mlp_down.bias")
    return reader.get(at + names.downProj + "bias", {h});
  return reader.unknown();
}

llvm::Expected<std::vector<float>> planner::parameterFromCheckpoint(
    const HfCheckpoint &checkpoint, const plan::ModelSpec &model,
    llvm::StringRef param, llvm::ArrayRef<int64_t> shape,
    std::vector<std::string> &used) {
  llvm::Expected<std::vector<float>> values =
      lookup<float>(checkpoint, model, param, shape, used);
  if (!values)
    return values.takeError();
  int64_t elements = 1;
  for (int64_t n : shape)
    elements *= n;
  if (int64_t(values->size()) != elements)
    return checkpointError("parameter '" + param + "': the checkpoint gives " +
                           llvm::Twine(values->size()) +
                           " values where the model has " +
                           llvm::Twine(elements));
  return values;
}

llvm::Expected<std::vector<int64_t>>
planner::parameterSources(const HfCheckpoint &checkpoint,
                          const plan::ModelSpec &model, llvm::StringRef param,
                          llvm::ArrayRef<int64_t> shape) {
  std::vector<std::string> used;
  llvm::Expected<std::vector<int64_t>> indices =
      lookup<int64_t>(checkpoint, model, param, shape, used);
  if (!indices)
    return indices.takeError();
  int64_t elements = 1;
  for (int64_t n : shape)
    elements *= n;
  if (int64_t(indices->size()) != elements)
    return checkpointError("parameter '" + param + "': the checkpoint gives " +
                           llvm::Twine(indices->size()) +
                           " values where the model has " +
                           llvm::Twine(elements));
  return indices;
}

bool planner::storedAsOnePlus(const plan::ModelSpec &model,
                              llvm::StringRef param) {
  return model.norm_one_plus() && param.ends_with("norm.weight");
}

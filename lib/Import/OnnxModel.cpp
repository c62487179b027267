//===- OnnxModel.cpp - Load, upgrade, bind and infer an ONNX model --------===//
//
// Part of the Weft project.
//
// Everything here works on the protobuf, before any MLIR is built. ONNX's
// library reports problems by throwing; each call is wrapped so that a bad
// model becomes an error message, never an escaping exception.
//
//===----------------------------------------------------------------------===//

#include "OnnxModel.h"

#include "onnx/checker.h"
#include "onnx/defs/parser.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CrashRecoveryContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <fcntl.h>
#include <limits>
#include <mutex>
#include <unistd.h>

using namespace weft;

llvm::LogicalResult weft::parseInputShape(llvm::StringRef text,
                                    OnnxImportOptions &options,
                                    std::string &error) {
  auto [name, dims] = text.rsplit('=');
  if (name.empty() || dims.empty() || name == text) {
    error = "expected NAME=DIMS such as tokens=8x1024, got '" + text.str() + "'";
    return llvm::failure();
  }
  llvm::SmallVector<int64_t> shape;
  llvm::SmallVector<llvm::StringRef> parts;
  if (dims != "scalar")
    dims.split(parts, 'x');
  for (llvm::StringRef part : parts) {
    int64_t size;
    if (part == "batch" || part == "seq") {
      shape.push_back(part == "batch" ? kBatchDim : kSequenceDim);
      continue;
    }
    if (part.getAsInteger(10, size) || size < 0) {
      error = "dimension '" + part.str() + "' of --input-shape " + text.str() +
              " is not a non-negative integer, 'batch' or 'seq'";
      return llvm::failure();
    }
    shape.push_back(size);
  }
  options.inputShapes[name] = shape;
  return llvm::success();
}

/// Why `path`, a directory (an Optimum export's, a Hub snapshot's), is not a
/// model: the ONNX files it holds to choose from, and its config.json.
static std::string directoryError(llvm::StringRef path) {
  std::vector<std::string> models;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(path, ec), end; !ec && it != end;
       it.increment(ec))
    if (llvm::StringRef(it->path()).ends_with(".onnx"))
      models.push_back(llvm::sys::path::filename(it->path()).str());
  llvm::sort(models);
  llvm::SmallString<256> config(path);
  llvm::sys::path::append(config, "config.json");
  std::string error = "a directory, not a model: give the ONNX file";
  if (models.empty())
    error += " (it holds none)";
  else
    error += " in it (" + llvm::join(models, ", ") + ")";
  if (llvm::sys::fs::exists(config))
    error += ", or plan the model its config.json describes with weft plan "
             "--model " +
             path.str();
  return error;
}

static bool readModel(llvm::StringRef path, onnx::ModelProto &proto,
                      std::string &error) {
  if (llvm::sys::fs::is_directory(path)) {
    error = directoryError(path);
    return false;
  }
  if (path.ends_with(".onnxtxt")) {
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer) {
      error = "cannot read " + path.str() + ": " + buffer.getError().message();
      return false;
    }
    // ONNX's parser reports most errors as a status but throws from the
    // std::sto* conversions on literals it cannot read (e.g. `-inf`).
    onnx::Common::Status status;
    try {
      status =
          onnx::OnnxParser::Parse(proto, (*buffer)->getBuffer().str().c_str());
    } catch (const std::exception &e) {
      error = "cannot parse ONNX text format: a literal could not be read (" +
              std::string(e.what()) + ")";
      return false;
    }
    if (!status.IsOK()) {
      error = "cannot parse ONNX text format: " + status.ErrorMessage();
      return false;
    }
    return true;
  }
  int fd = ::open(path.str().c_str(), O_RDONLY);
  if (fd < 0) {
    error = "cannot open " + path.str() + ": " + std::strerror(errno);
    return false;
  }
  google::protobuf::io::FileInputStream file(fd);
  file.SetCloseOnDelete(true);
  google::protobuf::io::CodedInputStream coded(&file);
  // A model with inline weights may exceed protobuf's 64 MB default.
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (!proto.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    error = "not an ONNX model (the protobuf does not parse; is the file "
            "truncated or of another format?)";
    return false;
  }
  return true;
}

static int64_t getDefaultOpset(const onnx::ModelProto &proto) {
  for (const onnx::OperatorSetIdProto &opset : proto.opset_import())
    if (opset.domain().empty() || opset.domain() == "ai.onnx")
      return opset.version();
  return 0;
}

/// Batch and sequence dimension names that torch.onnx.export and common
/// exporters use for dynamic axes.
static bool isBatchName(llvm::StringRef name) {
  std::string lower = name.lower();
  return llvm::is_contained({"batch", "batch_size", "n", "b", "bsz"},
                            lower) ||
         llvm::StringRef(lower).starts_with("batch");
}
static bool isSequenceName(llvm::StringRef name) {
  std::string lower = name.lower();
  return llvm::is_contained(
             {"sequence", "seq", "seq_len", "sequence_length", "s", "t",
              "tokens", "length"},
             lower) ||
         llvm::StringRef(lower).starts_with("seq");
}

/// Turns the graph inputs that `options` gives values for into initializers;
/// returns their names.
static llvm::StringSet<> makeInputsConstant(onnx::GraphProto &graph,
                                            const OnnxImportOptions &options) {
  llvm::StringSet<> made;
  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &init : graph.initializer())
    initializers.insert(init.name());
  size_t position = 0;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    if (initializers.contains(input.name()))
      continue;
    size_t index = position++;
    if (index >= options.constantInputsByPosition.size() ||
        !options.constantInputsByPosition[index])
      continue;
    const OnnxImportOptions::InputValue &value =
        *options.constantInputsByPosition[index];
    made.insert(input.name());
    onnx::TensorProto *tensor = graph.add_initializer();
    tensor->set_name(input.name());
    tensor->set_data_type(value.onnxType);
    for (int64_t d : value.shape)
      tensor->add_dims(d);
    for (double v : value.values) {
      switch (value.onnxType) {
      case onnx::TensorProto::INT64:
        tensor->add_int64_data(static_cast<int64_t>(v));
        break;
      case onnx::TensorProto::INT32:
      case onnx::TensorProto::BOOL:
        tensor->add_int32_data(static_cast<int32_t>(v));
        break;
      case onnx::TensorProto::DOUBLE:
        tensor->add_double_data(v);
        break;
      default:
        tensor->add_float_data(static_cast<float>(v));
      }
    }
  }
  return made;
}

/// Binds the inputs' dimensions. Positions count the graph inputs that are
/// no initializers, those that `folded` names (made constants) included.
static bool bindInputs(onnx::GraphProto &graph,
                       const OnnxImportOptions &options,
                       const llvm::StringSet<> &folded, std::string &error) {
  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &init : graph.initializer())
    initializers.insert(init.name());
  llvm::SmallVector<std::string> unbound;
  // A name that is no input is a typo, not a shape to ignore.
  llvm::SmallVector<std::string> inputs;
  for (const onnx::ValueInfoProto &input : graph.input())
    if (!initializers.contains(input.name()))
      inputs.push_back("'" + input.name() + "'");
  for (const auto &entry : options.inputShapes)
    if (!llvm::any_of(graph.input(), [&](const onnx::ValueInfoProto &input) {
          return input.name() == entry.getKey() &&
                 !initializers.contains(input.name());
        })) {
      error =
          "--input-shape names '" + entry.getKey().str() +
          "', which is not an input of the model (its inputs: " +
          (inputs.empty() ? std::string("none") : llvm::join(inputs, ", ")) +
          ")";
      return false;
    }
  size_t position = 0;
  for (onnx::ValueInfoProto &input : *graph.mutable_input()) {
    if (initializers.contains(input.name())) {
      position += folded.contains(input.name());
      continue;
    }
    if (!input.type().has_tensor_type()) {
      error = "input '" + input.name() + "' is not a tensor";
      return false;
    }
    onnx::TensorShapeProto *shape =
        input.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (options.makeInputsDynamic)
      for (auto [index, dim] : llvm::enumerate(*shape->mutable_dim()))
        dim.set_dim_param(input.name() + "_d" + std::to_string(index));
    const llvm::SmallVector<int64_t> *dims = nullptr;
    llvm::SmallVector<int64_t> resolved;
    std::string source = "--input-shape";
    auto given = options.inputShapes.find(input.name());
    if (given != options.inputShapes.end()) {
      // `batch` and `seq` take the sizes the batch and sequence flags give.
      for (int64_t size : given->second) {
        std::optional<int64_t> bound = size == kBatchDim ? options.batchSize
                                       : size == kSequenceDim
                                           ? options.sequenceLength
                                           : std::optional<int64_t>(size);
        if (!bound) {
          error = "--input-shape for '" + input.name() + "' uses '" +
                  (size == kBatchDim ? "batch" : "seq") + "', but no " +
                  (size == kBatchDim ? "--batch-size" : "--seq-len") +
                  " is given";
          return false;
        }
        resolved.push_back(*bound);
      }
      dims = &resolved;
    } else if (position < options.inputShapesByPosition.size()) {
      dims = &options.inputShapesByPosition[position];
      source = "the input file";
    }
    ++position;
    if (dims) {
      bool ranked = input.type().tensor_type().has_shape();
      if (ranked && shape->dim_size() != static_cast<int>(dims->size())) {
        error = source + " gives " + std::to_string(dims->size()) +
                " dimensions for input '" + input.name() + "' of rank " +
                std::to_string(shape->dim_size());
        return false;
      }
      for (int i = 0; ranked && i < shape->dim_size(); ++i)
        if (shape->dim(i).has_dim_value() &&
            shape->dim(i).dim_value() != (*dims)[i]) {
          error = source + " gives size " + std::to_string((*dims)[i]) +
                  " for dimension " + std::to_string(i) + " of input '" +
                  input.name() + "', which the model fixes at " +
                  std::to_string(shape->dim(i).dim_value());
          return false;
        }
      // A dynamic dimension that --batch-size or --seq-len also binds must
      // agree with the size given here: a contradiction is an error, not a
      // silent choice of one.
      for (int i = 0; ranked && i < shape->dim_size(); ++i) {
        if (shape->dim(i).has_dim_value())
          continue;
        const std::string &name = shape->dim(i).dim_param();
        std::optional<int64_t> flag;
        const char *flagName = "";
        if (options.batchSize && isBatchName(name)) {
          flag = options.batchSize;
          flagName = "--batch-size";
        } else if (options.sequenceLength && isSequenceName(name)) {
          flag = options.sequenceLength;
          flagName = "--seq-len";
        }
        if (flag && *flag != (*dims)[i]) {
          error = std::string(flagName) + " " + std::to_string(*flag) +
                  " contradicts " + source + ", which gives " +
                  std::to_string((*dims)[i]) + " for dimension " +
                  std::to_string(i) + " ('" + name + "') of input '" +
                  input.name() + "'";
          return false;
        }
      }
      shape->clear_dim();
      for (int64_t size : *dims)
        shape->add_dim()->set_dim_value(size);
      continue;
    }
    for (auto [index, dim] : llvm::enumerate(*shape->mutable_dim())) {
      if (dim.has_dim_value())
        continue;
      std::string name = dim.dim_param();
      if (options.batchSize && isBatchName(name)) {
        dim.set_dim_value(*options.batchSize);
        continue;
      }
      if (options.sequenceLength && isSequenceName(name)) {
        dim.set_dim_value(*options.sequenceLength);
        continue;
      }
      unbound.push_back("'" + input.name() + "' dimension " +
                        std::to_string(index) +
                        (name.empty() ? "" : " ('" + name + "')"));
    }
  }
  if (!unbound.empty()) {
    error = "dynamic input dimensions are not bound: " +
            llvm::join(unbound, ", ") +
            "; bind them with --input-shape NAME=DxDx... (or --batch-size / "
            "--seq-len)";
    return false;
  }
  return true;
}

/// What ONNX's checker should see, if not the model itself: its external-data
/// check opens the weight files relative to the working directory, which is
/// wrong for models elsewhere and for planning without the weights. External
/// initializers become graph inputs of the same type; Weft reads their bytes
/// only to run.
static std::optional<onnx::ModelProto>
withoutExternalData(const onnx::ModelProto &proto) {
  auto isExternal = [](const onnx::TensorProto &tensor) {
    return tensor.data_location() == onnx::TensorProto::EXTERNAL;
  };
  if (llvm::none_of(proto.graph().initializer(), isExternal))
    return std::nullopt;
  onnx::ModelProto copy = proto;
  onnx::GraphProto *graph = copy.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (const onnx::TensorProto &tensor : graph->initializer()) {
    if (!isExternal(tensor)) {
      *kept.Add() = tensor;
      continue;
    }
    bool listed = llvm::any_of(graph->input(), [&](const onnx::ValueInfoProto &in) {
      return in.name() == tensor.name();
    });
    if (listed)
      continue;
    onnx::ValueInfoProto *input = graph->add_input();
    input->set_name(tensor.name());
    onnx::TypeProto::Tensor *type = input->mutable_type()->mutable_tensor_type();
    type->set_elem_type(tensor.data_type());
    for (int64_t d : tensor.dims())
      type->mutable_shape()->add_dim()->set_dim_value(d);
  }
  graph->mutable_initializer()->Swap(&kept);
  return copy;
}

//===----------------------------------------------------------------------===//
// Opsets 18-23, read as opset 17
//===----------------------------------------------------------------------===//

/// libonnx 1.12 (Debian 12's) knows opsets up to 17; torch.onnx.export writes
/// 18 since torch 2.5's dynamo exporter. For the ops a transformer uses, the
/// later opsets changed little: reductions take their axes as an input (18),
/// Split gained num_outputs (18), Cast and CastLike a saturate flag for the
/// float8 types (19), Gelu became an op (20), 21 and 22 only added element
/// types, and 23 added element types and the Attention, RMSNormalization and
/// RotaryEmbedding ops. Such a model is rewritten to its opset-17 form; Gelu
/// and opset 23's ops keep their nodes, with schemas that Weft registers
/// (below).
static bool readIntTensor(const onnx::TensorProto &tensor,
                          llvm::SmallVectorImpl<int64_t> &values) {
  if (tensor.data_type() != onnx::TensorProto::INT64 ||
      tensor.data_location() == onnx::TensorProto::EXTERNAL)
    return false;
  if (tensor.has_raw_data()) {
    const std::string &raw = tensor.raw_data();
    if (raw.size() % sizeof(int64_t))
      return false;
    values.resize(raw.size() / sizeof(int64_t));
    std::memcpy(values.data(), raw.data(), raw.size());
    return true;
  }
  values.assign(tensor.int64_data().begin(), tensor.int64_data().end());
  return true;
}

static const std::vector<std::string> kFloatTypes = {
    "tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"};

/// Attention-23's result types and shapes: Y is Q's type, with V's head size
/// (4-D) or q_num_heads V heads (3-D); a cache or score output gets its type.
static void inferAttention(onnx::InferenceContext &ctx) {
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  for (size_t out = 1; out < ctx.getNumOutputs(); ++out)
    onnx::propagateElemTypeFromInputToOutput(ctx, out == 2 ? 2 : 0, out);
  if (!onnx::hasInputShape(ctx, 0) || !onnx::hasInputShape(ctx, 2))
    return;
  const onnx::TensorShapeProto &q = onnx::getInputShape(ctx, 0);
  const onnx::TensorShapeProto &v = onnx::getInputShape(ctx, 2);
  if (q.dim_size() != v.dim_size() || (q.dim_size() != 3 && q.dim_size() != 4))
    fail_shape_inference("Attention's Q and V are both 3-D or both 4-D");
  onnx::TensorShapeProto y = q;
  if (q.dim_size() == 4) {
    *y.mutable_dim(3) = v.dim(3);
  } else {
    int64_t qHeads = onnx::getAttribute(ctx, "q_num_heads", int64_t(0));
    int64_t kvHeads = onnx::getAttribute(ctx, "kv_num_heads", int64_t(0));
    y.mutable_dim(2)->Clear();
    if (qHeads > 0 && kvHeads > 0 && v.dim(2).has_dim_value() &&
        v.dim(2).dim_value() % kvHeads == 0)
      y.mutable_dim(2)->set_dim_value(qHeads *
                                      (v.dim(2).dim_value() / kvHeads));
  }
  onnx::updateOutputShape(ctx, 0, y);
}

/// Schemas of ops newer than opset 17 that the importer converts, registered
/// at version 17 so that ONNX's checker and shape inference accept them in a
/// model read as opset 17: Gelu (opset 20; weft.gelu) and opset 23's
/// Attention (weft.attention), RMSNormalization (weft.rms_norm) and
/// RotaryEmbedding (Weft's elementwise form of it). Their attributes and
/// inputs are ONNX's; what Weft does not import is refused at the node.
static void registerNewerSchemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    using onnx::AttributeProto;
    using onnx::OpSchema;
    auto registered = [](const char *name) {
      return onnx::OpSchemaRegistry::Schema(name, kMaxOnnxOpset, "") != nullptr;
    };
    if (!registered("Gelu"))
      onnx::RegisterSchema(
          OpSchema()
              .SetName("Gelu")
              .SetDomain("")
              .SinceVersion(kMaxOnnxOpset)
              .SetDoc("Opset 20's Gelu, registered by Weft.")
              .Attr("approximate", "none (erf) or tanh", AttributeProto::STRING,
                    std::string("none"))
              .Input(0, "X", "input", "T")
              .Output(0, "Y", "output", "T")
              .TypeConstraint("T", kFloatTypes, "float tensors")
              .TypeAndShapeInferenceFunction(
                  onnx::propagateShapeAndTypeFromFirstInput));
    if (!registered("RMSNormalization"))
      onnx::RegisterSchema(
          OpSchema()
              .SetName("RMSNormalization")
              .SetDomain("")
              .SinceVersion(kMaxOnnxOpset)
              .SetDoc("Opset 23's RMSNormalization, registered by Weft.")
              .Attr("axis", "first normalized dimension", AttributeProto::INT,
                    int64_t(-1))
              .Attr("epsilon", "added to the mean square",
                    AttributeProto::FLOAT, 1e-5f)
              .Attr("stash_type", "precision of the statistics",
                    AttributeProto::INT, int64_t(1))
              .Input(0, "X", "input", "T")
              .Input(1, "scale", "scale", "V")
              .Output(0, "Y", "output", "V")
              .TypeConstraint("T", kFloatTypes, "float tensors")
              .TypeConstraint("V", kFloatTypes, "float tensors")
              .TypeAndShapeInferenceFunction([](onnx::InferenceContext &ctx) {
                onnx::propagateElemTypeFromInputToOutput(ctx, 1, 0);
                onnx::propagateShapeFromInputToOutput(ctx, 0, 0);
              }));
    if (!registered("RotaryEmbedding"))
      onnx::RegisterSchema(
          OpSchema()
              .SetName("RotaryEmbedding")
              .SetDomain("")
              .SinceVersion(kMaxOnnxOpset)
              .SetDoc("Opset 23's RotaryEmbedding, registered by Weft.")
              .Attr("interleaved", "rotate pairs (2i, 2i+1)",
                    AttributeProto::INT, int64_t(0))
              .Attr("num_heads", "heads of a 3-D input", AttributeProto::INT,
                    false)
              .Attr("rotary_embedding_dim", "rotated part of each head",
                    AttributeProto::INT, int64_t(0))
              .Input(0, "X", "input", "T")
              .Input(1, "cos_cache", "cosines", "T")
              .Input(2, "sin_cache", "sines", "T")
              .Input(3, "position_ids", "positions", "M", OpSchema::Optional)
              .Output(0, "Y", "output", "T")
              .TypeConstraint("T", kFloatTypes, "float tensors")
              .TypeConstraint("M", {"tensor(int64)"}, "positions")
              .TypeAndShapeInferenceFunction(
                  onnx::propagateShapeAndTypeFromFirstInput));
    if (!registered("Attention")) {
      std::vector<std::string> maskTypes = kFloatTypes;
      for (const char *type :
           {"tensor(bool)", "tensor(uint8)", "tensor(uint16)", "tensor(uint32)",
            "tensor(uint64)", "tensor(int8)", "tensor(int16)", "tensor(int32)",
            "tensor(int64)"})
        maskTypes.push_back(type);
      onnx::RegisterSchema(
          OpSchema()
              .SetName("Attention")
              .SetDomain("")
              .SinceVersion(kMaxOnnxOpset)
              .SetDoc("Opset 23's Attention, registered by Weft.")
              .Attr("is_causal", "causal mask", AttributeProto::INT, int64_t(0))
              .Attr("kv_num_heads", "KV heads of 3-D inputs",
                    AttributeProto::INT, false)
              .Attr("q_num_heads", "query heads of 3-D inputs",
                    AttributeProto::INT, false)
              .Attr("qk_matmul_output_mode", "what qk_matmul_output holds",
                    AttributeProto::INT, int64_t(0))
              .Attr("scale", "score scale", AttributeProto::FLOAT, false)
              .Attr("softcap", "score cap", AttributeProto::FLOAT, 0.0f)
              .Attr("softmax_precision", "softmax element type",
                    AttributeProto::INT, false)
              .Input(0, "Q", "queries", "T1")
              .Input(1, "K", "keys", "T1")
              .Input(2, "V", "values", "T2")
              .Input(3, "attn_mask", "mask", "U", OpSchema::Optional)
              .Input(4, "past_key", "key cache", "T1", OpSchema::Optional)
              .Input(5, "past_value", "value cache", "T2", OpSchema::Optional)
              .Output(0, "Y", "output", "T1")
              .Output(1, "present_key", "key cache", "T1", OpSchema::Optional)
              .Output(2, "present_value", "value cache", "T2",
                      OpSchema::Optional)
              .Output(3, "qk_matmul_output", "scores", "T1", OpSchema::Optional)
              .TypeConstraint("T1", kFloatTypes, "float tensors")
              .TypeConstraint("T2", kFloatTypes, "float tensors")
              .TypeConstraint("U", maskTypes, "bool or numeric masks")
              .TypeAndShapeInferenceFunction(inferAttention));
    }
  });
}

/// ConstantOfShape takes a bfloat16 value from opset 20 on, but torch's
/// TorchScript exporter writes one at any opset for a bfloat16 model (HF
/// GPT-2's mask value, torch.full), which opset 17's schema and so shape
/// inference refuse. Each becomes the same constant in f32, cast to
/// bfloat16: exact, as every bfloat16 is an f32.
static void castBf16ConstantOfShape(onnx::GraphProto &graph) {
  llvm::StringSet<> names;
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &output : node.output())
      names.insert(output);
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (onnx::NodeProto &node : *graph.mutable_node()) {
    onnx::AttributeProto *value = nullptr;
    if (node.op_type() == "ConstantOfShape" &&
        (node.domain().empty() || node.domain() == "ai.onnx") &&
        node.output_size() == 1 && !node.output(0).empty())
      for (onnx::AttributeProto &attr : *node.mutable_attribute())
        if (attr.name() == "value" && attr.has_t() &&
            attr.t().data_type() == onnx::TensorProto::BFLOAT16)
          value = &attr;
    uint32_t bits = 0;
    bool readable = false;
    if (value) {
      // One element: in raw_data (2 bytes, little-endian) or, as ONNX
      // stores 16-bit types, in the low bits of int32_data.
      const onnx::TensorProto &tensor = value->t();
      if (tensor.raw_data().size() == 2) {
        bits = uint8_t(tensor.raw_data()[0]) |
               uint32_t(uint8_t(tensor.raw_data()[1])) << 8;
        readable = true;
      } else if (tensor.int32_data_size() == 1) {
        bits = uint32_t(tensor.int32_data(0)) & 0xFFFF;
        readable = true;
      }
    }
    if (!readable) {
      *nodes.Add() = std::move(node);
      continue;
    }
    uint32_t wide = bits << 16;
    float f32;
    std::memcpy(&f32, &wide, sizeof(f32));
    onnx::TensorProto &tensor = *value->mutable_t();
    tensor.clear_raw_data();
    tensor.clear_int32_data();
    tensor.set_data_type(onnx::TensorProto::FLOAT);
    tensor.add_float_data(f32);
    std::string output = node.output(0);
    std::string wider = output + "/f32";
    for (int suffix = 1; names.contains(wider); ++suffix)
      wider = output + "/f32_" + std::to_string(suffix);
    names.insert(wider);
    node.set_output(0, wider);
    onnx::NodeProto cast;
    cast.set_op_type("Cast");
    cast.set_name(node.name().empty() ? "" : node.name() + "/bf16");
    cast.add_input(wider);
    cast.add_output(output);
    onnx::AttributeProto *to = cast.add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::BFLOAT16);
    *nodes.Add() = std::move(node);
    *nodes.Add() = std::move(cast);
  }
  graph.mutable_node()->Swap(&nodes);
}

static bool downgradeToOpset17(onnx::ModelProto &proto, int64_t opset,
                               std::string &error) {
  onnx::GraphProto &graph = *proto.mutable_graph();
  llvm::StringMap<const onnx::TensorProto *> constants;
  for (const onnx::TensorProto &tensor : graph.initializer())
    constants[tensor.name()] = &tensor;
  for (const onnx::NodeProto &node : graph.node())
    if (node.op_type() == "Constant" && node.output_size() == 1)
      for (const onnx::AttributeProto &attr : node.attribute())
        if (attr.name() == "value" && attr.has_t())
          constants[node.output(0)] = &attr.t();
  static const llvm::StringSet<> reductions = {
      "ReduceMax",    "ReduceMean",      "ReduceMin",
      "ReduceProd",   "ReduceL1",        "ReduceL2",
      "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  // Ops whose meaning (not only their element types) changed after opset 17
  // and that are not rewritten here; Weft imports none of them.
  static const llvm::StringSet<> changed = {"Resize",
                                            "ScatterElements",
                                            "GroupNormalization",
                                            "CenterCropPad",
                                            "Col2Im",
                                            "BitwiseAnd",
                                            "BitwiseNot",
                                            "BitwiseOr",
                                            "BitwiseXor",
                                            "LpPool",
                                            "Mish",
                                            "AveragePool",
                                            "DeformConv",
                                            "QuantizeLinear",
                                            "DequantizeLinear",
                                            "QLinearMatMul",
                                            "AffineGrid",
                                            "DFT",
                                            "GridSample",
                                            "ImageDecoder",
                                            "IsInf",
                                            "IsNaN",
                                            "RegexFullMatch",
                                            "StringConcat",
                                            "StringSplit",
                                            "OptionalGetElement",
                                            "OptionalHasElement"};
  auto removeAttr = [](onnx::NodeProto &node, llvm::StringRef name,
                       onnx::AttributeProto *taken = nullptr) {
    auto *attrs = node.mutable_attribute();
    for (int i = 0; i < attrs->size(); ++i)
      if (attrs->Get(i).name() == name) {
        if (taken)
          *taken = attrs->Get(i);
        attrs->DeleteSubrange(i, 1);
        return true;
      }
    return false;
  };
  auto where = [](const onnx::NodeProto &node, int index) {
    return node.name().empty() ? "node #" + std::to_string(index)
                               : "'" + node.name() + "'";
  };
  llvm::SmallVector<std::string> refused;
  llvm::StringSet<> refusedTypes;
  for (auto [index, node] : llvm::enumerate(*graph.mutable_node())) {
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      continue;
    llvm::StringRef type = node.op_type();
    if (reductions.contains(type)) {
      onnx::AttributeProto noop;
      bool keepIfEmpty =
          removeAttr(node, "noop_with_empty_axes", &noop) && noop.i() != 0;
      llvm::SmallVector<int64_t> axes;
      if (node.input_size() >= 2 && !node.input(1).empty()) {
        auto it = constants.find(node.input(1));
        if (it == constants.end() || !readIntTensor(*it->second, axes)) {
          error = "opset " + std::to_string(opset) + " " + type.str() + " " +
                  where(node, index) +
                  " takes its axes from a computed value; Weft reads "
                  "reductions over constant axes (export with "
                  "opset_version=17, or make the axes a constant)";
          return false;
        }
      }
      if (node.input_size() > 1)
        node.mutable_input()->DeleteSubrange(1, node.input_size() - 1);
      if (!axes.empty()) {
        onnx::AttributeProto *attr = node.add_attribute();
        attr->set_name("axes");
        attr->set_type(onnx::AttributeProto::INTS);
        for (int64_t axis : axes)
          attr->add_ints(axis);
      } else if (keepIfEmpty) {
        // No axes and noop_with_empty_axes: the identity.
        node.set_op_type("Identity");
        node.clear_attribute();
      }
      // (No axes otherwise: every dimension, as opset 17 without the
      // attribute.)
      continue;
    }
    if (type == "Split") {
      // Without a `split` input, opset 17 splits into equal parts, as 18 does
      // with num_outputs when the size divides (ONNX's shape inference
      // refuses the rest).
      removeAttr(node, "num_outputs");
      continue;
    }
    if (type == "Cast" || type == "CastLike") {
      removeAttr(node, "saturate");
      continue;
    }
    if (type == "Pad") {
      // Opset 18 added the axes input and 19 the wrap mode; without them a
      // Pad means what opset 17's does.
      bool wrap = llvm::any_of(node.attribute(), [](const auto &attr) {
        return attr.name() == "mode" && attr.s() == "wrap";
      });
      if (!wrap && (node.input_size() < 4 || node.input(3).empty()))
        continue;
      if (refusedTypes.insert("Pad with axes or wrap").second)
        refused.push_back("Pad with an axes input or mode 'wrap', which "
                          "opsets 18 and 19 added (e.g. " +
                          where(node, index) +
                          "; pad every axis in constant mode)");
      continue;
    }
    if (type == "ScatterND") {
      // Opset 18 added the reductions max and min, which Weft imports as
      // it does opset 16's add and mul.
      continue;
    }
    if (changed.contains(type) && refusedTypes.insert(type).second)
      refused.push_back(type.str() + " (e.g. " + where(node, index) + ")");
  }
  if (!refused.empty()) {
    error =
        "the model uses " + std::to_string(refused.size()) +
        " op type(s) that Weft does not import: " + llvm::join(refused, ", ");
    return false;
  }
  for (onnx::OperatorSetIdProto &id : *proto.mutable_opset_import())
    if (id.domain().empty() || id.domain() == "ai.onnx")
      id.set_version(kMaxOnnxOpset);
  registerNewerSchemas();
  return true;
}

/// Runs `fn`, a call into ONNX's library, so that neither its exceptions nor
/// its crashes escape: libonnx 1.12's shape inference dereferences missing
/// types on some malformed models (found by the importer's fuzzer). A crash
/// becomes an error message; the model is not used afterwards.
static bool callOnnx(llvm::function_ref<void()> fn, const std::string &what,
                     std::string &error) {
  llvm::CrashRecoveryContext::Enable();
  llvm::CrashRecoveryContext recovery;
  std::string thrown;
  bool completed = recovery.RunSafely([&] {
    try {
      fn();
    } catch (const std::exception &e) {
      thrown = e.what();
    }
  });
  if (!completed) {
    error = what + " crashed inside ONNX's library on this model; the model is "
                   "malformed (check it with onnx.checker and "
                   "onnx.shape_inference)";
    return false;
  }
  if (!thrown.empty()) {
    error = what + " failed: " + thrown;
    return false;
  }
  return true;
}

bool weft::loadOnnxModel(llvm::StringRef path,
                         const OnnxImportOptions &options, OnnxModel &model,
                         std::string &error) {
  if (!readModel(path, model.proto, error))
    return false;
  if (!inlineLocalFunctions(model.proto, error))
    return false;
  // libonnx 1.12's checker reads IR version 8. Versions 9 and 10 added the
  // float8 and 4-bit element types, which Weft does not import either (the
  // checker refuses them), function overloads and attribute defaults, which
  // inlining has removed, and node metadata, read as unknown fields. onnx's
  // make_model writes the newest IR version whatever the opset.
  if (model.proto.ir_version() > onnx::IR_VERSION)
    model.proto.set_ir_version(onnx::IR_VERSION);
  int64_t exported = getDefaultOpset(model.proto);
  if (exported > kMaxOnnxOpset) {
    if (exported > kMaxReadOnnxOpset) {
      error =
          "opset " + std::to_string(exported) + " is newer than Weft reads (" +
          std::to_string(kMinOnnxOpset) + "-" +
          std::to_string(kMaxReadOnnxOpset) +
          "); export with opset_version=" + std::to_string(kMaxReadOnnxOpset) +
          " or lower";
      return false;
    }
    if (!downgradeToOpset17(model.proto, exported, error))
      return false;
  }
  castBf16ConstantOfShape(*model.proto.mutable_graph());
  try {
    std::optional<onnx::ModelProto> checked = withoutExternalData(model.proto);
    onnx::checker::check_model(checked ? *checked : model.proto);
  } catch (const std::exception &e) {
    error = std::string("not a valid ONNX model: ") + e.what();
    return false;
  }
  model.opset = getDefaultOpset(model.proto);
  llvm::StringSet<> folded =
      makeInputsConstant(*model.proto.mutable_graph(), options);
  if (!bindInputs(*model.proto.mutable_graph(), options, folded, error))
    return false;
  if (model.opset < kMinOnnxOpset) {
    std::string why;
    bool upgraded = callOnnx(
        [&] {
          // Some adapters (Softmax 12 -> 13) need shapes: infer them first.
          onnx::shape_inference::InferShapes(model.proto);
          model.proto = onnx::version_conversion::ConvertVersion(model.proto,
                                                                 kMinOnnxOpset);
        },
        "the version converter", why);
    if (!upgraded) {
      error = "cannot upgrade opset " + std::to_string(model.opset) + " to " +
              std::to_string(kMinOnnxOpset) + ": " + why +
              "; re-export with opset_version between " +
              std::to_string(kMinOnnxOpset) + " and " +
              std::to_string(kMaxOnnxOpset);
      return false;
    }
    model.opset = kMinOnnxOpset;
  }
  return inferOnnxShapes(model, error);
}

bool weft::inferOnnxShapes(OnnxModel &model, std::string &error) {
  // ONNX refuses to propagate a value it already holds.
  model.shapeData.clear();
  return callOnnx(
      [&] {
        onnx::ShapeInferenceOptions inference(/*check_type=*/true,
                                              /*strict_mode=*/1,
                                              /*data_prop=*/true);
        onnx::shape_inference::InferShapes(model.proto,
                                           onnx::OpSchemaRegistry::Instance(),
                                           inference, &model.shapeData);
      },
      "ONNX shape inference", error);
}

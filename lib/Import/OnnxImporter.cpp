//===- OnnxImporter.cpp - ONNX graph to weft ops --------------------------===//
//
// Part of the Weft project.
//
// Converts an OnnxModel (static, shape-inferred) node by node. Values whose
// contents are known at import time (initializers needed as shapes, Constant,
// Shape, ConstantOfShape, Range, and whatever ONNX's data propagation
// computed) are kept as attributes and only materialized as weft.constant
// when an op consumes them as data, so shape subgraphs disappear.
//
//===----------------------------------------------------------------------===//

#include "OnnxModel.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Exec/Interpreter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include "google/protobuf/unknown_field_set.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

using namespace mlir;
using namespace weft;

namespace {

/// Converts ONNX element types to the weft ones; null for unsupported types.
Type convertElementType(int32_t dataType, MLIRContext *context) {
  Builder b(context);
  switch (dataType) {
  case onnx::TensorProto::FLOAT:
    return b.getF32Type();
  case onnx::TensorProto::DOUBLE:
    return b.getF64Type();
  case onnx::TensorProto::FLOAT16:
    return b.getF16Type();
  case onnx::TensorProto::BFLOAT16:
    return b.getBF16Type();
  case onnx::TensorProto::INT64:
    return b.getI64Type();
  case onnx::TensorProto::INT32:
    return b.getI32Type();
  case onnx::TensorProto::BOOL:
    return b.getI1Type();
  default:
    return {};
  }
}

/// Whether a constant of this ONNX type is read widened to i32: the 8- and
/// 16-bit integers, which Weft's element types do not have but whose values
/// i32 holds exactly (torch's uint8 mask buffers: GPT-2's `attn.bias` before
/// transformers 4.27).
static bool isWidenedInteger(int32_t dataType) {
  return dataType == onnx::TensorProto::UINT8 ||
         dataType == onnx::TensorProto::INT8 ||
         dataType == onnx::TensorProto::UINT16 ||
         dataType == onnx::TensorProto::INT16;
}

std::string dataTypeName(int32_t dataType) {
  return onnx::TensorProto::DataType_Name(
      static_cast<onnx::TensorProto::DataType>(dataType));
}

class GraphImporter {
public:
  GraphImporter(OnnxModel &model, llvm::StringRef path,
                const OnnxImportOptions &options, MLIRContext *context)
      : model(model), graph(model.proto.graph()), path(path),
        options(options), context(context), builder(context) {}

  OwningOpRef<ModuleOp> run();

private:
  using Handler = std::function<LogicalResult(const onnx::NodeProto &)>;

  // Setup.
  /// Refuses, in one diagnostic, the op types of `nodes` that have no
  /// handler; `where` says where they are ("the model", a branch).
  LogicalResult checkSupported(
      const google::protobuf::RepeatedPtrField<onnx::NodeProto> &nodes,
      llvm::StringRef where);
  void collectValueInfo();
  LogicalResult checkDeclaredShapes();
  LogicalResult importInitializers();
  LogicalResult importNode(const onnx::NodeProto &node, int index);
  /// Locates the diagnostics and ops of node #index at its name.
  void setLocation(const onnx::NodeProto &node, int index);
  /// Replaces If node #index, whose condition the shapes fix, by the nodes of
  /// the branch it takes.
  LogicalResult inlineIf(int index);

  // Values.
  InFlightDiagnostic error() { return emitError(loc); }
  Value input(const onnx::NodeProto &node, int index);
  bool hasInput(const onnx::NodeProto &node, int index) {
    return index < node.input_size() && !node.input(index).empty();
  }
  std::optional<DenseElementsAttr> constantInput(const onnx::NodeProto &node,
                                                 int index);
  FailureOr<SmallVector<int64_t>> intsInput(const onnx::NodeProto &node,
                                            int index, llvm::StringRef what);
  FailureOr<RankedTensorType> outputType(const onnx::NodeProto &node,
                                         int index = 0);
  /// The type ONNX inferred for an output, if it inferred a static one.
  std::optional<RankedTensorType> knownOutputType(const onnx::NodeProto &node,
                                                  int index = 0);
  /// Evaluates the ops just built for `node`, whose inputs are all constants,
  /// and keeps its outputs as constants instead.
  LogicalResult foldNode(const onnx::NodeProto &node,
                         ArrayRef<Operation *> created);
  void setOutput(const onnx::NodeProto &node, int index, Value value) {
    values[node.output(index)] = value;
  }
  void setConstant(const std::string &name, DenseElementsAttr value) {
    constants[name] = value;
  }
  /// Initializers made constants as fixed position buffers (the module's
  /// `weft.fixed_buffers`).
  SmallVector<std::string> fixedBuffers;
  FailureOr<DenseElementsAttr> tensorToAttr(const onnx::TensorProto &tensor,
                                            llvm::StringRef what);
  FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank);
  Value materialize(DenseElementsAttr value) {
    return ConstantOp::create(builder, loc, value);
  }
  /// Creates an OpTy with the result types its own inference computes. Unlike
  /// the inferring builders, which abort when operands do not fit (a model
  /// that ONNX's checks let through), a misfit is a diagnostic at the node:
  /// the node fails and the value is null.
  template <typename OpTy, typename... Args> Value createChecked(Args &&...args) {
    OperationState state(loc, OpTy::getOperationName());
    OpTy::build(builder, state, Type(NoneType::get(context)),
                std::forward<Args>(args)...);
    SmallVector<Type> types;
    if (llvm::any_of(state.operands, [](Value v) { return !v; }) ||
        failed(OpTy::inferReturnTypes(
            context, loc, state.operands, state.attributes.getDictionary(context),
            state.getRawProperties(), state.regions, types))) {
      nodeFailed = true;
      return {};
    }
    state.types.assign(types.begin(), types.end());
    return builder.create(state)->getResult(0);
  }

  // Attributes.
  const onnx::AttributeProto *attribute(const onnx::NodeProto &node,
                                        llvm::StringRef name);
  int64_t intAttr(const onnx::NodeProto &node, llvm::StringRef name,
                  int64_t fallback);
  float floatAttr(const onnx::NodeProto &node, llvm::StringRef name,
                  float fallback);
  std::optional<SmallVector<int64_t>> intsAttr(const onnx::NodeProto &node,
                                               llvm::StringRef name);

  // Op conversions.
  void registerHandlers();
  template <typename OpTy> void addBinary(llvm::StringRef opType);
  template <typename OpTy> void addUnary(llvm::StringRef opType);
  void addCompare(llvm::StringRef opType, ComparePredicate predicate);
  /// A Reduce* node's axes (sorted, non-negative) and keepdims; none where
  /// the node reduces nothing (noop_with_empty_axes, a scalar).
  struct Reduction {
    SmallVector<int64_t> axes;
    bool keepDims;
  };
  FailureOr<std::optional<Reduction>> reduction(const onnx::NodeProto &node,
                                                int64_t rank);
  template <typename OpTy> void addReduce(llvm::StringRef opType);
  void addComposedReductions();
  void addComposedElementwise();
  LogicalResult importTile(const onnx::NodeProto &node);
  LogicalResult importArgExtreme(const onnx::NodeProto &node);
  LogicalResult importMod(const onnx::NodeProto &node);
  template <typename OpTy> void addSoftmax(llvm::StringRef opType);
  LogicalResult importMatMul(const onnx::NodeProto &node);
  LogicalResult importGemm(const onnx::NodeProto &node);
  LogicalResult importReshapeLike(const onnx::NodeProto &node);
  LogicalResult importSlice(const onnx::NodeProto &node);
  LogicalResult importPad(const onnx::NodeProto &node);
  /// `data` between constant blocks of `fill` (`pads` as ONNX's Pad takes
  /// them: every axis's start, then every axis's end; negative ones crop).
  Value padConstant(Value data, ArrayRef<int64_t> pads, Attribute fill);
  LogicalResult importConv(const onnx::NodeProto &node);
  LogicalResult importScatterND(const onnx::NodeProto &node);
  Value replaceBox(Value data, ArrayRef<int64_t> lo, ArrayRef<int64_t> hi,
                   Value block, size_t axis);
  LogicalResult importGatherElements(const onnx::NodeProto &node);
  LogicalResult importSplit(const onnx::NodeProto &node);
  LogicalResult importConstant(const onnx::NodeProto &node);
  LogicalResult importEinsum(const onnx::NodeProto &node);
  LogicalResult importUnaryEinsum(const onnx::NodeProto &node,
                                  const std::string &equation);
  LogicalResult importDropout(const onnx::NodeProto &node);
  /// SoftmaxCrossEntropyLoss of `scores` (its input 0), and
  /// NegativeLogLikelihoodLoss of a LogSoftmax's input: weft.cross_entropy;
  /// with class weights, or the likelihood (`logProbs`) of other
  /// log-probabilities, weft ops per position.
  LogicalResult importCrossEntropy(const onnx::NodeProto &node, Value scores,
                                   bool logProbs = false);
  LogicalResult importAttention(const onnx::NodeProto &node);
  LogicalResult importRmsNormalization(const onnx::NodeProto &node);
  LogicalResult importRotaryEmbedding(const onnx::NodeProto &node);
  /// [batch, seq, heads * dim] as [batch, heads, seq, dim], and back.
  Value splitHeads(Value value, int64_t heads);
  /// Whether a node or the graph's outputs read the value `name`.
  bool isRead(const std::string &name) const;
  Value mergeHeads(Value value);

  OnnxModel &model;
  const onnx::GraphProto &graph;
  std::string path;
  const OnnxImportOptions &options;
  MLIRContext *context;
  OpBuilder builder;
  Location loc = UnknownLoc::get(context);

  llvm::StringMap<Handler> handlers;
  llvm::StringMap<const onnx::TypeProto *> valueTypes;
  llvm::StringMap<Value> values;
  llvm::StringMap<DenseElementsAttr> constants;
  /// Set when an op of the current node could not be created.
  bool nodeFailed = false;
};

//===----------------------------------------------------------------------===//
// Values and attributes
//===----------------------------------------------------------------------===//

/// The most elements a tensor of an imported model may declare: far above
/// any real tensor (2^48 f32 values are a petabyte), far below where element
/// counts and byte sizes overflow int64.
static constexpr int64_t kMaxTensorElements = int64_t(1) << 48;
/// The most values a Range folds into (positions of a 16M-token sequence).
static constexpr int64_t kMaxRangeElements = int64_t(1) << 24;

/// The element count of `dims`, or -1 when a dimension is negative or the
/// count exceeds kMaxTensorElements.
static int64_t boundedElementCount(ArrayRef<int64_t> dims) {
  int64_t count = rt::checkedNumElements(rt::Shape(dims.begin(), dims.end()));
  return count > kMaxTensorElements ? -1 : count;
}

static std::string dimsText(ArrayRef<int64_t> dims) {
  std::string text = "[";
  for (auto [i, d] : llvm::enumerate(dims))
    text += (i ? ", " : "") + std::to_string(d);
  return text + "]";
}

/// Every shape the file declares (inputs, outputs, value infos that shape
/// inference wrote, initializers) is checked before any is used to size
/// anything: a negative dimension or an element count that would overflow
/// is an error naming the value.
LogicalResult GraphImporter::checkDeclaredShapes() {
  Location fileLoc = FileLineColLoc::get(context, path, 0, 0);
  auto check = [&](ArrayRef<int64_t> dims, const std::string &name,
                   const char *what) -> LogicalResult {
    if (boundedElementCount(dims) >= 0)
      return success();
    return emitError(fileLoc)
           << what << " '" << name << "' declares shape " << dimsText(dims)
           << ", which has a negative dimension or more than 2^48 elements";
  };
  for (const auto *list :
       {&graph.input(), &graph.value_info(), &graph.output()})
    for (const onnx::ValueInfoProto &info : *list) {
      if (!info.type().has_tensor_type() ||
          !info.type().tensor_type().has_shape())
        continue;
      SmallVector<int64_t> dims;
      for (const auto &dim : info.type().tensor_type().shape().dim())
        if (dim.has_dim_value())
          dims.push_back(dim.dim_value());
      if (failed(check(dims, info.name(), "value")))
        return failure();
    }
  for (const onnx::TensorProto &tensor : graph.initializer()) {
    SmallVector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
    if (failed(check(dims, tensor.name(), "initializer")))
      return failure();
  }
  return success();
}

void GraphImporter::collectValueInfo() {
  for (const auto *list : {&graph.input(), &graph.value_info(), &graph.output()})
    for (const onnx::ValueInfoProto &info : *list)
      valueTypes[info.name()] = &info.type();
}

FailureOr<RankedTensorType> GraphImporter::outputType(const onnx::NodeProto &node,
                                                      int index) {
  const std::string &name = node.output(index);
  auto it = valueTypes.find(name);
  if (it == valueTypes.end() || !it->second->has_tensor_type() ||
      !it->second->tensor_type().has_shape())
    return error() << "ONNX shape inference gave no shape for output '" << name
                   << "'";
  const onnx::TypeProto::Tensor &tensor = it->second->tensor_type();
  Type element = convertElementType(tensor.elem_type(), context);
  if (!element)
    return error() << "output '" << name << "' has element type "
                   << dataTypeName(tensor.elem_type())
                   << ", which Weft does not support (f32, f64, f16, bf16, i64, "
                      "i32, bool)";
  SmallVector<int64_t> shape;
  for (const onnx::TensorShapeProto::Dimension &dim : tensor.shape().dim()) {
    if (!dim.has_dim_value())
      return error() << "output '" << name
                     << "' has a dynamic dimension after shape inference; bind "
                        "the model's dynamic inputs with --input-shape";
    shape.push_back(dim.dim_value());
  }
  return RankedTensorType::get(shape, element);
}

std::optional<RankedTensorType>
GraphImporter::knownOutputType(const onnx::NodeProto &node, int index) {
  auto it = valueTypes.find(node.output(index));
  if (it == valueTypes.end() || !it->second->has_tensor_type() ||
      !it->second->tensor_type().has_shape())
    return std::nullopt;
  const onnx::TypeProto::Tensor &tensor = it->second->tensor_type();
  Type element = convertElementType(tensor.elem_type(), context);
  if (!element)
    return std::nullopt;
  SmallVector<int64_t> shape;
  for (const onnx::TensorShapeProto::Dimension &dim : tensor.shape().dim()) {
    if (!dim.has_dim_value())
      return std::nullopt;
    shape.push_back(dim.dim_value());
  }
  return RankedTensorType::get(shape, element);
}

Value GraphImporter::input(const onnx::NodeProto &node, int index) {
  if (!hasInput(node, index))
    return {};
  const std::string &name = node.input(index);
  auto it = values.find(name);
  if (it != values.end())
    return it->second;
  auto constant = constants.find(name);
  if (constant == constants.end())
    return {};
  // Not cached: a folded node erases the constants it used.
  return materialize(constant->second);
}

std::optional<DenseElementsAttr>
GraphImporter::constantInput(const onnx::NodeProto &node, int index) {
  if (!hasInput(node, index))
    return std::nullopt;
  auto it = constants.find(node.input(index));
  if (it == constants.end())
    return std::nullopt;
  return it->second;
}

FailureOr<SmallVector<int64_t>>
GraphImporter::intsInput(const onnx::NodeProto &node, int index,
                         llvm::StringRef what) {
  std::optional<DenseElementsAttr> value = constantInput(node, index);
  if (!value || !isa<IntegerType>(value->getElementType()))
    return error() << what << " (input " << index
                   << ") must be a constant integer tensor known at import "
                      "time; Weft needs static shapes";
  SmallVector<int64_t> ints;
  for (const APInt &v : value->getValues<APInt>())
    ints.push_back(v.getSExtValue());
  return ints;
}

FailureOr<int64_t> GraphImporter::normalizeAxis(int64_t axis, int64_t rank) {
  // A scalar has no axis: callers index the shape with the result (a
  // Gather or Slice of a scalar whose rank ONNX could not see once read
  // past it).
  if (axis < -rank || axis >= rank)
    return error() << "axis " << axis << " is out of range for rank " << rank;
  return axis < 0 ? axis + rank : axis;
}

const onnx::AttributeProto *
GraphImporter::attribute(const onnx::NodeProto &node, llvm::StringRef name) {
  for (const onnx::AttributeProto &attr : node.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

int64_t GraphImporter::intAttr(const onnx::NodeProto &node,
                               llvm::StringRef name, int64_t fallback) {
  const onnx::AttributeProto *attr = attribute(node, name);
  return attr ? attr->i() : fallback;
}

float GraphImporter::floatAttr(const onnx::NodeProto &node,
                               llvm::StringRef name, float fallback) {
  const onnx::AttributeProto *attr = attribute(node, name);
  return attr ? attr->f() : fallback;
}

std::optional<SmallVector<int64_t>>
GraphImporter::intsAttr(const onnx::NodeProto &node, llvm::StringRef name) {
  const onnx::AttributeProto *attr = attribute(node, name);
  if (!attr)
    return std::nullopt;
  return SmallVector<int64_t>(attr->ints().begin(), attr->ints().end());
}

FailureOr<DenseElementsAttr>
GraphImporter::tensorToAttr(const onnx::TensorProto &tensor,
                            llvm::StringRef what) {
  int32_t dataType = tensor.data_type();
  bool widened = isWidenedInteger(dataType);
  Type element =
      widened ? builder.getI32Type() : convertElementType(dataType, context);
  if (!element)
    return error() << what << " '" << tensor.name() << "' has element type "
                   << dataTypeName(tensor.data_type())
                   << ", which Weft does not support";
  SmallVector<int64_t> shape(tensor.dims().begin(), tensor.dims().end());
  if (boundedElementCount(shape) < 0)
    return error() << what << " '" << tensor.name() << "' declares shape "
                   << dimsText(shape)
                   << ", which has a negative dimension or more than 2^48 "
                      "elements";
  auto type = RankedTensorType::get(shape, element);
  int64_t count = type.getNumElements();
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL)
    return error() << what << " '" << tensor.name()
                   << "' is stored as external data, but its value is needed "
                      "at import time";
  if (widened) {
    // Raw bytes of the narrow type, or (as ONNX stores them) int32_data.
    bool isSigned = dataType == onnx::TensorProto::INT8 ||
                    dataType == onnx::TensorProto::INT16;
    int64_t width = dataType == onnx::TensorProto::UINT8 ||
                            dataType == onnx::TensorProto::INT8
                        ? 1
                        : 2;
    SmallVector<int32_t> values;
    if (tensor.has_raw_data()) {
      const std::string &raw = tensor.raw_data();
      if (static_cast<int64_t>(raw.size()) != count * width)
        return error() << what << " '" << tensor.name() << "' has "
                       << raw.size() << " bytes of data for " << count << " "
                       << dataTypeName(dataType) << " values";
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits = static_cast<uint8_t>(raw[i * width]);
        if (width == 2)
          bits |= uint16_t(static_cast<uint8_t>(raw[i * width + 1])) << 8;
        values.push_back(!isSigned    ? int32_t(bits)
                         : width == 1 ? int32_t(int8_t(bits))
                                      : int32_t(int16_t(bits)));
      }
    } else {
      if (tensor.int32_data_size() != count)
        return error() << what << " '" << tensor.name() << "' has "
                       << tensor.int32_data_size() << " values for " << type;
      values.assign(tensor.int32_data().begin(), tensor.int32_data().end());
    }
    return DenseElementsAttr::get(type, ArrayRef<int32_t>(values));
  }
  if (tensor.has_raw_data()) {
    const std::string &raw = tensor.raw_data();
    int64_t width = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    if (static_cast<int64_t>(raw.size()) != count * width)
      return error() << what << " '" << tensor.name() << "' has "
                     << raw.size() << " bytes of data for " << type;
    if (element.isInteger(1)) {
      SmallVector<bool> bits;
      for (char byte : raw)
        bits.push_back(byte != 0);
      return DenseElementsAttr::get(type, bits);
    }
    return DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>(raw.data(), raw.size()));
  }
  auto checkCount = [&](int64_t size) -> LogicalResult {
    if (size != count)
      return error() << what << " '" << tensor.name() << "' has " << size
                     << " values for " << type;
    return success();
  };
  switch (tensor.data_type()) {
  case onnx::TensorProto::FLOAT: {
    if (failed(checkCount(tensor.float_data_size())))
      return failure();
    return DenseElementsAttr::get(
        type, ArrayRef<float>(tensor.float_data().data(), count));
  }
  case onnx::TensorProto::DOUBLE: {
    if (failed(checkCount(tensor.double_data_size())))
      return failure();
    return DenseElementsAttr::get(
        type, ArrayRef<double>(tensor.double_data().data(), count));
  }
  case onnx::TensorProto::INT64: {
    if (failed(checkCount(tensor.int64_data_size())))
      return failure();
    return DenseElementsAttr::get(
        type, ArrayRef<int64_t>(tensor.int64_data().data(), count));
  }
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL:
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16: {
    // These are stored widened in int32_data (the 16-bit floats as bits).
    if (failed(checkCount(tensor.int32_data_size())))
      return failure();
    SmallVector<APInt> ints;
    unsigned width = type.getElementTypeBitWidth();
    for (int32_t v : tensor.int32_data())
      ints.push_back(APInt(width, static_cast<uint64_t>(v), /*isSigned=*/true,
                           /*implicitTrunc=*/true));
    if (isa<FloatType>(element)) {
      SmallVector<APFloat> floats;
      for (const APInt &bits : ints)
        floats.emplace_back(cast<FloatType>(element).getFloatSemantics(),
                            bits);
      return DenseElementsAttr::get(type, floats);
    }
    return DenseElementsAttr::get(type, ints);
  }
  default:
    return error() << what << " '" << tensor.name() << "' has no data";
  }
}

//===----------------------------------------------------------------------===//
// Op conversions
//===----------------------------------------------------------------------===//

template <typename OpTy>
void GraphImporter::addBinary(llvm::StringRef opType) {
  handlers[opType] = [this](const onnx::NodeProto &node) -> LogicalResult {
    // Max and Min take one or more inputs (numpy-broadcast, folded left to
    // right); the others exactly two.
    bool variadic = node.op_type() == "Max" || node.op_type() == "Min";
    if (variadic ? node.input_size() < 1 : node.input_size() != 2)
      return error() << node.op_type() << " takes "
                     << (variadic ? "one or more inputs" : "two inputs")
                     << ", not " << node.input_size();
    Value result = input(node, 0);
    for (int i = 1; i < node.input_size() && result; ++i) {
      Value rhs = input(node, i);
      if (!rhs)
        return failure();
      auto lhsType = cast<RankedTensorType>(result.getType());
      auto rhsType = cast<RankedTensorType>(rhs.getType());
      // ONNX Pow takes an exponent of any numeric type; weft's has the base's.
      if (lhsType.getElementType() != rhsType.getElementType())
        rhs = CastOp::create(builder, loc,
                             rhsType.clone(lhsType.getElementType()), rhs);
      result = createChecked<OpTy>(result, rhs);
    }
    if (!result)
      return failure();
    setOutput(node, 0, result);
    return success();
  };
}

template <typename OpTy>
void GraphImporter::addUnary(llvm::StringRef opType) {
  handlers[opType] = [this](const onnx::NodeProto &node) -> LogicalResult {
    setOutput(node, 0, OpTy::create(builder, loc, input(node, 0)));
    return success();
  };
}

void GraphImporter::addCompare(llvm::StringRef opType,
                               ComparePredicate predicate) {
  handlers[opType] = [this,
                      predicate](const onnx::NodeProto &node) -> LogicalResult {
    setOutput(node, 0,
              createChecked<CompareOp>(predicate, input(node, 0), input(node, 1)));
    return success();
  };
}

/// Softmax and LogSoftmax from opset 13 on: one axis, -1 by default.
template <typename OpTy>
void GraphImporter::addSoftmax(llvm::StringRef opType) {
  handlers[opType] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    FailureOr<int64_t> axis = normalizeAxis(
        intAttr(node, "axis", -1), cast<RankedTensorType>(data.getType()).getRank());
    if (failed(axis))
      return failure();
    setOutput(node, 0, OpTy::create(builder, loc, data, *axis));
    return success();
  };
}

auto GraphImporter::reduction(const onnx::NodeProto &node, int64_t rank)
    -> FailureOr<std::optional<Reduction>> {
  // ReduceSum takes its axes as an input from opset 13; the others as an
  // attribute until opset 18.
  SmallVector<int64_t> axes;
  if (node.op_type() == "ReduceSum" && hasInput(node, 1)) {
    FailureOr<SmallVector<int64_t>> given = intsInput(node, 1, "axes");
    if (failed(given))
      return failure();
    axes = *given;
  } else if (std::optional<SmallVector<int64_t>> given =
                 intsAttr(node, "axes")) {
    axes = *given;
  }
  if (axes.empty()) {
    if (node.op_type() == "ReduceSum" &&
        intAttr(node, "noop_with_empty_axes", 0))
      return std::optional<Reduction>();
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  // A scalar reduced over axis 0 (or none) is itself.
  if (rank == 0 && llvm::all_of(axes, [](int64_t axis) { return axis == 0; }))
    return std::optional<Reduction>();
  for (int64_t &axis : axes) {
    FailureOr<int64_t> normalized = normalizeAxis(axis, rank);
    if (failed(normalized))
      return failure();
    axis = *normalized;
  }
  llvm::sort(axes);
  return std::optional<Reduction>(
      Reduction{axes, intAttr(node, "keepdims", 1) != 0});
}

template <typename OpTy>
void GraphImporter::addReduce(llvm::StringRef opType) {
  handlers[opType] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    int64_t rank = cast<RankedTensorType>(data.getType()).getRank();
    FailureOr<std::optional<Reduction>> spec = reduction(node, rank);
    if (failed(spec))
      return failure();
    setOutput(node, 0,
              *spec
                  ? createChecked<OpTy>(data, (*spec)->axes, (*spec)->keepDims)
                  : data);
    return success();
  };
}

/// The reductions ONNX has beyond sum, mean and max: ReduceMin = -max(-x),
/// ReduceL1 = sum |x|, ReduceSumSquare = sum x^2, ReduceL2 = sqrt(sum x^2)
/// (F.normalize), ReduceLogSum = log(sum x), composed of weft ops, and
/// ReduceLogSumExp, weft.reduce_logsumexp (torch.logsumexp; finite for large
/// x).
void GraphImporter::addComposedReductions() {
  for (llvm::StringRef opType :
       {"ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
        "ReduceLogSumExp"})
    handlers[opType] = [this](const onnx::NodeProto &node) -> LogicalResult {
      Value data = input(node, 0);
      auto type = cast<RankedTensorType>(data.getType());
      llvm::StringRef op = node.op_type();
      bool needsFloat =
          op == "ReduceL2" || op == "ReduceLogSum" || op == "ReduceLogSumExp";
      if (needsFloat && !isa<FloatType>(type.getElementType()))
        return error() << op << " of " << type << ": a float tensor expected";
      FailureOr<std::optional<Reduction>> spec =
          reduction(node, type.getRank());
      if (failed(spec))
        return failure();
      // Over no axis each is its elementwise part alone.
      SmallVector<int64_t> axes =
          *spec ? (*spec)->axes : SmallVector<int64_t>();
      bool keepDims = !*spec || (*spec)->keepDims;
      auto sum = [&](Value x, bool keep) -> Value {
        return axes.empty() ? x : createChecked<ReduceSumOp>(x, axes, keep);
      };
      Value result;
      if (op == "ReduceMin") {
        Value negated = createChecked<NegOp>(data);
        Value top = axes.empty()
                        ? negated
                        : createChecked<ReduceMaxOp>(negated, axes, keepDims);
        result = top ? createChecked<NegOp>(top) : Value();
      } else if (op == "ReduceL1") {
        result = sum(createChecked<AbsOp>(data), keepDims);
      } else if (op == "ReduceSumSquare" || op == "ReduceL2") {
        Value squares = sum(createChecked<MulOp>(data, data), keepDims);
        result = op == "ReduceL2" && squares ? createChecked<SqrtOp>(squares)
                                             : squares;
      } else if (op == "ReduceLogSum") {
        Value total = sum(data, keepDims);
        result = total ? createChecked<LogOp>(total) : Value();
      } else {
        result = axes.empty()
                     ? data
                     : createChecked<ReduceLogSumExpOp>(data, axes, keepDims);
      }
      if (!result)
        return failure();
      setOutput(node, 0, result);
      return success();
    };
}

LogicalResult GraphImporter::importMatMul(const onnx::NodeProto &node) {
  Value lhs = input(node, 0), rhs = input(node, 1);
  auto lhsType = cast<RankedTensorType>(lhs.getType());
  auto rhsType = cast<RankedTensorType>(rhs.getType());
  // numpy.matmul promotes 1-D operands to matrices and drops the added dim.
  if (lhsType.getRank() == 1)
    lhs = ReshapeOp::create(
        builder, loc, RankedTensorType::get({1, lhsType.getDimSize(0)},
                                            lhsType.getElementType()),
        lhs);
  if (rhsType.getRank() == 1)
    rhs = ReshapeOp::create(
        builder, loc, RankedTensorType::get({rhsType.getDimSize(0), 1},
                                            rhsType.getElementType()),
        rhs);
  Value product = createChecked<MatmulOp>(lhs, rhs, false, false);
  if (!product)
    return failure();
  if (lhsType.getRank() == 1 || rhsType.getRank() == 1) {
    auto productType = cast<RankedTensorType>(product.getType());
    SmallVector<int64_t> shape(productType.getShape());
    if (rhsType.getRank() == 1)
      shape.erase(shape.end() - 1);
    if (lhsType.getRank() == 1)
      shape.erase(shape.end() - (rhsType.getRank() == 1 ? 1 : 2));
    product = ReshapeOp::create(
        builder, loc, RankedTensorType::get(shape, productType.getElementType()),
        product);
  }
  setOutput(node, 0, product);
  return success();
}

LogicalResult GraphImporter::importGemm(const onnx::NodeProto &node) {
  Value a = input(node, 0), b = input(node, 1), c = input(node, 2);
  bool transA = intAttr(node, "transA", 0), transB = intAttr(node, "transB", 0);
  float alpha = floatAttr(node, "alpha", 1.0f),
        beta = floatAttr(node, "beta", 1.0f);
  auto outputElement = cast<RankedTensorType>(a.getType()).getElementType();
  int64_t n = cast<RankedTensorType>(b.getType()).getDimSize(transB ? 0 : 1);
  bool biasIsVector =
      !c || cast<RankedTensorType>(c.getType()).getShape() == ArrayRef<int64_t>{n};
  // The common case, a dense layer: Y = A·B(ᵀ) + c.
  if (!transA && alpha == 1.0f && beta == 1.0f && biasIsVector) {
    setOutput(node, 0, createChecked<LinearOp>(a, b, c, transB));
    return success();
  }
  // ONNX's Gemm takes integer tensors too; its alpha and beta are floats,
  // which scale an integer product only when they are whole numbers.
  bool integer = isa<IntegerType>(outputElement);
  for (auto [name, value] : {std::pair{"alpha", alpha}, {"beta", beta}})
    if (integer && (value != std::trunc(value) || !(std::fabs(value) < 0x1p62)))
      return error() << "Gemm of " << a.getType() << " with " << name << " = "
                     << value << ": an integer Gemm needs a whole " << name
                     << " of magnitude below 2^62";
  Value y = createChecked<MatmulOp>(a, b, transA, transB);
  auto scalar = [&](float value) {
    auto type = RankedTensorType::get({}, outputElement);
    if (integer)
      return materialize(DenseElementsAttr::get(
          type, APInt(outputElement.getIntOrFloatBitWidth(),
                      static_cast<uint64_t>(static_cast<int64_t>(value)),
                      /*isSigned=*/true, /*implicitTrunc=*/true)));
    return materialize(DenseElementsAttr::get(
        type, FloatAttr::get(outputElement, value).getValue()));
  };
  if (alpha != 1.0f)
    y = createChecked<MulOp>(y, scalar(alpha));
  if (c) {
    if (beta != 1.0f)
      c = createChecked<MulOp>(c, scalar(beta));
    y = createChecked<AddOp>(y, c);
  }
  setOutput(node, 0, y);
  return success();
}

/// Reshape, Flatten, Squeeze and Unsqueeze all keep the elements in order and
/// change only the shape, which shape inference already computed.
LogicalResult GraphImporter::importReshapeLike(const onnx::NodeProto &node) {
  Value data = input(node, 0);
  std::optional<RankedTensorType> type = knownOutputType(node);
  if (!type && node.op_type() == "Reshape") {
    // ONNX could not propagate the shape; it is a constant here.
    FailureOr<SmallVector<int64_t>> shape = intsInput(node, 1, "shape");
    if (failed(shape))
      return failure();
    auto dataType = cast<RankedTensorType>(data.getType());
    int64_t known = 1, inferIndex = -1;
    for (auto [index, size] : llvm::enumerate(*shape)) {
      if (size == 0 && !intAttr(node, "allowzero", 0)) {
        if (int64_t(index) >= dataType.getRank())
          return error() << "Reshape copies dimension " << index
                         << " (a 0 in its shape), which its rank-"
                         << dataType.getRank() << " input lacks";
        size = dataType.getDimSize(index);
      }
      if (size == -1 && inferIndex < 0) {
        inferIndex = index;
        continue;
      }
      if (size < 0 || (size > 0 && known > kMaxTensorElements / size))
        return error() << "Reshape to " << dimsText(*shape)
                       << " is not a shape (at most one -1, no other "
                          "negative size)";
      known *= size;
    }
    if (inferIndex >= 0)
      (*shape)[inferIndex] = known ? dataType.getNumElements() / known : 0;
    if (boundedElementCount(*shape) != dataType.getNumElements())
      return error() << "Reshape of " << dataType << " to " << dimsText(*shape)
                     << " changes the number of elements";
    type = RankedTensorType::get(*shape, dataType.getElementType());
  }
  if (!type && node.op_type() != "Reshape") {
    auto dataType = cast<RankedTensorType>(data.getType());
    ArrayRef<int64_t> in = dataType.getShape();
    SmallVector<int64_t> shape;
    SmallVector<int64_t> axes;
    if (node.op_type() != "Flatten") {
      if (hasInput(node, 1)) {
        FailureOr<SmallVector<int64_t>> given = intsInput(node, 1, "axes");
        if (failed(given))
          return failure();
        axes = *given;
      } else if (std::optional<SmallVector<int64_t>> given = intsAttr(node, "axes")) {
        axes = *given;
      }
    }
    // Every axis is checked against the rank before it indexes anything.
    auto badAxis = [&](int64_t axis, int64_t rank) {
      return error() << node.op_type() << " axis " << axis << " is outside ["
                     << -rank << ", " << rank << ") for its rank-" << rank
                     << " tensor";
    };
    if (node.op_type() == "Unsqueeze") {
      int64_t rank = dataType.getRank() + static_cast<int64_t>(axes.size());
      SmallVector<bool> inserted(rank, false);
      for (int64_t axis : axes) {
        if (axis < -rank || axis >= rank)
          return badAxis(axis, rank);
        int64_t at = axis < 0 ? axis + rank : axis;
        if (inserted[at])
          return error() << "Unsqueeze lists axis " << axis << " twice";
        inserted[at] = true;
      }
      for (int64_t d = 0, next = 0; d < rank; ++d)
        shape.push_back(inserted[d] ? 1 : in[next++]);
    } else if (node.op_type() == "Squeeze") {
      for (int64_t axis : axes) {
        int64_t rank = dataType.getRank();
        if (axis < -rank || axis >= rank)
          return badAxis(axis, rank);
        if (in[axis < 0 ? axis + rank : axis] != 1)
          return error() << "Squeeze axis " << axis << " has size "
                         << in[axis < 0 ? axis + rank : axis] << ", not 1";
      }
      for (int64_t d = 0; d < dataType.getRank(); ++d) {
        bool listed = llvm::any_of(axes, [&](int64_t axis) {
          return (axis < 0 ? axis + dataType.getRank() : axis) == d;
        });
        if (axes.empty() ? in[d] != 1 : !listed)
          shape.push_back(in[d]);
      }
    } else {
      int64_t axis = intAttr(node, "axis", 1);
      if (axis < -dataType.getRank() || axis > dataType.getRank())
        return error() << "Flatten axis " << axis << " is outside ["
                       << -dataType.getRank() << ", " << dataType.getRank()
                       << "] for its rank-" << dataType.getRank() << " tensor";
      if (axis < 0)
        axis += dataType.getRank();
      int64_t outer = 1;
      for (int64_t d = 0; d < axis; ++d)
        outer *= in[d];
      shape = {outer, outer ? dataType.getNumElements() / outer : 0};
    }
    type = RankedTensorType::get(shape, dataType.getElementType());
  }
  if (!type) {
    FailureOr<RankedTensorType> inferred = outputType(node);
    if (failed(inferred))
      return failure();
    type = *inferred;
  }
  if (std::optional<DenseElementsAttr> value = constantInput(node, 0)) {
    // The type may come from the model's value_info: a reshape must keep the
    // element type and count, or the attribute would not hold its elements.
    if (value->getElementType() != type->getElementType() ||
        value->getNumElements() != type->getNumElements())
      return error() << node.op_type() << " of the constant "
                     << value->getType() << " cannot give " << *type
                     << ", which the model declares for output '"
                     << node.output(0) << "'";
    setConstant(node.output(0), value->reshape(*type));
    return success();
  }
  setOutput(node, 0, data.getType() == *type
                         ? data
                         : ReshapeOp::create(builder, loc, *type, data).getResult());
  return success();
}

/// The most elements GatherElements' one-hot may have: far above a
/// language model's per-token log-probabilities ([batch, seq, 1, vocab]),
/// below what a gather of long rows by long rows would allocate.
static constexpr int64_t kMaxGatherElementsOneHot = int64_t(1) << 28;

LogicalResult GraphImporter::importGatherElements(const onnx::NodeProto &node) {
  // torch.gather (per-token log-probabilities: logp.gather(-1,
  // labels.unsqueeze(-1))). out[.., j, ..] = data[.., index[.., j, ..], ..]
  // along `axis`: a one-hot of the index over the axis's n entries
  // ([.., m, n, ..], an iota compared with the index), times the data
  // ([.., 1, n, ..]), summed over n. Differentiable as those ops are.
  Value data = input(node, 0), index = input(node, 1);
  if (!data || !index)
    return failure();
  auto dataType = cast<RankedTensorType>(data.getType());
  auto indexType = cast<RankedTensorType>(index.getType());
  const int64_t rank = dataType.getRank();
  FailureOr<int64_t> axis = normalizeAxis(intAttr(node, "axis", 0), rank);
  if (failed(axis))
    return failure();
  if (indexType.getRank() != rank ||
      !isa<IntegerType>(indexType.getElementType()))
    return error() << "GatherElements' indices are " << indexType
                   << ", not integers of the data's rank " << rank;
  // Off the gathered axis, the indices may cover less than the data (as
  // torch.gather allows): the data is cut to them.
  SmallVector<int64_t> limits(dataType.getShape());
  for (int64_t d = 0; d < rank; ++d) {
    if (d == *axis)
      continue;
    if (indexType.getDimSize(d) > dataType.getDimSize(d))
      return error() << "GatherElements' indices are " << indexType
                     << " for data " << dataType << ": dimension " << d
                     << " of the indices exceeds the data's";
    limits[d] = indexType.getDimSize(d);
  }
  if (limits != SmallVector<int64_t>(dataType.getShape())) {
    data = createChecked<SliceOp>(data, SmallVector<int64_t>(rank, 0), limits,
                                  DenseI64ArrayAttr());
    if (!data)
      return failure();
    dataType = cast<RankedTensorType>(data.getType());
  }
  const int64_t n = dataType.getDimSize(*axis);
  SmallVector<int64_t> hot(indexType.getShape());
  hot.insert(hot.begin() + *axis + 1, n);
  // (Counted in double: the dimensions are each below 2^48.)
  double elements = 1;
  for (int64_t size : hot)
    elements *= double(size);
  if (elements > double(kMaxGatherElementsOneHot))
    return error() << "GatherElements of " << dataType << " by " << indexType
                   << " is a one-hot of "
                   << (elements < 9e18 ? std::to_string(int64_t(elements))
                                       : std::string("over 2^63"))
                   << " elements in Weft, over its limit of "
                   << kMaxGatherElementsOneHot
                   << "; gather fewer entries per row";
  Type indexElement = indexType.getElementType();
  auto scalarIndex = [&](int64_t value) {
    return materialize(
        DenseElementsAttr::get(RankedTensorType::get({}, indexElement),
                               builder.getIntegerAttr(indexElement, value)));
  };
  // Negative indices count from the end.
  Value negative =
      CompareOp::create(builder, loc, indexType.clone(builder.getI1Type()),
                        ComparePredicate::lt, index, scalarIndex(0));
  Value wrapped = AddOp::create(builder, loc, indexType, index, scalarIndex(n));
  index = WhereOp::create(builder, loc, indexType, negative, wrapped, index);
  SmallVector<int64_t> column(indexType.getShape());
  column.insert(column.begin() + *axis + 1, 1);
  SmallVector<int64_t> row(dataType.getShape());
  row.insert(row.begin() + *axis, 1);
  Value classes =
      IotaOp::create(builder, loc, RankedTensorType::get(hot, indexElement),
                     builder.getI64IntegerAttr(*axis + 1));
  Value hit = CompareOp::create(
      builder, loc, RankedTensorType::get(hot, builder.getI1Type()),
      ComparePredicate::eq, classes,
      ReshapeOp::create(builder, loc, indexType.clone(column), index));
  auto hotType = RankedTensorType::get(hot, dataType.getElementType());
  Value picked;
  if (isa<FloatType>(dataType.getElementType())) {
    picked = MulOp::create(
        builder, loc, hotType, CastOp::create(builder, loc, hotType, hit),
        ReshapeOp::create(builder, loc, dataType.clone(row), data));
  } else {
    // Integers: where, not a product (no cast of bools to integers needed).
    Value zero = materialize(DenseElementsAttr::get(
        RankedTensorType::get({}, dataType.getElementType()),
        builder.getZeroAttr(dataType.getElementType())));
    Value wide = BroadcastToOp::create(
        builder, loc, hotType,
        ReshapeOp::create(builder, loc, dataType.clone(row), data));
    picked = WhereOp::create(builder, loc, hotType, hit, wide, zero);
  }
  setOutput(node, 0,
            ReduceSumOp::create(
                builder, loc, indexType.clone(dataType.getElementType()),
                picked, SmallVector<int64_t>{*axis + 1}, false));
  return success();
}

LogicalResult GraphImporter::importPad(const onnx::NodeProto &node) {
  // Constant padding (Hugging Face's causal-LM loss pads the labels by one
  // ignored position before shifting them): the input between constant
  // blocks, and negative pads crop it. Edge and reflect padding (an audio
  // front end's) gather positions of the input.
  Value data = input(node, 0);
  if (!data)
    return failure();
  const onnx::AttributeProto *modeAttr = attribute(node, "mode");
  std::string mode = modeAttr ? modeAttr->s() : "constant";
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    return error() << "Pad mode '" << mode
                   << "' is not imported (constant, edge and reflect are)";
  auto type = cast<RankedTensorType>(data.getType());
  const int64_t rank = type.getRank();
  FailureOr<SmallVector<int64_t>> pads = intsInput(node, 1, "pads");
  if (failed(pads))
    return failure();
  if (int64_t(pads->size()) != 2 * rank)
    return error() << "Pad has " << pads->size()
                   << " pads for a tensor of rank " << rank << " (it needs "
                   << 2 * rank << ")";
  if (mode != "constant") {
    // Edge and reflect padding (numpy's: reflect does not repeat the edge)
    // take each output position from an input one along the axis: one
    // gather by a constant map per padded axis, which differentiates as any
    // gather. A negative pad crops first, as numpy.pad of the cropped input.
    Value result = data;
    for (int64_t d = 0; d < rank && result; ++d) {
      int64_t before = (*pads)[d], after = (*pads)[rank + d];
      if (before == 0 && after == 0)
        continue;
      // One index per output position.
      if (std::abs(std::max<int64_t>(before, -kMaxTensorElements)) >
              kMaxRangeElements ||
          std::abs(std::max<int64_t>(after, -kMaxTensorElements)) >
              kMaxRangeElements)
        return error() << "Pad in mode '" << mode << "' of axis " << d << " by "
                       << before << " and " << after
                       << ": Weft gathers at most 2^24 positions per axis";
      int64_t lo = std::max<int64_t>(0, -before);
      int64_t n = type.getDimSize(d) - lo - std::max<int64_t>(0, -after);
      if (n <= 0)
        return error() << "Pad in mode '" << mode << "' of axis " << d << " ("
                       << type.getDimSize(d) << " elements) by " << before
                       << " and " << after << " leaves no element to pad with";
      before = std::max<int64_t>(0, before);
      int64_t size = before + n + std::max<int64_t>(0, after);
      if (size > kMaxRangeElements)
        return error() << "Pad in mode '" << mode << "' makes axis " << d << " "
                       << size << " positions long: Weft gathers at most 2^24";
      SmallVector<int64_t> map;
      for (int64_t j = 0; j < size; ++j) {
        int64_t i = j - before;
        if (mode == "edge" || n == 1) {
          i = std::clamp<int64_t>(i, 0, n - 1);
        } else {
          int64_t period = 2 * (n - 1);
          i = ((i % period) + period) % period;
          if (i >= n)
            i = period - i;
        }
        map.push_back(lo + i);
      }
      Value indices = materialize(DenseElementsAttr::get(
          RankedTensorType::get({size}, builder.getI64Type()),
          llvm::ArrayRef(map)));
      result = createChecked<GatherOp>(result, indices, d);
    }
    if (!result)
      return failure();
    setOutput(node, 0, result);
    return success();
  }
  Attribute fill;
  if (hasInput(node, 2)) {
    std::optional<DenseElementsAttr> value = constantInput(node, 2);
    if (!value || value->getNumElements() != 1 ||
        value->getElementType() != type.getElementType())
      return error() << "Pad's constant_value (input 2) must be a constant "
                        "scalar of the input's element type";
    fill = value->getSplatValue<Attribute>();
  } else {
    fill = builder.getZeroAttr(type.getElementType());
  }
  Value result = padConstant(data, *pads, fill);
  if (!result)
    return failure();
  setOutput(node, 0, result);
  return success();
}

Value GraphImporter::padConstant(Value data, ArrayRef<int64_t> pads,
                                 Attribute fill) {
  auto type = cast<RankedTensorType>(data.getType());
  const int64_t rank = type.getRank();
  // Crops first, then the padding, axis by axis.
  SmallVector<int64_t> lo(rank, 0), hi(type.getShape());
  bool crops = false;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t before = pads[d], after = pads[rank + d];
    if (before < 0)
      lo[d] = -before;
    if (after < 0)
      hi[d] = type.getDimSize(d) + after;
    if (lo[d] > hi[d]) {
      error() << "Pad crops more than axis " << d << "'s " << type.getDimSize(d)
              << " elements";
      return {};
    }
    crops |= before < 0 || after < 0;
  }
  Value result = data;
  if (crops)
    result = createChecked<SliceOp>(data, lo, hi, DenseI64ArrayAttr());
  for (int64_t d = 0; d < rank && result; ++d) {
    SmallVector<Value> parts;
    auto block = [&](int64_t size) {
      SmallVector<int64_t> shape(
          cast<RankedTensorType>(result.getType()).getShape());
      shape[d] = size;
      parts.push_back(
          materialize(DenseElementsAttr::get(type.clone(shape), fill)));
    };
    int64_t before = pads[d], after = pads[rank + d];
    if (before <= 0 && after <= 0)
      continue;
    if (before > 0)
      block(before);
    parts.push_back(result);
    if (after > 0)
      block(after);
    result = createChecked<ConcatOp>(parts, d);
  }
  return result;
}

/// Conv, as torch's nn.Conv1d/2d/3d export it (a ViT's or CLIP's patch
/// embedding, Whisper's audio stem), is a product of a patch matrix
/// [batch, positions, channels x taps] with the weights as [out, channels x
/// taps]: a weft.linear, which the planner costs and tensor parallelism
/// splits as any dense layer. Patches side by side (a kernel equal to its
/// stride, undilated) are a reshape and a transpose of the input; other
/// kernels take one strided slice per tap (im2col). Groups contract per
/// group in one batched weft.matmul.
LogicalResult GraphImporter::importConv(const onnx::NodeProto &node) {
  Value x = input(node, 0), w = input(node, 1);
  Value bias = hasInput(node, 2) ? input(node, 2) : Value();
  if (!x || !w || (hasInput(node, 2) && !bias))
    return failure();
  auto xType = cast<RankedTensorType>(x.getType());
  auto wType = cast<RankedTensorType>(w.getType());
  Type element = xType.getElementType();
  if (!isa<FloatType>(element) || wType.getElementType() != element)
    return error() << "Conv of " << xType << " with weights " << wType
                   << ": float tensors of one element type expected";
  const int64_t rank = xType.getRank(), n = rank - 2;
  if (n < 1 || wType.getRank() != rank)
    return error() << "Conv of " << xType << " with weights " << wType
                   << ": both need the same rank, 3 or more (batch or out, "
                      "channels, then the spatial axes)";
  const int64_t batch = xType.getDimSize(0), channels = xType.getDimSize(1);
  const int64_t outChannels = wType.getDimSize(0);
  const int64_t group = intAttr(node, "group", 1);
  if (group < 1 || outChannels % group ||
      wType.getDimSize(1) * group != channels)
    return error() << "Conv of " << channels << " channels in " << group
                   << " group(s) with weights " << wType
                   << ": the weights must be [out, channels / group, "
                      "kernel...] with out a multiple of group";
  SmallVector<int64_t> kernel(wType.getShape().drop_front(2));
  if (std::optional<SmallVector<int64_t>> given =
          intsAttr(node, "kernel_shape"))
    if (ArrayRef<int64_t>(*given) != ArrayRef<int64_t>(kernel))
      return error() << "Conv kernel_shape " << dimsText(*given)
                     << " is not its weights' " << dimsText(kernel);
  auto perAxis = [&](llvm::StringRef name, int64_t fallback,
                     int64_t count) -> FailureOr<SmallVector<int64_t>> {
    std::optional<SmallVector<int64_t>> given = intsAttr(node, name);
    if (!given)
      return SmallVector<int64_t>(count, fallback);
    if (int64_t(given->size()) != count) {
      error() << "Conv " << name << " has " << given->size() << " values; a "
              << n << "-d convolution needs " << count;
      return failure();
    }
    return *given;
  };
  FailureOr<SmallVector<int64_t>> strides = perAxis("strides", 1, n);
  FailureOr<SmallVector<int64_t>> dilations = perAxis("dilations", 1, n);
  FailureOr<SmallVector<int64_t>> pads = perAxis("pads", 0, 2 * n);
  if (failed(strides) || failed(dilations) || failed(pads))
    return failure();
  const onnx::AttributeProto *autoPad = attribute(node, "auto_pad");
  std::string mode = autoPad && !autoPad->s().empty() ? autoPad->s() : "NOTSET";
  for (int64_t d = 0; d < n; ++d) {
    const int64_t size = xType.getDimSize(2 + d), k = kernel[d];
    const int64_t s = (*strides)[d], dilation = (*dilations)[d];
    if (k < 1 || s < 1 || dilation < 1 || (*pads)[d] < 0 || (*pads)[n + d] < 0)
      return error() << "Conv needs kernel sizes, strides and dilations of "
                        "at least 1 and pads of at least 0 (spatial axis "
                     << d << ": kernel " << k << ", stride " << s
                     << ", dilation " << dilation << ", pads " << (*pads)[d]
                     << " and " << (*pads)[n + d] << ")";
    if (mode == "VALID") {
      (*pads)[d] = (*pads)[n + d] = 0;
    } else if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      const int64_t out = (size + s - 1) / s;
      const int64_t total =
          std::max<int64_t>(0, (out - 1) * s + (k - 1) * dilation + 1 - size);
      const int64_t lower =
          mode == "SAME_UPPER" ? total / 2 : total - total / 2;
      (*pads)[d] = lower;
      (*pads)[n + d] = total - lower;
    } else if (mode != "NOTSET") {
      return error() << "Conv auto_pad '" << mode
                     << "' is not ONNX's (NOTSET, SAME_UPPER, SAME_LOWER or "
                        "VALID)";
    }
  }
  // The output positions along each spatial axis.
  SmallVector<int64_t> out;
  int64_t positions = 1, taps = 1;
  for (int64_t d = 0; d < n; ++d) {
    const int64_t extent =
        xType.getDimSize(2 + d) + (*pads)[d] + (*pads)[n + d];
    const int64_t span = (kernel[d] - 1) * (*dilations)[d] + 1;
    if (extent < span)
      return error() << "Conv's kernel spans " << span
                     << " positions of spatial axis " << d << ", which has "
                     << extent << " (padded)";
    out.push_back((extent - span) / (*strides)[d] + 1);
    positions *= out.back();
    taps *= kernel[d];
  }
  if (batch * positions >
      kMaxTensorElements / std::max<int64_t>(1, channels * taps))
    return error() << "Conv's patch matrix would hold more than 2^48 elements";
  auto reshape = [&](Value value, ArrayRef<int64_t> shape) -> Value {
    return ReshapeOp::create(builder, loc,
                             RankedTensorType::get(shape, element), value);
  };
  SmallVector<int64_t> allPads(2 * rank, 0);
  for (int64_t d = 0; d < n; ++d) {
    allPads[2 + d] = (*pads)[d];
    allPads[rank + 2 + d] = (*pads)[n + d];
  }
  Value padded = x;
  if (llvm::any_of(allPads, [](int64_t p) { return p != 0; }))
    padded = padConstant(x, allPads, builder.getZeroAttr(element));
  if (!padded)
    return failure();
  auto paddedShape = cast<RankedTensorType>(padded.getType()).getShape();
  // [batch, positions, channels x taps], taps in the weights' order.
  Value patches;
  const bool sideBySide =
      llvm::all_of(llvm::seq<int64_t>(0, n), [&](int64_t d) {
        return kernel[d] == (*strides)[d] && (*dilations)[d] == 1;
      });
  if (sideBySide) {
    SmallVector<int64_t> lo(rank, 0), hi(paddedShape), split{batch, channels};
    SmallVector<int64_t> perm{0};
    for (int64_t d = 0; d < n; ++d) {
      hi[2 + d] = out[d] * kernel[d];
      split.append({out[d], kernel[d]});
      perm.push_back(2 + 2 * d);
    }
    perm.push_back(1);
    for (int64_t d = 0; d < n; ++d)
      perm.push_back(3 + 2 * d);
    Value cropped = padded;
    if (ArrayRef<int64_t>(hi) != paddedShape)
      cropped = createChecked<SliceOp>(padded, lo, hi, DenseI64ArrayAttr());
    if (!cropped)
      return failure();
    patches = createChecked<TransposeOp>(reshape(cropped, split), perm);
  } else {
    constexpr int64_t kMaxTaps = 1024;
    if (taps > kMaxTaps)
      return error() << "Conv with a kernel of " << taps
                     << " taps that is not its stride: Weft imports at most "
                     << kMaxTaps << " (one strided slice each)";
    SmallVector<Value> columns;
    for (int64_t t = 0; t < taps; ++t) {
      SmallVector<int64_t> lo(rank, 0), hi(paddedShape), step(rank, 1);
      SmallVector<int64_t> shape{batch, channels, 1};
      int64_t rest = t;
      for (int64_t d = n - 1; d >= 0; --d) {
        const int64_t offset = rest % kernel[d];
        rest /= kernel[d];
        lo[2 + d] = offset * (*dilations)[d];
        hi[2 + d] = lo[2 + d] + (out[d] - 1) * (*strides)[d] + 1;
        step[2 + d] = (*strides)[d];
      }
      shape.append(out);
      Value column = createChecked<SliceOp>(padded, lo, hi,
                                            builder.getDenseI64ArrayAttr(step));
      if (!column)
        return failure();
      columns.push_back(reshape(column, shape));
    }
    Value stacked = columns.size() == 1 ? columns.front()
                                        : createChecked<ConcatOp>(columns, 2);
    SmallVector<int64_t> perm{0};
    for (int64_t d = 0; d < n; ++d)
      perm.push_back(3 + d);
    perm.append({1, 2});
    patches = stacked ? createChecked<TransposeOp>(stacked, perm) : Value();
  }
  if (!patches)
    return failure();
  patches = reshape(patches, {batch, positions, channels * taps});
  // [batch, positions, out]
  Value y;
  if (group == 1) {
    y = createChecked<LinearOp>(
        patches, reshape(w, {outChannels, channels * taps}), bias, true);
  } else {
    // [group, batch x positions, in / group x taps] times [group, out /
    // group, in / group x taps]ᵀ: one batch dimension, the same on both
    // sides, as every executor's batched product takes it.
    const int64_t inPer = channels / group, outPer = outChannels / group;
    Value grouped = createChecked<TransposeOp>(
        reshape(patches, {batch, positions, group, inPer * taps}),
        SmallVector<int64_t>{2, 0, 1, 3});
    Value rows =
        grouped ? reshape(grouped, {group, batch * positions, inPer * taps})
                : Value();
    Value weights = reshape(w, {group, outPer, inPer * taps});
    Value product =
        rows ? createChecked<MatmulOp>(rows, weights, false, true) : Value();
    if (!product)
      return failure();
    y = reshape(createChecked<TransposeOp>(
                    reshape(product, {group, batch, positions, outPer}),
                    SmallVector<int64_t>{1, 2, 0, 3}),
                {batch, positions, outChannels});
    if (bias)
      y = createChecked<AddOp>(y, bias);
  }
  if (!y)
    return failure();
  // [batch, out, positions along each axis], as ONNX's Conv gives it.
  SmallVector<int64_t> spread{batch};
  spread.append(out);
  spread.push_back(outChannels);
  SmallVector<int64_t> perm{0, n + 1};
  for (int64_t d = 0; d < n; ++d)
    perm.push_back(1 + d);
  Value result = createChecked<TransposeOp>(reshape(y, spread), perm);
  if (!result)
    return failure();
  setOutput(node, 0, result);
  return success();
}

/// `data` with the box [lo, hi) of its leading lo.size() axes replaced by
/// `block`, from axis `axis` on: slices of what lies before and after the box
/// along each axis, concatenated around it.
Value GraphImporter::replaceBox(Value data, ArrayRef<int64_t> lo,
                                ArrayRef<int64_t> hi, Value block,
                                size_t axis) {
  if (axis == lo.size() || !data)
    return block;
  auto type = cast<RankedTensorType>(data.getType());
  const int64_t size = type.getDimSize(axis);
  auto part = [&](int64_t from, int64_t to) {
    SmallVector<int64_t> starts(type.getRank(), 0), limits(type.getShape());
    starts[axis] = from;
    limits[axis] = to;
    return createChecked<SliceOp>(data, starts, limits, DenseI64ArrayAttr());
  };
  Value middle =
      lo[axis] == 0 && hi[axis] == size ? data : part(lo[axis], hi[axis]);
  middle = replaceBox(middle, lo, hi, block, axis + 1);
  if (lo[axis] == 0 && hi[axis] == size)
    return middle;
  SmallVector<Value> parts;
  if (lo[axis] > 0)
    parts.push_back(part(0, lo[axis]));
  parts.push_back(middle);
  if (hi[axis] < size)
    parts.push_back(part(hi[axis], size));
  if (llvm::any_of(parts, [](Value v) { return !v; }))
    return {};
  return createChecked<ConcatOp>(parts, int64_t(axis));
}

/// ScatterND, which torch.onnx writes for a slice assignment (Hugging Face's
/// causal-mask code: `mask[:, :, :, :n] = mask[:, :, :, :n].masked_fill(...)`),
/// with indices the import knows (exports compute them from shapes). Indices
/// that walk a box of data's leading axes in order, as a slice assignment's
/// do, replace that box by the updates (combined with it under a reduction)
/// through slices and concats; others gather data's rows and the updates'
/// rows by a constant map (the last update of a row wins, as torch's
/// index_put_ does).
LogicalResult GraphImporter::importScatterND(const onnx::NodeProto &node) {
  Value data = input(node, 0), updates = input(node, 2);
  if (!data || !updates)
    return failure();
  std::optional<DenseElementsAttr> known = constantInput(node, 1);
  if (!known)
    return error() << "ScatterND with indices computed from the graph's "
                      "inputs: Weft imports ScatterND whose indices are "
                      "constants (as an exported slice assignment's are)";
  auto type = cast<RankedTensorType>(data.getType());
  auto indexType = cast<RankedTensorType>(known->getType());
  const int64_t rank = type.getRank();
  const int64_t k = indexType.getRank() ? indexType.getShape().back() : 0;
  if (k < 1 || k > rank)
    return error() << "ScatterND indices " << indexType
                   << " need a last axis of 1 to " << rank
                   << " (the data's rank) entries";
  const onnx::AttributeProto *attr = attribute(node, "reduction");
  std::string reduction = attr && !attr->s().empty() ? attr->s() : "none";
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return error() << "ScatterND reduction '" << reduction
                   << "' is not ONNX's (none, add, mul, max or min)";
  SmallVector<int64_t> expected(indexType.getShape().drop_back());
  expected.append(type.getShape().begin() + k, type.getShape().end());
  auto updatesType = cast<RankedTensorType>(updates.getType());
  if (updatesType.getShape() != ArrayRef<int64_t>(expected) ||
      updatesType.getElementType() != type.getElementType())
    return error() << "ScatterND of " << type << " at indices " << indexType
                   << " takes updates of shape " << dimsText(expected)
                   << " and the data's element type, not " << updatesType;
  SmallVector<int64_t> flat;
  for (const APInt &value : known->getValues<APInt>())
    flat.push_back(value.getSExtValue());
  const int64_t count = k ? int64_t(flat.size()) / k : 0;
  for (int64_t t = 0; t < count; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t given = flat[t * k + j], size = type.getDimSize(j);
      const int64_t index = given < 0 ? given + size : given;
      if (index < 0 || index >= size)
        return error() << "ScatterND index " << given << " is outside axis "
                       << j << " of " << type;
      flat[t * k + j] = index;
    }
  auto reshape = [&](Value value, ArrayRef<int64_t> shape) -> Value {
    return ReshapeOp::create(
        builder, loc, RankedTensorType::get(shape, type.getElementType()),
        value);
  };
  // A box walked in order: tuple t is lo + t's digits in the box's sizes.
  SmallVector<int64_t> lo(k, 0), hi(k, 0);
  bool box = count > 0;
  if (box) {
    for (int64_t j = 0; j < k; ++j) {
      lo[j] = flat[j];
      hi[j] = flat[j] + 1;
      for (int64_t t = 0; t < count; ++t) {
        lo[j] = std::min(lo[j], flat[t * k + j]);
        hi[j] = std::max(hi[j], flat[t * k + j] + 1);
      }
    }
    int64_t cells = 1;
    for (int64_t j = 0; j < k; ++j)
      cells *= hi[j] - lo[j];
    box = cells == count;
    for (int64_t t = 0; t < count && box; ++t) {
      int64_t rest = t;
      for (int64_t j = k - 1; j >= 0 && box; --j) {
        const int64_t extent = hi[j] - lo[j];
        box = flat[t * k + j] == lo[j] + rest % extent;
        rest /= extent;
      }
    }
  }
  Value result;
  if (count == 0) {
    result = data;
  } else if (box) {
    SmallVector<int64_t> shape;
    for (int64_t j = 0; j < k; ++j)
      shape.push_back(hi[j] - lo[j]);
    shape.append(type.getShape().begin() + k, type.getShape().end());
    Value block = reshape(updates, shape);
    if (reduction != "none") {
      SmallVector<int64_t> starts(rank, 0), limits(type.getShape());
      for (int64_t j = 0; j < k; ++j) {
        starts[j] = lo[j];
        limits[j] = hi[j];
      }
      Value old =
          createChecked<SliceOp>(data, starts, limits, DenseI64ArrayAttr());
      if (!old)
        return failure();
      if (reduction == "add")
        block = createChecked<AddOp>(old, block);
      else if (reduction == "mul")
        block = createChecked<MulOp>(old, block);
      else if (reduction == "max")
        block = createChecked<MaximumOp>(old, block);
      else
        block = createChecked<MinimumOp>(old, block);
    }
    result = replaceBox(data, lo, hi, block, 0);
  } else {
    int64_t rows = 1;
    for (int64_t j = 0; j < k; ++j)
      rows *= type.getDimSize(j);
    constexpr int64_t kMaxRows = int64_t(1) << 24;
    if (rows > kMaxRows)
      return error() << "ScatterND into " << rows
                     << " rows at indices that are not a box: Weft maps at "
                        "most 2^24 rows";
    // Rounds of updates to distinct rows: without a reduction one round,
    // the last update of a row winning; with one, a row's n-th update in
    // round n, combined with what the rounds before left.
    SmallVector<SmallVector<int64_t>> rounds;
    DenseMap<int64_t, int64_t> seen;
    SmallVector<int64_t> rowOf(count);
    for (int64_t t = 0; t < count; ++t) {
      int64_t row = 0;
      for (int64_t j = 0; j < k; ++j)
        row = row * type.getDimSize(j) + flat[t * k + j];
      rowOf[t] = row;
      size_t round = reduction == "none" ? 0 : size_t(seen[row]++);
      if (rounds.size() <= round)
        rounds.emplace_back();
      rounds[round].push_back(t);
    }
    constexpr size_t kMaxRounds = 64;
    if (rounds.size() > kMaxRounds)
      return error() << "ScatterND with reduction '" << reduction
                     << "' updates a row " << rounds.size()
                     << " times: Weft imports at most " << kMaxRounds;
    SmallVector<int64_t> rowShape{rows}, updateShape{count};
    rowShape.append(type.getShape().begin() + k, type.getShape().end());
    updateShape.append(type.getShape().begin() + k, type.getShape().end());
    auto indexConstant = [&](ArrayRef<int64_t> values) {
      return materialize(DenseElementsAttr::get(
          RankedTensorType::get({int64_t(values.size())}, builder.getI64Type()),
          values));
    };
    Value current = reshape(data, rowShape);
    Value updateRows = reshape(updates, updateShape);
    for (ArrayRef<int64_t> round : rounds) {
      SmallVector<int64_t> hit;
      for (int64_t t : round)
        hit.push_back(rowOf[t]);
      Value block = updateRows;
      if (reduction != "none" || int64_t(round.size()) != count)
        block = createChecked<GatherOp>(updateRows, indexConstant(round),
                                        int64_t(0));
      if (reduction != "none" && block) {
        Value old =
            createChecked<GatherOp>(current, indexConstant(hit), int64_t(0));
        if (!old)
          return failure();
        if (reduction == "add")
          block = createChecked<AddOp>(old, block);
        else if (reduction == "mul")
          block = createChecked<MulOp>(old, block);
        else if (reduction == "max")
          block = createChecked<MaximumOp>(old, block);
        else
          block = createChecked<MinimumOp>(old, block);
      }
      SmallVector<int64_t> map(rows);
      for (int64_t r = 0; r < rows; ++r)
        map[r] = r;
      for (auto [i, row] : llvm::enumerate(hit))
        map[row] = rows + int64_t(i);
      Value table = block ? createChecked<ConcatOp>(
                                SmallVector<Value>{current, block}, int64_t(0))
                          : Value();
      current =
          table ? createChecked<GatherOp>(table, indexConstant(map), int64_t(0))
                : Value();
      if (!current)
        return failure();
    }
    result = reshape(current, type.getShape());
  }
  if (!result)
    return failure();
  setOutput(node, 0, result);
  return success();
}

/// Tile (torch's Tensor.repeat) with constant repeats: each axis d becomes
/// [repeats[d], size[d]], the input broadcast over the repeats, then merged.
LogicalResult GraphImporter::importTile(const onnx::NodeProto &node) {
  Value data = input(node, 0);
  if (!data)
    return failure();
  auto type = cast<RankedTensorType>(data.getType());
  FailureOr<SmallVector<int64_t>> repeats = intsInput(node, 1, "repeats");
  if (failed(repeats))
    return failure();
  if (int64_t(repeats->size()) != type.getRank())
    return error() << "Tile has " << repeats->size()
                   << " repeats for a tensor of rank " << type.getRank()
                   << " (it needs one per axis)";
  SmallVector<int64_t> split, spread, tiled;
  int64_t elements = 1;
  for (auto [size, times] : llvm::zip(type.getShape(), *repeats)) {
    if (times < 0)
      return error() << "Tile repeats an axis " << times
                     << " times: repeats are 0 or more";
    if (size &&
        times > kMaxTensorElements / std::max<int64_t>(1, elements * size))
      return error() << "Tile would make more than 2^48 elements";
    elements *= std::max<int64_t>(1, size * times);
    split.append({1, size});
    spread.append({times, size});
    tiled.push_back(size * times);
  }
  Value unit = ReshapeOp::create(builder, loc, type.clone(split), data);
  Value wide = BroadcastToOp::create(builder, loc, type.clone(spread), unit);
  setOutput(node, 0, ReshapeOp::create(builder, loc, type.clone(tiled), wide));
  return success();
}

/// ArgMax and ArgMin (a reward model's last-token index, Hugging Face's
/// `eq(input_ids, pad).int().argmax(-1)`): the first (or, with
/// select_last_index, the last) position along the axis where the input
/// equals its extreme, as the least (greatest) of an iota where it does.
LogicalResult GraphImporter::importArgExtreme(const onnx::NodeProto &node) {
  Value data = input(node, 0);
  if (!data)
    return failure();
  auto type = cast<RankedTensorType>(data.getType());
  const int64_t rank = type.getRank();
  if (rank == 0)
    return error() << node.op_type()
                   << " of a scalar: it needs an axis to search";
  FailureOr<int64_t> axis = normalizeAxis(intAttr(node, "axis", 0), rank);
  if (failed(axis))
    return failure();
  const bool keepDims = intAttr(node, "keepdims", 1) != 0;
  const bool last = intAttr(node, "select_last_index", 0) != 0;
  const bool isMax = node.op_type() == "ArgMax";
  SmallVector<int64_t> axes{*axis};
  // max(-x) is -min(x), for the values and for the positions alike.
  auto extreme = [&](Value x, bool max, bool keep) -> Value {
    if (max)
      return createChecked<ReduceMaxOp>(x, axes, keep);
    Value negated = createChecked<NegOp>(x);
    Value top =
        negated ? createChecked<ReduceMaxOp>(negated, axes, keep) : Value();
    return top ? createChecked<NegOp>(top) : Value();
  };
  Value best = extreme(data, isMax, true);
  Value hits = best ? createChecked<CompareOp>(ComparePredicate::eq, data, best)
                    : Value();
  const int64_t size = type.getDimSize(*axis);
  SmallVector<int64_t> positions(size);
  for (int64_t i = 0; i < size; ++i)
    positions[i] = i;
  SmallVector<int64_t> iotaShape(rank, 1);
  iotaShape[*axis] = size;
  auto i64 = builder.getI64Type();
  Value iota = materialize(DenseElementsAttr::get(
      RankedTensorType::get(iotaShape, i64), ArrayRef(positions)));
  Value miss = materialize(DenseElementsAttr::get(
      RankedTensorType::get({}, i64), ArrayRef<int64_t>{last ? -1 : size}));
  Value candidates = hits ? createChecked<WhereOp>(hits, iota, miss) : Value();
  Value index = candidates ? extreme(candidates, last, keepDims) : Value();
  if (!index)
    return failure();
  setOutput(node, 0, index);
  return success();
}

/// Mod: the remainder with the divisor's sign (Python's %, fmod = 0, integers
/// only), or with the dividend's (C's fmod, fmod = 1): a - trunc(a / b) b,
/// moved by b where it is nonzero and its sign is not the divisor's.
/// Floats truncate through a cast to i64 (exact below 2^63).
LogicalResult GraphImporter::importMod(const onnx::NodeProto &node) {
  Value a = input(node, 0), b = input(node, 1);
  if (!a || !b)
    return failure();
  auto type = cast<RankedTensorType>(a.getType());
  Type element = type.getElementType();
  const bool fmod = intAttr(node, "fmod", 0) != 0;
  const bool isFloat = isa<FloatType>(element);
  if (isFloat && !fmod)
    return error() << "Mod of " << type
                   << " with fmod = 0: ONNX takes floats with fmod = 1 only";
  Value quotient = createChecked<DivOp>(a, b);
  if (quotient && isFloat) {
    auto shape = cast<RankedTensorType>(quotient.getType());
    Value whole = CastOp::create(builder, loc,
                                 shape.clone(builder.getI64Type()), quotient);
    quotient = CastOp::create(builder, loc, shape, whole);
  }
  Value product = quotient ? createChecked<MulOp>(quotient, b) : Value();
  Value remainder = product ? createChecked<SubOp>(a, product) : Value();
  if (remainder && !fmod) {
    auto scalar = [&](int64_t value) {
      return materialize(DenseElementsAttr::get(
          RankedTensorType::get({}, element),
          APInt(element.getIntOrFloatBitWidth(), uint64_t(value), true)));
    };
    Value zero = scalar(0);
    Value negative =
        createChecked<CompareOp>(ComparePredicate::lt, remainder, zero);
    Value divisorNegative =
        createChecked<CompareOp>(ComparePredicate::lt, b, zero);
    Value nonzero =
        createChecked<CompareOp>(ComparePredicate::ne, remainder, zero);
    Value signsDiffer =
        negative && divisorNegative
            ? createChecked<CompareOp>(ComparePredicate::ne, negative,
                                       divisorNegative)
            : Value();
    // And, as where(a, b, a).
    Value move = signsDiffer && nonzero
                     ? createChecked<WhereOp>(nonzero, signsDiffer, nonzero)
                     : Value();
    Value moved = createChecked<AddOp>(remainder, b);
    remainder = move && moved ? createChecked<WhereOp>(move, moved, remainder)
                              : Value();
  }
  if (!remainder)
    return failure();
  setOutput(node, 0, remainder);
  return success();
}

/// ONNX's activations and rounding that weft composes of its own ops (each
/// differentiates as those do; the rounding ops' gradient is zero, as
/// torch's): Softplus (max(x, 0) + log(1 + exp(-|x|)), finite for large x),
/// Softsign, LeakyRelu, PRelu, Elu, Celu, Selu, ThresholdedRelu,
/// HardSigmoid, HardSwish, Mish, Sign, Floor, Ceil, Round (half to even),
/// IsNaN, IsInf, and the variadic Sum and Mean.
void GraphImporter::addComposedElementwise() {
  for (llvm::StringRef opType :
       {"Softplus", "Softsign", "LeakyRelu", "PRelu", "Elu", "Celu", "Selu",
        "ThresholdedRelu", "HardSigmoid", "HardSwish", "Mish", "Sign", "Floor",
        "Ceil", "Round", "IsNaN", "IsInf", "Sum", "Mean"})
    handlers[opType] = [this](const onnx::NodeProto &node) -> LogicalResult {
      Value x = input(node, 0);
      if (!x)
        return failure();
      llvm::StringRef op = node.op_type();
      auto type = cast<RankedTensorType>(x.getType());
      Type element = type.getElementType();
      auto floatElement = dyn_cast<FloatType>(element);
      bool numeric =
          op == "Sign" || op == "Sum" || op == "Mean" || op == "PRelu";
      if (!floatElement && !(numeric && !element.isInteger(1)))
        return error() << op << " of " << type << ": a float tensor expected";
      auto constant = [&](double value) -> Value {
        auto scalar = RankedTensorType::get({}, element);
        if (floatElement)
          return materialize(DenseElementsAttr::get(
              scalar, FloatAttr::get(element, value).getValue()));
        return materialize(DenseElementsAttr::get(
            scalar, APInt(element.getIntOrFloatBitWidth(),
                          uint64_t(int64_t(value)), /*isSigned=*/true)));
      };
      // Ops built one statement each, so that the IR's order does not depend
      // on the compiler's order of evaluating arguments.
      auto add = [&](Value a, Value b) { return createChecked<AddOp>(a, b); };
      auto sub = [&](Value a, Value b) { return createChecked<SubOp>(a, b); };
      auto mul = [&](Value a, Value b) { return createChecked<MulOp>(a, b); };
      auto div = [&](Value a, Value b) { return createChecked<DivOp>(a, b); };
      auto compare = [&](ComparePredicate p, Value a, Value b) {
        return createChecked<CompareOp>(p, a, b);
      };
      auto where = [&](Value c, Value a, Value b) {
        return createChecked<WhereOp>(c, a, b);
      };
      auto expm1 = [&](Value v) {
        Value e = createChecked<ExpOp>(v);
        Value one = constant(1.0);
        return sub(e, one);
      };
      // max(v, 0) + log(1 + exp(-|v|)); where exp(-|v|) is below 2^-12,
      // 1 + it loses its digits, and log1p's series e - e^2 / 2 (its error
      // e^3 / 3, below the float's) takes its place: far below 0, softplus
      // is exp(v), not 0.
      auto softplus = [&](Value v) {
        Value zero = constant(0.0);
        Value positive = createChecked<MaximumOp>(v, zero);
        Value magnitude = createChecked<AbsOp>(v);
        Value negated = createChecked<NegOp>(magnitude);
        Value e = createChecked<ExpOp>(negated);
        Value one = constant(1.0);
        Value sum = add(one, e);
        Value log = createChecked<LogOp>(sum);
        Value half = constant(0.5);
        Value halfE = mul(half, e);
        Value oneLessHalfE = createChecked<SubOp>(one, halfE);
        Value series = mul(e, oneLessHalfE);
        Value small = compare(ComparePredicate::lt, e, constant(0x1p-12));
        return add(positive, where(small, series, log));
      };
      // x rounded toward -inf; values past the mantissa's reach, infinities
      // and NaN are whole already (and never reach the cast to i64).
      auto floor = [&](Value v) {
        int mantissa = floatElement ? int(APFloat::semanticsPrecision(
                                          floatElement.getFloatSemantics())) -
                                          1
                                    : 0;
        Value reach = constant(std::ldexp(1.0, mantissa));
        Value magnitude = createChecked<AbsOp>(v);
        Value notSmall = compare(ComparePredicate::ge, magnitude, reach);
        Value nan = compare(ComparePredicate::ne, v, v);
        Value whole = where(nan, nan, notSmall);
        Value zero = constant(0.0);
        Value safe = where(whole, zero, v);
        auto i64 =
            cast<RankedTensorType>(safe.getType()).clone(builder.getI64Type());
        Value truncated = CastOp::create(builder, loc, i64, safe);
        Value back = CastOp::create(
            builder, loc, cast<RankedTensorType>(safe.getType()), truncated);
        Value above = compare(ComparePredicate::lt, safe, back);
        Value one = constant(1.0);
        Value lower = sub(back, one);
        Value floored = where(above, lower, back);
        return where(whole, v, floored);
      };
      auto alphaOr = [&](float fallback) {
        return double(floatAttr(node, "alpha", fallback));
      };
      Value result;
      if (op == "Softplus") {
        result = softplus(x);
      } else if (op == "Softsign") {
        Value magnitude = createChecked<AbsOp>(x);
        Value one = constant(1.0);
        Value denominator = add(one, magnitude);
        result = div(x, denominator);
      } else if (op == "LeakyRelu" || op == "PRelu") {
        Value slope = op == "PRelu" ? input(node, 1) : constant(alphaOr(0.01f));
        Value zero = constant(0.0);
        Value negative = compare(ComparePredicate::lt, x, zero);
        Value scaled = slope ? mul(x, slope) : Value();
        result = scaled ? where(negative, scaled, x) : Value();
      } else if (op == "Elu" || op == "Celu" || op == "Selu") {
        const double alpha =
            op == "Selu" ? alphaOr(1.67326319217681884765625f) : alphaOr(1.0f);
        Value zero = constant(0.0);
        Value negative = compare(ComparePredicate::le, x, zero);
        Value inner = x;
        if (op == "Celu") {
          Value a = constant(alpha);
          inner = div(x, a);
        }
        Value a = constant(alpha);
        Value em1 = expm1(inner);
        Value low = mul(a, em1);
        result = where(negative, low, x);
        if (op == "Selu") {
          Value gamma =
              constant(floatAttr(node, "gamma", 1.05070102214813232421875f));
          result = mul(gamma, result);
        }
      } else if (op == "ThresholdedRelu") {
        Value threshold = constant(alphaOr(1.0f));
        Value zero = constant(0.0);
        Value above = compare(ComparePredicate::gt, x, threshold);
        result = where(above, x, zero);
      } else if (op == "HardSigmoid" || op == "HardSwish") {
        bool swish = op == "HardSwish";
        Value a = constant(swish ? 1.0 / 6 : alphaOr(0.2f));
        Value b = constant(swish ? 0.5 : double(floatAttr(node, "beta", 0.5f)));
        Value line = mul(a, x);
        Value shifted = add(line, b);
        Value zero = constant(0.0);
        Value one = constant(1.0);
        Value low = createChecked<MaximumOp>(shifted, zero);
        Value clipped = createChecked<MinimumOp>(low, one);
        result = swish ? mul(x, clipped) : clipped;
      } else if (op == "Mish") {
        Value soft = softplus(x);
        Value t = createChecked<TanhOp>(soft);
        result = mul(x, t);
      } else if (op == "Sign") {
        Value zero = constant(0.0);
        Value one = constant(1.0);
        Value minusOne = constant(-1.0);
        Value positive = compare(ComparePredicate::gt, x, zero);
        Value negative = compare(ComparePredicate::lt, x, zero);
        Value low = where(negative, minusOne, x);
        result = where(positive, one, low);
        // (0 and NaN stay themselves.)
      } else if (op == "Floor") {
        result = floor(x);
      } else if (op == "Ceil") {
        Value negated = createChecked<NegOp>(x);
        Value f = floor(negated);
        result = createChecked<NegOp>(f);
      } else if (op == "Round") {
        // Half to even: floor(x), plus one above the half, or at the half
        // where floor(x) is odd.
        Value f = floor(x);
        Value fraction = sub(x, f);
        Value half = constant(0.5);
        Value two = constant(2.0);
        Value one = constant(1.0);
        Value halved = div(f, two);
        Value halvedFloor = floor(halved);
        Value evenPart = mul(halvedFloor, two);
        Value parity = sub(f, evenPart);
        Value odd = compare(ComparePredicate::eq, parity, one);
        Value above = compare(ComparePredicate::gt, fraction, half);
        Value atHalf = compare(ComparePredicate::eq, fraction, half);
        Value tieUp = where(atHalf, odd, atHalf);
        Value up = where(above, above, tieUp);
        Value next = add(f, one);
        result = where(up, next, f);
      } else if (op == "IsNaN") {
        result = compare(ComparePredicate::ne, x, x);
      } else if (op == "IsInf") {
        bool positive = intAttr(node, "detect_positive", 1) != 0;
        bool negative = intAttr(node, "detect_negative", 1) != 0;
        Value inf = constant(std::numeric_limits<double>::infinity());
        Value negInf = constant(-std::numeric_limits<double>::infinity());
        if (positive && negative) {
          Value magnitude = createChecked<AbsOp>(x);
          result = compare(ComparePredicate::eq, magnitude, inf);
        } else if (positive) {
          result = compare(ComparePredicate::eq, x, inf);
        } else if (negative) {
          result = compare(ComparePredicate::eq, x, negInf);
        } else {
          // Nothing detected: false everywhere (nothing is below -inf).
          result = compare(ComparePredicate::lt, x, negInf);
        }
      } else {
        // Sum and Mean of any number of inputs, broadcast.
        result = x;
        for (int i = 1; i < node.input_size() && result; ++i) {
          Value next = input(node, i);
          result = next ? add(result, next) : Value();
        }
        if (op == "Mean" && result && node.input_size() > 1) {
          Value count = constant(double(node.input_size()));
          result = div(result, count);
        }
      }
      if (!result)
        return failure();
      setOutput(node, 0, result);
      return success();
    };
}

LogicalResult GraphImporter::importSlice(const onnx::NodeProto &node) {
  Value data = input(node, 0);
  auto type = cast<RankedTensorType>(data.getType());
  int64_t rank = type.getRank();
  FailureOr<SmallVector<int64_t>> starts = intsInput(node, 1, "starts");
  FailureOr<SmallVector<int64_t>> ends = intsInput(node, 2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  SmallVector<int64_t> axes, steps(starts->size(), 1);
  if (hasInput(node, 3)) {
    FailureOr<SmallVector<int64_t>> given = intsInput(node, 3, "axes");
    if (failed(given))
      return failure();
    axes = *given;
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(starts->size()); ++i)
      axes.push_back(i);
  }
  if (hasInput(node, 4)) {
    FailureOr<SmallVector<int64_t>> given = intsInput(node, 4, "steps");
    if (failed(given))
      return failure();
    steps = *given;
  }
  if (axes.size() != starts->size() || ends->size() != starts->size() ||
      steps.size() != starts->size())
    return error() << "Slice needs one start, end, axis and step per sliced axis";
  SmallVector<int64_t> lo(rank, 0), hi(type.getShape()), stride(rank, 1);
  // Axes walked backwards (negative steps) become gathers of the indices
  // ONNX's Slice visits, after the forward slice.
  SmallVector<std::pair<int64_t, SmallVector<int64_t>>> reversed;
  for (size_t i = 0; i < axes.size(); ++i) {
    FailureOr<int64_t> axis = normalizeAxis(axes[i], rank);
    if (failed(axis))
      return failure();
    int64_t size = type.getDimSize(*axis);
    int64_t step = steps[i];
    if (step == 0)
      return error() << "Slice step must not be 0";
    int64_t start = (*starts)[i], end = (*ends)[i];
    if (start < 0)
      start += size;
    if (end < 0)
      end += size;
    if (step > 0) {
      lo[*axis] = std::clamp<int64_t>(start, 0, size);
      hi[*axis] = std::max(lo[*axis], std::clamp<int64_t>(end, 0, size));
      stride[*axis] = step;
      continue;
    }
    start = std::clamp<int64_t>(start, 0, size - 1);
    end = std::clamp<int64_t>(end, -1, size - 1);
    // The gather's constant map has one index per position taken.
    const int64_t taken =
        step == std::numeric_limits<int64_t>::min() ? 1 : (start - end) / -step;
    if (taken > kMaxRangeElements)
      return error() << "Slice with step " << step << " takes " << taken
                     << " positions of axis " << *axis
                     << ": Weft gathers at most 2^24 in reverse";
    SmallVector<int64_t> indices;
    for (int64_t index = start; index > end; index += step)
      indices.push_back(index);
    reversed.push_back({*axis, indices});
  }
  bool unitStrides = llvm::all_of(stride, [](int64_t s) { return s == 1; });
  Value result = createChecked<SliceOp>(
      data, lo, hi,
      unitStrides ? DenseI64ArrayAttr() : builder.getDenseI64ArrayAttr(stride));
  for (auto &[axis, indices] : reversed) {
    Value constant = materialize(DenseElementsAttr::get(
        RankedTensorType::get({static_cast<int64_t>(indices.size())},
                              builder.getI64Type()),
        llvm::ArrayRef(indices)));
    result = createChecked<GatherOp>(result, constant, axis);
  }
  setOutput(node, 0, result);
  return success();
}

LogicalResult GraphImporter::importSplit(const onnx::NodeProto &node) {
  Value data = input(node, 0);
  auto type = cast<RankedTensorType>(data.getType());
  FailureOr<int64_t> axis =
      normalizeAxis(intAttr(node, "axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> sizes;
  if (hasInput(node, 1)) {
    FailureOr<SmallVector<int64_t>> given = intsInput(node, 1, "split");
    if (failed(given))
      return failure();
    sizes = *given;
  } else if (std::optional<SmallVector<int64_t>> given =
                 intsAttr(node, "split")) {
    sizes = *given;
  } else {
    int64_t parts = node.output_size();
    int64_t size = type.getDimSize(*axis);
    int64_t chunk = (size + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::min(chunk, size - i * chunk));
  }
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 0)
      return error() << "Split sizes must not be negative, got " << size;
    total += size;
  }
  if (total != type.getDimSize(*axis) ||
      static_cast<int>(sizes.size()) != node.output_size())
    return error() << "Split sizes add up to " << total << " in "
                   << sizes.size() << " pieces, but dimension " << *axis
                   << " has " << type.getDimSize(*axis) << " and the node has "
                   << node.output_size() << " outputs";
  auto split = SplitOp::create(builder, loc, data, *axis, sizes);
  for (int i = 0; i < node.output_size(); ++i)
    setOutput(node, i, split.getResult(i));
  return success();
}

LogicalResult GraphImporter::importUnaryEinsum(const onnx::NodeProto &node,
                                               const std::string &equation) {
  // One operand: sum the indices the result drops, then order the rest.
  Value data = input(node, 0);
  auto type = cast<RankedTensorType>(data.getType());
  size_t arrow = equation.find("->");
  std::string term = equation.substr(0, arrow), result;
  if (term.find("...") != std::string::npos ||
      (arrow != std::string::npos &&
       equation.find("...", arrow) != std::string::npos))
    return error() << "Einsum '" << equation
                   << "': '...' with one operand is not supported";
  if (static_cast<int64_t>(term.size()) != type.getRank())
    return error() << "Einsum '" << equation << "': the operand has rank "
                   << type.getRank() << " but its term names " << term.size()
                   << " dimensions";
  for (char c : term)
    if (std::count(term.begin(), term.end(), c) != 1)
      return error() << "Einsum '" << equation
                     << "' repeats an index within one term (a diagonal or "
                        "trace), which Weft does not import";
  if (arrow != std::string::npos) {
    result = equation.substr(arrow + 2);
  } else {
    result = term;
    llvm::sort(result);
  }
  SmallVector<int64_t> summed;
  std::string kept;
  for (auto [index, c] : llvm::enumerate(term)) {
    if (result.find(c) == std::string::npos)
      summed.push_back(static_cast<int64_t>(index));
    else
      kept.push_back(c);
  }
  for (char c : result)
    if (kept.find(c) == std::string::npos)
      return error() << "Einsum '" << equation << "': the result index '" << c
                     << "' is not in the operand";
  Value value = data;
  if (!summed.empty())
    value = createChecked<ReduceSumOp>(value, summed, false);
  if (value && kept != result) {
    SmallVector<int64_t> perm;
    for (char c : result)
      perm.push_back(static_cast<int64_t>(kept.find(c)));
    value = createChecked<TransposeOp>(value, perm);
  }
  if (!value)
    return failure();
  setOutput(node, 0, value);
  return success();
}

LogicalResult GraphImporter::importEinsum(const onnx::NodeProto &node) {
  // Two-operand einsums are batched matrix products: each index is a batch
  // index (in both operands and the result), a contracted one (in both, not
  // in the result) or a free one of one operand. The product is
  // transpose + reshape to [batch, m, k] x [batch, k, n], one weft.matmul,
  // and reshape + transpose to the result's order.
  const onnx::AttributeProto *attr = attribute(node, "equation");
  std::string equation;
  for (char c : attr ? attr->s() : std::string())
    if (c != ' ')
      equation.push_back(c);
  if (node.input_size() == 1)
    return importUnaryEinsum(node, equation);
  if (node.input_size() != 2)
    return error() << "Einsum '" << equation << "' with " << node.input_size()
                   << " operands is not supported; Weft imports one operand "
                      "(transpose, sums) and two-operand products (batched "
                      "matrix multiplies)";
  Value a = input(node, 0), b = input(node, 1);
  auto aType = cast<RankedTensorType>(a.getType());
  auto bType = cast<RankedTensorType>(b.getType());
  size_t arrow = equation.find("->");
  size_t comma = equation.find(',');
  if (comma == std::string::npos ||
      (arrow != std::string::npos && arrow < comma))
    return error() << "Einsum equation '" << equation << "' is malformed";
  std::string terms[3] = {
      equation.substr(0, comma),
      equation.substr(comma + 1, arrow == std::string::npos
                                     ? std::string::npos
                                     : arrow - comma - 1),
      arrow == std::string::npos ? std::string() : equation.substr(arrow + 2)};
  // '...' stands for the leading dimensions not named; give them letters
  // that no equation uses (digits).
  int64_t ranks[2] = {aType.getRank(), bType.getRank()};
  int64_t ellipsisDims = -1;
  for (int i = 0; i < 3; ++i) {
    size_t dots = terms[i].find("...");
    if (dots == std::string::npos)
      continue;
    int64_t named = static_cast<int64_t>(terms[i].size()) - 3;
    int64_t dims = i < 2 ? ranks[i] - named : ellipsisDims;
    if (i < 2 && ellipsisDims >= 0 && dims != ellipsisDims)
      return error() << "Einsum '" << equation
                     << "': '...' covers different ranks in the two operands; "
                        "Weft does not broadcast einsum operands";
    if (dims < 0 || dims > 9)
      return error() << "Einsum '" << equation
                     << "' does not fit its operands' ranks";
    ellipsisDims = dims;
    std::string letters;
    for (int64_t d = 0; d < dims; ++d)
      letters.push_back(static_cast<char>('0' + d));
    terms[i].replace(dots, 3, letters);
  }
  if (arrow == std::string::npos) {
    // Implicit output: the indices that occur once, in alphabetical order.
    std::string all = terms[0] + terms[1];
    for (char c = '0'; c <= 'z'; ++c)
      if (std::count(all.begin(), all.end(), c) == 1)
        terms[2].push_back(c);
  }
  for (int i = 0; i < 2; ++i)
    if (static_cast<int64_t>(terms[i].size()) != ranks[i])
      return error() << "Einsum '" << equation << "': operand " << i
                     << " has rank " << ranks[i] << " but its term '"
                     << terms[i] << "' names " << terms[i].size()
                     << " dimensions";
  for (const std::string &term : terms)
    for (char c : term)
      if (std::count(term.begin(), term.end(), c) != 1)
        return error() << "Einsum '" << equation
                       << "' repeats an index within one term (a diagonal or "
                          "trace), which Weft does not import";
  auto in = [](const std::string &term, char c) {
    return term.find(c) != std::string::npos;
  };
  std::string batch, contracted, free[2];
  for (char c : terms[0]) {
    if (in(terms[1], c))
      (in(terms[2], c) ? batch : contracted).push_back(c);
    else if (in(terms[2], c))
      free[0].push_back(c);
    else
      return error() << "Einsum '" << equation << "' sums index '" << c
                     << "' of one operand only, which Weft does not import";
  }
  for (char c : terms[1])
    if (!in(terms[0], c)) {
      if (!in(terms[2], c))
        return error() << "Einsum '" << equation << "' sums index '" << c
                       << "' of one operand only, which Weft does not import";
      free[1].push_back(c);
    }
  for (char c : terms[2])
    if (!in(terms[0], c) && !in(terms[1], c))
      return error() << "Einsum '" << equation << "': the result index '" << c
                     << "' is in neither operand";
  Value operands[2] = {a, b};
  RankedTensorType types[2] = {aType, bType};
  auto size = [&](int i, char c) {
    return types[i].getDimSize(static_cast<int64_t>(terms[i].find(c)));
  };
  for (char c : batch + contracted)
    if (size(0, c) != size(1, c))
      return error() << "Einsum '" << equation << "': index '" << c
                     << "' has size " << size(0, c) << " in operand 0 and "
                     << size(1, c) << " in operand 1";
  // Operand i in the order [batch, outer, inner]: a's is [batch, m, k]
  // (or [batch, k, m], transposed by the matmul), b's [batch, k, n] (or
  // [batch, n, k]).
  auto product = [](ArrayRef<int64_t> dims) {
    int64_t p = 1;
    for (int64_t d : dims)
      p *= d;
    return p;
  };
  bool transposed[2] = {false, false};
  for (int i = 0; i < 2; ++i) {
    std::string natural =
        batch + (i == 0 ? free[0] + contracted : contracted + free[1]);
    std::string swapped =
        batch + (i == 0 ? contracted + free[0] : free[1] + contracted);
    std::string order = natural;
    if (terms[i] != natural && terms[i] == swapped) {
      order = swapped;
      transposed[i] = true;
    }
    Value value = operands[i];
    if (terms[i] != order) {
      SmallVector<int64_t> perm;
      for (char c : order)
        perm.push_back(static_cast<int64_t>(terms[i].find(c)));
      value = createChecked<TransposeOp>(value, perm);
    }
    SmallVector<int64_t> shape;
    for (char c : batch)
      shape.push_back(size(i, c));
    SmallVector<int64_t> outer, inner;
    for (char c : i == 0 ? free[0] : contracted)
      outer.push_back(size(i, c));
    for (char c : i == 0 ? contracted : free[1])
      inner.push_back(size(i, c));
    if (transposed[i])
      std::swap(outer, inner);
    shape.push_back(product(outer));
    shape.push_back(product(inner));
    auto shaped = RankedTensorType::get(shape, types[i].getElementType());
    if (value && value.getType() != shaped)
      value = ReshapeOp::create(builder, loc, shaped, value);
    operands[i] = value;
  }
  if (!operands[0] || !operands[1])
    return failure();
  Value result = createChecked<MatmulOp>(operands[0], operands[1],
                                         transposed[0], transposed[1]);
  if (!result)
    return failure();
  std::string produced = batch + free[0] + free[1];
  SmallVector<int64_t> shape;
  for (char c : produced)
    shape.push_back(in(terms[0], c) ? size(0, c) : size(1, c));
  auto resultType = cast<RankedTensorType>(result.getType());
  if (ArrayRef<int64_t>(shape) != resultType.getShape())
    result = ReshapeOp::create(builder, loc, resultType.clone(shape), result);
  if (produced != terms[2]) {
    SmallVector<int64_t> perm;
    for (char c : terms[2])
      perm.push_back(static_cast<int64_t>(produced.find(c)));
    result = createChecked<TransposeOp>(result, perm);
  }
  setOutput(node, 0, result);
  return success();
}

LogicalResult GraphImporter::importCrossEntropy(const onnx::NodeProto &node,
                                                Value scores, bool logProbs) {
  // Scores are [N, C] or [N, C, d1, ...] (the classes on axis 1), labels
  // [N] or [N, d1, ...]; weft's logits keep the classes last.
  if (!scores)
    return failure();
  // SoftmaxCrossEntropyLoss's log-probabilities, if read: log_softmax over
  // the classes.
  if (node.output_size() > 1 && !node.output(1).empty() &&
      isRead(node.output(1)))
    setOutput(node, 1, LogSoftmaxOp::create(builder, loc, scores, 1));
  const onnx::AttributeProto *given = attribute(node, "reduction");
  std::string name = given ? given->s() : "mean";
  std::optional<LossReduction> reduction = symbolizeLossReduction(name);
  if (!reduction)
    return error() << node.op_type() << "'s reduction '" << name
                   << "' is not none, mean or sum";
  auto type = cast<RankedTensorType>(scores.getType());
  if (type.getRank() < 2)
    return error() << node.op_type() << "'s scores are " << type
                   << ", not [N, C, ...]";
  Value logits = scores;
  if (type.getRank() > 2) {
    SmallVector<int64_t> perm{0};
    for (int64_t axis = 2; axis < type.getRank(); ++axis)
      perm.push_back(axis);
    perm.push_back(1);
    logits = createChecked<TransposeOp>(scores, perm);
  }
  IntegerAttr ignore;
  if (const onnx::AttributeProto *index = attribute(node, "ignore_index"))
    ignore = builder.getI64IntegerAttr(index->i());
  Value labels = input(node, 1);
  if (!logits || !labels)
    return failure();
  const bool weighted = hasInput(node, 2);
  if (!weighted && !logProbs) {
    setOutput(node, 0,
              createChecked<CrossEntropyOp>(
                  logits, labels, LossReductionAttr::get(context, *reduction),
                  ignore));
    return success();
  }
  // Class weights, or the likelihood of log-probabilities that are not a
  // LogSoftmax's: weft ops per position, l = -x[label] (or the unreduced
  // cross-entropy) times the label's weight, then reduced as ONNX says (the
  // mean divides by the counted positions' weights).
  auto labelType = dyn_cast<RankedTensorType>(labels.getType());
  auto logitsType = cast<RankedTensorType>(logits.getType());
  ArrayRef<int64_t> positions = logitsType.getShape().drop_back();
  if (!labelType || labelType.getShape() != positions)
    return error() << node.op_type() << "'s labels are " << labels.getType()
                   << ", not "
                   << RankedTensorType::get(positions, builder.getI64Type())
                   << " for scores " << type;
  Type element = logitsType.getElementType();
  auto perPosition = RankedTensorType::get(positions, element);
  auto boolsOf = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, builder.getI1Type());
  };
  Value counted, keep;
  if (ignore) {
    Value ignored = materialize(DenseElementsAttr::get(
        RankedTensorType::get({}, labelType.getElementType()),
        builder.getIntegerAttr(labelType.getElementType(), ignore.getInt())));
    keep = CompareOp::create(builder, loc, boolsOf(positions),
                             ComparePredicate::ne, labels, ignored);
    counted = CastOp::create(builder, loc, perPosition, keep);
  }
  Value losses;
  if (!logProbs) {
    losses = CrossEntropyOp::create(
        builder, loc, perPosition, logits, labels,
        LossReductionAttr::get(context, LossReduction::none), ignore);
  } else {
    // -x at the label: a one-hot of the label over the classes.
    SmallVector<int64_t> column(positions), all(logitsType.getShape());
    column.push_back(1);
    Value classes = IotaOp::create(
        builder, loc, RankedTensorType::get(all, labelType.getElementType()),
        builder.getI64IntegerAttr(int64_t(positions.size())));
    Value hit = CompareOp::create(
        builder, loc, boolsOf(all), ComparePredicate::eq, classes,
        ReshapeOp::create(builder, loc, labelType.clone(column), labels));
    Value picked =
        MulOp::create(builder, loc, logitsType,
                      CastOp::create(builder, loc, logitsType, hit), logits);
    Value sum = ReduceSumOp::create(
        builder, loc, perPosition, picked,
        SmallVector<int64_t>{int64_t(positions.size())}, false);
    losses = NegOp::create(builder, loc, perPosition, sum);
    if (counted)
      losses = MulOp::create(builder, loc, perPosition, losses, counted);
  }
  Value weight = counted;
  if (weighted) {
    Value weights = input(node, 2);
    if (!weights)
      return failure();
    Value safe = labels;
    if (keep)
      safe = WhereOp::create(
          builder, loc, labelType, keep, labels,
          materialize(DenseElementsAttr::get(
              RankedTensorType::get({}, labelType.getElementType()),
              builder.getIntegerAttr(labelType.getElementType(), 0))));
    weight = createChecked<GatherOp>(weights, safe, int64_t(0));
    if (!weight)
      return failure();
    if (counted)
      weight = MulOp::create(builder, loc, perPosition, weight, counted);
    losses = MulOp::create(builder, loc, perPosition, losses, weight);
  }
  if (*reduction == LossReduction::none) {
    setOutput(node, 0, losses);
    return success();
  }
  auto scalar = RankedTensorType::get({}, element);
  SmallVector<int64_t> axes =
      llvm::to_vector(llvm::seq<int64_t>(0, int64_t(positions.size())));
  Value total = ReduceSumOp::create(builder, loc, scalar, losses, axes, false);
  if (*reduction == LossReduction::mean)
    total = DivOp::create(
        builder, loc, scalar, total,
        weight
            ? ReduceSumOp::create(builder, loc, scalar, weight, axes, false)
                  .getResult()
            : materialize(DenseElementsAttr::get(
                  scalar, builder.getFloatAttr(
                              element, double(perPosition.getNumElements())))));
  setOutput(node, 0, total);
  return success();
}

LogicalResult GraphImporter::importDropout(const onnx::NodeProto &node) {
  // Opsets before 12 give the ratio as an attribute and mean inference;
  // later ones take ratio and training_mode as inputs (inference unless
  // training_mode is true). In training, weft.dropout keeps the ratio (a
  // forward program treats it as the identity, as eval mode does).
  Value data = input(node, 0);
  double ratio = floatAttr(node, "ratio", 0.5f);
  bool training = false;
  if (model.opset >= 12) {
    ratio = 0.5;
    if (hasInput(node, 2)) {
      std::optional<DenseElementsAttr> given = constantInput(node, 2);
      if (!given || given->getNumElements() != 1 ||
          !given->getElementType().isInteger(1))
        return error()
               << "Dropout's training_mode (input 2) must be a constant "
                  "boolean";
      training = *given->getValues<bool>().begin();
    }
    // The ratio matters only in training (inference ignores it, so a
    // ratio given as a graph input is fine there).
    if (training && hasInput(node, 1)) {
      std::optional<DenseElementsAttr> given = constantInput(node, 1);
      if (!given || !isa<FloatType>(given->getElementType()) ||
          given->getNumElements() != 1)
        return error() << "Dropout's ratio (input 1) must be a constant scalar";
      // The shortest decimal that reads back as the stored float: 0.1, not
      // 0.10000000149.
      APFloat stored = *given->getValues<APFloat>().begin();
      ratio = stored.convertToDouble();
      bool losesInfo = false;
      stored.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven,
                     &losesInfo);
      float single = stored.convertToFloat();
      for (int digits = 1; digits <= 9; ++digits) {
        char text[32];
        std::snprintf(text, sizeof(text), "%.*g", digits,
                      static_cast<double>(single));
        if (static_cast<float>(std::strtod(text, nullptr)) == single) {
          ratio = std::strtod(text, nullptr);
          break;
        }
      }
    }
  }
  if (training && (ratio < 0 || ratio >= 1))
    return error() << "Dropout ratio " << ratio << " is outside [0, 1)";
  auto used = [&](const std::string &name) {
    for (const onnx::NodeProto &other : graph.node())
      for (const std::string &in : other.input())
        if (in == name)
          return true;
    for (const onnx::ValueInfoProto &out : graph.output())
      if (out.name() == name)
        return true;
    return false;
  };
  if (node.output_size() > 1 && !node.output(1).empty() &&
      used(node.output(1))) {
    if (training && ratio > 0)
      return error() << "Dropout's mask output in a training export is not "
                        "supported; export without using the mask";
    auto type = cast<RankedTensorType>(data.getType());
    setConstant(node.output(1),
                DenseElementsAttr::get(type.clone(builder.getI1Type()), true));
  }
  setOutput(node, 0,
            training && ratio > 0
                ? DropoutOp::create(builder, loc, data.getType(), data,
                                    builder.getF64FloatAttr(ratio))
                      .getResult()
                : data);
  return success();
}

LogicalResult GraphImporter::importConstant(const onnx::NodeProto &node) {
  const onnx::AttributeProto &attr = node.attribute(0);
  Builder b(context);
  if (attr.name() == "value") {
    FailureOr<DenseElementsAttr> value = tensorToAttr(attr.t(), "constant");
    if (failed(value))
      return failure();
    setConstant(node.output(0), *value);
    return success();
  }
  auto scalarOrVector = [&](Type element, bool scalar, auto values) {
    SmallVector<int64_t> shape;
    if (!scalar)
      shape.push_back(static_cast<int64_t>(values.size()));
    return DenseElementsAttr::get(RankedTensorType::get(shape, element),
                                  llvm::ArrayRef(values));
  };
  if (attr.name() == "value_float")
    setConstant(node.output(0), scalarOrVector(b.getF32Type(), true,
                                               SmallVector<float>{attr.f()}));
  else if (attr.name() == "value_floats")
    setConstant(node.output(0),
                scalarOrVector(b.getF32Type(), false,
                               SmallVector<float>(attr.floats().begin(),
                                                  attr.floats().end())));
  else if (attr.name() == "value_int")
    setConstant(node.output(0), scalarOrVector(b.getI64Type(), true,
                                               SmallVector<int64_t>{attr.i()}));
  else if (attr.name() == "value_ints")
    setConstant(node.output(0),
                scalarOrVector(b.getI64Type(), false,
                               SmallVector<int64_t>(attr.ints().begin(),
                                                    attr.ints().end())));
  else
    return error() << "Constant with attribute '" << attr.name()
                   << "' is not supported";
  return success();
}

void GraphImporter::registerHandlers() {
  addBinary<AddOp>("Add");
  addBinary<SubOp>("Sub");
  addBinary<MulOp>("Mul");
  addBinary<DivOp>("Div");
  addBinary<PowOp>("Pow");
  addBinary<MaximumOp>("Max");
  addBinary<MinimumOp>("Min");
  addUnary<NegOp>("Neg");
  addUnary<ExpOp>("Exp");
  addUnary<LogOp>("Log");
  addUnary<SqrtOp>("Sqrt");
  addUnary<TanhOp>("Tanh");
  addUnary<ErfOp>("Erf");
  addUnary<SinOp>("Sin");
  addUnary<CosOp>("Cos");
  addUnary<SigmoidOp>("Sigmoid");
  addUnary<ReluOp>("Relu");
  addUnary<AbsOp>("Abs");
  addCompare("Equal", ComparePredicate::eq);
  addCompare("Less", ComparePredicate::lt);
  addCompare("LessOrEqual", ComparePredicate::le);
  addCompare("Greater", ComparePredicate::gt);
  addCompare("GreaterOrEqual", ComparePredicate::ge);
  addReduce<ReduceSumOp>("ReduceSum");
  addReduce<ReduceMeanOp>("ReduceMean");
  addReduce<ReduceMaxOp>("ReduceMax");
  addComposedReductions();
  addComposedElementwise();
  handlers["Tile"] = [this](const onnx::NodeProto &node) {
    return importTile(node);
  };
  for (llvm::StringRef opType : {"ArgMax", "ArgMin"})
    handlers[opType] = [this](const onnx::NodeProto &node) {
      return importArgExtreme(node);
    };
  handlers["Mod"] = [this](const onnx::NodeProto &node) {
    return importMod(node);
  };
  for (llvm::StringRef opType : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    handlers[opType] = [this](const onnx::NodeProto &node) {
      return importReshapeLike(node);
    };
  handlers["MatMul"] = [this](const onnx::NodeProto &node) {
    return importMatMul(node);
  };
  handlers["Gemm"] = [this](const onnx::NodeProto &node) {
    return importGemm(node);
  };
  handlers["Slice"] = [this](const onnx::NodeProto &node) {
    return importSlice(node);
  };
  handlers["Split"] = [this](const onnx::NodeProto &node) {
    return importSplit(node);
  };
  handlers["Constant"] = [this](const onnx::NodeProto &node) {
    return importConstant(node);
  };
  handlers["Identity"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    if (std::optional<DenseElementsAttr> value = constantInput(node, 0))
      setConstant(node.output(0), *value);
    else
      setOutput(node, 0, input(node, 0));
    return success();
  };
  // Boolean logic with the ops weft has, exactly: or = a ? a : b,
  // and = a ? b : a, xor = a != b, not = a == false.
  handlers["Or"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value a = input(node, 0), b = input(node, 1);
    setOutput(node, 0, createChecked<WhereOp>(a, a, b));
    return success();
  };
  handlers["And"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value a = input(node, 0), b = input(node, 1);
    setOutput(node, 0, createChecked<WhereOp>(a, b, a));
    return success();
  };
  handlers["Xor"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    setOutput(node, 0, createChecked<CompareOp>(ComparePredicate::ne,
                                                input(node, 0), input(node, 1)));
    return success();
  };
  handlers["Not"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value falses = materialize(DenseElementsAttr::get(
        RankedTensorType::get({}, builder.getI1Type()), false));
    setOutput(node, 0,
              createChecked<CompareOp>(ComparePredicate::eq, input(node, 0), falses));
    return success();
  };
  handlers["Reciprocal"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    auto type = cast<RankedTensorType>(data.getType());
    Value one = materialize(DenseElementsAttr::get(
        RankedTensorType::get({}, type.getElementType()),
        FloatAttr::get(type.getElementType(), 1.0).getValue()));
    setOutput(node, 0, createChecked<DivOp>(one, data));
    return success();
  };
  handlers["Size"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    auto type = cast<RankedTensorType>(input(node, 0).getType());
    setConstant(node.output(0),
                DenseElementsAttr::get(RankedTensorType::get({}, builder.getI64Type()),
                                       llvm::ArrayRef<int64_t>{type.getNumElements()}));
    return success();
  };
  handlers["Where"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    setOutput(node, 0,
              createChecked<WhereOp>(input(node, 0), input(node, 1),
                                     input(node, 2)));
    return success();
  };
  handlers["Cast"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    int32_t to = static_cast<int32_t>(intAttr(node, "to", 0));
    Type element = convertElementType(to, context);
    if (!element)
      return error() << "Cast to " << dataTypeName(to)
                     << ", which Weft does not support";
    auto type = cast<RankedTensorType>(data.getType()).clone(element);
    setOutput(node, 0, CastOp::create(builder, loc, type, data));
    return success();
  };
  // Gelu (opset 20; read through the schema OnnxModel.cpp registers).
  handlers["Gelu"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    const onnx::AttributeProto *attr = attribute(node, "approximate");
    std::string approximate = attr ? attr->s() : "none";
    if (approximate != "none" && approximate != "tanh")
      return error() << "Gelu approximate='" << approximate
                     << "' is not ONNX's (none or tanh)";
    Value x = input(node, 0);
    if (!isa<FloatType>(cast<RankedTensorType>(x.getType()).getElementType()))
      return error() << "Gelu of " << x.getType()
                     << ": a float tensor expected";
    setOutput(node, 0,
              GeluOp::create(builder, loc, x,
                             approximate == "tanh" ? GeluApproximation::tanh
                                                   : GeluApproximation::erf));
    return success();
  };
  // CastLike (opset 15; torch.onnx's dynamo exporter writes it wherever a
  // scalar meets a tensor): a Cast to the second input's element type.
  handlers["CastLike"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    Value like = input(node, 1);
    auto type =
        cast<RankedTensorType>(data.getType())
            .clone(cast<RankedTensorType>(like.getType()).getElementType());
    setOutput(node, 0, CastOp::create(builder, loc, type, data));
    return success();
  };
  handlers["Transpose"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    int64_t rank = cast<RankedTensorType>(data.getType()).getRank();
    SmallVector<int64_t> perm;
    if (std::optional<SmallVector<int64_t>> given = intsAttr(node, "perm"))
      perm = *given;
    else
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    setOutput(node, 0, createChecked<TransposeOp>(data, perm));
    return success();
  };
  handlers["Concat"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    SmallVector<Value> inputs;
    for (int i = 0; i < node.input_size(); ++i)
      inputs.push_back(input(node, i));
    int64_t rank = cast<RankedTensorType>(inputs[0].getType()).getRank();
    FailureOr<int64_t> axis = normalizeAxis(intAttr(node, "axis", 0), rank);
    if (failed(axis))
      return failure();
    setOutput(node, 0, createChecked<ConcatOp>(inputs, *axis));
    return success();
  };
  handlers["Gather"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    auto type = cast<RankedTensorType>(data.getType());
    FailureOr<int64_t> axis =
        normalizeAxis(intAttr(node, "axis", 0), type.getRank());
    if (failed(axis))
      return failure();
    Value indices = input(node, 1);
    // ONNX allows negative indices; known ones are made non-negative here.
    if (std::optional<DenseElementsAttr> known = constantInput(node, 1)) {
      int64_t size = type.getDimSize(*axis);
      SmallVector<APInt> fixed;
      for (APInt index : known->getValues<APInt>()) {
        if (index.isNegative())
          index += APInt(index.getBitWidth(), size);
        fixed.push_back(index);
      }
      indices = materialize(DenseElementsAttr::get(known->getType(), fixed));
    }
    if (*axis == 0 && type.getRank() == 2 && isa<FloatType>(type.getElementType()))
      setOutput(node, 0, createChecked<EmbeddingOp>(data, indices));
    else
      setOutput(node, 0, createChecked<GatherOp>(data, indices, *axis));
    return success();
  };
  addSoftmax<SoftmaxOp>("Softmax");
  addSoftmax<LogSoftmaxOp>("LogSoftmax");
  handlers["Pad"] = [this](const onnx::NodeProto &node) {
    return importPad(node);
  };
  handlers["Conv"] = [this](const onnx::NodeProto &node) {
    return importConv(node);
  };
  handlers["ScatterND"] = [this](const onnx::NodeProto &node) {
    return importScatterND(node);
  };
  handlers["GatherElements"] = [this](const onnx::NodeProto &node) {
    return importGatherElements(node);
  };
  handlers["SoftmaxCrossEntropyLoss"] =
      [this](const onnx::NodeProto &node) -> LogicalResult {
    return importCrossEntropy(node, input(node, 0));
  };
  handlers["NegativeLogLikelihoodLoss"] =
      [this](const onnx::NodeProto &node) -> LogicalResult {
    // nll_loss(log_softmax(x, 1), labels) is cross_entropy(x, labels), and
    // weft has that; so is nll_loss(log_softmax(x, -1).view(-1, C), labels),
    // a reshape that keeps the classes being one of x alike. Other
    // log-probabilities take -x at the label, op by op.
    Value logProbs = input(node, 0);
    if (!logProbs)
      return failure();
    auto type = cast<RankedTensorType>(logProbs.getType());
    Value value = logProbs;
    while (auto reshape = value.getDefiningOp<ReshapeOp>()) {
      auto from = cast<RankedTensorType>(reshape.getInput().getType());
      if (type.getRank() != 2 || from.getRank() == 0 ||
          from.getShape().back() != type.getShape().back())
        break;
      value = reshape.getInput();
    }
    auto logSoftmax = value.getDefiningOp<LogSoftmaxOp>();
    const int64_t classes =
        value == logProbs
            ? 1
            : cast<RankedTensorType>(value.getType()).getRank() - 1;
    if (!logSoftmax || type.getRank() < 2 ||
        int64_t(logSoftmax.getAxis()) != classes)
      return importCrossEntropy(node, logProbs, /*logProbs=*/true);
    Value scores = logSoftmax.getInput();
    if (value != logProbs)
      scores = ReshapeOp::create(
          builder, loc,
          type.clone(cast<RankedTensorType>(scores.getType()).getElementType()),
          scores);
    return importCrossEntropy(node, scores);
  };
  handlers["LayerNormalization"] =
      [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    auto type = cast<RankedTensorType>(data.getType());
    FailureOr<int64_t> axis =
        normalizeAxis(intAttr(node, "axis", -1), type.getRank());
    if (failed(axis))
      return failure();
    float epsilon = floatAttr(node, "epsilon", 1e-5f);
    setOutput(node, 0,
              LayerNormOp::create(builder, loc, data.getType(), data,
                                  input(node, 1), input(node, 2), *axis,
                                  llvm::APFloat(epsilon)));
    // The optional Mean and InvStdDev outputs (training exports) are the
    // statistics over the normalized dimensions, kept as size-1 dimensions.
    bool wantsStats = false;
    for (int i = 1; i < node.output_size(); ++i)
      wantsStats |= !node.output(i).empty();
    if (!wantsStats)
      return success();
    SmallVector<int64_t> axes;
    for (int64_t d = *axis; d < type.getRank(); ++d)
      axes.push_back(d);
    Value mean = createChecked<ReduceMeanOp>(data, axes, true);
    Value centered = createChecked<SubOp>(data, mean);
    Value squared = createChecked<MulOp>(centered, centered);
    Value variance = createChecked<ReduceMeanOp>(squared, axes, true);
    Value eps = materialize(DenseElementsAttr::get(
        RankedTensorType::get({}, type.getElementType()),
        FloatAttr::get(type.getElementType(), epsilon).getValue()));
    Value shifted = createChecked<AddOp>(variance, eps);
    if (!shifted)
      return failure();
    Value invStdDev = RsqrtOp::create(builder, loc, shifted);
    if (node.output_size() > 1 && !node.output(1).empty())
      setOutput(node, 1, mean);
    if (node.output_size() > 2 && !node.output(2).empty())
      setOutput(node, 2, invStdDev);
    return success();
  };
  // Opset 23's ops (read through the schemas OnnxModel.cpp registers).
  handlers["Attention"] = [this](const onnx::NodeProto &node) {
    return importAttention(node);
  };
  handlers["RMSNormalization"] = [this](const onnx::NodeProto &node) {
    return importRmsNormalization(node);
  };
  handlers["RotaryEmbedding"] = [this](const onnx::NodeProto &node) {
    return importRotaryEmbedding(node);
  };
  handlers["Expand"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    std::optional<RankedTensorType> type = knownOutputType(node);
    if (!type) {
      // Expand broadcasts both ways: the result is broadcast(input, shape).
      FailureOr<SmallVector<int64_t>> shape = intsInput(node, 1, "shape");
      if (failed(shape))
        return failure();
      auto dataType = cast<RankedTensorType>(data.getType());
      std::optional<SmallVector<int64_t>> joined =
          broadcastShapes(dataType.getShape(), *shape);
      if (!joined)
        return error() << "Expand shape does not broadcast with " << dataType;
      type = RankedTensorType::get(*joined, dataType.getElementType());
    }
    setOutput(node, 0, data.getType() == *type
                           ? data
                           : BroadcastToOp::create(builder, loc, *type, data)
                                 .getResult());
    return success();
  };
  handlers["Clip"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    // clamp(x, min, max) = minimum(maximum(x, min), max); opsets before 11
    // give the bounds as attributes, later ones as optional inputs.
    Value result = input(node, 0);
    auto type = cast<RankedTensorType>(result.getType());
    auto bound = [&](int index, llvm::StringRef name) -> Value {
      if (hasInput(node, index))
        return input(node, index);
      if (const onnx::AttributeProto *attr = attribute(node, name))
        return materialize(DenseElementsAttr::get(
            RankedTensorType::get({}, type.getElementType()),
            FloatAttr::get(type.getElementType(), attr->f()).getValue()));
      return {};
    };
    if (Value low = bound(1, "min"))
      result = createChecked<MaximumOp>(result, low);
    if (Value high = bound(2, "max"); high && result)
      result = createChecked<MinimumOp>(result, high);
    setOutput(node, 0, result);
    return success();
  };
  handlers["Einsum"] = [this](const onnx::NodeProto &node) {
    return importEinsum(node);
  };
  handlers["Dropout"] = [this](const onnx::NodeProto &node) {
    return importDropout(node);
  };
  handlers["Trilu"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    int64_t k = 0;
    if (hasInput(node, 1)) {
      FailureOr<SmallVector<int64_t>> given = intsInput(node, 1, "k");
      if (failed(given) || given->size() != 1)
        return failure();
      k = given->front();
    }
    Value data = input(node, 0);
    // ONNX's Trilu keeps the upper triangle unless told otherwise.
    bool upper = intAttr(node, "upper", 1) != 0;
    setOutput(node, 0,
              TriluOp::create(builder, loc, data, upper, k));
    return success();
  };
  // A running sum (torch.cumsum): positions from a padding mask.
  handlers["CumSum"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    Value data = input(node, 0);
    FailureOr<SmallVector<int64_t>> given = intsInput(node, 1, "axis");
    if (failed(given))
      return failure();
    if (given->size() != 1)
      return error() << "axis (input 1) must hold one integer, not "
                     << given->size();
    FailureOr<int64_t> axis = normalizeAxis(
        given->front(), cast<RankedTensorType>(data.getType()).getRank());
    if (failed(axis))
      return failure();
    setOutput(node, 0,
              CumSumOp::create(builder, loc, data, *axis,
                               intAttr(node, "exclusive", 0) != 0,
                               intAttr(node, "reverse", 0) != 0));
    return success();
  };
  handlers["Shape"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    auto type = cast<RankedTensorType>(input(node, 0).getType());
    int64_t rank = type.getRank();
    int64_t start = intAttr(node, "start", 0), end = intAttr(node, "end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, start, rank);
    SmallVector<int64_t> dims(type.getShape().slice(start, end - start));
    setConstant(node.output(0),
                DenseElementsAttr::get(
                    RankedTensorType::get({end - start}, builder.getI64Type()),
                    llvm::ArrayRef(dims)));
    return success();
  };
  handlers["ConstantOfShape"] =
      [this](const onnx::NodeProto &node) -> LogicalResult {
    Attribute element = builder.getZeroAttr(builder.getF32Type());
    if (const onnx::AttributeProto *value = attribute(node, "value")) {
      FailureOr<DenseElementsAttr> given =
          tensorToAttr(value->t(), "ConstantOfShape value");
      if (failed(given))
        return failure();
      if (given->getNumElements() != 1)
        return error() << "ConstantOfShape value must hold one element, not "
                       << given->getNumElements();
      element = *given->getValues<Attribute>().begin();
    }
    Type elementType = cast<TypedAttr>(element).getType();
    std::optional<RankedTensorType> known = knownOutputType(node);
    // The shape is the constant input where there is one: a declared output
    // type (value_info, unchecked where ONNX could not propagate the shape)
    // must agree with it.
    RankedTensorType type;
    if (constantInput(node, 0) || !known) {
      FailureOr<SmallVector<int64_t>> shape = intsInput(node, 0, "shape");
      if (failed(shape))
        return failure();
      if (boundedElementCount(*shape) < 0)
        return error() << "ConstantOfShape's shape " << dimsText(*shape)
                       << " has a negative dimension or more than 2^48 "
                          "elements";
      type = RankedTensorType::get(*shape, elementType);
    }
    if (known && type && *known != type)
      return error() << "ConstantOfShape makes " << type
                     << " but the model declares " << *known << " for output '"
                     << node.output(0) << "'";
    if (!type)
      type = *known;
    setConstant(node.output(0), DenseElementsAttr::get(type, element));
    return success();
  };
  handlers["Range"] = [this](const onnx::NodeProto &node) -> LogicalResult {
    std::optional<DenseElementsAttr> start = constantInput(node, 0),
                                     limit = constantInput(node, 1),
                                     delta = constantInput(node, 2);
    if (!start || !limit || !delta)
      return error() << "Range needs start, limit and delta known at import "
                        "time";
    for (DenseElementsAttr bound : {*start, *limit, *delta})
      if (bound.getNumElements() != 1 ||
          bound.getElementType() != start->getElementType())
        return error() << "Range's start, limit and delta must be scalars of "
                          "one type; got "
                       << start->getType() << ", " << limit->getType()
                       << " and " << delta->getType();
    std::optional<RankedTensorType> type = knownOutputType(node);
    if (type && (type->getRank() != 1 ||
                 type->getElementType() != start->getElementType()))
      return error() << "Range of " << start->getElementType()
                     << " cannot give " << *type
                     << ", which the model declares for output '"
                     << node.output(0) << "'";
    if (!type) {
      auto scalar = [](DenseElementsAttr v) {
        return isa<FloatType>(v.getElementType())
                   ? (*v.getValues<APFloat>().begin()).convertToDouble()
                   : static_cast<double>(
                         (*v.getValues<APInt>().begin()).getSExtValue());
      };
      double step = scalar(*delta);
      if (step == 0)
        return error() << "Range delta must not be 0";
      double steps = std::ceil((scalar(*limit) - scalar(*start)) / step);
      if (!(steps <= double(kMaxRangeElements)))
        return error() << "Range from " << scalar(*start) << " to "
                       << scalar(*limit) << " by " << step
                       << " would hold more than " << kMaxRangeElements
                       << " values, which Weft does not materialise at import";
      int64_t count = std::max<int64_t>(0, static_cast<int64_t>(steps));
      type = RankedTensorType::get({count}, start->getElementType());
    }
    // Range is folded into a constant: its size is bounded, so that a model
    // (or a --seq-len) asking for 2^40 positions is an error, not minutes
    // of attribute building.
    if (type->getNumElements() > kMaxRangeElements)
      return error() << "Range would hold " << type->getNumElements()
                     << " values, more than the " << kMaxRangeElements
                     << " Weft materialises at import; check the range's "
                        "bounds (or --seq-len)";
    Type element = type->getElementType();
    if (auto floatType = dyn_cast<FloatType>(element)) {
      double first = (*start->getValues<APFloat>().begin()).convertToDouble();
      double step = (*delta->getValues<APFloat>().begin()).convertToDouble();
      SmallVector<APFloat> elements;
      elements.reserve(type->getNumElements());
      for (int64_t i = 0; i < type->getNumElements(); ++i) {
        APFloat value(first + double(i) * step);
        bool lost;
        value.convert(floatType.getFloatSemantics(),
                      APFloat::rmNearestTiesToEven, &lost);
        elements.push_back(value);
      }
      setConstant(node.output(0), DenseElementsAttr::get(*type, elements));
      return success();
    }
    int64_t first = (*start->getValues<APInt>().begin()).getSExtValue();
    int64_t step = (*delta->getValues<APInt>().begin()).getSExtValue();
    unsigned width = element.getIntOrFloatBitWidth();
    SmallVector<APInt> elements;
    elements.reserve(type->getNumElements());
    for (int64_t i = 0; i < type->getNumElements(); ++i)
      elements.push_back(APInt(width,
                               uint64_t(first) + uint64_t(i) * uint64_t(step),
                               /*isSigned=*/true, /*implicitTrunc=*/true));
    setConstant(node.output(0), DenseElementsAttr::get(*type, elements));
    return success();
  };
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Opset 23: Attention, RMSNormalization, RotaryEmbedding
//===----------------------------------------------------------------------===//

/// A float attribute as a user wrote it: 30, 0.125, 1e-06.
static std::string shortNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

bool GraphImporter::isRead(const std::string &name) const {
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &input : node.input())
      if (input == name)
        return true;
  return llvm::any_of(graph.output(), [&](const onnx::ValueInfoProto &output) {
    return output.name() == name;
  });
}

Value GraphImporter::splitHeads(Value value, int64_t heads) {
  auto type = cast<RankedTensorType>(value.getType());
  ArrayRef<int64_t> shape = type.getShape();
  Value split = ReshapeOp::create(
      builder, loc, type.clone({shape[0], shape[1], heads, shape[2] / heads}),
      value);
  return createChecked<TransposeOp>(split, SmallVector<int64_t>{0, 2, 1, 3});
}

Value GraphImporter::mergeHeads(Value value) {
  Value swapped =
      createChecked<TransposeOp>(value, SmallVector<int64_t>{0, 2, 1, 3});
  if (!swapped)
    return {};
  auto type = cast<RankedTensorType>(swapped.getType());
  ArrayRef<int64_t> shape = type.getShape();
  return ReshapeOp::create(
      builder, loc, type.clone({shape[0], shape[1], shape[2] * shape[3]}),
      swapped);
}

/// Attention-23 as weft.attention: 4-D [batch, heads, seq, dim] inputs, or
/// 3-D [batch, seq, heads * dim] ones with q_num_heads and kv_num_heads;
/// grouped KV heads; a bool or additive float mask; is_causal aligned at the
/// top left, which is ONNX's alignment without a KV cache; present_key and
/// present_value, without a cache, are K and V; softcap caps the scaled
/// scores before the mask (the order the ONNX spec settled on, Gemma 2's
/// and FlashAttention's). A cache (past_key, past_value) and a
/// qk_matmul_output that the model reads are refused at the node.
LogicalResult GraphImporter::importAttention(const onnx::NodeProto &node) {
  if (hasInput(node, 4) || hasInput(node, 5))
    return error() << "Attention with a KV cache (past_key, past_value) is "
                      "not imported: Weft compiles training and prefill "
                      "programs; export the model without its cache";
  // torch's exporter names all four outputs (onnxscript's `Y, _, _, _ =
  // op23.Attention(...)`) and uses only Y. Without a cache, present_key and
  // present_value are K and V; the scores (qk_matmul_output) are refused
  // only where something reads them.
  if (node.output_size() > 3 && !node.output(3).empty() &&
      isRead(node.output(3)))
    return error() << "Attention's qk_matmul_output is read by the model; "
                      "Weft's attention does not expose its scores (export "
                      "without reading them)";
  float softcap = floatAttr(node, "softcap", 0.0f);
  if (softcap < 0 || !std::isfinite(softcap))
    return error() << "Attention softcap=" << shortNumber(softcap)
                   << ": a score cap is positive (0 for none)";
  Value q = input(node, 0), k = input(node, 1), v = input(node, 2);
  auto qType = cast<RankedTensorType>(q.getType());
  int64_t rank = qType.getRank();
  for (Value operand : {k, v})
    if (cast<RankedTensorType>(operand.getType()).getRank() != rank)
      return error() << "Attention's Q, K and V have different ranks";
  if (rank != 3 && rank != 4)
    return error() << "Attention of rank-" << rank
                   << " inputs: ONNX's are 3-D or 4-D";
  for (Value operand : {k, v})
    if (cast<RankedTensorType>(operand.getType()).getElementType() !=
        qType.getElementType())
      return error() << "Attention with K or V of another element type than "
                        "Q's is not supported; cast them to "
                     << qType.getElementType();
  if (rank == 3) {
    int64_t qHeads = intAttr(node, "q_num_heads", 0);
    int64_t kvHeads = intAttr(node, "kv_num_heads", 0);
    if (qHeads <= 0 || kvHeads <= 0)
      return error() << "Attention with 3-D inputs needs positive q_num_heads "
                        "and kv_num_heads attributes";
    auto divides = [](Value value, int64_t heads) {
      return cast<RankedTensorType>(value.getType()).getDimSize(2) % heads == 0;
    };
    if (!divides(q, qHeads) || !divides(k, kvHeads) || !divides(v, kvHeads))
      return error() << "Attention: q_num_heads " << qHeads
                     << " and kv_num_heads " << kvHeads
                     << " do not divide the hidden sizes of Q, K and V";
    q = splitHeads(q, qHeads);
    k = splitHeads(k, kvHeads);
    v = splitHeads(v, kvHeads);
    if (!q || !k || !v)
      return failure();
  }
  Value mask;
  if (hasInput(node, 3)) {
    mask = input(node, 3);
    Type element = cast<RankedTensorType>(mask.getType()).getElementType();
    if (!element.isInteger(1) && element != qType.getElementType())
      return error() << "Attention mask of element type " << element
                     << ": Weft takes a bool mask or an additive mask of Q's "
                        "type ("
                     << qType.getElementType() << ")";
  }
  int64_t headDim = cast<RankedTensorType>(q.getType()).getDimSize(3);
  float scale = attribute(node, "scale")
                    ? floatAttr(node, "scale", 1.0f)
                    : 1.0f / std::sqrt(static_cast<float>(headDim));
  if (!(scale > 0) || !std::isfinite(scale))
    return error() << "Attention scale " << shortNumber(scale)
                   << ": Weft's attention takes a positive finite scale";
  bool causal = intAttr(node, "is_causal", 0) != 0;
  Value result = createChecked<AttentionOp>(
      q, k, v, mask, Value(), builder.getF32FloatAttr(scale),
      causal ? builder.getUnitAttr() : UnitAttr(), FloatAttr(),
      softcap > 0 ? builder.getF32FloatAttr(softcap) : FloatAttr(),
      IntegerAttr());
  if (!result)
    return failure();
  if (rank == 3 && !(result = mergeHeads(result)))
    return failure();
  setOutput(node, 0, result);
  // present_key and present_value: [batch, kv_heads, seq, head], as K and V
  // (split into heads when 3-D).
  for (int i = 1; i < 3 && i < node.output_size(); ++i)
    if (!node.output(i).empty())
      setOutput(node, i, i == 1 ? k : v);
  return success();
}

/// RMSNormalization-23 as weft.rms_norm: statistics in f32 (stash_type 1,
/// ONNX's default), a scale that broadcasts to the normalized dimensions.
LogicalResult
GraphImporter::importRmsNormalization(const onnx::NodeProto &node) {
  Value x = input(node, 0), scale = input(node, 1);
  auto type = cast<RankedTensorType>(x.getType());
  FailureOr<int64_t> axis =
      normalizeAxis(intAttr(node, "axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  if (int64_t stash = intAttr(node, "stash_type", 1); stash != 1)
    return error() << "RMSNormalization stash_type=" << stash
                   << " is not supported: Weft computes the statistics in f32 "
                      "(stash_type=1)";
  auto scaleType = cast<RankedTensorType>(scale.getType());
  if (scaleType.getElementType() != type.getElementType())
    return error() << "RMSNormalization with a scale of element type "
                   << scaleType.getElementType() << " for an input of "
                   << type.getElementType()
                   << " is not supported; cast the scale to the input's type";
  // The scale broadcasts to X: it may have leading size-1 dimensions (or
  // size-1 normalized ones), but no extent outside the normalized dimensions.
  ArrayRef<int64_t> normalized = type.getShape().drop_front(*axis);
  ArrayRef<int64_t> given = scaleType.getShape();
  while (given.size() > normalized.size() && given.front() == 1)
    given = given.drop_front();
  if (given.size() > normalized.size())
    return error() << "RMSNormalization scale of shape "
                   << dimsText(scaleType.getShape())
                   << " varies outside the normalized dimensions "
                   << dimsText(normalized) << " (axis " << *axis << ")";
  if (given != scaleType.getShape())
    scale = ReshapeOp::create(builder, loc, scaleType.clone(given), scale);
  if (given != normalized) {
    std::optional<SmallVector<int64_t>> joined =
        broadcastShapes(given, normalized);
    if (!joined || ArrayRef<int64_t>(*joined) != normalized)
      return error() << "RMSNormalization scale of shape "
                     << dimsText(scaleType.getShape())
                     << " does not broadcast to the normalized dimensions "
                     << dimsText(normalized);
    scale =
        BroadcastToOp::create(builder, loc, scaleType.clone(normalized), scale);
  }
  float epsilon = floatAttr(node, "epsilon", 1e-5f);
  if (!(epsilon > 0) || !std::isfinite(epsilon))
    return error() << "RMSNormalization epsilon " << shortNumber(epsilon)
                   << ": a positive finite value expected";
  setOutput(node, 0,
            RMSNormOp::create(builder, loc, type, x, scale, *axis,
                              llvm::APFloat(epsilon)));
  return success();
}

/// RotaryEmbedding-23 as the elementwise ops a RoPE export is made of (which
/// every plan already splits like the heads and the positions): the caches
/// gathered at position_ids (or given per batch and position), the first
/// rotary_embedding_dim features of each head rotated as halves or as
/// interleaved pairs, the rest passed through.
LogicalResult
GraphImporter::importRotaryEmbedding(const onnx::NodeProto &node) {
  Value x = input(node, 0), cosines = input(node, 1), sines = input(node, 2);
  auto type = cast<RankedTensorType>(x.getType());
  Type element = type.getElementType();
  int64_t rank = type.getRank();
  if (rank != 3 && rank != 4)
    return error() << "RotaryEmbedding of a rank-" << rank
                   << " input: ONNX's is 3-D or 4-D";
  for (Value cache : {cosines, sines})
    if (cast<RankedTensorType>(cache.getType()).getElementType() != element)
      return error() << "RotaryEmbedding's caches have another element type "
                        "than its input's ("
                     << element << ")";
  // As [batch, seq, heads, dim].
  Value rows;
  if (rank == 4) {
    rows = createChecked<TransposeOp>(x, SmallVector<int64_t>{0, 2, 1, 3});
  } else {
    int64_t heads = intAttr(node, "num_heads", 0);
    if (heads <= 0 || type.getDimSize(2) % heads)
      return error() << "RotaryEmbedding of a 3-D input needs a num_heads "
                        "attribute that divides its hidden size "
                     << type.getDimSize(2);
    ArrayRef<int64_t> shape = type.getShape();
    rows = ReshapeOp::create(
        builder, loc, type.clone({shape[0], shape[1], heads, shape[2] / heads}),
        x);
  }
  if (!rows)
    return failure();
  auto rowsType = cast<RankedTensorType>(rows.getType());
  ArrayRef<int64_t> shape = rowsType.getShape();
  int64_t batch = shape[0], seq = shape[1], heads = shape[2], dim = shape[3];
  int64_t rotated = intAttr(node, "rotary_embedding_dim", 0);
  if (rotated == 0)
    rotated = dim;
  if (rotated < 0 || rotated > dim || rotated % 2)
    return error() << "RotaryEmbedding rotary_embedding_dim " << rotated
                   << " is not an even size of at most the head size " << dim;
  int64_t half = rotated / 2;
  // The caches as [batch, seq, 1, half].
  SmallVector<Value, 2> tables = {cosines, sines};
  for (Value &table : tables) {
    auto tableType = cast<RankedTensorType>(table.getType());
    if (hasInput(node, 3)) {
      if (tableType.getRank() != 2)
        return error() << "RotaryEmbedding with position_ids takes 2-D "
                          "caches [max_position, rotary_dim / 2], not "
                       << tableType;
      table = createChecked<EmbeddingOp>(table, input(node, 3));
    } else if (tableType.getRank() != 3) {
      return error() << "RotaryEmbedding without position_ids takes 3-D "
                        "caches [batch, seq, rotary_dim / 2], not "
                     << tableType;
    }
    if (!table)
      return failure();
    // One row of positions may serve the whole batch ([1, seq], as
    // Hugging Face's position_ids often are): it broadcasts.
    auto gathered = cast<RankedTensorType>(table.getType());
    int64_t tableRows = gathered.getRank() == 3 ? gathered.getDimSize(0) : -1;
    SmallVector<int64_t> expected = {batch, seq, half};
    if ((tableRows != batch && tableRows != 1) ||
        gathered.getShape().drop_front() != ArrayRef(expected).drop_front())
      return error() << "RotaryEmbedding's cache gives " << gathered
                     << " where the input needs " << dimsText(expected)
                     << " (batch or 1, sequence, rotary_dim / 2)";
    table = ReshapeOp::create(builder, loc,
                              gathered.clone({tableRows, seq, 1, half}), table);
  }
  auto slice = [&](int64_t start, int64_t limit, int64_t stride) {
    return createChecked<SliceOp>(
        rows, SmallVector<int64_t>{0, 0, 0, start},
        SmallVector<int64_t>{batch, seq, heads, limit},
        stride == 1 ? DenseI64ArrayAttr()
                    : builder.getDenseI64ArrayAttr({1, 1, 1, stride}));
  };
  bool interleaved = intAttr(node, "interleaved", 0) != 0;
  Value first = interleaved ? slice(0, rotated, 2) : slice(0, half, 1);
  Value second = interleaved ? slice(1, rotated, 2) : slice(half, rotated, 1);
  if (!first || !second)
    return failure();
  Value cosine = tables[0], sine = tables[1];
  Value real = createChecked<SubOp>(createChecked<MulOp>(cosine, first),
                                    createChecked<MulOp>(sine, second));
  Value imaginary = createChecked<AddOp>(createChecked<MulOp>(sine, first),
                                         createChecked<MulOp>(cosine, second));
  if (!real || !imaginary)
    return failure();
  Value result;
  if (interleaved) {
    // Pairs back in place: [.., half, 1] twice, joined as [.., half, 2].
    auto pairType = rowsType.clone({batch, seq, heads, half, 1});
    Value pairs = createChecked<ConcatOp>(
        SmallVector<Value>{
            ReshapeOp::create(builder, loc, pairType, real),
            ReshapeOp::create(builder, loc, pairType, imaginary)},
        int64_t(4));
    if (!pairs)
      return failure();
    result = ReshapeOp::create(
        builder, loc, rowsType.clone({batch, seq, heads, rotated}), pairs);
  } else {
    result = createChecked<ConcatOp>(SmallVector<Value>{real, imaginary},
                                     int64_t(3));
  }
  if (result && rotated < dim)
    result = createChecked<ConcatOp>(
        SmallVector<Value>{result, slice(rotated, dim, 1)}, int64_t(3));
  if (!result)
    return failure();
  if (rank == 4)
    result =
        createChecked<TransposeOp>(result, SmallVector<int64_t>{0, 2, 1, 3});
  else
    result = ReshapeOp::create(builder, loc, type, result);
  if (!result)
    return failure();
  setOutput(node, 0, result);
  return success();
}

static bool isDefaultDomain(const onnx::NodeProto &node) {
  return node.domain().empty() || node.domain() == "ai.onnx";
}

LogicalResult GraphImporter::checkSupported(
    const google::protobuf::RepeatedPtrField<onnx::NodeProto> &nodes,
    llvm::StringRef where) {
  // One diagnostic with every unsupported op type, each with a node name, so
  // that a user sees the whole list at once.
  llvm::StringMap<std::string> unsupported;
  SmallVector<std::string> order;
  for (auto [index, node] : llvm::enumerate(nodes)) {
    bool defaultDomain = isDefaultDomain(node);
    std::string key = defaultDomain ? node.op_type()
                                    : node.domain() + "." + node.op_type();
    // If is replaced by the branch its condition takes (inlineIf).
    if (defaultDomain &&
        (handlers.count(node.op_type()) || node.op_type() == "If"))
      continue;
    if (unsupported.count(key))
      continue;
    unsupported[key] = node.name().empty()
                           ? "node #" + std::to_string(index)
                           : "'" + node.name() + "'";
    order.push_back(key);
  }
  if (order.empty())
    return success();
  InFlightDiagnostic diag = emitError(FileLineColLoc::get(context, path, 0, 0))
                            << where << " uses " << order.size()
                            << " op type(s) that Weft does not import: ";
  llvm::interleaveComma(order, diag, [&](const std::string &key) {
    diag << key << " (e.g. " << unsupported[key] << ")";
  });
  return diag;
}

namespace {
/// Where each value of a graph goes: the nodes that read it, and the graph's
/// outputs. `reachesOnly` follows a value through its readers, each of which
/// `classify` makes an end (the path stops there, accepted), a route (the
/// path goes on through the node's outputs) or a refusal.
class ValueReaders {
public:
  enum Kind { End, Route, Refuse };
  explicit ValueReaders(const onnx::GraphProto &graph) {
    for (const onnx::NodeProto &node : graph.node())
      for (int i = 0; i < node.input_size(); ++i)
        readers[node.input(i)].push_back({&node, i});
    for (const onnx::ValueInfoProto &output : graph.output())
      outputs.insert(output.name());
  }
  /// Whether every path from `name`, at most `depth` routes deep, ends where
  /// `classify` says End; a graph output or a value nothing reads refuses.
  bool reachesOnly(
      const std::string &name, int depth,
      llvm::function_ref<Kind(const onnx::NodeProto &, int)> classify) const {
    auto it = readers.find(name);
    if (depth < 0 || outputs.contains(name) || it == readers.end())
      return false;
    for (auto [node, index] : it->second) {
      Kind kind = classify(*node, index);
      if (kind == Refuse || (kind == Route && node->output_size() == 0))
        return false;
      if (kind == End)
        continue;
      for (const std::string &out : node->output())
        if (!out.empty() && !reachesOnly(out, depth - 1, classify))
          return false;
    }
    return true;
  }

private:
  llvm::StringMap<SmallVector<std::pair<const onnx::NodeProto *, int>>> readers;
  llvm::StringSet<> outputs;
};
} // namespace

/// Initializers that only feed comparisons (through slices, reshapes, casts
/// and the like): mask buffers such as nanoGPT's float `tril(ones)` causal
/// buffer, compared with 0 after slicing. A comparison has no gradient, so
/// these are never trained; they are constants, which lets raising see a
/// causal mask that an export with dynamic axes computes at run time. The
/// cos and sin caches of RotaryEmbedding (opset 23) are buffers by the op's
/// definition: constants too, so that no plan splits or trains them.
static llvm::StringSet<> constantBuffers(const onnx::GraphProto &graph) {
  ValueReaders readers(graph);
  static const llvm::StringSet<> comparisons = {
      "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not"};
  static const llvm::StringSet<> routes = {
      "Slice",  "Reshape", "Unsqueeze", "Squeeze",   "Cast",
      "Gather", "Expand",  "Identity",  "Transpose", "Flatten"};
  auto compared = [](const onnx::NodeProto &node, int index) {
    if (comparisons.contains(node.op_type()) ||
        (node.op_type() == "Where" && index == 0) ||
        (node.op_type() == "RotaryEmbedding" && (index == 1 || index == 2)))
      return ValueReaders::End;
    return routes.contains(node.op_type()) && index == 0 ? ValueReaders::Route
                                                         : ValueReaders::Refuse;
  };
  llvm::StringSet<> buffers;
  for (const onnx::TensorProto &tensor : graph.initializer())
    if (readers.reachesOnly(tensor.name(), 8, compared))
      buffers.insert(tensor.name());
  return buffers;
}

namespace {
/// The elements of a floating-point initializer as raw bytes, from the file
/// (inline data) or from its external data file; `ok` is false where they
/// cannot be read (another encoding, an unreadable file), which leaves the
/// initializer as it is.
class InitializerElements {
public:
  InitializerElements(const onnx::TensorProto &tensor, llvm::StringRef model)
      : width(elementWidth(tensor.data_type())) {
    if (!width)
      return;
    count = 1;
    for (int64_t d : tensor.dims()) {
      // (The importer checks dims before it sizes anything; a tie needs
      // sizes any tensor can have.)
      if (d <= 0 || d > (int64_t(1) << 31) || count > (int64_t(1) << 40) / d)
        return;
      count *= d;
    }
    if (tensor.data_location() != onnx::TensorProto::EXTERNAL) {
      if (!tensor.has_raw_data() ||
          tensor.raw_data().size() != size_t(count) * width)
        return;
      inlineData = tensor.raw_data().data();
      ok = true;
      return;
    }
    std::string location;
    for (const onnx::StringStringEntryProto &entry : tensor.external_data()) {
      int64_t number = 0;
      if (entry.key() == "location")
        location = entry.value();
      else if (entry.key() == "offset" &&
               !llvm::StringRef(entry.value()).getAsInteger(10, number))
        offset = number;
    }
    // (The importer refuses locations outside the model's directory.)
    if (location.empty() || llvm::sys::path::is_absolute(location) ||
        llvm::StringRef(location).contains(".."))
      return;
    llvm::SmallString<256> file = llvm::sys::path::parent_path(model);
    llvm::sys::path::append(file, location);
    stream = std::fopen(file.c_str(), "rb");
    ok = stream != nullptr;
  }
  ~InitializerElements() {
    if (stream)
      std::fclose(stream);
  }
  InitializerElements(const InitializerElements &) = delete;
  InitializerElements &operator=(const InitializerElements &) = delete;

  /// Element `index`'s bytes into `out` (width() of them).
  bool read(int64_t index, char *out) {
    if (inlineData) {
      std::memcpy(out, inlineData + index * width, width);
      return true;
    }
    return std::fseek(stream, long(offset + index * int64_t(width)),
                      SEEK_SET) == 0 &&
           std::fread(out, 1, width, stream) == width;
  }
  bool external() const { return !inlineData; }
  /// The bytes of `n` elements from `start` (all of them by default), in one
  /// read.
  bool readRange(std::vector<char> &out, int64_t start = 0, int64_t n = -1) {
    if (n < 0)
      n = count - start;
    out.resize(size_t(n) * width);
    if (inlineData) {
      std::memcpy(out.data(), inlineData + start * width, out.size());
      return true;
    }
    return std::fseek(stream, long(offset + start * int64_t(width)),
                      SEEK_SET) == 0 &&
           std::fread(out.data(), 1, out.size(), stream) == out.size();
  }

  bool ok = false;
  size_t width = 0;
  int64_t count = 0;

private:
  static size_t elementWidth(int32_t type) {
    switch (type) {
    case onnx::TensorProto::FLOAT:
      return 4;
    case onnx::TensorProto::DOUBLE:
      return 8;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return 2;
    default:
      return 0;
    }
  }
  const char *inlineData = nullptr;
  std::FILE *stream = nullptr;
  int64_t offset = 0;
};
} // namespace

/// The value of one element of a floating-point initializer, from its bytes.
static double decodeFloat(const char *bytes, int32_t type) {
  switch (type) {
  case onnx::TensorProto::FLOAT: {
    float f;
    std::memcpy(&f, bytes, 4);
    return f;
  }
  case onnx::TensorProto::DOUBLE: {
    double d;
    std::memcpy(&d, bytes, 8);
    return d;
  }
  default: { // BFLOAT16, FLOAT16
    uint16_t bits;
    std::memcpy(&bits, bytes, 2);
    return type == onnx::TensorProto::BFLOAT16 ? rt::bf16BitsToFloat(bits)
                                               : rt::f16BitsToFloat(bits);
  }
  }
}

/// Initializers that are fixed position buffers, which torch never trains,
/// told by their values: torch.onnx.export stores a module's persistent
/// buffers (and the dynamo exporter every buffer) as initializers, like its
/// weights, so nothing else in the file says they are not trained.
///  - A sinusoid table: after dropping dimensions of 1, [positions, features]
///    whose every column is cos(p t) or sin(p t) of the position p for some
///    frequency t (LLaMA's and GPT-NeoX's cos/sin caches, GPT-J's
///    `embed_positions`, the Transformer's and Whisper's encoder sinusoidal
///    position encodings): row 0 is 1 (cos) or 0 (sin), and each column
///    follows Chebyshev's recurrence x[p+1] + x[p-1] = 2 cos(t) x[p] over its
///    first 66 rows, within the element type's rounding, with some column
///    moving by 0.5 or more (a zero or constant table is a weight).
///  - Rotary frequencies (`inv_freq`): a vector starting at 1, strictly
///    monotonic and positive, every use of which ends in Sin or Cos (of the
///    positions times it), scaled ones (Llama 3.1's) included.
static llvm::StringSet<> fixedPositionBuffers(const onnx::GraphProto &graph,
                                              llvm::StringRef model) {
  llvm::StringSet<> found;
  ValueReaders readers(graph);
  // Every path ends in Sin or Cos, through any node.
  auto trigonometric = [](const onnx::NodeProto &node, int) {
    return node.op_type() == "Sin" || node.op_type() == "Cos"
               ? ValueReaders::End
               : ValueReaders::Route;
  };
  for (const onnx::TensorProto &tensor : graph.initializer()) {
    SmallVector<int64_t, 2> dims;
    for (int64_t d : tensor.dims())
      if (d != 1)
        dims.push_back(d);
    if (dims.empty() || dims.size() > 2 || dims[0] < 2 ||
        (dims.size() == 2 && (dims[0] < 4 || dims[1] > (1 << 16))))
      continue;
    InitializerElements elements(tensor, model);
    if (!elements.ok)
      continue;
    // The rounding of the element type, and of a table's angles p t in f32.
    double tol =
        elements.width == 2
            ? (tensor.data_type() == onnx::TensorProto::BFLOAT16 ? 3e-2 : 4e-3)
            : 5e-5;
    // `n` elements from `start`, decoded; false where unreadable or not
    // finite.
    auto read = [&](int64_t start, int64_t n, std::vector<double> &out) {
      std::vector<char> bytes;
      if (!elements.readRange(bytes, start, n))
        return false;
      out.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        out[i] =
            decodeFloat(bytes.data() + i * elements.width, tensor.data_type());
        if (!std::isfinite(out[i]))
          return false;
      }
      return true;
    };
    std::vector<double> v;
    if (dims.size() == 1) {
      if (dims[0] > 65536 ||
          !readers.reachesOnly(tensor.name(), 16, trigonometric) ||
          !read(0, dims[0], v) || std::abs(v[0] - 1) > tol || v[1] <= 0 ||
          v[1] == v[0])
        continue;
      int sign = v[1] < v[0] ? -1 : 1;
      bool ok = true;
      for (int64_t i = 2; ok && i < dims[0]; ++i)
        ok = v[i] > 0 && (v[i] - v[i - 1]) * sign > 0;
      if (ok)
        found.insert(tensor.name());
      continue;
    }
    // Row 0 first (a weight's fails at once: 1 or 0 in every column), then
    // the others.
    int64_t rows = std::min<int64_t>(dims[0], 66), columns = dims[1];
    if (!read(0, columns, v) || llvm::any_of(v, [&](double x) {
          return std::abs(x) > tol && std::abs(x - 1) > tol;
        }))
      continue;
    std::vector<double> rest;
    if (!read(columns, (rows - 1) * columns, rest))
      continue;
    v.insert(v.end(), rest.begin(), rest.end());
    bool ok = llvm::all_of(v, [&](double x) { return std::abs(x) <= 1 + tol; });
    bool moves = false;
    for (int64_t j = 0; ok && j < columns; ++j) {
      auto x = [&](int64_t p) { return v[p * columns + j]; };
      // cos(p t): x[1] = cos t; sin(p t): x[2] = 2 cos t x[1].
      double k = std::abs(x(0) - 1) <= tol ? x(1)
                 : std::abs(x(1)) > tol    ? x(2) / (2 * x(1))
                                           : 1;
      ok = std::abs(k) <= 1 + tol;
      for (int64_t p = 1; ok && p + 1 < rows; ++p) {
        ok = std::abs(x(p + 1) + x(p - 1) - 2 * k * x(p)) <= 4 * tol;
        moves |= std::abs(x(p) - x(0)) >= 0.5;
      }
    }
    if (ok && moves)
      found.insert(tensor.name());
  }
  return found;
}

/// Initializers that are another's transpose, element for element: the copy
/// that torch.onnx.export's constant folding makes of a tied weight's
/// transpose (a Linear whose weight is the embedding's, F.linear(x,
/// embedding.weight)), which an inference export keeps as a second
/// initializer, so that the file trains and counts two weights where the
/// module has one. Maps each copy's name to its original's. Inline data is
/// compared whole; external data at 4,096 spread positions (planning reads
/// no more of a large model's weights). Constant tensors (a zero-initialized
/// matrix) tie nothing.
static llvm::StringMap<std::string>
transposedCopies(const onnx::GraphProto &graph, llvm::StringRef model) {
  llvm::StringMap<std::string> copies;
  std::map<std::tuple<int32_t, int64_t, int64_t>,
           SmallVector<const onnx::TensorProto *, 2>>
      byShape;
  for (const onnx::TensorProto &tensor : graph.initializer())
    if (tensor.dims_size() == 2 && tensor.dims(0) != tensor.dims(1) &&
        tensor.dims(0) > 1 && tensor.dims(1) > 1)
      byShape[{tensor.data_type(), tensor.dims(0), tensor.dims(1)}].push_back(
          &tensor);
  // An exporter's own names for what it made ("onnx::MatMul_583").
  auto generated = [](const onnx::TensorProto *t) {
    return llvm::StringRef(t->name()).starts_with("onnx::");
  };
  // Each candidate's first element (a tensor's and its transpose's are the
  // same), read once: pairs whose first elements differ are not copies, so
  // a model of L layers' up and down projections costs L reads, not L^2.
  llvm::DenseMap<const onnx::TensorProto *, std::string> firsts;
  auto firstOf = [&](const onnx::TensorProto *t) -> std::string {
    auto [it, inserted] = firsts.try_emplace(t);
    if (inserted) {
      InitializerElements e(*t, model);
      char bytes[8];
      if (e.ok && e.read(0, bytes))
        it->second.assign(bytes, e.width);
    }
    return it->second;
  };
  for (auto &[key, wide] : byShape) {
    auto [type, rows, columns] = key;
    auto partners = byShape.find({type, columns, rows});
    if (rows > columns || partners == byShape.end())
      continue;
    for (const onnx::TensorProto *w : wide)
      for (const onnx::TensorProto *t : partners->second) {
        // The copy is the exporter's, or else the [in, out] one (a
        // MatMul's weight; the embedding is [rows, width]).
        const onnx::TensorProto *copy = generated(t) && !generated(w) ? t : w;
        const onnx::TensorProto *original = copy == w ? t : w;
        if (copies.count(copy->name()) || copies.count(original->name()) ||
            firstOf(copy).empty() || firstOf(copy) != firstOf(original))
          continue;
        InitializerElements a(*original, model), b(*copy, model);
        const int64_t height = original->dims(0), width = original->dims(1);
        if (!a.ok || !b.ok)
          continue;
        const int64_t n = a.count;
        const bool whole = (!a.external() && !b.external()) || n <= 4096;
        const int64_t samples = whole ? n : 4096;
        char x[8], y[8], first[8];
        bool same = true, constant = true;
        for (int64_t k = 0; k < samples && same; ++k) {
          // Spread over the tensor (a multiplicative hash of k), with its
          // first and last elements.
          int64_t at =
              whole || k == 0 ? k
              : k == 1        ? n - 1
                       : int64_t((uint64_t(k) * 2654435761ull) % uint64_t(n));
          int64_t i = at / width, j = at % width;
          same = a.read(at, x) && b.read(j * height + i, y) &&
                 std::memcmp(x, y, a.width) == 0;
          if (k == 0)
            std::memcpy(first, x, a.width);
          else
            constant &= std::memcmp(first, x, a.width) == 0;
        }
        if (same && !constant)
          copies[copy->name()] = original->name();
      }
  }
  return copies;
}

LogicalResult GraphImporter::importInitializers() {
  llvm::StringSet<> masks = constantBuffers(graph);
  llvm::StringMap<std::string> copies = transposedCopies(graph, path);
  llvm::StringSet<> fixed;
  if (options.fixedBuffers)
    fixed = fixedPositionBuffers(graph, path);
  for (const onnx::TensorProto &tensor : graph.initializer()) {
    if (copies.count(tensor.name()))
      continue;
    // 8- and 16-bit integers (masks, indices) are constants, read as i32.
    if (isWidenedInteger(tensor.data_type())) {
      loc = NameLoc::get(builder.getStringAttr(tensor.name()),
                         FileLineColLoc::get(context, path, 0, 0));
      FailureOr<DenseElementsAttr> value = tensorToAttr(tensor, "initializer");
      if (failed(value))
        return failure();
      setConstant(tensor.name(), *value);
      continue;
    }
    // A fixed position buffer is a constant (read whole, from external data
    // too: a table of up to 2^25 elements, 131,072 positions of 256).
    if (fixed.count(tensor.name())) {
      InitializerElements elements(tensor, path);
      std::vector<char> bytes;
      Type element = convertElementType(tensor.data_type(), context);
      if (element && elements.ok && elements.count <= (int64_t(1) << 25) &&
          elements.readRange(bytes)) {
        SmallVector<int64_t> shape(tensor.dims().begin(), tensor.dims().end());
        setConstant(tensor.name(),
                    DenseElementsAttr::getFromRawBuffer(
                        RankedTensorType::get(shape, element),
                        ArrayRef<char>(bytes.data(), bytes.size())));
        fixedBuffers.push_back(tensor.name());
        continue;
      }
    }
    Type element = convertElementType(tensor.data_type(), context);
    if (!element)
      return emitError(FileLineColLoc::get(context, path, 0, 0))
             << "initializer '" << tensor.name() << "' has element type "
             << dataTypeName(tensor.data_type())
             << ", which Weft does not support";
    SmallVector<int64_t> shape(tensor.dims().begin(), tensor.dims().end());
    auto type = RankedTensorType::get(shape, element);
    loc = NameLoc::get(builder.getStringAttr(tensor.name()),
                       FileLineColLoc::get(context, path, 0, 0));
    // Small integer initializers are shapes, axes and indices: keep their
    // values for folding whether or not weights are loaded.
    // Boolean tensors and buffers that only feed comparisons (masks, causal
    // buffers) or rotary caches are never trained: constants.
    bool small = (type.getNumElements() <= 64 && isa<IntegerType>(element)) ||
                 ((element.isInteger(1) || masks.contains(tensor.name())) &&
                  type.getNumElements() <= (1 << 20));
    bool external = tensor.data_location() == onnx::TensorProto::EXTERNAL;
    if (small && !external) {
      FailureOr<DenseElementsAttr> value = tensorToAttr(tensor, "initializer");
      if (failed(value))
        return failure();
      setConstant(tensor.name(), *value);
      continue;
    }
    // A float scalar (an epsilon, a Range bound) stays a parameter, and its
    // value is also known for folding (and kept by the parameter, --no-weights
    // too).
    if (type.getRank() == 0 && !external) {
      FailureOr<DenseElementsAttr> value = tensorToAttr(tensor, "initializer");
      if (failed(value))
        return failure();
      setConstant(tensor.name(), *value);
    }
    ElementsAttr inlineValue;
    ExternalDataAttr externalData;
    if (external) {
      std::string location;
      int64_t offset = 0, length = getTensorBytes(type);
      for (const onnx::StringStringEntryProto &entry : tensor.external_data()) {
        if (entry.key() == "location") {
          location = entry.value();
          continue;
        }
        if (entry.key() != "offset" && entry.key() != "length")
          continue;
        int64_t number = 0;
        if (llvm::StringRef(entry.value()).getAsInteger(10, number) ||
            number < 0)
          return emitError(loc)
                 << "initializer '" << tensor.name() << "': external data "
                 << entry.key() << " '" << entry.value()
                 << "' is not a non-negative integer";
        (entry.key() == "offset" ? offset : length) = number;
      }
      // ONNX: locations are relative to the model's directory. An absolute
      // path or one through '..' would read files outside it.
      bool escapes =
          location.empty() || llvm::sys::path::is_absolute(location) ||
          llvm::sys::path::is_absolute(location,
                                       llvm::sys::path::Style::windows);
      for (auto it = llvm::sys::path::begin(location),
                end = llvm::sys::path::end(location);
           it != end && !escapes; ++it)
        escapes = *it == "..";
      if (escapes)
        return emitError(loc)
               << "initializer '" << tensor.name()
               << "': external data location '" << location
               << "' is not a path inside the model's directory; ONNX "
                  "requires locations relative to it, without '..'";
      externalData = ExternalDataAttr::get(context, location, offset, length);
    } else if (options.loadWeights) {
      FailureOr<DenseElementsAttr> value = tensorToAttr(tensor, "initializer");
      if (failed(value))
        return failure();
      inlineValue = *value;
      // The module holds the weight now: free the protobuf's copy, so that
      // a model's weights are in memory once, not twice, during import.
      delete const_cast<onnx::TensorProto &>(tensor).release_raw_data();
    } else if (type.getRank() == 0) {
      // A scalar keeps its value without weights too (a mask's fill, such as
      // GPT-2's masked_bias, which raising must see to find the mask).
      inlineValue = constants.lookup(tensor.name());
    }
    values[tensor.name()] = ParameterOp::create(
        builder, loc, type, builder.getStringAttr(tensor.name()), inlineValue,
        options.loadWeights || options.keepExternalData ? externalData
                                                        : ExternalDataAttr());
  }
  // A folded transpose of a tied weight is that weight, transposed, as a
  // training export (no constant folding) writes it: one parameter, which
  // -weft-raise makes a linear's transposed weight.
  for (const auto &copy : copies) {
    loc = NameLoc::get(builder.getStringAttr(copy.getKey()),
                       FileLineColLoc::get(context, path, 0, 0));
    Value original = values.lookup(copy.getValue());
    if (!original)
      return emitError(loc)
             << "initializer '" << copy.getKey() << "' is the transpose of '"
             << copy.getValue() << "', which is not a weight";
    values[copy.getKey()] =
        createChecked<TransposeOp>(original, SmallVector<int64_t>{1, 0});
  }
  return success();
}

/// The module a node of torch's dynamo exporter comes from: the last module
/// of its `pkg.torch.onnx.name_scopes` metadata ("['', 'model',
/// 'model.layers.0', 'model.layers.0.mlp', 'linear']" gives
/// "model.layers.0.mlp"), or "" without one. Its node names ("node_linear")
/// say nothing of the module. NodeProto's metadata_props (field 9, IR
/// version 10) are newer than libonnx 1.12, which keeps them as unknown
/// fields: they are read from those.
static std::string moduleScope(const onnx::NodeProto &node) {
  const google::protobuf::UnknownFieldSet &unknown =
      node.GetReflection()->GetUnknownFields(node);
  constexpr int kMetadataProps = 9;
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &field = unknown.field(i);
    if (field.number() != kMetadataProps ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (!entry.ParseFromString(field.length_delimited()) ||
        entry.key() != "pkg.torch.onnx.name_scopes")
      continue;
    // A Python list of quoted strings; the last is the node's own name.
    SmallVector<StringRef> scopes;
    StringRef rest = entry.value();
    while (true) {
      size_t open = rest.find_first_of("'\"");
      if (open == StringRef::npos)
        break;
      size_t close = rest.find(rest[open], open + 1);
      if (close == StringRef::npos)
        break;
      scopes.push_back(rest.slice(open + 1, close));
      rest = rest.drop_front(close + 1);
    }
    if (scopes.size() >= 2)
      return scopes[scopes.size() - 2].str();
  }
  return "";
}

void GraphImporter::setLocation(const onnx::NodeProto &node, int index) {
  std::string name = node.name().empty()
                         ? node.op_type() + "#" + std::to_string(index)
                         : node.name();
  // A dynamo export's node is located by its module too, which is what
  // -weft-mark-layers reads ("model.layers.0.mlp/node_linear").
  if (std::string scope = moduleScope(node); !scope.empty())
    name = scope + "/" + name;
  loc = NameLoc::get(builder.getStringAttr(name),
                     FileLineColLoc::get(context, path, 0, 0));
}

LogicalResult GraphImporter::inlineIf(int index) {
  const onnx::NodeProto &node = graph.node(index);
  setLocation(node, index);
  const std::string &cond = node.input_size() ? node.input(0) : "";
  auto known = constants.find(cond);
  if (cond.empty() || values.count(cond) || known == constants.end())
    return error() << "If's condition '" << cond
                   << "' depends on the model's input values; Weft imports an "
                      "If only where the input shapes decide its branch (as "
                      "torch.jit.script code on a tensor's size does): "
                      "export the model by tracing, so that torch takes the "
                      "branch";
  DenseElementsAttr condition = known->second;
  if (condition.getNumElements() != 1 ||
      !condition.getElementType().isInteger(1))
    return error() << "If's condition '" << cond << "' is "
                   << condition.getType() << "; ONNX requires a single bool";
  bool taken = *condition.getValues<bool>().begin();
  StringRef branchName = taken ? "then_branch" : "else_branch";
  const onnx::AttributeProto *attr = attribute(node, branchName);
  if (!attr || !attr->has_g())
    return error() << "If has no " << branchName;
  // A copy: the graph's node list is rebuilt below.
  const onnx::GraphProto branch = attr->g();
  if (branch.output_size() != node.output_size())
    return error() << "If's " << branchName << " gives " << branch.output_size()
                   << " values for " << node.output_size() << " outputs";
  if (failed(checkSupported(branch.node(), "the " + branchName.str() +
                                               " taken by If '" + node.name() +
                                               "'")))
    return failure();

  // The branch's values are renamed into the graph's scope, after the If's
  // first output (graph values have unique names; two Ifs, say from one
  // inlined function called twice, may share their branches' names).
  std::string prefix =
      (node.output_size() ? node.output(0) : "If#" + std::to_string(index)) +
      "/" + (taken ? "then" : "else") + "/";
  std::unordered_map<std::string, std::string> rename;
  for (const onnx::TensorProto &tensor : branch.initializer())
    rename[tensor.name()] = prefix + tensor.name();
  for (const onnx::NodeProto &inner : branch.node())
    for (const std::string &output : inner.output())
      if (!output.empty())
        rename[output] = prefix + output;
  auto renamed = [&](const std::string &name) {
    auto found = rename.find(name);
    return found == rename.end() ? name : found->second;
  };

  std::string scope = node.name().empty()
                          ? node.op_type() + "#" + std::to_string(index)
                          : node.name();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> spliced;
  // A branch's initializers are its constants.
  for (const onnx::TensorProto &tensor : branch.initializer()) {
    onnx::NodeProto *constant = spliced.Add();
    constant->set_op_type("Constant");
    constant->set_name(scope + "/" + tensor.name());
    constant->add_output(renamed(tensor.name()));
    onnx::AttributeProto *value = constant->add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    *value->mutable_t() = tensor;
    value->mutable_t()->set_name(renamed(tensor.name()));
  }
  for (auto [position, inner] : llvm::enumerate(branch.node())) {
    onnx::NodeProto *copy = spliced.Add();
    *copy = inner;
    if (copy->name().empty())
      copy->set_name(scope + "/" + copy->op_type() + "_" +
                     std::to_string(position));
    for (std::string &input : *copy->mutable_input())
      input = renamed(input);
    for (std::string &output : *copy->mutable_output())
      output = renamed(output);
    for (onnx::AttributeProto &inner : *copy->mutable_attribute())
      renameCapturedValues(inner, rename);
  }
  for (int i = 0; i < node.output_size(); ++i) {
    if (node.output(i).empty())
      continue;
    onnx::NodeProto *identity = spliced.Add();
    identity->set_op_type("Identity");
    identity->set_name(scope + "/" + node.output(i));
    identity->add_input(renamed(branch.output(i).name()));
    identity->add_output(node.output(i));
  }
  onnx::GraphProto &mutableGraph = *model.proto.mutable_graph();
  for (const auto *list : {&branch.value_info(), &branch.output()})
    for (const onnx::ValueInfoProto &info : *list)
      if (rename.count(info.name())) {
        onnx::ValueInfoProto *added = mutableGraph.add_value_info();
        *added = info;
        added->set_name(renamed(info.name()));
      }
  int count = spliced.size();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < index; ++i)
    nodes.Add()->Swap(mutableGraph.mutable_node(i));
  for (onnx::NodeProto &inner : spliced)
    nodes.Add()->Swap(&inner);
  for (int i = index + 1; i < mutableGraph.node_size(); ++i)
    nodes.Add()->Swap(mutableGraph.mutable_node(i));
  mutableGraph.mutable_node()->Swap(&nodes);
  collectValueInfo();

  // ONNX types an If's outputs by both branches: a rank that differs
  // between them (torchlib's scalar cases) leaves the outputs, and what
  // reads them, without a shape. Inferred again now that the If is gone.
  bool typed = true;
  for (int i = index; i < index + count && typed; ++i)
    for (int j = 0; j < graph.node(i).output_size(); ++j)
      if (!graph.node(i).output(j).empty() &&
          !knownOutputType(graph.node(i), j))
        typed = false;
  if (typed)
    return success();
  std::string message;
  if (!inferOnnxShapes(model, message))
    return error() << message << " (after taking the If's " << branchName
                   << ")";
  collectValueInfo();
  return success();
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node,
                                        int index) {
  setLocation(node, index);
  // Data propagation already computed this node's outputs: a shape value.
  // Not where every input is a constant: Weft folds those itself, exactly
  // (ONNX 1.14's propagation of Add / Sub / Mul wraps values at 32 bits:
  // 718103552000 + 2 came out as 844013570).
  // CastLike's second input gives only a type: a CastLike of a constant is
  // a constant (onnxscript's attention scale, CastLike(Shape(q)[-1], q)).
  int dataInputs = node.op_type() == "CastLike" ? std::min(1, node.input_size())
                                                : node.input_size();
  auto constantInputs = [&] {
    return llvm::all_of(llvm::make_range(node.input().begin(),
                                         node.input().begin() + dataInputs),
                        [&](const std::string &in) {
                          return in.empty() ||
                                 (constants.count(in) && !values.count(in));
                        });
  };
  bool inputsConstant = constantInputs();
  bool allKnown = node.output_size() > 0 && !inputsConstant;
  for (const std::string &output : node.output()) {
    auto data = model.shapeData.find(output);
    auto type = valueTypes.find(output);
    if (data == model.shapeData.end() || type == valueTypes.end() ||
        llvm::any_of(data->second.dim(), [](const auto &dim) {
          return !dim.has_dim_value();
        }) ||
        type->second->tensor_type().elem_type() != onnx::TensorProto::INT64)
      allKnown = false;
  }
  if (allKnown) {
    for (int i = 0; i < node.output_size(); ++i) {
      FailureOr<RankedTensorType> type = outputType(node, i);
      if (failed(type))
        return failure();
      SmallVector<int64_t> known;
      for (const auto &dim : model.shapeData[node.output(i)].dim())
        known.push_back(dim.dim_value());
      if (static_cast<int64_t>(known.size()) != type->getNumElements())
        return error() << "data propagation gave " << known.size()
                       << " values for " << *type;
      setConstant(node.output(i),
                  DenseElementsAttr::get(*type, llvm::ArrayRef(known)));
    }
    return success();
  }
  // Every tensor input must exist (as a value or a known constant), except
  // for handlers that read constants themselves.
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string &input = node.input(i);
    if (!input.empty() && !values.count(input) && !constants.count(input))
      return error() << "input '" << input << "' is not defined before use";
  }
  bool allConstant = constantInputs();
  Block *block = builder.getInsertionBlock();
  Operation *last = block->empty() ? nullptr : &block->back();
  nodeFailed = false;
  if (failed(handlers[node.op_type()](node)) || nodeFailed)
    return failure();
  SmallVector<Operation *> created;
  for (Operation &op : llvm::make_range(
           last ? std::next(last->getIterator()) : block->begin(), block->end()))
    created.push_back(&op);
  for (Operation *op : created)
    if (failed(mlir::verify(op)))
      return failure();
  // The converted ops must produce what ONNX inferred, where it inferred.
  for (int i = 0; i < node.output_size(); ++i) {
    const std::string &output = node.output(i);
    auto value = values.find(output);
    if (output.empty() || value == values.end())
      continue;
    std::optional<RankedTensorType> expected = knownOutputType(node, i);
    if (expected && value->second.getType() != *expected)
      return error() << node.op_type() << " produced " << value->second.getType()
                     << " but ONNX infers " << *expected
                     << " for output '" << output << "'";
  }
  if (allConstant && !created.empty())
    return foldNode(node, created);
  return success();
}

LogicalResult GraphImporter::foldNode(const onnx::NodeProto &node,
                                      ArrayRef<Operation *> created) {
  SmallVector<Value> outputs;
  int64_t elements = 0;
  for (const std::string &output : node.output()) {
    Value value = values.lookup(output);
    if (!value)
      return success();
    outputs.push_back(value);
    elements += cast<RankedTensorType>(value.getType()).getNumElements();
  }
  // Shape arithmetic is small; leave big constant computations to the
  // program rather than bloat the IR.
  if (elements > (1 << 16))
    return success();
  FailureOr<std::vector<rt::HostTensor>> folded =
      evaluate(created, outputs, InterpreterOptions());
  if (failed(folded))
    return failure();
  // The interpreter's kernels compute shapes themselves; a result that is not
  // what the op declares would make a malformed attribute, so it stops here.
  for (auto [index, value] : llvm::enumerate(outputs)) {
    auto type = cast<RankedTensorType>(value.getType());
    const rt::HostTensor &tensor = (*folded)[index];
    size_t stored =
        tensor.isFloat() ? tensor.floats.size() : tensor.ints.size();
    if (tensor.shape !=
            rt::Shape(type.getShape().begin(), type.getShape().end()) ||
        tensor.isFloat() != isa<FloatType>(type.getElementType()) ||
        stored != static_cast<size_t>(type.getNumElements()))
      return error() << "folding " << node.op_type() << " at import gave "
                     << rt::dtypeName(tensor.dtype) << " "
                     << rt::shapeString(tensor.shape) << " for output '"
                     << node.output(index) << "', which its op declares "
                     << type << "; this is a Weft bug: please report it "
                     << "with the model";
  }
  for (auto [index, value] : llvm::enumerate(outputs)) {
    setConstant(node.output(index),
                toElementsAttr((*folded)[index],
                               cast<RankedTensorType>(value.getType())));
    values.erase(node.output(index));
  }
  for (Operation *op : llvm::reverse(created))
    op->erase();
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  registerHandlers();
  collectValueInfo();
  if (failed(checkDeclaredShapes()) ||
      failed(checkSupported(graph.node(), "the model")))
    return nullptr;
  Location fileLoc = FileLineColLoc::get(context, path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  builder.setInsertionPointToEnd(module->getBody());

  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &init : graph.initializer())
    initializers.insert(init.name());
  SmallVector<Type> argTypes;
  SmallVector<const onnx::ValueInfoProto *> args;
  for (const onnx::ValueInfoProto &in : graph.input()) {
    if (initializers.contains(in.name()))
      continue;
    loc = NameLoc::get(builder.getStringAttr(in.name()), fileLoc);
    onnx::NodeProto pseudo;
    pseudo.add_output(in.name());
    FailureOr<RankedTensorType> type = outputType(pseudo);
    if (failed(type))
      return nullptr;
    argTypes.push_back(*type);
    args.push_back(&in);
  }
  // Result types are set once the graph is converted, from the values.
  auto func = func::FuncOp::create(builder, fileLoc, options.functionName,
                                    builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [arg, info] : llvm::zip(entry->getArguments(), args)) {
    values[info->name()] = arg;
    func.setArgAttr(arg.getArgNumber(), "onnx.name",
                    builder.getStringAttr(info->name()));
  }
  builder.setInsertionPointToEnd(entry);
  if (failed(importInitializers()))
    return nullptr;
  if (!fixedBuffers.empty())
    (*module)->setAttr(WeftDialect::getFixedBuffersAttrName(),
                       builder.getStrArrayAttr(SmallVector<StringRef>(
                           fixedBuffers.begin(), fixedBuffers.end())));
  // The graph grows as If nodes are replaced by their branches' nodes.
  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto &node = graph.node(index);
    if (isDefaultDomain(node) && node.op_type() == "If") {
      if (failed(inlineIf(index)))
        return nullptr;
      --index;
      continue;
    }
    if (failed(importNode(node, index)))
      return nullptr;
  }
  SmallVector<Value> results;
  for (const onnx::ValueInfoProto &out : graph.output()) {
    loc = NameLoc::get(builder.getStringAttr(out.name()), fileLoc);
    Value value = values.lookup(out.name());
    if (!value) {
      auto constant = constants.find(out.name());
      if (constant == constants.end()) {
        emitError(loc) << "graph output '" << out.name() << "' is never computed";
        return nullptr;
      }
      value = materialize(constant->second);
    }
    results.push_back(value);
  }
  func::ReturnOp::create(builder, fileLoc, results);
  func.setType(builder.getFunctionType(argTypes, ValueRange(results).getTypes()));
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

} // namespace

OwningOpRef<ModuleOp> weft::importOnnxModel(llvm::StringRef path,
                                            const OnnxImportOptions &options,
                                            MLIRContext *context) {
  context->loadDialect<WeftDialect, func::FuncDialect>();
  OnnxModel model;
  std::string message;
  if (!loadOnnxModel(path, options, model, message)) {
    emitError(FileLineColLoc::get(context, path, 0, 0)) << message;
    return nullptr;
  }
  return GraphImporter(model, path, options, context).run();
}

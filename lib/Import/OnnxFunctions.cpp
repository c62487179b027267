//===- OnnxFunctions.cpp - Inline an ONNX model's local functions ---------===//
//
// Part of the Weft project.
//
// A model may define functions of its own (ModelProto.functions, IR version
// 8) and call them as nodes of the function's domain and name. torch's
// exporters write them: torch.onnx.export(..., export_modules_as_functions=
// True) writes one per module class, and the dynamo exporter of torch 2.1-2.4
// writes one per aten op (onnxscript's torchlib) and per module. Weft reads
// ops of the default domain only, so every call is replaced by the body of
// the function it calls, as ONNX's inliner (onnx.inliner, ONNX 1.15; the
// installed libonnx is 1.12) and ONNX Runtime do.
//
//===----------------------------------------------------------------------===//

#include "OnnxModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"

#include <functional>
#include <optional>
#include <unordered_map>

using namespace weft;

namespace {

/// Length-delimited fields of `message` that libonnx 1.12 does not know
/// (newer than its onnx.proto), each as its bytes.
std::vector<std::string> unknownFields(const google::protobuf::Message &message,
                                       int number) {
  std::vector<std::string> fields;
  const google::protobuf::UnknownFieldSet &unknown =
      message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i)
    if (unknown.field(i).number() == number &&
        unknown.field(i).type() ==
            google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      fields.push_back(unknown.field(i).length_delimited());
  return fields;
}

/// The `overload` of a call (NodeProto field 8) or of a function
/// (FunctionProto field 13), IR version 10: "" when absent.
std::string overloadOf(const google::protobuf::Message &message, int number) {
  std::vector<std::string> fields = unknownFields(message, number);
  return fields.empty() ? "" : fields.back();
}

constexpr int kNodeOverload = 8;
constexpr int kFunctionAttributeProto = 11;
constexpr int kFunctionOverload = 13;

/// Calls nested deeper than this are refused, and so are models whose
/// calls multiply into more nodes than this (a few calls that each call the
/// next twice).
constexpr int kMaxDepth = 64;
constexpr int kMaxNodes = 4'000'000;

std::string keyOf(llvm::StringRef domain, llvm::StringRef name,
                  llvm::StringRef overload) {
  std::string normal = domain == "ai.onnx" ? "" : domain.str();
  return normal + "\x1f" + name.str() + "\x1f" + overload.str();
}

bool isDefaultDomain(llvm::StringRef domain) {
  return domain.empty() || domain == "ai.onnx";
}

/// The module a call to a module's function stands for: torch names a
/// module's parameters by its path ("h.0.attn.c_attn.weight"), so the
/// common path of the parameters a call reads, less each parameter's own
/// name, is the module's ("h.0.attn"). It is written as the TorchScript
/// exporter writes scopes ("/h.0/attn"), which -weft-mark-layers reads.
/// "" when the call reads no named parameter; "/" when its parameters span
/// the root module.
std::string moduleOfParameters(llvm::ArrayRef<std::string> parameters) {
  std::optional<llvm::SmallVector<llvm::StringRef>> common;
  for (llvm::StringRef name : parameters) {
    // Values the exporter named itself ("onnx::MatMul_238") say nothing.
    if (name.contains("::"))
      continue;
    llvm::SmallVector<llvm::StringRef> parts;
    name.split(parts, '.');
    parts.pop_back();
    if (!common) {
      common = parts;
      continue;
    }
    size_t same = 0;
    while (same < common->size() && same < parts.size() &&
           (*common)[same] == parts[same])
      ++same;
    common->resize(same);
  }
  if (!common)
    return "";
  // "h", "0", "attn" -> "/h.0/attn": an index joins the list it indexes.
  std::string scope;
  for (llvm::StringRef part : *common) {
    bool index = !part.empty() &&
                 llvm::all_of(part, [](char c) { return llvm::isDigit(c); });
    scope += (index && !scope.empty() ? "." : "/") + part.str();
  }
  return scope.empty() ? "/" : scope;
}

class Inliner {
public:
  Inliner(onnx::ModelProto &model, std::string &error)
      : model(model), error(error) {}

  bool run() {
    if (model.functions_size() == 0)
      return true;
    int64_t modelOpset = 0;
    for (const onnx::OperatorSetIdProto &opset : model.opset_import())
      if (isDefaultDomain(opset.domain()))
        modelOpset = opset.version();
    for (const onnx::FunctionProto &function : model.functions()) {
      for (const onnx::OperatorSetIdProto &opset : function.opset_import())
        if (isDefaultDomain(opset.domain()) && opset.version() != modelOpset) {
          error = "local function " + function.domain() + "." +
                  function.name() + " imports opset " +
                  std::to_string(opset.version()) + " but the model imports " +
                  std::to_string(modelOpset) +
                  "; Weft inlines functions of the model's opset only "
                  "(export with one opset_version)";
          return false;
        }
      functions[keyOf(function.domain(), function.name(),
                      overloadOf(function, kFunctionOverload))] = &function;
    }
    onnx::GraphProto &graph = *model.mutable_graph();
    collectNames(graph);
    for (const onnx::TensorProto &tensor : graph.initializer())
      parameters.insert(tensor.name());
    for (const onnx::NodeProto &node : graph.node())
      if (node.op_type() == "Identity" && isDefaultDomain(node.domain()) &&
          node.input_size() == 1 && parameters.contains(node.input(0)))
        parameters.insert(node.output(0));

    google::protobuf::RepeatedPtrField<onnx::NodeProto> inlined;
    for (int i = 0; i < graph.node_size(); ++i) {
      const onnx::NodeProto &node = graph.node(i);
      std::string name = node.name().empty()
                             ? node.op_type() + "_" + std::to_string(i)
                             : node.name();
      if (!expand(node, "", name, 0, inlined))
        return false;
    }
    graph.mutable_node()->Swap(&inlined);
    model.clear_functions();
    return true;
  }

private:
  onnx::ModelProto &model;
  std::string &error;
  llvm::StringMap<const onnx::FunctionProto *> functions;
  /// Every value name in the graph, and those given out since.
  llvm::StringSet<> names;
  llvm::StringMap<unsigned> suffixes;
  /// The functions being inlined, outermost first.
  llvm::SmallVector<const onnx::FunctionProto *> active;
  /// The graph's initializers and their Identity copies: parameters.
  llvm::StringSet<> parameters;

  void collectNames(const onnx::GraphProto &graph) {
    for (const onnx::ValueInfoProto &value : graph.input())
      names.insert(value.name());
    for (const onnx::TensorProto &tensor : graph.initializer())
      names.insert(tensor.name());
    for (const onnx::NodeProto &node : graph.node()) {
      for (const std::string &output : node.output())
        names.insert(output);
      for (const onnx::AttributeProto &attribute : node.attribute()) {
        if (attribute.has_g())
          collectNames(attribute.g());
        for (const onnx::GraphProto &sub : attribute.graphs())
          collectNames(sub);
      }
    }
  }

  std::string freshName(const std::string &wanted) {
    // The suffix last given for each name, so that many calls named alike
    // do not retry every suffix.
    unsigned &suffix = suffixes[wanted];
    std::string name = wanted;
    while (names.contains(name))
      name = wanted + "_" + std::to_string(++suffix);
    names.insert(name);
    return name;
  }

  /// Appends `node` to `out`, or the body of the function it calls, inlined
  /// recursively. `path` locates the call ("/h.0/attn"); `name` is the
  /// node's name there.
  bool expand(const onnx::NodeProto &node, const std::string &path,
              const std::string &name, int depth,
              google::protobuf::RepeatedPtrField<onnx::NodeProto> &out) {
    auto it = isDefaultDomain(node.domain())
                  ? functions.end()
                  : functions.find(keyOf(node.domain(), node.op_type(),
                                         overloadOf(node, kNodeOverload)));
    if (it == functions.end()) {
      if (out.size() >= kMaxNodes) {
        error = "inlining the model's local functions gives more than " +
                std::to_string(kMaxNodes) + " nodes (at node '" + name +
                "'); the calls multiply beyond any model Weft plans";
        return false;
      }
      onnx::NodeProto *copy = out.Add();
      *copy = node;
      if (depth > 0)
        copy->set_name(name);
      return true;
    }
    const onnx::FunctionProto &function = *it->second;
    std::string called = function.domain() + "." + function.name();
    if (llvm::is_contained(active, &function)) {
      error = "local function " + called + " calls itself (node '" + name +
              "'); ONNX functions cannot recurse";
      return false;
    }
    if (depth >= kMaxDepth) {
      error = "node '" + name + "', a call of local function " + called +
              ", is nested " + std::to_string(kMaxDepth) +
              " calls deep; Weft inlines shallower functions only";
      return false;
    }
    if (node.input_size() > function.input_size() ||
        node.output_size() > function.output_size()) {
      error = "node '" + name + "', a call of local function " + called +
              ", has " + std::to_string(node.input_size()) + " inputs and " +
              std::to_string(node.output_size()) +
              " outputs; the function takes " +
              std::to_string(function.input_size()) + " and gives " +
              std::to_string(function.output_size());
      return false;
    }

    // Where the body's values go: formal inputs and outputs to the call's,
    // the rest to fresh names under the call's path.
    std::string scope;
    {
      std::vector<std::string> read;
      for (const std::string &input : node.input())
        if (parameters.contains(input))
          read.push_back(input);
      scope = moduleOfParameters(read);
    }
    // `name` is the call's path already; a call that spans the root module
    // is named by its function ("/GPT2").
    std::string here = scope.empty()  ? name
                       : scope == "/" ? path + "/" + function.name()
                                      : scope;
    std::unordered_map<std::string, std::string> rename;
    for (int i = 0; i < function.input_size(); ++i)
      rename[function.input(i)] = i < node.input_size() ? node.input(i) : "";
    for (int i = 0; i < function.output_size(); ++i)
      rename[function.output(i)] =
          i < node.output_size() && !node.output(i).empty()
              ? node.output(i)
              : freshName(here + "/" + function.output(i));
    auto renamed = [&](const std::string &value) -> std::string {
      if (value.empty())
        return value;
      auto found = rename.find(value);
      if (found != rename.end())
        return found->second;
      return rename[value] = freshName(here + "/" + value);
    };

    // The call's attributes, then the function's defaults (FunctionProto
    // attribute_proto, field 11, IR version 9).
    std::unordered_map<std::string, const onnx::AttributeProto *> given;
    for (const onnx::AttributeProto &attribute : node.attribute())
      given[attribute.name()] = &attribute;
    std::vector<onnx::AttributeProto> defaults;
    for (const std::string &bytes :
         unknownFields(function, kFunctionAttributeProto)) {
      onnx::AttributeProto attribute;
      if (attribute.ParseFromString(bytes))
        defaults.push_back(std::move(attribute));
    }
    for (const onnx::AttributeProto &attribute : defaults)
      given.try_emplace(attribute.name(), &attribute);

    active.push_back(&function);
    llvm::scope_exit leave([&] { active.pop_back(); });
    for (auto [index, bodyNode] : llvm::enumerate(function.node())) {
      onnx::NodeProto body = bodyNode;
      for (std::string &input : *body.mutable_input())
        input = renamed(input);
      for (std::string &output : *body.mutable_output())
        output = renamed(output);
      google::protobuf::RepeatedPtrField<onnx::AttributeProto> attributes;
      for (onnx::AttributeProto &attribute : *body.mutable_attribute()) {
        if (attribute.ref_attr_name().empty()) {
          renameCapturedValues(attribute, rename);
          *attributes.Add() = std::move(attribute);
          continue;
        }
        // An attribute the caller does not give and that has no default is
        // absent (ONNX IR: "ref_attr_name").
        auto found = given.find(attribute.ref_attr_name());
        if (found == given.end())
          continue;
        onnx::AttributeProto *value = attributes.Add();
        *value = *found->second;
        value->set_name(attribute.name());
        value->clear_ref_attr_name();
      }
      body.mutable_attribute()->Swap(&attributes);
      std::string bodyName = body.name().empty()
                                 ? body.op_type() + "_" + std::to_string(index)
                                 : body.name();
      if (!expand(body, here, here + "/" + bodyName, depth + 1, out))
        return false;
    }
    return true;
  }
};

} // namespace

bool weft::inlineLocalFunctions(onnx::ModelProto &model, std::string &error) {
  return Inliner(model, error).run();
}

void weft::renameCapturedValues(
    onnx::AttributeProto &attribute,
    const std::unordered_map<std::string, std::string> &rename) {
  std::function<void(onnx::GraphProto &)> visit = [&](onnx::GraphProto &g) {
    llvm::StringSet<> local;
    for (const onnx::ValueInfoProto &value : g.input())
      local.insert(value.name());
    for (const onnx::TensorProto &tensor : g.initializer())
      local.insert(tensor.name());
    for (const onnx::NodeProto &node : g.node())
      for (const std::string &output : node.output())
        local.insert(output);
    auto outer = [&](std::string &value) {
      if (local.contains(value))
        return;
      auto found = rename.find(value);
      if (found != rename.end())
        value = found->second;
    };
    for (onnx::NodeProto &node : *g.mutable_node()) {
      for (std::string &input : *node.mutable_input())
        outer(input);
      for (onnx::AttributeProto &inner : *node.mutable_attribute()) {
        if (inner.has_g())
          visit(*inner.mutable_g());
        for (onnx::GraphProto &sub : *inner.mutable_graphs())
          visit(sub);
      }
    }
    for (onnx::ValueInfoProto &value : *g.mutable_output())
      outer(*value.mutable_name());
  };
  if (attribute.has_g())
    visit(*attribute.mutable_g());
  for (onnx::GraphProto &sub : *attribute.mutable_graphs())
    visit(sub);
}

//===- OnnxModel.h - Load, upgrade, bind and infer an ONNX model -*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_LIB_IMPORT_ONNXMODEL_H
#define WEFT_LIB_IMPORT_ONNXMODEL_H

#include "weft/Import/OnnxImporter.h"

#include "onnx/onnx_pb.h"

#include <string>
#include <unordered_map>

namespace weft {

/// The opsets whose semantics the importer implements.
constexpr int64_t kMinOnnxOpset = 13;
constexpr int64_t kMaxOnnxOpset = 17;
/// The newest opset read: 18-23 are rewritten to 17 (OnnxModel.cpp).
constexpr int64_t kMaxReadOnnxOpset = 23;

/// An ONNX model ready to convert: upgraded to a supported opset, its inputs
/// bound to static shapes and every value's type inferred.
struct OnnxModel {
  onnx::ModelProto proto;
  int64_t opset = 0;
  /// Values that ONNX's data propagation computed (shape arithmetic), by name.
  std::unordered_map<std::string, onnx::TensorShapeProto> shapeData;
};

/// Replaces every call of one of the model's local functions with the
/// function's body (OnnxFunctions.cpp). On failure returns false with a
/// message in `error`.
bool inlineLocalFunctions(onnx::ModelProto &model, std::string &error);

/// Renames, in a subgraph attribute (If, Loop, Scan) of a node moved to
/// another scope, the values the subgraph reads from the node's scope
/// (OnnxFunctions.cpp).
void renameCapturedValues(
    onnx::AttributeProto &attribute,
    const std::unordered_map<std::string, std::string> &rename);

/// Infers every value's type and shape again, with ONNX's data propagation,
/// after the graph changed (OnnxModel.cpp). On failure returns false with a
/// message in `error`.
bool inferOnnxShapes(OnnxModel &model, std::string &error);

/// Reads, checks, upgrades, binds and shape-infers the model at `path`. On
/// failure returns false with a message that says what to do in `error`.
bool loadOnnxModel(llvm::StringRef path, const OnnxImportOptions &options,
                   OnnxModel &model, std::string &error);

} // namespace weft

#endif // WEFT_LIB_IMPORT_ONNXMODEL_H

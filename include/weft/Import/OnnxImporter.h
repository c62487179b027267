//===- OnnxImporter.h - Import ONNX models into the weft dialect -*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// Reads an ONNX model as torch.onnx.export writes it (opsets 13-17, binary
// `.onnx` or ONNX's text format `.onnxtxt`, weights inline or in external
// files), binds its dynamic dimensions, runs ONNX shape inference with data
// propagation, folds shape computations to constants and builds a func.func
// of weft ops on static shapes. Every op's location names its ONNX node.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_IMPORT_ONNXIMPORTER_H
#define WEFT_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <vector>

namespace weft {

struct OnnxImportOptions {
  /// Static shapes for graph inputs, by input name: they bind the input's
  /// dynamic dimensions (and must agree with its static ones). kBatchDim
  /// and kSequenceDim stand for batchSize and sequenceLength.
  llvm::StringMap<llvm::SmallVector<int64_t>> inputShapes;
  /// Binds every dynamic dimension named like a batch ("batch", "N", ...) or
  /// a sequence ("sequence", "seq_len", ...) that inputShapes leaves open.
  std::optional<int64_t> batchSize;
  std::optional<int64_t> sequenceLength;
  /// Shapes for graph inputs by position (for inputs read from files), used
  /// where inputShapes names no shape.
  std::vector<llvm::SmallVector<int64_t>> inputShapesByPosition;
  /// Forgets the model's input shapes so that all must be bound: how the
  /// conformance tests exercise binding.
  bool makeInputsDynamic = false;
  /// Values for graph inputs by position: each given one becomes an
  /// initializer before shape inference, so it can serve as a shape, axes or
  /// split sizes (as in an exported model, where those are constants).
  struct InputValue {
    std::vector<int64_t> shape;
    std::vector<double> values;
    int32_t onnxType = 0; // onnx::TensorProto::DataType
  };
  std::vector<std::optional<InputValue>> constantInputsByPosition;
  /// Without weights, parameters keep only names, shapes and dtypes: the
  /// weight bytes are never read (for planning).
  bool loadWeights = true;
  /// With `loadWeights` off, parameters stored in external files still name
  /// their byte ranges (which are not read). The planner imports this way:
  /// which parameters are external decides how passes may rewrite them
  /// (-weft-unfuse-projections), and the program it costs must be the one
  /// that runs.
  bool keepExternalData = false;
  /// Fixed position buffers (sinusoid tables, rotary frequencies, told by
  /// their values) become constants, which are never trained; off, they
  /// stay parameters like the file's other initializers.
  bool fixedBuffers = true;
  /// The name of the function the graph becomes.
  std::string functionName = "main";
};

/// In `inputShapes`: a dimension that `batchSize` / `sequenceLength` binds.
constexpr int64_t kBatchDim = -1;
constexpr int64_t kSequenceDim = -2;

/// Parses `--input-shape` values such as "tokens=8x1024" into `options`. A
/// dimension may be `batch` or `seq`: the size that --batch-size / --seq-len
/// (or the planner's micro-batch and sequence length) give.
llvm::LogicalResult parseInputShape(llvm::StringRef text,
                                    OnnxImportOptions &options,
                                    std::string &error);

/// Imports the model at `path`. Problems are reported as diagnostics on
/// `context` (at the ONNX node they concern) and yield a null result.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxModel(llvm::StringRef path,
                                                  const OnnxImportOptions &options,
                                                  mlir::MLIRContext *context);

} // namespace weft

#endif // WEFT_IMPORT_ONNXIMPORTER_H

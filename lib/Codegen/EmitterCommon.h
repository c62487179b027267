//===- EmitterCommon.h - What the CPU and CUDA emitters share ---*- C++ -*-===//
//
// Part of the Weft project.
//
// C++ spellings of the runtime's enums and literals, the program's function
// and mesh, weights written next to the program, and the CMake project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_LIB_CODEGEN_EMITTERCOMMON_H
#define WEFT_LIB_CODEGEN_EMITTERCOMMON_H

#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/runtime/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>
#include <vector>

namespace weft::codegen {

/// "DType::BF16" for a tensor element type.
const char *dtypeName(mlir::Type element);
/// A float as a C++ literal that reads back the same.
std::string floatLiteral(float value);
/// `text` as a C++ string literal, every quote, backslash and control or
/// non-ASCII byte escaped: what reaches generated source from a model (axis
/// names, paths) cannot end the literal.
std::string quoted(llvm::StringRef text);
/// `text` for a `//` comment: control characters and backslashes escaped, so
/// that a newline in a path cannot start a line of code.
std::string commentText(llvm::StringRef text);
/// "std::vector<int64_t>{1, 2}".
std::string ints(llvm::ArrayRef<int64_t> values);
/// "std::vector<std::string>{"tp"}".
std::string strings(mlir::ArrayAttr axes);
const char *reduceOp(ReductionKind kind);
/// "ReduceKind::LogSumExp" for a weft.reduce_logsumexp (and Sum, Mean, Max
/// for the other reductions over axes).
const char *reduceKind(mlir::Operation *reduction);
/// ", Codec::Int8" for a collective with a codec, "" without one (the
/// runtime's collectives default to none).
std::string codecArg(mlir::Operation *collective);
/// The runtime's name of `codec` ("Codec::BF16").
const char *codecLiteral(CollectiveCodec codec);
/// The trailing arguments of an attention kernel's call: ", 50.0f" for an
/// op with a `softcap`, ", 0.0f, 4096" for one with a `window` (and
/// ", 50.0f, 4096" for both), ", 0.0f, 0, &slopes" for one with ALiBi's
/// slopes (`optional` prints the operand as the kernel takes it), "" for
/// none (the runtime's defaults: no soft-capping, no window, no ALiBi).
template <typename AttentionLike, typename PrintOptional>
std::string attentionOptionArguments(AttentionLike op, PrintOptional optional) {
  std::optional<llvm::APFloat> softcap = op.getSoftcap();
  std::optional<uint64_t> window = op.getWindow();
  mlir::Value slopes = op.getAlibiSlopes();
  if (!softcap && !window && !slopes)
    return "";
  std::string text = ", " + floatLiteral(softcapOrZero(softcap));
  if (window || slopes)
    text += ", " + std::to_string(window ? *window : 0);
  if (slopes)
    text += ", " + std::string(optional(slopes));
  return text;
}

/// The one function to compile, checked: a single block, layers inlined.
mlir::FailureOr<mlir::func::FuncOp> programFunction(mlir::ModuleOp module);
/// The functions a module's program consists of, checked (one block, layers
/// inlined, weights present under `externalDir`): the pipeline's stages in
/// virtual-stage order, else the one program function.
mlir::FailureOr<std::vector<mlir::func::FuncOp>>
programFunctions(mlir::ModuleOp module,
                 const std::optional<PipelineInfo> &pipeline,
                 llvm::StringRef externalDir);
/// Whether `func` can be emitted: one block, the layers inlined.
mlir::LogicalResult checkProgramFunction(mlir::func::FuncOp func);
/// "Mesh{{"dp", "tp"}, {2, 2}, "cp"}" and the layouts of the function's
/// arguments ("{Layout{...}, ...}") and results.
std::string meshLiteral(mlir::ModuleOp module, mlir::func::FuncOp func);
std::string layoutsLiteral(mlir::func::FuncOp func, bool results);
/// "Layout{{\"tp\"}, {}}": one tensor's layout.
std::string layoutLiteral(const TensorSharding &sharding);
/// The arguments' element types and block shapes:
/// "{TensorType{DType::I64, {1, 8}}, ...}".
std::string inputTypesLiteral(mlir::func::FuncOp func);

/// Checks, before anything is written, that every parameter of `func` has
/// its weights: inline, or in an external-data file under `externalDir` that
/// is long enough.
mlir::LogicalResult checkWeights(mlir::func::FuncOp func,
                                 llvm::StringRef externalDir);
/// Writes the value of a constant or parameter `op` (inline, or read from
/// its external-data file under `externalDir`) as
/// `<weightsDir>/w<N>.npy`; returns the file's name.
mlir::FailureOr<std::string> writeWeight(mlir::Operation *op,
                                         llvm::StringRef weightsDir,
                                         llvm::StringRef externalDir,
                                         int &counter);
/// The all_slice that is the only user of a weight (a parameter or
/// constant), if any: each rank then reads only its shard of the file.
AllSliceOp shardingSlice(mlir::Operation *weight);

/// Creates `<outDir>/weights`.
mlir::FailureOr<std::string> weightsDirectory(mlir::ModuleOp module,
                                              llvm::StringRef outDir);
/// Writes `<outDir>/<name>` with `text`.
mlir::LogicalResult writeFile(mlir::ModuleOp module, llvm::StringRef outDir,
                              llvm::StringRef name, llvm::StringRef text);

/// The runtime's PipelineProgram of a pipelined module, as C++: a function
/// `PipelineProgram <name>()` that gives each virtual stage k the
/// function `stageFunction(k)` prints (emitted before it), says how the
/// stages connect, and lists every pipeline rank's steps from the module's
/// schedule. With `training` (the module's pipeline as
/// codegen::pipelineProgram reads it), also each stage's backward and
/// weight-gradient steps (their functions left empty: the training program
/// gives them) with the reductions `reduceFunction(k, weight)` prints, and
/// the gradients' names.
std::string pipelineLiteral(
    mlir::ModuleOp module, const PipelineInfo &info,
    llvm::function_ref<std::string(size_t)> stageFunction,
    llvm::StringRef name = "makeProgram",
    const rt::PipelineProgram *training = nullptr,
    llvm::function_ref<std::string(size_t, bool)> reduceFunction = nullptr);

} // namespace weft::codegen

#endif // WEFT_LIB_CODEGEN_EMITTERCOMMON_H

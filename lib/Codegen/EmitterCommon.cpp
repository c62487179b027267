//===- EmitterCommon.cpp - What the CPU and CUDA emitters share -----------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "EmitterCommon.h"

#include "weft/Dialect/Pipeline.h"
#include "weft/Exec/Interpreter.h"
#include "weft/runtime/FileWrite.h"
#include "weft/runtime/NpyFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

using namespace mlir;
using namespace weft;

const char *codegen::dtypeName(Type element) {
  switch (toDType(element)) {
  case rt::DType::F32:
    return "DType::F32";
  case rt::DType::F16:
    return "DType::F16";
  case rt::DType::BF16:
    return "DType::BF16";
  case rt::DType::I64:
    return "DType::I64";
  case rt::DType::I32:
    return "DType::I32";
  case rt::DType::Bool:
    return "DType::Bool";
  case rt::DType::F64:
    return "DType::F64";
  }
  return "DType::F32";
}

std::string codegen::floatLiteral(float value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9ef", double(value));
  return text;
}

std::string codegen::quoted(StringRef text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c >= 0x7f) {
      // Three octal digits: an escape that never swallows what follows.
      char escape[5];
      std::snprintf(escape, sizeof(escape), "\\%03o", unsigned(c));
      out += escape;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string codegen::commentText(StringRef text) {
  // A comment line ends at a newline (or a backslash before one): control
  // characters and backslashes are written as they would be in a string.
  std::string out;
  for (unsigned char c : text) {
    if (c == '\\' || c < 0x20 || c == 0x7f) {
      char escape[5];
      std::snprintf(escape, sizeof(escape), "\\%03o", unsigned(c));
      out += escape;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string codegen::ints(ArrayRef<int64_t> values) {
  std::string text = "std::vector<int64_t>{";
  for (size_t i = 0; i < values.size(); ++i)
    text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "}";
}

std::string codegen::strings(ArrayAttr axes) {
  std::string text = "std::vector<std::string>{";
  bool first = true;
  for (StringRef axis : axes.getAsValueRange<StringAttr>()) {
    text += (first ? "" : ", ") + quoted(axis);
    first = false;
  }
  return text + "}";
}

const char *codegen::codecLiteral(CollectiveCodec codec) {
  switch (codec) {
  case CollectiveCodec::bf16:
    return "Codec::BF16";
  case CollectiveCodec::fp8:
    return "Codec::FP8";
  case CollectiveCodec::int8:
    return "Codec::Int8";
  case CollectiveCodec::topk:
    return "Codec::TopK";
  case CollectiveCodec::topk_noef:
    return "Codec::TopKNoEF";
  case CollectiveCodec::none:
    break;
  }
  return "Codec::None";
}

std::string codegen::codecArg(Operation *collective) {
  CollectiveCodec codec = getCollectiveCodec(collective);
  if (codec == CollectiveCodec::none)
    return "";
  return std::string(", ") + codecLiteral(codec);
}

const char *codegen::reduceKind(Operation *reduction) {
  if (isa<ReduceSumOp>(reduction))
    return "ReduceKind::Sum";
  if (isa<ReduceMeanOp>(reduction))
    return "ReduceKind::Mean";
  if (isa<ReduceMaxOp>(reduction))
    return "ReduceKind::Max";
  assert(isa<ReduceLogSumExpOp>(reduction) && "not a reduction over axes");
  return "ReduceKind::LogSumExp";
}

const char *codegen::reduceOp(ReductionKind kind) {
  switch (kind) {
  case ReductionKind::max:
    return "ReduceOp::Max";
  case ReductionKind::min:
    return "ReduceOp::Min";
  case ReductionKind::avg:
    return "ReduceOp::Avg";
  default:
    return "ReduceOp::Sum";
  }
}

FailureOr<func::FuncOp> codegen::programFunction(ModuleOp module) {
  func::FuncOp func;
  for (auto f : module.getOps<func::FuncOp>())
    if (!f.isExternal() && !func)
      func = f;
  if (!func)
    return module.emitError("no function to compile");
  if (failed(checkProgramFunction(func)))
    return failure();
  return func;
}

LogicalResult codegen::checkProgramFunction(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return func.emitError("weft compile needs a single-block function");
  for (Operation &op : func.getBody().front())
    if (isa<LayerOp>(op))
      return op.emitError("weft compile needs the layers inlined (partition "
                          "the model with a plan, or -weft-apply-plan)");
  return success();
}

std::string codegen::layoutLiteral(const TensorSharding &sharding) {
  std::string text = "Layout{";
  for (size_t d = 0; d < sharding.dims.size(); ++d) {
    text += d ? ", {" : "{";
    for (size_t i = 0; i < sharding.dims[d].size(); ++i)
      text += (i ? ", " : "") + quoted(sharding.dims[d][i]);
    text += "}";
  }
  return text + "}";
}

std::string codegen::meshLiteral(ModuleOp module, func::FuncOp func) {
  std::optional<MeshInfo> mesh = getMeshInfo(module);
  if (!mesh)
    return "Mesh{{}, {}, \"\"}";
  std::string axes = "{", sizes = "{";
  for (size_t i = 0; i < mesh->axes.size(); ++i) {
    axes += (i ? ", " : "") + quoted(mesh->axes[i]);
    sizes += (i ? ", " : "") + std::to_string(mesh->sizes[i]);
  }
  return "Mesh{" + axes + "}, " + sizes + "}, \"" +
         (func->hasAttr(WeftDialect::getLoadBalancedAttrName()) ? "cp" : "") +
         "\"}";
}

std::string codegen::layoutsLiteral(func::FuncOp func, bool results) {
  std::string text = "{";
  unsigned n = results ? func.getNumResults() : func.getNumArguments();
  for (unsigned i = 0; i < n; ++i) {
    auto attr = results ? func.getResultAttrOfType<ShardingAttr>(
                              i, WeftDialect::getLocalShardingAttrName())
                        : func.getArgAttrOfType<ShardingAttr>(
                              i, WeftDialect::getLocalShardingAttrName());
    Type type = results ? func.getResultTypes()[i] : func.getArgumentTypes()[i];
    TensorSharding s =
        attr ? fromAttr(attr)
             : TensorSharding::replicated(cast<RankedTensorType>(type).getRank());
    text += (i ? ", " : "") + layoutLiteral(s);
  }
  return text + "}";
}

std::string codegen::inputTypesLiteral(func::FuncOp func) {
  std::string text = "{";
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    auto tensor = cast<RankedTensorType>(type);
    text += std::string(i ? ", " : "") + "TensorType{" +
            dtypeName(tensor.getElementType()) + ", " +
            ints(tensor.getShape()) + "}";
  }
  return text + "}";
}

LogicalResult codegen::checkWeights(func::FuncOp func, StringRef externalDir) {
  WalkResult walk = func.walk([&](ParameterOp p) {
    if (p.getValue())
      return WalkResult::advance();
    ExternalDataAttr external = p.getExternalAttr();
    if (!external) {
      p.emitError("weft compile needs the weights: parameter '")
          << p.getName()
          << "' has none (the model was imported without weights; import "
             "it with weights, or compile the ONNX file)";
      return WalkResult::interrupt();
    }
    llvm::SmallString<256> path(externalDir);
    llvm::sys::path::append(path, external.getLocation());
    uint64_t size = 0;
    if (std::error_code ec = llvm::sys::fs::file_size(path, size)) {
      p.emitError("cannot read external data file '")
          << path << "' for parameter '" << p.getName()
          << "': " << ec.message();
      return WalkResult::interrupt();
    }
    if (size < static_cast<uint64_t>(external.getOffset()) +
                   static_cast<uint64_t>(external.getLength())) {
      p.emitError("external data file '")
          << path << "' has " << size << " bytes, fewer than offset "
          << external.getOffset() << " + length " << external.getLength()
          << " of parameter '" << p.getName() << "'";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

FailureOr<std::string> codegen::writeWeight(Operation *op, StringRef weightsDir,
                                            StringRef externalDir,
                                            int &counter) {
  rt::HostTensor tensor;
  if (auto c = dyn_cast<ConstantOp>(op)) {
    tensor = toHostTensor(c.getValue());
  } else {
    auto p = cast<ParameterOp>(op);
    if (std::optional<ElementsAttr> value = p.getValue()) {
      tensor = toHostTensor(*value);
    } else {
      FailureOr<rt::HostTensor> read = readExternalParameter(p, externalDir);
      if (failed(read))
        return failure();
      tensor = std::move(*read);
    }
  }
  std::string file = "w" + std::to_string(counter++) + ".npy";
  llvm::SmallString<256> path(weightsDir);
  llvm::sys::path::append(path, file);
  absl::Status status = rt::writeNpy(path.str().str(), tensor);
  if (!status.ok())
    return op->emitError("cannot write ")
           << path << ": " << std::string(status.message());
  return file;
}

AllSliceOp codegen::shardingSlice(Operation *weight) {
  if (!isa<ParameterOp, ConstantOp>(weight) || !weight->hasOneUse())
    return {};
  auto slice = dyn_cast<AllSliceOp>(*weight->getUsers().begin());
  if (!slice || slice.getZigzag())
    return {};
  return slice;
}

FailureOr<std::string> codegen::weightsDirectory(ModuleOp module,
                                                 StringRef outDir) {
  llvm::SmallString<256> weightsDir(outDir);
  llvm::sys::path::append(weightsDir, "weights");
  if (std::error_code ec = llvm::sys::fs::create_directories(weightsDir))
    return module.emitError("cannot create ") << weightsDir << ": "
                                              << ec.message();
  return weightsDir.str().str();
}

LogicalResult codegen::writeFile(ModuleOp module, StringRef outDir,
                                 StringRef name, StringRef text) {
  llvm::SmallString<256> path(outDir);
  llvm::sys::path::append(path, name);
  absl::Status status =
      rt::writeFileAtomically(path.str().str(), std::string_view(text));
  if (!status.ok())
    return module.emitError(std::string(status.message()));
  return success();
}

std::string codegen::pipelineLiteral(
    ModuleOp module, const PipelineInfo &info,
    llvm::function_ref<std::string(size_t)> stageFunction, StringRef name,
    const rt::PipelineProgram *training,
    llvm::function_ref<std::string(size_t, bool)> reduceFunction) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto indices = [](const std::vector<int> &values) {
    std::string list = "{";
    for (size_t i = 0; i < values.size(); ++i)
      list += (i ? ", " : "") + std::to_string(values[i]);
    return list + "}";
  };
  static const char *kinds[] = {"Forward", "Backward", "WeightGrad", "Send",
                                "Recv"};
  os << "PipelineProgram " << name << "() {\n"
     << "  PipelineProgram program;\n"
     << "  program.mesh = "
     << meshLiteral(module, info.virtualStages.front().func) << ";\n"
     << "  program.stages = " << info.stages << ";\n"
     << "  program.chunks = " << info.chunks << ";\n"
     << "  program.microBatches = " << info.microBatches << ";\n";
  if (std::optional<CollectiveCodec> codec =
          symbolizeCollectiveCodec(info.codec);
      codec && *codec != CollectiveCodec::none)
    os << "  // What the stages send: " << info.codec << " (pp's codec).\n"
       << "  program.codec = " << codecLiteral(*codec) << ";\n";
  for (auto [k, stage] : llvm::enumerate(info.virtualStages))
    os << "  program.virtualStages.push_back(PipelineStage{" << stageFunction(k)
       << ", " << indices(stage.modelInput) << ", "
       << indices(stage.modelOutput) << ", "
       << layoutsLiteral(stage.func, false) << ", "
       << layoutsLiteral(stage.func, true) << "});\n";
  os << "  // The " << info.schedule
     << " schedule's steps, per pipeline rank (from the IR).\n"
     << "  program.steps.resize(" << info.steps.size() << ");\n";
  for (auto [rank, steps] : llvm::enumerate(info.steps))
    for (const auto &[step, name] : steps)
      os << "  program.steps[" << rank
         << "].push_back({PipelineStep::" << kinds[step.kind] << ", "
         << step.microBatch << ", " << step.chunk << ", " << step.peer << ", "
         << quoted(name) << (step.gradient ? ", true" : "") << "});\n";
  // Each model input's type: one micro-batch's block on the first stage
  // that reads it.
  std::vector<std::string> types;
  for (PipelineStageInfo stage : info.virtualStages)
    for (auto [a, input] : llvm::enumerate(stage.modelInput)) {
      if (input < 0)
        continue;
      if (types.size() <= size_t(input))
        types.resize(size_t(input) + 1);
      if (!types[size_t(input)].empty())
        continue;
      auto tensor = cast<RankedTensorType>(stage.func.getArgumentTypes()[a]);
      types[size_t(input)] = std::string("TensorType{") +
                             dtypeName(tensor.getElementType()) + ", " +
                             ints(tensor.getShape()) + "}";
    }
  os << "  program.inputTypes = {";
  for (size_t i = 0; i < types.size(); ++i)
    os << (i ? ", " : "") << types[i];
  os << "};\n";
  if (training) {
    static const char *refKinds[] = {"Input", "Cotangent", "Saved", "Gradient",
                                     "GradientSent"};
    auto refs = [](const std::vector<rt::PipelineRef> &list) {
      std::string text = "{";
      for (size_t i = 0; i < list.size(); ++i)
        text += std::string(i ? ", " : "") +
                "PipelineRef{PipelineRef::" + refKinds[list[i].kind] + ", " +
                std::to_string(list[i].index) + "}";
      return text + "}";
    };
    os << "  // Each stage's backward and weight-gradient steps: what they "
          "take and return,\n  // and the reductions of their partial "
          "gradients.\n";
    for (auto [k, stage] : llvm::enumerate(info.virtualStages)) {
      for (bool weight : {false, true}) {
        func::FuncOp piece = weight ? stage.weight : stage.backward;
        if (!piece)
          continue;
        const rt::PipelineStage &to = training->virtualStages[k];
        const rt::PipelineStepFunction &fn = weight ? to.weight : to.backward;
        os << "  program.virtualStages[" << k << "]."
           << (weight ? "weight" : "backward")
           << " = PipelineStepFunction{RankFunction(), " << refs(fn.args)
           << ",\n      " << refs(fn.results) << ",\n      "
           << layoutsLiteral(piece, false) << ",\n      "
           << layoutsLiteral(piece, true) << ", " << indices(fn.partial) << ", "
           << reduceFunction(k, weight) << ", "
           << (fn.everyMicroBatch ? "true" : "false") << ", " << fn.reduceBlock
           << "};\n";
      }
    }
    os << "  program.gradientNames = {";
    for (size_t g = 0; g < training->gradientNames.size(); ++g)
      os << (g ? ", " : "") << quoted(training->gradientNames[g]);
    os << "};\n";
  }
  os << "  return program;\n}\n";
  return text;
}

FailureOr<std::vector<func::FuncOp>>
codegen::programFunctions(ModuleOp module,
                          const std::optional<PipelineInfo> &pipeline,
                          StringRef externalDir) {
  std::vector<func::FuncOp> functions;
  if (pipeline) {
    for (const PipelineStageInfo &stage : pipeline->virtualStages) {
      if (failed(checkProgramFunction(stage.func)))
        return failure();
      functions.push_back(stage.func);
    }
  } else {
    FailureOr<func::FuncOp> func = programFunction(module);
    if (failed(func))
      return failure();
    functions.push_back(*func);
  }
  for (func::FuncOp func : functions)
    if (failed(checkWeights(func, externalDir)))
      return failure();
  return functions;
}

//===- ExportCommand.cpp - weft export-checkpoint -------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// weft export-checkpoint SAVE --config CONFIG --like CHECKPOINT -o DIR: the
// parameters of a `weft train --save` checkpoint (of a model `weft import
// --model CONFIG --checkpoint CHECKPOINT` built) written back as the Hugging
// Face checkpoint they came from: the same files, names, shapes and dtypes,
// each element where the import read it (planner::parameterSources, the
// import's layout traced), so that transformers loads the fine-tuned model.
// Tensors the model does not train (a position table's rows past the built
// sequence, GPT-2's mask buffers, a tied model's saved lm_head) are copied.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Planner/HfCheckpoint.h"
#include "weft/Planner/HfConfig.h"
#include "weft/Planner/Model.h"
#include "weft/runtime/Checkpoint.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <set>
#include <vector>

namespace cl = llvm::cl;
using namespace weft;

static cl::SubCommand exportCommand(
    "export-checkpoint",
    "Write a weft train checkpoint of an imported Hugging Face model back as "
    "its safetensors checkpoint");
static cl::opt<std::string> savedPath(cl::Positional, cl::Required,
                                      cl::desc("<weft train --save directory "
                                               "or its step-N>"),
                                      cl::sub(exportCommand));
static cl::opt<std::string>
    configPath("config",
               cl::desc("The config.json (or its directory) the model was "
                        "imported from"),
               cl::value_desc("path"), cl::Required, cl::sub(exportCommand));
static cl::opt<std::string>
    likePath("like",
             cl::desc("The checkpoint it was imported from (--checkpoint): "
                      "its files, names, shapes and dtypes are written"),
             cl::value_desc("path"), cl::Required, cl::sub(exportCommand));
static cl::opt<std::string> exportOutput("o", cl::desc("Output directory"),
                                         cl::value_desc("dir"), cl::Required,
                                         cl::sub(exportCommand));

bool exportCommandSelected() { return bool(exportCommand); }

static int exportFail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "weft") << message << "\n";
  return 1;
}

int runExport(mlir::MLIRContext &context) {
  llvm::Expected<plan::ModelSpec> model =
      planner::modelFromHfConfig(configPath);
  if (!model)
    return exportFail(llvm::toString(model.takeError()));
  if (llvm::Error error = planner::checkpointFamilySupported(*model))
    return exportFail(llvm::toString(std::move(error)));
  llvm::Expected<planner::HfCheckpoint> like =
      planner::HfCheckpoint::open(likePath);
  if (!like)
    return exportFail(llvm::toString(like.takeError()));
  absl::StatusOr<rt::Checkpoint> saved = rt::readCheckpoint(savedPath);
  if (!saved.ok())
    return exportFail(std::string(saved.status().message()));
  if (double(like->totalElements()) * 4 > double(int64_t(1) << 36))
    return exportFail("the checkpoint has more than 64 GiB of f32 values; "
                      "weft export-checkpoint writes models of at most that");
  // Every element as the original has it; each trained parameter's
  // elements put back where the import read them.
  std::vector<float> values;
  values.reserve(size_t(like->totalElements()));
  for (const std::string &name : like->names()) {
    std::vector<float> tensor = like->read(name);
    values.insert(values.end(), tensor.begin(), tensor.end());
  }
  // Every parameter of the model the config describes must be in the
  // save: a missing one would leave its tensors as they were.
  std::set<std::string> saves;
  for (const rt::CheckpointParameter &param : saved->parameters)
    saves.insert(param.name);
  mlir::OwningOpRef<mlir::ModuleOp> built =
      planner::buildTransformer(context, *model, planner::TransformerShape());
  std::string missing;
  built->walk([&](ParameterOp param) {
    if (missing.empty() && !saves.count(param.getName().str()))
      missing = param.getName().str();
  });
  if (!missing.empty())
    return exportFail("the model's parameter '" + missing + "' is not in " +
                      saved->manifestPath +
                      ": it is the save of another model (or of the model "
                      "with other builder flags)");
  std::vector<bool> written(values.size(), false);
  for (const rt::CheckpointParameter &param : saved->parameters) {
    if (!param.value.isFloat())
      return exportFail("parameter '" + param.name + "' of " +
                        saved->manifestPath + " is not floating-point");
    llvm::Expected<std::vector<int64_t>> sources =
        planner::parameterSources(*like, *model, param.name, param.value.shape);
    if (!sources)
      return exportFail(llvm::toString(sources.takeError()) + " (in " +
                        saved->manifestPath + ")");
    const float shift = planner::storedAsOnePlus(*model, param.name) ? 1 : 0;
    for (size_t i = 0; i < sources->size(); ++i) {
      const size_t at = size_t((*sources)[i]);
      if (written[at])
        return exportFail(
            llvm::formatv("parameter '{0}' and another write one element of "
                          "the checkpoint: the layouts disagree",
                          param.name)
                .str());
      written[at] = true;
      values[at] = param.value.floats[i] - shift;
    }
  }
  if (llvm::Error error = like->writeLike(values, exportOutput))
    return exportFail(llvm::toString(std::move(error)));
  const int64_t count =
      int64_t(std::count(written.begin(), written.end(), true));
  llvm::errs() << llvm::formatv(
      "weft export-checkpoint: {0} parameters of step {1} ({2} of the "
      "checkpoint's {3} values; the rest copied from {4}) in {5}\n",
      saved->parameters.size(), saved->step, count, values.size(), likePath,
      exportOutput);
  return 0;
}

//===- HfConfig.h - Models from Hugging Face config.json --------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// The decoder a Hugging Face `config.json` describes, as the planner's model
// spec: what `weft plan --model` and `weft import --model` take besides a
// preset's name, so that any checkpoint on the Hub (or a `save_pretrained`
// directory) is planned without exporting it.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_HFCONFIG_H
#define WEFT_PLANNER_HFCONFIG_H

#include "weft/plan.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace weft::planner {

/// True where --model names a Hugging Face config rather than a preset: a
/// path ending in .json, or a directory (one that holds config.json).
bool isHfConfigPath(llvm::StringRef model);

/// The model of `path`: a config.json, or a directory holding one. Errors
/// name the file and the key (a mixture of experts, latent attention or an
/// encoder, which the planner's transformer does not describe; a field of the
/// wrong type; a model type it does not know) and what to do instead.
llvm::Expected<plan::ModelSpec> modelFromHfConfig(llvm::StringRef path);

/// The same from the text of a config, `file` naming it in errors.
llvm::Expected<plan::ModelSpec> modelFromHfConfigText(llvm::StringRef text,
                                                      llvm::StringRef file);

/// The `model_type`s read (decoder families).
std::vector<std::string> hfModelTypes();

} // namespace weft::planner

#endif // WEFT_PLANNER_HFCONFIG_H

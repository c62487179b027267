//===- hf_config_fuzzer.cpp - libFuzzer target for config.json ------------===//
//
// Part of the Weft project.
//
// Feeds arbitrary bytes to the reader of Hugging Face config.json files
// (`weft plan --model config.json`) and costs what it accepts the way the
// planner's first steps do (validation, parameter and FLOP counts). Any
// crash, sanitizer report (an overflowing size, a float cast out of range)
// or escaping exception is a bug: a bad config must get an error.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/HfConfig.h"
#include "weft/Planner/Model.h"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<weft::plan::ModelSpec> spec =
      weft::planner::modelFromHfConfigText(text, "config.json");
  if (!spec) {
    llvm::consumeError(spec.takeError());
    return 0;
  }
  if (llvm::Error error = weft::planner::validateModel(*spec)) {
    llvm::consumeError(std::move(error));
    return 0;
  }
  (void)weft::planner::parameterCount(*spec);
  (void)weft::planner::modelFlopsPerStep(
      *spec, 8, spec->seq_len() > 0 ? spec->seq_len() : 2048);
  return 0;
}

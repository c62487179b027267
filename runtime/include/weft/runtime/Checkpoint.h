//===- Checkpoint.h - weft train's checkpoints, without LLVM ----*- C++ -*-===//
//
// Part of the Weft project.
//
// The checkpoint format `weft train --save` writes (weft-checkpoint-1), read
// and written by the runtime, so that a generated training program saves and
// resumes the same checkpoints: SAVE_DIR/step-N/ holds manifest.json and one
// .npy per tensor (each parameter whole, and the optimizer's state for it),
// written as step-N.tmp and renamed; SAVE_DIR/latest (also renamed into
// place) names the newest. A crash leaves the previous checkpoint whole.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CHECKPOINT_H
#define WEFT_RUNTIME_CHECKPOINT_H

#include "weft/runtime/HostTensor.h"

#include "absl/status/statusor.h"

#include <optional>
#include <string>
#include <vector>

namespace weft::rt {

/// A trained parameter, whole, and the optimizer's state for it: AdamW's
/// moments in `m` and `v`, SGD's momentum buffer in `m`.
struct CheckpointParameter {
  std::string name;
  HostTensor value;
  std::optional<HostTensor> m, v;
};

/// A checkpoint: the step it was written after, the optimizer (`adamw` or
/// `sgd`, as weft train's --optimizer) and the parameters.
struct Checkpoint {
  int64_t step = 0;
  std::string optimizer;
  std::vector<CheckpointParameter> parameters;
  /// The manifest it was read from (readCheckpoint sets it; errors name it).
  std::string manifestPath;
};

/// Writes `checkpoint` as SAVE_DIR/step-N (N = its step) and points
/// SAVE_DIR/latest at it.
absl::Status writeCheckpoint(const std::string &saveDir,
                             const Checkpoint &checkpoint);

/// Reads a checkpoint: a step-N directory, or a save directory (its
/// latest). The error names the file that is missing or corrupt. Refuses a
/// checkpoint with top-k error-feedback residuals, which only weft train
/// carries.
absl::StatusOr<Checkpoint> readCheckpoint(const std::string &path);

} // namespace weft::rt

#endif // WEFT_RUNTIME_CHECKPOINT_H

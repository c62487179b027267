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
// weft train and generated training programs both read and write them here.
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

/// Which of a CheckpointParameter's states holds the optimizer step's state
/// of `role` (its weft.optimizer_slot): AdamW's exp_avg and SGD's
/// momentum_buffer in m, AdamW's exp_avg_sq in v, and nothing else.
enum class CheckpointState { None, M, V };
CheckpointState checkpointStateOf(const std::string &role);

/// One rank's residual of one top-k all-reduce with error feedback (`site`:
/// the all-reduce's number in the partitioned module's walk order).
struct CheckpointResidual {
  int rank = 0;
  int64_t site = 0;
  HostTensor value;
  /// The file it was read from (readCheckpoint sets it; errors name it).
  std::string file;
};

/// Top-k's error feedback, which weft train carries from step to step: each
/// rank's residuals, for the plan (as --plan-spec text) they belong to.
struct CheckpointFeedback {
  std::string plan;
  std::vector<CheckpointResidual> residuals;
};

/// Loss scaling's state (weft/runtime/Training.h's LossScale), which a
/// resumed run needs to take the same steps: the scale, the finite steps
/// since it last changed, and the optimizer steps taken (a skipped step is
/// not one: AdamW's bias corrections count these).
struct CheckpointLossScale {
  double scale = 1;
  int64_t goodSteps = 0;
  int64_t optimizerSteps = 0;
};

/// A checkpoint: the step it was written after, the optimizer (`adamw` or
/// `sgd`, as weft train's --optimizer), the parameters, top-k's residuals
/// when the run had them, and loss scaling's state when it scaled.
struct Checkpoint {
  int64_t step = 0;
  std::string optimizer;
  std::vector<CheckpointParameter> parameters;
  std::optional<CheckpointFeedback> feedback;
  std::optional<CheckpointLossScale> lossScale;
  /// The manifest it was read from (readCheckpoint sets it; errors name it).
  std::string manifestPath;
};

/// Writes `checkpoint` as SAVE_DIR/step-N (N = its step) and points
/// SAVE_DIR/latest at it.
absl::Status writeCheckpoint(const std::string &saveDir,
                             const Checkpoint &checkpoint);

/// Reads a checkpoint: a step-N directory, or a save directory (its
/// latest). The error names the file that is missing or corrupt; each
/// tensor's shape is checked against the manifest's (the residuals' are the
/// reader's to check).
absl::StatusOr<Checkpoint> readCheckpoint(const std::string &path);

} // namespace weft::rt

#endif // WEFT_RUNTIME_CHECKPOINT_H

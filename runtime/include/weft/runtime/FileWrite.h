//===- FileWrite.h - Whole files written or not at all ----------*- C++ -*-===//
//
// Part of the Weft project.
//
// Outputs, weights and checkpoints are written to a temporary name in the
// same directory, every write and the close are checked, the data is synced,
// and only then is the file renamed over its final name: a full disk, a file
// size limit or a crash leaves the old file (or none), never a truncated one.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_FILEWRITE_H
#define WEFT_RUNTIME_FILEWRITE_H

#include "absl/status/status.h"

#include <string>
#include <string_view>

namespace weft::rt {

/// Writes `bytes` to `path` atomically (temporary name, fsync, rename). An
/// error names the path and the system's reason; the temporary is removed.
absl::Status writeFileAtomically(const std::string &path,
                                 std::string_view bytes);

/// Removes the `output_<N>.npy` / `output_<N>.pb` files an earlier run left
/// in `dir` and this one did not write (the first `written` outputs with
/// `extension`, ".npy" or ".pb"): called after the outputs are written, so
/// that a failed run leaves the earlier outputs whole and a run with fewer
/// outputs leaves none of another run's behind.
absl::Status removeStaleOutputs(const std::string &dir, size_t written,
                                const std::string &extension);

} // namespace weft::rt

#endif // WEFT_RUNTIME_FILEWRITE_H

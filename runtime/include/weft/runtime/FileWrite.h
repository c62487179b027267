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

} // namespace weft::rt

#endif // WEFT_RUNTIME_FILEWRITE_H

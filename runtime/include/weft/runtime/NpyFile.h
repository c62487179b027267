//===- NpyFile.h - numpy .npy files -----------------------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_NPYFILE_H
#define WEFT_RUNTIME_NPYFILE_H

#include "weft/runtime/HostTensor.h"

#include "absl/status/statusor.h"

#include <string>

namespace weft::rt {

/// Reads a C-order .npy file of f32, f16, f64 (converted to f32), i64, i32 or
/// bool elements.
absl::StatusOr<HostTensor> readNpy(const std::string &path);

/// Shard `index` of `parts` along `dim` of the array in a .npy file, reading
/// only the shard's bytes (one contiguous run per index of the dimensions
/// before `dim`): how each rank loads only its part of a weight.
absl::StatusOr<HostTensor> readNpyShard(const std::string &path, int64_t dim,
                                        int64_t index, int64_t parts);

/// Writes `tensor` as .npy in its own element type (bf16, which numpy lacks,
/// is written as f32).
absl::Status writeNpy(const std::string &path, const HostTensor &tensor);

} // namespace weft::rt

#endif // WEFT_RUNTIME_NPYFILE_H

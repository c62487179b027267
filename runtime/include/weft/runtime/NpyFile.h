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

/// Writes `tensor` as .npy in its own element type (bf16, which numpy lacks,
/// is written as f32).
absl::Status writeNpy(const std::string &path, const HostTensor &tensor);

} // namespace weft::rt

#endif // WEFT_RUNTIME_NPYFILE_H

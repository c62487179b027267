//===- TensorFiles.h - Tensors in ONNX .pb and numpy .npy files -*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_EXEC_TENSORFILES_H
#define WEFT_EXEC_TENSORFILES_H

#include "weft/runtime/HostTensor.h"

#include <string>

namespace weft {

/// Reads a tensor from an ONNX TensorProto file (.pb, as in the ONNX backend
/// tests) or a numpy file (.npy). Returns false with `error` set on failure.
bool readTensorFile(const std::string &path, rt::HostTensor &tensor,
                    std::string &error);

/// Writes `tensor` in its element type, as .npy if `path` ends in .npy and as
/// an ONNX TensorProto otherwise.
bool writeTensorFile(const std::string &path, const rt::HostTensor &tensor,
                     std::string &error);

} // namespace weft

#endif // WEFT_EXEC_TENSORFILES_H

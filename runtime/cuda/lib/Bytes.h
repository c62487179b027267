//===- Bytes.h - Host tensors as device bytes -------------------*- C++ -*-===//
//
// Part of the Weft project.
//
// What the CUDA backend and its host emulation share: a host tensor as the
// bytes a device tensor of some dtype holds, and back.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_CUDA_LIB_BYTES_H
#define WEFT_RUNTIME_CUDA_LIB_BYTES_H

#include "weft/runtime/cuda/Cuda.h"

#include <vector>

namespace weft::rt::cuda {

/// `host` (same shape as `out`) as the bytes of `out`'s dtype.
std::vector<char> toDeviceBytes(const Context &ctx, const HostTensor &host,
                                const DeviceTensor &out);
/// The bytes of `t` (in host memory) as a host tensor.
HostTensor fromDeviceBytes(const Context &ctx, const char *bytes,
                           const DeviceTensor &t);

} // namespace weft::rt::cuda

#endif // WEFT_RUNTIME_CUDA_LIB_BYTES_H

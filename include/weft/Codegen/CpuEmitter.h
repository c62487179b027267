//===- CpuEmitter.h - Partitioned programs as C++ for the CPU ---*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_CODEGEN_CPUEMITTER_H
#define WEFT_CODEGEN_CPUEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

namespace weft {

/// Writes the rank program of a partitioned `module` (its one function, with
/// `weft.local_sharding` on arguments and results) as C++ against the runtime
/// (`weft/runtime/Program.h`, CpuKernels) into `outDir`: `program.cpp`, the
/// weights and constants as `weights/*.npy`, and a `CMakeLists.txt` that
/// builds it with find_package(WeftRuntime). Parameters stored as external
/// data are read from `externalDir` (the ONNX model's directory). Nothing is
/// written when a parameter has no weights. Errors are diagnostics at the op.
mlir::LogicalResult emitCpuProgram(mlir::ModuleOp module,
                                   llvm::StringRef outDir,
                                   llvm::StringRef origin,
                                   llvm::StringRef externalDir = ".");

} // namespace weft

#endif // WEFT_CODEGEN_CPUEMITTER_H

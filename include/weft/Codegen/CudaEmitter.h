//===- CudaEmitter.h - Partitioned programs as CUDA C++ ---------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_CODEGEN_CUDAEMITTER_H
#define WEFT_CODEGEN_CUDAEMITTER_H

#include "weft/Codegen/CpuEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace weft {

/// What the CUDA emitter decided, for `weft compile` to report.
struct CudaEmitStats {
  /// Bytes of the rank's arena after buffer assignment by liveness, and what
  /// one buffer per value would take.
  int64_t arenaBytes = 0;
  int64_t unsharedBytes = 0;
  int buffers = 0;
  /// Generated elementwise kernel launches, the elementwise ops they cover,
  /// and the distinct kernels they launch (fusions of the same ops on the
  /// same element types share one).
  int fusedKernels = 0;
  int distinctKernels = 0;
  int fusedOps = 0;
  /// GEMMs whose bias or GELU went into the cuBLASLt epilogue.
  int epilogues = 0;
  /// Collectives issued on the communication stream.
  int collectives = 0;
};

/// Writes the rank program of a partitioned `module` as CUDA C++ against the
/// runtime's CUDA backend (`weft/runtime/cuda/Cuda.h`) into `outDir`:
/// `program.cu`, `weights/*.npy` and a `CMakeLists.txt` that builds it for
/// sm_80 and sm_90 with find_package(WeftRuntime). Parameters stored as
/// external data are read from `externalDir` (the ONNX model's directory).
/// Errors are diagnostics at the op.
mlir::LogicalResult emitCudaProgram(mlir::ModuleOp module,
                                    llvm::StringRef outDir,
                                    llvm::StringRef origin,
                                    llvm::StringRef externalDir,
                                    CudaEmitStats &stats);

/// Writes the training program of a module that holds a training step, its
/// gradient reduction and its optimizer step (as emitCpuTrainingProgram
/// takes it), prepared for the CUDA emitter, as `program.cu` over
/// `weft/runtime/cuda/Cuda.h`'s `trainingProgramMain`: the three functions
/// on the GPU, the CPU training programs' driver around them.
mlir::LogicalResult
emitCudaTrainingProgram(mlir::ModuleOp module, llvm::StringRef outDir,
                        llvm::StringRef origin, llvm::StringRef externalDir,
                        const TrainingProgramDefaults &d, CudaEmitStats &stats);

} // namespace weft

#endif // WEFT_CODEGEN_CUDAEMITTER_H

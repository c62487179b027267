//===- CpuEmitter.h - Partitioned programs as C++ for the CPU ---*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_CODEGEN_CPUEMITTER_H
#define WEFT_CODEGEN_CPUEMITTER_H

#include "weft/runtime/Training.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

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

/// The run a training program was compiled for: what the optimizer step's
/// scalar arguments need (weight decay, betas), and the defaults of its
/// command line.
struct TrainingProgramDefaults {
  int64_t steps = 1, gradAccum = 1;
  /// The learning rate of each step (its `steps`: the run's).
  rt::LrSchedule schedule;
  double weightDecay = 0, beta1 = 0.9, beta2 = 0.999;
  /// Loss scaling's rule, for a step that takes the scale
  /// (-weft-differentiate=scale-loss=true).
  std::optional<rt::LossScale> lossScale;
  /// What the labels are (next tokens, or masked language modelling's).
  rt::Objective objective;
  /// The model output's classes per position and its token embedding's
  /// rows (0: unknown), against which the program checks its token files.
  int64_t classes = 0, embeddingRows = 0;
};

/// Writes the training program of a module that holds a training step
/// (-weft-differentiate, partitioned or not; its gradient reduction) and its
/// optimizer step (-weft-build-optimizer), layers inlined, into `outDir` as
/// `emitCpuProgram` does: `program.cpp` runs the three functions on every
/// rank over `weft/runtime/Training.h`'s `trainingProgramMain`. Each rank
/// holds its block of every trained parameter (the optimizer step's layout);
/// a step that reads a parameter in any other layout is refused at the
/// parameter.
mlir::LogicalResult emitCpuTrainingProgram(mlir::ModuleOp module,
                                           llvm::StringRef outDir,
                                           llvm::StringRef origin,
                                           llvm::StringRef externalDir,
                                           const TrainingProgramDefaults &d);

} // namespace weft

#endif // WEFT_CODEGEN_CPUEMITTER_H

//===- PipelineProgram.h - A pipelined module as the runtime runs it -*- C++
//-*-===//
//
// Part of the Weft project.
//
// The runtime's description of a module cut into pipeline stages
// (weft/runtime/Pipeline.h): how the stages' forward, backward and
// weight-gradient functions connect, and every pipeline rank's steps, read
// once from the IR for `weft run` and `weft train` (which interpret the
// functions) and for the programs `weft compile` writes (which compile them).
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_CODEGEN_PIPELINEPROGRAM_H
#define WEFT_CODEGEN_PIPELINEPROGRAM_H

#include "weft/Dialect/Pipeline.h"
#include "weft/runtime/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace weft::codegen {

/// The layout (mesh axes per dimension) of a partitioned function's
/// argument or result from its `weft.local_sharding` (replicated when null).
rt::Layout layoutOf(mlir::Attribute localSharding, int64_t rank);
/// The layouts of all of `func`'s arguments and results.
void layoutsOf(mlir::func::FuncOp func, std::vector<rt::Layout> &args,
               std::vector<rt::Layout> &results);

/// The runtime's description of a pipelined module: everything but the
/// stage functions, which the caller provides (interpreted or compiled).
llvm::Expected<rt::PipelineProgram> pipelineProgram(mlir::ModuleOp module,
                                                    const PipelineInfo &info);

} // namespace weft::codegen

#endif // WEFT_CODEGEN_PIPELINEPROGRAM_H

//===- Passes.h - Weft's passes ---------------------------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PASSES_PASSES_H
#define WEFT_PASSES_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace weft {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// -weft-repeat-kv-heads on one function: every weft.attention and
/// weft.attention_grad with fewer KV heads than `ways` (a multiple of them)
/// reads them repeated to `ways`.
void repeatKeyValueHeads(mlir::func::FuncOp func, int64_t ways);

} // namespace weft

#endif // WEFT_PASSES_PASSES_H

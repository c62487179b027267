//===- Passes.h - Weft's passes ---------------------------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PASSES_PASSES_H
#define WEFT_PASSES_PASSES_H

#include "mlir/Pass/Pass.h"

namespace weft {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace weft

#endif // WEFT_PASSES_PASSES_H

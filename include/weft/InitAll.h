//===- InitAll.h - Register Weft's dialects and passes ----------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// The entry points an embedding compiler calls before it parses or runs
// anything of Weft's.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_INITALL_H
#define WEFT_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace weft {

/// Adds the weft dialect and the upstream dialects weft programs use (func,
/// arith, tensor) to `registry`.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Registers Weft's passes, and the upstream passes used in Weft pipelines
/// (canonicalize, cse, symbol-dce, inline), with the global pass registry.
void registerAllPasses();

} // namespace weft

#endif // WEFT_INITALL_H

//===- WeftDialect.h - The weft dialect -------------------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// The weft dialect, its enums and its attributes.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_WEFTDIALECT_H
#define WEFT_DIALECT_WEFTDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"

#include "dialects/weft/WeftDialect.h.inc"
#include "dialects/weft/WeftEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/weft/WeftAttrs.h.inc"

#endif // WEFT_DIALECT_WEFTDIALECT_H

//===- InitAll.cpp - Register Weft's dialects and passes ------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/InitAll.h"
#include "weft/Dialect/WeftDialect.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

void weft::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<WeftDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect>();
}

void weft::registerAllPasses() {
  registerWeftPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerInlinerPass();
}

//===- InitAll.cpp - Register Weft's dialects and passes ------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/InitAll.h"
#include "weft/Dialect/WeftDialect.h"
#include "weft/Passes/Passes.h"
#include "weft/Pipelines/Pipelines.h"

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
  registerWeftPipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerInlinerPass();
}

#if defined(__SANITIZE_ADDRESS__)
/// ASan builds: Debian's libMLIR is not instrumented, but the LLVM allocator
/// templates inlined into Weft's code are, and they poison the unused end of
/// a BumpPtrAllocator slab that libMLIR then allocates from without
/// unpoisoning: a false "use-after-poison" on storage the context uniques
/// (seen with #weft.sharding). Manual poisoning is turned off; every other
/// check stays.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}
#endif

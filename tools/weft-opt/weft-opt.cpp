//===- weft-opt.cpp - Run Weft pass pipelines on MLIR files ---------------===//
//
// Part of the Weft project.
//
// The mlir-opt of Weft: parses a module, runs the passes named on the command
// line, prints the result. Diagnostics carry file:line:col; errors exit 1.
//
//===----------------------------------------------------------------------===//

#include "weft/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  weft::registerAllDialects(registry);
  weft::registerAllPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Weft pass driver: weft dialect, Weft and upstream passes\n",
      registry));
}
